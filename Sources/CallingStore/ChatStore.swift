import CallingCore
import Dispatch

/// Chat persistence for the server: group-committed appends, read markers, history and unread counts.
///
/// Threading: the store owns one SQLite connection and uses it only on its own private serial queue.
/// Every operation returns at once and reports through a completion that runs **on that queue**; the
/// caller (the libwebsockets service thread, which must never wait on disk) hops back to its own thread,
/// e.g. through its mailbox. Completions must therefore be quick and must not block.
///
/// Operations run in the order they were submitted from any one thread: an append followed by a
/// `markRead` or `history` from the same thread sees the appended row.
///
/// Group commit: `appendChat` puts the draft on a pending list; one drain on the queue takes everything
/// pending and writes it in a single transaction (several if more than `Options.maxBatchSize` are
/// pending), then acks each draft. While one batch is being written the next one accumulates, so under
/// load the per-transaction cost is shared by many messages, and an ack is never sent before its row is
/// committed.
///
/// Call `close()` at shutdown. A store released without it still closes its connection, but only once
/// every queued block (each of which retains the store) has run, so no accepted append is dropped.
public final class ChatStore: @unchecked Sendable {
    // @unchecked Sendable, because the compiler cannot see these two disciplines:
    // - `connection` (not Sendable) is touched only on `queue`: by blocks submitted with `queue.async`, and
    //   by `sync` and `close`, which run their body through `queue.sync` or inline when already on
    //   `queue`. A serial queue runs one block at a time, so the connection is never used concurrently.
    // - `appends` (a `GroupCommitInbox`) and `counters`, the only state touched from callers' threads,
    //   are behind locks.
    // Everything else is an immutable `let`: plain values, the queue and its specific key (Dispatch
    // objects are safe to use from any thread).

    public struct Options: Sendable, Equatable {
        /// How long to wait for another process's lock before an operation fails (retryably).
        public var busyTimeoutMs: Int32
        /// Most appends written in one transaction. Bounds the latency of a single commit and the size of
        /// the transaction under a flood; further drafts go into the next batch, in order.
        public var maxBatchSize: Int
        /// Apply pending migrations in `open`. `calling-server migrate` turns it off to report what it applied.
        public var migrateOnOpen: Bool
        /// WAL growth, in pages, between two checkpoints on the checkpoint connection
        /// (`sqlite_checkpoint_pages`; see `WALCheckpointer`). At least 1.
        public var checkpointEveryPages: Int
        /// WAL size, in pages, past which the writer checkpoints itself after its batch's acks
        /// (`sqlite_writer_catch_up_pages`; see `WALCheckpointer`). At least 1.
        public var writerCatchUpPages: Int
        /// Run `PRAGMA quick_check` in `open` and refuse a damaged file (`StoreError.damaged`)
        /// (`sqlite_quick_check_at_start`). Reads the whole file once; off by default here so that tests
        /// and tools opening small stores pay nothing, on by default in the server's configuration.
        public var quickCheckOnOpen: Bool

        /// The default of `checkpointEveryPages`: a quarter of SQLite's default `wal_autocheckpoint`
        /// (1000). When the server is pinned to one core, the checkpoint's page copies take that core from the service thread and the writer, and
        /// the acks queued behind them wait: copying 250 pages at a time instead of 1000 halved the ack
        /// p99 at a paced 5k chats/s (docs/benchmarks.md, "Optimisation pass"). The fsyncs, four times as
        /// many, run on the checkpoint's own thread.
        public static let defaultCheckpointEveryPages = 250
        /// The default of `writerCatchUpPages`: the WAL size at which the writer stops waiting for the
        /// checkpoint connection to let it restart (64 MB at 4 KiB pages). Each catch-up holds the writer for a checkpoint's fsync, a few ms on
        /// this machine's disk; at 5k chats/s the WAL grows ~12k pages a second, so at 4000 pages the
        /// writer stalled three times a second and the ack p99 at 5k/s rose to 10–15 ms (4.7–8.5 ms
        /// at 16000).
        public static let defaultWriterCatchUpPages = 16_000

        public init(busyTimeoutMs: Int32 = 5_000, maxBatchSize: Int = 1_000, migrateOnOpen: Bool = true,
                    checkpointEveryPages: Int = Options.defaultCheckpointEveryPages,
                    writerCatchUpPages: Int = Options.defaultWriterCatchUpPages, quickCheckOnOpen: Bool = false)
        {
            self.quickCheckOnOpen = quickCheckOnOpen
            self.busyTimeoutMs = busyTimeoutMs
            self.maxBatchSize = maxBatchSize
            self.migrateOnOpen = migrateOnOpen
            self.checkpointEveryPages = checkpointEveryPages
            self.writerCatchUpPages = writerCatchUpPages
        }
    }

