"""Graceful shutdown on SIGTERM / SIGINT: peers get 1001, the process exits 0 within
shutdown_grace_seconds + 2 s, and new connections are refused once the signal arrived."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time

import pytest

from support import Peer, RawWebSocket, raw_upgrade, run

GRACE = 3


def attempt_upgrade(server, token):
    """A new WebSocket upgrade; returns ('refused', errno) or ('http', status, problem)."""
    try:
        status, headers, body = raw_upgrade(server.port, f"/v1/ws?token={token}", timeout=2)
    except (ConnectionRefusedError, ConnectionResetError) as error:
        return ("refused", error.errno)
    except (ConnectionError, socket.timeout) as error:
        return ("broken", repr(error))
    problem = json.loads(body) if body else None
    return ("http", status, headers.get("content-type"), problem)


def assert_refused(outcome):
    """Refused means: nothing listens any more (connection refused or reset), the connection is
    closed without any response (accepted into the backlog just as the listener went away), or an
    HTTP 503 problem+json. Never a 101 nor any other answer."""
    if outcome[0] in ("refused", "broken"):
        return
    assert outcome[0] == "http", outcome
    _, status, content_type, problem = outcome
    assert status == 503, outcome
    assert content_type.startswith("application/problem+json"), outcome
    assert problem["status"] == 503 and problem["code"] == "shutting_down", outcome


async def wait_exit(server, timeout):
    started = time.monotonic()
    try:
        code = await asyncio.to_thread(server.wait, timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"server still running {timeout}s after the signal") from None
    return code, time.monotonic() - started


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_closes_peers_with_1001_and_exits_0(start_server, signum):
    server = start_server(shutdown_grace_seconds=GRACE)
    late_token = server.token("r1", "carol")

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        assert (await alice.recv_type("peer-joined"))["from"] == "bob"
        await alice.ping()
        await bob.ping()

        signalled = time.monotonic()
        server.signal(signum)
        (code_a, reason_a), (code_b, reason_b) = await asyncio.gather(
            alice.wait_closed(timeout=GRACE + 2), bob.wait_closed(timeout=GRACE + 2))
        assert (code_a, code_b) == (1001, 1001), (code_a, reason_a, code_b, reason_b)

        assert_refused(attempt_upgrade(server, late_token))

        code, _ = await wait_exit(server, GRACE + 2 - (time.monotonic() - signalled))
        assert code == 0, server.stderr_text()
        assert time.monotonic() - signalled <= GRACE + 2
        assert_refused(attempt_upgrade(server, late_token))
        with pytest.raises(OSError):
            server.http("GET", "/healthz", timeout=1)

    run(body(), timeout=GRACE + 10)
    stderr = server.stderr_text()
    assert "shutting down" in stderr and "stopped" in stderr, stderr


def test_shutdown_with_a_peer_that_cannot_drain(start_server):
    """A peer whose socket is full (it stopped reading) cannot take its close frame. The server
    must still exit 0 within the grace period + 2 s, the other peers get 1001 at once, and new
    upgrades during the drain are refused."""
    grace = 2
    server = start_server(shutdown_grace_seconds=grace, max_queue_bytes=262_144, max_frame_bytes=131_072,
                          max_frames_per_second=100_000, frame_burst=100_000)
    late_token = server.token("r1", "carol")

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        stuck = RawWebSocket(server.port, server.token("r1", "stuck"), rcvbuf=4096)
        try:
            assert (await alice.recv_type("peer-joined"))["from"] == "stuck"
            blob = "x" * 64_000
            # Fill the stuck peer's socket (paced, so the kernel buffer fills before the queue).
            for n in range(50):
                await alice.send({"type": "data", "to": "stuck", "payload": {"n": n, "blob": blob}})
                await asyncio.sleep(0.04)
            await alice.ping(skip=("error", "peer-left"))

            signalled = time.monotonic()
            server.signal(signal.SIGTERM)
            code, reason = await alice.wait_closed(timeout=1.0)
            assert code == 1001, (code, reason)
            await asyncio.sleep(0.2)
            assert_refused(attempt_upgrade(server, late_token))
            exit_code, _ = await wait_exit(server, grace + 2 - (time.monotonic() - signalled))
            assert exit_code == 0
        finally:
            stuck.abort()

    run(body(), timeout=15)


def test_acked_chats_survive_a_graceful_restart(start_server):
    server = start_server(max_frames_per_second=100_000, frame_burst=100_000)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        for i in range(300):
            await alice.send({"type": "chat", "payload": {"client_id": f"c{i}", "text": f"message {i}"}})
        server.signal(signal.SIGTERM)
        acks = {}
        for frame in await alice.recv_until_closed(timeout=GRACE + 2):
            if frame["type"] == "chat-ack" and "error" not in frame:
                acks[frame["payload"]["client_id"]] = frame["payload"]["seq"]
        assert alice.ws.close_code == 1001
        code, _ = await wait_exit(server, GRACE + 2)
        assert code == 0
        return acks

    acks = run(body(), timeout=GRACE + 10)
    again = start_server(data_dir=server.data_dir)
    token = again.token("r1", "alice")
    stored = {}
    since = 0
    while True:
        status, _, page = again.get_json(f"/v1/rooms/r1/messages?since_seq={since}&limit=200", token)
        assert status == 200, page
        stored.update({m["client_id"]: m["seq"] for m in page["messages"]})
        if not page["has_more"]:
            break
        since = page["next_since_seq"]
    for client_id, seq in acks.items():
        assert stored.get(client_id) == seq, (client_id, seq, stored.get(client_id))
    assert sorted(stored.values()) == list(range(1, len(stored) + 1))
