"""Signaling protocol: welcome, presence, relaying, takeover, metrics."""

from __future__ import annotations

import time

from support import Peer, RawWebSocket, parse_metrics, run


def test_welcome_and_presence(server):
    async def body():
        before = int(time.time() * 1000)
        alice = await Peer.connect(server, server.token("r1", "alice", role="doctor", name="Dr Alice", call="call-7"),
                                   "alice")
        w = alice.welcome
        assert set(w) <= {"type", "payload"}, w
        p = w["payload"]
        assert p["peer_id"] == "alice" and p["room_id"] == "r1" and p["call_id"] == "call-7"
        assert p["role"] == "doctor" and p["name"] == "Dr Alice"
        assert p["peers"] == []
        assert p["ping_interval_ms"] == 25000
        assert before - 2000 <= p["server_time"] <= int(time.time() * 1000) + 2000
        assert (p["last_seq"], p["read_seq"], p["unread"]) == (0, 0, 0)
        assert "recovered" not in p and "replay_count" not in p

        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        pb = bob.welcome["payload"]
        assert pb["peer_id"] == "bob" and pb["role"] == "peer" and pb["name"] is None and pb["call_id"] is None
        assert pb["peers"] == [{"peer_id": "alice", "role": "doctor", "name": "Dr Alice"}]
        joined = await alice.recv_type("peer-joined")
        assert joined["from"] == "bob"
        assert joined["payload"] == {"peer_id": "bob", "role": "peer", "name": None}
        await bob.assert_silent(0.2)  # the joiner is not told about its own join

        carol = await Peer.connect(server, server.token("r1", "carol", name="Carol"), "carol")
        assert [e["peer_id"] for e in carol.welcome["payload"]["peers"]] == ["alice", "bob"]  # join order
        for peer in (alice, bob):
            joined = await peer.recv_type("peer-joined")
            assert joined["from"] == "carol" and joined["payload"]["name"] == "Carol"

        # Another room is another world.
        zed = await Peer.connect(server, server.token("r2", "zed"), "zed")
        assert zed.welcome["payload"]["peers"] == []
        await alice.assert_silent(0.2)

        await bob.close()
        for peer in (alice, carol):
            left = await peer.recv_type("peer-left")
            assert left["from"] == "bob" and left["payload"] == {"peer_id": "bob"}
        await zed.assert_silent(0.2)

        dave = await Peer.connect(server, server.token("r1", "dave"), "dave")
        assert [e["peer_id"] for e in dave.welcome["payload"]["peers"]] == ["alice", "carol"]

    run(body())


def test_frames_sent_before_the_welcome_are_relayed_intact_and_in_order(server):
    # Frames a peer sends right after its upgrade wait (decoded, their payloads kept as the bytes
    # they arrived in) until its seat is ready; the frames after them reuse the transport's
    # inbound buffer, which must never change a message the server still holds.
    async def body():
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        alice = RawWebSocket(server.port, server.token("r1", "alice"))
        try:
            sent = [{"type": "candidate", "to": "bob", "payload": {"candidate": f"candidate:{i} 1 udp {i} 192.0.2.{i} 9 typ host",
                                                                   "sdpMid": "0", "sdpMLineIndex": 0}} for i in range(1, 9)]
            for frame in sent:
                alice.send_json(frame)
            for frame in sent:
                got = await bob.recv_type("candidate", skip=("peer-joined",))
                assert got == {"type": "candidate", "from": "alice", "to": "bob", "payload": frame["payload"]}
        finally:
            alice.close()

    run(body())


