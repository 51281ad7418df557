import CallingProtocol
import Foundation
import XCTest

final class ClientMessageTests: XCTestCase {
    // MARK: - Helpers

    /// One line per decoded message, the format of `Fixtures/client-valid/*.expected.txt`.
    /// A relayed or ping payload is written as the bytes the relayed frame or the pong will carry
    /// (the sender's, as sent); other payloads with the sorted-key writer, so their text is canonical.
    static func describe(_ message: ClientMessage) -> String {
        func json(_ value: JSONValue?) -> String { value.map(JSONWriter.string) ?? "-" }
        func number(_ value: Double?) -> String { value.map { "\($0)" } ?? "-" }
        switch message {
        case .relay(let kind, let to, let payload):
            return "\(kind.rawValue) to=\(to?.rawValue ?? "-") payload=\(payload.map { String(decoding: $0.bytes, as: UTF8.self) } ?? "-")"
        case .chat(let chat):
            return "chat client_id=\(json(.string(chat.clientID))) text=\(json(.string(chat.text))) meta=\(json(chat.meta))"
                + (chat.replyTo.map { " reply_to=\($0)" } ?? "")
        case .chatOperation(let operation):
            let head = "client_id=\(json(.string(operation.clientID))) target=\(operation.target)"
            switch operation.action {
            case .edit(let text, let meta): return "chat-edit \(head) text=\(json(.string(text))) meta=\(json(meta))"
            case .delete: return "chat-delete \(head)"
            case .react(let key, let remove): return "chat-react \(head) key=\(json(.string(key))) remove=\(remove)"
            }
        case .typing(let typing):
            return "typing \(typing)"
        case .read(let seq):
            return "read seq=\(seq)"
        case .stats(let sample):
            return "stats rtt_ms=\(number(sample.rttMs)) jitter_ms=\(number(sample.jitterMs))"
                + " packet_loss=\(number(sample.packetLoss)) bitrate_kbps=\(number(sample.bitrateKbps))"
        case .ping(let payload):
            return "ping payload=\(payload.map { String(decoding: $0.bytes, as: UTF8.self) } ?? "-")"
        case .leave:
            return "leave"
        }
    }

