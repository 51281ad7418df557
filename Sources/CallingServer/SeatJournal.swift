import CallingCore
import CallingStore

/// The rooms' live seats as the `seats` table remembers them (single node; a cluster keeps its
/// seats in Redis): the service thread records each seat that starts or ends, and the changes are
/// written in one transaction per `tick_ms` (`flush`), never on a frame's path. What a restarted
/// server seats again in their grace (docs/protocol.md, "Across a server restart").
final class SeatJournal: Sendable {
    private let store: ChatStore
    private let logger: Logger
    /// Changes not yet handed to the store, in order. Behind a lock because the stop flushes the
    /// last ones from the main thread once the service loop is done (or given up on).
    private let pending = Locked<[SeatChange]>([])

    init(store: ChatStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    func record(_ change: SeatChange) {
        pending.withLock { $0.append(change) }
    }

    /// Hands the recorded changes to the store's queue, in one transaction. Any thread.
    func flush() {
        let changes = pending.withLock { pending -> [SeatChange] in
            defer { pending = [] }
            return pending
        }
        guard !changes.isEmpty else { return }
        store.perform({ db in try SeatRepository(db: db).apply(changes) }) { [logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("seats not remembered", ["changes": "\(changes.count)", "error": "\(error)"])
        }
    }

    /// The seats remembered by the previous run. Blocks on the store: start-up only.
    func remembered() throws -> [SeatRecord] {
        try store.sync { try SeatRepository(db: $0).all() }
    }
}
