import CallingCore

/// What a join reads to give a room its consultation meter: the meter saved before (a restart),
/// else the room's live call, whose `meterLimitS` starts one.
public struct MeterSource: Sendable, Equatable {
    public var saved: MeterRecord?
    public var liveCall: CallRecord?

    public init(saved: MeterRecord?, liveCall: CallRecord?) {
        self.saved = saved
        self.liveCall = liveCall
    }
}

/// The calls of the Calls API and their state, their `stats` samples and the rooms' consultation
/// meters: the contract both the embedded SQLite store (`ChatStore`) and the shared PostgreSQL
/// store (CallingPostgres `PostgresChatStore`) keep, so that with a shared database a call created
/// through one node is read, joined and ended through any (`Tests/CallingStoreTests/CallPersistenceTests.swift`
/// holds both to it). The operations are the server's, each one transaction, with the semantics
/// of `CallRepository`, `CallStatsRepository` and `MeterRepository`.
///
/// Every operation returns at once; its completion runs on the store's own queue and must be quick.
public protocol CallPersistence: AnyObject, Sendable {
    /// Stores a new call and forgets its room's meter (a new call starts it afresh). A taken id
    /// fails with a constraint error.
    func createCall(_ call: CallRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    func call(_ id: CallID, completion: @escaping @Sendable (Result<CallRecord?, StoreError>) -> Void)

    /// The call (nil when unknown) and its samples' report, read in one snapshot.
    func callStats(_ id: CallID, completion: @escaping @Sendable (Result<CallStatsPage, StoreError>) -> Void)

    /// `CallRepository.markJoined`: asked on every join, so cheap when nothing changes.
    func markCallsJoined(room: RoomID, nowMs: Int64, createdAfterMs: Int64,
                         completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void)

    /// `CallRepository.endOngoing` (the room's last peer left), of the calls `node` created (nil:
    /// any node's). Every node of a cluster sees the last leave; only the call's node ends it, after
    /// what its own store queue holds before (a meter's end), as when the call was in its SQLite.
    /// A store that does not record nodes (SQLite, one node's) ends them all.
    func endOngoingCalls(room: RoomID, nowMs: Int64, reason: String, createdBy node: String?,
                         completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void)

    /// `CallRepository.endLive` (an admin ended the room).
    func endLiveCalls(room: RoomID, nowMs: Int64, reason: String,
                      completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void)

    /// `CallRepository.expireUnjoined` (nobody joined in time).
    func expireUnjoinedCalls(createdAtOrBeforeMs: Int64, nowMs: Int64, reason: String,
                             completion: @escaping @Sendable (Result<[CallRecord], StoreError>) -> Void)

    /// `CallStatsRepository.insert`: the number stored.
    func storeStats(_ drafts: [StatsDraft], completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)

    /// The room's saved meter and its live call.
    func meterSource(room: RoomID, completion: @escaping @Sendable (Result<MeterSource, StoreError>) -> Void)

    /// Saves the room's meter; an ended one also ends the room's live calls with `endReason`, in
    /// the same transaction.
    func saveMeter(_ meter: MeterRecord, nowMs: Int64, endReason: String,
                   completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)
}

/// A call and its stats report (`CallPersistence.callStats`).
public struct CallStatsPage: Sendable, Equatable {
    public var call: CallRecord?
    public var report: CallStatsReport

    public init(call: CallRecord?, report: CallStatsReport) {
        self.call = call
        self.report = report
    }
}

extension ChatStore: CallPersistence {
    public func createCall(_ call: CallRecord, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ db in
            try db.transaction(.immediate) {
                try CallRepository(db: db).insert(call)
                try MeterRepository(db: db).delete(room: call.room)
            }
        }, completion: completion)
    }

    public func call(_ id: CallID, completion: @escaping @Sendable (Result<CallRecord?, StoreError>) -> Void) {
        perform({ try CallRepository(db: $0).find(id) }, completion: completion)
    }

    public func callStats(_ id: CallID, completion: @escaping @Sendable (Result<CallStatsPage, StoreError>) -> Void) {
        perform({ db in
            CallStatsPage(call: try CallRepository(db: db).find(id), report: try CallStatsRepository(db: db).report(call: id))
        }, completion: completion)
    }

    public func markCallsJoined(room: RoomID, nowMs: Int64, createdAfterMs: Int64,
                                completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        perform({ try CallRepository(db: $0).markJoined(room: room, nowMs: nowMs, createdAfterMs: createdAfterMs) },
                completion: completion)
    }

    public func endOngoingCalls(room: RoomID, nowMs: Int64, reason: String, createdBy node: String?,
                                completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        perform({ try CallRepository(db: $0).endOngoing(room: room, nowMs: nowMs, reason: reason) }, completion: completion)
    }

    public func endLiveCalls(room: RoomID, nowMs: Int64, reason: String,
                             completion: @escaping @Sendable (Result<[CallID], StoreError>) -> Void) {
        perform({ try CallRepository(db: $0).endLive(room: room, nowMs: nowMs, reason: reason) }, completion: completion)
    }

    public func expireUnjoinedCalls(createdAtOrBeforeMs: Int64, nowMs: Int64, reason: String,
                                    completion: @escaping @Sendable (Result<[CallRecord], StoreError>) -> Void) {
        perform({ try CallRepository(db: $0).expireUnjoined(createdAtOrBeforeMs: createdAtOrBeforeMs, nowMs: nowMs, reason: reason) },
                completion: completion)
    }

    public func storeStats(_ drafts: [StatsDraft], completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        perform({ try CallStatsRepository(db: $0).insert(drafts) }, completion: completion)
    }

    public func meterSource(room: RoomID, completion: @escaping @Sendable (Result<MeterSource, StoreError>) -> Void) {
        perform({ db in
            MeterSource(saved: try MeterRepository(db: db).find(room: room), liveCall: try CallRepository(db: db).live(room: room))
        }, completion: completion)
    }

    public func saveMeter(_ meter: MeterRecord, nowMs: Int64, endReason: String,
                          completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ db in
            try db.transaction(.immediate) {
                try MeterRepository(db: db).save(meter)
                if meter.state == .ended {
                    try CallRepository(db: db).endLive(room: meter.room, nowMs: nowMs, reason: endReason)
                }
            }
        }, completion: completion)
    }
}