    /// The database file.
    public let path: String
    /// Names of the migrations `open` applied (empty when the schema was already current).
    public let migrationsAppliedAtOpen: [String]

    private let queue: DispatchQueue
    /// Set on `queue`, so `sync`/`close` called from a completion run inline instead of deadlocking.
    private let onQueueKey = DispatchSpecificKey<Bool>()
    private let maxBatchSize: Int
    /// Used only on `queue`.
    private let connection: SQLiteConnection
    private let appends = GroupCommitInbox<PendingAppend>()
    private let counters = Locked(ChatStoreMetrics())
    /// Told of every failed operation (`onFailure`), on `queue`.
    /// In a class, not as a closure in `Locked` (see `Locked`).
    private let failureObserver = Locked<FailureObserver?>(nil)
    /// Run on `queue` after each batch's completions (`afterAppendCompletions`).
    private let appendsCompleted = AfterAppendCompletions()
    /// Checkpoints the WAL off the commit path; nil for an in-memory database (no WAL).
    private let checkpointer: WALCheckpointer?

    private struct PendingAppend: Sendable, ChatDraftCarrying {
        var draft: ChatDraft
        var completion: @Sendable (Result<ChatAppendResult, StoreError>) -> Void
    }


    private init(path: String, connection: SQLiteConnection, checkpointer: WALCheckpointer?, migrationsApplied: [String],
                 options: Options)
    {
        self.path = path
        self.connection = connection
        self.checkpointer = checkpointer
        self.migrationsAppliedAtOpen = migrationsApplied
        self.maxBatchSize = max(1, options.maxBatchSize)
        self.queue = DispatchQueue(label: "calling.store.chat")
        queue.setSpecific(key: onQueueKey, value: true)
    }

    /// Opens (creating if needed) the database and brings its schema up to date. Synchronous: meant for
    /// start-up, before the service thread runs.
    ///
    /// A file that SQLite finds damaged while opening it, or that fails `quick_check` when
    /// `Options.quickCheckOnOpen` is set, throws `StoreError.damaged`: a store that opened anyway would
    /// answer every chat with a failure while looking healthy.
    public static func open(path: String, options: Options = Options()) throws -> ChatStore {
        do {
            return try openChecked(path: path, options: options)
        } catch let error as SQLiteError where error.isDamage {
            throw StoreError.damaged(path: path, findings: [error.description])
        }
    }

    private static func openChecked(path: String, options: Options) throws -> ChatStore {
        let connection = try SQLiteConnection(path: path, options: .init(busyTimeoutMs: options.busyTimeoutMs))
        if options.quickCheckOnOpen {
            let findings = try connection.quickCheck()
            if !findings.isEmpty { throw StoreError.damaged(path: path, findings: findings) }
        }
        let applied = options.migrateOnOpen ? try Migrator.bundled().migrate(connection) : []
        var checkpointer: WALCheckpointer?
        if !SQLiteConnection.isInMemory(path) {
            let checkpointing = try WALCheckpointer(
                connection: SQLiteConnection(path: path, options: .init(busyTimeoutMs: options.busyTimeoutMs)),
                everyPages: options.checkpointEveryPages, writerCatchUpPages: options.writerCatchUpPages)
            try connection.onCommitToWAL { pages in checkpointing.committed(walPages: pages) }
            checkpointer = checkpointing
        }
        return ChatStore(path: path, connection: connection, checkpointer: checkpointer, migrationsApplied: applied,
                         options: options)
    }

    // MARK: Append (group commit)

