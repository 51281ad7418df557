import CallingProtocol
import XCTest

/// What `PresenceFrameDecoder` accepts from a presence client, and which error code each bad frame
/// gets. The room protocol's decoder is not involved: presence types are unknown on `/v1/ws`.
final class PresenceMessageTests: XCTestCase {
    private func decode(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> PresenceMessage? {
        do {
            return try PresenceFrameDecoder.decode(Array(text.utf8))
        } catch {
            XCTFail("expected \(text) to decode, got \(error.code) \(error.message)", file: file, line: line)
            return nil
        }
    }

    private func refusal(_ bytes: [UInt8]) -> FrameError? {
        do {
            _ = try PresenceFrameDecoder.decode(bytes)
            return nil
        } catch {
            return error
        }
    }

    private func refusal(_ text: String) -> FrameError? { refusal(Array(text.utf8)) }

    // MARK: - valid frames

    func test_status_carries_status_note_and_queues() {
        XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"away","note":"lunch"}}"#),
                       .setStatus(.away, note: "lunch", queues: nil))
        XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"available","note":null,"queues":["sales","support"]}}"#),
                       .setStatus(.available, note: nil, queues: ["sales", "support"]))
        XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"busy","queues":[]}}"#),
                       .setStatus(.busy, note: nil, queues: []), "an empty list leaves every queue")
        XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"offline","queues":["a","a"]}}"#),
                       .setStatus(.offline, note: nil, queues: ["a"]), "duplicate queue names collapse")
    }

    func test_every_status_value_decodes() {
        for status in PresenceStatus.allCases {
            XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"\#(status.rawValue)"}}"#),
                           .setStatus(status, note: nil, queues: nil))
        }
    }

    func test_note_of_exactly_256_bytes_is_accepted() {
        let note = String(repeating: "é", count: 128)  // 2 bytes each
        XCTAssertEqual(decode(#"{"type":"status","payload":{"status":"away","note":"\#(note)"}}"#),
                       .setStatus(.away, note: note, queues: nil))
    }

    func test_request_names_an_agent_or_a_queue_with_optional_metadata() {
        XCTAssertEqual(decode(#"{"type":"request","payload":{"agent_id":"ann"}}"#), .request(.agent("ann"), metadata: nil))
        XCTAssertEqual(decode(#"{"type":"request","payload":{"queue":"sales","metadata":{"topic":"refund","n":2}}}"#),
                       .request(.queue("sales"), metadata: ["topic": "refund", "n": 2]))
        XCTAssertEqual(decode(#"{"type":"request","payload":{"agent_id":"ann","queue":null,"metadata":null}}"#),
                       .request(.agent("ann"), metadata: nil), "null is the same as absent")
    }

    func test_accept_decline_cancel_carry_the_request_id() {
        XCTAssertEqual(decode(#"{"type":"accept","payload":{"request_id":"req_1"}}"#), .accept("req_1"))
        XCTAssertEqual(decode(#"{"type":"decline","payload":{"request_id":"req_2","reason":"ignored"}}"#), .decline("req_2"))
        XCTAssertEqual(decode(#"{"type":"cancel","payload":{"request_id":"req_3"}}"#), .cancel("req_3"))
        XCTAssertEqual(PresenceMessage.accept("req_1").requestID, "req_1")
        XCTAssertNil(PresenceMessage.ping(payload: nil).requestID)
    }

    func test_ping_keeps_its_payload_and_from_is_ignored() {
        XCTAssertEqual(decode(#"{"type":"ping","from":"mallory","payload":{"n":1}}"#), .ping(payload: ["n": 1]))
        XCTAssertEqual(decode(#"{"type":"ping"}"#), .ping(payload: nil))
        XCTAssertEqual(decode(#"{"type":"ping","payload":7}"#), .ping(payload: 7))
    }

    // MARK: - refused frames

    func test_each_bad_frame_gets_its_code_and_echoes_the_type_when_readable() {
        let cases: [(String, String, ErrorCode, String?)] = [
            ("not JSON", "{nope", .badJSON, nil),
            ("not an object", "[1]", .badFrame, nil),
            ("no type", #"{"payload":{}}"#, .badFrame, nil),
            ("type not a string", #"{"type":3}"#, .badFrame, nil),
            ("room frame", #"{"type":"offer","to":"x","payload":{"sdp":"v=0"}}"#, .unknownType, "offer"),
            ("server-only type", #"{"type":"accepted"}"#, .unknownType, "accepted"),
            ("server-only connected", #"{"type":"connected"}"#, .unknownType, "connected"),
            ("unknown type", #"{"type":"teleport"}"#, .unknownType, "teleport"),
            ("addressed", #"{"type":"accept","to":"ann","payload":{"request_id":"r"}}"#, .invalidPayload, "accept"),
            ("to not a string", #"{"type":"ping","to":5}"#, .badFrame, "ping"),
            ("payload not an object", #"{"type":"status","payload":"away"}"#, .invalidPayload, "status"),
            ("status missing", #"{"type":"status","payload":{}}"#, .invalidPayload, "status"),
            ("unknown status", #"{"type":"status","payload":{"status":"sleeping"}}"#, .invalidPayload, "status"),
            ("status not a string", #"{"type":"status","payload":{"status":1}}"#, .invalidPayload, "status"),
            ("note not a string", #"{"type":"status","payload":{"status":"away","note":5}}"#, .invalidPayload, "status"),
            ("queues not an array", #"{"type":"status","payload":{"status":"away","queues":"sales"}}"#, .invalidPayload, "status"),
            ("queue not a string", #"{"type":"status","payload":{"status":"away","queues":[1]}}"#, .invalidPayload, "status"),
            ("queue with a space", #"{"type":"status","payload":{"status":"away","queues":["a b"]}}"#, .invalidPayload, "status"),
            ("request without target", #"{"type":"request","payload":{}}"#, .invalidPayload, "request"),
            ("request without payload", #"{"type":"request"}"#, .invalidPayload, "request"),
            ("request with both", #"{"type":"request","payload":{"agent_id":"a","queue":"q"}}"#, .invalidPayload, "request"),
            ("empty agent", #"{"type":"request","payload":{"agent_id":""}}"#, .invalidPayload, "request"),
            ("agent not a string", #"{"type":"request","payload":{"agent_id":1}}"#, .invalidPayload, "request"),
            ("bad queue name", #"{"type":"request","payload":{"queue":"sales/eu"}}"#, .invalidPayload, "request"),
            ("metadata not an object", #"{"type":"request","payload":{"agent_id":"a","metadata":[1]}}"#, .invalidPayload,
             "request"),
            ("accept without id", #"{"type":"accept","payload":{}}"#, .invalidPayload, "accept"),
            ("decline with empty id", #"{"type":"decline","payload":{"request_id":""}}"#, .invalidPayload, "decline"),
            ("cancel with numeric id", #"{"type":"cancel","payload":{"request_id":5}}"#, .invalidPayload, "cancel"),
        ]
        for (name, text, code, type) in cases {
            let error = refusal(text)
            XCTAssertEqual(error?.code, code, name)
            XCTAssertEqual(error?.type, type, name)
            XCTAssertFalse(error?.message.isEmpty ?? true, name)
        }
    }

    func test_invalid_utf8_is_416_not_400() {
        XCTAssertEqual(refusal([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D])?.code, .invalidUTF8)
        XCTAssertEqual(refusal([0xFF, 0x7B, 0x7D])?.code, .invalidUTF8)
    }

    func test_note_longer_than_256_bytes_is_422() {
        let note = String(repeating: "x", count: 257)
        let error = refusal(#"{"type":"status","payload":{"status":"away","note":"\#(note)"}}"#)
        XCTAssertEqual(error?.code, .invalidPayload)
        XCTAssertTrue(error?.message.contains("256") ?? false)
    }

    func test_metadata_larger_than_the_limit_is_422() {
        let big = String(repeating: "x", count: 4_100)
        XCTAssertEqual(refusal(#"{"type":"request","payload":{"agent_id":"a","metadata":{"k":"\#(big)"}}}"#)?.code,
                       .invalidPayload)
    }

    func test_more_than_16_queues_is_422() {
        let names = (0...16).map { "\"q\($0)\"" }.joined(separator: ",")
        XCTAssertEqual(refusal(#"{"type":"status","payload":{"status":"away","queues":[\#(names)]}}"#)?.code, .invalidPayload)
    }

    // MARK: - queue lists from the query

    func test_queue_query_is_comma_separated() throws {
        XCTAssertEqual(try PresenceQueues.parse("sales,support"), ["sales", "support"])
        XCTAssertEqual(try PresenceQueues.parse("sales,,support,"), ["sales", "support"], "blanks are skipped")
        XCTAssertEqual(try PresenceQueues.parse(""), [])
        XCTAssertEqual(try PresenceQueues.parse("eu.sales_1-b"), ["eu.sales_1-b"])
        XCTAssertThrowsError(try PresenceQueues.parse("sales, support"), "a space is not part of a name")
        XCTAssertThrowsError(try PresenceQueues.parse(String(repeating: "q", count: 65)))
    }

    func test_only_client_frames_are_sendable() {
        let sendable = PresenceFrameType.allCases.filter(\.isClientSendable).map(\.rawValue)
        XCTAssertEqual(sendable, ["status", "request", "accept", "decline", "cancel", "ping"])
    }
}
