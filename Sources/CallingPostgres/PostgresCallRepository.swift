import CallingCore
import CallingStore

/// The `calls`, `call_stats` and `meters` SQL for PostgreSQL (schema/postgres/003_calls.sql), run
/// synchronously on a connection: `CallRepository`, `CallStatsRepository` and `MeterRepository` in
/// this dialect, with the same semantics. `PostgresChatStore` runs it on its queue.
public struct PostgresCallRepository {
    let db: PostgresConnection

    public init(db: PostgresConnection) {
        self.db = db
    }

    private static let columns = """
        call_id, room_id, agent_id, metadata, dynamic_variables, meter_limit_s, meter_warning_s, state, end_reason,
        created_ms, expires_ms, joined_ms, ended_ms, max_peers, node_id
        """

    // MARK: calls

    /// Stores a new call. Throws a unique violation (SQLSTATE 23505) when the id is taken.
    public func insert(_ call: CallRecord) throws {
        try db.query(
            """
            INSERT INTO calls (\(Self.columns))
            VALUES ($1, $2, $3, $4, $5, $6::bigint, $7::bigint, $8, $9, $10::bigint, $11::bigint, $12::bigint, $13::bigint,
                    $14::bigint, $15)
            """,
            [call.call.rawValue, call.room.rawValue, call.agentID, call.metadata, call.dynamicVariables, Self.text(call.meterLimitS),
             Self.text(call.meterWarningS), call.state.rawValue, call.endReason, String(call.createdMs), String(call.expiresMs),
             Self.text(call.joinedMs), Self.text(call.endedMs), Self.text(call.maxPeers), call.node])
    }

    public func find(_ call: CallID) throws -> CallRecord? {
        try db.query("SELECT \(Self.columns) FROM calls WHERE call_id = $1", [call.rawValue]).rows.first.map(Self.record)
    }

    /// The newest call of `room` that has not ended.
    public func live(room: RoomID) throws -> CallRecord? {
        try db.query(
            "SELECT \(Self.columns) FROM calls WHERE room_id = $1 AND state <> 'ended' ORDER BY created_ms DESC, call_id DESC LIMIT 1",
            [room.rawValue]).rows.first.map(Self.record)
    }

    /// `CallRepository.markJoined`: a read first, since nearly every join finds nothing to mark.
    public func markJoined(room: RoomID, nowMs: Int64, createdAfterMs: Int64) throws -> [CallID] {
        let registered = try db.query(
            "SELECT 1 FROM calls WHERE room_id = $1 AND state = 'registered' AND created_ms > $2::bigint LIMIT 1",
            [room.rawValue, String(createdAfterMs)])
        guard !registered.isEmpty else { return [] }
        return try db.query(
            """
            UPDATE calls SET state = 'ongoing', joined_ms = $2::bigint
            WHERE room_id = $1 AND state = 'registered' AND created_ms > $3::bigint
            RETURNING call_id
            """,
            [room.rawValue, String(nowMs), String(createdAfterMs)]).rows.map { CallID($0[0] ?? "") }.sorted { $0.rawValue < $1.rawValue }
    }

    /// `CallRepository.expireUnjoined`.
    public func expireUnjoined(createdAtOrBeforeMs: Int64, nowMs: Int64, reason: String) throws -> [CallRecord] {
        try db.query(
            """
            UPDATE calls SET state = 'ended', end_reason = $3, ended_ms = $2::bigint
            WHERE state = 'registered' AND created_ms <= $1::bigint
            RETURNING \(Self.columns)
            """,
            [String(createdAtOrBeforeMs), String(nowMs), reason]).rows.map(Self.record).sorted { $0.call.rawValue < $1.call.rawValue }
    }

    /// `CallRepository.endLive`.
    public func endLive(room: RoomID, nowMs: Int64, reason: String) throws -> [CallID] {
        try end(room: room, nowMs: nowMs, reason: reason, states: "state <> 'ended'")
    }

    /// `CallRepository.endOngoing`, of the calls `node` created (nil: any node's).
    public func endOngoing(room: RoomID, nowMs: Int64, reason: String, createdBy node: String? = nil) throws -> [CallID] {
        guard let node else { return try end(room: room, nowMs: nowMs, reason: reason, states: "state = 'ongoing'") }
        return try end(room: room, nowMs: nowMs, reason: reason, states: "state = 'ongoing' AND node_id = $4", node)
    }

    private func end(room: RoomID, nowMs: Int64, reason: String, states: String, _ node: String? = nil) throws -> [CallID] {
        try db.query(
            """
            UPDATE calls SET state = 'ended', end_reason = $3, ended_ms = $2::bigint
            WHERE room_id = $1 AND \(states)
            RETURNING call_id
            """,
            [room.rawValue, String(nowMs), reason] + (node.map { [$0] } ?? [])).rows.map { CallID($0[0] ?? "") }
            .sorted { $0.rawValue < $1.rawValue }
    }

