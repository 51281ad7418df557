-- 001_chat (PostgreSQL): chat history, per-room sequence counters and read markers; the dialect of
-- schema/001_chat.sql for a shared database (`database_url`). Only the chat tables live here; later
-- files add what else the nodes share (002_access: API keys and kicked tokens).
--
-- Applied by CallingStore's Migrator (through CallingPostgres) in one transaction that also records
-- version 1 in calling_schema_version, under an advisory lock; no BEGIN/COMMIT here.
--
-- Same columns, keys and checks as the SQLite tables. Times are unix milliseconds (bigint).

-- One row per room that has ever had a message. last_seq is the highest seq handed out so far. A
-- writer locks the row (SELECT … FOR UPDATE) before it numbers the room's next messages and bumps it
-- in the same transaction, so seq stays gap-free with any number of server processes appending.
CREATE TABLE rooms (
    room_id  text   NOT NULL PRIMARY KEY,
    last_seq bigint NOT NULL CHECK (last_seq >= 0)
);

CREATE TABLE chat_messages (
    room_id   text   NOT NULL REFERENCES rooms (room_id),
    seq       bigint NOT NULL CHECK (seq > 0),
    sender    text   NOT NULL,
    client_id text   NOT NULL,
    text      text   NOT NULL,
    -- Client-chosen JSON, already serialized and validated by CallingProtocol; stored verbatim (text,
    -- not jsonb, so it comes back byte for byte as sent).
    meta      text   NULL,
    ts        bigint NOT NULL, -- server time, unix milliseconds
    PRIMARY KEY (room_id, seq),
    -- A retried send carries the same client_id and must find the original row, never create a second.
    UNIQUE (room_id, sender, client_id)
);

-- How far each peer has read in a room. Only ever moves forward.
CREATE TABLE read_markers (
    room_id    text   NOT NULL REFERENCES rooms (room_id),
    peer_id    text   NOT NULL,
    seq        bigint NOT NULL CHECK (seq >= 0),
    updated_ms bigint NOT NULL, -- server time, unix milliseconds
    PRIMARY KEY (room_id, peer_id)
);
