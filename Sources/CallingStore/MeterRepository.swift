import CallingCore

/// A room's consultation meter as last persisted.
public struct MeterRecord: Sendable, Hashable {
    public enum State: String, Sendable, Hashable, CaseIterable {
        case running, warning, ended
    }

    public var room: RoomID
    /// When the meter first started (the second participant joined).
    public var startedMs: Int64
    /// Time counted so far (only while at least two participants were present).
    public var elapsedMs: Int64
    public var limitS: Int64
    public var warningS: Int64
    public var state: State

    public init(room: RoomID, startedMs: Int64, elapsedMs: Int64, limitS: Int64, warningS: Int64, state: State) {
        self.room = room
        self.startedMs = startedMs
        self.elapsedMs = elapsedMs
        self.limitS = limitS
        self.warningS = warningS
        self.state = state
    }
}

/// The `meters` SQL, run synchronously on a connection (through `ChatStore.perform` in the server).
public struct MeterRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Inserts or replaces the room's meter. `started_ms` keeps its first value, and `elapsed_ms`
    /// never moves backwards, so a late write of an older snapshot cannot undo counted time.
    public func save(_ meter: MeterRecord) throws {
        try db.run(
            """
            INSERT INTO meters (room_id, started_ms, elapsed_ms, limit_s, warning_s, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (room_id) DO UPDATE SET
                elapsed_ms = max(elapsed_ms, excluded.elapsed_ms), limit_s = excluded.limit_s,
                warning_s = excluded.warning_s, state = excluded.state
            """,
            [.text(meter.room.rawValue), .integer(meter.startedMs), .integer(meter.elapsedMs), .integer(meter.limitS),
             .integer(meter.warningS), .text(meter.state.rawValue)]
        )
    }

    public func find(room: RoomID) throws -> MeterRecord? {
        try db.queryFirst(
            "SELECT started_ms, elapsed_ms, limit_s, warning_s, state FROM meters WHERE room_id = ?1", [.text(room.rawValue)]
        ) { row in
            MeterRecord(room: room, startedMs: row.int64(0), elapsedMs: row.int64(1), limitS: row.int64(2), warningS: row.int64(3),
                        state: MeterRecord.State(rawValue: row.text(4)) ?? .ended)
        }
    }

    /// Forgets the room's meter, e.g. when a new call starts in the room. Returns whether one existed.
    @discardableResult
    public func delete(room: RoomID) throws -> Bool {
        try db.run("DELETE FROM meters WHERE room_id = ?1", [.text(room.rawValue)])
        return db.changes > 0
    }
}
