import CallingCore

/// The `webhook_deliveries` SQL (004_webhooks.sql), run synchronously on a connection: by the server
/// through `ChatStore.perform` on the store queue, at start-up through `ChatStore.sync`.
public struct WebhookRepository {
    let db: SQLiteConnection

    public init(db: SQLiteConnection) {
        self.db = db
    }

    /// Inserts the drafts in one transaction, in order, and returns them with their `seq`. A draft
    /// whose (event id, URL) is already queued is returned with the existing row's `seq` instead of
    /// being inserted twice.
    public func insert(_ drafts: [WebhookDraft]) throws -> [WebhookDelivery] {
        try db.transaction(.immediate) {
            try drafts.map { draft in
                let seq = try db.queryFirst(
                    """
                    INSERT INTO webhook_deliveries (event_id, url, ordering_key, event_type, body, created_ms, next_attempt_ms)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
                    ON CONFLICT (event_id, url) DO UPDATE SET event_id = excluded.event_id
                    RETURNING seq
                    """,
                    [.text(draft.id), .text(draft.url), .text(draft.key), .text(draft.eventType), .blob(draft.body),
                     .integer(draft.createdAt)]
                ) { $0.int64(0) }
                return draft.delivery(seq: seq ?? 0)
            }
        }
    }

    /// Every queued delivery, in queue order.
    public func all() throws -> [WebhookDelivery] {
        try db.query(
            "SELECT seq, event_id, url, ordering_key, event_type, body, attempts, next_attempt_ms FROM webhook_deliveries ORDER BY seq"
        ) { row in
            WebhookDelivery(seq: row.int64(0), id: row.text(1), url: row.text(2), key: row.text(3), eventType: row.text(4),
                            body: row.blob(5), attempts: Int(row.int64(6)), nextAttemptAt: row.int64(7))
        }
    }

    public func count() throws -> Int {
        Int(try db.queryFirst("SELECT count(*) FROM webhook_deliveries") { $0.int64(0) } ?? 0)
    }

    /// Records a failed attempt: how many were made and when the next may start.
    public func reschedule(seq: Int64, attempts: Int, nextAttemptMs: Int64) throws {
        try db.run("UPDATE webhook_deliveries SET attempts = ?2, next_attempt_ms = ?3 WHERE seq = ?1",
                   [.integer(seq), .integer(Int64(attempts)), .integer(nextAttemptMs)])
    }

    /// Removes delivered or given-up rows.
    public func delete(seqs: [Int64]) throws {
        guard !seqs.isEmpty else { return }
        try db.transaction(.immediate) {
            for seq in seqs { try db.run("DELETE FROM webhook_deliveries WHERE seq = ?1", [.integer(seq)]) }
        }
    }
}