    /// Stores a chat message, or finds the original if this (room, sender, client_id) was stored before.
    /// `completion` runs on the store queue after the row is committed (or the batch failed).
    ///
    /// Never blocks: takes a lock for a few instructions and, when no drain is pending, schedules one.
    public func appendChat(
        _ draft: ChatDraft, completion: @escaping @Sendable (Result<ChatAppendResult, StoreError>) -> Void
    ) {
        switch appends.admit(PendingAppend(draft: draft, completion: completion)) {
        case .queued:
            break
        case .queuedAndSchedule:
            queue.async { self.drain() }
        case .refused:
            // Still on the queue, as promised, and never re-entering the caller synchronously.
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

    /// On `queue`: writes every pending draft.
    ///
    /// It takes all of them, not just `maxBatchSize`, and writes them in consecutive transactions within
    /// this one block: re-queueing the rest would let an operation submitted after them (a `history`
    /// right after an `appendChat`) run before they are written.
    private func drain() {
        let (drafts, waited) = appends.takeForDrain()
        counters.withLock { $0.queueWait.record(nanoseconds: waited) }
        write(inBatchesOf: drafts)
    }

    /// On `queue`: `drafts` in transactions of at most `maxBatchSize`, in order.
    private func write(inBatchesOf drafts: [PendingAppend]) {
        var start = drafts.startIndex
        while start < drafts.endIndex {
            let end = min(start + maxBatchSize, drafts.endIndex)
            write(drafts[start..<end])
            start = end
        }
    }

    /// On `queue`: commits `batch` in one transaction, then completes every draft in it.
    private func write(_ batch: ArraySlice<PendingAppend>) {
        guard !batch.isEmpty else { return }
        guard connection.isOpen else {
            for pending in batch { pending.completion(.failure(.closed)) }
            completedAppends()
            return
        }
        let results: [ChatAppendResult]
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            results = try ChatRepository(db: connection).append(batch)
        } catch {
            counters.withLock { $0.batchesFailed += 1 }
            let failure = StoreError(error)
            failed(StoreFailure(operation: "append", error: failure, affected: batch.count))
            for pending in batch { pending.completion(.failure(failure)) }
            completedAppends()
            return
        }
        // Read outside the lock, which `appendChat` callers (the service thread) also take.
        let elapsed = DispatchTime.now().uptimeNanoseconds &- started
        counters.withLock {
            $0.recordCommitted(results, nanoseconds: elapsed)
            $0.writesFailing = false
        }
        // Only now, after COMMIT returned, may anyone learn the seq: an ack must never name a row that a
        // rollback or a process crash could still take back. (With synchronous=NORMAL an OS crash or power
        // cut can still lose the newest commits; see SQLiteConnection.)
        // By index: `zip` copied every pending append (its draft's five strings and the closure) out
        // of the batch and destroyed the copy, per chat.
        for offset in results.indices { batch[batch.startIndex + offset].completion(.success(results[offset])) }
        completedAppends()
        // After the acks, so that they do not wait for it.
        checkpointer?.catchUpIfStarved(writer: connection)
    }

    // MARK: Read markers and reads

    /// Moves `peer`'s read marker in `room` forward to `seq`. A seq at or below the current marker is
    /// accepted but changes nothing (`moved == false`, the current marker is returned). A seq beyond the
    /// room's last message is clamped to the last message: nobody can pre-read messages not yet sent.
    /// `completion` runs on the store queue.
    public func markRead(
        room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64,
        completion: @escaping @Sendable (Result<ReadMarkerResult, StoreError>) -> Void
    ) {
        submit("mark_read", completion) { try ChatRepository(db: $0).markRead(room: room, peer: peer, seq: seq, nowMs: nowMs) }
    }

    /// Messages in `room` with seq > `sinceSeq`, ascending, at most `limit` (values below 0 count as 0,
    /// values above 100 000 as 100 000). `completion` runs on the store queue.
    public func history(
        room: RoomID, sinceSeq: Int64, limit: Int,
        completion: @escaping @Sendable (Result<HistoryPage, StoreError>) -> Void
    ) {
        submit("history", completion) { try ChatRepository(db: $0).history(room: room, sinceSeq: sinceSeq, limit: limit) }
    }

    /// A page of messages folded as they are now. `completion` runs on the store queue.
    public func messages(
        room: RoomID, query: MessageQuery, completion: @escaping @Sendable (Result<MessagePage, StoreError>) -> Void
    ) {
        submit("messages", completion) { try ChatRepository(db: $0).messages(room: room, query: query) }
    }

    /// A page of `peer`'s inbox. `completion` runs on the store queue.
    public func inbox(
        peer: PeerID, query: InboxQuery, completion: @escaping @Sendable (Result<InboxPage, StoreError>) -> Void
    ) {
        submit("inbox", completion) { try ChatRepository(db: $0).inbox(peer: peer, query: query) }
    }

    /// The room's last seq, `peer`'s read marker and its unread count. `completion` runs on the store queue.
    public func roomSummary(
        room: RoomID, peer: PeerID, completion: @escaping @Sendable (Result<RoomSummary, StoreError>) -> Void
    ) {
        submit("room_summary", completion) { try ChatRepository(db: $0).summary(room: room, peer: peer) }
    }

    /// Runs `work` with the connection on the store queue, after everything submitted before it
    /// (appends included), and completes there with its result. For repositories beyond chat
    /// (calls, API keys, meters) that share this one connection and its ordering.
    public func perform<Value: Sendable>(
        _ work: @escaping @Sendable (SQLiteConnection) throws -> Value,
        completion: @escaping @Sendable (Result<Value, StoreError>) -> Void
    ) {
        submit("perform", completion, work)
    }

    /// Has the store call `body` on its queue for every failed operation (not for those refused
    /// because the store is closed), e.g. to log it. One body per store; a later call replaces it.
    /// `body` must be quick, like a completion.
    public func onFailure(_ body: @escaping @Sendable (StoreFailure) -> Void) {
        let observer = FailureObserver(body)
        failureObserver.withLock { $0 = observer }
    }

    /// On `queue`: marks writes failing (a constraint violation is the request's fault, not the
    /// store's) and tells the observer.
    private func failed(_ failure: StoreFailure) {
        if failure.error.kind != "constraint" {
            counters.withLock { $0.writesFailing = true }
        }
        failureObserver.withLock { $0 }?.body(failure)
    }

    /// Runs `work` on the queue and completes with its result.
    private func submit<Value: Sendable>(
        _ operation: String = "perform",
        _ completion: @escaping @Sendable (Result<Value, StoreError>) -> Void,
        _ work: @escaping @Sendable (SQLiteConnection) throws -> Value
    ) {
        queue.async {
            guard self.connection.isOpen else { return completion(.failure(.closed)) }
            let changesBefore = self.connection.totalChanges
            do {
                let value = try work(self.connection)
                // A write that went through: the store takes writes again (reads succeed on a full disk).
                if self.connection.totalChanges != changesBefore { self.counters.withLock { $0.writesFailing = false } }
                completion(.success(value))
            } catch {
                let failure = StoreError(error)
                self.failed(StoreFailure(operation: operation, error: failure, affected: 1))
                completion(.failure(failure))
            }
            self.checkpointer?.catchUpIfStarved(writer: self.connection)
        }
    }

    // MARK: Synchronous access

    /// Runs `body` with the connection on the store queue and waits for it. For start-up, the CLI
    /// (`calling-server migrate`) and tests only: it blocks the caller until everything submitted before
    /// it has run, so it must **never** be called from the libwebsockets service thread. Called from a
    /// completion (already on the queue) it runs inline. `body` must not keep the connection.
    public func sync<T>(_ body: (SQLiteConnection) throws -> T) rethrows -> T {
        if DispatchQueue.getSpecific(key: onQueueKey) == true { return try body(connection) }
        return try queue.sync { try body(connection) }
    }

    /// Applies pending migrations now and returns their names. Synchronous, like `sync`.
    @discardableResult
    public func migrate() throws -> [String] {
        try sync { try Migrator.bundled().migrate($0) }
    }

    /// For tests: waits until every checkpoint already scheduled on the checkpoint connection has run.
    func waitForScheduledCheckpoints() {
        checkpointer?.waitForScheduled()
    }

    /// Counters for `/metrics`. Cheap; callable from any thread.
    public var metrics: ChatStoreMetrics {
        counters.withLock { $0 }
    }

    /// Stops accepting appends, writes every draft already accepted (their completions run normally),
    /// waits for everything queued before it, then closes the connection. Later calls complete with
    /// `.closed`. Blocks like `sync`: call it at shutdown, not from the service thread. Idempotent.
    public func close() {
        appends.close()
        sync { connection in
            // Drain blocks still on the queue will find nothing left; the drafts are written here.
            let drafts = appends.takeRemaining()
            write(inBatchesOf: drafts)
            connection.close()
        }
        // The last connection to close checkpoints everything and removes the WAL.
        checkpointer?.close()
    }
}

private final class FailureObserver: Sendable {
    let body: @Sendable (StoreFailure) -> Void
    init(_ body: @escaping @Sendable (StoreFailure) -> Void) { self.body = body }
}

/// One failed store operation, as `ChatStore.onFailure` reports it.
public struct StoreFailure: Sendable, Equatable {
    /// `append` (a group-commit batch), `mark_read`, `history`, `room_summary` or `perform` (calls,
    /// API keys, meters, webhooks and the other repositories).
    public var operation: String
    public var error: StoreError
    /// Requests the failure answered: the chats of a failed batch, else 1.
    public var affected: Int

