import CallingCore
import CallingStore

/// The `webhook_outbox`, `webhook_seats` and `webhook_calls` SQL for PostgreSQL
/// (schema/postgres/004_webhooks.sql), run synchronously on a connection in the caller's
/// transaction where it says so. `PostgresChatStore` runs it on its queue.
public struct PostgresWebhookRepository {
    let db: PostgresConnection

    public init(db: PostgresConnection) {
        self.db = db
    }

    /// First key of the advisory locks that serialize the writers of one ordering key (the second
    /// is the key's hash); ASCII "whk1", apart from the migrations' lock.
    static let lockClass = "2003790641"

    /// Takes the transaction-scoped lock of each key, in one order for every writer (no deadlock).
    /// Re-entrant within a transaction.
    func lock(keys: some Sequence<String>) throws {
        for key in Set(keys).sorted() {
            try db.query("SELECT pg_advisory_xact_lock(\(Self.lockClass)::integer, hashtext($1))", [key])
        }
    }

    /// A `text[]` literal of `values`, each quoted and escaped.
    static func textArray(_ values: [String]) -> String {
        "{" + values.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }

    private static let columns = "seq, event_id, url, ordering_key, event_type, body, attempts, next_attempt_ms"

    private static func delivery(_ row: [String?]) -> WebhookDelivery {
        WebhookDelivery(seq: Int64(row[0] ?? "") ?? 0, id: row[1] ?? "", url: row[2] ?? "", key: row[3] ?? "", eventType: row[4] ?? "",
                        body: Array((row[5] ?? "").utf8), attempts: Int(row[6] ?? "") ?? 0, nextAttemptAt: Int64(row[7] ?? "") ?? 0)
    }

    // MARK: outbox

    /// `WebhookRepository.insert` in the caller's transaction, after the keys' locks.
    public func insert(_ drafts: [WebhookDraft]) throws -> [WebhookDelivery] {
        try lock(keys: drafts.map(\.key))
        return try drafts.map { draft in
            let seq = try db.query(
                """
                INSERT INTO webhook_outbox (event_id, url, ordering_key, event_type, body, created_ms, next_attempt_ms)
                VALUES ($1, $2, $3, $4, $5, $6::bigint, $6::bigint)
                ON CONFLICT (event_id, url) DO UPDATE SET event_id = excluded.event_id
                RETURNING seq
                """,
                [draft.id, draft.url, draft.key, draft.eventType, String(decoding: draft.body, as: UTF8.self), String(draft.createdAt)]
            ).rows.first?[0].flatMap { Int64($0) } ?? 0
            return draft.delivery(seq: seq)
        }
    }

    public func all() throws -> [WebhookDelivery] {
        try db.query("SELECT \(Self.columns) FROM webhook_outbox ORDER BY seq").rows.map(Self.delivery)
    }

    /// Due lane heads without a live claim, claimed for `node`. SKIP LOCKED: a head another node
    /// is claiming right now is left to it; the lock's recheck drops one it has just claimed.
    public func claim(node: String, nowMs: Int64, leaseMs: Int64, limit: Int) throws -> [WebhookDelivery] {
        try db.query(
            """
            UPDATE webhook_outbox SET claimed_by = $1, claimed_until_ms = $2::bigint + $3::bigint
            WHERE seq IN (
                SELECT h.seq FROM webhook_outbox h
                WHERE h.next_attempt_ms <= $2::bigint AND (h.claimed_by IS NULL OR h.claimed_until_ms < $2::bigint)
                  AND NOT EXISTS (SELECT 1 FROM webhook_outbox e
                                  WHERE e.url = h.url AND e.ordering_key = h.ordering_key AND e.seq < h.seq)
                ORDER BY h.seq LIMIT $4::integer
                FOR UPDATE SKIP LOCKED)
            RETURNING \(Self.columns)
            """, [node, String(nowMs), String(leaseMs), String(max(0, limit))]).rows.map(Self.delivery).sorted { $0.seq < $1.seq }
    }

    public func renew(node: String, untilMs: Int64) throws -> Int {
        try db.query("UPDATE webhook_outbox SET claimed_until_ms = $2::bigint WHERE claimed_by = $1 RETURNING seq",
                     [node, String(untilMs)]).count
    }

