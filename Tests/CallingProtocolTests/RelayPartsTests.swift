import CallingProtocol
import XCTest

/// `decodeFrame` leaves an addressed relay with a plain `to` in its frame's bytes (`ScannedRelay`),
/// and the relay path writes it from there (`RelayParts`): the same message, and the same relayed
/// bytes, as the decoded value gives.
final class RelayPartsTests: XCTestCase {
    private func frame(_ text: String) throws -> ClientFrame { try ClientFrameDecoder.decodeFrame(Array(text.utf8)) }

    func test_an_addressed_relay_with_a_plain_to_is_left_in_the_frame_and_reads_as_decode_reads_it() throws {
        let texts = [
            #"{"type":"candidate","to":"bob","payload":{"candidate":"candidate:1 1 udp 2122260223 192.0.2.1 54400 typ host","sdpMid":"0","sdpMLineIndex":0}}"#,
            #"{"payload":{"sdp":"v=0\r\n","type":"offer"},"to":"böb-ü","type":"offer"}"#,
            #"{"type":"answer","to":"b","payload":{"type":"answer","sdp":"v=0"}, "from":"ignored"}"#,
            #"{"type":"data","to":"bob"}"#,
            #"{"type":"data","to":"bob","payload":null}"#,
            #"{"type":"data","to":"bob","payload":[1, 2.50, "x\"y"]}"#,
            #"{"type":"d\u0061ta","to":"bob","payload":7}"#,
        ]
        for text in texts {
            let bytes = Array(text.utf8)
            guard case .relay(let relay) = try frame(text) else { return XCTFail("left in the frame: \(text)") }
            let decoded = try ClientFrameDecoder.decode(bytes)
            XCTAssertEqual(relay.message(in: bytes), decoded, text)
            guard case .relay(let kind, let to?, let payload) = decoded else { return XCTFail("a relay: \(text)") }
            XCTAssertEqual(relay.kind, kind)
            relay.withParts(in: bytes) { parts in
                XCTAssertEqual(parts.kind, kind)
                XCTAssertEqual(Array(parts.to), Array(to.rawValue.utf8), text)
                XCTAssertEqual(parts.toPeer, to)
                XCTAssertEqual(parts.payload.map(Array.init), payload.map { Array($0.bytes) }, text)
                XCTAssertEqual(parts.relayed(from: "alice"), RelayedFrame(kind, from: "alice", to: to, payload: payload))
            }
        }
    }

    func test_a_broadcast_an_escaped_to_and_every_other_type_are_decoded_messages() throws {
        let texts = [
            #"{"type":"data","payload":{"k":1}}"#,
            #"{"type":"data","to":null,"payload":{"k":1}}"#,
            #"{"type":"candidate","to":"b\"ob","payload":{"candidate":"c"}}"#,
            #"{"type":"offer","to":"b\u006fb","payload":{"sdp":"v=0"}}"#,
            #"{"type":"ping","payload":{"n":1}}"#,
            #"{"type":"chat","payload":{"client_id":"c-1","text":"hi"}}"#,
            #"{"type":"typing","payload":{"typing":true}}"#,
        ]
        for text in texts {
            guard case .message(let message) = try frame(text) else { return XCTFail("decoded: \(text)") }
            XCTAssertEqual(message, try ClientFrameDecoder.decode(Array(text.utf8)), text)
        }
    }

    func test_a_relay_that_breaks_a_rule_is_refused_as_decode_refuses_it() {
        let texts = [
            #"{"type":"candidate","to":"","payload":{"candidate":"c"}}"#,
            #"{"type":"candidate","to":"\#(String(repeating: "p", count: 129))","payload":{"candidate":"c"}}"#,
            #"{"type":"candidate","to":7,"payload":{"candidate":"c"}}"#,
            #"{"type":"candidate","to":"bob","payload":{"sdpMid":"0"}}"#,
            #"{"type":"offer","to":"bob","payload":{"sdp":""}}"#,
            #"{"type":"offer","payload":{"sdp":"v=0"}}"#,
        ]
        for text in texts {
            let bytes = Array(text.utf8)
            var fast: FrameError?
            var reference: FrameError?
            do { _ = try ClientFrameDecoder.decodeFrame(bytes) } catch { fast = error }
            do { _ = try ClientFrameDecoder.decode(FrameEnvelope.parse(bytes)) } catch { reference = error }
            XCTAssertNotNil(fast, text)
            XCTAssertEqual(fast, reference, text)
        }
    }

    func test_parts_lent_from_values_write_the_relayed_frames_encoding() {
        let relays = [
            RelayedFrame(.candidate, from: "alice", to: "bob", payload: ["candidate": "candidate:1 1 udp 1 192.0.2.1 9 typ host"]),
            RelayedFrame(.data, from: "a-much-longer-peer-id-than-fifteen", to: "another-long-peer-id-0123456789", payload: RawJSON(.array([1, "two"]))),
            RelayedFrame(.offer, from: "ålice", to: "bøb", payload: ["sdp": "v=0\r\n"]),
        ]
        for relayed in relays {
            RelayParts.with(relayed.kind, to: relayed.to, payload: relayed.payload) { parts in
                guard let length = parts.plainLength(plainFrom: relayed.from) else { return XCTFail("a payload: \(relayed)") }
                var bytes = [UInt8](repeating: 0, count: length)
                bytes.withUnsafeMutableBufferPointer { parts.writePlain(from: relayed.from, at: $0.baseAddress!) }
                XCTAssertEqual(bytes, relayed.frame.encoded(), "\(relayed)")
            }
        }
        RelayParts.with(.data, to: "bob", payload: nil) { XCTAssertNil($0.plainLength(plainFrom: "alice"), "no payload") }
    }
}
