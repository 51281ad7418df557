import CallingProtocol
import Foundation
import XCTest

final class CodesTests: XCTestCase {
    // MARK: - Error codes

    func test_error_codes_are_unique() {
        let codes = ErrorCode.allCases.map(\.rawValue)
        XCTAssertEqual(Set(codes).count, codes.count)
    }

    func test_error_code_names_are_unique_snake_case() {
        let names = ErrorCode.allCases.map(\.name)
        XCTAssertEqual(Set(names).count, names.count)
        for name in names {
            XCTAssertFalse(name.isEmpty)
            XCTAssertTrue(name.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "_" }, "\(name) is a metrics label")
        }
    }

    func test_error_codes_follow_http_classes() {
        for code in ErrorCode.allCases {
            XCTAssertTrue((400...599).contains(code.rawValue), "\(code) = \(code.rawValue)")
            // Server-side failures are 5xx and always worth a retry.
            if code.rawValue >= 500 { XCTAssertTrue(code.isTemporary, "\(code)") }
        }
    }

    func test_shipped_error_codes_keep_their_numbers() {
        let expected: [ErrorCode: Int] = [
            .badJSON: 400, .badFrame: 401, .unknownType: 402, .forbidden: 403, .peerNotFound: 404,
            .conflict: 409, .frameTooLarge: 413, .binaryUnsupported: 415, .invalidUTF8: 416, .invalidPayload: 422,
            .rateLimited: 429, .chatEmpty: 440, .chatTooLong: 441, .chatMetaInvalid: 442, .chatTargetNotFound: 443,
            .chatForbidden: 444, .chatReactionInvalid: 445, .peerReconnecting: 480,
            .internalError: 500, .unavailable: 503, .rpcPayloadTooLarge: 460,
        ]
        XCTAssertEqual(Set(ErrorCode.allCases), Set(expected.keys), "a new code needs a row here and in docs/protocol.md")
        for (code, number) in expected {
            XCTAssertEqual(code.rawValue, number, "\(code)")
            XCTAssertEqual(ErrorCode(rawValue: number), code)
        }
    }

    /// docs/protocol.md, "Error codes": one row per code, in declaration order, with its name and kind.
    func test_the_protocol_docs_list_every_error_code_with_its_name_and_kind() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/protocol.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        let section = try XCTUnwrap(text.components(separatedBy: "\n## Error codes\n").dropFirst().first?
            .components(separatedBy: "\n## ").first)
        let rows = section.split(separator: "\n").filter { $0.hasPrefix("| 4") || $0.hasPrefix("| 5") }.map { row in
            row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }.prefix(3).joined(separator: " ")
        }
        XCTAssertEqual(rows, ErrorCode.allCases.map { "\($0.rawValue) `\($0.name)` \($0.isTemporary ? "temporary" : "permanent")" })
    }

    func test_only_transient_failures_are_worth_retrying() {
        let temporary = Set(ErrorCode.allCases.filter(\.isTemporary))
        XCTAssertEqual(temporary, [.rateLimited, .internalError, .unavailable, .peerNotFound, .peerReconnecting])
        XCTAssertFalse(ErrorCode.badJSON.isTemporary, "resending a malformed frame cannot succeed")
        XCTAssertFalse(ErrorCode.chatTooLong.isTemporary)
    }

    func test_error_code_description_is_its_name() {
        XCTAssertEqual(ErrorCode.chatMetaInvalid.description, "chat_meta_invalid")
        XCTAssertEqual("\(ErrorCode.invalidUTF8)", "invalid_utf8")
    }

    // MARK: - Close codes

    func test_close_codes_are_unique() {
        let codes = CloseCode.allCases.map(\.rawValue)
        XCTAssertEqual(Set(codes).count, codes.count)
    }

    func test_application_close_codes_live_in_4000_to_4999() {
        for code in CloseCode.allCases where code.rawValue >= 3000 {
            XCTAssertTrue((4000...4999).contains(code.rawValue), "\(code) = \(code.rawValue)")
        }
    }

    func test_4000_to_4399_allow_reconnect() {
        let reconnect = CloseCode.allCases.filter { (4000...4399).contains($0.rawValue) }
        XCTAssertEqual(Set(reconnect), [.slowConsumer, .flood, .idleTimeout])
        for code in reconnect { XCTAssertFalse(code.isTerminal, "\(code)") }
    }

    func test_4400_to_4999_are_terminal() {
        let terminal = CloseCode.allCases.filter { (4400...4999).contains($0.rawValue) }
        XCTAssertEqual(Set(terminal), [.replaced, .tokenExpired, .consultationEnded, .kicked, .roomClosed, .roomFull])
        for code in terminal { XCTAssertTrue(code.isTerminal, "\(code)") }
    }

    func test_a_replaced_connection_must_not_reconnect_on_its_own() {
        XCTAssertEqual(CloseCode.replaced.rawValue, 4400)
        XCTAssertTrue(CloseCode.replaced.isTerminal)
    }

    func test_standard_close_codes_are_not_terminal() {
        XCTAssertEqual(CloseCode.normal.rawValue, 1000)
        XCTAssertEqual(CloseCode.goingAway.rawValue, 1001)
        XCTAssertEqual(CloseCode.internalError.rawValue, 1011)
        for code in [CloseCode.normal, .goingAway, .internalError] { XCTAssertFalse(code.isTerminal, "\(code)") }
    }

    func test_close_reasons_are_unique_and_fit_a_close_frame() {
        let reasons = CloseCode.allCases.map(\.reason)
        XCTAssertEqual(Set(reasons).count, reasons.count)
        for reason in reasons {
            XCTAssertFalse(reason.isEmpty)
            // RFC 6455 §5.5: control frame payload ≤ 125 bytes, 2 of them the code.
            XCTAssertLessThanOrEqual(reason.utf8.count, 123, reason)
        }
    }

    // MARK: - A client's Close (RFC 6455 §5.5.1, §7.4)

    private func refusal(_ bytes: [UInt8]) -> CloseCode? {
        bytes.withUnsafeBytes { CloseCode.refusal(ofPeerClose: $0) }
    }

    private func close(_ code: UInt16, _ reason: [UInt8] = []) -> [UInt8] { [UInt8(code >> 8), UInt8(code & 0xFF)] + reason }

    func test_close_codes_allowed_on_the_wire() {
        for code: UInt16 in [1000, 1001, 1002, 1003, 1007, 1011, 1012, 1014, 3000, 4000, 4999] {
            XCTAssertTrue(CloseCode.isAllowedOnWire(code), "\(code)")
            XCTAssertNil(refusal(close(code, Array("ok é".utf8))), "\(code)")
        }
        for code: UInt16 in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
            XCTAssertFalse(CloseCode.isAllowedOnWire(code), "\(code)")
            XCTAssertEqual(refusal(close(code)), .protocolError, "\(code)")
        }
    }

    func test_close_payload_shape_and_reason() {
        XCTAssertNil(refusal([]))
        XCTAssertEqual(refusal([0x03]), .protocolError)
        XCTAssertEqual(refusal(close(1000, [0xFF, 0xFE])), .invalidPayload)
        XCTAssertEqual(refusal(close(1000, [0xED, 0xA0, 0x80])), .invalidPayload)  // a surrogate
        XCTAssertEqual(refusal(close(5000, [0xFF])), .protocolError)  // the code is judged first
        XCTAssertEqual(CloseCode.protocolError.rawValue, 1002)
        XCTAssertEqual(CloseCode.invalidPayload.rawValue, 1007)
    }
}
