-- 007_calls_by_room_newest: the room index of calls ends in call_id, so the live-call lookup reads
-- the newest call straight from it.
--
-- Same rules as 001 (no BEGIN/COMMIT: the migrator wraps this file in one transaction with
-- `PRAGMA user_version = 7`).
--
-- Why: every join asks for the room's live call (`CallRepository.live`: `ORDER BY created_ms
-- DESC, call_id DESC LIMIT 1`). On `calls_by_room (room_id, created_ms)` SQLite sorted the
-- `call_id` tie-break in a temporary B-tree (`USE TEMP B-TREE FOR RIGHT PART OF ORDER BY`), which
-- it creates and zeroes even for a room with no call at all: ~18k instructions of the store
-- queue's ~50k per join under callgrind (docs/benchmarks.md, "A chat without effects"). With
-- `call_id` in the index the lookup walks it backwards and stops at the first row. The old index
-- is a prefix of the new one (the join's `markJoined` and the expiry sweep's room reads keep it),
-- so it goes.

CREATE INDEX calls_by_room_newest ON calls (room_id, created_ms, call_id);
DROP INDEX calls_by_room;