    public init(operation: String, error: StoreError, affected: Int) {
        self.operation = operation
        self.error = error
        self.affected = affected
    }
}

/// Runs WAL checkpoints on a second connection and queue of their own.
///
/// SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL past 1000 pages: the
/// checkpoint's copying and its two fsyncs then stall the store queue, and every ack queued behind
/// that commit waits (at a paced 5k chats/s that was a few milliseconds every few hundred commits,
/// the bulk of the ack p99). Here the commit only notes the WAL's size; a PASSIVE checkpoint on the
/// other connection copies the pages while commits go on. It is triggered every `everyPages` (250 by
/// default, `sqlite_checkpoint_pages`) pages, a quarter of SQLite's cadence: the WAL is synced at least as often as SQLite would, so
/// with `synchronous=NORMAL` an OS crash or power cut can lose no more than before, and an ack
/// still follows its own COMMIT.
///
/// A PASSIVE checkpoint copies only the frames that were in the WAL when it started, and the writer
/// starts the WAL over only when it finds every frame copied. Under sustained load commits land
/// while each checkpoint runs, so that never happens and the WAL grows without bound (700 MB after
/// 60k chats in 5 s). Once it passes `writerCatchUpPages` (16,000 by default,
/// `sqlite_writer_catch_up_pages`), the writer therefore checkpoints itself,
/// after the acks of its batch: the checkpoint connection has already copied most frames, and with
/// the writer paused the copy completes and the next commit restarts the WAL.
final class WALCheckpointer: @unchecked Sendable {
    // @unchecked Sendable: `connection` is used only on `queue` (and by `close`, through `queue.sync`);
    // `nextTrigger`, `lastPages` and `writerShouldCatchUp` only by `committed`, which the writer's WAL
    // hook calls, and `catchUpIfStarved`: both run where the writer runs, on the store queue.
    private let connection: SQLiteConnection
    private let queue = DispatchQueue(label: "calling.store.checkpoint")
    private let everyPages: Int
    private let writerCatchUpPages: Int
    private var nextTrigger: Int
    private var lastPages = 0
    private var writerShouldCatchUp = false

