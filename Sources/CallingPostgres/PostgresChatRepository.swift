import CallingCore
import CallingStore

/// The chat SQL for PostgreSQL, run synchronously on a connection. `PostgresChatStore` calls it on its
/// queue; nothing else should. The statements mirror CallingStore's `ChatRepository` (SQLite) and give
/// the same results; what differs is how concurrent writers are kept apart: SQLite has one writer per
/// file, PostgreSQL many, so the room rows are locked explicitly (see `append`).
struct PostgresChatRepository {
    let db: PostgresConnection

    // MARK: Append

    /// Writes a batch of drafts in ONE statement, which is its own transaction (autocommit): one round
    /// trip per batch, COMMIT included, whatever its size. Returns one result per draft, in order;
    /// either every new row is committed or none is and this throws.
    ///
    /// The statement, in the order PostgreSQL runs its parts:
    /// 1. `probe`: the first copy of each (room, sender, client_id) in the batch with its stored
    ///    original, if any (one index probe per draft); `fresh`: those not stored yet, and `counts`:
    ///    how many of them each room gets;
    /// 2. `bumped`: the rooms' counters, created or raised by that count with `INSERT … ON CONFLICT DO
    ///    UPDATE`, in room-id order. That takes each room row's lock (two servers locking overlapping
    ///    rooms do so in the same order, so they cannot deadlock) and works on the latest committed
    ///    `last_seq`, even one committed while this statement waited for the lock;
    /// 3. `inserted`: the fresh drafts take the seqs below the new `last_seq`, in batch order;
    /// 4. the result: the inserted rows, and the originals of drafts already stored.
    ///
    /// The duplicate check reads the statement's snapshot, taken before the lock wait: a copy of the
    /// same client_id committed by another server during that wait is not seen, and the insert then
    /// fails on the unique key (23505), rolling everything back. `PostgresChatStore` runs the batch
    /// again, which then finds it stored. Seqs stay gap-free because the counter moves by exactly the
    /// number of rows inserted in the same transaction.
    func append(_ drafts: [ChatDraft]) throws -> [ChatAppendResult] {
        let rows = try db.query(
            """
            WITH d AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
                    WITH ORDINALITY AS d (room_id, sender, client_id, text, meta, ts, ord)
            ), probe AS (
                SELECT f.*, m.seq AS stored_seq, m.text AS stored_text, m.meta AS stored_meta, m.ts AS stored_ts
                FROM (SELECT DISTINCT ON (room_id, sender, client_id) * FROM d ORDER BY room_id, sender, client_id, ord) AS f
                LEFT JOIN chat_messages AS m USING (room_id, sender, client_id)
            ), fresh AS (
                SELECT * FROM probe WHERE stored_seq IS NULL
            ), counts AS (
                SELECT room_id, count(*) AS n FROM fresh GROUP BY room_id
            ), bumped AS (
                INSERT INTO rooms AS r (room_id, last_seq) SELECT room_id, n FROM counts ORDER BY room_id
                ON CONFLICT (room_id) DO UPDATE SET last_seq = r.last_seq + excluded.last_seq
                RETURNING room_id, last_seq
            ), inserted AS (
                INSERT INTO chat_messages (room_id, seq, sender, client_id, text, meta, ts)
                SELECT fresh.room_id, b.last_seq - c.n + row_number() OVER (PARTITION BY fresh.room_id ORDER BY fresh.ord),
                       fresh.sender, fresh.client_id, fresh.text, fresh.meta, fresh.ts
                FROM fresh JOIN counts AS c USING (room_id) JOIN bumped AS b USING (room_id)
                RETURNING room_id, sender, client_id, seq
            )
            SELECT room_id, sender, client_id, seq, NULL, NULL, NULL FROM inserted
            UNION ALL
            SELECT room_id, sender, client_id, stored_seq, stored_text, stored_meta, stored_ts FROM probe WHERE stored_seq IS NOT NULL
            """,
            [PostgresArray.text(drafts.map(\.room.rawValue)), PostgresArray.text(drafts.map(\.sender.rawValue)),
             PostgresArray.text(drafts.map(\.clientID)), PostgresArray.text(drafts.map(\.text)),
             PostgresArray.text(drafts.map(\.meta)), PostgresArray.int64(drafts.map(\.timestampMs))])
        // New rows come back with NULL text (the draft has it); originals with their stored columns.
        var inserted: [DedupKey: Int64] = [:]
        var stored: [DedupKey: ChatRecord] = [:]
        for row in rows.rows {
            let key = DedupKey(room: RoomID(try row.text(0)), sender: PeerID(try row.text(1)), clientID: try row.text(2))
            if row[6] == nil {
                inserted[key] = try row.int64(3)
            } else {
                stored[key] = ChatRecord(room: key.room, seq: try row.int64(3), sender: key.sender, clientID: key.clientID,
                                         text: try row.text(4), meta: row[5], timestampMs: try row.int64(6))
            }
        }
        var results: [ChatAppendResult] = []
        results.reserveCapacity(drafts.count)
        for draft in drafts {
            let key = DedupKey(room: draft.room, sender: draft.sender, clientID: draft.clientID)
            if let original = stored[key] {
                results.append(ChatAppendResult(message: original, duplicate: true))
            } else if let seq = inserted.removeValue(forKey: key) {
                // The first copy in the batch; later copies find it in `stored`.
                let record = ChatRecord(room: draft.room, seq: seq, sender: draft.sender, clientID: draft.clientID,
                                        text: draft.text, meta: draft.meta, timestampMs: draft.timestampMs)
                stored[key] = record
                results.append(ChatAppendResult(message: record, duplicate: false))
            } else {
                throw PostgresError(sqlState: "", message: "chat batch returned no row for \(draft.clientID)", connectionLost: false)
            }
        }
        return results
    }

