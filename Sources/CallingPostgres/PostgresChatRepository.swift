import CallingCore
import CallingStore

/// The chat SQL for PostgreSQL, run synchronously on a connection. `PostgresChatStore` calls it on its
/// queue; nothing else should. The statements mirror CallingStore's `ChatRepository` (SQLite) and give
/// the same results; what differs is how concurrent writers are kept apart: SQLite has one writer per
/// file, PostgreSQL many, so the room rows are locked explicitly (see `append`).
///
/// (A version that did a batch in ONE statement, data-modifying CTEs in its own transaction, one
/// round trip instead of seven, measured no faster and often slower on this two-core machine,
/// 8–16k against 11–29k acked/s side by side: its extra sorts and materialized CTEs cost more
/// PostgreSQL CPU than the round trips on loopback. docs/benchmarks.md, "Chat with PostgreSQL".)
struct PostgresChatRepository {
    let db: PostgresConnection

    // MARK: Append

    /// Writes a batch of drafts in ONE transaction and returns one result per draft, in order. Either
    /// all of them are committed or the transaction is rolled back and this throws.
    ///
    /// A constant number of statements per batch, whatever its size (arrays, not one INSERT per row):
    /// 1. create the batch's rooms that are new (`ON CONFLICT DO NOTHING`: a concurrent creator wins);
    /// 2. lock their `rooms` rows with `SELECT … FOR UPDATE`, in room-id order so that two servers
    ///    locking overlapping sets cannot deadlock; from here no other transaction can append to these
    ///    rooms until we commit, and `last_seq` is the latest committed value;
    /// 3. find drafts already stored (retried client_ids): under the locks nobody can store them now;
    /// 4. number the others last_seq + 1, + 2, … (a second copy within the batch is a duplicate of the
    ///    first), insert them and store the new last_seq.
    func append(_ drafts: [ChatDraft]) throws -> [ChatAppendResult] {
        try db.transaction {
            let rooms = Array(Set(drafts.map(\.room.rawValue))).sorted()
            let roomArray = PostgresArray.text(rooms)
            try db.query(
                "INSERT INTO rooms (room_id, last_seq) SELECT r, 0 FROM unnest($1::text[]) AS r ON CONFLICT (room_id) DO NOTHING",
                [roomArray])
            let locked = try db.query(
                "SELECT room_id, last_seq FROM rooms WHERE room_id = ANY($1::text[]) ORDER BY room_id FOR UPDATE", [roomArray])
            var lastSeq: [RoomID: Int64] = [:]
            for row in locked.rows { lastSeq[RoomID(try row.text(0))] = try row.int64(1) }

            let stored = try db.query(
                """
                SELECT m.room_id, m.sender, m.client_id, m.seq, m.text, m.meta, m.ts
                FROM unnest($1::text[], $2::text[], $3::text[]) AS k (room_id, sender, client_id)
                JOIN chat_messages AS m USING (room_id, sender, client_id)
                """,
                [PostgresArray.text(drafts.map(\.room.rawValue)), PostgresArray.text(drafts.map(\.sender.rawValue)),
                 PostgresArray.text(drafts.map(\.clientID))])
            var known: [DedupKey: ChatRecord] = [:]
            for row in stored.rows {
                let record = ChatRecord(
                    room: RoomID(try row.text(0)), seq: try row.int64(3), sender: PeerID(try row.text(1)),
                    clientID: try row.text(2), text: try row.text(4), meta: row[5], timestampMs: try row.int64(6))
                known[DedupKey(record)] = record
            }

            var results: [ChatAppendResult] = []
            results.reserveCapacity(drafts.count)
            var inserted: [ChatRecord] = []
            for draft in drafts {
                let key = DedupKey(room: draft.room, sender: draft.sender, clientID: draft.clientID)
                if let original = known[key] {
                    results.append(ChatAppendResult(message: original, duplicate: true))
                    continue
                }
                guard let previous = lastSeq[draft.room] else {
                    throw PostgresError(sqlState: "", message: "room \(draft.room) not locked", connectionLost: false)
                }
                let record = ChatRecord(room: draft.room, seq: previous + 1, sender: draft.sender, clientID: draft.clientID,
                                        text: draft.text, meta: draft.meta, timestampMs: draft.timestampMs)
                lastSeq[draft.room] = record.seq
                known[key] = record
                inserted.append(record)
                results.append(ChatAppendResult(message: record, duplicate: false))
            }
            guard !inserted.isEmpty else { return results }
            try db.query(
                """
                INSERT INTO chat_messages (room_id, seq, sender, client_id, text, meta, ts)
                SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
                """,
                [PostgresArray.text(inserted.map(\.room.rawValue)), PostgresArray.int64(inserted.map(\.seq)),
                 PostgresArray.text(inserted.map(\.sender.rawValue)), PostgresArray.text(inserted.map(\.clientID)),
                 PostgresArray.text(inserted.map(\.text)), PostgresArray.text(inserted.map(\.meta)),
                 PostgresArray.int64(inserted.map(\.timestampMs))])
            let bumped = rooms.compactMap { room in lastSeq[RoomID(room)].map { (room, $0) } }
            try db.query(
                """
                UPDATE rooms AS r SET last_seq = u.last_seq
                FROM unnest($1::text[], $2::bigint[]) AS u (room_id, last_seq)
                WHERE r.room_id = u.room_id AND r.last_seq <> u.last_seq
                """,
                [PostgresArray.text(bumped.map(\.0)), PostgresArray.int64(bumped.map(\.1))])
            return results
        }
    }

    private struct DedupKey: Hashable {
        var room: RoomID
        var sender: PeerID
        var clientID: String

        init(room: RoomID, sender: PeerID, clientID: String) {
            self.room = room
            self.sender = sender
            self.clientID = clientID
        }

        init(_ record: ChatRecord) {
            self.init(room: record.room, sender: record.sender, clientID: record.clientID)
        }
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
