-- 005_chat_operations (PostgreSQL): edits, deletes and reactions as rows of the room's chat log,
-- replies, and what the history page and the inbox read; the dialect of schema/011_chat_operations.sql
-- (same columns, kinds and meaning; keyed by room_id, as this dialect's chat_messages is).
--
-- Applied by CallingStore's Migrator (through CallingPostgres) in one transaction that also records
-- version 4 in calling_schema_version, under an advisory lock; no BEGIN/COMMIT here.
--
-- `kind` is CallingCore's ChatRowKind: 0 message, 1 edit, 2 delete, 3 react, 4 unreact.
ALTER TABLE chat_messages
    ADD COLUMN kind         smallint NOT NULL DEFAULT 0 CHECK (kind BETWEEN 0 AND 4),
    ADD COLUMN target       bigint   NULL CHECK (target > 0),
    ADD COLUMN reply_to     bigint   NULL CHECK (reply_to > 0),
    ADD COLUMN reaction_key text     NULL,
    ADD COLUMN deleted_ts   bigint   NULL,
    ADD COLUMN deleted_by   text     NULL;

-- A message's edits, for the history page's fold and the delete's erase.
CREATE INDEX chat_messages_by_target ON chat_messages (room_id, target, seq) WHERE target IS NOT NULL;

-- The reactions in force: one row per (message, key, peer).
CREATE TABLE chat_reactions (
    room_id      text   NOT NULL,
    target       bigint NOT NULL,
    reaction_key text   NOT NULL,
    peer_id      text   NOT NULL,
    seq          bigint NOT NULL, -- the react row that added it
    PRIMARY KEY (room_id, target, reaction_key, peer_id)
);

-- Last activity per room, for the inbox's order.
ALTER TABLE rooms ADD COLUMN last_ts bigint NOT NULL DEFAULT 0;
UPDATE rooms SET last_ts = coalesce((SELECT max(ts) FROM chat_messages AS m WHERE m.room_id = rooms.room_id), 0);

-- The rooms a peer id has sent a chat row in or has a read marker in: the inbox's rows.
CREATE TABLE chat_room_peers (
    peer_id text NOT NULL,
    room_id text NOT NULL,
    PRIMARY KEY (peer_id, room_id)
);
INSERT INTO chat_room_peers (peer_id, room_id) SELECT DISTINCT sender, room_id FROM chat_messages ON CONFLICT DO NOTHING;
INSERT INTO chat_room_peers (peer_id, room_id) SELECT peer_id, room_id FROM read_markers ON CONFLICT DO NOTHING;
