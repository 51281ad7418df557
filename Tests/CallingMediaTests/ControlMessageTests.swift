@testable import CallingMedia
import Foundation
import XCTest

/// The `control` data channel of an HTTP session (docs/protocol.md, "The control channel"): what a
/// caller sends is understood, what this side sends is what the caller expects, and anything
/// malformed is not acted on.
final class ControlMessageTests: XCTestCase {
    func test_every_control_channel_message_parses() {
        let cases: [(String, ControlMessage)] = [
            (#"{"type":"status","state":"connected"}"#, .status("connected")),
            (#"{"type":"status","state":"ended"}"#, .status("ended")),
            (#"{"type":"status","state":"replaced"}"#, .status("replaced")),
            (#"{"type":"ping","ts":1712345678901}"#, .ping(ts: 1_712_345_678_901)),
            (#"{"type":"pong","ts":42}"#, .pong(ts: 42)),
            (#"{"type":"mute","muted":true}"#, .mute(true)),
            (#"{"type":"mute","muted":false}"#, .mute(false)),
            (#"{"type":"dtmf","digit":"5"}"#, .dtmf("5")),
            (#"{"type":"hangup"}"#, .hangup),
            // Key order, whitespace and extra fields do not matter.
            (#" { "ts" : 7 , "type" : "ping", "extra": [1, 2] } "#, .ping(ts: 7)),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(ControlMessage(text: text), expected, text)
        }
    }

    func test_a_ping_without_a_timestamp_is_still_answered() {
        XCTAssertEqual(ControlMessage(text: #"{"type":"ping"}"#), .ping(ts: 0))
    }

    func test_invalid_json_is_not_a_message() {
        for text in ["", "ping", #"{"type":"ping""#, #"{"type":"ping",}"#, "[]", #""ping""#, "null", "{}",
                     #"{"type":5}"#, #"{"type":null}"#, #"[{"type":"hangup"}]"#] {
            XCTAssertNil(ControlMessage(text: text), text)
        }
    }

    func test_missing_or_mistyped_fields_are_not_a_message() {
        for text in [#"{"type":"status"}"#, #"{"type":"status","state":1}"#,
                     #"{"type":"mute"}"#, #"{"type":"mute","muted":"yes"}"#, #"{"type":"mute","muted":1}"#,
                     #"{"type":"dtmf"}"#, #"{"type":"dtmf","digit":5}"#] {
            XCTAssertNil(ControlMessage(text: text), text)
        }
    }

    func test_dtmf_accepts_exactly_one_keypad_key() {
        for digit in ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#", "A", "B", "C", "D"] {
            XCTAssertEqual(ControlMessage(text: #"{"type":"dtmf","digit":"\#(digit)"}"#), .dtmf(digit), digit)
        }
        for digit in ["", "E", "a", "d", "55", "1#", " ", "5 ", "+", "é", "\\n"] {
            XCTAssertNil(ControlMessage(text: #"{"type":"dtmf","digit":"\#(digit)"}"#), "digit \(digit)")
        }
    }

    func test_an_unknown_type_is_kept_to_be_ignored() {
        XCTAssertEqual(ControlMessage(text: #"{"type":"volume","level":3}"#), .unknown("volume"))
        XCTAssertEqual(ControlMessage(text: #"{"type":""}"#), .unknown(""))
    }

    func test_text_round_trips() {
        let messages: [ControlMessage] = [
            .status("connected"), .status("ended"), .status("with \"quotes\" and ü"), .ping(ts: 0), .ping(ts: Int64.max),
            .pong(ts: -1), .mute(true), .mute(false), .dtmf("#"), .dtmf("D"), .hangup, .unknown("later"),
        ]
        for message in messages {
            XCTAssertEqual(ControlMessage(text: message.text), message, message.text)
        }
    }

    /// The answering side's messages as the caller's JSON parser sees them (docs/protocol.md,
    /// "The control channel").
    func test_text_is_the_wire_format() throws {
        let cases: [(ControlMessage, NSDictionary)] = [
            (.status("connected"), ["type": "status", "state": "connected"]),
            (.pong(ts: 1_712_345_678_901), ["type": "pong", "ts": 1_712_345_678_901]),
            (.ping(ts: 5), ["type": "ping", "ts": 5]),
            (.mute(true), ["type": "mute", "muted": true]),
            (.dtmf("*"), ["type": "dtmf", "digit": "*"]),
            (.hangup, ["type": "hangup"]),
        ]
        for (message, expected) in cases {
            let parsed = try JSONSerialization.jsonObject(with: Data(message.text.utf8)) as? NSDictionary
            XCTAssertEqual(parsed, expected, message.text)
        }
    }
}
