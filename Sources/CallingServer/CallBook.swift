import CallingCore
import CallingStore
import Foundation

/// The calls around the room protocol, which the rooms talk to: a join marks the room's registered
/// calls ongoing and gives the room its consultation meter, the last leave ends them, a meter that
/// runs out ends them, `stats` frames are written in batches, and the tick ends calls nobody joined
/// in time. The calls API (`CallsAPI`) only registers and reads calls; this is what every join,
/// leave and meter change calls into.
///
/// Service thread; every store access goes through `CallPersistence` (`context.calls`: the SQLite
/// store, or PostgreSQL with `database_url`, where a join's mark is a query on that store's queue)
/// and comes back through `context.post`, so the loop never waits on disk or network.
// @unchecked Sendable: all mutable state is touched only on the service thread. Store completions
// run on the store queue and capture `self` solely to hop back through `context.post`.
final class CallBook: @unchecked Sendable {
    /// The end reason of a call nobody joined within `call_join_window_seconds` (docs/protocol.md,
    /// "Call and session rules").
    static let notJoinedReason = "error_user_not_joined"
    /// The end reason of a call whose consultation meter ran out.
    static let consultationEndedReason = "consultation_ended"
    /// The end reason of an ongoing call whose room lost its last peer (docs/protocol.md, "Calls API").
    static let lastPeerLeftReason = "last_peer_left"

    let context: ServiceContext
    let store: any CallPersistence
    let config: ServerConfig
    let logger: Logger

    private var lastSweep: Millis = 0
    /// Rooms whose meter is being read from the store.
    private var meterLoads: Set<RoomID> = []
    private var sweepInFlight = false
    /// `stats` frames not yet written; flushed every tick in one transaction.
    private var pendingStats: [StatsDraft] = []
    /// A burst beyond this is written at once instead of waiting for the tick.
    private static let statsBatchLimit = 512

    init(context: ServiceContext, logger: Logger) {
        self.context = context
        self.store = context.calls
        self.config = context.config
        self.logger = logger
    }

    private var joinWindowMs: Millis { Millis(config.callJoinWindowSeconds) * 1_000 }

    // MARK: lifecycle hooks

    /// A peer finished joining `identity.room`: the room's registered calls become ongoing. When the
    /// room has no consultation meter yet (`needsMeter`), its saved or configured one is read and
    /// handed to `attachMeter` on the service thread. Service thread.
    func peerJoined(_ identity: PeerIdentity, now: Millis, needsMeter: Bool,
                    attachMeter: @escaping @Sendable (RoomID, Meter) -> Void) {
        let room = identity.room
        let windowStart = now - joinWindowMs
        store.markCallsJoined(room: room, nowMs: now, createdAfterMs: windowStart) { [logger] result in
            switch result {
            case .success(let calls):
                for call in calls { logger.info("call ongoing", ["call.id": call.rawValue, "room.id": room.rawValue]) }
            case .failure(let error):
                logger.error("call join not recorded", ["room.id": room.rawValue, "error": "\(error)"])
            }
        }
        if needsMeter { loadMeter(room: room, attach: attachMeter) }
    }

    /// The last seat of `room` ended (not by a server stop, whose peers come back to the restarted
    /// server): its ongoing calls end, so `GET /v1/calls/{id}` says `ended` and a session POST with
    /// the call's token answers 404 `call_not_found` instead of waiting for an agent. Service thread.
    func roomEmptied(_ room: RoomID, now: Millis) {
        // Every node sees the last leave of a room spanning several; the call's node ends it.
        store.endOngoingCalls(room: room, nowMs: now, reason: Self.lastPeerLeftReason, createdBy: context.nodeID) {
            [context, logger] result in
            switch result {
            case .success(let ended):
                for call in ended {
                    logger.info("call ended", ["call.id": call.rawValue, "room.id": room.rawValue, "reason": Self.lastPeerLeftReason])
                }
            case .failure(let error):
                logger.error("call end not recorded", ["room.id": room.rawValue, "error": "\(error)"])
                context.post { context.metrics.storeFailures += 1 }
            }
        }
    }

    // MARK: meters

