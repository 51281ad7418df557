"""The libwebsockets #2889 guard: a client that completes the handshake and then never reads must
be closed as a slow consumer once its outbound queue passes max_queue_bytes, its abrupt disconnect
afterwards must not leave the service loop spinning, and every other peer keeps being served."""

from __future__ import annotations

import asyncio
import time

from support import Peer, RawWebSocket, run

MAX_QUEUE = 262_144
BLOB = "x" * 64_000  # ~64 KB data frames
ROUNDS = 3
# No reconnect grace: these tests watch the transport let the slow socket go, which the room
# hears as peer-left only when the seat ends at once (docs/protocol.md, "Reconnect grace").
SLOW_FLAGS = dict(max_queue_bytes=MAX_QUEUE, max_frame_bytes=131_072,
                  max_frames_per_second=100_000, frame_burst=100_000, reconnect_grace_ms=0)


async def healthz_latency(server) -> float:
    started = time.monotonic()
    status, _, _ = await asyncio.to_thread(server.http, "GET", "/healthz", None, 1.0)
    assert status == 200
    return time.monotonic() - started


async def queue_drops(server) -> float:
    metrics = await asyncio.to_thread(server.metrics)
    return metrics.get("calling_queue_drops_total", 0)


async def observe(observer: Peer, server, stop: asyncio.Event, rtts: list, health: list, seen: list):
    """Keeps doing ping/pong round trips and /healthz checks until `stop` is set; other frames
    the observer receives meanwhile go to `seen`."""
    i = 0
    while not stop.is_set():
        started = time.monotonic()
        nonce = f"obs-{i}"
        await observer.send({"type": "ping", "payload": {"nonce": nonce}})
        while True:
            frame = await observer.recv(timeout=2.0)
            if frame["type"] == "pong" and frame.get("payload") == {"nonce": nonce}:
                break
            seen.append(frame)
        rtts.append(time.monotonic() - started)
        health.append(await healthz_latency(server))
        i += 1
        await asyncio.sleep(0.05)


async def drain(peer: Peer, quiet: float = 0.5) -> list:
    """Every frame that arrives until `quiet` seconds pass without one."""
    frames = []
    while True:
        try:
            frames.append(await peer.recv(timeout=quiet))
        except AssertionError:
            return frames


async def flood_until_dropped(server, flooder: Peer, slow_id: str, pace: float = 0.0,
                              limit_s: float = 10.0) -> int:
    """Sends ~64 KB data frames to `slow_id` until /metrics counts a queue drop; returns frames sent."""
    drops_before = await queue_drops(server)
    sent = 0
    started = time.monotonic()
    while True:
        burst = 1 if pace else 4
        for _ in range(burst):
            await flooder.send({"type": "data", "to": slow_id, "payload": {"n": sent, "blob": BLOB}})
            sent += 1
        if pace:
            await asyncio.sleep(pace)
        if await queue_drops(server) >= drops_before + 1:
            return sent
        assert time.monotonic() - started < limit_s, (
            f"{slow_id}: no slow-consumer drop after {sent} frames of 64 KB "
            f"(max_queue_bytes {MAX_QUEUE})")


