-- 006_chat_room_numbers: every room gets a number, and chat_messages is keyed by it instead of the room's text id.
--
-- Same rules as 001 (STRICT, NOT NULL spelled out on primary keys, no BEGIN/COMMIT: the migrator
-- wraps this file in one transaction with `PRAGMA user_version = 6`, so a failure leaves the old
-- tables untouched).
--
-- Why: every append searches both of chat_messages' B-trees, the table on (room_id, seq) and the
-- dedup index on (room_id, sender, client_id), and each step of those searches compares the key's
-- fields one by one, the text room id first, which is equal in almost every comparison near the
-- leaves. With an integer first field (room_no) that comparison is SQLite's integer fast path, and
-- the dedup key puts client_id, which tells rows apart, before sender, which mostly does not.
-- Measured on the bench's shape (docs/benchmarks.md, "Optimisation pass"): sqlite3_step per
-- appended chat 18.1k instructions before, 13.5k after (27.5k and 22.5k with random 128-bit
-- client ids).
--
-- The room's text id stays in every row (`room_id`), so a row still says which room it belongs to
-- and ad-hoc queries by room_id keep working (as a scan: the keys are on room_no).
--
-- chat_messages has no foreign key to rooms any more: it was one more search of rooms per message
-- (~1k instructions, a sixth of the saving). Its one writer, CallingStore's ChatRepository, takes
-- room_no from the rooms row it reads or creates in the same write transaction, and nothing deletes
-- rooms rows.

-- Numbered in the order the rooms were created (rowid). ADD COLUMN cannot add NOT NULL without a
-- default, so the column is nullable here; every row gets its number right below, and the writer
-- always sets it (`max(room_no) + 1` inside its write transaction).
ALTER TABLE rooms ADD COLUMN room_no INTEGER CHECK (room_no > 0);
UPDATE rooms SET room_no = rowid;
CREATE UNIQUE INDEX rooms_room_no ON rooms (room_no);

CREATE TABLE chat_messages_numbered (
    room_no   INTEGER NOT NULL, -- rooms.room_no of room_id
    seq       INTEGER NOT NULL CHECK (seq > 0),
    room_id   TEXT    NOT NULL,
    sender    TEXT    NOT NULL,
    client_id TEXT    NOT NULL,
    text      TEXT    NOT NULL,
    -- Client-chosen JSON, already serialized and validated by CallingProtocol; stored verbatim. There is
    -- deliberately no json_valid() CHECK: inserts are group-committed, and one bad row would fail the
    -- whole batch, i.e. other people's messages.
    meta      TEXT    NULL,
    ts        INTEGER NOT NULL, -- server time, unix milliseconds
    PRIMARY KEY (room_no, seq),
    -- A retried send carries the same client_id and must find the original row, never create a second.
    -- client_id before sender: two rows of one room rarely share a client_id, so a comparison on the
    -- way down the index is decided by client_id and never reads sender, where (room, sender, …) had to
    -- compare the sender, equal in most comparisons, first.
    UNIQUE (room_no, client_id, sender)
) STRICT, WITHOUT ROWID;

-- In key order, so the new B-tree is filled left to right.
INSERT INTO chat_messages_numbered (room_no, seq, room_id, sender, client_id, text, meta, ts)
    SELECT r.room_no, m.seq, m.room_id, m.sender, m.client_id, m.text, m.meta, m.ts
    FROM chat_messages AS m JOIN rooms AS r USING (room_id) ORDER BY r.room_no, m.seq;

DROP TABLE chat_messages;

ALTER TABLE chat_messages_numbered RENAME TO chat_messages;
