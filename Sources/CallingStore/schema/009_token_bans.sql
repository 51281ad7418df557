-- 009_token_bans: tokens kicked through the admin API (or whose room it ended), refused until they
-- expire. Kept in the store rather than only in the hub so that a restarted node still refuses them,
-- and (in PostgreSQL, schema/postgres/002_access.sql) so that every node sharing the database does.
--
-- Same rules as 002 (STRICT, no BEGIN/COMMIT; the migrator wraps this file with
-- `PRAGMA user_version = 8`).

-- `ban_key` names the token (CallingCore `TokenBan.key`: `jti:…`, or `iat:…` for a token without a
-- jti); `expires_ms` is the token's expiry plus the verifier's leeway, after which it is refused as
-- expired anyway. Expired rows are harmless: reads skip them.
CREATE TABLE token_bans (
    ban_key    TEXT    NOT NULL PRIMARY KEY,
    expires_ms INTEGER NOT NULL
) STRICT;
