-- 001_chat: chat history, per-room sequence counters and read markers.
--
-- Applied by CallingStore's Migrator in one transaction together with `PRAGMA user_version = 1`,
-- so a migration file must not contain BEGIN/COMMIT of its own.
--
-- Every table is STRICT: without it SQLite stores whatever type it is handed, and a bug that bound a
-- seq as text would silently break ordering instead of failing loudly. NOT NULL is spelled out on
-- primary-key columns because SQLite, for historical reasons, accepts NULL in the primary key of a
-- rowid table unless the column is an INTEGER PRIMARY KEY.

-- One row per room that has ever had a message. last_seq is the highest seq handed out so far; the next
-- message takes last_seq + 1 in the same transaction that inserts it, which is what keeps seq gap-free.
CREATE TABLE rooms (
    room_id  TEXT    NOT NULL PRIMARY KEY,
    last_seq INTEGER NOT NULL CHECK (last_seq >= 0)
) STRICT;

CREATE TABLE chat_messages (
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
) STRICT;

-- How far each peer has read in a room. Only ever moves forward.
CREATE TABLE read_markers (
    room_id    TEXT    NOT NULL REFERENCES rooms (room_id),
    peer_id    TEXT    NOT NULL,
    seq        INTEGER NOT NULL CHECK (seq >= 0),
    updated_ms INTEGER NOT NULL, -- server time, unix milliseconds
    PRIMARY KEY (room_id, peer_id)
) STRICT;
