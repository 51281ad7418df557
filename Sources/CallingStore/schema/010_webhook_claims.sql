-- 010_webhook_claims: a delivery is claimed by the node that sends it, for a lease (`WebhookOutbox`).
--
-- One node uses the SQLite queue, so its claims only matter to the shared contract the PostgreSQL
-- outbox (schema/postgres/004_webhooks.sql) keeps with it: only a lane's head (the lowest seq of one
-- url and ordering_key) is claimed, and a claim whose lease ran out may be taken by another node.
-- NULL claimed_by: nobody holds the row.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_by TEXT NULL;
ALTER TABLE webhook_deliveries ADD COLUMN claimed_until_ms INTEGER NULL;

-- A lane's head is found by (url, ordering_key) in seq order.
CREATE INDEX webhook_deliveries_lane ON webhook_deliveries (url, ordering_key, seq);
