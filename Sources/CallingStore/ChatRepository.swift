import CSQLite
import CallingCore

/// Something that carries a chat draft: the draft itself, or a pending append in a store's batch,
/// so that `ChatRepository.append` reads a batch's drafts where they are.
protocol ChatDraftCarrying {
    var draft: ChatDraft { get }
}

extension ChatDraft: ChatDraftCarrying {
    var draft: ChatDraft { self }
}

/// The chat SQL, run synchronously on a connection. `ChatStore` calls it on its queue; nothing else should
/// (it is internal so that the queue discipline cannot be bypassed from outside the module).
struct ChatRepository {
    let db: SQLiteConnection

    // MARK: Append

    /// Writes a batch of drafts in ONE `BEGIN IMMEDIATE` transaction and returns one result per draft, in
    /// order. Either all of them are committed or the transaction is rolled back and this throws.
    ///
    /// Per draft: an existing (room, sender, client_id) yields the original row marked duplicate (also
    /// when the first copy is earlier in the same batch); otherwise it gets the room's last_seq + 1.
    /// Because the seq is read and bumped inside the same write transaction, seqs are gap-free per room
    /// even against another process writing the same file.
    ///
    /// The rows go in as multi-row INSERTs of `chunkSizes` rows (`insertChunk`) and the last few one
    /// by one (`insertOne`); a chunk that meets a duplicate is redone one row at a time.
    func append(_ drafts: [ChatDraft]) throws -> [ChatAppendResult] {
        try append(drafts[...])
    }

    /// `append(_:)` for the drafts a batch carries (`ChatStore`'s pending appends), read in place:
    /// a copy of the batch's drafts was five string retains and releases per chat.
    func append<Batch: RandomAccessCollection>(_ drafts: Batch) throws -> [ChatAppendResult]
    where Batch.Element: ChatDraftCarrying, Batch.Index == Int {
        try db.transaction(.immediate) {
            var batch = BatchState()
            batch.results.reserveCapacity(drafts.count)
            var index = drafts.startIndex
            while index < drafts.endIndex {
                // Only plain messages go into a multi-row insert; an operation or a reply is
                // checked against stored rows first (`insertChecked`), one at a time.
                var remaining = 0
                while remaining < Self.chunkSizes[0], index + remaining < drafts.endIndex,
                      drafts[index + remaining].draft.isPlainMessage { remaining += 1 }
                if remaining == 0 {
                    try insertChecked(drafts[index].draft, &batch)
                    index += 1
                } else if let rows = Self.chunkSizes.first(where: { $0 <= remaining }) {
                    let chunk = index..<(index + rows)
                    if try !insertChunk(drafts, chunk, &batch) {
                        // A retry (or a second copy within the chunk) hit the dedup key: the chunk's
                        // statement was rolled back on its own, and the rows go one by one instead.
                        for row in chunk { try insertOne(drafts[row].draft, &batch) }
                    }
                    index += rows
                } else {
                    try insertOne(drafts[index].draft, &batch)
                    index += 1
                }
            }
            // One counter update per room per batch rather than per message.
            for room in batch.rooms.values {
                try db.run("UPDATE rooms SET last_seq = ?2, last_ts = max(last_ts, ?3) WHERE room_no = ?1",
                           [.integer(room.number), .integer(room.lastSeq), .integer(room.lastTs)])
            }
            // The inbox's rows: once per (sender, room) per batch.
            for sender in batch.senders {
                try db.run("INSERT OR IGNORE INTO chat_room_peers (peer_id, room_no) VALUES (?1, ?2)",
                           [.text(sender.peer.rawValue), .integer(sender.room)])
            }
            return batch.results
        }
    }

    /// What the rows of one batch have done so far.
    private struct BatchState {
        /// Each room's number and the last seq given out in it in this batch; written to `rooms` at its end.
        var rooms: [RoomID: RoomCounter] = [:]
        var results: [ChatAppendResult] = []
        /// Who stored rows in which room in this batch, for `chat_room_peers` at its end.
        var senders: Set<SenderRoom> = []
    }

    /// A sender and a room's number.
    private struct SenderRoom: Hashable {
        var peer: PeerID
        var room: Int64
    }