    /// After a join: gives the room its consultation meter if it has none yet, from the `meters` row
    /// (a meter that ran before a restart) or else from the live call's `meter`. Service thread.
    private func loadMeter(room: RoomID, attach: @escaping @Sendable (RoomID, Meter) -> Void) {
        guard meterLoads.insert(room).inserted else { return }
        let intervalMs = Millis(config.meterIntervalSeconds) * 1_000
        let defaultWarningMs = Millis(config.meterWarningSeconds) * 1_000
        let node = context.nodeID
        store.meterSource(room: room) { [self] result in
            let meter = result.map { source -> Meter? in
                // In a cluster sharing the store every node reads the same call: its meter runs on
                // the node that created it only, which sends its frames to the other nodes' peers.
                if let owner = source.liveCall?.node, owner != node { return nil }
                if let saved = source.saved {
                    return Meter(limitMs: saved.limitS * 1_000, warningMs: saved.warningS * 1_000, intervalMs: intervalMs,
                                 elapsedMs: saved.elapsedMs, startedAt: saved.startedMs, state: Meter.State(saved.state))
                }
                guard let call = source.liveCall, let limit = call.meterLimitS else { return nil }
                return Meter(limitMs: limit * 1_000, warningMs: call.meterWarningS.map { $0 * 1_000 } ?? defaultWarningMs,
                             intervalMs: intervalMs)
            }
            context.post { [self] in
                meterLoads.remove(room)
                switch meter {
                case .success(let meter?): attach(room, meter)
                case .success(nil): break
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("meter not loaded", ["room.id": room.rawValue, "error": "\(error)"])
                }
            }
        }
    }

    /// Persists a meter the hub started, paused, announced or ended; an ended one also ends the
    /// room's live calls (`consultation_ended`). Service thread.
    func storeMeter(_ room: RoomID, _ snapshot: MeterSnapshot) {
        let record = MeterRecord(room: room, startedMs: snapshot.startedAt, elapsedMs: snapshot.elapsedMs,
                                 limitS: snapshot.limitSeconds, warningS: snapshot.warningMs / 1_000,
                                 state: MeterRecord.State(snapshot.state))
        let now = context.now()
        store.saveMeter(record, nowMs: now, endReason: Self.consultationEndedReason) { [context, logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("meter not stored", ["room.id": room.rawValue, "error": "\(error)"])
            context.post { context.metrics.storeFailures += 1 }
        }
    }

    /// A client `stats` frame (already range-checked by the decoder) for the analytics table; written
    /// with the next tick's batch. A sample from a peer whose token names no call goes to its room's
    /// live call, or nowhere when the room has none. Service thread.
    func storeStats(_ draft: StatsDraft) {
        pendingStats.append(draft)
        if pendingStats.count >= Self.statsBatchLimit { flushStats() }
    }

    /// Writes the buffered `stats` samples now (the tick does it too). Service thread.
    func flushStats() {
        guard !pendingStats.isEmpty else { return }
        let batch = pendingStats
        pendingStats = []
        store.storeStats(batch) { [context, logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("stats not stored", ["samples": "\(batch.count)", "error": "\(error)"])
            context.post { context.metrics.storeFailures += 1 }
        }
    }

    /// Every `tick_ms`: writes buffered stats; once a second, ends the calls nobody joined within the
    /// window. Service thread.
    func tick(now: Millis) {
        flushStats()
        guard now - lastSweep >= 1_000, !sweepInFlight else { return }
        lastSweep = now
        sweepInFlight = true
        let cutoff = now - joinWindowMs
        store.expireUnjoinedCalls(createdAtOrBeforeMs: cutoff, nowMs: now, reason: Self.notJoinedReason) { [self] result in
            context.post { [self] in
                sweepInFlight = false
                switch result {
                case .success(let ended):
                    for call in ended {
                        logger.info("call ended", ["call.id": call.call.rawValue, "room.id": call.room.rawValue,
                                                   "reason": Self.notJoinedReason])
                    }
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("call expiry sweep failed", ["error": "\(error)"])
                }
            }
        }
    }
}

extension Meter.State {
    init(_ state: MeterRecord.State) {
        switch state {
        case .running: self = .running
        case .warning: self = .warning
        case .ended: self = .ended
        }
    }
}

extension MeterRecord.State {
    init(_ state: Meter.State) {
        switch state {
        case .running: self = .running
        case .warning: self = .warning
        case .ended: self = .ended
        }
    }
}
