-- 003_admin_and_limits: API key scopes (the admin API) and a per-call seat limit.
--
-- Same rules as 001/002 (no BEGIN/COMMIT; the migrator wraps this file with
-- `PRAGMA user_version = 3`).

-- What a key may do, as space-separated scopes: `calls` (POST /v1/calls, /v1/tokens, GET /v1/calls…)
-- and/or `admin` (/v1/admin/…). Keys made before this migration keep what they could do: `calls`.
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'calls'
    CHECK (scope <> '' AND scope NOT GLOB '*[^a-z ]*');

-- `max_peers` of POST /v1/calls: the seat limit written into the call's tokens (0 = unlimited);
-- NULL means the server's max_peers_per_room.
ALTER TABLE calls ADD COLUMN max_peers INTEGER NULL CHECK (max_peers >= 0);
