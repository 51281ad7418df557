import CallingProtocol
import XCTest

@testable import CallingClient

final class CallingErrorTests: XCTestCase {
    func test_terminal_closes_are_not_retryable() {
        XCTAssertFalse(CallingError.replaced.isRetryable)
        XCTAssertFalse(CallingError.tokenExpired.isRetryable)
        XCTAssertTrue(CallingError(.closed(code: CloseCode.goingAway.rawValue, reason: "")).isRetryable)
        XCTAssertTrue(CallingError(.closed(code: nil, reason: "dropped")).isRetryable)
    }

    func test_auth_refusals_are_not_retryable_but_capacity_is() {
        XCTAssertFalse(CallingError(.connectFailed(status: 401, code: "token_expired", message: "")).isRetryable)
        XCTAssertTrue(CallingError(.connectFailed(status: 503, code: "at_capacity", message: "")).isRetryable)
        XCTAssertTrue(CallingError(.network(host: "h", port: 1, reason: "unreachable")).isRetryable)
    }
}

final class CallingErrorTextTests: XCTestCase {
    func test_errors_read_as_sentences_with_the_servers_code() {
        let refused = CallingError.socketFailed(status: 403, message: "HS: ws upgrade unauthorized", host: "h", port: 1,
                                                code: "token_wrong_scope")
        XCTAssertEqual(refused.kind, .connectFailed(status: 403, code: "token_wrong_scope",
                                                    message: "the token's scope does not allow this endpoint"))
        XCTAssertEqual(refused.code, "token_wrong_scope")
        XCTAssertEqual((refused as any Error).localizedDescription,
                       "the server refused the connection: HTTP 403 token_wrong_scope: the token's scope does not allow this endpoint")
        XCTAssertFalse(refused.localizedDescription.contains("HS:"), "not the lws text")

        let unreachable = CallingError.socketFailed(status: nil, message: "connection refused", host: "10.0.0.1", port: 8080)
        XCTAssertEqual(unreachable.kind, .network(host: "10.0.0.1", port: 8080, reason: "connection refused"))
        XCTAssertEqual(unreachable.localizedDescription, "cannot reach 10.0.0.1:8080: connection refused")

        let frame = CallingError(.server(code: 440, message: "chat text is empty"))
        XCTAssertEqual(frame.code, "chat_empty")
        XCTAssertEqual(frame.localizedDescription, "the server refused a frame: 440 chat_empty: chat text is empty")
        XCTAssertEqual(CallingError.tokenExpired.localizedDescription, "the server closed the connection (4401 token expired)")
    }
}