    private struct DedupKey: Hashable {
        var room: RoomID
        var sender: PeerID
        var clientID: String

    }

    // MARK: Read markers

    /// Moves the peer's marker forward to `seq`, clamped to the room's last_seq (see `ChatRepository`).
    /// One statement: the clamp, the forward-only comparison and the write see the same rows, also with
    /// another server moving the same marker at once.
    func markRead(room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64) throws -> ReadMarkerResult {
        let moved = try db.query(
            """
            INSERT INTO read_markers (room_id, peer_id, seq, updated_ms)
            SELECT r.room_id, $2::text, least($3::bigint, r.last_seq), $4::bigint FROM rooms AS r
            WHERE r.room_id = $1::text AND least($3::bigint, r.last_seq) > 0
            ON CONFLICT (room_id, peer_id) DO UPDATE SET seq = excluded.seq, updated_ms = excluded.updated_ms
            WHERE read_markers.seq < excluded.seq
            RETURNING seq
            """,
            [room.rawValue, peer.rawValue, String(seq), String(nowMs)])
        if let row = moved.rows.first {
            return ReadMarkerResult(marker: ReadMarker(room: room, peer: peer, seq: try row.int64(0), updatedMs: nowMs),
                                    moved: true)
        }
        return ReadMarkerResult(marker: try marker(room: room, peer: peer), moved: false)
    }

    private func marker(room: RoomID, peer: PeerID) throws -> ReadMarker {
        let rows = try db.query("SELECT seq, updated_ms FROM read_markers WHERE room_id = $1::text AND peer_id = $2::text",
                                [room.rawValue, peer.rawValue])
        guard let row = rows.rows.first else { return ReadMarker(room: room, peer: peer, seq: 0, updatedMs: nil) }
        return ReadMarker(room: room, peer: peer, seq: try row.int64(0), updatedMs: try row.int64(1))
    }

    // MARK: Reads

