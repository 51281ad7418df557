import CallingCore

/// The webhook outbox: the deliveries still to be sent, one row per (event, URL), the contract both
/// the embedded SQLite `ChatStore` (one node's queue) and the shared PostgreSQL store (CallingPostgres
/// `PostgresChatStore`, every node of a cluster) keep. `Tests/CallingStoreTests/WebhookOutboxTests.swift`
/// holds both to it.
///
/// Order: rows of one (url, ordering key) form a lane, in `seq` order, which is the order their
/// events were written (a shared store serializes writers per key). Only a lane's head, its lowest
/// `seq`, can be claimed, and it stays the head until it is removed (delivered or given up), so a
/// lane goes out in order whichever node sends it.
///
/// Claims: a node claims a head for `leaseMs` and renews its claims while it is alive; another node
/// may claim a head whose lease ran out (its node died), so every row is sent by one live node at a
/// time and survives the death of the node that wrote it.
///
/// Every operation returns at once; its completion runs on the store's own queue and must be quick.
public protocol WebhookOutbox: AnyObject, Sendable {
    /// Writes the drafts in order and returns them with their `seq`, unclaimed. A draft whose
    /// (event id, URL) is already queued comes back with that row's `seq`, not inserted twice.
    func enqueueWebhooks(_ drafts: [WebhookDraft], completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void)

    /// Every queued delivery in `seq` order, claimed or not (a single node's restart).
    func pendingWebhooks(completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void)

    /// Claims for `node`, until `nowMs + leaseMs`, up to `limit` lane heads that are due
    /// (`next_attempt_ms <= nowMs`) and not claimed by a live lease; oldest first.
    func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int,
                       completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void)

    /// Extends every claim `node` holds to `nowMs + leaseMs`; the number of rows it holds.
    func renewWebhookClaims(node: String, nowMs: Int64, leaseMs: Int64, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)

    /// Lets go of every claim `node` holds (a node starting again under the same id): the number released.
    func releaseWebhookClaims(node: String, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)

    /// Records a failed attempt of a claimed row: attempts made and the earliest next one. The claim
    /// is kept: the node retries it itself unless it dies first.
    func rescheduleWebhook(seq: Int64, attempts: Int, nextAttemptMs: Int64, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    /// Removes delivered or given-up rows.
    func removeWebhooks(seqs: [Int64], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    /// Removes the rows for URLs not in `urls` (no longer configured): how many.
    func discardWebhooks(keepingURLs urls: Set<String>, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)

    /// Rows queued, claimed or not.
    func webhookCount(completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)
}

extension ChatStore: WebhookOutbox {
    public func enqueueWebhooks(_ drafts: [WebhookDraft], completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).insert(drafts) }, completion: completion)
    }

    public func pendingWebhooks(completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).all() }, completion: completion)
    }

    public func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int,
                              completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).claim(node: node, nowMs: nowMs, leaseMs: leaseMs, limit: limit) }, completion: completion)
    }

    public func renewWebhookClaims(node: String, nowMs: Int64, leaseMs: Int64,
                                   completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).renew(node: node, untilMs: nowMs + leaseMs) }, completion: completion)
    }

    public func releaseWebhookClaims(node: String, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).release(node: node) }, completion: completion)
    }

    public func rescheduleWebhook(seq: Int64, attempts: Int, nextAttemptMs: Int64,
                                  completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).reschedule(seq: seq, attempts: attempts, nextAttemptMs: nextAttemptMs) },
                completion: completion)
    }

    public func removeWebhooks(seqs: [Int64], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).delete(seqs: seqs) }, completion: completion)
    }

    public func discardWebhooks(keepingURLs urls: Set<String>, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        perform({ db in
            let repository = WebhookRepository(db: db)
            let stale = try repository.all().filter { !urls.contains($0.url) }.map(\.seq)
            try repository.delete(seqs: stale)
            return stale.count
        }, completion: completion)
    }

    public func webhookCount(completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        perform({ try WebhookRepository(db: $0).count() }, completion: completion)
    }
}

extension WebhookOutbox {
    /// Runs one operation and waits for its completion: for start-up and tests, never the service thread.
    public func wait<Value: Sendable>(
        _ operation: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
    ) throws -> Value {
        try waitForCompletion(operation)
    }
}
