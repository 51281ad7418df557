import CallingAuth
import XCTest

final class APIKeyTests: XCTestCase {
    func testGeneratedKeysAreRecognisableAndUnique() {
        let key = APIKey.generate()
        XCTAssertTrue(key.hasPrefix("csk_"))
        XCTAssertEqual(key.count, 4 + 43)
        XCTAssertNotEqual(key, APIKey.generate())
    }

    /// Vector: `python3 -c "import hashlib; print(hashlib.sha256(b'csk_example').hexdigest())"`.
    func testHashIsLowercaseHexSHA256() {
        XCTAssertEqual(APIKey.hash("csk_example"), "9decff8830d809a3580d1a9aee4db3da97cc07d55f6ec0c1d532b5fef2686f53")
        XCTAssertEqual(APIKey.hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    func testAStoredHashMatchesOnlyItsOwnKey() {
        let key = APIKey.generate()
        let stored = APIKey.hash(key)
        XCTAssertTrue(APIKey.matches(key, storedHash: stored))
        XCTAssertTrue(APIKey.matches(key, storedHash: stored.uppercased()))
        XCTAssertFalse(APIKey.matches(APIKey.generate(), storedHash: stored))
        XCTAssertFalse(APIKey.matches(key + "x", storedHash: stored))
        XCTAssertFalse(APIKey.matches(key, storedHash: ""))
        XCTAssertFalse(APIKey.matches(key, storedHash: String(stored.dropLast())))
    }

    func testConstantTimeEquals() {
        XCTAssertTrue(APIKey.constantTimeEquals("", ""))
        XCTAssertTrue(APIKey.constantTimeEquals("abc", "abc"))
        XCTAssertFalse(APIKey.constantTimeEquals("abc", "abd"))
        XCTAssertFalse(APIKey.constantTimeEquals("abc", "abcd"))
        XCTAssertFalse(APIKey.constantTimeEquals("é", "e\u{301}"), "bytes, not canonical equivalence")
    }
}
