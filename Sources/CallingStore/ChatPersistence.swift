import CallingCore

/// What the server needs of a chat store: the contract both the embedded SQLite store (`ChatStore`) and
/// the shared PostgreSQL store (CallingPostgres `PostgresChatStore`) keep, so the signaling code and the
/// HTTP history route do not know which one they talk to.
///
/// The guarantees every implementation gives (`Tests/CallingStoreTests/ChatPersistenceContract.swift`
/// holds both stores to them):
/// - `seq` is 1, 2, 3, … per room without gaps, also with several writers (threads, or server
///   processes sharing the database) appending to one room at once.
/// - (room, sender, client_id) is stored once: a retry completes with the original record and
///   `duplicate == true`, and takes no seq.
/// - A completion reports success only after the row is durable (committed); a failure means the row
///   was not written, so the client may retry with the same client_id.
/// - An operation draft (`ChatDraft.kind` other than `.message`) and a reply are checked by
///   `ChatRules` against the target as stored in the transaction that writes them; a refusal
///   completes with `ChatAppendResult.refusal` set, stores nothing and takes no seq. A delete
///   erases the text and meta of its message and of the message's edits in that transaction.
/// - Operations submitted from one thread run in that order: a `history` or `markRead` submitted
///   after an `appendChat` sees the appended row.
/// - Every operation returns at once and never waits on disk or network; its completion runs on the
///   store's own queue and must be quick (the service thread hops back through its mailbox).
public protocol ChatPersistence: AnyObject, Sendable {
    /// Stores a message, or finds the original when this (room, sender, client_id) was stored before.
    func appendChat(_ draft: ChatDraft, completion: @escaping @Sendable (Result<ChatAppendResult, StoreError>) -> Void)

    /// Has the store run `body` on its queue after each batch of append completions: once every
    /// draft of a batch has had its completion (committed, failed or refused), before the queue runs
    /// anything else. A caller whose completions only collect their results (on the store's queue)
    /// can hand them on in one piece there and still keep them in order with every other
    /// completion: what a later `markRead` or `history` completion posts comes after them. One body
    /// per store; a later call replaces it. Set it before the first append.
    func afterAppendCompletions(_ body: @escaping @Sendable () -> Void)

    /// Moves `peer`'s read marker in `room` forward to `seq`, clamped to the room's last message; an
    /// older or equal seq changes nothing (`moved == false`).
    func markRead(room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64,
                  completion: @escaping @Sendable (Result<ReadMarkerResult, StoreError>) -> Void)

    /// Messages with seq > `sinceSeq`, ascending, at most `limit` (below 0 counts as 0, above 100 000
    /// as 100 000). Resuming after `last_seq` is `history(room:sinceSeq: lastSeq, …)`.
    func history(room: RoomID, sinceSeq: Int64, limit: Int,
                 completion: @escaping @Sendable (Result<HistoryPage, StoreError>) -> Void)

    /// Messages (operations folded into them) in `query`'s direction from its start, each as it is
    /// now: latest edit, tombstone, reactions, and its edits when asked.
    func messages(room: RoomID, query: MessageQuery, completion: @escaping @Sendable (Result<MessagePage, StoreError>) -> Void)

    /// The rooms `peer` has sent in or has a read marker in, newest activity first.
    func inbox(peer: PeerID, query: InboxQuery, completion: @escaping @Sendable (Result<InboxPage, StoreError>) -> Void)

    /// The room's last seq, `peer`'s read marker and its unread count.
    func roomSummary(room: RoomID, peer: PeerID, completion: @escaping @Sendable (Result<RoomSummary, StoreError>) -> Void)

    /// Counters for `/metrics`. Cheap; callable from any thread.
    var metrics: ChatStoreMetrics { get }

    /// Writes every append already accepted, then refuses new work (completing it with `.closed`).
    /// Blocks; for shutdown. Idempotent.
    func close()
}

extension ChatStore: ChatPersistence {}