def test_relay_both_ways_with_from_stamped(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        await alice.recv_type("peer-joined")
        await alice.recv_type("peer-joined")
        await bob.recv_type("peer-joined")

        offer = {"sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n", "type": "offer"}
        # A forged `from` is replaced by the authenticated peer id.
        await alice.send({"type": "offer", "from": "mallory", "to": "bob", "payload": offer})
        got = await bob.recv_type("offer")
        assert got == {"type": "offer", "from": "alice", "to": "bob", "payload": offer}, got

        answer = {"sdp": "v=0\r\nanswer", "type": "answer"}
        await bob.send({"type": "answer", "from": "alice", "to": "alice", "payload": answer})
        got = await alice.recv_type("answer")
        assert got == {"type": "answer", "from": "bob", "to": "alice", "payload": answer}, got

        candidate = {"candidate": "candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host", "sdpMid": "0",
                     "sdpMLineIndex": 0}
        await alice.send({"type": "candidate", "to": "bob", "payload": candidate})
        got = await bob.recv_type("candidate")
        assert got["from"] == "alice" and got["payload"] == candidate
        await bob.send({"type": "candidate", "to": "alice", "payload": candidate})
        assert (await alice.recv_type("candidate"))["from"] == "bob"

        await alice.send({"type": "data", "to": "bob", "payload": {"kind": "hangup", "n": [1, {"x": None}]}})
        got = await bob.recv_type("data")
        assert got["from"] == "alice" and got["payload"] == {"kind": "hangup", "n": [1, {"x": None}]}

        # Directed frames reach only their target.
        await carol.assert_silent(0.3)
        await alice.assert_silent(0.1)

        # data without `to` reaches everyone else, not the sender.
        await bob.send({"type": "data", "from": "carol", "payload": {"hello": "all"}})
        for peer in (alice, carol):
            got = await peer.recv_type("data")
            assert got["from"] == "bob" and got["payload"] == {"hello": "all"} and "to" not in got, got
        await bob.assert_silent(0.3)

        # Unknown `to`: 404 to the sender only, the connection stays up.
        await alice.send({"type": "offer", "to": "nobody", "payload": offer})
        error = await alice.recv_type("error")
        assert error["error"]["code"] == 404 and error["payload"] == {"type": "offer"}, error
        await alice.send({"type": "data", "to": "zed", "payload": {}})  # zed exists, in another room
        error = await alice.recv_type("error")
        assert error["error"]["code"] == 404 and error["payload"] == {"type": "data"}, error
        await alice.ping()
        await bob.assert_silent(0.2)
        await carol.assert_silent(0.1)

    async def other_room():
        return await Peer.connect(server, server.token("r2", "zed"), "zed")

    async def main():
        zed = await other_room()
        await body()
        await zed.assert_silent(0.2)

    run(main())


def test_relayed_payloads_are_forwarded_byte_for_byte(server):
    """docs/protocol.md, "Envelope": the payload of offer/answer/candidate/data goes out as the
    sender wrote it (spacing, key order, number spellings, escapes); only the envelope is the
    server's, with its keys sorted."""
    alice = RawWebSocket(server.port, server.token("raw", "alice"))
    assert alice.recv_json()["type"] == "welcome"
    bob = RawWebSocket(server.port, server.token("raw", "bob"))
    assert bob.recv_json()["type"] == "welcome"
    assert alice.recv_json()["type"] == "peer-joined"
    try:
        cases = [
            ("offer", rb'{ "type" : "offer", "sdp":"v=0\r\n", "n": 1.0 }'),
            ("answer", rb'{"sdp":"v=0\r\na=\u00e9","type":"answer","sdp":"v=0"}'),
            ("candidate", rb'{"sdpMLineIndex":0,"sdpMid":"0","candidate":"candidate:1 1 udp 1 192.0.2.1 9 typ host"}'),
            ("data", '{"z":[1e2,-0.50,12345678901234567890123],"a":"café \\/"}'.encode()),
        ]
        for kind, payload in cases:
            alice.send_text_bytes(b'{"payload":  ' + payload + b'  ,"to":"bob","from":"mallory","type":"' + kind.encode() + b'"}')
            opcode, frame = bob.recv_frame()
            assert opcode == 0x1
            assert frame == b'{"from":"alice","payload":' + payload + b',"to":"bob","type":"' + kind.encode() + b'"}', frame
        # A pong echoes its ping's payload the same way, as sent; the envelope is the server's own.
        alice.send_text_bytes(b'{"type":"ping","payload":{ "b":1.0, "a":2 }}')
        opcode, frame = alice.recv_frame()
        assert frame == b'{"payload":{ "b":1.0, "a":2 },"type":"pong"}', frame
    finally:
        alice.close()
        bob.close()


def test_takeover_by_the_same_peer_id(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice-1")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")

        alice2 = await Peer.connect(server, server.token("r1", "alice", name="second"), "alice-2")
        code, reason = await alice.wait_closed(timeout=3)
        assert code == 4400 and reason == "replaced", (code, reason)
        assert [e["peer_id"] for e in alice2.welcome["payload"]["peers"]] == ["bob"]
        # The room does not see the seat change hands.
        await bob.assert_silent(0.5)

        # Traffic to "alice" now reaches the new connection, and from it is stamped "alice".
        await bob.send({"type": "data", "to": "alice", "payload": {"n": 1}})
        got = await alice2.recv_type("data")
        assert got["from"] == "bob" and got["payload"] == {"n": 1}
        await alice2.send({"type": "data", "payload": {"n": 2}})
        got = await bob.recv_type("data")
        assert got["from"] == "alice" and got["payload"] == {"n": 2}

        # The old connection's close did not make "alice" leave.
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        assert [e["peer_id"] for e in carol.welcome["payload"]["peers"]] == ["alice", "bob"]
        metrics = server.metrics()
        assert metrics["calling_peers"] == 3 and metrics["calling_connections"] == 3
        assert metrics.get('calling_closes_total{reason="replaced"}') == 1

        # When the new connection goes, the room hears it once.
        await alice2.close()
        for peer in (bob, carol):
            skip = ("peer-joined", "data") if peer is bob else ()
            left = await peer.recv_type("peer-left", skip=skip)
            assert left["from"] == "alice"
            await peer.assert_silent(0.3)

    run(body())


def test_metrics_and_healthz(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        for i in range(3):
            await alice.send({"type": "data", "payload": {"i": i}})
            await bob.recv_type("data")
        await alice.ping()
        await alice.send("{nope")
        await alice.recv_type("error")

        status, headers, body_bytes = server.http("GET", "/metrics")
        assert status == 200
        assert headers["content-type"].startswith("text/plain")
        text = body_bytes.decode()
        assert "# TYPE calling_connections gauge" in text
        metrics = parse_metrics(text)
        assert metrics["calling_connections"] == 2
        assert metrics["calling_peers"] == 2
        assert metrics["calling_rooms"] == 1
        assert metrics['calling_frames_in_total{type="data"}'] == 3
        assert metrics['calling_frames_in_total{type="ping"}'] == 1
        assert metrics['calling_frames_out_total{type="data"}'] == 3
        assert metrics['calling_frames_out_total{type="welcome"}'] == 2
        assert metrics['calling_frames_out_total{type="pong"}'] == 1
        assert metrics['calling_errors_total{code="bad_json"}'] == 1
        assert metrics['calling_upgrades_total{result="accepted"}'] == 2
        assert metrics["calling_connections_accepted_total"] == 2

        await bob.close()
        await alice.recv_type("peer-left")
        metrics = server.metrics()
        assert metrics["calling_connections"] == 1 and metrics["calling_peers"] == 1

    run(body())

    status, headers, body_bytes = server.http("GET", "/healthz")
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert body_bytes == b'{"status":"ok"}'
    status, _, body_bytes = server.http("HEAD", "/healthz")
    assert status == 200 and body_bytes == b""
