/// A consultation meter: a time budget for a room (a call's `meter.limit_s`). It counts only while
/// at least two participants are present, so it starts when the second one joins, pauses when the
/// room drops back to one, and resumes where it stopped, also after a server restart (the hub asks
/// for every state to be persisted and the service loads it back into a fresh `Meter`).
///
/// Pure and clock-free like the hub: every call takes `now`. The hub drives it
/// (`Hub.handle(.attachMeter…)`, joins, leaves, ticks) and turns what it returns into `meter` frames,
/// `storeMeter` effects and, at the limit, closes with `CloseCode.consultationEnded`.
public struct Meter: Sendable, Equatable {
    /// What the `meter` frame's `state` says. Only moves forward: running → warning → ended.
    public enum State: String, Sendable, Equatable, CaseIterable {
        case running, warning, ended
    }

    public let limitMs: Millis
    /// Remaining time at (or below) which the state turns to `warning`.
    public let warningMs: Millis
    /// How often a counting meter is announced between state changes.
    public let intervalMs: Millis
    public private(set) var state: State
    /// When the meter first started counting; nil until the second participant joins.
    public private(set) var startedAt: Millis?
    /// Time counted by earlier runs (before the last pause, or before a restart).
    private var countedMs: Millis
    /// Start of the current run; nil while paused.
    private var runningSince: Millis?
    private var lastAnnouncedAt: Millis = 0

    /// A meter as configured (`elapsedMs` 0, never started), or as persisted (`elapsedMs`,
    /// `startedAt` and `state` from the store). It is paused until `resume`.
    public init(limitMs: Millis, warningMs: Millis, intervalMs: Millis, elapsedMs: Millis = 0, startedAt: Millis? = nil,
                state: State = .running)
    {
        self.limitMs = max(1, limitMs)
        self.warningMs = max(0, warningMs)
        self.intervalMs = max(1, intervalMs)
        self.countedMs = min(max(0, elapsedMs), self.limitMs)
        self.startedAt = startedAt
        self.state = state
    }

    /// Counting right now.
    public var isRunning: Bool { runningSince != nil }

    /// Time counted up to `now`, at most the limit.
    public func elapsed(at now: Millis) -> Millis {
        guard let runningSince else { return countedMs }
        return min(limitMs, countedMs + max(0, now - runningSince))
    }

    /// The meter as announced and persisted at `now`.
    public func snapshot(at now: Millis) -> MeterSnapshot {
        MeterSnapshot(state: state, elapsedMs: elapsed(at: now), limitMs: limitMs, warningMs: warningMs,
                      startedAt: startedAt ?? now)
    }

    /// Starts or resumes counting (a second participant is present). Returns the snapshot to
    /// announce, which may already be `warning` or `ended` for a meter persisted near its limit;
    /// nil when it is already counting or has ended.
    public mutating func resume(now: Millis) -> MeterSnapshot? {
        guard runningSince == nil, state != .ended else { return nil }
        if startedAt == nil { startedAt = now }
        runningSince = now
        lastAnnouncedAt = now
        _ = advanceState(now: now)
        return snapshot(at: now)
    }

    /// Stops counting (fewer than two participants). Returns the snapshot to persist; nil when it
    /// was not counting.
    public mutating func pause(now: Millis) -> MeterSnapshot? {
        guard runningSince != nil else { return nil }
        countedMs = elapsed(at: now)
        runningSince = nil
        return snapshot(at: now)
    }

    /// Time passed: returns the snapshot to announce when the state changed (warning, ended) or an
    /// interval has passed since the last announcement; nil otherwise.
    public mutating func advance(now: Millis) -> MeterSnapshot? {
        guard runningSince != nil else { return nil }
        if advanceState(now: now) || now - lastAnnouncedAt >= intervalMs {
            lastAnnouncedAt = now
            return snapshot(at: now)
        }
        return nil
    }

    /// Moves `state` forward to what the elapsed time says; at the limit the meter stops for good.
    /// Returns whether it changed.
    private mutating func advanceState(now: Millis) -> Bool {
        let elapsed = elapsed(at: now)
        let target: State = elapsed >= limitMs ? .ended : (limitMs - elapsed <= warningMs ? .warning : .running)
        guard Self.rank(target) > Self.rank(state) else { return false }
        state = target
        if target == .ended {
            countedMs = limitMs
            runningSince = nil
        }
        return true
    }

    private static func rank(_ state: State) -> Int {
        switch state {
        case .running: 0
        case .warning: 1
        case .ended: 2
        }
    }
}

/// A meter at one instant: the `meter` frame's payload and the row the store keeps.
public struct MeterSnapshot: Sendable, Equatable {
    public var state: Meter.State
    public var elapsedMs: Millis
    public var limitMs: Millis
    public var warningMs: Millis
    public var startedAt: Millis

    public init(state: Meter.State, elapsedMs: Millis, limitMs: Millis, warningMs: Millis, startedAt: Millis) {
        self.state = state
        self.elapsedMs = elapsedMs
        self.limitMs = limitMs
        self.warningMs = warningMs
        self.startedAt = startedAt
    }

