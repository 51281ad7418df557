import CallingCore

/// The `webhook_deliveries` SQL (004_webhooks.sql, 010_webhook_claims.sql), run synchronously on a connection: by the server
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
            "SELECT seq, event_id, url, ordering_key, event_type, body, attempts, next_attempt_ms FROM webhook_deliveries ORDER BY seq",
            row: Self.delivery)
    }

    public func count() throws -> Int {
        Int(try db.queryFirst("SELECT count(*) FROM webhook_deliveries") { $0.int64(0) } ?? 0)
    }

    /// `WebhookOutbox.claimWebhooks`: due lane heads without a live claim, oldest first.
    public func claim(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) throws -> [WebhookDelivery] {
        try db.transaction(.immediate) {
            let heads = try db.query(
                """
                SELECT h.seq FROM webhook_deliveries h
                WHERE h.next_attempt_ms <= ?1 AND (h.claimed_by IS NULL OR h.claimed_until_ms < ?1)
                  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                                  WHERE e.url = h.url AND e.ordering_key = h.ordering_key AND e.seq < h.seq)
                ORDER BY h.seq LIMIT ?2
                """, [.integer(nowMs), .integer(Int64(max(0, limit)))]) { $0.int64(0) }
            var claimed: [WebhookDelivery] = []
            for seq in heads {
                try db.run("UPDATE webhook_deliveries SET claimed_by = ?2, claimed_until_ms = ?3 WHERE seq = ?1",
                           [.integer(seq), .text(node), .integer(nowMs + leaseMs)])
                claimed += try db.query(
                    "SELECT seq, event_id, url, ordering_key, event_type, body, attempts, next_attempt_ms FROM webhook_deliveries WHERE seq = ?1",
                    [.integer(seq)], row: Self.delivery)
            }
            return claimed
        }
    }

    /// Extends `node`'s claims until `untilMs`; the number it holds.
    public func renew(node: String, untilMs: Int64) throws -> Int {
        try db.run("UPDATE webhook_deliveries SET claimed_until_ms = ?2 WHERE claimed_by = ?1", [.text(node), .integer(untilMs)])
        return Int(try db.queryFirst("SELECT count(*) FROM webhook_deliveries WHERE claimed_by = ?1", [.text(node)]) { $0.int64(0) } ?? 0)
    }

    /// Lets go of `node`'s claims; the number released.
    public func release(node: String) throws -> Int {
        let held = Int(try db.queryFirst("SELECT count(*) FROM webhook_deliveries WHERE claimed_by = ?1", [.text(node)]) { $0.int64(0) } ?? 0)
        try db.run("UPDATE webhook_deliveries SET claimed_by = NULL, claimed_until_ms = NULL WHERE claimed_by = ?1", [.text(node)])
        return held
    }

    private static func delivery(_ row: Statement) -> WebhookDelivery {
        WebhookDelivery(seq: row.int64(0), id: row.text(1), url: row.text(2), key: row.text(3), eventType: row.text(4),
                        body: row.blob(5), attempts: Int(row.int64(6)), nextAttemptAt: row.int64(7))
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