    public func release(node: String) throws -> Int {
        try db.query("UPDATE webhook_outbox SET claimed_by = NULL, claimed_until_ms = NULL WHERE claimed_by = $1 RETURNING seq",
                     [node]).count
    }

    public func reschedule(seq: Int64, attempts: Int, nextAttemptMs: Int64) throws {
        try db.query("UPDATE webhook_outbox SET attempts = $2::integer, next_attempt_ms = $3::bigint WHERE seq = $1::bigint",
                     [String(seq), String(attempts), String(nextAttemptMs)])
    }

    public func delete(seqs: [Int64]) throws {
        guard !seqs.isEmpty else { return }
        try db.query("DELETE FROM webhook_outbox WHERE seq = ANY($1::bigint[])", ["{" + seqs.map(String.init).joined(separator: ",") + "}"])
    }

    public func discard(keepingURLs urls: Set<String>) throws -> Int {
        try db.query("DELETE FROM webhook_outbox WHERE NOT (url = ANY($1::text[])) RETURNING seq", [Self.textArray(urls.sorted())]).count
    }

    public func count() throws -> Int {
        Int(try db.query("SELECT count(*) FROM webhook_outbox").rows.first?[0] ?? "0") ?? 0
    }

    // MARK: seats and calls

    /// `SharedCallLifecycle.recordSeats` in the caller's transaction: the events, in order.
    public func record(_ changes: [LifecycleSeatChange], node: String, nowMs: Int64) throws -> [SharedLifecycleEvent] {
        try lock(keys: changes.map { change in
            switch change {
            case .joined(let identity, _), .left(let identity, _): identity.room.rawValue
            }
        })
        var events: [SharedLifecycleEvent] = []
        for change in changes {
            switch change {
            case .joined(let identity, let transport):
                let inserted = try db.query(
                    """
                    INSERT INTO webhook_seats (room_id, peer_id, node_id, role, name, call_id, transport, joined_ms)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint)
                    ON CONFLICT (room_id, peer_id) DO UPDATE SET node_id = excluded.node_id, role = excluded.role,
                        name = excluded.name, call_id = excluded.call_id, transport = excluded.transport
                    RETURNING (xmax = 0)
                    """,
                    [identity.room.rawValue, identity.peer.rawValue, node, identity.role, identity.name, identity.call?.rawValue,
                     transport, String(nowMs)]).rows.first?[0] == "t"
                // The same peer id seated again (on this node or another): a takeover, not a new seat.
                guard inserted else { continue }
                let row = try db.query(
                    """
                    INSERT INTO webhook_calls (room_id, call_id, started_ms) VALUES ($1, $2, $3::bigint)
                    ON CONFLICT (room_id) DO UPDATE SET call_id = coalesce(webhook_calls.call_id, excluded.call_id),
                        empty_since_ms = NULL, end_reason = NULL
                    RETURNING call_id, started_ms, (xmax = 0)
                    """, [identity.room.rawValue, identity.call?.rawValue, String(nowMs)]).rows[0]
                let call = CallLifecycle.Call(room: identity.room, call: row[0].map { CallID($0) }, startedAt: Int64(row[1] ?? "") ?? nowMs)
                if row[2] == "t" {
                    events.append(SharedLifecycleEvent(.callStarted(call), transport: transport))
                }
                events.append(SharedLifecycleEvent(.peerJoined(identity, call), transport: transport))
            case .left(let identity, let reason):
                let removed = try db.query(
                    "DELETE FROM webhook_seats WHERE room_id = $1 AND peer_id = $2 AND node_id = $3 RETURNING role, name, call_id, transport",
                    [identity.room.rawValue, identity.peer.rawValue, node]).rows
                guard let seat = removed.first else { continue }
                events += try ended([Self.identity(room: identity.room, peer: identity.peer, seat)], transports: [seat[3] ?? "websocket"],
                                    in: identity.room, nowMs: nowMs, reason: reason)
            }
        }
        return events
    }

