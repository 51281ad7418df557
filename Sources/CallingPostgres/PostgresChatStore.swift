import CallingCore
import CallingStore
import Dispatch
import Foundation

/// Chat history in a PostgreSQL database that several calling-server processes share
/// (`database_url`). Implements `ChatPersistence` with the same guarantees as the SQLite `ChatStore`;
/// see that protocol.
///
/// Threading is ChatStore's: one connection, used only on the store's private serial queue; every
/// operation returns at once and completes on that queue, in submission order. Appends are group
/// committed the same way: one drain writes everything pending in one transaction (several past
/// `Options.maxBatchSize`), and acks each draft only after COMMIT returned, with
/// `synchronous_commit = on` for the session, so an acked row is in the server's WAL on disk.
///
/// When PostgreSQL is unreachable every operation fails at once with a retryable
/// `StoreError.server` (the chat sender gets an `unavailable` error frame and retries with the same
/// client_id); the store reconnects on the next operation, at most once per
/// `Options.reconnectIntervalMs`, so a down server costs each queued batch one failed connect, not
/// a timeout per message.
public final class PostgresChatStore: ChatPersistence, @unchecked Sendable {
    // @unchecked Sendable: `connection` and `lastReconnectNs` are touched only on `queue` (blocks
    // submitted with `queue.async`, and `sync`/`close` through `queue.sync` or inline when already on
    // it); `appends` (a `GroupCommitInbox`) and `counters`, the only state touched from callers'
    // threads, are behind locks.
    // Everything else is an immutable `let`.

    public struct Options: Sendable, Equatable {
        /// Most appends written in one transaction.
        public var maxBatchSize: Int
        /// Apply pending PostgreSQL migrations in `open`.
        public var migrateOnOpen: Bool
        /// Least time between two reconnect attempts while the server is unreachable.
        public var reconnectIntervalMs: Int

        public init(maxBatchSize: Int = 1_000, migrateOnOpen: Bool = true, reconnectIntervalMs: Int = 500) {
            self.maxBatchSize = maxBatchSize
            self.migrateOnOpen = migrateOnOpen
            self.reconnectIntervalMs = reconnectIntervalMs
        }
    }

    /// Largest page `history` returns, as in `ChatStore`.
    public static let maxHistoryLimit = 100_000

    /// Names of the migrations `open` applied (empty when the schema was already current).
    public let migrationsAppliedAtOpen: [String]

    private let queue = DispatchQueue(label: "calling.store.postgres")
    private let onQueueKey = DispatchSpecificKey<Bool>()
    private let options: Options
    /// Used only on `queue`.
    private let connection: PostgresConnection
    /// Uptime of the last reconnect attempt; used only on `queue`.
    private var lastReconnectNs: UInt64 = 0
    private let appends = GroupCommitInbox<PendingAppend>()
    private let counters = Locked(ChatStoreMetrics())
    /// Run on `queue` after each batch's completions (`afterAppendCompletions`).
    private let appendsCompleted = AfterAppendCompletions()
    /// What the most recent operation learnt of the server, and when the one under way started:
    /// written on `queue`, read by `/healthz` on the service thread.
    private let health = Locked(Health())

    private struct Health {
        var unreachable: String?
        var busySinceNs: UInt64?
    }

    private struct PendingAppend: Sendable {
        var draft: ChatDraft
        var completion: @Sendable (Result<ChatAppendResult, StoreError>) -> Void
    }


    private init(connection: PostgresConnection, migrationsApplied: [String], options: Options) {
        self.connection = connection
        self.migrationsAppliedAtOpen = migrationsApplied
        self.options = options
        queue.setSpecific(key: onQueueKey, value: true)
    }

    /// Connects and (unless turned off) brings the chat schema up to date. Synchronous: for start-up.
    /// Throws when the server cannot be reached: a node configured for shared history does not start
    /// without it.
    public static func open(url: String, options: Options = Options()) throws -> PostgresChatStore {
        let connection = try PostgresConnection(url: url)
        let applied = options.migrateOnOpen ? try Migrator.bundled(.postgres).migrate(connection) : []
        return PostgresChatStore(connection: connection, migrationsApplied: applied, options: options)
    }

    // MARK: Append (group commit)

    public func appendChat(
        _ draft: ChatDraft, completion: @escaping @Sendable (Result<ChatAppendResult, StoreError>) -> Void
    ) {
        switch appends.admit(PendingAppend(draft: draft, completion: completion)) {
        case .queued: break
        case .queuedAndSchedule: queue.async { self.drain() }
        case .refused:
            queue.async {
                completion(.failure(.closed))
                self.completedAppends()
            }
        }
    }

    public func afterAppendCompletions(_ body: @escaping @Sendable () -> Void) {
        appendsCompleted.set(body)
    }