    /// Values below 1 count as 1 (ServerConfig refuses them before they get here).
    init(connection: SQLiteConnection, everyPages: Int, writerCatchUpPages: Int) {
        self.connection = connection
        self.everyPages = max(1, everyPages)
        self.writerCatchUpPages = max(1, writerCatchUpPages)
        self.nextTrigger = self.everyPages
    }

    /// On the store queue, right after a commit: schedules a checkpoint for every further `everyPages`.
    func committed(walPages: Int) {
        // A smaller WAL than last time: a complete checkpoint let the writer start it over.
        if walPages < lastPages { nextTrigger = everyPages }
        lastPages = walPages
        writerShouldCatchUp = walPages >= writerCatchUpPages
        guard walPages >= nextTrigger else { return }
        nextTrigger = walPages + everyPages
        queue.async { self.checkpoint() }
    }

    /// On the store queue, with the writer's connection, after the acks of a batch: a PASSIVE
    /// checkpoint there when the WAL has outgrown `writerCatchUpPages` (see the type's comment).
    func catchUpIfStarved(writer: SQLiteConnection) {
        guard writerShouldCatchUp else { return }
        writerShouldCatchUp = false
        do {
            try writer.checkpointPassive()
        } catch {
            // SQLITE_BUSY: the checkpoint connection is mid-checkpoint. Asking again at the next
            // commit is not enough on a starved CPU, where its checkpoints run back to back and
            // every catch-up collides with one (the WAL passed 40,000 pages in 30k chats on a
            // loaded machine). Waiting for the ones queued costs the writer one checkpoint's time.
            queue.sync {}
            try? writer.checkpointPassive()
        }
    }

    /// On `queue`.
    private func checkpoint() {
        // A failed checkpoint loses nothing: the pages stay in the WAL for the next one.
        try? connection.checkpointPassive()
    }

    /// Waits for the checkpoints scheduled so far.
    func waitForScheduled() {
        queue.sync {}
    }

    /// Waits for a running checkpoint, then closes the connection.
    func close() {
        queue.sync { connection.close() }
    }
}
