"""The WebSocket keep-alive (docs/protocol.md, "Keep-alive"; docs/configuration.md,
`idle_ping_seconds` and `idle_hangup_seconds`): `idle_ping_seconds` after a socket was last
confirmed alive (its upgrade, then each PONG) the server sends a PING, and a socket that has not
answered by `idle_hangup_seconds` is dropped without a close frame. Only a PONG confirms a socket:
frames of its own do not. A client that answers stays as long as it likes."""

from __future__ import annotations

import asyncio
import time

from support import Peer, RawWebSocket, claims, run, sign_jwt

PING_S = 1
HANGUP_S = 3
# A short reconnect grace: an idle hang-up is a lost connection (docs/protocol.md, "Reconnect grace").
FLAGS = dict(idle_ping_seconds=PING_S, idle_hangup_seconds=HANGUP_S, reconnect_grace_ms=500)


def frames_until_closed(ws: RawWebSocket, seconds: float, answer_pings: bool, send_every: float | None = None):
    """Reads for up to `seconds`: (time since start, opcode) of every PING (9) and Close (8) frame,
    and when the connection ended (None if it did not). Text frames are read and dropped; with
    `send_every` an app-level `ping` goes out that often."""
    started = time.monotonic()
    events = []
    next_send = started
    while (now := time.monotonic()) - started < seconds:
        if send_every is not None and now >= next_send:
            try:
                ws.send_json({"type": "ping", "payload": {"at": now}})
            except OSError:
                return events, now - started
            next_send = now + send_every
        try:
            opcode, payload = ws.recv_frame(timeout=0.1)
        except ConnectionError:
            return events, time.monotonic() - started
        except OSError as error:  # timeout, or a reset
            if "timed out" in str(error):
                continue
            return events, time.monotonic() - started
        if opcode in (0x8, 0x9):
            events.append((time.monotonic() - started, opcode))
        if opcode == 0x9 and answer_pings:
            ws.send_frame(0xA, payload)
    return events, None


def test_a_client_that_answers_pings_stays_connected(start_server):
    server = start_server(**FLAGS)
    ws = RawWebSocket(server.port, server.token("r1", "alice"))
    try:
        assert ws.recv_json()["type"] == "welcome"
        events, closed = frames_until_closed(ws, 2 * HANGUP_S, answer_pings=True)
        assert closed is None, f"dropped after {closed:.1f}s although it answered every PING: {events}"
        pings = [at for at, opcode in events if opcode == 0x9]
        assert 0x8 not in [opcode for _, opcode in events]
        # One PING per idle_ping_seconds after each PONG (the first one after the upgrade).
        assert len(pings) >= 2 * HANGUP_S // PING_S - 2, f"expected a PING every {PING_S}s, got {pings}"
        ws.send_json({"type": "ping", "payload": {"n": 1}})
        assert ws.recv_json() == {"type": "pong", "payload": {"n": 1}}
    finally:
        ws.close()


def test_a_client_that_never_answers_is_dropped_without_a_close_frame(start_server):
    server = start_server(**FLAGS)

    async def body():
        observer = await Peer.connect(server, server.token("r1", "observer"), "observer")
        ws = RawWebSocket(server.port, server.token("r1", "silent"))
        try:
            assert (await observer.recv_type("peer-joined"))["from"] == "silent"
            events, closed = await asyncio.to_thread(frames_until_closed, ws, 3 * HANGUP_S, False)
            assert closed is not None, f"still open {3 * HANGUP_S}s after the upgrade without answering a PING"
            assert HANGUP_S - 1 <= closed <= 2 * HANGUP_S, f"dropped after {closed:.1f}s, idle_hangup_seconds is {HANGUP_S}"
            pings = [at for at, opcode in events if opcode == 0x9]
            assert pings and pings[0] <= PING_S + 1.5, f"no PING about {PING_S}s after the upgrade: {events}"
            assert 0x8 not in [opcode for _, opcode in events], "an idle hang-up sends no close frame"
            assert (await observer.recv_type("peer-reconnecting", timeout=5.0))["from"] == "silent"
            assert (await observer.recv_type("peer-left", timeout=5.0))["from"] == "silent"
            await observer.ping(timeout=2.0)
        finally:
            ws.close()
            await observer.close()

    run(body(), timeout=30)