    private func decode(_ text: String, limits: FrameLimits = FrameLimits(), file: StaticString = #filePath, line: UInt = #line)
        -> ClientMessage?
    {
        do {
            return try ClientFrameDecoder.decode(Array(text.utf8), limits: limits)
        } catch {
            XCTFail("expected \(text) to decode, got \(error.code) \(error.message)", file: file, line: line)
            return nil
        }
    }

    private func refusal(_ bytes: [UInt8], limits: FrameLimits = FrameLimits()) -> FrameError? {
        do {
            _ = try ClientFrameDecoder.decode(bytes, limits: limits)
            return nil
        } catch {
            return error
        }
    }

    private func refusal(_ text: String, limits: FrameLimits = FrameLimits()) -> FrameError? {
        refusal(Array(text.utf8), limits: limits)
    }

    /// One entry of `Fixtures/client-invalid.json`. Frames that must contain bytes that are not
    /// UTF-8 cannot be JSON strings, so they are given as `frame_base64` instead of `frame`.
    private struct InvalidCase: Decodable {
        var name: String
        var frame: String?
        var frameBase64: String?
        var code: Int
        var echoedType: String?

        enum CodingKeys: String, CodingKey {
            case name, frame, code
            case frameBase64 = "frame_base64"
            case echoedType = "echoed_type"
        }

        func bytes() throws -> [UInt8] {
            if let frame { return Array(frame.utf8) }
            let encoded = try XCTUnwrap(frameBase64, "\(name): needs frame or frame_base64")
            return Array(try XCTUnwrap(Data(base64Encoded: encoded), "\(name): bad base64"))
        }
    }

    private func invalidCases() throws -> [InvalidCase] {
        let url = try Fixtures.directory().appendingPathComponent("client-invalid.json")
        return try JSONDecoder().decode([InvalidCase].self, from: Data(contentsOf: url))
    }

    // MARK: - Golden fixtures

    func test_valid_client_frames_decode_as_described_in_their_golden_files() throws {
        let frames = try Fixtures.files(in: "client-valid", suffix: ".json")
        XCTAssertGreaterThanOrEqual(frames.count, 20)
        for url in frames {
            let name = Fixtures.name(of: url, dropping: ".json")
            let expectedURL = url.deletingLastPathComponent().appendingPathComponent("\(name).expected.txt")
            let expected = String(decoding: try Fixtures.line(expectedURL), as: UTF8.self)
            let bytes = try Fixtures.bytes(url)
            do {
                let message = try ClientFrameDecoder.decode(bytes)
                XCTAssertEqual(Self.describe(message), expected, "client-valid/\(name).json")
            } catch {
                XCTFail("client-valid/\(name).json refused with \(error.code): \(error.message)")
            }
        }
    }

    func test_every_golden_description_has_a_frame() throws {
        let frames = Set(try Fixtures.files(in: "client-valid", suffix: ".json").map { Fixtures.name(of: $0, dropping: ".json") })
        let descriptions = Set(
            try Fixtures.files(in: "client-valid", suffix: ".expected.txt").map { Fixtures.name(of: $0, dropping: ".expected.txt") })
        XCTAssertEqual(frames, descriptions)
    }

    func test_invalid_client_frames_are_refused_with_their_documented_code() throws {
        let cases = try invalidCases()
        XCTAssertGreaterThanOrEqual(cases.count, 50)
        XCTAssertEqual(Set(cases.map(\.name)).count, cases.count, "case names are unique")
        for testCase in cases {
            guard let error = refusal(try testCase.bytes()) else {
                XCTFail("\(testCase.name): was accepted")
                continue
            }
            XCTAssertEqual(error.code.rawValue, testCase.code, "\(testCase.name): \(error.message)")
            XCTAssertEqual(error.type, testCase.echoedType, "\(testCase.name): echoed type")
            XCTAssertFalse(error.message.isEmpty, testCase.name)
        }
    }

    func test_invalid_fixtures_cover_every_error_class_the_decoder_can_produce() throws {
        let codes = Set(try invalidCases().map(\.code))
        let decoderCodes: [ErrorCode] = [.badJSON, .badFrame, .unknownType, .invalidUTF8, .invalidPayload]
        XCTAssertEqual(codes, Set(decoderCodes.map(\.rawValue)))
    }

    // MARK: - Envelope rules

    func test_client_supplied_from_is_ignored() {
        let spoofed = decode(#"{"type":"data","from":"mallory","to":"bob","payload":{"from":"x"}}"#)
        XCTAssertEqual(spoofed, .relay(.data, to: "bob", payload: ["from": "x"]), "only the envelope `from` is dropped")
    }

    func test_refusal_becomes_an_error_frame_echoing_the_type() throws {
        let error = try XCTUnwrap(refusal(#"{"type":"offer","payload":{"sdp":"v=0"}}"#))
        XCTAssertEqual(error.frame, Frame.error(.invalidPayload, error.message, inReplyTo: "offer"))
        XCTAssertEqual(error.frame.error?.code, 422)
    }

    func test_unreadable_frames_get_an_error_without_a_type() throws {
        let error = try XCTUnwrap(refusal("{"))
        XCTAssertEqual(error.frame.payload, nil)
        XCTAssertEqual(error.frame.error?.code, 400)
    }

    func test_unknown_type_message_is_bounded_for_hostile_input() throws {
        let error = try XCTUnwrap(refusal(#"{"type":""# + String(repeating: "x", count: 10_000) + #""}"#))
        XCTAssertEqual(error.code, .unknownType)
        XCTAssertLessThan(error.message.utf8.count, 200)
    }

    func test_decoding_a_parsed_value_gives_the_same_message() throws {
        let text = #"{"type":"candidate","to":"bob","payload":{"candidate":"c","sdpMid":"0","sdpMLineIndex":1}}"#
        let value = try JSONParser.parse(text)
        XCTAssertEqual(try ClientFrameDecoder.decode(value), decode(text))
    }

    // MARK: - Limits

    func test_ids_up_to_128_bytes_are_accepted_by_default() {
        let id = String(repeating: "x", count: 128)
        XCTAssertEqual(decode(#"{"type":"data","to":"\#(id)"}"#), .relay(.data, to: PeerID(id), payload: nil))
        XCTAssertEqual(
            decode(#"{"type":"chat","payload":{"client_id":"\#(id)","text":"t"}}"#), .chat(ChatSubmission(clientID: id, text: "t")))
    }

    func test_id_limits_are_configurable_and_count_bytes() {
        let limits = FrameLimits(maxClientIDBytes: 4, maxPeerIDBytes: 4)
        XCTAssertNotNil(decode(#"{"type":"data","to":"éé"}"#, limits: limits), "2 characters, 4 bytes")
        XCTAssertEqual(refusal(#"{"type":"data","to":"ééé"}"#, limits: limits)?.code, .badFrame)
        XCTAssertNotNil(decode(#"{"type":"chat","payload":{"client_id":"abcd","text":"t"}}"#, limits: limits))
        XCTAssertEqual(refusal(#"{"type":"chat","payload":{"client_id":"abcde","text":"t"}}"#, limits: limits)?.code, .invalidPayload)
    }

    func test_blank_chat_text_passes_decoding_so_the_hub_can_answer_with_a_chat_ack() {
        // An `error` frame would leave the sender's pending sendChat hanging until its timeout;
        // the hub answers blank text with a chat-ack carrying 440 instead.
        XCTAssertEqual(
            decode(#"{"type":"chat","payload":{"client_id":"c","text":"  "}}"#), .chat(ChatSubmission(clientID: "c", text: "  ")))
        XCTAssertEqual(
            decode(#"{"type":"chat","payload":{"client_id":"c","text":"x","meta":[1]}}"#),
            .chat(ChatSubmission(clientID: "c", text: "x", meta: [1])), "meta shape is the hub's to judge (442)")
    }

    func test_stats_bounds_are_inclusive() {
        XCTAssertEqual(
            decode(#"{"type":"stats","payload":{"rtt_ms":60000,"jitter_ms":0,"packet_loss":1,"bitrate_kbps":1000000}}"#),
            .stats(StatsSample(rttMs: 60_000, jitterMs: 0, packetLoss: 1, bitrateKbps: 1_000_000)))
    }

    func test_read_seq_written_as_an_integral_double_is_accepted() {
        XCTAssertEqual(decode(#"{"type":"read","payload":{"seq":7.0}}"#), .read(seq: 7))
    }

    func test_a_ping_keeps_its_payload_as_sent_whichever_path_decodes_it() {
        let sent = #"{ "b":1.0, "a":[2, "\u00e9"] }"#
        guard case .ping(let scanned?)? = decode(#"{"type":"ping","payload":"# + sent + "}") else {
            return XCTFail("expected a ping with a payload")
        }
        XCTAssertEqual(String(decoding: scanned.bytes, as: UTF8.self), sent)
        // An escaped type takes the parser's path: the same value, written canonically there.
        guard case .ping(let parsed?)? = decode(#"{"type":"p\u0069ng","payload":"# + sent + "}") else {
            return XCTFail("expected a ping with a payload")
        }
        XCTAssertEqual(String(decoding: parsed.bytes, as: UTF8.self), #"{"a":[2,"é"],"b":1}"#)
        XCTAssertEqual(scanned, parsed)
        XCTAssertEqual(decode(#"{"type":"ping","payload":7}"#), .ping(payload: RawJSON(7)))
    }

    func test_explicit_null_meta_and_payload_read_as_absent() {
        XCTAssertEqual(
            decode(#"{"type":"chat","payload":{"client_id":"c-2","text":"hi","meta":null}}"#),
            .chat(ChatSubmission(clientID: "c-2", text: "hi", meta: nil)))
        XCTAssertEqual(decode(#"{"type":"ping","payload":null}"#), .ping(payload: nil))
        XCTAssertEqual(decode(#"{"type":"data","to":"bob","payload":null}"#), .relay(.data, to: "bob", payload: nil))
    }

    func test_to_on_a_frame_that_cannot_be_addressed_is_refused_rather_than_dropped() {
        let frames = [
            #"{"type":"chat","to":"bob","payload":{"client_id":"c-1","text":"for bob only"}}"#,
            #"{"type":"typing","to":"bob","payload":{"typing":true}}"#,
            #"{"type":"read","to":"bob","payload":{"seq":1}}"#,
            #"{"type":"stats","to":"bob","payload":{"rtt_ms":1}}"#,
            #"{"type":"ping","to":"bob"}"#,
        ]
        for frame in frames {
            XCTAssertEqual(refusal(frame)?.code, .invalidPayload, frame)
        }
    }

    // MARK: - Messages

    func test_each_message_reports_its_frame_type() {
        let expectations: [(ClientMessage, FrameType)] = [
            (.relay(.offer, to: "b", payload: nil), .offer), (.relay(.answer, to: "b", payload: nil), .answer),
            (.relay(.candidate, to: "b", payload: nil), .candidate), (.relay(.data, to: nil, payload: nil), .data),
            (.chat(ChatSubmission(clientID: "c", text: "t")), .chat), (.typing(true), .typing), (.read(seq: 1), .read),
            (.stats(StatsSample(rttMs: 1)), .stats), (.ping(payload: nil), .ping),
        ]
        for (message, type) in expectations {
            XCTAssertEqual(message.frameType, type)
            XCTAssertTrue(message.frameType.isClientSendable)
        }
    }

    func test_stats_sample_is_stored_with_the_sdk_keys_and_units() {
        let sample = StatsSample(rttMs: 42.5, packetLoss: 0.01)
        XCTAssertEqual(sample.json, ["rtt_ms": 42.5, "packet_loss": 0.01])
        XCTAssertEqual(
            JSONWriter.string(StatsSample(rttMs: 1, jitterMs: 2, packetLoss: 0.5, bitrateKbps: 800).json),
            #"{"bitrate_kbps":800,"jitter_ms":2,"packet_loss":0.5,"rtt_ms":1}"#)
        XCTAssertEqual(StatsSample().json, [:])
    }
}