    /// On `queue`, after a batch's completions: the caller's `afterAppendCompletions` body.
    private func completedAppends() {
        appendsCompleted.run()
    }

    /// On `queue`: writes every pending draft (all of them, for the ordering reason in `ChatStore.drain`).
    private func drain() {
        let (drafts, waited) = appends.takeForDrain()
        counters.withLock { $0.queueWait.record(nanoseconds: waited) }
        write(inBatchesOf: drafts)
    }

    private func write(inBatchesOf drafts: [PendingAppend]) {
        // PostgreSQL text cannot hold NUL (SQLite can): such a draft is refused on its own rather than
        // failing the batch, i.e. other people's messages.
        var storable: [PendingAppend] = []
        storable.reserveCapacity(drafts.count)
        for pending in drafts {
            if Self.containsNUL(pending.draft) {
                pending.completion(.failure(.server(DatabaseServerError(
                    code: "22021", message: "chat message contains a NUL character, which PostgreSQL text cannot store",
                    isRetryable: false))))
            } else {
                storable.append(pending)
            }
        }
        if storable.count < drafts.count { completedAppends() }
        let size = max(1, options.maxBatchSize)
        var start = storable.startIndex
        while start < storable.endIndex {
            let end = min(start + size, storable.endIndex)
            write(Array(storable[start..<end]))
            start = end
        }
    }

    private static func containsNUL(_ draft: ChatDraft) -> Bool {
        [draft.room.rawValue, draft.sender.rawValue, draft.clientID, draft.text, draft.meta ?? ""].contains { $0.utf8.contains(0) }
    }

    /// On `queue`: commits `batch` in one transaction (run again, up to five times, after a deadlock
    /// or serialization failure, which roll it back entirely), then completes every draft in it.
    private func write(_ batch: [PendingAppend]) {
        guard !batch.isEmpty else { return }
        let started = DispatchTime.now().uptimeNanoseconds
        // A lost connection is never repeated here: the COMMIT may have happened (docs/operations.md).
        let outcome: Result<[ChatAppendResult], StoreError> = run(mayRepeat: { _ in false }) {
            var attempt = 0
            while true {
                do {
                    return try PostgresChatRepository(db: $0).append(batch.map(\.draft))
                } catch let error as PostgresError where error.isTransactionConflict && attempt < 5 {
                    attempt += 1
                }
            }
        }
        let results: [ChatAppendResult]
        switch outcome {
        case .failure(let failure):
            counters.withLock { $0.batchesFailed += 1 }
            for pending in batch { pending.completion(.failure(failure)) }
            completedAppends()
            return
        case .success(let written):
            results = written
        }
        let elapsed = DispatchTime.now().uptimeNanoseconds &- started
        counters.withLock { $0.recordCommitted(results, nanoseconds: elapsed) }
        // Only after COMMIT returned: see ChatStore.write.
        for (pending, result) in zip(batch, results) { pending.completion(.success(result)) }
        completedAppends()
    }

    // MARK: Reads and read markers

    public func markRead(
        room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64,
        completion: @escaping @Sendable (Result<ReadMarkerResult, StoreError>) -> Void
    ) {
        submit(completion) { try PostgresChatRepository(db: $0).markRead(room: room, peer: peer, seq: seq, nowMs: nowMs) }
    }

    public func history(
        room: RoomID, sinceSeq: Int64, limit: Int, completion: @escaping @Sendable (Result<HistoryPage, StoreError>) -> Void
    ) {
        submit(completion) { try PostgresChatRepository(db: $0).history(room: room, sinceSeq: sinceSeq, limit: limit) }
    }

    public func messages(
        room: RoomID, query: MessageQuery, completion: @escaping @Sendable (Result<MessagePage, StoreError>) -> Void
    ) {
        submit(completion) { try PostgresChatRepository(db: $0).messages(room: room, query: query) }
    }

    public func inbox(
        peer: PeerID, query: InboxQuery, completion: @escaping @Sendable (Result<InboxPage, StoreError>) -> Void
    ) {
        submit(completion) { try PostgresChatRepository(db: $0).inbox(peer: peer, query: query) }
    }

    public func roomSummary(
        room: RoomID, peer: PeerID, completion: @escaping @Sendable (Result<RoomSummary, StoreError>) -> Void
    ) {
        submit(completion) { try PostgresChatRepository(db: $0).summary(room: room, peer: peer) }
    }

    /// Runs `work` on `queue` and completes there; `mayRepeat` as in `run`, for all errors at once.
    func submit<Value: Sendable>(
        _ completion: @escaping @Sendable (Result<Value, StoreError>) -> Void,
        mayRepeat: Bool = true,
        _ work: @escaping @Sendable (PostgresConnection) throws -> Value
    ) {
        queue.async { completion(self.run(mayRepeat: { _ in mayRepeat }, work)) }
    }

