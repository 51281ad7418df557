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
        XCTAssertFalse(CallingError(.connectFailed(status: 401, message: "")).isRetryable)
        XCTAssertTrue(CallingError(.connectFailed(status: 503, message: "")).isRetryable)
        XCTAssertTrue(CallingError(.connectFailed(status: nil, message: "unreachable")).isRetryable)
    }
}