    /// Whole seconds counted, rounded down.
    public var elapsedSeconds: Int64 { elapsedMs / 1_000 }
    /// Whole seconds left, rounded up, so a counting meter never shows 0 left; with a limit in whole
    /// seconds `elapsed_s + remaining_s == limit_s`.
    public var remainingSeconds: Int64 { (max(0, limitMs - elapsedMs) + 999) / 1_000 }
    public var limitSeconds: Int64 { (limitMs + 999) / 1_000 }

    /// `{"type":"meter","payload":{"state":…,"elapsed_s":…,"limit_s":…,"remaining_s":…}}`.
    public var frame: Frame {
        Frame(.meter, payload: ["state": .string(state.rawValue), "elapsed_s": .int(elapsedSeconds),
                                "limit_s": .int(limitSeconds), "remaining_s": .int(remainingSeconds)])
    }
}

// MARK: - Hub hooks

/// The meter's part of the hub: which inputs move it and what the room hears. Kept here, next to
/// `Meter`, so Hub.swift only calls in at join, leave, tick and `attachMeter`.
extension Hub {
    /// The room's meter, if it has one.
    public func meter(of room: RoomID) -> Meter? { rooms[room]?.meter }

    mutating func attachMeter(_ meter: Meter, to roomID: RoomID, now: Millis) -> [HubEffect] {
        guard let room = rooms[roomID], room.meter == nil else { return [] }
        rooms[roomID]?.meter = meter
        meteredRooms.insert(roomID)
        if meter.state == .ended {
            // Spent before (persisted): whoever is in the room hears so and leaves. Nothing new to store.
            return endConsultation(in: roomID, meter.snapshot(at: now), persist: false)
        }
        return resumeMeterIfPaired(roomID, now: now)
    }

    /// After `connection` joined (the room is stored): the second participant starts or resumes the
    /// meter; a later joiner gets the current value; nobody may stay once it has ended.
    mutating func meterAfterJoin(room roomID: RoomID, connection: ConnectionID, now: Millis) -> [HubEffect] {
        guard let meter = rooms[roomID]?.meter else { return [] }
        if meter.state == .ended {
            return [.send([connection], meter.snapshot(at: now).frame), .close(connection, .consultationEnded)]
        }
        if meter.isRunning { return [.send([connection], meter.snapshot(at: now).frame)] }
        return resumeMeterIfPaired(roomID, now: now)
    }

    /// After a leave, with `room` as it is now (possibly empty and already removed): fewer than two
    /// participants pause the meter, and the paused state is persisted.
    mutating func meterAfterLeave(_ roomID: RoomID, remaining room: Room, now: Millis) -> [HubEffect] {
        if room.members.isEmpty { meteredRooms.remove(roomID) }
        guard var meter = room.meter, room.members.count < 2, let snapshot = meter.pause(now: now) else { return [] }
        if !room.members.isEmpty { rooms[roomID]?.meter = meter }
        return [.storeMeter(roomID, snapshot)]
    }

    /// The current time of every counting meter, to persist (`.storeMeter`) before the process
    /// stops while its rooms stay held (a single node's restart): the next start resumes each
    /// meter from it instead of from its last announcement. Nothing is announced or changed.
    public func persistMeters(now: Millis) -> [HubEffect] {
        meteredRooms.sorted().compactMap { roomID in
            guard let meter = rooms[roomID]?.meter, meter.isRunning else { return nil }
            return .storeMeter(roomID, meter.snapshot(at: now))
        }
    }

    /// Every tick: announces meters whose state changed or whose interval passed; ends spent ones.
    mutating func advanceMeters(now: Millis) -> [HubEffect] {
        guard !meteredRooms.isEmpty else { return [] }
        var effects: [HubEffect] = []
        for roomID in meteredRooms.sorted() {
            guard let snapshot = rooms[roomID]?.meter?.advance(now: now) else { continue }
            effects += snapshot.state == .ended ? endConsultation(in: roomID, snapshot) : announce(snapshot, in: roomID)
        }
        return effects
    }

    private mutating func resumeMeterIfPaired(_ roomID: RoomID, now: Millis) -> [HubEffect] {
        guard let room = rooms[roomID], room.members.count >= 2, let snapshot = rooms[roomID]?.meter?.resume(now: now) else {
            return []
        }
        return snapshot.state == .ended ? endConsultation(in: roomID, snapshot) : announce(snapshot, in: roomID)
    }

    private func connections(in roomID: RoomID) -> [ConnectionID] {
        rooms[roomID]?.connections ?? []
    }

    private func announce(_ snapshot: MeterSnapshot, in roomID: RoomID) -> [HubEffect] {
        [.send(connections(in: roomID), snapshot.frame), .storeMeter(roomID, snapshot)]
    }

    /// `ended` to everyone, then every connection closed with 4410 (terminal: SDKs do not reconnect).
    private func endConsultation(in roomID: RoomID, _ snapshot: MeterSnapshot, persist: Bool = true) -> [HubEffect] {
        let targets = connections(in: roomID)
        var effects: [HubEffect] = [.send(targets, snapshot.frame)]
        if persist { effects.append(.storeMeter(roomID, snapshot)) }
        return effects + targets.map { .close($0, .consultationEnded) }
    }
}
