-- 011_chat_operations: edits, deletes and reactions as rows of the room's chat log, replies, and
-- what the history page and the inbox read (docs/protocol.md, "Chat operations", "Inbox").
--
-- Same rules as 001 (STRICT, no BEGIN/COMMIT: the migrator wraps this file in one transaction with
-- `PRAGMA user_version = 11`).
--
-- Every operation is a chat_messages row with its own seq, so the room's log stays one gap-free
-- sequence that resume replays in order, and the (room_no, client_id, sender) dedup key covers
-- messages and operations alike. `kind` is CallingCore's ChatRowKind: 0 message, 1 edit,
-- 2 delete, 3 react, 4 unreact. An operation names its message in `target`; a reaction its key in
-- `reaction_key`. A delete erases the text and meta of the message and of its edits in the same
-- transaction (text '' and meta NULL) and stamps `deleted_ts` and `deleted_by` on them.
ALTER TABLE chat_messages ADD COLUMN kind INTEGER NOT NULL DEFAULT 0 CHECK (kind BETWEEN 0 AND 4);
ALTER TABLE chat_messages ADD COLUMN target INTEGER NULL CHECK (target > 0);
ALTER TABLE chat_messages ADD COLUMN reply_to INTEGER NULL CHECK (reply_to > 0);
ALTER TABLE chat_messages ADD COLUMN reaction_key TEXT NULL;
ALTER TABLE chat_messages ADD COLUMN deleted_ts INTEGER NULL;
ALTER TABLE chat_messages ADD COLUMN deleted_by TEXT NULL;

-- A message's edits, for the history page's fold and the delete's erase. Partial: plain messages
-- (nearly every row) are not in it.
CREATE INDEX chat_messages_by_target ON chat_messages (room_no, target, seq) WHERE target IS NOT NULL;

-- The reactions in force: one row per (message, key, peer). A react adds its row, an unreact
-- removes it; the history page counts them.
CREATE TABLE chat_reactions (
    room_no      INTEGER NOT NULL,
    target       INTEGER NOT NULL,
    reaction_key TEXT    NOT NULL,
    peer_id      TEXT    NOT NULL,
    seq          INTEGER NOT NULL, -- the react row that added it
    PRIMARY KEY (room_no, target, reaction_key, peer_id)
) STRICT, WITHOUT ROWID;

-- Last activity per room, for the inbox's order.
ALTER TABLE rooms ADD COLUMN last_ts INTEGER NOT NULL DEFAULT 0;
UPDATE rooms SET last_ts = coalesce((SELECT max(ts) FROM chat_messages AS m WHERE m.room_no = rooms.room_no), 0);

-- The rooms a peer id has sent a chat row in or has a read marker in: the inbox's rows. Written
-- once per (sender, room) per group-commit batch and by a read marker that moves.
CREATE TABLE chat_room_peers (
    peer_id TEXT    NOT NULL,
    room_no INTEGER NOT NULL,
    PRIMARY KEY (peer_id, room_no)
) STRICT, WITHOUT ROWID;

INSERT OR IGNORE INTO chat_room_peers (peer_id, room_no) SELECT DISTINCT sender, room_no FROM chat_messages;
INSERT OR IGNORE INTO chat_room_peers (peer_id, room_no)
    SELECT m.peer_id, r.room_no FROM read_markers AS m JOIN rooms AS r USING (room_id);