    /// The seats of the nodes not in `alive` (or of `node` when nil) ended, in the caller's transaction.
    public func endSeats(ofNodesNotIn alive: Set<String>?, node: String, nowMs: Int64, reason: String)
        throws -> (nodes: [String], events: [SharedLifecycleEvent])
    {
        let nodes = try db.query("SELECT DISTINCT node_id FROM webhook_seats").rows.compactMap { $0[0] }
            .filter { seatNode in alive.map { !$0.contains(seatNode) } ?? (seatNode == node) }.sorted()
        guard !nodes.isEmpty else { return ([], []) }
        let array = Self.textArray(nodes)
        let rooms = try db.query("SELECT DISTINCT room_id FROM webhook_seats WHERE node_id = ANY($1::text[])", [array]).rows.compactMap { $0[0] }
        try lock(keys: rooms)
        // After the locks: another node that ended these seats first has committed, and this
        // statement's snapshot sees them gone.
        let removed = try db.query(
            """
            DELETE FROM webhook_seats WHERE node_id = ANY($1::text[])
            RETURNING room_id, peer_id, role, name, call_id, transport, joined_ms
            """, [array]).rows
        var byRoom: [String: [[String?]]] = [:]
        for row in removed { byRoom[row[0] ?? "", default: []].append(row) }
        var events: [SharedLifecycleEvent] = []
        for room in byRoom.keys.sorted() {
            let rows = (byRoom[room] ?? []).sorted { (Int64($0[6] ?? "") ?? 0, $0[1] ?? "") < (Int64($1[6] ?? "") ?? 0, $1[1] ?? "") }
            let identities = rows.map { Self.identity(room: RoomID(room), peer: PeerID($0[1] ?? ""), Array($0[2...5])) }
            events += try ended(identities, transports: rows.map { $0[5] ?? "websocket" }, in: RoomID(room), nowMs: nowMs, reason: reason)
        }
        return (nodes, events)
    }

    /// `peer_left` of each removed seat; a room left without seats is marked empty since now, with
    /// `reason`, for `endSettled` (its `call_ended`).
    private func ended(_ identities: [PeerIdentity], transports: [String], in room: RoomID, nowMs: Int64, reason: String)
        throws -> [SharedLifecycleEvent]
    {
        let row = try db.query("SELECT call_id, started_ms FROM webhook_calls WHERE room_id = $1", [room.rawValue]).rows.first
        let call = CallLifecycle.Call(room: room, call: row?[0].map { CallID($0) } ?? identities.lazy.compactMap(\.call).first,
                                      startedAt: row.flatMap { Int64($0[1] ?? "") } ?? nowMs)
        if try db.query("SELECT 1 FROM webhook_seats WHERE room_id = $1 LIMIT 1", [room.rawValue]).isEmpty {
            try db.query("UPDATE webhook_calls SET empty_since_ms = $2::bigint, end_reason = $3 WHERE room_id = $1",
                         [room.rawValue, String(nowMs), reason])
        }
        return zip(identities, transports).map { SharedLifecycleEvent(.peerLeft($0, call), transport: $1) }
    }

    /// `SharedCallLifecycle.endSettledCalls` in the caller's transaction: the `call_ended` of rooms
    /// empty since `settleMs` or longer, dated when they emptied, at most 100 at a time.
    public func endSettled(nowMs: Int64, settleMs: Int64) throws -> [SharedLifecycleEvent] {
        let due = String(nowMs - settleMs)
        let rooms = try db.query(
            "SELECT room_id FROM webhook_calls WHERE empty_since_ms <= $1::bigint ORDER BY empty_since_ms, room_id LIMIT 100",
            [due]).rows.compactMap { $0[0] }
        guard !rooms.isEmpty else { return [] }
        try lock(keys: rooms)
        // After the locks: a join recorded meanwhile cleared empty_since_ms, and another node that
        // ended a room first has deleted its row.
        return try db.query(
            """
            DELETE FROM webhook_calls c WHERE c.room_id = ANY($1::text[]) AND c.empty_since_ms <= $2::bigint
              AND NOT EXISTS (SELECT 1 FROM webhook_seats s WHERE s.room_id = c.room_id)
            RETURNING room_id, call_id, started_ms, empty_since_ms, end_reason
            """, [Self.textArray(rooms), due]).rows
            .sorted { (Int64($0[3] ?? "") ?? 0, $0[0] ?? "") < (Int64($1[3] ?? "") ?? 0, $1[0] ?? "") }
            .map { row in
                let call = CallLifecycle.Call(room: RoomID(row[0] ?? ""), call: row[1].map { CallID($0) }, startedAt: Int64(row[2] ?? "") ?? 0)
                return SharedLifecycleEvent(.callEnded(call, endedAt: Int64(row[3] ?? "") ?? nowMs, reason: row[4] ?? "last_peer_left"),
                                            transport: "websocket")
            }
    }

