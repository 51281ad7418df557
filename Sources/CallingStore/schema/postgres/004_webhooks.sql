-- 004_webhooks (PostgreSQL): the webhook outbox every node of a cluster shares (`database_url`),
-- and the seats the rooms' calls are counted by for `call_started`/`call_ended`.
--
-- Applied by CallingStore's Migrator (through CallingPostgres) in one transaction that also records
-- version 4 in calling_schema_version, under an advisory lock; no BEGIN/COMMIT here.

-- The rows of SQLite's webhook_deliveries (schema/004_webhooks.sql, 010_webhook_claims.sql) with
-- the same meaning: one row per (event, URL), deleted once delivered or given up; a (url,
-- ordering_key) lane is sent in seq order. Writers of one ordering_key are serialized by a
-- transaction-scoped advisory lock, so seq order within a lane is commit order. A node sends a
-- lane's head only while it holds the row's claim (claimed_by, until claimed_until_ms), which it
-- renews while alive; another node takes over a head whose lease ran out.
CREATE TABLE webhook_outbox (
    seq              bigserial NOT NULL PRIMARY KEY,
    event_id         text      NOT NULL,
    url              text      NOT NULL,
    ordering_key     text      NOT NULL,
    event_type       text      NOT NULL,
    -- The JSON body exactly as it is sent and signed (JSON text, never NUL).
    body             text      NOT NULL,
    created_ms       bigint    NOT NULL,
    attempts         integer   NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_ms  bigint    NOT NULL,
    claimed_by       text      NULL,
    claimed_until_ms bigint    NULL,
    UNIQUE (event_id, url)
);

CREATE INDEX webhook_outbox_lane ON webhook_outbox (url, ordering_key, seq);
CREATE INDEX webhook_outbox_claims ON webhook_outbox (claimed_by) WHERE claimed_by IS NOT NULL;

-- The seats of every node, for the rooms' calls (CallingStore `SharedCallLifecycle`): a room's
-- call starts with its first row here and ends with its last. node_id: the cluster node holding
-- the seat, whose death ends it.
CREATE TABLE webhook_seats (
    room_id   text   NOT NULL,
    peer_id   text   NOT NULL,
    node_id   text   NOT NULL,
    role      text   NOT NULL,
    name      text   NULL,
    call_id   text   NULL,
    transport text   NOT NULL,
    joined_ms bigint NOT NULL,
    PRIMARY KEY (room_id, peer_id)
);

CREATE INDEX webhook_seats_by_node ON webhook_seats (node_id);

-- A room's live call: when it started and the call_id of the first joiner whose token named one.
-- empty_since_ms: when its last seat ended (with end_reason); the call ends (`call_ended`) once it
-- has stayed empty for the settle time, so a join that one node records after another node
-- recorded the room's last leave continues the call rather than starting a second one.
CREATE TABLE webhook_calls (
    room_id        text   NOT NULL PRIMARY KEY,
    call_id        text   NULL,
    started_ms     bigint NOT NULL,
    empty_since_ms bigint NULL,
    end_reason     text   NULL
);

CREATE INDEX webhook_calls_empty ON webhook_calls (empty_since_ms) WHERE empty_since_ms IS NOT NULL;