    /// Whether the server answered: `nil` while the most recent operation reached it (a statement
    /// it refused counts as an answer) and none under way has waited longer than `stallMs`; else
    /// why not, naming PostgreSQL (libpq's message for a refused or lost connection; the wait for
    /// one that hangs, as behind a partition or a stopped server, whose TCP connection stays open).
    /// Any thread. Only as fresh as the last operation: a node with `database_url` runs one at
    /// least every `database_ban_sync_ms`.
    public func unreachable(stallMs: Int) -> String? {
        let now = DispatchTime.now().uptimeNanoseconds
        return health.withLock { state in
            if let since = state.busySinceNs, now &- since > UInt64(stallMs) * 1_000_000 {
                return "PostgreSQL has not answered for \((now &- since) / 1_000_000) ms"
            }
            return state.unreachable
        }
    }

    private static let reconnectingMessage = "PostgreSQL unreachable; reconnecting"

    /// On `queue`: `attempt`, timed and its outcome kept for `unreachable(stallMs:)`.
    private func run<Value>(mayRepeat: (PostgresError) -> Bool = { _ in true },
                            _ work: (PostgresConnection) throws -> Value) -> Result<Value, StoreError> {
        health.withLock { $0.busySinceNs = DispatchTime.now().uptimeNanoseconds }
        let result = attempt(mayRepeat: mayRepeat, work)
        var lost: String?
        if case .failure(.server(let error)) = result, error.code.isEmpty, error.isRetryable {
            // No SQLSTATE and retryable: the connection failed or went (PostgresError.connectionLost).
            lost = "PostgreSQL: \(error.message)"
        }
        health.withLock { state in
            // A reconnect held back by `reconnectIntervalMs` knows nothing new: libpq's last word stays.
            if lost == "PostgreSQL: \(Self.reconnectingMessage)", state.unreachable != nil { lost = state.unreachable }
            state = Health(unreachable: lost, busySinceNs: nil)
        }
        return result
    }

    /// On `queue`: `work` on a live connection, reconnecting first when the last call found it gone.
    ///
    /// A connection the server closed while it was idle (a restart) is noticed before use, from the
    /// socket (`PostgresConnection.checkConnection`, no round trip), and replaced. One that fails in
    /// use is reconnected at once and `work` runs again, once, when `mayRepeat` says that cannot
    /// apply it twice: reads and read markers may; an append may not.
    private func attempt<Value>(mayRepeat: (PostgresError) -> Bool,
                                _ work: (PostgresConnection) throws -> Value) -> Result<Value, StoreError> {
        if appends.isClosed && !connection.isConnected { return .failure(.closed) }
        if !connection.checkConnection() {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now &- lastReconnectNs >= UInt64(options.reconnectIntervalMs) * 1_000_000 else {
                return .failure(PostgresError(sqlState: "", message: Self.reconnectingMessage,
                                              connectionLost: true).storeError)
            }
            lastReconnectNs = now
            do {
                try connection.reconnect()
            } catch {
                return .failure(error.storeError)
            }
        }
        var repeated = false
        while true {
            do {
                return .success(try work(connection))
            } catch let error as PostgresError {
                guard error.connectionLost, !repeated, mayRepeat(error) else { return .failure(error.storeError) }
                repeated = true
                lastReconnectNs = DispatchTime.now().uptimeNanoseconds
                do {
                    try connection.reconnect()
                } catch {
                    return .failure(error.storeError)
                }
            } catch let error as StoreError {
                return .failure(error)
            } catch {
                return .failure(.server(DatabaseServerError(code: "", message: "\(error)", isRetryable: false)))
            }
        }
    }

    // MARK: Synchronous access

    /// Runs `body` with the connection on the store queue and waits for it: for start-up, the CLI and
    /// tests, never the service thread. Inline when called from a completion.
    public func sync<T>(_ body: (PostgresConnection) throws -> T) rethrows -> T {
        if DispatchQueue.getSpecific(key: onQueueKey) == true { return try body(connection) }
        return try queue.sync { try body(connection) }
    }

    /// Applies pending PostgreSQL migrations now and returns their names.
    @discardableResult
    public func migrate() throws -> [String] {
        try sync { try Migrator.bundled(.postgres).migrate($0) }
    }

    public var metrics: ChatStoreMetrics { counters.withLock { $0 } }

    /// Stops accepting appends, writes every draft already accepted, waits for everything queued before
    /// it, then closes the connection. Later calls complete with `.closed`. Idempotent.
    public func close() {
        appends.close()
        sync { connection in
            let drafts = appends.takeRemaining()
            write(inBatchesOf: drafts)
            connection.close()
        }
    }
}
