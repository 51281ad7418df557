import CallingCore
import Dispatch

/// Who may use the server and who may not: API keys (the server-to-server and admin routes) and
/// kicked tokens. The contract both the embedded SQLite store (`ChatStore`) and the shared
/// PostgreSQL store (CallingPostgres `PostgresChatStore`) keep, so the server checks a key, and
/// stores and reads bans, without knowing which one it talks to; with a shared database every node
/// sees the same keys and bans.
///
/// The guarantees every implementation gives (`Tests/CallingStoreTests/AccessPersistenceTests.swift`
/// holds both stores to them):
/// - A key's hash and id are unique: a second insert of either fails with a constraint error and
///   stores nothing.
/// - `activeAPIKey(hash:)` finds a key from the moment its insert completed until its revocation
///   completed, and never after; revoking twice keeps the first time.
/// - A ban stored twice for one token keeps the later expiry; `tokenBans(activeAt:)` lists the bans
///   whose expiry is after `nowMs`, by key.
/// - Every operation returns at once; its completion runs on the store's own queue and must be quick.
public protocol AccessPersistence: AnyObject, Sendable {
    /// Stores a new key (`calling-server apikey create`).
    func insertAPIKey(_ key: APIKeyRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    /// Every key, revoked ones included, oldest first.
    func apiKeys(completion: @escaping @Sendable (Result<[APIKeyRecord], StoreError>) -> Void)

    /// The unrevoked key whose SHA-256 is `hash` (lower-case hex), if any. Asked per request.
    func activeAPIKey(hash: String, completion: @escaping @Sendable (Result<APIKeyRecord?, StoreError>) -> Void)

    /// Marks the key revoked at `nowMs`.
    func revokeAPIKey(id: String, nowMs: Int64, completion: @escaping @Sendable (Result<APIKeyRevocation, StoreError>) -> Void)

    /// Stores kicked tokens (a later expiry of a stored one replaces its earlier one).
    func storeTokenBans(_ bans: [TokenBan], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    /// The bans that still hold at `nowMs`, by key.
    func tokenBans(activeAt nowMs: Int64, completion: @escaping @Sendable (Result<[TokenBan], StoreError>) -> Void)
}

extension AccessPersistence {
    /// Runs one operation and waits for its completion: for the CLI, start-up and tests, never the
    /// service thread.
    public func wait<Value: Sendable>(
        _ operation: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
    ) throws -> Value {
        try waitForCompletion(operation)
    }
}

extension CallPersistence {
    /// Runs one operation and waits for its completion: for tests, never the service thread.
    public func wait<Value: Sendable>(
        _ operation: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
    ) throws -> Value {
        try waitForCompletion(operation)
    }
}

/// `operation` with a completion that wakes the caller, and its result: for start-up, the CLI and
/// tests, never the service thread.
public func waitForCompletion<Value: Sendable>(
    _ operation: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
) throws -> Value {
    let done = DispatchSemaphore(value: 0)
    let box = Locked<Result<Value, StoreError>?>(nil)
    operation { result in
        box.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return try box.withLock { $0! }.get()
}

extension ChatStore: AccessPersistence {
    public func insertAPIKey(_ key: APIKeyRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ try APIKeyRepository(db: $0).insert(key) }, completion: completion)
    }

    public func apiKeys(completion: @escaping @Sendable (Result<[APIKeyRecord], StoreError>) -> Void) {
        perform({ try APIKeyRepository(db: $0).all() }, completion: completion)
    }

    public func activeAPIKey(hash: String, completion: @escaping @Sendable (Result<APIKeyRecord?, StoreError>) -> Void) {
        perform({ try APIKeyRepository(db: $0).active(hash: hash) }, completion: completion)
    }

    public func revokeAPIKey(id: String, nowMs: Int64,
                             completion: @escaping @Sendable (Result<APIKeyRevocation, StoreError>) -> Void) {
        perform({ try APIKeyRepository(db: $0).revoke(id: id, nowMs: nowMs) }, completion: completion)
    }

    public func storeTokenBans(_ bans: [TokenBan], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ try TokenBanRepository(db: $0).store(bans) }, completion: completion)
    }

    public func tokenBans(activeAt nowMs: Int64, completion: @escaping @Sendable (Result<[TokenBan], StoreError>) -> Void) {
        perform({ try TokenBanRepository(db: $0).active(at: nowMs) }, completion: completion)
    }
}

/// The `token_bans` SQL (migration 009), run synchronously on a connection (the server runs it on
/// the store queue).
public struct TokenBanRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Stores `bans` in one transaction; a key stored before keeps the later expiry.
    public func store(_ bans: [TokenBan]) throws {
        guard !bans.isEmpty else { return }
        try db.transaction(.immediate) {
            for ban in bans {
                try db.run(
                    """
                    INSERT INTO token_bans (ban_key, expires_ms) VALUES (?1, ?2)
                    ON CONFLICT (ban_key) DO UPDATE SET expires_ms = max(expires_ms, excluded.expires_ms)
                    """,
                    [.text(ban.key), .integer(ban.expiresAt)])
            }
        }
    }

    /// Bans whose expiry is after `nowMs`, by key.
    public func active(at nowMs: Int64) throws -> [TokenBan] {
        try db.query("SELECT ban_key, expires_ms FROM token_bans WHERE expires_ms > ?1 ORDER BY ban_key", [.integer(nowMs)]) {
            TokenBan(key: $0.text(0), expiresAt: $0.int64(1))
        }
    }
}
