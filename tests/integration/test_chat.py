"""Chat: acks and broadcast, resume with last_seq, history paging over REST, typing expiry and
read markers."""

from __future__ import annotations

import asyncio
import json
import time


from support import Peer, run

PROBLEM_FIELDS = {"type", "title", "status", "code", "detail"}


async def send_chats(peer: Peer, count: int, start: int = 1, prefix: str = "m") -> dict:
    """Sends `count` chats one by one, each waiting for its ack; returns client_id → seq."""
    acks = {}
    for i in range(start, start + count):
        cid = f"{prefix}{i}"
        await peer.send({"type": "chat", "payload": {"client_id": cid, "text": f"text {i}", "meta": {"i": i}}})
        ack = await peer.recv_type("chat-ack", skip=("peer-joined", "peer-left", "typing", "read"))
        assert "error" not in ack, ack
        assert ack["payload"]["client_id"] == cid, ack
        assert isinstance(ack["payload"]["ts"], int)
        acks[cid] = ack["payload"]["seq"]
    return acks


def test_chat_ack_and_broadcast(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        await alice.send({"type": "chat", "payload": {"client_id": "c-1", "text": "hello", "meta": {"k": [1, 2]}}})
        ack = await alice.recv_type("chat-ack")
        assert ack["payload"]["client_id"] == "c-1" and ack["payload"]["seq"] == 1
        chat = await bob.recv_type("chat")
        assert chat["from"] == "alice"
        assert chat["payload"] == {"seq": 1, "client_id": "c-1", "text": "hello", "meta": {"k": [1, 2]},
                                   "ts": ack["payload"]["ts"]}
        # The sender does not get its own chat back, only the ack.
        await alice.assert_silent(0.3)

        # Chat errors are carried on the ack, and nothing is broadcast.
        for payload, code in (({"client_id": "e1", "text": "   "}, 440),
                              ({"client_id": "e2", "text": "x" * 5000}, 441),
                              ({"client_id": "e3", "text": "hi", "meta": [1]}, 442)):
            await alice.send({"type": "chat", "payload": payload})
            ack = await alice.recv_type("chat-ack")
            assert ack["error"]["code"] == code, ack
            assert ack["payload"]["client_id"] == payload["client_id"]
        await bob.assert_silent(0.3)

        # Same client_id again: the original ack, no second broadcast.
        await alice.send({"type": "chat", "payload": {"client_id": "c-1", "text": "hello"}})
        ack = await alice.recv_type("chat-ack")
        assert ack["payload"]["seq"] == 1
        await bob.assert_silent(0.3)

    run(body())


def test_resume_replays_exactly_the_missed_chats(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        acks = await send_chats(alice, 5)
        assert list(acks.values()) == [1, 2, 3, 4, 5]

        bob = await Peer.connect(server, server.token("r1", "bob"), "bob", last_seq=2)
        welcome = bob.welcome["payload"]
        assert welcome["recovered"] is True, welcome
        assert welcome["replay_count"] == 3, welcome
        assert welcome["last_seq"] == 5
        replayed = [await bob.recv() for _ in range(3)]
        assert [f["type"] for f in replayed] == ["chat"] * 3, replayed
        assert [f["payload"]["seq"] for f in replayed] == [3, 4, 5]
        assert [f["payload"]["client_id"] for f in replayed] == ["m3", "m4", "m5"]
        assert all(f["from"] == "alice" for f in replayed)
        assert replayed[0]["payload"]["text"] == "text 3" and replayed[0]["payload"]["meta"] == {"i": 3}
        await bob.assert_silent(0.3)

        # New chats after the replay arrive once each, in order.
        await alice.recv_type("peer-joined")
        await send_chats(alice, 2, start=6)
        live = [await bob.recv() for _ in range(2)]
        assert [(f["type"], f["payload"]["seq"]) for f in live] == [("chat", 6), ("chat", 7)], live
        await bob.assert_silent(0.3)

        # Without last_seq: no replay and no recovered/replay_count fields.
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        assert "recovered" not in carol.welcome["payload"] and "replay_count" not in carol.welcome["payload"]
        assert carol.welcome["payload"]["last_seq"] == 7
        assert carol.welcome["payload"]["unread"] == 7
        await carol.assert_silent(0.3)

        # last_seq equal to the last message: recovered, nothing to replay.
        dave = await Peer.connect(server, server.token("r1", "dave"), "dave", last_seq=7)
        assert dave.welcome["payload"]["recovered"] is True
        assert dave.welcome["payload"]["replay_count"] == 0
        await dave.assert_silent(0.3)

    run(body())


def test_resume_under_concurrent_traffic_has_no_gap_or_duplicate(start_server):
    server = start_server(max_frames_per_second=100_000, frame_burst=100_000)
    total = 400

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob_token = server.token("r1", "bob")

        async def produce():
            for i in range(1, total + 1):
                await alice.send({"type": "chat", "payload": {"client_id": f"c{i}", "text": f"t{i}"}})
                if i % 10 == 0:
                    await asyncio.sleep(0.01)

        producer = asyncio.create_task(produce())
        # Join somewhere in the middle of the stream, asking for everything.
        while True:
            ack = await alice.recv_type("chat-ack")
            if ack["payload"]["seq"] >= total // 4:
                break
        bob = await Peer.connect(server, bob_token, "bob", last_seq=0)
        assert bob.welcome["payload"]["recovered"] is True
        # The join really happened mid-stream: part replayed, part live.
        assert total // 4 <= bob.welcome["payload"]["replay_count"] < total, bob.welcome
        seqs = []
        while not seqs or seqs[-1] < total:
            frame = await bob.recv(timeout=5)
            assert frame["type"] == "chat", frame
            seqs.append(frame["payload"]["seq"])
        await producer
        assert seqs == list(range(1, total + 1)), (
            f"replay_count={bob.welcome['payload']['replay_count']}, got {len(seqs)} chats; "
            f"duplicates={sorted({s for s in seqs if seqs.count(s) > 1})[:10]}, "
            f"missing={sorted(set(range(1, total + 1)) - set(seqs))[:10]}")
        await bob.assert_silent(0.3)

    run(body(), timeout=20)


def test_resume_beyond_replay_cap_is_not_recovered(start_server):
    server = start_server(replay_cap=2)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        await send_chats(alice, 5)
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob", last_seq=0)
        welcome = bob.welcome["payload"]
        assert welcome["recovered"] is False, welcome
        assert welcome["last_seq"] == 5
        assert 0 <= welcome["replay_count"] <= 2, welcome
        replayed = [await bob.recv() for _ in range(welcome["replay_count"])]
        assert all(f["type"] == "chat" for f in replayed), replayed
        seqs = [f["payload"]["seq"] for f in replayed]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        await bob.assert_silent(0.3)

        # Within the cap it is recovered.
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol", last_seq=3)
        assert carol.welcome["payload"]["recovered"] is True
        assert carol.welcome["payload"]["replay_count"] == 2
        assert [(await carol.recv())["payload"]["seq"] for _ in range(2)] == [4, 5]

    run(body())


def assert_problem(status, headers, body, expected_status, code=None):
    assert status == expected_status, (status, body)
    assert headers.get("content-type", "").startswith("application/problem+json"), headers
    problem = json.loads(body)
    assert PROBLEM_FIELDS <= set(problem), problem
    assert problem["status"] == expected_status
    if code:
        assert problem["code"] == code, problem


def test_history_paging(start_server):
    server = start_server(history_default_limit=2, history_max_limit=3)
    token = server.token("r1", "bob")

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        await send_chats(alice, 5)

    run(body())

    def page(query, tok=token, room="r1"):
        status, headers, body = server.get_json(f"/v1/rooms/{room}/messages{query}", tok)
        assert status == 200, body
        assert headers["content-type"].startswith("application/json")
        return body

    first = page("?limit=2")
    assert [m["seq"] for m in first["messages"]] == [1, 2]
    assert first["has_more"] is True and first["next_since_seq"] == 2 and first["last_seq"] == 5
    assert first["limit"] == 2 and first["room_id"] == "r1"
    m = first["messages"][0]
    assert m["from"] == "alice" and m["client_id"] == "m1" and m["text"] == "text 1" and m["meta"] == {"i": 1}
    assert isinstance(m["ts"], int)

    second = page("?since_seq=2&limit=2")
    assert [m["seq"] for m in second["messages"]] == [3, 4]
    assert second["has_more"] is True and second["next_since_seq"] == 4
    third = page("?since_seq=4&limit=2")
    assert [m["seq"] for m in third["messages"]] == [5]
    assert third["has_more"] is False and third["next_since_seq"] == 5
    past_end = page("?since_seq=5&limit=2")
    assert past_end["messages"] == [] and past_end["has_more"] is False and past_end["next_since_seq"] == 5
    far = page("?since_seq=100")
    assert far["messages"] == [] and far["has_more"] is False

    # Default limit, and a limit above the maximum is capped to it.
    default = page("")
    assert [m["seq"] for m in default["messages"]] == [1, 2] and default["limit"] == 2
    capped = page("?limit=1000")
    assert [m["seq"] for m in capped["messages"]] == [1, 2, 3]
    assert capped["limit"] == 3 and capped["has_more"] is True and capped["next_since_seq"] == 3

    # Another room (nobody chatted there) is empty, with a token of that room.
    other_token = server.token("r2", "bob")
    empty = page("", tok=other_token, room="r2")
    assert empty["messages"] == [] and empty["last_seq"] == 0 and empty["has_more"] is False

    # Bad parameters: 400 problem+json.
    for query in ("?since_seq=-1", "?since_seq=abc", "?since_seq=1.5", "?limit=0", "?limit=-3", "?limit=abc",
                  "?limit=", "?since_seq="):
        status, headers, body = server.http("GET", f"/v1/rooms/r1/messages{query}",
                                            {"Authorization": f"Bearer {token}"})
        try:
            assert_problem(status, headers, body, 400, "bad_parameter")
        except AssertionError as error:
            raise AssertionError(f"{query}: {error}") from None

    # Token of another room: 403. No token / bad token: 401.
    status, headers, body = server.http("GET", "/v1/rooms/r1/messages", {"Authorization": f"Bearer {other_token}"})
    assert_problem(status, headers, body, 403, "wrong_room")
    status, headers, body = server.http("GET", "/v1/rooms/r1/messages")
    assert_problem(status, headers, body, 401, "token_missing")
    status, headers, body = server.http("GET", "/v1/rooms/r1/messages", {"Authorization": "Bearer x.y.z"})
    assert_problem(status, headers, body, 401)
    status, headers, body = server.http("GET", f"/v1/rooms/r1/messages?token={token}")
    assert status == 200, body
    status, headers, body = server.http("POST", "/v1/rooms/r1/messages", {"Authorization": f"Bearer {token}"})
    assert_problem(status, headers, body, 405)


def test_typing_expires(start_server):
    server = start_server(typing_ttl_ms=1000)

    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")

        await alice.send({"type": "typing", "payload": {"typing": True}})
        on = await bob.recv_type("typing")
        started = time.monotonic()
        assert on["from"] == "alice" and on["payload"] == {"typing": True}
        off = await bob.recv_type("typing", timeout=3)
        elapsed = time.monotonic() - started
        assert off["from"] == "alice" and off["payload"] == {"typing": False}
        assert 0.7 <= elapsed <= 2.0, f"typing expired after {elapsed:.2f}s with typing_ttl_ms=1000"
        await alice.assert_silent(0.2)  # the typist is not told about its own typing

        # Repeating typing:true only extends the TTL: no second "typing true" broadcast.
        await alice.send({"type": "typing", "payload": {"typing": True}})
        await bob.recv_type("typing")
        started = time.monotonic()
        await asyncio.sleep(0.6)
        await alice.send({"type": "typing", "payload": {"typing": True}})
        off = await bob.recv_type("typing", timeout=3)
        assert off["payload"] == {"typing": False}
        assert time.monotonic() - started >= 1.3, "the repeated typing:true did not extend the TTL"

        # Explicit false, and a chat ends typing before the chat is broadcast.
        await alice.send({"type": "typing", "payload": {"typing": True}})
        await bob.recv_type("typing")
        await alice.send({"type": "chat", "payload": {"client_id": "t1", "text": "done typing"}})
        off = await bob.recv()
        assert off["type"] == "typing" and off["payload"] == {"typing": False}, off
        assert (await bob.recv())["type"] == "chat"
        await bob.assert_silent(1.5)  # and no late expiry for it

    run(body())


def test_read_markers_only_move_forward(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        await send_chats(alice, 5)
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        assert bob.welcome["payload"]["read_seq"] == 0 and bob.welcome["payload"]["unread"] == 5
        await alice.recv_type("peer-joined")

        await bob.send({"type": "read", "payload": {"seq": 3}})
        read = await alice.recv_type("read")
        assert read["from"] == "bob" and read["payload"] == {"seq": 3}

        for seq in (2, 3, 0):  # backwards or unchanged: nothing is broadcast
            await bob.send({"type": "read", "payload": {"seq": seq}})
        await alice.assert_silent(0.5)

        await bob.send({"type": "read", "payload": {"seq": 5}})
        assert (await alice.recv_type("read"))["payload"] == {"seq": 5}
        # Beyond the last message: clamped to it, which is no move.
        await bob.send({"type": "read", "payload": {"seq": 99}})
        await alice.assert_silent(0.5)
        await bob.assert_silent(0.1)  # the reader is not told about its own read

        await bob.close()
        await alice.recv_type("peer-left")
        again = await Peer.connect(server, server.token("r1", "bob"), "bob")
        assert again.welcome["payload"]["read_seq"] == 5 and again.welcome["payload"]["unread"] == 0

    run(body())
