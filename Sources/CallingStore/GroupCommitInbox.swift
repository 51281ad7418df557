import CallingLogging
import Dispatch

/// The admission half of group commit, shared by the SQLite and PostgreSQL chat stores.
///
/// A draft handed to `admit` joins a pending list; the first draft after a drain schedules the next
/// one on the store's queue, and every draft that arrives before that drain starts rides along in
/// its batch. So under load one transaction carries many chats, while a lone chat still goes out at
/// once. Taking the lock costs a few instructions: `admit` never blocks the service thread on disk.
package final class GroupCommitInbox<Item: Sendable>: Sendable {
    private struct State: Sendable {
        var pending: [Item] = []
        /// A drain block is on the queue and has not yet taken its batch: a new item will be in it, so
        /// no second drain needs scheduling.
        var drainScheduled = false
        /// When the scheduled drain was asked for (`DispatchTime` uptime): what its batch's oldest
        /// item has waited by the time the drain takes it.
        var drainScheduledAt: UInt64 = 0
        var closed = false
    }

    private let state = Locked(State())

    package init() {}

    /// What `admit` did with an item.
    package enum Admission: Sendable, Equatable {
        /// Pending; a drain that will take it is already scheduled.
        case queued
        /// Pending, and the caller must schedule the drain (once, on its queue).
        case queuedAndSchedule
        /// Closed: the item was not taken.
        case refused
    }

    package func admit(_ item: Item) -> Admission {
        state.withLock { state -> Admission in
            guard !state.closed else { return .refused }
            state.pending.append(item)
            if state.drainScheduled { return .queued }
            state.drainScheduled = true
            state.drainScheduledAt = DispatchTime.now().uptimeNanoseconds
            return .queuedAndSchedule
        }
    }

    /// Everything pending, for the drain that was scheduled, and how long that drain waited since it
    /// was asked for (the oldest item's wait, for `ChatStoreMetrics.queueWait`): items admitted from
    /// now on schedule a new drain.
    package func takeForDrain() -> (items: [Item], waitedNanoseconds: UInt64) {
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { state -> (items: [Item], waitedNanoseconds: UInt64) in
            state.drainScheduled = false
            let taken = state.pending
            state.pending = []
            return (taken, now &- state.drainScheduledAt)
        }
    }

    /// True once `close` ran.
    package var isClosed: Bool { state.withLock { $0.closed } }

    /// Refuses every later item. What is pending stays, for `takeRemaining`.
    package func close() {
        state.withLock { $0.closed = true }
    }

    /// Everything still pending, at close: a drain block still queued will then find nothing.
    package func takeRemaining() -> [Item] {
        state.withLock { state -> [Item] in
            let taken = state.pending
            state.pending = []
            return taken
        }
    }
}
