import CallingCore

/// A client `stats` frame on its way to the store.
public struct StatsDraft: Sendable, Equatable {
    public var room: RoomID
    /// The call named by the sender's token; nil means "the room's live call, if it has one".
    public var call: CallID?
    public var peer: PeerID
    public var sample: StatsSample
    public var timestampMs: Int64

    public init(room: RoomID, call: CallID?, peer: PeerID, sample: StatsSample, timestampMs: Int64) {
        self.room = room
        self.call = call
        self.peer = peer
        self.sample = sample
        self.timestampMs = timestampMs
    }
}

/// One stored sample.
public struct StatsRecord: Sendable, Equatable {
    public var call: CallID
    public var room: RoomID
    public var peer: PeerID
    public var timestampMs: Int64
    public var sample: StatsSample

    public init(call: CallID, room: RoomID, peer: PeerID, timestampMs: Int64, sample: StatsSample) {
        self.call = call
        self.room = room
        self.peer = peer
        self.timestampMs = timestampMs
        self.sample = sample
    }
}

/// Aggregates over a set of samples. Each average and maximum skips samples without that field and
/// is nil when no sample had it.
public struct StatsAggregate: Sendable, Equatable {
    public var samples: Int
    public var avgRTTMs: Double?
    public var maxRTTMs: Double?
    public var avgJitterMs: Double?
    public var maxPacketLoss: Double?
    public var avgBitrateKbps: Double?

    public init(samples: Int, avgRTTMs: Double? = nil, maxRTTMs: Double? = nil, avgJitterMs: Double? = nil,
                maxPacketLoss: Double? = nil, avgBitrateKbps: Double? = nil)
    {
        self.samples = samples
        self.avgRTTMs = avgRTTMs
        self.maxRTTMs = maxRTTMs
        self.avgJitterMs = avgJitterMs
        self.maxPacketLoss = maxPacketLoss
        self.avgBitrateKbps = avgBitrateKbps
    }
}

/// One peer's samples in a call, oldest first, and their aggregate.
public struct PeerStats: Sendable, Equatable {
    public var peer: PeerID
    public var samples: [StatsRecord]
    public var aggregate: StatsAggregate

    public init(peer: PeerID, samples: [StatsRecord], aggregate: StatsAggregate) {
        self.peer = peer
        self.samples = samples
        self.aggregate = aggregate
    }
}

/// Everything stored for one call: samples and aggregates per peer, and aggregates over the call.
public struct CallStatsReport: Sendable, Equatable {
    public var call: CallID
    /// In order of peer id.
    public var peers: [PeerStats]
    public var overall: StatsAggregate

    public init(call: CallID, peers: [PeerStats], overall: StatsAggregate) {
        self.call = call
        self.peers = peers
        self.overall = overall
    }
}

/// The `call_stats` SQL, run synchronously on a connection (through `ChatStore.perform` in the server).
public struct CallStatsRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Stores `drafts` in one transaction. A draft without a call goes to its room's live call (see
    /// `CallRepository.live`); one whose room has none is dropped. Returns how many were stored.
    @discardableResult
    public func insert(_ drafts: [StatsDraft]) throws -> Int {
        guard !drafts.isEmpty else { return 0 }
        return try db.transaction(.immediate) {
            var liveCall: [RoomID: CallID?] = [:]
            var stored = 0
            for draft in drafts {
                let call: CallID
                if let named = draft.call {
                    call = named
                } else {
                    if liveCall[draft.room] == nil {
                        liveCall[draft.room] = .some(try CallRepository(db: db).live(room: draft.room)?.call)
                    }
                    guard let found = liveCall[draft.room] ?? nil else { continue }
                    call = found
                }
                let sample = draft.sample
                try db.run(
                    """
                    INSERT INTO call_stats (call_id, room_id, peer_id, ts_ms, rtt_ms, jitter_ms, packet_loss, bitrate_kbps)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                    """,
                    [.text(call.rawValue), .text(draft.room.rawValue), .text(draft.peer.rawValue), .integer(draft.timestampMs),
                     Self.real(sample.rttMs), Self.real(sample.jitterMs), Self.real(sample.packetLoss), Self.real(sample.bitrateKbps)]
                )
                stored += 1
            }
            return stored
        }
    }

    /// Samples of `call`, by peer id, oldest first.
    public func samples(call: CallID) throws -> [StatsRecord] {
        try db.query(
            """
            SELECT room_id, peer_id, ts_ms, rtt_ms, jitter_ms, packet_loss, bitrate_kbps FROM call_stats
            WHERE call_id = ?1 ORDER BY peer_id, ts_ms, rowid
            """,
            [.text(call.rawValue)]
        ) { row in
            StatsRecord(call: call, room: RoomID(row.text(0)), peer: PeerID(row.text(1)), timestampMs: row.int64(2),
                        sample: StatsSample(rttMs: Self.optionalDouble(row, 3), jitterMs: Self.optionalDouble(row, 4),
                                            packetLoss: Self.optionalDouble(row, 5), bitrateKbps: Self.optionalDouble(row, 6)))
        }
    }

    /// Samples and aggregates of `call`, read in one snapshot.
    public func report(call: CallID) throws -> CallStatsReport {
        try db.transaction(.deferred) {
            let all = try samples(call: call)
            let byPeer = try db.query(
                "\(Self.aggregateSelect), peer_id FROM call_stats WHERE call_id = ?1 GROUP BY peer_id ORDER BY peer_id",
                [.text(call.rawValue)]
            ) { (PeerID($0.text(6)), Self.aggregate($0)) }
            let overall = try db.queryFirst("\(Self.aggregateSelect) FROM call_stats WHERE call_id = ?1",
                                            [.text(call.rawValue)], row: Self.aggregate) ?? StatsAggregate(samples: 0)
            let grouped = Dictionary(grouping: all, by: \.peer)
            return CallStatsReport(
                call: call, peers: byPeer.map { PeerStats(peer: $0.0, samples: grouped[$0.0] ?? [], aggregate: $0.1) }, overall: overall)
        }
    }

    // SQLite's avg/max ignore NULLs and return NULL over no values, which is the contract of StatsAggregate.
    private static let aggregateSelect =
        "SELECT count(*), avg(rtt_ms), max(rtt_ms), avg(jitter_ms), max(packet_loss), avg(bitrate_kbps)"

    private static func aggregate(_ row: Statement) -> StatsAggregate {
        StatsAggregate(samples: Int(row.int64(0)), avgRTTMs: optionalDouble(row, 1), maxRTTMs: optionalDouble(row, 2),
                       avgJitterMs: optionalDouble(row, 3), maxPacketLoss: optionalDouble(row, 4),
                       avgBitrateKbps: optionalDouble(row, 5))
    }

    private static func optionalDouble(_ row: Statement, _ column: Int32) -> Double? {
        row.isNull(column) ? nil : row.double(column)
    }

    private static func real(_ value: Double?) -> SQLiteValue {
        value.map(SQLiteValue.real) ?? .null
    }
}