    // MARK: stats

    /// `CallStatsRepository.insert`, in the caller's transaction.
    public func insertStats(_ drafts: [StatsDraft]) throws -> Int {
        var liveCall: [RoomID: CallID?] = [:]
        var stored = 0
        for draft in drafts {
            let call: CallID
            if let named = draft.call {
                call = named
            } else {
                if liveCall[draft.room] == nil { liveCall[draft.room] = .some(try live(room: draft.room)?.call) }
                guard let found = liveCall[draft.room] ?? nil else { continue }
                call = found
            }
            let sample = draft.sample
            try db.query(
                """
                INSERT INTO call_stats (call_id, room_id, peer_id, ts_ms, rtt_ms, jitter_ms, packet_loss, bitrate_kbps)
                VALUES ($1, $2, $3, $4::bigint, $5::double precision, $6::double precision, $7::double precision, $8::double precision)
                """,
                [call.rawValue, draft.room.rawValue, draft.peer.rawValue, String(draft.timestampMs), Self.text(sample.rttMs),
                 Self.text(sample.jitterMs), Self.text(sample.packetLoss), Self.text(sample.bitrateKbps)])
            stored += 1
        }
        return stored
    }

    /// `CallStatsRepository.report`, in the caller's transaction (one snapshot with REPEATABLE READ).
    public func report(call: CallID) throws -> CallStatsReport {
        let samples = try db.query(
            """
            SELECT room_id, peer_id, ts_ms, rtt_ms, jitter_ms, packet_loss, bitrate_kbps FROM call_stats
            WHERE call_id = $1 ORDER BY peer_id COLLATE "C", ts_ms, id
            """, [call.rawValue]).rows.map { row in
                StatsRecord(call: call, room: RoomID(row[0] ?? ""), peer: PeerID(row[1] ?? ""), timestampMs: Int64(row[2] ?? "") ?? 0,
                            sample: StatsSample(rttMs: Self.double(row[3]), jitterMs: Self.double(row[4]),
                                                packetLoss: Self.double(row[5]), bitrateKbps: Self.double(row[6])))
            }
        let byPeer = try db.query(
            "\(Self.aggregateSelect), peer_id FROM call_stats WHERE call_id = $1 GROUP BY peer_id ORDER BY peer_id COLLATE \"C\"",
            [call.rawValue]).rows.map { (PeerID($0[6] ?? ""), Self.aggregate($0)) }
        let overall = try db.query("\(Self.aggregateSelect) FROM call_stats WHERE call_id = $1", [call.rawValue]).rows.first
            .map(Self.aggregate) ?? StatsAggregate(samples: 0)
        let grouped = Dictionary(grouping: samples, by: \.peer)
        return CallStatsReport(call: call, peers: byPeer.map { PeerStats(peer: $0.0, samples: grouped[$0.0] ?? [], aggregate: $0.1) },
                               overall: overall)
    }

    // avg and max skip NULLs and give NULL over no values, as in SQLite. PostgreSQL 12 and later
    // print a float8 as the shortest text that reads back exactly, so a value reads back as stored.
    private static let aggregateSelect =
        "SELECT count(*), avg(rtt_ms), max(rtt_ms), avg(jitter_ms), max(packet_loss), avg(bitrate_kbps)"

    private static func aggregate(_ row: [String?]) -> StatsAggregate {
        StatsAggregate(samples: Int(row[0] ?? "") ?? 0, avgRTTMs: double(row[1]), maxRTTMs: double(row[2]),
                       avgJitterMs: double(row[3]), maxPacketLoss: double(row[4]), avgBitrateKbps: double(row[5]))
    }

    // MARK: meters

    /// `MeterRepository.save`: `started_ms` keeps its first value and `elapsed_ms` never goes back.
    public func saveMeter(_ meter: MeterRecord) throws {
        try db.query(
            """
            INSERT INTO meters (room_id, started_ms, elapsed_ms, limit_s, warning_s, state)
            VALUES ($1, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6)
            ON CONFLICT (room_id) DO UPDATE SET
                elapsed_ms = greatest(meters.elapsed_ms, excluded.elapsed_ms), limit_s = excluded.limit_s,
                warning_s = excluded.warning_s, state = excluded.state
            """,
            [meter.room.rawValue, String(meter.startedMs), String(meter.elapsedMs), String(meter.limitS), String(meter.warningS),
             meter.state.rawValue])
    }

