@testable import CallingProtocol
import Foundation
import XCTest

/// The scan is the decoder's fast path; `JSONParser` and the tree decoder are the reference it
/// must agree with on every input: the same documents accepted, the same message or the same
/// error (code, message, echoed type).
final class FrameScannerTests: XCTestCase {
    private func scanAccepts(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer { FrameScanner.scan($0) } != nil
    }

    private func parserAccepts(_ bytes: [UInt8]) -> Bool {
        (try? JSONParser.parse(bytes))?.objectValue != nil
    }

    /// The decoder's answer next to the tree path's (`decode(JSONValue)` after `JSONParser`).
    private func assertAgrees(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        let fast: Result<ClientMessage, FrameError>
        do { fast = .success(try ClientFrameDecoder.decode(bytes)) } catch { fast = .failure(error) }
        let reference: Result<ClientMessage, FrameError>
        do {
            reference = .success(try ClientFrameDecoder.decode(FrameEnvelope.parse(bytes)))
        } catch {
            reference = .failure(error)
        }
        let text = String(decoding: bytes, as: UTF8.self)
        switch (fast, reference) {
        case (.success(let a), .success(let b)):
            XCTAssertEqual(a, b, text, file: file, line: line)
        case (.failure(let a), .failure(let b)):
            XCTAssertEqual(a, b, text, file: file, line: line)
        default:
            XCTFail("decoder \(fast) but the tree path \(reference) for \(text)", file: file, line: line)
        }
        XCTAssertEqual(scanAccepts(bytes), parserAccepts(bytes), "scan vs parser: \(text)", file: file, line: line)
        // The frame lent as a buffer (as the transport lends it) reads as the array does.
        let array = Result { () throws(FrameError) in try ClientFrameDecoder.decodeFrame(bytes) }
        let lent = bytes.withUnsafeBufferPointer { buffer in Result { () throws(FrameError) in try ClientFrameDecoder.decodeFrame(lent: buffer) } }
        XCTAssertEqual(lent, array, "lent vs array: \(text)", file: file, line: line)
    }

    private static let seeds = [
        #"{"type":"candidate","to":"b0","payload":{"candidate":"candidate:0000000001 1 udp 2122260223 192.0.2.1 54400 typ host","sdpMid":"0","sdpMLineIndex":0}}"#,
        #"{"type":"offer","to":"bob","payload":{"type":"offer","sdp":"v=0\r\no=- 4611 2 IN IP4 127.0.0.1\r\n"}}"#,
        #"{"type":"answer","to":"al\u0069ce","payload":{"sdp":"\u00e9","type":"answer"}}"#,
        #"{ "type" : "data" , "payload" : [1, -2.5e3, {"k":[true,false,null]}, "é\"\\"] , "x" : {} }"#,
        #"{"type":"chat","payload":{"client_id":"c1","text":"hé","meta":{"b":1,"a":[]}}}"#,
        #"{"type":"chat","payload":{"client_id":"c\u00312","text":"a\nb","meta":null}}"#,
        #"{"type":"typing","payload":{"typing":true}}"#,
        #"{"type":"stats","payload":{"rtt_ms":12.5,"packet_loss":0}}"#,
        #"{"type":"ping","payload":{"n":1}}"#,
        #"{"type":"read","payload":{"seq":3}}"#,
        // Every key the scan tells by its spelling (`literalKey`), out of order and repeated, so
        // each single-byte change above makes a near miss that the general key scan must take.
        #"{"payload":{"sdpMLineIndex":1,"sdpMid":null,"usernameFragment":"u","candidate":"candidate:1 1 udp 1 192.0.2.2 9 typ host"},"to":"peer-b","type":"candidate","to":"peer-c"}"#,
        #"{"to":null,"type":"chat","payload":{"meta":{"k":1},"type":"x","text":"hi","sdp":"s","client_id":"m-1"}}"#,
    ]

