import CallingCore
import CallingStore
import Dispatch
import Foundation
import Testing

private func key(_ id: String, hash: Character = "a", created: Int64 = 1_000, scopes: [String] = ["calls"]) -> APIKeyRecord {
    APIKeyRecord(id: id, name: "name of \(id)", hash: String(repeating: hash, count: 64), createdMs: created, scopes: scopes)
}

/// The `AccessPersistence` contract (API keys and kicked tokens), ONE suite run against both stores:
/// the embedded SQLite `ChatStore` and `PostgresChatStore` on a real PostgreSQL server the suite
/// starts itself (`TestPostgres`, a fresh database per test), as ChatPersistenceTests does for chat.
@Suite(.serialized)
struct AccessPersistenceTests {
    @Test(arguments: ChatBackend.allCases)
    func testAnInsertedKeyIsFoundByItsHashWithItsScopesAndListedOldestFirst(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.access
        let admin = key("ak_2", hash: "B", created: 2_000, scopes: ["calls", "admin"])
        try store.wait { store.insertAPIKey(admin, completion: $0) }
        try store.wait { store.insertAPIKey(key("ak_1", hash: "c"), completion: $0) }
        let found = try store.wait { store.activeAPIKey(hash: String(repeating: "b", count: 64), completion: $0) }
        #expect(found?.id == "ak_2")
        #expect(found?.hash == String(repeating: "b", count: 64), "stored lower-case")
        #expect(found?.scopes == ["calls", "admin"])
        #expect(found?.allows("admin") == true)
        #expect(try store.wait { store.activeAPIKey(hash: String(repeating: "d", count: 64), completion: $0) } == nil)
        #expect(try store.wait { store.apiKeys(completion: $0) }.map(\.id) == ["ak_1", "ak_2"])
    }

    @Test(arguments: ChatBackend.allCases)
    func testADuplicateIdOrHashFailsAsAConstraintAndStoresNothing(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.access
        try store.wait { store.insertAPIKey(key("ak_1"), completion: $0) }
        for duplicate in [key("ak_1", hash: "e"), key("ak_9")] {
            #expect(throws: StoreError.self) { try store.wait { store.insertAPIKey(duplicate, completion: $0) } }
        }
        #expect(try store.wait { store.apiKeys(completion: $0) }.map(\.id) == ["ak_1"])
    }

    @Test(arguments: ChatBackend.allCases)
    func testARevokedKeyIsNoLongerActiveAndASecondRevocationKeepsTheFirstTime(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.access
        try store.wait { store.insertAPIKey(key("ak_1"), completion: $0) }
        let first = try store.wait { store.revokeAPIKey(id: "ak_1", nowMs: 5_000, completion: $0) }
        guard case .revoked(let revoked) = first else { Issue.record("\(first)"); return }
        #expect(revoked.revokedMs == 5_000)
        #expect(try store.wait { store.activeAPIKey(hash: String(repeating: "a", count: 64), completion: $0) } == nil)
        let second = try store.wait { store.revokeAPIKey(id: "ak_1", nowMs: 9_000, completion: $0) }
        guard case .alreadyRevoked(let again) = second else { Issue.record("\(second)"); return }
        #expect(again.revokedMs == 5_000)
        #expect(try store.wait { store.revokeAPIKey(id: "ak_nope", nowMs: 9_000, completion: $0) } == .notFound)
        #expect(try store.wait { store.apiKeys(completion: $0) }.map(\.revokedMs) == [5_000], "a revoked key stays listed")
    }

    @Test(arguments: ChatBackend.allCases)
    func testBansHoldUntilTheirExpiryAndAStoredAgainBanKeepsTheLaterOne(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.access
        try store.wait { store.storeTokenBans([TokenBan(key: "jti:b", expiresAt: 2_000), TokenBan(key: "jti:a", expiresAt: 3_000)],
                                              completion: $0) }
        try store.wait { store.storeTokenBans([TokenBan(key: "jti:b", expiresAt: 4_000)], completion: $0) }
        try store.wait { store.storeTokenBans([TokenBan(key: "jti:a", expiresAt: 1_000)], completion: $0) }
        try store.wait { store.storeTokenBans([], completion: $0) }
        #expect(try store.wait { store.tokenBans(activeAt: 1_500, completion: $0) }
            == [TokenBan(key: "jti:a", expiresAt: 3_000), TokenBan(key: "jti:b", expiresAt: 4_000)])
        #expect(try store.wait { store.tokenBans(activeAt: 3_000, completion: $0) } == [TokenBan(key: "jti:b", expiresAt: 4_000)],
                "expired at its expiry")
        #expect(try store.wait { store.tokenBans(activeAt: 4_000, completion: $0) } == [])
    }

    @Test(arguments: ChatBackend.allCases)
    func testKeysAndBansOutliveTheStoreThatWroteThem(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        let store = sut.access
        try store.wait { store.insertAPIKey(key("ak_1", scopes: ["admin"]), completion: $0) }
        let ban = TokenBan(key: "iat:1:2:1:rp\u{00e9}", expiresAt: 9_000)
        try store.wait { store.storeTokenBans([ban], completion: $0) }
        sut.close()
        let reopened = try sut.reopen()
        defer { reopened.close() }
        let again = reopened.access
        #expect(try again.wait { again.activeAPIKey(hash: String(repeating: "a", count: 64), completion: $0) }?.scopes == ["admin"])
        #expect(try again.wait { again.tokenBans(activeAt: 0, completion: $0) } == [ban])
    }
}
