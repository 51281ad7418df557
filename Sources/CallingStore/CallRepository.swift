import CallingCore

/// Where a call is in its life: created, someone joined its room, over.
public enum CallState: String, Sendable, Hashable, CaseIterable {
    case registered, ongoing, ended
}

/// A row of `calls`: a room plus what the creating backend attached to it.
public struct CallRecord: Sendable, Hashable {
    public var call: CallID
    public var room: RoomID
    public var agentID: String?
    /// JSON object text, stored verbatim.
    public var metadata: String?
    /// JSON object text, stored verbatim.
    public var dynamicVariables: String?
    /// Consultation meter limit; nil means the room has no meter.
    public var meterLimitS: Int64?
    /// Remaining seconds at which the meter turns to warning; nil means the server default.
    public var meterWarningS: Int64?
    public var state: CallState
    public var endReason: String?
    public var createdMs: Int64
    /// Expiry of the access token handed out with the call.
    public var expiresMs: Int64
    public var joinedMs: Int64?
    public var endedMs: Int64?
    /// Seat limit of the call's room for the call's tokens (0 = unlimited); nil means the server default.
    public var maxPeers: Int64?
    /// The cluster node that created the call, in a shared store (`database_url`): the room's
    /// consultation meter runs there. Not kept by SQLite (one node's store), where it reads nil.
    public var node: String?

    public init(call: CallID, room: RoomID, agentID: String? = nil, metadata: String? = nil, dynamicVariables: String? = nil,
                meterLimitS: Int64? = nil, meterWarningS: Int64? = nil, state: CallState = .registered,
                endReason: String? = nil, createdMs: Int64, expiresMs: Int64, joinedMs: Int64? = nil, endedMs: Int64? = nil,
                maxPeers: Int64? = nil, node: String? = nil)
    {
        self.call = call
        self.room = room
        self.agentID = agentID
        self.metadata = metadata
        self.dynamicVariables = dynamicVariables
        self.meterLimitS = meterLimitS
        self.meterWarningS = meterWarningS
        self.state = state
        self.endReason = endReason
        self.createdMs = createdMs
        self.expiresMs = expiresMs
        self.joinedMs = joinedMs
        self.endedMs = endedMs
        self.maxPeers = maxPeers
        self.node = node
    }
}

