-- 003_calls (PostgreSQL): calls of the Calls API, their `stats` samples and the rooms' consultation
-- meters in the shared database (`database_url`), so that a call created through one node is read,
-- joined, ended and reported through any. The dialect of schema/002_calls.sql, 003 (max_peers) and
-- 007 (the index a join reads by), with one column SQLite has not: `node_id`.
--
-- Applied by CallingStore's Migrator (through CallingPostgres) in one transaction that also records
-- version 3 in calling_schema_version, under an advisory lock; no BEGIN/COMMIT here.

CREATE TABLE calls (
    call_id           text   NOT NULL PRIMARY KEY,
    room_id           text   NOT NULL,
    agent_id          text   NULL,
    metadata          text   NULL,  -- JSON object, serialized by the API, stored verbatim
    dynamic_variables text   NULL,  -- JSON object of strings, serialized by the API
    meter_limit_s     bigint NULL CHECK (meter_limit_s > 0),
    meter_warning_s   bigint NULL CHECK (meter_warning_s >= 0),
    state             text   NOT NULL CHECK (state IN ('registered', 'ongoing', 'ended')),
    end_reason        text   NULL,
    created_ms        bigint NOT NULL,
    expires_ms        bigint NOT NULL,
    joined_ms         bigint NULL,
    ended_ms          bigint NULL,
    max_peers         bigint NULL CHECK (max_peers >= 0),
    -- The cluster node that took the POST (`node_id`): the room's consultation meter runs there
    -- only, as when the call lived in that node's SQLite. NULL on a node outside a cluster.
    node_id           text   NULL,
    CHECK ((state = 'ended') = (ended_ms IS NOT NULL))
);

-- A join reads the room's newest live call; the expiry sweep reads registered calls by age.
CREATE INDEX calls_by_room_newest ON calls (room_id, created_ms, call_id);
CREATE INDEX calls_registered ON calls (created_ms) WHERE state = 'registered';

-- No foreign key to calls, as in SQLite: a token minted elsewhere may name a call no node created.
-- `id` keeps the arrival order SQLite's rowid gives.
CREATE TABLE call_stats (
    id           bigserial        NOT NULL PRIMARY KEY,
    call_id      text             NOT NULL,
    room_id      text             NOT NULL,
    peer_id      text             NOT NULL,
    ts_ms        bigint           NOT NULL,
    rtt_ms       double precision NULL,
    jitter_ms    double precision NULL,
    packet_loss  double precision NULL,  -- ratio 0–1
    bitrate_kbps double precision NULL
);

CREATE INDEX call_stats_by_call ON call_stats (call_id, peer_id, ts_ms);

CREATE TABLE meters (
    room_id    text   NOT NULL PRIMARY KEY,
    started_ms bigint NOT NULL,
    elapsed_ms bigint NOT NULL CHECK (elapsed_ms >= 0),
    limit_s    bigint NOT NULL CHECK (limit_s > 0),
    warning_s  bigint NOT NULL CHECK (warning_s >= 0),
    state      text   NOT NULL CHECK (state IN ('running', 'warning', 'ended'))
);
