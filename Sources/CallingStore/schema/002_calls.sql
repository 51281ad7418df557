-- 002_calls: server API keys, calls created through POST /v1/calls, per-peer quality samples and
-- consultation meters.
--
-- Same rules as 001: STRICT tables, NOT NULL spelled out on primary keys, no BEGIN/COMMIT (the
-- migrator wraps this file in one transaction with `PRAGMA user_version = 2`). Times are server
-- time in unix milliseconds (`*_ms`), durations in seconds (`*_s`).

-- Keys for server-to-server routes. Only the SHA-256 of the key is stored (CallingAuth `APIKey`);
-- the plaintext is printed once by `calling-server apikey create`. A revoked key stays listed.
CREATE TABLE api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    hash       TEXT    NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER NULL
) STRICT;

-- A call: a room plus what the creating backend said about it. `state` moves registered → ongoing
-- (a peer joined the room) → ended, or registered → ended (`error_user_not_joined` when nobody
-- joined within call_join_window_seconds). `expires_ms` is the expiry of the access token handed
-- out at creation.
CREATE TABLE calls (
    call_id           TEXT    NOT NULL PRIMARY KEY,
    room_id           TEXT    NOT NULL,
    agent_id          TEXT    NULL,
    metadata          TEXT    NULL,  -- JSON object, serialized by the API
    dynamic_variables TEXT    NULL,  -- JSON object of strings, serialized by the API
    meter_limit_s     INTEGER NULL CHECK (meter_limit_s > 0),
    meter_warning_s   INTEGER NULL CHECK (meter_warning_s >= 0),
    state             TEXT    NOT NULL CHECK (state IN ('registered', 'ongoing', 'ended')),
    end_reason        TEXT    NULL,
    created_ms        INTEGER NOT NULL,
    expires_ms        INTEGER NOT NULL,
    joined_ms         INTEGER NULL,
    ended_ms          INTEGER NULL,
    CHECK ((state = 'ended') = (ended_ms IS NOT NULL))
) STRICT;

-- A join looks up the room's live calls; the expiry sweep looks at registered calls by age.
CREATE INDEX calls_by_room ON calls (room_id, created_ms);
CREATE INDEX calls_registered ON calls (created_ms) WHERE state = 'registered';

-- Client `stats` frames (every ~5 s per peer). No foreign key to calls: a token minted by
-- `calling-server token --call X` may name a call this server never created, and analytics should
-- still get its samples. Absent fields are NULL.
CREATE TABLE call_stats (
    call_id      TEXT    NOT NULL,
    room_id      TEXT    NOT NULL,
    peer_id      TEXT    NOT NULL,
    ts_ms        INTEGER NOT NULL,
    rtt_ms       REAL    NULL,
    jitter_ms    REAL    NULL,
    packet_loss  REAL    NULL,  -- ratio 0–1
    bitrate_kbps REAL    NULL
) STRICT;

CREATE INDEX call_stats_by_call ON call_stats (call_id, peer_id, ts_ms);

-- Consultation meter of a room, so a restart does not reset it. `elapsed_ms` counts only time with
-- at least two participants in the room; `started_ms` is when it first started.
CREATE TABLE meters (
    room_id    TEXT    NOT NULL PRIMARY KEY,
    started_ms INTEGER NOT NULL,
    elapsed_ms INTEGER NOT NULL CHECK (elapsed_ms >= 0),
    limit_s    INTEGER NOT NULL CHECK (limit_s > 0),
    warning_s  INTEGER NOT NULL CHECK (warning_s >= 0),
    state      TEXT    NOT NULL CHECK (state IN ('running', 'warning', 'ended'))
) STRICT;
