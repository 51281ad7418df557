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
                SELECT m.room_id, m.sender, m.client_id, m.seq, m.text, m.meta, m.ts, m.kind, m.target, m.reply_to,
                       m.reaction_key, m.deleted_ts
                FROM unnest($1::text[], $2::text[], $3::text[]) AS k (room_id, sender, client_id)
                JOIN chat_messages AS m USING (room_id, sender, client_id)
                """,
                [PostgresArray.text(drafts.map(\.room.rawValue)), PostgresArray.text(drafts.map(\.sender.rawValue)),
                 PostgresArray.text(drafts.map(\.clientID))])
            var known: [DedupKey: ChatRecord] = [:]
            for row in stored.rows {
                let record = try Self.record(row, room: RoomID(try row.text(0)), columns: (3, 1, 2, 4, 5, 6, 7))
                known[DedupKey(record)] = record
            }

            var results: [ChatAppendResult] = []
            results.reserveCapacity(drafts.count)
            var inserted: [ChatRecord] = []
            var lastTs: [RoomID: Int64] = [:]
            for draft in drafts {
                let key = DedupKey(room: draft.room, sender: draft.sender, clientID: draft.clientID)
                if let original = known[key] {
                    results.append(ChatAppendResult(message: original, duplicate: true))
                    continue
                }
                guard let previous = lastSeq[draft.room] else {
                    throw PostgresError(sqlState: "", message: "room \(draft.room) not locked", connectionLost: false)
                }
                if !draft.isPlainMessage {
                    // Checked against the stored target, which may be a message of this batch:
                    // the rows so far go in first.
                    try insert(inserted)
                    inserted.removeAll()
                    let result = try insertChecked(draft, seq: previous + 1)
                    if result.refusal == nil {
                        lastSeq[draft.room] = result.message.seq
                        known[key] = result.message
                        lastTs[draft.room] = max(lastTs[draft.room] ?? 0, draft.timestampMs)
                    }
                    results.append(result)
                    continue
                }
                let record = ChatRecord(room: draft.room, seq: previous + 1, sender: draft.sender, clientID: draft.clientID,
                                        text: draft.text, meta: draft.meta, timestampMs: draft.timestampMs)
                lastSeq[draft.room] = record.seq
                lastTs[draft.room] = max(lastTs[draft.room] ?? 0, draft.timestampMs)
                known[key] = record
                inserted.append(record)
                results.append(ChatAppendResult(message: record, duplicate: false))
            }
            try insert(inserted)
            let bumped = rooms.compactMap { room in lastSeq[RoomID(room)].map { (room, $0, lastTs[RoomID(room)] ?? 0) } }
            try db.query(
                """
                UPDATE rooms AS r SET last_seq = u.last_seq, last_ts = greatest(r.last_ts, u.last_ts)
                FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u (room_id, last_seq, last_ts)
                WHERE r.room_id = u.room_id AND r.last_seq <> u.last_seq
                """,
                [PostgresArray.text(bumped.map(\.0)), PostgresArray.int64(bumped.map(\.1)), PostgresArray.int64(bumped.map(\.2))])
            let senders = Set(results.filter { !$0.duplicate && $0.refusal == nil }.map { [$0.message.sender.rawValue, $0.message.room.rawValue] })
            if !senders.isEmpty {
                try db.query(
                    """
                    INSERT INTO chat_room_peers (peer_id, room_id) SELECT * FROM unnest($1::text[], $2::text[])
                    ON CONFLICT DO NOTHING
                    """,
                    [PostgresArray.text(senders.map { $0[0] }), PostgresArray.text(senders.map { $0[1] })])
            }
            return results
        }
    }

    /// The plain messages of a batch, in one statement.
    private func insert(_ inserted: [ChatRecord]) throws {
        guard !inserted.isEmpty else { return }
        try db.query(
            """
            INSERT INTO chat_messages (room_id, seq, sender, client_id, text, meta, ts)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
            """,
            [PostgresArray.text(inserted.map(\.room.rawValue)), PostgresArray.int64(inserted.map(\.seq)),
             PostgresArray.text(inserted.map(\.sender.rawValue)), PostgresArray.text(inserted.map(\.clientID)),
             PostgresArray.text(inserted.map(\.text)), PostgresArray.text(inserted.map(\.meta)),
             PostgresArray.int64(inserted.map(\.timestampMs))])
    }

    /// A record from a row whose columns are (seq, sender, client_id, text, meta, ts, then kind,
    /// target, reply_to, reaction_key, deleted_ts) at the given positions (the last five follow `kind`).
    private static func record(_ row: [String?], room: RoomID, columns: (Int, Int, Int, Int, Int, Int, Int)) throws -> ChatRecord {
        let (seq, sender, clientID, text, meta, ts, kind) = columns
        return ChatRecord(
            room: room, seq: try row.int64(seq), sender: PeerID(try row.text(sender)), clientID: try row.text(clientID),
            text: try row.text(text), meta: row[meta], timestampMs: try row.int64(ts),
            kind: ChatRowKind(rawValue: Int(try row.int64(kind))) ?? .message, target: row[kind + 1].flatMap { Int64($0) } ?? 0,
            replyTo: row[kind + 2].flatMap { Int64($0) }, key: row[kind + 3], deleted: row[kind + 4] != nil)
    }

    // MARK: Operations and replies

    /// An operation or a reply, under the room's lock: `ChatRules` on the target as stored, then
    /// the row at `seq` and what it changes (see CallingStore's `ChatRepository.insertChecked`).
    private func insertChecked(_ draft: ChatDraft, seq: Int64) throws -> ChatAppendResult {
        let room = draft.room.rawValue
        let targetSeq = draft.kind == .message ? draft.replyTo ?? 0 : draft.target
        var target: ChatTargetState?
        if let row = try db.query(
            "SELECT sender, ts, deleted_ts FROM chat_messages WHERE room_id = $1::text AND seq = $2::bigint AND kind = 0",
            [room, String(targetSeq)]).rows.first {
            var state = ChatTargetState(author: PeerID(try row.text(0)), timestamp: try row.int64(1), deleted: row[2] != nil)
            if let key = draft.key {
                let facts = try db.query(
                    """
                    SELECT count(DISTINCT reaction_key), count(*) FILTER (WHERE reaction_key = $3::text),
                           count(*) FILTER (WHERE reaction_key = $3::text AND peer_id = $4::text)
                    FROM chat_reactions WHERE room_id = $1::text AND target = $2::bigint
                    """, [room, String(targetSeq), key, draft.sender.rawValue])
                if let facts = facts.rows.first {
                    state.reactionKeys = Int(try facts.int64(0))
                    state.hasKey = try facts.int64(1) > 0
                    state.hasSendersReaction = try facts.int64(2) > 0
                }
            }
            target = state
        }
        let decision = ChatRules.decide(draft.kind, sender: draft.sender, moderator: draft.moderator, target: target,
                                        now: draft.timestampMs, limits: draft.limits)
        if case .refuse(let error) = decision {
            return ChatAppendResult(message: ChatRecord(draft, seq: 0), duplicate: false, refusal: error)
        }
        try db.query(
            """
            INSERT INTO chat_messages (room_id, seq, sender, client_id, text, meta, ts, kind, target, reply_to, reaction_key)
            VALUES ($1::text, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::smallint, $9::bigint, $10::bigint, $11::text)
            """,
            [room, String(seq), draft.sender.rawValue, draft.clientID, draft.text, draft.meta, String(draft.timestampMs),
             String(draft.kind.rawValue), draft.kind == .message ? nil : String(draft.target), draft.replyTo.map(String.init), draft.key])
        if decision == .apply {
            switch draft.kind {
            case .message, .edit:
                break
            case .delete:
                try db.query(
                    """
                    UPDATE chat_messages SET text = '', meta = NULL, deleted_ts = $3::bigint, deleted_by = $4::text
                    WHERE room_id = $1::text AND (seq = $2::bigint OR (target = $2::bigint AND kind = 1))
                    """, [room, String(draft.target), String(draft.timestampMs), draft.sender.rawValue])
                try db.query("DELETE FROM chat_reactions WHERE room_id = $1::text AND target = $2::bigint", [room, String(draft.target)])
            case .react:
                try db.query(
                    """
                    INSERT INTO chat_reactions (room_id, target, reaction_key, peer_id, seq)
                    VALUES ($1::text, $2::bigint, $3::text, $4::text, $5::bigint) ON CONFLICT DO NOTHING
                    """, [room, String(draft.target), draft.key ?? "", draft.sender.rawValue, String(seq)])
            case .unreact:
                try db.query(
                    """
                    DELETE FROM chat_reactions
                    WHERE room_id = $1::text AND target = $2::bigint AND reaction_key = $3::text AND peer_id = $4::text
                    """, [room, String(draft.target), draft.key ?? "", draft.sender.rawValue])
            }
        }
        return ChatAppendResult(message: ChatRecord(draft, seq: seq), duplicate: false)
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
            try db.query("INSERT INTO chat_room_peers (peer_id, room_id) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING",
                         [peer.rawValue, room.rawValue])
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
                   m.seq, m.sender, m.client_id, m.text, m.meta, m.ts, m.kind, m.target, m.reply_to, m.reaction_key, m.deleted_ts
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (
                SELECT seq, sender, client_id, text, meta, ts, kind, target, reply_to, reaction_key, deleted_ts FROM chat_messages
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
            messages.append(try Self.record(row, room: room, columns: (1, 2, 3, 4, 5, 6, 7)))
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
                   (SELECT count(*) FROM chat_messages AS m WHERE m.room_id = $1::text AND m.seq > marker.seq AND m.sender <> $2::text
                    AND m.kind = 0 AND m.deleted_ts IS NULL)
            FROM marker
            """,
            [room.rawValue, peer.rawValue])
        guard let row = rows.rows.first else {
            throw PostgresError(sqlState: "", message: "summary returned no row", connectionLost: false)
        }
        return RoomSummary(room: room, peer: peer, lastSeq: try row.int64(0), readSeq: try row.int64(1),
                           unreadCount: Int(try row.int64(2)))
    }

    // MARK: Message pages and the inbox

    /// A page of messages folded as they are now (see CallingStore's `ChatRepository.messages`).
    func messages(room: RoomID, query: MessageQuery) throws -> MessagePage {
        let limit = min(max(query.limit, 0), PostgresChatStore.maxHistoryLimit)
        return try db.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") {
            let lastSeq = try db.query("SELECT last_seq FROM rooms WHERE room_id = $1::text", [room.rawValue]).rows.first
                .map { try $0.int64(0) } ?? 0
            let (comparison, order, start): (String, String, Int64) = switch query.direction {
            case .after(let seq): (">", "ASC", seq)
            case .before(let seq): ("<", "DESC", seq)
            }
            let rows = try db.query(
                """
                SELECT seq, sender, client_id, text, meta, ts, reply_to, deleted_ts FROM chat_messages
                WHERE room_id = $1::text AND seq \(comparison) $2::bigint AND kind = 0 ORDER BY seq \(order) LIMIT $3::bigint
                """, [room.rawValue, String(start), String(Int64(limit) + 1)])
            var page: [MessageView] = []
            for row in rows.rows.prefix(limit) {
                page.append(MessageView(seq: try row.int64(0), sender: PeerID(try row.text(1)), clientID: try row.text(2),
                                        text: try row.text(3), meta: row[4], timestampMs: try row.int64(5),
                                        replyTo: row[6].flatMap { Int64($0) }, deletedTs: row[7].flatMap { Int64($0) }))
            }
            if let low = page.map(\.seq).min(), let high = page.map(\.seq).max() {
                var position: [Int64: Int] = [:]
                for (index, message) in page.enumerated() { position[message.seq] = index }
                let edits = try db.query(
                    """
                    SELECT target, seq, ts, text, meta FROM chat_messages
                    WHERE room_id = $1::text AND target BETWEEN $2::bigint AND $3::bigint AND kind = 1 ORDER BY target, seq
                    """, [room.rawValue, String(low), String(high)])
                for row in edits.rows {
                    guard let index = position[try row.int64(0)] else { continue }
                    let edit = MessageEdit(seq: try row.int64(1), timestampMs: try row.int64(2), text: try row.text(3), meta: row[4])
                    page[index].editedTs = edit.timestampMs
                    if page[index].deletedTs == nil {
                        page[index].text = edit.text
                        page[index].meta = edit.meta
                    }
                    if query.includeEdits { page[index].edits = (page[index].edits ?? []) + [edit] }
                }
                if query.includeEdits { for index in page.indices where page[index].edits == nil { page[index].edits = [] } }
                let reactions = try db.query(
                    """
                    SELECT target, reaction_key, peer_id FROM chat_reactions
                    WHERE room_id = $1::text AND target BETWEEN $2::bigint AND $3::bigint ORDER BY target, reaction_key COLLATE "C", seq
                    """, [room.rawValue, String(low), String(high)])
                for row in reactions.rows {
                    guard let index = position[try row.int64(0)] else { continue }
                    let key = try row.text(1)
                    if page[index].reactions.last?.key == key {
                        page[index].reactions[page[index].reactions.count - 1].peers.append(PeerID(try row.text(2)))
                    } else {
                        page[index].reactions.append(MessageReaction(key: key, peers: [PeerID(try row.text(2))]))
                    }
                }
            }
            return MessagePage(room: room, messages: page, hasMore: rows.rows.count > limit, next: page.last?.seq ?? query.start,
                               lastSeq: lastSeq)
        }
    }

    /// A page of `peer`'s inbox (see CallingStore's `ChatRepository.inbox`).
    func inbox(peer: PeerID, query: InboxQuery) throws -> InboxPage {
        let limit = min(max(query.limit, 0), PostgresChatStore.maxHistoryLimit)
        return try db.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") {
            let rows = try db.query(
                """
                SELECT r.room_id, r.last_seq, r.last_ts,
                       coalesce((SELECT seq FROM read_markers AS k WHERE k.room_id = r.room_id AND k.peer_id = $1::text), 0) AS read_seq
                FROM chat_room_peers AS p JOIN rooms AS r ON r.room_id = p.room_id
                WHERE p.peer_id = $1::text
                  AND ($2::bigint IS NULL OR (r.last_ts, r.room_id COLLATE "C") < ($2::bigint, $3::text COLLATE "C"))
                ORDER BY r.last_ts DESC, r.room_id COLLATE "C" DESC LIMIT $4::bigint
                """, [peer.rawValue, query.after.map { String($0.lastTs) }, query.after?.room.rawValue ?? "", String(Int64(limit) + 1)])
            var result: [InboxRoom] = []
            for row in rows.rows.prefix(limit) {
                let room = try row.text(0)
                let readSeq = try row.int64(3)
                let unread = try db.query(
                    """
                    SELECT count(*) FROM chat_messages
                    WHERE room_id = $1::text AND seq > $2::bigint AND sender <> $3::text AND kind = 0 AND deleted_ts IS NULL
                    """, [room, String(readSeq), peer.rawValue]).rows.first.map { try $0.int64(0) } ?? 0
                let last = try db.query(
                    """
                    SELECT m.seq, m.sender, coalesce((SELECT e.text FROM chat_messages AS e WHERE e.room_id = m.room_id
                           AND e.target = m.seq AND e.kind = 1 ORDER BY e.seq DESC LIMIT 1), m.text), m.ts
                    FROM chat_messages AS m WHERE m.room_id = $1::text AND m.kind = 0 AND m.deleted_ts IS NULL
                    ORDER BY m.seq DESC LIMIT 1
                    """, [room]).rows.first.map { row in
                    InboxMessage(seq: try row.int64(0), sender: PeerID(try row.text(1)), text: try row.text(2), timestampMs: try row.int64(3))
                }
                result.append(InboxRoom(room: RoomID(room), lastSeq: try row.int64(1), lastTs: try row.int64(2), lastMessage: last,
                                        readSeq: readSeq, unread: unread))
            }
            let hasMore = rows.rows.count > limit
            let next = hasMore ? result.last.map { InboxCursor(lastTs: $0.lastTs, room: $0.room) } : nil
            return InboxPage(rooms: result, hasMore: hasMore, next: next)
        }
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
