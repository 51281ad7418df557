-- 005_chat_without_rowid: chat_messages rebuilt as a WITHOUT ROWID table clustered on (room_id, seq).
--
-- Same rules as 001 (STRICT, NOT NULL spelled out on primary keys, no BEGIN/COMMIT: the migrator
-- wraps this file in one transaction with `PRAGMA user_version = 5`, so a failure leaves the old
-- table untouched).
--
-- Why: as a rowid table (001) every message lived in the table's rowid B-tree, and its primary key
-- (room_id, seq) was a second B-tree pointing into it. A history page (seq > ? in one room, ORDER BY
-- seq) walked the key index and then made one more B-tree search per row for the row itself, and
-- every insert updated three B-trees (table, primary key, unique dedup index). Clustered on the
-- primary key, a page's rows sit on consecutive leaf pages and an insert updates two B-trees.
--
-- Every column, type, CHECK and constraint of 001 is kept as it was: the foreign key to rooms, the
-- (room_id, seq) primary key and the UNIQUE (room_id, sender, client_id) dedup key. Nothing refers to
-- chat_messages by foreign key, so it can be dropped and replaced inside the transaction with
-- foreign_keys on (SQLite's "generalized ALTER TABLE procedure" needs foreign_keys off only when
-- other tables refer to the table being rebuilt).

CREATE TABLE chat_messages_clustered (
    room_id   TEXT    NOT NULL REFERENCES rooms (room_id),
    seq       INTEGER NOT NULL CHECK (seq > 0),
    sender    TEXT    NOT NULL,
    client_id TEXT    NOT NULL,
    text      TEXT    NOT NULL,
    -- Client-chosen JSON, already serialized and validated by CallingProtocol; stored verbatim. There is
    -- deliberately no json_valid() CHECK: inserts are group-committed, and one bad row would fail the
    -- whole batch, i.e. other people's messages.
    meta      TEXT    NULL,
    ts        INTEGER NOT NULL, -- server time, unix milliseconds
    PRIMARY KEY (room_id, seq),
    -- A retried send carries the same client_id and must find the original row, never create a second.
    UNIQUE (room_id, sender, client_id)
) STRICT, WITHOUT ROWID;

-- In key order, so the new B-tree is filled left to right.
INSERT INTO chat_messages_clustered (room_id, seq, sender, client_id, text, meta, ts)
    SELECT room_id, seq, sender, client_id, text, meta, ts FROM chat_messages ORDER BY room_id, seq;

DROP TABLE chat_messages;

ALTER TABLE chat_messages_clustered RENAME TO chat_messages;