    public func findMeter(room: RoomID) throws -> MeterRecord? {
        try db.query("SELECT started_ms, elapsed_ms, limit_s, warning_s, state FROM meters WHERE room_id = $1", [room.rawValue])
            .rows.first.map { row in
                MeterRecord(room: room, startedMs: Int64(row[0] ?? "") ?? 0, elapsedMs: Int64(row[1] ?? "") ?? 0,
                            limitS: Int64(row[2] ?? "") ?? 0, warningS: Int64(row[3] ?? "") ?? 0,
                            state: MeterRecord.State(rawValue: row[4] ?? "") ?? .ended)
            }
    }

    public func deleteMeter(room: RoomID) throws {
        try db.query("DELETE FROM meters WHERE room_id = $1", [room.rawValue])
    }

    // MARK: values

    private static func text(_ value: Int64?) -> String? { value.map(String.init) }

    private static func text(_ value: Double?) -> String? { value.map { "\($0)" } }

    private static func double(_ text: String?) -> Double? { text.flatMap(Double.init) }

    private static func record(_ row: [String?]) -> CallRecord {
        func int(_ index: Int) -> Int64? { row[index].flatMap { Int64($0) } }
        return CallRecord(
            call: CallID(row[0] ?? ""), room: RoomID(row[1] ?? ""), agentID: row[2], metadata: row[3], dynamicVariables: row[4],
            meterLimitS: int(5), meterWarningS: int(6), state: CallState(rawValue: row[7] ?? "") ?? .ended, endReason: row[8],
            createdMs: int(9) ?? 0, expiresMs: int(10) ?? 0, joinedMs: int(11), endedMs: int(12), maxPeers: int(13), node: row[14])
    }
}

extension PostgresChatStore: CallPersistence {
    public func createCall(_ call: CallRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        // Not repeated after a lost connection: the insert may have committed.
        submit(completion, mayRepeat: false) { db in
            try db.transaction {
                try PostgresCallRepository(db: db).insert(call)
                try PostgresCallRepository(db: db).deleteMeter(room: call.room)
            }
        }
    }

    public func call(_ id: CallID, completion: @escaping @Sendable (Result<CallRecord?, StoreError>) -> Void) {
        submit(completion) { try PostgresCallRepository(db: $0).find(id) }
    }

    public func callStats(_ id: CallID, completion: @escaping @Sendable (Result<CallStatsPage, StoreError>) -> Void) {
        submit(completion) { db in
            try db.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") {
                let calls = PostgresCallRepository(db: db)
                return CallStatsPage(call: try calls.find(id), report: try calls.report(call: id))
            }
        }
    }

    public func markCallsJoined(room: RoomID, nowMs: Int64, createdAfterMs: Int64,
                                completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        submit(completion) { try PostgresCallRepository(db: $0).markJoined(room: room, nowMs: nowMs, createdAfterMs: createdAfterMs) }
    }

    public func endOngoingCalls(room: RoomID, nowMs: Int64, reason: String, createdBy node: String?,
                                completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        submit(completion) { try PostgresCallRepository(db: $0).endOngoing(room: room, nowMs: nowMs, reason: reason, createdBy: node) }
    }

    public func endLiveCalls(room: RoomID, nowMs: Int64, reason: String,
                             completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        submit(completion) { try PostgresCallRepository(db: $0).endLive(room: room, nowMs: nowMs, reason: reason) }
    }

    public func expireUnjoinedCalls(createdAtOrBeforeMs: Int64, nowMs: Int64, reason: String,
                                    completion: @escaping @Sendable (Result<[CallRecord], StoreError>) -> Void) {
        submit(completion) {
            try PostgresCallRepository(db: $0).expireUnjoined(createdAtOrBeforeMs: createdAtOrBeforeMs, nowMs: nowMs, reason: reason)
        }
    }

    public func storeStats(_ drafts: [StatsDraft], completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        // Not repeated after a lost connection: the samples may have committed.
        submit(completion, mayRepeat: false) { db in
            guard !drafts.isEmpty else { return 0 }
            return try db.transaction { try PostgresCallRepository(db: db).insertStats(drafts) }
        }
    }

    public func meterSource(room: RoomID, completion: @escaping @Sendable (Result<MeterSource, StoreError>) -> Void) {
        submit(completion) { db in
            let calls = PostgresCallRepository(db: db)
            return MeterSource(saved: try calls.findMeter(room: room), liveCall: try calls.live(room: room))
        }
    }

    public func saveMeter(_ meter: MeterRecord, nowMs: Int64, endReason: String,
                          completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        submit(completion) { db in
            try db.transaction {
                let calls = PostgresCallRepository(db: db)
                try calls.saveMeter(meter)
                if meter.state == .ended { _ = try calls.endLive(room: meter.room, nowMs: nowMs, reason: endReason) }
            }
        }
    }
}