    /// A room's `rooms.room_no`, the key of its rows (migration 006), its last seq and the latest
    /// ts of its rows (migration 010).
    private struct RoomCounter {
        var number: Int64
        var lastSeq: Int64
        var lastTs: Int64 = 0
    }

    /// Rows per multi-row INSERT, largest first; a batch is cut into these and the last few rows go
    /// one by one. Few sizes, so the statement cache holds few of them.
    private static let chunkSizes = [64, 16, 4]

    /// Parameters per row of an insert, in column order (`insertSQL`'s columns).
    private static let columns = 8

    private static let insertSQL = "INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, meta, ts) VALUES "

    /// `INSERT … VALUES (…), (…), …` for `rows` rows, `columns` parameters per row in column order.
    private static let chunkSQL: [Int: SQLiteStatementKey] = Dictionary(uniqueKeysWithValues: chunkSizes.map { rows in
        let values = (0..<rows).map { row in
            "(" + (1...columns).map { "?\(row * columns + $0)" }.joined(separator: ", ") + ")"
        }
        return (rows, SQLiteStatementKey(insertSQL + values.joined(separator: ", ")))
    })

    /// Inserts the drafts at `rows` with one statement and returns true, or returns false with nothing
    /// inserted and nothing given out when a constraint refused it (the caller then goes row by row,
    /// which finds the duplicate or reports the real error).
    ///
    /// One statement for many rows: SQLite's per-statement work (starting it, the statement journal
    /// an insert into two B-trees needs, ending it) is paid once per chunk instead of once per row.
    /// Without `ON CONFLICT … DO NOTHING`, a duplicate aborts the statement (and only it) instead of
    /// being skipped, which is what keeps seq gap-free: the seqs of the chunk are handed out only if
    /// all of its rows went in.
    private func insertChunk<Batch: RandomAccessCollection>(
        _ drafts: Batch, _ rows: Range<Int>, _ batch: inout BatchState
    ) throws -> Bool where Batch.Element: ChatDraftCarrying, Batch.Index == Int {
        guard let key = Self.chunkSQL[rows.count] else { return false }
        // The seqs go straight into the batch's counters, one hash of the room id per row (a
        // chunk-local dictionary merged afterwards hashed each row's room three times); a refused
        // chunk takes them back (`undo`). Rooms first seen here are remembered to be removed again.
        var keys: [(room: Int64, seq: Int64)] = []
        keys.reserveCapacity(rows.count)
        var roomsAdded: [RoomID] = []
        var textBytes = 0
        // The drafts' fields are read where they are (`drafts[row].draft.x`): a `let draft` copy
        // of each row was five string retains and releases, in each of the three loops.
        for row in rows {
            let room = drafts[row].draft.room
            if let seen = batch.rooms.index(forKey: room) {
                batch.rooms.values[seen].lastSeq += 1
                batch.rooms.values[seen].lastTs = max(batch.rooms.values[seen].lastTs, drafts[row].draft.timestampMs)
                keys.append((batch.rooms.values[seen].number, batch.rooms.values[seen].lastSeq))
            } else {
                var counter = try roomCreatingIt(room)
                counter.lastSeq += 1
                counter.lastTs = drafts[row].draft.timestampMs
                batch.rooms[room] = counter
                roomsAdded.append(room)
                keys.append((counter.number, counter.lastSeq))
            }
            textBytes += room.rawValue.utf8.count + drafts[row].draft.sender.rawValue.utf8.count
                + drafts[row].draft.clientID.utf8.count + drafts[row].draft.text.utf8.count
                + (drafts[row].draft.meta?.utf8.count ?? 0)
        }
        func undo() {
            for row in rows { batch.rooms[drafts[row].draft.room]!.lastSeq -= 1 }
            for room in roomsAdded { batch.rooms[room] = nil }
        }
        // Every text of the chunk in one buffer of the exact size, bound in place as it is copied
        // (the buffer never moves): it outlives the step.
        let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(textBytes, 1))
        defer { buffer.deallocate() }
        let insert = try db.cachedStatement(key)
        let inserted: Bool
        do throws(SQLiteError) {
            inserted = try insertBound(insert, drafts, rows, keys, buffer)
        } catch {
            undo()
            throw error
        }
        guard inserted else {
            undo()
            return false
        }
        for (offset, row) in rows.enumerated() {
            batch.senders.insert(SenderRoom(peer: drafts[row].draft.sender, room: keys[offset].room))
            batch.results.append(ChatAppendResult(message: ChatRecord(
                room: drafts[row].draft.room, seq: keys[offset].seq, sender: drafts[row].draft.sender,
                clientID: drafts[row].draft.clientID, text: drafts[row].draft.text, meta: drafts[row].draft.meta,
                timestampMs: drafts[row].draft.timestampMs
            ), duplicate: false))
        }
        return true
    }

    /// Binds the chunk's rows to `insert` (their text copied into `buffer`) and steps it: true when
    /// it went in, false when a constraint refused it.
    private func insertBound<Batch: RandomAccessCollection>(
        _ insert: Statement, _ drafts: Batch, _ rows: Range<Int>, _ keys: [(room: Int64, seq: Int64)],
        _ buffer: UnsafeMutableBufferPointer<UInt8>
    ) throws(SQLiteError) -> Bool where Batch.Element: ChatDraftCarrying, Batch.Index == Int {
        defer { insert.reset() }
        var used = 0
        func text(_ string: String, _ parameter: Int32) throws(SQLiteError) {
            let start = used
            used += UnsafeMutableBufferPointer(rebasing: buffer[start...]).initialize(from: string.utf8).1
            try insert.bindTextInPlace(UnsafeBufferPointer(rebasing: buffer[start..<used]), at: parameter)
        }
        for (offset, row) in rows.enumerated() {
            let base = Int32(offset * Self.columns)
            try insert.bind(.integer(keys[offset].room), at: base + 1)
            try insert.bind(.integer(keys[offset].seq), at: base + 2)
            try text(drafts[row].draft.room.rawValue, base + 3)
            try text(drafts[row].draft.sender.rawValue, base + 4)
            try text(drafts[row].draft.clientID, base + 5)
            try text(drafts[row].draft.text, base + 6)
            if let meta = drafts[row].draft.meta { try text(meta, base + 7) } else { try insert.bind(.null, at: base + 7) }
            try insert.bind(.integer(drafts[row].draft.timestampMs), at: base + 8)
        }
        do throws(SQLiteError) {
            while try insert.step() {}
            return true
        } catch {
            guard error.code == SQLITE_CONSTRAINT else { throw error }
            return false
        }
    }

    /// One row: a retry of a stored (room, sender, client_id) yields the original, marked duplicate.
    private func insertOne(_ draft: ChatDraft, _ batch: inout BatchState) throws {
        // Looked up per row, not per batch, since the batch is mostly chunks: the cache is keyed by the
        // SQL text, hashed on every lookup.
        let insert = try db.cachedStatement(
            """
            INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, meta, ts)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            ON CONFLICT (room_no, client_id, sender) DO NOTHING
            """
        )
        defer { insert.reset() }
        // One hash of the room id per chat once its room has been seen in this batch.
        let seen = batch.rooms.index(forKey: draft.room)
        let room = try seen.map { batch.rooms.values[$0] } ?? roomCreatingIt(draft.room)
        let seq = room.lastSeq + 1
        // The unique (room, sender, client_id) index is the dedup check: a retry inserts nothing
        // (also when its first copy is earlier in this batch: the transaction sees its own rows),
        // and only then is the original looked up. A separate SELECT before every insert cost
        // a second index search per message for the rare retry.
        // The text is bound in place (no copy into SQLite) for as long as the row is stepped.
        try insert.bind(.integer(room.number), at: 1)
        try insert.bind(.integer(seq), at: 2)
        try insert.bind(.integer(draft.timestampMs), at: 8)
        try insert.withText(draft.room.rawValue, at: 3) { () throws(SQLiteError) in
            try insert.withText(draft.sender.rawValue, at: 4) { () throws(SQLiteError) in
                try insert.withText(draft.clientID, at: 5) { () throws(SQLiteError) in
                    try insert.withText(draft.text, at: 6) { () throws(SQLiteError) in
                        if let meta = draft.meta {
                            try insert.withText(meta, at: 7) { () throws(SQLiteError) in
                                while try insert.step() {}
                            }
                        } else {
                            try insert.bind(.null, at: 7)
                            while try insert.step() {}
                        }
                    }
                }
            }
        }
        if db.changes == 0 {
            let key = DedupKey(room: draft.room, roomNumber: room.number, sender: draft.sender, clientID: draft.clientID)
            guard let original = try findMessage(key) else {
                throw SQLiteError(code: SQLITE_INTERNAL, message: "chat insert ignored, but no original row")
            }
            batch.results.append(ChatAppendResult(message: original, duplicate: true))
            return
        }
        if let seen {
            batch.rooms.values[seen].lastSeq = seq
            batch.rooms.values[seen].lastTs = max(batch.rooms.values[seen].lastTs, draft.timestampMs)
        } else {
            batch.rooms[draft.room] = RoomCounter(number: room.number, lastSeq: seq, lastTs: draft.timestampMs)
        }
        batch.senders.insert(SenderRoom(peer: draft.sender, room: room.number))
        let record = ChatRecord(
            room: draft.room, seq: seq, sender: draft.sender, clientID: draft.clientID,
            text: draft.text, meta: draft.meta, timestampMs: draft.timestampMs
        )
        batch.results.append(ChatAppendResult(message: record, duplicate: false))
    }

    private struct DedupKey {
        var room: RoomID
        var roomNumber: Int64
        var sender: PeerID
        var clientID: String
    }

    private func findMessage(_ key: DedupKey) throws -> ChatRecord? {
        try db.queryFirst(
            """
            SELECT seq, text, meta, ts, kind, target, reply_to, reaction_key, deleted_ts FROM chat_messages
            WHERE room_no = ?1 AND sender = ?2 AND client_id = ?3
            """,
            [.integer(key.roomNumber), .text(key.sender.rawValue), .text(key.clientID)]
        ) { row in
            ChatRecord(
                room: key.room, seq: row.int64(0), sender: key.sender, clientID: key.clientID,
                text: row.text(1), meta: row.optionalText(2), timestampMs: row.int64(3),
                kind: ChatRowKind(rawValue: Int(row.int64(4))) ?? .message, target: row.optionalInt64(5) ?? 0,
                replyTo: row.optionalInt64(6), key: row.optionalText(7), deleted: row.optionalInt64(8) != nil
            )
        }
    }

    // MARK: Operations and replies

    /// A draft that is checked against stored rows: an operation (edit, delete, react, unreact)
    /// or a reply. A retry finds its original first (so it is acked as before even where the
    /// rules would now refuse it); then `ChatRules` decides on the target as stored in this
    /// transaction; a refusal stores nothing and takes no seq.
    private func insertChecked(_ draft: ChatDraft, _ batch: inout BatchState) throws {
        let seen = batch.rooms.index(forKey: draft.room)
        let room = try seen.map { batch.rooms.values[$0] } ?? roomCreatingIt(draft.room)
        let key = DedupKey(room: draft.room, roomNumber: room.number, sender: draft.sender, clientID: draft.clientID)
        if let original = try findMessage(key) {
            batch.results.append(ChatAppendResult(message: original, duplicate: true))
            return
        }
        let targetSeq = draft.kind == .message ? draft.replyTo ?? 0 : draft.target
        let target = try targetState(room: room.number, seq: targetSeq, key: draft.key, sender: draft.sender)
        let decision = ChatRules.decide(draft.kind, sender: draft.sender, moderator: draft.moderator, target: target,
                                        now: draft.timestampMs, limits: draft.limits)
        if case .refuse(let error) = decision {
            if seen == nil { batch.rooms[draft.room] = room }
            batch.results.append(ChatAppendResult(message: ChatRecord(draft, seq: 0), duplicate: false, refusal: error))
            return
        }
        let seq = room.lastSeq + 1
        try db.run(
            """
            INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, meta, ts, kind, target, reply_to, reaction_key)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
            """,
            [.integer(room.number), .integer(seq), .text(draft.room.rawValue), .text(draft.sender.rawValue), .text(draft.clientID),
             .text(draft.text), draft.meta.map { .text($0) } ?? .null, .integer(draft.timestampMs), .integer(Int64(draft.kind.rawValue)),
             draft.kind == .message ? .null : .integer(draft.target), draft.replyTo.map { .integer($0) } ?? .null,
             draft.key.map { .text($0) } ?? .null]
        )
        if decision == .apply { try applyOperation(draft, seq: seq, room: room.number) }
        if let seen {
            batch.rooms.values[seen].lastSeq = seq
            batch.rooms.values[seen].lastTs = max(batch.rooms.values[seen].lastTs, draft.timestampMs)
        } else {
            batch.rooms[draft.room] = RoomCounter(number: room.number, lastSeq: seq, lastTs: draft.timestampMs)
        }
        batch.senders.insert(SenderRoom(peer: draft.sender, room: room.number))
        batch.results.append(ChatAppendResult(message: ChatRecord(draft, seq: seq), duplicate: false))
    }

    /// The message at `seq` as the rules see it (nil when `seq` is not a message of the room),
    /// with the reaction facts for `key` from `sender`.
    private func targetState(room: Int64, seq: Int64, key: String?, sender: PeerID) throws -> ChatTargetState? {
        guard seq > 0, var state = try db.queryFirst(
            "SELECT sender, ts, deleted_ts FROM chat_messages WHERE room_no = ?1 AND seq = ?2 AND kind = 0",
            [.integer(room), .integer(seq)], row: { row in
                ChatTargetState(author: PeerID(row.text(0)), timestamp: row.int64(1), deleted: row.optionalInt64(2) != nil)
            }
        ) else { return nil }
        guard let key else { return state }
        state.reactionKeys = Int(try db.queryFirst(
            "SELECT count(DISTINCT reaction_key) FROM chat_reactions WHERE room_no = ?1 AND target = ?2",
            [.integer(room), .integer(seq)]
        ) { $0.int64(0) } ?? 0)
        state.hasKey = try db.queryFirst(
            "SELECT 1 FROM chat_reactions WHERE room_no = ?1 AND target = ?2 AND reaction_key = ?3 LIMIT 1",
            [.integer(room), .integer(seq), .text(key)]
        ) { _ in true } ?? false
        state.hasSendersReaction = try db.queryFirst(
            "SELECT 1 FROM chat_reactions WHERE room_no = ?1 AND target = ?2 AND reaction_key = ?3 AND peer_id = ?4",
            [.integer(room), .integer(seq), .text(key), .text(sender.rawValue)]
        ) { _ in true } ?? false
        return state
    }

    /// What an applied operation changes besides its own row: a delete erases the content of the
    /// message and of its edits (and drops its reactions); a reaction is added or removed.
    private func applyOperation(_ draft: ChatDraft, seq: Int64, room: Int64) throws {
        switch draft.kind {
        case .message, .edit:
            break
        case .delete:
            try db.run(
                """
                UPDATE chat_messages SET text = '', meta = NULL, deleted_ts = ?3, deleted_by = ?4
                WHERE room_no = ?1 AND (seq = ?2 OR (target = ?2 AND kind = 1))
                """,
                [.integer(room), .integer(draft.target), .integer(draft.timestampMs), .text(draft.sender.rawValue)]
            )
            try db.run("DELETE FROM chat_reactions WHERE room_no = ?1 AND target = ?2", [.integer(room), .integer(draft.target)])
        case .react:
            try db.run(
                "INSERT OR IGNORE INTO chat_reactions (room_no, target, reaction_key, peer_id, seq) VALUES (?1, ?2, ?3, ?4, ?5)",
                [.integer(room), .integer(draft.target), .text(draft.key ?? ""), .text(draft.sender.rawValue), .integer(seq)]
            )
        case .unreact:
            try db.run(
                "DELETE FROM chat_reactions WHERE room_no = ?1 AND target = ?2 AND reaction_key = ?3 AND peer_id = ?4",
                [.integer(room), .integer(draft.target), .text(draft.key ?? ""), .text(draft.sender.rawValue)]
            )
        }
    }

    /// The room's number and last_seq, creating its `rooms` row (the next number, last_seq 0) on its
    /// first message. Inside the write transaction, so two processes cannot take the same number.
    private func roomCreatingIt(_ room: RoomID) throws -> RoomCounter {
        if let found = try roomCounter(room) { return found }
        let number = try db.queryFirst(
            """
            INSERT INTO rooms (room_id, last_seq, room_no) VALUES (?1, 0, (SELECT coalesce(max(room_no), 0) + 1 FROM rooms))
            RETURNING room_no
            """, [.text(room.rawValue)]
        ) { $0.int64(0) }
        guard let number else { throw SQLiteError(code: SQLITE_INTERNAL, message: "rooms insert returned no room_no") }
        return RoomCounter(number: number, lastSeq: 0)
    }

    /// The room's number and last_seq, nil before its first message.
    private func roomCounter(_ room: RoomID) throws -> RoomCounter? {
        try db.queryFirst("SELECT room_no, last_seq FROM rooms WHERE room_id = ?1", [.text(room.rawValue)]) {
            RoomCounter(number: $0.int64(0), lastSeq: $0.int64(1))
        }
    }

    private func lastSeq(_ room: RoomID) throws -> Int64? {
        try db.queryFirst("SELECT last_seq FROM rooms WHERE room_id = ?1", [.text(room.rawValue)]) { $0.int64(0) }
    }

    // MARK: Read markers

    /// Moves the peer's marker forward to `seq`, clamped to the room's last_seq: a client cannot claim to
    /// have read a message that does not exist yet (a buggy or hostile client would otherwise hide every
    /// future message from its unread count). An older or equal seq changes nothing.
    func markRead(room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64) throws -> ReadMarkerResult {
        // IMMEDIATE: read-then-write; the clamp and the comparison must see what the write replaces.
        try db.transaction(.immediate) {
            let current = try marker(room: room, peer: peer)
            let target = min(seq, try lastSeq(room) ?? 0)
            guard target > current.seq else { return ReadMarkerResult(marker: current, moved: false) }
            try db.run(
                """
                INSERT INTO read_markers (room_id, peer_id, seq, updated_ms) VALUES (?1, ?2, ?3, ?4)
                ON CONFLICT (room_id, peer_id) DO UPDATE SET seq = excluded.seq, updated_ms = excluded.updated_ms
                """,
                [.text(room.rawValue), .text(peer.rawValue), .integer(target), .integer(nowMs)]
            )
            // A marker that moved is in a room with messages, so its rooms row exists.
            try db.run(
                "INSERT OR IGNORE INTO chat_room_peers (peer_id, room_no) SELECT ?2, room_no FROM rooms WHERE room_id = ?1",
                [.text(room.rawValue), .text(peer.rawValue)]
            )
            return ReadMarkerResult(marker: ReadMarker(room: room, peer: peer, seq: target, updatedMs: nowMs), moved: true)
        }
    }

    private func marker(room: RoomID, peer: PeerID) throws -> ReadMarker {
        try db.queryFirst(
            "SELECT seq, updated_ms FROM read_markers WHERE room_id = ?1 AND peer_id = ?2",
            [.text(room.rawValue), .text(peer.rawValue)]
        ) { ReadMarker(room: room, peer: peer, seq: $0.int64(0), updatedMs: $0.int64(1)) }
            ?? ReadMarker(room: room, peer: peer, seq: 0, updatedMs: nil)
    }

    // MARK: Reads

    /// Largest page size honoured; a bigger `limit` is treated as this. Keeps `limit + 1` from
    /// overflowing and one request from materializing an unbounded page. Callers apply their own, smaller
    /// protocol limit before this.
    static let maxHistoryLimit = 100_000

    /// Messages with seq > `sinceSeq`, ascending, at most `limit` (negative counts as 0).
    func history(room: RoomID, sinceSeq: Int64, limit: Int) throws -> HistoryPage {
        let limit = min(max(limit, 0), Self.maxHistoryLimit)
        // One read transaction, so lastSeq and the rows come from the same snapshot.
        return try db.transaction(.deferred) {
            guard let counter = try roomCounter(room) else {
                return HistoryPage(room: room, messages: [], hasMore: false, nextSinceSeq: sinceSeq, lastSeq: 0)
            }
            let lastSeq = counter.lastSeq
            // One row more than asked tells whether another page follows without a COUNT.
            var messages = try db.query(
                """
                SELECT seq, sender, client_id, text, meta, ts, kind, target, reply_to, reaction_key, deleted_ts FROM chat_messages
                WHERE room_no = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3
                """,
                [.integer(counter.number), .integer(sinceSeq), .integer(Int64(limit) + 1)]
            ) { row in
                ChatRecord(
                    room: room, seq: row.int64(0), sender: PeerID(row.text(1)), clientID: row.text(2),
                    text: row.text(3), meta: row.optionalText(4), timestampMs: row.int64(5),
                    kind: ChatRowKind(rawValue: Int(row.int64(6))) ?? .message, target: row.optionalInt64(7) ?? 0,
                    replyTo: row.optionalInt64(8), key: row.optionalText(9), deleted: row.optionalInt64(10) != nil
                )
            }
            let hasMore = messages.count > limit
            if hasMore { messages.removeLast() }
            return HistoryPage(
                room: room, messages: messages, hasMore: hasMore,
                nextSinceSeq: messages.last?.seq ?? sinceSeq, lastSeq: lastSeq
            )
        }
    }

    func summary(room: RoomID, peer: PeerID) throws -> RoomSummary {
        try db.transaction(.deferred) {
            let counter = try roomCounter(room)
            let lastSeq = counter?.lastSeq ?? 0
            let readSeq = try marker(room: room, peer: peer).seq
            // Walks the (room_no, seq) primary-key range after the marker only.
            let unread = try counter.map { counter in
                try db.queryFirst(
                    """
                    SELECT count(*) FROM chat_messages
                    WHERE room_no = ?1 AND seq > ?2 AND sender <> ?3 AND kind = 0 AND deleted_ts IS NULL
                    """,
                    [.integer(counter.number), .integer(readSeq), .text(peer.rawValue)]
                ) { $0.int64(0) } ?? 0
            } ?? 0
            return RoomSummary(room: room, peer: peer, lastSeq: lastSeq, readSeq: readSeq, unreadCount: Int(unread))
        }
    }

    // MARK: Message pages and the inbox

    /// A page of messages (not operations), each folded as it is now: `MessageQuery`.
    func messages(room: RoomID, query: MessageQuery) throws -> MessagePage {
        let limit = min(max(query.limit, 0), Self.maxHistoryLimit)
        return try db.transaction(.deferred) {
            guard let counter = try roomCounter(room) else {
                return MessagePage(room: room, messages: [], hasMore: false, next: query.start, lastSeq: 0)
            }
            let rows: [MessageView]
            switch query.direction {
            case .after(let since):
                rows = try db.query(
                    """
                    SELECT seq, sender, client_id, text, meta, ts, reply_to, deleted_ts FROM chat_messages
                    WHERE room_no = ?1 AND seq > ?2 AND kind = 0 ORDER BY seq LIMIT ?3
                    """, [.integer(counter.number), .integer(since), .integer(Int64(limit) + 1)], row: Self.messageView)
            case .before(let before):
                rows = try db.query(
                    """
                    SELECT seq, sender, client_id, text, meta, ts, reply_to, deleted_ts FROM chat_messages
                    WHERE room_no = ?1 AND seq < ?2 AND kind = 0 ORDER BY seq DESC LIMIT ?3
                    """, [.integer(counter.number), .integer(before), .integer(Int64(limit) + 1)], row: Self.messageView)
            }
            var page = Array(rows.prefix(limit))
            let hasMore = rows.count > limit
            if let low = page.map(\.seq).min(), let high = page.map(\.seq).max() {
                try fold(into: &page, room: counter.number, range: low...high, includeEdits: query.includeEdits)
            }
            let next = page.last?.seq ?? query.start
            return MessagePage(room: room, messages: page, hasMore: hasMore, next: next, lastSeq: counter.lastSeq)
        }
    }

    private static func messageView(_ row: Statement) -> MessageView {
        let deletedTs = row.optionalInt64(7)
        return MessageView(seq: row.int64(0), sender: PeerID(row.text(1)), clientID: row.text(2), text: row.text(3),
                           meta: row.optionalText(4), timestampMs: row.int64(5), replyTo: row.optionalInt64(6), deletedTs: deletedTs)
    }

    /// Edits and reactions of the messages in `range`, folded into `page`: two range reads per
    /// page, not two per message.
    private func fold(into page: inout [MessageView], room: Int64, range: ClosedRange<Int64>, includeEdits: Bool) throws {
        var position: [Int64: Int] = [:]
        for (index, message) in page.enumerated() { position[message.seq] = index }
        _ = try db.query(
            """
            SELECT target, seq, ts, text, meta FROM chat_messages
            WHERE room_no = ?1 AND target BETWEEN ?2 AND ?3 AND kind = 1 ORDER BY target, seq
            """, [.integer(room), .integer(range.lowerBound), .integer(range.upperBound)]
        ) { row in
            guard let index = position[row.int64(0)] else { return }
            let edit = MessageEdit(seq: row.int64(1), timestampMs: row.int64(2), text: row.text(3), meta: row.optionalText(4))
            page[index].editedTs = edit.timestampMs
            if page[index].deletedTs == nil {
                page[index].text = edit.text
                page[index].meta = edit.meta
            }
            if includeEdits { page[index].edits = (page[index].edits ?? []) + [edit] }
        }
        if includeEdits { for index in page.indices where page[index].edits == nil { page[index].edits = [] } }
        _ = try db.query(
            """
            SELECT target, reaction_key, peer_id FROM chat_reactions
            WHERE room_no = ?1 AND target BETWEEN ?2 AND ?3 ORDER BY target, reaction_key, seq
            """, [.integer(room), .integer(range.lowerBound), .integer(range.upperBound)]
        ) { row in
            guard let index = position[row.int64(0)] else { return }
            let key = row.text(1)
            if page[index].reactions.last?.key == key {
                page[index].reactions[page[index].reactions.count - 1].peers.append(PeerID(row.text(2)))
            } else {
                page[index].reactions.append(MessageReaction(key: key, peers: [PeerID(row.text(2))]))
            }
        }
    }

    /// The rooms `peer` has sent in or has a read marker in, newest activity first (`InboxQuery`).
    func inbox(peer: PeerID, query: InboxQuery) throws -> InboxPage {
        let limit = min(max(query.limit, 0), Self.maxHistoryLimit)
        return try db.transaction(.deferred) {
            let after = query.after
            var rooms = try db.query(
                """
                SELECT r.room_id, r.room_no, r.last_seq, r.last_ts FROM chat_room_peers AS p JOIN rooms AS r ON r.room_no = p.room_no
                WHERE p.peer_id = ?1 AND (?2 IS NULL OR r.last_ts < ?2 OR (r.last_ts = ?2 AND r.room_id < ?3))
                ORDER BY r.last_ts DESC, r.room_id DESC LIMIT ?4
                """,
                [.text(peer.rawValue), after.map { .integer($0.lastTs) } ?? .null, .text(after?.room.rawValue ?? ""),
                 .integer(Int64(limit) + 1)]
            ) { row in
                (InboxRoom(room: RoomID(row.text(0)), lastSeq: row.int64(2), lastTs: row.int64(3), lastMessage: nil, readSeq: 0, unread: 0),
                 row.int64(1))
            }
            let hasMore = rooms.count > limit
            if hasMore { rooms.removeLast() }
            var result: [InboxRoom] = []
            for (var room, number) in rooms {
                room.readSeq = try marker(room: room.room, peer: peer).seq
                room.unread = try db.queryFirst(
                    """
                    SELECT count(*) FROM chat_messages
                    WHERE room_no = ?1 AND seq > ?2 AND sender <> ?3 AND kind = 0 AND deleted_ts IS NULL
                    """, [.integer(number), .integer(room.readSeq), .text(peer.rawValue)]
                ) { $0.int64(0) } ?? 0
                room.lastMessage = try db.queryFirst(
                    """
                    SELECT seq, sender, text, ts FROM chat_messages
                    WHERE room_no = ?1 AND kind = 0 AND deleted_ts IS NULL ORDER BY seq DESC LIMIT 1
                    """, [.integer(number)]
                ) { row in
                    InboxMessage(seq: row.int64(0), sender: PeerID(row.text(1)), text: row.text(2), timestampMs: row.int64(3))
                }
                if let last = room.lastMessage { room.lastMessage = try currentText(of: last, room: number) }
                result.append(room)
            }
            let next = hasMore ? result.last.map { InboxCursor(lastTs: $0.lastTs, room: $0.room) } : nil
            return InboxPage(rooms: result, hasMore: hasMore, next: next)
        }
    }

    /// `message` with the text of its latest edit, if it has one.
    private func currentText(of message: InboxMessage, room: Int64) throws -> InboxMessage {
        var message = message
        if let edited = try db.queryFirst(
            "SELECT text FROM chat_messages WHERE room_no = ?1 AND target = ?2 AND kind = 1 ORDER BY seq DESC LIMIT 1",
            [.integer(room), .integer(message.seq)], row: { $0.text(0) }
        ) { message.text = edited }
        return message
    }
}