def test_traffic_without_pongs_does_not_keep_a_socket(start_server):
    """lws's policy counts PONGs only: a client that keeps sending frames but ignores PINGs is
    dropped at idle_hangup_seconds like a silent one."""
    server = start_server(**FLAGS)
    ws = RawWebSocket(server.port, server.token("r1", "chatty"))
    try:
        events, closed = frames_until_closed(ws, 3 * HANGUP_S, answer_pings=False, send_every=0.2)
        assert closed is not None, f"still open {3 * HANGUP_S}s after the upgrade without answering a PING"
        assert HANGUP_S - 1 <= closed <= 2 * HANGUP_S, f"dropped after {closed:.1f}s, idle_hangup_seconds is {HANGUP_S}"
        assert any(opcode == 0x9 for _, opcode in events), events
    finally:
        ws.close()


def test_many_sockets_each_get_their_first_ping_within_the_bound_spread_out_and_answering_ones_stay(start_server):
    """A burst of upgrades (300 sockets, each in a room of its own): every socket gets its first
    PING between half of idle_ping_seconds and idle_ping_seconds after its upgrade (plus the
    schedule's 0.1 s buckets), spread over that half interval rather than all at once; each
    answered PING is followed by the next about idle_ping_seconds later, and none is dropped."""
    import selectors

    ping_s, hangup_s, count = 2, 5, 300
    server = start_server(idle_ping_seconds=ping_s, idle_hangup_seconds=hangup_s)
    secret = server.secret()
    # Signed here: 300 runs of the token CLI would take longer than the test may.
    tokens = [sign_jwt(claims(room=f"burst{index}", sub=f"p{index}"), secret) for index in range(count)]
    sockets, opened = [], []
    try:
        for token in tokens:
            sockets.append(RawWebSocket(server.port, token))
            opened.append(time.monotonic())
        selector = selectors.DefaultSelector()
        for index, ws in enumerate(sockets):
            ws.sock.setblocking(True)
            selector.register(ws.sock, selectors.EVENT_READ, index)
        pings = [[] for _ in range(count)]
        closed = []
        deadline = opened[-1] + 2 * ping_s + 1.0
        while time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.05):
                index = key.data
                ws = sockets[index]
                # One frame from the socket, then every frame its read brought along.
                while True:
                    try:
                        opcode, payload = ws.recv_frame(timeout=1.0)
                    except (OSError, ConnectionError):
                        closed.append(index)
                        selector.unregister(ws.sock)
                        break
                    if opcode == 0x9:
                        pings[index].append(time.monotonic() - opened[index])
                        ws.send_frame(0xA, payload)
                    elif opcode == 0x8:
                        closed.append(index)
                    if not ws.buffer:
                        break
        selector.close()
        assert not closed, f"closed while answering: {closed[:10]}"
        firsts = [p[0] for p in pings if p]
        assert len(firsts) == count, f"{count - len(firsts)} sockets got no PING in {2 * ping_s + 1}s"
        late = [round(t, 2) for t in firsts if t > ping_s + 0.5]
        early = [round(t, 2) for t in firsts if t < ping_s / 2 - 0.05]
        assert not late and not early, f"first PINGs outside [{ping_s / 2}, {ping_s}] s after the upgrade: {late[:10]} {early[:10]}"
        # Spread: the first PINGs' delays cover the half interval instead of all coming at idle_ping_seconds.
        firsts.sort()
        assert firsts[len(firsts) // 4] < 0.8 * ping_s and firsts[-1] - firsts[0] > ping_s / 4, \
            f"first PINGs not spread: {firsts[0]:.2f}..{firsts[-1]:.2f} s, quartile {firsts[len(firsts) // 4]:.2f} s"
        for index, times in enumerate(pings):
            for earlier, later in zip(times, times[1:]):
                assert ping_s - 0.1 <= later - earlier <= ping_s + 0.6, f"socket {index}: PINGs at {times}"
    finally:
        for ws in sockets:
            ws.close()
