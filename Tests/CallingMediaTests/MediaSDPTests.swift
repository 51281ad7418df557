@testable import CallingMedia
import XCTest

final class MediaSDPTests: XCTestCase {
    func testPlaceholder() {}
}
