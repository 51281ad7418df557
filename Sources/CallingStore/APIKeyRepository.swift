import CallingCore

/// A server API key as stored: its id, a label and the SHA-256 of the plaintext, never the plaintext.
public struct APIKeyRecord: Sendable, Hashable {
    /// Public handle for listing and revoking (`ak_…`); not a secret.
    public var id: String
    public var name: String
    /// Lower-case hex SHA-256 of the plaintext key (CallingAuth `APIKey.hash`).
    public var hash: String
    public var createdMs: Int64
    public var revokedMs: Int64?
    /// What the key may do: `calls` (the call-creation routes) and/or `admin` (`/v1/admin/…`).
    public var scopes: [String]

    public init(id: String, name: String, hash: String, createdMs: Int64, revokedMs: Int64? = nil,
                scopes: [String] = [APIKeyRecord.callsScope]) {
        self.id = id
        self.name = name
        self.hash = hash
        self.createdMs = createdMs
        self.revokedMs = revokedMs
        self.scopes = scopes
    }

    public var isRevoked: Bool { revokedMs != nil }

    /// `POST /v1/calls`, `POST /v1/tokens`, `GET /v1/calls/…`.
    public static let callsScope = "calls"
    /// `/v1/admin/…`: live rooms, kick, end, server data, drain.
    public static let adminScope = "admin"
    /// Every scope `apikey create --scope` accepts.
    public static let knownScopes = [callsScope, adminScope]

    /// Whether this key may call a route that needs `scope`.
    public func allows(_ scope: String) -> Bool { scopes.contains(scope) }
}

/// What `APIKeyRepository.revoke` found.
public enum APIKeyRevocation: Sendable, Equatable {
    case revoked(APIKeyRecord)
    /// Revoked before; the first revocation time is kept.
    case alreadyRevoked(APIKeyRecord)
    case notFound
}

/// The `api_keys` SQL, run synchronously on a connection: by the CLI on its own connection, by the
/// server through `ChatStore.perform` on the store queue.
public struct APIKeyRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Stores a new key. Throws a `SQLITE_CONSTRAINT_*` error for a duplicate id or hash.
    public func insert(_ key: APIKeyRecord) throws {
        try db.run(
            "INSERT INTO api_keys (id, name, hash, created_ms, revoked_ms, scope) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            [.text(key.id), .text(key.name), .text(key.hash.lowercased()), .integer(key.createdMs),
             key.revokedMs.map(SQLiteValue.integer) ?? .null, .text(key.scopes.joined(separator: " "))]
        )
    }

    /// Every key, revoked ones included, oldest first.
    public func all() throws -> [APIKeyRecord] {
        try db.query("SELECT id, name, hash, created_ms, revoked_ms, scope FROM api_keys ORDER BY created_ms, id", row: Self.record)
    }

    public func find(id: String) throws -> APIKeyRecord? {
        try db.queryFirst("SELECT id, name, hash, created_ms, revoked_ms, scope FROM api_keys WHERE id = ?1", [.text(id)],
                          row: Self.record)
    }

    /// The unrevoked key whose hash is `hash`, if any. The lookup compares hashes, not keys: learning
    /// through timing how much of a hash matched says nothing about a 256-bit key.
    public func active(hash: String) throws -> APIKeyRecord? {
        try db.queryFirst(
            "SELECT id, name, hash, created_ms, revoked_ms, scope FROM api_keys WHERE hash = ?1 AND revoked_ms IS NULL",
            [.text(hash.lowercased())], row: Self.record)
    }

    /// Marks the key revoked at `nowMs`; from then on `active(hash:)` no longer finds it.
    public func revoke(id: String, nowMs: Int64) throws -> APIKeyRevocation {
        try db.transaction(.immediate) {
            guard var key = try find(id: id) else { return .notFound }
            if key.isRevoked { return .alreadyRevoked(key) }
            try db.run("UPDATE api_keys SET revoked_ms = ?2 WHERE id = ?1", [.text(id), .integer(nowMs)])
            key.revokedMs = nowMs
            return .revoked(key)
        }
    }

    private static func record(_ row: Statement) -> APIKeyRecord {
        APIKeyRecord(id: row.text(0), name: row.text(1), hash: row.text(2), createdMs: row.int64(3),
                     revokedMs: row.optionalInt64(4), scopes: row.text(5).split(separator: " ").map(String.init))
    }
}
