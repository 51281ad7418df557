-- 002_access (PostgreSQL): API keys and kicked tokens in the shared database (`database_url`), so
-- that every node accepts the same keys and refuses the same kicked tokens. The dialect of
-- schema/002_calls.sql + 003_admin_and_limits.sql (api_keys) and schema/009_token_bans.sql.
--
-- Applied by CallingStore's Migrator (through CallingPostgres) in one transaction that also records
-- version 2 in calling_schema_version, under an advisory lock; no BEGIN/COMMIT here.

-- Only the SHA-256 of a key is stored (CallingAuth `APIKey`); `scope` is space-separated scopes
-- (`calls`, `admin`). A revoked key stays listed.
CREATE TABLE api_keys (
    id         text   NOT NULL PRIMARY KEY,
    name       text   NOT NULL,
    hash       text   NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_ms bigint NOT NULL,
    revoked_ms bigint NULL,
    scope      text   NOT NULL DEFAULT 'calls' CHECK (scope <> '' AND scope !~ '[^a-z ]')
);

-- A kicked token (CallingCore `TokenBan.key`), refused until `expires_ms`.
CREATE TABLE token_bans (
    ban_key    text   NOT NULL PRIMARY KEY,
    expires_ms bigint NOT NULL
);