    /// Messages with seq > `sinceSeq`, ascending, at most `limit` (clamped like `ChatRepository`).
    /// One statement, so last_seq and the rows come from the same snapshot; it returns at least one row
    /// (the LEFT JOIN), which carries last_seq even when the page is empty.
    func history(room: RoomID, sinceSeq: Int64, limit: Int) throws -> HistoryPage {
        let limit = min(max(limit, 0), PostgresChatStore.maxHistoryLimit)
        let rows = try db.query(
            """
            SELECT coalesce((SELECT last_seq FROM rooms WHERE room_id = $1::text), 0),
                   m.seq, m.sender, m.client_id, m.text, m.meta, m.ts
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (
                SELECT seq, sender, client_id, text, meta, ts FROM chat_messages
                WHERE room_id = $1::text AND seq > $2::bigint ORDER BY seq LIMIT $3::bigint
            ) AS m ON true
            ORDER BY m.seq
            """,
            [room.rawValue, String(sinceSeq), String(Int64(limit) + 1)])
        var lastSeq: Int64 = 0
        var messages: [ChatRecord] = []
        for row in rows.rows {
            lastSeq = try row.int64(0)
            guard row[1] != nil else { continue }
            messages.append(ChatRecord(
                room: room, seq: try row.int64(1), sender: PeerID(try row.text(2)), clientID: try row.text(3),
                text: try row.text(4), meta: row[5], timestampMs: try row.int64(6)))
        }
        let hasMore = messages.count > limit
        if hasMore { messages.removeLast() }
        return HistoryPage(room: room, messages: messages, hasMore: hasMore,
                           nextSinceSeq: messages.last?.seq ?? sinceSeq, lastSeq: lastSeq)
    }

    func summary(room: RoomID, peer: PeerID) throws -> RoomSummary {
        let rows = try db.query(
            """
            WITH marker AS (
                SELECT coalesce((SELECT seq FROM read_markers WHERE room_id = $1::text AND peer_id = $2::text), 0) AS seq
            )
            SELECT coalesce((SELECT last_seq FROM rooms WHERE room_id = $1::text), 0), marker.seq,
                   (SELECT count(*) FROM chat_messages AS m WHERE m.room_id = $1::text AND m.seq > marker.seq AND m.sender <> $2::text)
            FROM marker
            """,
            [room.rawValue, peer.rawValue])
        guard let row = rows.rows.first else {
            throw PostgresError(sqlState: "", message: "summary returned no row", connectionLost: false)
        }
        return RoomSummary(room: room, peer: peer, lastSeq: try row.int64(0), readSeq: try row.int64(1),
                           unreadCount: Int(try row.int64(2)))
    }
}

/// Array parameters in PostgreSQL's text form (`{"a","b",NULL}`), so that a batch travels as one
/// statement with a handful of parameters rather than one statement per row.
enum PostgresArray {
    /// Every element quoted, with `"` and `\` escaped: any string survives, including `{`, `,` and
    /// spaces; `nil` is NULL.
    static func text(_ values: [String?]) -> String {
        var out = "{"
        for (index, value) in values.enumerated() {
            if index > 0 { out += "," }
            guard let value else {
                out += "NULL"
                continue
            }
            out += "\""
            if value.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                for character in value.unicodeScalars {
                    if character == "\"" || character == "\\" { out += "\\" }
                    out.unicodeScalars.append(character)
                }
            } else {
                out += value
            }
            out += "\""
        }
        return out + "}"
    }

    static func text(_ values: [String]) -> String { text(values.map(Optional.some)) }

    static func int64(_ values: [Int64]) -> String {
        "{" + values.map(String.init).joined(separator: ",") + "}"
    }
}

extension Array where Element == String? {
    /// Column `index` of a row, which the query guarantees is not NULL.
    func text(_ index: Int) throws(PostgresError) -> String {
        guard let value = self[index] else {
            throw PostgresError(sqlState: "", message: "column \(index) is NULL", connectionLost: false)
        }
        return value
    }

    func int64(_ index: Int) throws(PostgresError) -> Int64 {
        guard let value = Int64(try text(index)) else {
            throw PostgresError(sqlState: "", message: "column \(index) is not an integer", connectionLost: false)
        }
        return value
    }
}