    /// A seat row's identity: `seat` is (role, name, call_id, transport).
    private static func identity(room: RoomID, peer: PeerID, _ seat: [String?]) -> PeerIdentity {
        PeerIdentity(peer: peer, room: room, call: seat[2].map { CallID($0) }, role: seat[0] ?? "peer", name: seat[1])
    }
}

extension PostgresChatStore: WebhookOutbox {
    public func enqueueWebhooks(_ drafts: [WebhookDraft], completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        // Not repeated after a lost connection: the rows may have committed (the event ids keep a
        // retry by the caller from doubling them).
        submit(completion, mayRepeat: false) { db in
            guard !drafts.isEmpty else { return [] }
            return try db.transaction { try PostgresWebhookRepository(db: db).insert(drafts) }
        }
    }

    public func pendingWebhooks(completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).all() }
    }

    public func claimWebhooks(node: String, nowMs: Int64, leaseMs: Int64, limit: Int,
                              completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        // Not repeated: a claim that committed before the connection broke is only held until its lease ends.
        submit(completion, mayRepeat: false) {
            try PostgresWebhookRepository(db: $0).claim(node: node, nowMs: nowMs, leaseMs: leaseMs, limit: limit)
        }
    }

    public func renewWebhookClaims(node: String, nowMs: Int64, leaseMs: Int64,
                                   completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).renew(node: node, untilMs: nowMs + leaseMs) }
    }

    public func releaseWebhookClaims(node: String, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).release(node: node) }
    }

    public func rescheduleWebhook(seq: Int64, attempts: Int, nextAttemptMs: Int64,
                                  completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).reschedule(seq: seq, attempts: attempts, nextAttemptMs: nextAttemptMs) }
    }

    public func removeWebhooks(seqs: [Int64], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).delete(seqs: seqs) }
    }

    public func discardWebhooks(keepingURLs urls: Set<String>, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).discard(keepingURLs: urls) }
    }

    public func webhookCount(completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        submit(completion) { try PostgresWebhookRepository(db: $0).count() }
    }
}

extension PostgresChatStore: SharedCallLifecycle {
    public func endSettledCalls(nowMs: Int64, settleMs: Int64, drafts: @escaping LifecycleDrafts,
                                completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        submit(completion, mayRepeat: false) { db in
            try db.transaction {
                let repository = PostgresWebhookRepository(db: db)
                let events = try repository.endSettled(nowMs: nowMs, settleMs: settleMs)
                _ = try repository.insert(drafts(events, nowMs))
                return events.count
            }
        }
    }

    public func recordSeats(_ changes: [LifecycleSeatChange], node: String, nowMs: Int64, drafts: @escaping LifecycleDrafts,
                            completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void) {
        // Not repeated after a lost connection: the seats and their events may have committed.
        submit(completion, mayRepeat: false) { db in
            guard !changes.isEmpty else { return [] }
            return try db.transaction {
                let repository = PostgresWebhookRepository(db: db)
                let events = try repository.record(changes, node: node, nowMs: nowMs)
                return try repository.insert(drafts(events, nowMs))
            }
        }
    }

    public func endSeats(ofNodesNotIn alive: Set<String>?, node: String, nowMs: Int64, reason: String, drafts: @escaping LifecycleDrafts,
                         completion: @escaping @Sendable (Result<[String], StoreError>) -> Void) {
        submit(completion, mayRepeat: false) { db in
            try db.transaction {
                let repository = PostgresWebhookRepository(db: db)
                let (nodes, events) = try repository.endSeats(ofNodesNotIn: alive, node: node, nowMs: nowMs, reason: reason)
                _ = try repository.insert(drafts(events, nowMs))
                return nodes
            }
        }
    }
}
