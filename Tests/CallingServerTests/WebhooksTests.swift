import XCTest

@testable import CallingServer

final class WebhookEventTypeTests: XCTestCase {
    func test_every_event_type_has_its_own_bit() {
        let bits = WebhookEventType.allCases.map(\.bit)
        XCTAssertEqual(Set(bits).count, bits.count)
        XCTAssertTrue(bits.allSatisfy { $0.nonzeroBitCount == 1 })
    }
}
