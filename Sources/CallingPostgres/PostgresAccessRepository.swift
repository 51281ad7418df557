import CallingCore
import CallingStore

/// The `api_keys` and `token_bans` SQL for PostgreSQL (schema/postgres/002_access.sql), run
/// synchronously on a connection: `APIKeyRepository` and `TokenBanRepository` in this dialect.
/// `PostgresChatStore` runs it on its queue.
public struct PostgresAccessRepository {
    let db: PostgresConnection

    public init(db: PostgresConnection) {
        self.db = db
    }

    private static let keyColumns = "id, name, hash, created_ms, revoked_ms, scope"

    /// Stores a new key. Throws a unique violation (SQLSTATE 23505) for a duplicate id or hash.
    public func insert(_ key: APIKeyRecord) throws {
        try db.query(
            "INSERT INTO api_keys (\(Self.keyColumns)) VALUES ($1, $2, $3, $4::bigint, $5::bigint, $6)",
            [key.id, key.name, key.hash.lowercased(), String(key.createdMs), key.revokedMs.map(String.init),
             key.scopes.joined(separator: " ")])
    }

    /// Every key, revoked ones included, oldest first.
    public func all() throws -> [APIKeyRecord] {
        try db.query("SELECT \(Self.keyColumns) FROM api_keys ORDER BY created_ms, id").rows.map(Self.record)
    }

    public func find(id: String) throws -> APIKeyRecord? {
        try db.query("SELECT \(Self.keyColumns) FROM api_keys WHERE id = $1", [id]).rows.first.map(Self.record)
    }

    /// The unrevoked key whose hash is `hash`, if any.
    public func active(hash: String) throws -> APIKeyRecord? {
        try db.query("SELECT \(Self.keyColumns) FROM api_keys WHERE hash = $1 AND revoked_ms IS NULL", [hash.lowercased()])
            .rows.first.map(Self.record)
    }

    /// Marks the key revoked at `nowMs`; a key revoked before keeps its first revocation time.
    public func revoke(id: String, nowMs: Int64) throws -> APIKeyRevocation {
        try db.transaction {
            // FOR UPDATE: two nodes revoking at once agree on which one revoked it.
            guard let row = try db.query("SELECT \(Self.keyColumns) FROM api_keys WHERE id = $1 FOR UPDATE", [id]).rows.first else {
                return .notFound
            }
            var key = Self.record(row)
            if key.isRevoked { return .alreadyRevoked(key) }
            try db.query("UPDATE api_keys SET revoked_ms = $2::bigint WHERE id = $1", [id, String(nowMs)])
            key.revokedMs = nowMs
            return .revoked(key)
        }
    }

    /// Stores `bans` in one transaction; a key stored before keeps the later expiry.
    public func store(_ bans: [TokenBan]) throws {
        guard !bans.isEmpty else { return }
        try db.transaction {
            for ban in bans {
                try db.query(
                    """
                    INSERT INTO token_bans (ban_key, expires_ms) VALUES ($1, $2::bigint)
                    ON CONFLICT (ban_key) DO UPDATE SET expires_ms = greatest(token_bans.expires_ms, excluded.expires_ms)
                    """,
                    [ban.key, String(ban.expiresAt)])
            }
        }
    }

    /// Bans whose expiry is after `nowMs`, by key.
    public func bans(activeAt nowMs: Int64) throws -> [TokenBan] {
        // COLLATE "C": the order SQLite's BINARY gives, whatever the database's locale.
        try db.query("SELECT ban_key, expires_ms FROM token_bans WHERE expires_ms > $1::bigint ORDER BY ban_key COLLATE \"C\"",
                     [String(nowMs)]).rows.map { TokenBan(key: $0[0] ?? "", expiresAt: Int64($0[1] ?? "") ?? 0) }
    }

    private static func record(_ row: [String?]) -> APIKeyRecord {
        APIKeyRecord(id: row[0] ?? "", name: row[1] ?? "", hash: row[2] ?? "", createdMs: Int64(row[3] ?? "") ?? 0,
                     revokedMs: row[4].flatMap { Int64($0) }, scopes: (row[5] ?? "").split(separator: " ").map(String.init))
    }
}

extension PostgresChatStore: AccessPersistence {
    public func insertAPIKey(_ key: APIKeyRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        // Not repeated after a lost connection: the insert may have committed, and a repeat would
        // then fail on its own row.
        submit(completion, mayRepeat: false) { try PostgresAccessRepository(db: $0).insert(key) }
    }

    public func apiKeys(completion: @escaping @Sendable (Result<[APIKeyRecord], StoreError>) -> Void) {
        submit(completion) { try PostgresAccessRepository(db: $0).all() }
    }

    public func activeAPIKey(hash: String, completion: @escaping @Sendable (Result<APIKeyRecord?, StoreError>) -> Void) {
        submit(completion) { try PostgresAccessRepository(db: $0).active(hash: hash) }
    }

    public func revokeAPIKey(id: String, nowMs: Int64,
                             completion: @escaping @Sendable (Result<APIKeyRevocation, StoreError>) -> Void) {
        submit(completion) { try PostgresAccessRepository(db: $0).revoke(id: id, nowMs: nowMs) }
    }

    public func storeTokenBans(_ bans: [TokenBan], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        submit(completion) { try PostgresAccessRepository(db: $0).store(bans) }
    }

    public func tokenBans(activeAt nowMs: Int64, completion: @escaping @Sendable (Result<[TokenBan], StoreError>) -> Void) {
        submit(completion) { try PostgresAccessRepository(db: $0).bans(activeAt: nowMs) }
    }
}
