"""Shared chat history in PostgreSQL (`database_url`): `calling-server migrate` for the PostgreSQL
dialect, two server processes on one database giving one gap-free seq with history and resume from
either, and what a chat sender sees while PostgreSQL is down (docs/operations.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess

from support import BINARY, Peer, PostgresServer, run

SKIP = ("chat", "peer-joined", "peer-left", "typing", "read")


def shared_servers(start_server, database_url: str, count: int = 2, **flags):
    """`count` servers, each with its own data dir (SQLite for calls and keys) but one JWT secret
    and one PostgreSQL database for chat."""
    env = {"CALLING_JWT_SECRET": "integration-test-secret-0123456789abcdef"}
    return [start_server(env=env, database_url=database_url, max_frames_per_second=100_000, frame_burst=100_000, **flags)
            for _ in range(count)]


async def send_and_ack(peer: Peer, client_id: str, text: str) -> dict:
    await peer.send({"type": "chat", "payload": {"client_id": client_id, "text": text}})
    return await peer.recv_type("chat-ack", timeout=10, skip=SKIP)


def cli_env() -> dict:
    """The environment without CALLING_*: the server would read those as its configuration."""
    return {key: value for key, value in os.environ.items() if not key.startswith("CALLING_")}


def history(server, token: str, room: str) -> list[dict]:
    messages, since = [], 0
    while True:
        status, _, body = server.get_json(f"/v1/rooms/{room}/messages?since_seq={since}&limit=200", token)
        assert status == 200, body
        messages += body["messages"]
        since = body["next_since_seq"]
        if not body["has_more"]:
            return messages


def test_migrate_applies_the_postgres_schema_once(postgres, tmp_path):
    url = postgres.create_database()
    argv = [str(BINARY), "migrate", "--data-dir", str(tmp_path / "data"), "--database-url", url]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env())
    assert first.returncode == 0, first.stderr
    assert "postgres applied: 001_chat, 002_access, 003_calls, 004_webhooks, 005_chat_operations" in first.stdout, first.stdout
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env())
    assert again.returncode == 0, again.stderr
    assert "schema is up to date" in again.stdout and "postgres schema is up to date" in again.stdout, again.stdout
    assert postgres.psql(url, "SELECT version FROM calling_schema_version") == "5"
    tables = postgres.psql(url, "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
    assert tables == ("api_keys,call_stats,calling_schema_version,calls,chat_messages,chat_reactions,chat_room_peers,meters,"
                      "read_markers,rooms,token_bans,webhook_calls,webhook_outbox,webhook_seats"), tables

    # A URL that is not PostgreSQL's is a configuration error (exit 78), not a crash.
    bad = subprocess.run([str(BINARY), "migrate", "--data-dir", str(tmp_path / "data"), "--database-url", "mysql://x"],
                         capture_output=True, text=True, timeout=60, env=cli_env())
    assert bad.returncode == 78 and "database_url" in bad.stderr, (bad.returncode, bad.stderr)


def test_two_servers_on_one_database_give_one_gap_free_seq(postgres, start_server, tmp_path):
    url = postgres.create_database()
    servers = shared_servers(start_server, url)
    per_sender = 60
    senders_per_server = 3

    async def body():
        peers = []
        for s, server in enumerate(servers):
            for i in range(senders_per_server):
                name = f"s{s}p{i}"
                peers.append((name, await Peer.connect(server, server.token("shared", name), name)))

        async def sender(name: str, peer: Peer) -> list[tuple[str, int]]:
            acked = []
            for n in range(per_sender):
                ack = await send_and_ack(peer, f"{name}-{n}", f"{name} says {n}")
                assert "error" not in ack, ack
                acked.append((ack["payload"]["client_id"], ack["payload"]["seq"]))
            return acked

        results = await asyncio.gather(*(sender(name, peer) for name, peer in peers))
        acks = dict(pair for result in results for pair in result)
        total = len(peers) * per_sender
        assert sorted(acks.values()) == list(range(1, total + 1)), "one gap-free seq across both servers"
        # Each sender's own messages keep their order.
        for result in results:
            seqs = [seq for _, seq in result]
            assert seqs == sorted(seqs)

        # A retry of a message first stored through server 0, sent through server 1: the original ack.
        retry_peer = await Peer.connect(servers[1], servers[1].token("shared", "s0p0"), "s0p0-again")
        ack = await send_and_ack(retry_peer, "s0p0-7", "changed text")
        assert ack["payload"]["seq"] == acks["s0p0-7"], ack

        # History from either server: every acked message once, in seq order, as acked.
        for server in servers:
            messages = history(server, server.token("shared", "reader"), "shared")
            assert [m["seq"] for m in messages] == list(range(1, total + 1))
            assert {m["client_id"]: m["seq"] for m in messages} == acks

        # Resume from either server after last_seq: exactly the messages after it.
        for server in servers:
            late = await Peer.connect(server, server.token("shared", "late"), "late", last_seq=total - 5)
            payload = late.welcome["payload"]
            assert payload["recovered"] is True and payload["replay_count"] == 5 and payload["last_seq"] == total, payload
            replayed = [await late.recv() for _ in range(5)]
            assert [f["payload"]["seq"] for f in replayed] == list(range(total - 4, total + 1))
            await late.close()

    run(body(), timeout=120)
    count = postgres.psql(url, "SELECT count(*) || ',' || max(seq) || ',' || (SELECT last_seq FROM rooms WHERE room_id = 'shared') "
                               "FROM chat_messages WHERE room_id = 'shared'")
    total = 2 * senders_per_server * per_sender
    assert count == f"{total},{total},{total}", count


def test_postgres_down_chat_gets_unavailable_and_nothing_acked_is_lost(start_server, tmp_path):
    # A server of its own: this test kills it.
    pg = PostgresServer().start()
    try:
        url = pg.create_database()
        server = shared_servers(start_server, url, count=1, database_reconnect_ms=100)[0]

        async def body():
            alice = await Peer.connect(server, server.token("r", "alice"), "alice")
            before = [await send_and_ack(alice, f"b{i}", f"before {i}") for i in range(5)]
            assert [a["payload"]["seq"] for a in before] == [1, 2, 3, 4, 5]

            pg.kill9()
            failed = await send_and_ack(alice, "during", "while postgres is down")
            assert failed["error"]["code"] == 503, failed
            assert "retry with the same client_id" in failed["error"]["message"], failed
            assert failed["payload"]["client_id"] == "during"
            status, _, problem = server.get_json("/v1/rooms/r/messages", server.token("r", "bob"))
            assert status == 503 and problem["code"] == "store_unavailable", (status, problem)

            pg.restart()
            # The client retries with the same client_id until the store is back (reconnect
            # attempts at most every database_reconnect_ms).
            for _ in range(50):
                ack = await send_and_ack(alice, "during", "while postgres is down")
                if "error" not in ack:
                    break
                await asyncio.sleep(0.1)
            assert "error" not in ack, ack
            assert ack["payload"]["seq"] == 6, ack
            messages = history(server, server.token("r", "bob"), "r")
            assert [m["client_id"] for m in messages] == ["b0", "b1", "b2", "b3", "b4", "during"]

        run(body(), timeout=90)
        assert server.metrics().get("calling_store_failures_total", 0) >= 1
    finally:
        pg.stop()
