-- 004_webhooks: the webhook delivery queue, so a restart loses no event that was queued.
--
-- Same rules as 001: STRICT, no BEGIN/COMMIT (the migrator wraps this file in one transaction with
-- `PRAGMA user_version = 4`). Times are server time in unix milliseconds.
--
-- One row per (event, URL). `seq` is the queue order: rows are inserted in the order the events
-- happened, and the sender delivers the rows of one (url, ordering_key) strictly in seq order
-- (CallingCore `WebhookQueue`). A row is deleted once delivered (a 2xx answer) or given up after
-- `webhook_max_attempts`; what is left here is exactly what is still to be sent.
CREATE TABLE webhook_deliveries (
    seq             INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    -- `webhook-id`: the event id, shared by the rows of one event for different URLs.
    event_id        TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    -- The room id, or `presence` for presence request outcomes.
    ordering_key    TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    -- The JSON body exactly as it is sent and signed.
    body            BLOB    NOT NULL,
    created_ms      INTEGER NOT NULL,
    -- Attempts that failed so far, and when the next may start (the backoff).
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_ms INTEGER NOT NULL,
    UNIQUE (event_id, url)
) STRICT;
