"""How frames reach the socket (docs/architecture.md, "Writes"): written once the callbacks of a
wake-up are done, without waiting for a WRITEABLE callback; after `flush_after_frames` inbound
frames or upgrades at the latest; from the connection's WRITEABLE when the socket is full, in order
either way."""

from __future__ import annotations

import json
import socket

from support import HOST, Peer, RawWebSocket, encode_frame, read_http_response, run, upgrade_request


def writes(server) -> tuple[float, float]:
    metrics = server.metrics()
    return (metrics.get('calling_ws_writes_total{path="flush"}', 0),
            metrics.get('calling_ws_writes_total{path="writeable"}', 0))


def candidate(i: int) -> dict:
    return {"candidate": f"candidate:{i} 1 udp 2122260223 192.0.2.1 {9000 + i} typ host", "sdpMid": "0",
            "sdpMLineIndex": 0}


def test_frames_one_at_a_time_are_written_without_a_writeable_callback(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        flushed_before, writeable_before = writes(server)
        for i in range(40):
            await alice.send({"type": "candidate", "to": "bob", "payload": candidate(i)})
            got = await bob.recv_type("candidate")
            assert got == {"type": "candidate", "from": "alice", "to": "bob", "payload": candidate(i)}, got
        flushed, writeable = writes(server)
        # One write per relayed frame, each from the flush; nothing waited for POLLOUT.
        assert flushed - flushed_before >= 40, (flushed_before, flushed)
        assert writeable == writeable_before == 0, (writeable_before, writeable)

    run(body())


def burst_writes(server, frames: int) -> float:
    """Flush writes it took to deliver `frames` relays that reach the server in one TCP segment."""
    async def body():
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        alice = RawWebSocket(server.port, server.token("r1", "alice"))
        try:
            assert alice.recv_json()["type"] == "welcome"
            await bob.recv_type("peer-joined")
            before, _ = writes(server)
            burst = b"".join(encode_frame(0x1, json.dumps({"type": "candidate", "to": "bob", "payload": candidate(i)}).encode())
                             for i in range(frames))
            alice.sock.sendall(burst)
            for i in range(frames):
                got = await bob.recv_type("candidate")
                assert got["payload"] == candidate(i), (i, got)
            after, _ = writes(server)
            return after - before
        finally:
            alice.close()

    return run(body())


def test_a_burst_is_written_once_after_the_wake_up(start_server):
    # 48 frames of ~150 bytes, read in one wake-up: one write carries all of them to bob.
    assert burst_writes(start_server(), 48) <= 2


def test_flush_after_frames_bounds_how_many_inbound_frames_a_write_waits_for(start_server):
    # The same burst with flush_after_frames 4: bob's bytes go out every fifth inbound frame.
    assert burst_writes(start_server(flush_after_frames=4), 48) >= 8


def test_a_join_storm_is_written_while_it_lasts_every_flush_after_frames_upgrades(start_server):
    # Upgrades count towards flush_after_frames as inbound frames do: a storm of joins handled in
    # one wake-up otherwise held every welcome and peer-joined until its end. With 1, the queued
    # frames go out every second upgrade, so an early joiner's peer-joined frames take several
    # writes; held to the end, each of the n sockets would be written once.
    server = start_server(flush_after_frames=1)
    n = 12
    socks = [socket.create_connection((HOST, server.port), timeout=5) for _ in range(n)]
    requests = [upgrade_request(f"/v1/ws?token={server.token('storm', f'p{i}')}") for i in range(n)]
    before, _ = writes(server)
    try:
        for sock, request in zip(socks, requests):
            sock.sendall(request)
        for i, sock in enumerate(socks):
            status, _, body, leftover = read_http_response(sock)
            assert status == 101, (status, body)
            peer = RawWebSocket.__new__(RawWebSocket)
            peer.sock, peer.buffer = sock, leftover
            welcome = peer.recv_json()
            assert welcome["type"] == "welcome", welcome
            seen = {entry["peer_id"] for entry in welcome["payload"]["peers"]}
            while len(seen) < n - 1:  # everyone else: already there, or a peer-joined later
                frame = peer.recv_json()
                assert frame["type"] == "peer-joined", frame
                seen.add(frame["payload"]["peer_id"])
            assert seen == {f"p{j}" for j in range(n)} - {f"p{i}"}
        after, _ = writes(server)
        assert after - before >= 2 * n - 1, (before, after)
    finally:
        for sock in socks:
            sock.close()


def test_a_full_socket_waits_for_writeable_and_loses_nothing(start_server):
    # More than the kernel's largest send buffer here (net.ipv4.tcp_wmem's 4 MiB) has to wait.
    server = start_server(max_frames_per_second=1000, frame_burst=1000, max_queue_bytes=16_777_216)
    blob = "y" * 64_000
    count = 100

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        # A small receive window, and no reads until everything is sent: the kernel soon takes no
        # more, lws holds the rest of a write, and the next ones wait for WRITEABLE.
        slow = RawWebSocket(server.port, server.token("r1", "slow"), rcvbuf=65_536)
        try:
            await alice.recv_type("peer-joined")
            _, writeable_before = writes(server)
            for i in range(count):  # 6.4 MB
                await alice.send({"type": "data", "to": "slow", "payload": {"n": i, "blob": blob}})
            await alice.ping(timeout=10)  # all of them have been handled
            assert slow.recv_json()["type"] == "welcome"
            got = []
            while len(got) < count:
                frame = slow.recv_json(timeout=5)
                if frame["type"] == "data":
                    got.append(frame["payload"]["n"])
            assert got == list(range(count))
            _, writeable = writes(server)
            assert writeable > writeable_before, (writeable_before, writeable)
            assert server.metrics().get("calling_queue_drops_total", 0) == 0
        finally:
            slow.close()

    run(body())