/// The `calls` SQL, run synchronously on a connection (the server runs it through
/// `ChatStore.perform`, i.e. on the store queue).
public struct CallRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    private static let columns = """
        call_id, room_id, agent_id, metadata, dynamic_variables, meter_limit_s, meter_warning_s, state, end_reason,
        created_ms, expires_ms, joined_ms, ended_ms, max_peers
        """

    /// Stores a new call. Throws a `SQLITE_CONSTRAINT_*` error when the id is taken.
    public func insert(_ call: CallRecord) throws {
        try db.run(
            "INSERT INTO calls (\(Self.columns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            [.text(call.call.rawValue), .text(call.room.rawValue), SQLiteValue(call.agentID), SQLiteValue(call.metadata),
             SQLiteValue(call.dynamicVariables), Self.integer(call.meterLimitS), Self.integer(call.meterWarningS),
             .text(call.state.rawValue), SQLiteValue(call.endReason), .integer(call.createdMs), .integer(call.expiresMs),
             Self.integer(call.joinedMs), Self.integer(call.endedMs), Self.integer(call.maxPeers)]
        )
    }

    public func find(_ call: CallID) throws -> CallRecord? {
        try db.queryFirst("SELECT \(Self.columns) FROM calls WHERE call_id = ?1", [.text(call.rawValue)], row: Self.record)
    }

    /// The newest call of `room` that has not ended.
    public func live(room: RoomID) throws -> CallRecord? {
        try db.queryFirst(Self.liveSQL, [.text(room.rawValue)], row: Self.record)
    }

    /// Read on every join: the index `calls_by_room_newest` (migration 007) serves its order, so
    /// no temporary B-tree is built for it (CallRepositoryTests holds the plan).
    static let liveSQL =
        "SELECT \(columns) FROM calls WHERE room_id = ?1 AND state <> 'ended' ORDER BY created_ms DESC, call_id DESC LIMIT 1"

    /// A peer joined `room`: its registered calls created after `createdAfterMs` (still inside their
    /// join window) become ongoing with `joined_ms = nowMs`. Calls already past the window are left
    /// for `expireUnjoined`, so a join racing the sweep cannot revive an expired call.
    /// Returns the calls that changed.
    @discardableResult
    public func markJoined(room: RoomID, nowMs: Int64, createdAfterMs: Int64) throws -> [CallID] {
        // Nearly every join finds no registered call (rooms without the Calls API, and every join
        // after the first). Reading that takes no write transaction, several times cheaper than
        // the UPDATE (callgrind, `calling-bench join`), on the store queue the join's welcome
        // also waits behind. Both statements run on the caller's one connection, in this order.
        let registered = try db.queryFirst(
            "SELECT 1 FROM calls WHERE room_id = ?1 AND state = 'registered' AND created_ms > ?2 LIMIT 1",
            [.text(room.rawValue), .integer(createdAfterMs)]
        ) { _ in true } ?? false
        guard registered else { return [] }
        return try db.query(
            """
            UPDATE calls SET state = 'ongoing', joined_ms = ?2
            WHERE room_id = ?1 AND state = 'registered' AND created_ms > ?3
            RETURNING call_id
            """,
            [.text(room.rawValue), .integer(nowMs), .integer(createdAfterMs)]
        ) { CallID($0.text(0)) }.sorted { $0.rawValue < $1.rawValue }
    }

    /// Ends every registered call created at or before `createdAtOrBeforeMs` with `reason` (nobody
    /// joined in time). Returns the ended calls.
    public func expireUnjoined(createdAtOrBeforeMs: Int64, nowMs: Int64, reason: String) throws -> [CallRecord] {
        try db.query(
            """
            UPDATE calls SET state = 'ended', end_reason = ?3, ended_ms = ?2
            WHERE state = 'registered' AND created_ms <= ?1
            RETURNING \(Self.columns)
            """,
            [.integer(createdAtOrBeforeMs), .integer(nowMs), .text(reason)], row: Self.record
        ).sorted { $0.call.rawValue < $1.call.rawValue }
    }

    /// Ends the calls of `room` that have not ended yet (the meter ran out, the room was closed).
    /// Returns the calls that changed.
    @discardableResult
    public func endLive(room: RoomID, nowMs: Int64, reason: String) throws -> [CallID] {
        try db.query(
            """
            UPDATE calls SET state = 'ended', end_reason = ?3, ended_ms = ?2
            WHERE room_id = ?1 AND state <> 'ended'
            RETURNING call_id
            """,
            [.text(room.rawValue), .integer(nowMs), .text(reason)]
        ) { CallID($0.text(0)) }.sorted { $0.rawValue < $1.rawValue }
    }

    /// Ends the ongoing calls of `room` (its last peer left, so nobody is left to talk: a later
    /// session POST answers 404). Registered calls keep their join window. Returns the calls that changed.
    @discardableResult
    public func endOngoing(room: RoomID, nowMs: Int64, reason: String) throws -> [CallID] {
        try db.query(
            """
            UPDATE calls SET state = 'ended', end_reason = ?3, ended_ms = ?2
            WHERE room_id = ?1 AND state = 'ongoing'
            RETURNING call_id
            """,
            [.text(room.rawValue), .integer(nowMs), .text(reason)]
        ) { CallID($0.text(0)) }.sorted { $0.rawValue < $1.rawValue }
    }

    private static func integer(_ value: Int64?) -> SQLiteValue {
        value.map(SQLiteValue.integer) ?? .null
    }

    private static func record(_ row: Statement) -> CallRecord {
        CallRecord(
            call: CallID(row.text(0)), room: RoomID(row.text(1)), agentID: row.optionalText(2), metadata: row.optionalText(3),
            dynamicVariables: row.optionalText(4), meterLimitS: row.optionalInt64(5), meterWarningS: row.optionalInt64(6),
            state: CallState(rawValue: row.text(7)) ?? .ended, endReason: row.optionalText(8), createdMs: row.int64(9),
            expiresMs: row.int64(10), joinedMs: row.optionalInt64(11), endedMs: row.optionalInt64(12),
            maxPeers: row.optionalInt64(13))
    }
}
