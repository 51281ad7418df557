import CallingCore
import CallingStore
import XCTest

/// API keys on a real SQLite file: stored as hashes, found only while unrevoked.
final class APIKeyRepositoryTests: XCTestCase {
    private let hashA = String(repeating: "a", count: 64)
    private let hashB = String(repeating: "b", count: 64)

    func testAStoredKeyIsFoundByItsHashUntilRevoked() throws {
        let store = try makeStore()
        try store.sync { db in
            let keys = APIKeyRepository(db: db)
            try keys.insert(APIKeyRecord(id: "ak_1", name: "backend", hash: hashA, createdMs: 100))
            XCTAssertEqual(try keys.active(hash: hashA)?.id, "ak_1")
            XCTAssertEqual(try keys.active(hash: hashA.uppercased())?.id, "ak_1", "hex case does not matter")
            XCTAssertNil(try keys.active(hash: hashB))

            guard case .revoked(let revoked) = try keys.revoke(id: "ak_1", nowMs: 200) else { return XCTFail("not revoked") }
            XCTAssertEqual(revoked.revokedMs, 200)
            XCTAssertNil(try keys.active(hash: hashA), "a revoked key no longer authenticates")
            XCTAssertEqual(try keys.find(id: "ak_1")?.revokedMs, 200, "but it stays listed")
        }
    }

    func testRevokingTwiceKeepsTheFirstTimeAndAnUnknownIDIsReported() throws {
        let store = try makeStore()
        try store.sync { db in
            let keys = APIKeyRepository(db: db)
            try keys.insert(APIKeyRecord(id: "ak_1", name: "backend", hash: hashA, createdMs: 100))
            _ = try keys.revoke(id: "ak_1", nowMs: 200)
            XCTAssertEqual(try keys.revoke(id: "ak_1", nowMs: 300),
                           .alreadyRevoked(APIKeyRecord(id: "ak_1", name: "backend", hash: hashA, createdMs: 100, revokedMs: 200)))
            XCTAssertEqual(try keys.revoke(id: "ak_nope", nowMs: 300), .notFound)
        }
    }

    func testListingShowsEveryKeyOldestFirst() throws {
        let store = try makeStore()
        let listed = try store.sync { db in
            let keys = APIKeyRepository(db: db)
            try keys.insert(APIKeyRecord(id: "ak_new", name: "second", hash: hashB, createdMs: 200))
            try keys.insert(APIKeyRecord(id: "ak_old", name: "first", hash: hashA, createdMs: 100, revokedMs: 150))
            return try keys.all()
        }
        XCTAssertEqual(listed.map(\.id), ["ak_old", "ak_new"])
        XCTAssertEqual(listed.map(\.isRevoked), [true, false])
    }

    func testTheSameHashCannotBeStoredTwiceAndAMalformedHashIsRefused() throws {
        let store = try makeStore()
        try store.sync { db in
            let keys = APIKeyRepository(db: db)
            try keys.insert(APIKeyRecord(id: "ak_1", name: "one", hash: hashA, createdMs: 1))
            XCTAssertThrowsError(try keys.insert(APIKeyRecord(id: "ak_2", name: "two", hash: hashA, createdMs: 2))) { error in
                XCTAssertEqual((error as? SQLiteError)?.extendedCode, SQLiteCode.constraintUnique)
            }
            XCTAssertThrowsError(try keys.insert(APIKeyRecord(id: "ak_3", name: "short", hash: "abc", createdMs: 3)))
        }
    }
}
