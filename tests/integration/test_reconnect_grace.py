"""docs/protocol.md, "Reconnect grace": a peer whose socket ends without a clean leave keeps its
seat for reconnect_grace_ms; the room sees peer-reconnecting, then peer-resumed or peer-left."""

from __future__ import annotations

import time

from support import Peer, run


def abort(peer: Peer) -> None:
    """Drops the TCP connection without a WebSocket Close, as a lost network does."""
    peer.ws.transport.abort()


def test_an_abrupt_close_holds_the_seat_and_a_reconnect_resumes_it(start_server):
    server = start_server(reconnect_grace_ms=5000)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        abort(bob)
        frame = await alice.recv_type("peer-reconnecting")
        assert frame == {"from": "bob", "payload": {"peer_id": "bob"}, "type": "peer-reconnecting"}

        # A relay to the peer in grace is refused with a temporary error, not delivered.
        await alice.send({"type": "candidate", "to": "bob", "payload": {"candidate": "candidate:1 1 udp 1 10.0.0.1 9 typ host"}})
        error = await alice.recv_type("error")
        assert error["error"]["code"] == 480 and error["payload"] == {"type": "candidate"}, error

        # Someone joining meanwhile sees bob, marked reconnecting; the seat is still counted.
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        assert {"peer_id": "bob", "role": "peer", "name": None, "reconnecting": True} in carol.welcome["payload"]["peers"]
        await alice.recv_type("peer-joined")

        bob2 = await Peer.connect(server, server.token("r1", "bob"), "bob2")
        assert [p["peer_id"] for p in bob2.welcome["payload"]["peers"]] == ["alice", "carol"]
        assert await alice.recv_type("peer-resumed") == {"from": "bob", "payload": {"peer_id": "bob"}, "type": "peer-resumed"}
        await carol.recv_type("peer-resumed")

        # Past the grace: no peer-left ever comes, and relays reach the new socket.
        await alice.assert_silent(5.5)
        await alice.send({"type": "data", "to": "bob", "payload": {"x": 1}})
        assert (await bob2.recv_type("data"))["payload"] == {"x": 1}
        assert server.metrics()["calling_peers"] == 3

    run(body(), timeout=30)


def test_the_grace_expiring_sends_peer_left(start_server):
    server = start_server(reconnect_grace_ms=1000)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        abort(bob)
        start = time.monotonic()
        await alice.recv_type("peer-reconnecting")
        await alice.recv_type("peer-left", timeout=4)
        assert 0.8 <= time.monotonic() - start <= 3.0
        # The seat is free: bob joining again is a new peer.
        await Peer.connect(server, server.token("r1", "bob"), "bob2")
        await alice.recv_type("peer-joined")

    run(body())


def test_close_1000_and_leave_end_the_seat_at_once(start_server):
    server = start_server(reconnect_grace_ms=20000)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        await alice.recv_type("peer-joined")
        await alice.recv_type("peer-joined")

        await bob.close()  # 1000
        await alice.recv_type("peer-left", timeout=2)

        await carol.send({"type": "leave"})
        assert await alice.recv_type("peer-left", timeout=2) == {"from": "carol", "payload": {"peer_id": "carol"}, "type": "peer-left"}
        abort(carol)  # the socket going after its leave changes nothing
        await alice.assert_silent(0.5)

    run(body())


def test_a_grace_of_zero_sends_peer_left_at_once(start_server):
    server = start_server(reconnect_grace_ms=0)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        abort(bob)
        await alice.recv_type("peer-left", timeout=2)

    run(body())
