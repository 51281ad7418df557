-- 008_seats: the rooms' live seats, so a restarted server holds them for their peers' reconnect.
--
-- Same rules as 001: STRICT, no BEGIN/COMMIT (the migrator wraps this file in one transaction with
-- `PRAGMA user_version = 8`). Times are server time in unix milliseconds.
--
-- One row per seat of a WebSocket peer on a single node (docs/protocol.md, "Reconnect grace",
-- "Across a server restart"): written when the seat starts (or is taken over), deleted when it
-- ends (a leave, a clean close, a kick, the grace run out). A seat in its reconnect grace keeps
-- its row, and so does every seat when the server stops or dies: the next start seats each row
-- again, in its grace. Written in batches once per `tick_ms`, never per frame.
CREATE TABLE seats (
    room_id         TEXT    NOT NULL,
    peer_id         TEXT    NOT NULL,
    role            TEXT    NOT NULL,
    name            TEXT,
    call_id         TEXT,
    -- The token's `max_peers` claim, when it had one.
    max_peers       INTEGER,
    -- The token's identity, so a kick of the restored seat still refuses that token: its `jti`,
    -- or else its `iat` and `exp` (Unix seconds); and `exp` plus leeway in ms.
    token_id        TEXT,
    token_iat       INTEGER,
    token_exp       INTEGER,
    token_expires_ms INTEGER,
    -- When the room's live call (the webhooks' `call_started`) began, for `call_ended`.
    call_started_ms INTEGER NOT NULL,
    joined_ms       INTEGER NOT NULL,
    PRIMARY KEY (room_id, peer_id)
) STRICT, WITHOUT ROWID;