def test_slow_reader_is_dropped_and_others_keep_being_served(start_server):
    server = start_server(**SLOW_FLAGS)

    async def body():
        flooder = await Peer.connect(server, server.token("r1", "flooder"), "flooder")
        observer = await Peer.connect(server, server.token("r1", "observer"), "observer")
        assert (await flooder.recv_type("peer-joined"))["from"] == "observer"

        for round_no in range(ROUNDS):
            slow_id = f"slow{round_no}"
            # Small receive buffer, set before connect so the TCP window is small from the start.
            slow = RawWebSocket(server.port, server.token("r1", slow_id), rcvbuf=4096)
            # From here on the slow client never reads: not even its welcome.
            assert (await flooder.recv_type("peer-joined"))["from"] == slow_id
            assert (await observer.recv_type("peer-joined"))["from"] == slow_id

            stop = asyncio.Event()
            rtts: list[float] = []
            health: list[float] = []
            seen: list[dict] = []
            watcher = asyncio.create_task(observe(observer, server, stop, rtts, health, seen))
            try:
                await flood_until_dropped(server, flooder, slow_id)
            finally:
                stop.set()
            await asyncio.wait_for(watcher, 5)  # re-raises an observer failure
            assert rtts, "the observer completed no round trip during the flood"
            assert max(rtts) < 1.0, f"round {round_no}: ping round trips during the flood: {rtts}"
            assert max(health) < 1.0, f"round {round_no}: /healthz latencies during the flood: {health}"

            # Now the slow client vanishes abruptly: RST, no close handshake.
            slow.abort()
            frames = await drain(flooder)
            # The flooder hears that the slow peer left, and gets 404s for any frames that reached
            # the server after it left. Nothing else.
            assert any(f["type"] == "peer-left" and f.get("from") == slow_id for f in frames), frames[-5:]
            for frame in frames:
                if frame["type"] == "error":
                    assert frame["error"]["code"] == 404, frame
                else:
                    assert frame["type"] == "peer-left" and frame["from"] == slow_id, frame
            observed = seen + await drain(observer, quiet=0.2)
            assert [(f["type"], f.get("from")) for f in observed] == [("peer-left", slow_id)], observed

            # Afterwards everyone else is served, quickly.
            assert await healthz_latency(server) < 1.0
            await flooder.ping(timeout=1.0)
            await observer.ping(timeout=1.0)
            await flooder.send({"type": "data", "to": "observer", "payload": {"round": round_no}})
            relayed = await observer.recv_type("data", timeout=1.0)
            assert relayed["from"] == "flooder" and relayed["payload"] == {"round": round_no}
            metrics = server.metrics()
            assert metrics["calling_connections"] == 2, metrics["calling_connections"]
            assert metrics["calling_peers"] == 2

            # And the process is idle, not spinning on the dead connection.
            cpu_before = server.cpu_seconds()
            await asyncio.sleep(2.0)
            cpu = server.cpu_seconds() - cpu_before
            assert cpu < 0.5, f"round {round_no}: server used {cpu:.2f}s of CPU in 2s of idle"
            assert await healthz_latency(server) < 1.0

        # A newcomer is served normally after all of it.
        late = await Peer.connect(server, server.token("r1", "late"), "late")
        assert {p["peer_id"] for p in late.welcome["payload"]["peers"]} == {"flooder", "observer"}
        await late.ping(timeout=1.0)
        assert server.metrics()["calling_queue_drops_total"] == ROUNDS

    run(body(), timeout=25)
    assert server.alive()


def test_slow_reader_connection_is_closed_by_the_server(start_server):
    """Once the server has decided to drop a slow consumer (queue drop counted, "closing slow
    consumer" logged) it must actually close it, even though the client never reads again: the
    room hears peer-left and the connection count goes down, without any help from the client.

    The frames are paced (one every 50 ms) so that the socket's kernel send buffer is full before
    the queue limit trips, which is the normal situation for a reader that has really stopped."""
    server = start_server(**SLOW_FLAGS)

    async def body():
        observer = await Peer.connect(server, server.token("r1", "observer"), "observer")
        for round_no in range(ROUNDS):
            slow_id = f"slow{round_no}"
            slow = RawWebSocket(server.port, server.token("r1", slow_id), rcvbuf=4096)
            try:
                assert (await observer.recv_type("peer-joined"))["from"] == slow_id
                await flood_until_dropped(server, observer, slow_id, pace=0.05)
                dropped_at = time.monotonic()
                frames = []
                while not any(f["type"] == "peer-left" and f.get("from") == slow_id for f in frames):
                    waited = time.monotonic() - dropped_at
                    assert waited < 3.0, (
                        f"round {round_no}: the server counted a queue drop for {slow_id} but the "
                        f"connection was still open {waited:.1f}s later (no peer-left; "
                        f"calling_connections={server.metrics()['calling_connections']:.0f})")
                    try:
                        frames.append(await observer.recv(timeout=0.25))
                    except AssertionError:
                        pass
                for frame in frames:
                    assert frame["type"] in ("peer-left", "error"), frame
                assert server.metrics()["calling_connections"] == 1
            finally:
                slow.abort()
            await drain(observer, quiet=0.3)
            await observer.ping(timeout=1.0)

    run(body(), timeout=25)