    func test_decoder_agrees_with_the_tree_path_on_valid_frames_and_edge_cases() {
        var cases = Self.seeds
        cases += [
            #"{"type":"offer","to":"b","payload":{"sdp":""}}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":"","sdp":"x"}}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":"x","sdp":""}}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":"x"},"payload":{"other":1}}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":"x"},"payload":null}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":"\u0000"}}"#,
            #"{"type":"offer","to":"b","payload":{"sdp":7}}"#,
            #"{"type":"offer","payload":{"sdp":"x"}}"#,
            #"{"type":"offer","to":"","payload":{"sdp":"x"}}"#,
            #"{"type":"offer","to":7,"payload":{"sdp":"x"}}"#,
            #"{"type":"offer","to":null,"payload":{"sdp":"x"}}"#,
            #"{"type":"offer","to":"b","payload":["sdp"]}"#,
            #"{"typ\u0065":"offer","t\u006f":"b","p\u0061yload":{"sd\u0070":"x"}}"#,
            #"{"type":"\u006ffer","to":"b","payload":{"sdp":"x"}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":""}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":1}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMid":1}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMid":null,"sdpMLineIndex":null}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":1.0}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":1e0}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":1.5}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":123456789012345678901}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":-0}}"#,
            #"{"type":"candidate","to":"b","payload":{"candidate":"c","sdpMLineIndex":"0"}}"#,
            #"{"type":"candidate","to":"b"}"#,
            #"{"type":"data"}"#,
            #"{"type":"data","payload":1e308}"#,
            #"{"type":"data","payload":1e309}"#,
            #"{"type":"data","payload":0.1e309}"#,
            #"{"type":"data","payload":-1797693134862315807e290}"#,
            #"{"type":"data","payload":1797693134862315807e290}"#,
            #"{"type":"data","payload":1e-400}"#,
            #"{"type":"data","payload":99999999999999999999999999}"#,
            #"{"type":"data","payload":01}"#,
            #"{"type":"data","payload":1.}"#,
            #"{"type":"data","payload":-}"#,
            #"{"type":"data","payload":"\ud83d\ude00"}"#,
            #"{"type":"data","payload":"\ud83d"}"#,
            #"{"type":"data","payload":"\ude00"}"#,
            #"{"type":"data","payload":"\ud83d\u0041"}"#,
            #"{"type":"data","payload":"\x"}"#,
            #"{"type":"data","payload":"\u12"}"#,
            #"{"type":"data","payload":tru}"#,
            #"{"type":"data","payload":{"a":1,}}"#,
            #"{"type":"data","payload":[1,]}"#,
            #"{"type":"data","payload":{}}"#,
            #"{"type":"data","payload":[]}"#,
            #"{"type":"data"} x"#,
            #"{"type":"data"}  "#,
            #"{}"#,
            #"[]"#,
            #""type""#,
            #"{"type":1}"#,
            #"{"type":"welcome"}"#,
            #"{"type":"nope"}"#,
            #"{"type":"chat","to":"b","payload":{"client_id":"c","text":"t"}}"#,
            #"{"type":"chat","to":null,"payload":{"client_id":"c","text":"t"}}"#,
            #"{"type":"chat","to":7,"payload":{"client_id":"c","text":"t"}}"#,
            #"{"type":"chat","to":"","payload":{"client_id":"c","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t"},"payload":null}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t"},"payload":{"text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t"},"payload":{"client_id":"d","text":"u"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","client_id":"d","text":"t","text":"u"}}"#,
            #"{"type":"chat","payload":{"client_id":"","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"\u0000","text":""}}"#,
            #"{"type":"chat","payload":{"client_id":7,"text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":null,"text":"t"}}"#,
            #"{"type":"chat","payload":{"text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"c"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":null}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":["t"]}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t","meta":null}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t","meta":"m"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t","meta":[1,{"a":null}]}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t","meta":{"x":1},"meta":null}}"#,
            #"{"type":"chat","payload":{"cl\u0069ent_id":"c","t\u0065xt":"t","m\u0065ta":{}}}"#,
            #"{"type":"ch\u0061t","payload":{"client_id":"c","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"\ud83d\ude00","text":"\u00e9\"\\\/\b\f\r\t"}}"#,
            #"{"type":"chat","payload":{"client_id":"c","text":"t","x":{"client_id":1}}}"#,
            #"{"type":"chat","payload":{"client_id":"\#(String(repeating: "x", count: 128))","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"\#(String(repeating: "x", count: 129))","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"\#(String(repeating: "é", count: 64))","text":"t"}}"#,
            #"{"type":"chat","payload":{"client_id":"\#(String(repeating: "é", count: 65))","text":"t"}}"#,
            #"{"type":"chat","payload":"text"}"#,
            #"{"type":"chat","payload":[]}"#,
            #"{"type":"chat"}"#,
            #"{"type":"chat","payload":{}}"#,
            #"{"type":"ping","to":null}"#,
            "",
            " ",
        ]
        // Nesting at the limit and one past it, inside the payload and elsewhere.
        for depth in [62, 63, 64] {
            let nested = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            cases.append(#"{"type":"data","payload":"# + nested + "}")
            cases.append(#"{"type":"data","x":"# + nested + "}")
            let objects = String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)
            cases.append(#"{"type":"candidate","to":"b","payload":{"candidate":"c","n":"# + objects + "}}")
        }
        for text in cases { assertAgrees(Array(text.utf8)) }
    }

    func test_bytes_that_are_not_utf8_are_refused_like_the_parser_does() {
        let prefix = Array(#"{"type":"data","payload":""#.utf8)
        let suffix = Array(#""}"#.utf8)
        let sequences: [[UInt8]] = [
            [0xC3, 0xA9], [0xC3], [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xE0, 0xA0, 0x80], [0xED, 0xA0, 0x80],
            [0xED, 0x9F, 0xBF], [0xEF, 0xBF, 0xBF], [0xF0, 0x8F, 0xBF, 0xBF], [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF],
            [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xFF], [0x80], [0xE2, 0x82], [0xE2, 0x28, 0xA1],
        ]
        for sequence in sequences {
            let bytes = prefix + sequence + suffix
            assertAgrees(bytes)
            XCTAssertEqual(bytes.withUnsafeBufferPointer(UTF8Check.isValid), String(validating: bytes, as: UTF8.self) != nil,
                           "\(sequence)")
        }
        // The scan notes a byte above 0x7F as it skips a string, wherever in the string it is:
        // after an escape, after a valid sequence, in a long run, in a later string.
        for sequence in sequences {
            for (head, tail) in [(#"\n"#, ""), ("é", ""), (String(repeating: "a", count: 40), "b"), (#"","x":""#, "")] {
                assertAgrees(prefix + Array(head.utf8) + sequence + Array(tail.utf8) + suffix)
            }
        }
        // Outside a string, and in a key.
        assertAgrees(Array(#"{"type":"data","payload":1}"#.utf8) + [0xC3, 0xA9])
        assertAgrees(Array(#"{"type":"data","payload":{""#.utf8) + [0xC3] + Array(#"":1}}"#.utf8))
    }

    /// Every single-byte change, deletion and truncation of the seeds: where the fast path could
    /// disagree with the parser, it is at some such boundary.
    func test_decoder_agrees_with_the_tree_path_on_every_mutation_of_the_seeds() {
        let replacements: [UInt8] = [0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x5D, 0x3A, 0x2C, 0x20, 0x30, 0x2D, 0x2E, 0x65, 0x6E, 0x01, 0xC3, 0x80]
        for seed in Self.seeds {
            let bytes = Array(seed.utf8)
            for offset in bytes.indices {
                var deleted = bytes
                deleted.remove(at: offset)
                assertAgrees(deleted)
                assertAgrees(Array(bytes[..<offset]))
                for byte in replacements where byte != bytes[offset] {
                    var changed = bytes
                    changed[offset] = byte
                    assertAgrees(changed)
                }
            }
        }
    }

    /// `PlainRun` (shared by the scan, the parser and the writer) against the obvious loop: both
    /// the scan and the parser rest on it, so the mutation test above cannot catch its faults.
    func test_plain_run_finds_the_first_special_byte_like_a_byte_by_byte_search() {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [UInt8] = [0x41, 0x61, 0x20, 0x7E, 0x7F, 0x22, 0x5C, 0x00, 0x1F, 0x21, 0x23, 0x5B, 0x5D, 0x80, 0xC3, 0xFF]
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...40, using: &generator)
            let bytes = (0..<length).map { _ in
                Bool.random(using: &generator) ? UInt8(ascii: "x") : alphabet.randomElement(using: &generator)!
            }
            let start = length == 0 ? 0 : Int.random(in: 0...length, using: &generator)
            for ascii in [false, true] {
                let expected = bytes[start...].firstIndex {
                    $0 < 0x20 || $0 == 0x22 || $0 == 0x5C || (ascii && $0 >= 0x80)
                } ?? length
                let found = bytes.withUnsafeBufferPointer { buffer in
                    buffer.baseAddress.map { PlainRun.end(in: $0, from: start, to: length, stoppingAtNonASCII: ascii) } ?? 0
                }
                XCTAssertEqual(found, expected, "\(bytes) from \(start), stopping at non-ASCII: \(ascii)")
            }
        }
    }

    func test_a_relayed_payload_is_the_senders_bytes() throws {
        let text = #"{"type":"data","to":"bob","payload" :  { "z":1.0,"a" : [1e2, 12345678901234567890123] }  ,"from":"x"}"#
        guard case .relay(.data, let to, let payload?) = try ClientFrameDecoder.decode(Array(text.utf8)) else {
            return XCTFail("not a relay")
        }
        XCTAssertEqual(to, "bob")
        XCTAssertEqual(String(decoding: payload.bytes, as: UTF8.self), #"{ "z":1.0,"a" : [1e2, 12345678901234567890123] }"#)
        XCTAssertEqual(payload, ["a": [100, .bigInteger("12345678901234567890123")], "z": 1], "same value, however spelt")
    }
}
