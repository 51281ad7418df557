"""docs/protocol.md, "Across a server restart" (issue #36): a single node remembers its live seats
in SQLite, and a server started again on the same data dir holds each of them in its reconnect
grace. A restart (SIGTERM: close 1001; SIGKILL: every socket drops) is a blip, not a leave: the
peer that reconnects first sees the other `reconnecting`, the other's reconnect is `peer-resumed`,
and a peer that never comes back ends with `peer-left` and its webhooks once, after the grace."""

from __future__ import annotations

import signal
import sqlite3
import time

import pytest

from support import Peer, run
from test_webhooks import ENV, Receiver, once_each_in_order, summary


def remembered(server) -> list[tuple[str, str]]:
    """The seats the server's database remembers, as (room, peer)."""
    db = sqlite3.connect(f"file:{server.data_dir / 'calling.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        return sorted(db.execute("SELECT room_id, peer_id FROM seats").fetchall())
    finally:
        db.close()


def wait_remembered(server, expected: list[tuple[str, str]], timeout: float = 5.0) -> None:
    """The seat table is written once per tick_ms: wait until it holds exactly `expected`."""
    deadline = time.monotonic() + timeout
    while (got := remembered(server)) != expected:
        assert time.monotonic() < deadline, f"seats remembered: {got}, expected {expected}"
        time.sleep(0.05)


STOPS = pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])


@STOPS
def test_a_call_survives_a_restart_and_the_other_peer_resumes(start_server, how):
    flags = dict(reconnect_grace_ms=8000)
    server = start_server(**flags)

    async def before():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        await alice.recv_type("peer-joined")
        await alice.recv_type("peer-joined")
        # An explicit leave (close 1000) ends carol's seat at once and forgets it.
        await carol.close()
        assert (await alice.recv_type("peer-left"))["from"] == "carol"
        wait_remembered(server, [("r1", "alice"), ("r1", "bob")])
        if how == signal.SIGTERM:
            server.signal(signal.SIGTERM)
            closes = [await alice.wait_closed(5), await bob.wait_closed(5)]
            assert [code for code, _ in closes] == [1001, 1001], closes
        else:
            server.kill()  # mid-call: the sockets just drop
        for peer in (alice, bob):
            peer.ws.transport.abort()

    run(before())
    if how == signal.SIGTERM:
        assert server.wait(8) == 0, server.stderr_text()
    assert remembered(server) == [("r1", "alice"), ("r1", "bob")], "the stop keeps the seats remembered"

    again = start_server(data_dir=server.data_dir, **flags)
    assert "seats restored" in again.stderr_text()

    async def after():
        # Alice is back first: bob is listed reconnecting, and no peer-left comes.
        alice = await Peer.connect(again, again.token("r1", "alice"), "alice")
        assert alice.welcome["payload"]["peers"] == [{"peer_id": "bob", "role": "peer", "name": None, "reconnecting": True}]
        # A relay to bob is refused for now (480), not lost silently.
        await alice.send({"type": "data", "to": "bob", "payload": {"n": 1}})
        error = await alice.recv_type("error")
        assert error["error"]["code"] == 480, error
        await alice.assert_silent(0.5)
        assert again.metrics()["calling_peers"] == 1

        bob = await Peer.connect(again, again.token("r1", "bob"), "bob")
        assert bob.welcome["payload"]["peers"] == [{"peer_id": "alice", "role": "peer", "name": None}]
        assert await alice.recv_type("peer-resumed") == {"from": "bob", "payload": {"peer_id": "bob"}, "type": "peer-resumed"}
        await alice.send({"type": "data", "to": "bob", "payload": {"n": 2}})
        assert (await bob.recv_type("data"))["payload"] == {"n": 2}
        # Past the restored grace, nothing ends the resumed call.
        await alice.assert_silent(0.2)
        wait_remembered(again, [("r1", "alice"), ("r1", "bob")])
        await bob.send({"type": "leave"})
        assert (await alice.recv_type("peer-left"))["from"] == "bob"
        wait_remembered(again, [("r1", "alice")])

    run(after(), timeout=20)


@STOPS
def test_a_restored_seat_nobody_resumes_ends_after_the_grace_with_its_webhooks_once(start_server, how):
    receiver = Receiver()
    grace_ms = 2500
    flags = dict(reconnect_grace_ms=grace_ms, webhook_urls=receiver.url, webhook_retry_base_ms=100)
    try:
        server = start_server(env=ENV, **flags)

        async def before():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
            await alice.recv_type("peer-joined")
            wait_remembered(server, [("r1", "alice"), ("r1", "bob")])
            # Delivered before the stop, so a kill cannot make one of them go out twice.
            receiver.wait_for(lambda r: len(r.accepted()) >= 3, 5, "the three events of the joins")
            if how == signal.SIGTERM:
                server.signal(signal.SIGTERM)
                await alice.wait_closed(5)
            else:
                server.kill()
            for peer in (alice, bob):
                peer.ws.transport.abort()

        run(before())
        if how == signal.SIGTERM:
            assert server.wait(8) == 0, server.stderr_text()
        restarted = time.monotonic()
        again = start_server(data_dir=server.data_dir, env=ENV, **flags)

        async def after():
            alice = await Peer.connect(again, again.token("r1", "alice"), "alice")
            assert alice.welcome["payload"]["peers"] == [{"peer_id": "bob", "role": "peer", "name": None, "reconnecting": True}]
            left = await alice.recv_type("peer-left", timeout=grace_ms / 1000 + 3)
            waited = time.monotonic() - restarted
            assert left == {"from": "bob", "payload": {"peer_id": "bob"}, "type": "peer-left"}
            # The whole grace, counted from the start of the new process.
            assert waited >= grace_ms / 1000 - 0.3, waited
            wait_remembered(again, [("r1", "alice")])
            await alice.send({"type": "leave"})
            await alice.close()

        run(after(), timeout=15)
        receiver.wait_for(lambda r: len(r.accepted()) >= 6, 8, "six events")
        time.sleep(0.5)  # nothing more comes
        events = once_each_in_order(receiver)
        assert [summary(e) for e in events] == [
            ("call_started", "r1", None), ("peer_joined", "r1", "alice"), ("peer_joined", "r1", "bob"),
            ("peer_left", "r1", "bob"), ("peer_left", "r1", "alice"), ("call_ended", "r1", None)]
        started = events[0]["data"]["started_at"]
        ended = events[5]["data"]
        assert ended["started_at"] == started, "call_ended names the call started before the restart"
        assert ended["reason"] == "last_peer_left"
        assert remembered(again) == []
    finally:
        receiver.close()
