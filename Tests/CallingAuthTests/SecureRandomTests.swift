import CallingAuth
import XCTest

final class SecureRandomTests: XCTestCase {
    func testReturnsTheRequestedNumberOfBytes() {
        XCTAssertEqual(SecureRandom.bytes(0), [])
        XCTAssertEqual(SecureRandom.bytes(-3), [])
        XCTAssertEqual(SecureRandom.bytes(1).count, 1)
        XCTAssertEqual(SecureRandom.bytes(4096).count, 4096)
    }

    func testSuccessiveCallsDiffer() {
        XCTAssertNotEqual(SecureRandom.bytes(32), SecureRandom.bytes(32))
        XCTAssertNotEqual(SecureRandom.token(), SecureRandom.token())
    }

    func testTokenIsUnpaddedBase64URL() {
        let token = SecureRandom.token()
        XCTAssertEqual(token.count, 43, "32 bytes")
        XCTAssertEqual(SecureRandom.token(bytes: 16).count, 22)
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for _ in 0..<200 {
            XCTAssertTrue(SecureRandom.token().allSatisfy(allowed.contains))
        }
    }
}
