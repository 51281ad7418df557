import CallingCore

/// A live seat as remembered in the `seats` table (schema/008_seats.sql): who holds it, and when
/// the room's live call began, so a restarted server can hold it for its peer's reconnect.
public struct SeatRecord: Sendable, Equatable {
    public var identity: PeerIdentity
    /// When the room's live call started (the webhooks' `call_started.started_at`).
    public var callStartedMs: Int64
    public var joinedMs: Int64

    public init(identity: PeerIdentity, callStartedMs: Int64, joinedMs: Int64) {
        self.identity = identity
        self.callStartedMs = callStartedMs
        self.joinedMs = joinedMs
    }
}

/// One change to the remembered seats, in the order the seats changed.
public enum SeatChange: Sendable, Equatable {
    /// The seat started, or its peer took it over with another token: remember this one.
    case save(SeatRecord)
    /// The seat ended: forget it.
    case remove(room: RoomID, peer: PeerID)
}

/// The `seats` SQL, run synchronously on a connection (through `ChatStore.perform` in the server,
/// `ChatStore.sync` at start).
public struct SeatRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Applies `changes` in order, in one transaction: the seats a tick changed cost one commit.
    /// A seat saved again (a takeover, a resume) keeps its join time and its call's start, so a
    /// restart restores the room in its join order.
    public func apply(_ changes: [SeatChange]) throws {
        guard !changes.isEmpty else { return }
        try db.transaction(.immediate) {
            for change in changes {
                switch change {
                case .save(let record): try save(record)
                case .remove(let room, let peer):
                    try db.run("DELETE FROM seats WHERE room_id = ?1 AND peer_id = ?2", [.text(room.rawValue), .text(peer.rawValue)])
                }
            }
        }
    }

    private func save(_ record: SeatRecord) throws {
        let identity = record.identity
        var tokenID: SQLiteValue = .null, issued: SQLiteValue = .null, expires: SQLiteValue = .null, expiresMs: SQLiteValue = .null
        if let credential = identity.credential {
            switch credential.key {
            case .id(let id): tokenID = .text(id)
            case .issued(let at, let exp):
                issued = .integer(at)
                expires = .integer(exp)
            }
            expiresMs = .integer(credential.expiresAt)
        }
        try db.run(
            """
            INSERT INTO seats (room_id, peer_id, role, name, call_id, max_peers, token_id, token_iat, token_exp,
                               token_expires_ms, call_started_ms, joined_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
            ON CONFLICT (room_id, peer_id) DO UPDATE SET
                role = excluded.role, name = excluded.name, call_id = excluded.call_id, max_peers = excluded.max_peers,
                token_id = excluded.token_id, token_iat = excluded.token_iat, token_exp = excluded.token_exp,
                token_expires_ms = excluded.token_expires_ms
            """,
            [.text(identity.room.rawValue), .text(identity.peer.rawValue), .text(identity.role), SQLiteValue(identity.name),
             SQLiteValue(identity.call?.rawValue), identity.maxPeers.map { .integer(Int64($0)) } ?? .null, tokenID, issued, expires,
             expiresMs, .integer(record.callStartedMs), .integer(record.joinedMs)]
        )
    }

    /// Every remembered seat, by room, then in the order its peers joined.
    public func all() throws -> [SeatRecord] {
        try db.query(
            """
            SELECT room_id, peer_id, role, name, call_id, max_peers, token_id, token_iat, token_exp, token_expires_ms,
                   call_started_ms, joined_ms
            FROM seats ORDER BY room_id, joined_ms, peer_id
            """
        ) { row in
            var credential: TokenCredential?
            if let expiresAt = row.optionalInt64(9) {
                if let id = row.optionalText(6) {
                    credential = TokenCredential(id: id, expiresAt: expiresAt)
                } else if let iat = row.optionalInt64(7), let exp = row.optionalInt64(8) {
                    credential = TokenCredential(issuedAt: iat, expires: exp, expiresAt: expiresAt)
                }
            }
            let identity = PeerIdentity(peer: PeerID(row.text(1)), room: RoomID(row.text(0)), call: row.optionalText(4).map { CallID($0) },
                                        role: row.text(2), name: row.optionalText(3), maxPeers: row.optionalInt64(5).map { Int($0) },
                                        credential: credential)
            return SeatRecord(identity: identity, callStartedMs: row.int64(10), joinedMs: row.int64(11))
        }
    }
}
