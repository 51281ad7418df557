"""Chat operations (docs/protocol.md, "Chat operations"): edit, delete, reactions and replies as
stored, acked, idempotent rows with their own seq; broadcast, replayed on resume in seq order,
folded into history (since_seq and before_seq, include=edits), the user-token inbox, and kill -9
durability of acked operations."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import websockets

from support import BINARY, Peer, run

SKIP = ("peer-joined", "peer-left", "typing", "read")
FAST = dict(max_frames_per_second=1_000_000, frame_burst=1_000_000)


BROADCASTS = ("chat", "chat-edit", "chat-delete", "chat-react")


def _keep(peer: Peer, frame: dict) -> None:
    if not hasattr(peer, "kept"):
        peer.kept = []
    peer.kept.append(frame)


async def op(peer: Peer, frame_type: str, **payload) -> dict:
    """Sends one frame and returns its chat-ack (error or not); broadcasts that arrive meanwhile
    are kept for `broadcast`."""
    await peer.send({"type": frame_type, "payload": payload})
    while True:
        frame = await peer.recv()
        if frame["type"] in BROADCASTS:
            _keep(peer, frame)
            continue
        if frame["type"] in SKIP:
            continue
        assert frame["type"] == "chat-ack", frame
        assert frame["payload"]["client_id"] == payload["client_id"], frame
        return frame


async def broadcast(peer: Peer, frame_type: str, seq: int) -> dict:
    """The broadcast `frame_type` with `seq` this peer received (kept, or still to come)."""
    deadline = time.monotonic() + 3
    while True:
        for frame in getattr(peer, "kept", []):
            if frame["type"] == frame_type and frame["payload"]["seq"] == seq:
                return frame
        frame = await peer.recv(max(0.01, deadline - time.monotonic()))
        if frame["type"] not in SKIP:
            _keep(peer, frame)


def ok(ack: dict) -> int:
    assert "error" not in ack, ack
    return ack["payload"]["seq"]


def code(ack: dict) -> int:
    assert "error" in ack, ack
    return ack["error"]["code"]


def token(server, room, peer, *extra) -> str:
    args = [str(BINARY), "token", "--data-dir", str(server.data_dir), "--peer", peer, *extra]
    if room is not None:
        args += ["--room", room]
    result = subprocess.run(args, capture_output=True, text=True, timeout=10, env=server.env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def page(server, tok, query, room="r1"):
    status, _, body = server.get_json(f"/v1/rooms/{room}/messages?{query}", tok)
    assert status == 200, body
    return body


def test_operations_rules_broadcast_and_history(start_server):
    server = start_server(chat_edit_window_ms=60_000, chat_max_reaction_keys=2, chat_reaction_key_max_bytes=8)

    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        mod = await Peer.connect(server, token(server, "r1", "mod", "--moderator", "true"), "mod")
        m1 = ok(await op(alice, "chat", client_id="a1", text="hello", meta={"k": 1}))
        # A reply names a message of the room; one that does not exist is 443.
        m2 = ok(await op(bob, "chat", client_id="b1", text="hi back", reply_to=m1))
        frame = await broadcast(alice, "chat", m2)
        assert frame["payload"]["reply_to"] == m1 and frame["from"] == "bob", frame
        assert code(await op(bob, "chat", client_id="b2", text="x", reply_to=99)) == 443

        # Edit: the author's own, checked like a chat; others get chat-edit.
        e1 = ok(await op(alice, "chat-edit", client_id="a2", target=m1, text="hello, edited", meta={"k": 2}))
        frame = await broadcast(bob, "chat-edit", e1)
        assert frame["payload"] == {"client_id": "a2", "seq": e1, "ts": frame["payload"]["ts"], "target": m1,
                                    "text": "hello, edited", "meta": {"k": 2}}, frame
        assert code(await op(bob, "chat-edit", client_id="b3", target=m1, text="not mine")) == 444
        assert code(await op(alice, "chat-edit", client_id="a3", target=m1, text="   ")) == 440
        assert code(await op(alice, "chat-edit", client_id="a4", target=e1, text="an op is no message")) == 443
        # A retry of an acked edit gets the original ack and is not broadcast again.
        assert ok(await op(alice, "chat-edit", client_id="a2", target=m1, text="hello, edited")) == e1
        await bob.assert_silent(0.2)
        assert [f["payload"]["seq"] for f in bob.kept if f["type"] == "chat-edit"] == [e1]

        # Reactions: one per peer per key; duplicates and absent removals are acked, change no count.
        r1 = ok(await op(bob, "chat-react", client_id="b4", target=m1, key="👍"))
        frame = await broadcast(alice, "chat-react", r1)
        assert frame["payload"]["key"] == "👍" and frame["payload"]["remove"] is False and frame["payload"]["seq"] == r1
        ok(await op(bob, "chat-react", client_id="b5", target=m1, key="👍"))
        ok(await op(alice, "chat-react", client_id="a5", target=m1, key="👍"))
        ok(await op(alice, "chat-react", client_id="a6", target=m1, key="ok", remove=True))
        assert code(await op(alice, "chat-react", client_id="a7", target=m1, key="has space")) == 445
        assert code(await op(alice, "chat-react", client_id="a8", target=m1, key="toolongkey")) == 445
        ok(await op(alice, "chat-react", client_id="a9", target=m1, key="ok"))
        assert code(await op(alice, "chat-react", client_id="a10", target=m1, key="third")) == 445  # max 2 keys

        # Delete: author or moderator only; a second delete is acked and changes nothing.
        assert code(await op(alice, "chat-delete", client_id="a11", target=m2)) == 444
        d1 = ok(await op(mod, "chat-delete", client_id="mod1", target=m2))
        frame = await broadcast(alice, "chat-delete", d1)
        assert frame["payload"] == {"client_id": "mod1", "seq": d1, "ts": frame["payload"]["ts"], "target": m2}, frame
        ok(await op(bob, "chat-delete", client_id="b6", target=m2))
        assert code(await op(bob, "chat-react", client_id="b7", target=m2, key="x")) == 444
        # A client_id is one namespace across messages and operations.
        assert ok(await op(alice, "chat", client_id="a2", text="reuses an edit's id")) == e1
        return m1, m2, e1

    m1, m2, e1 = run(scenario(), timeout=20)
    tok = server.token("r1", "carol")
    body = page(server, tok, "since_seq=0")
    assert [m["seq"] for m in body["messages"]] == [m1, m2], body
    first, second = body["messages"]
    assert first["text"] == "hello, edited" and first["meta"] == {"k": 2} and first["edited_ts"] >= first["ts"]
    assert first["reactions"] == [{"key": "ok", "count": 1, "peers": ["alice"]},
                                  {"key": "👍", "count": 2, "peers": ["bob", "alice"]}], first["reactions"]
    assert "edits" not in first
    assert second["deleted"] is True and second["text"] == "" and second["meta"] is None and second["reply_to"] == m1
    assert second["reactions"] == []
    body = page(server, tok, "since_seq=0&include=edits")
    assert body["messages"][0]["edits"] == [{"seq": e1, "ts": body["messages"][0]["edited_ts"], "text": "hello, edited",
                                             "meta": {"k": 2}}]
    # The content is gone from storage, not only from view: the rows say so, read with SQLite itself.
    import sqlite3
    with sqlite3.connect(server.data_dir / "calling.sqlite") as db:
        row = db.execute("SELECT text, meta, deleted_by, deleted_ts IS NOT NULL FROM chat_messages WHERE seq = ?", (m2,)).fetchone()
    assert row == ("", None, "mod", 1), row
    status, _, problem = server.get_json("/v1/rooms/r1/messages?since_seq=0&before_seq=5", tok)
    assert status == 400 and problem["code"] == "bad_parameter", problem


def test_edit_window_passes(start_server):
    server = start_server(chat_edit_window_ms=300)

    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        m1 = ok(await op(alice, "chat", client_id="a1", text="hello"))
        ok(await op(alice, "chat-edit", client_id="a2", target=m1, text="quick"))
        await asyncio.sleep(0.5)
        ack = await op(alice, "chat-edit", client_id="a3", target=m1, text="too late")
        assert code(ack) == 444 and "window" in ack["error"]["message"], ack

    run(scenario(), timeout=10)


def test_before_seq_paging_visits_every_message_once(server):
    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        seqs = []
        for i in range(12):
            seqs.append(ok(await op(alice, "chat", client_id=f"m{i}", text=f"t{i}")))
            if i % 3 == 0:
                ok(await op(alice, "chat-react", client_id=f"r{i}", target=seqs[-1], key="k"))
        return seqs

    seqs = run(scenario(), timeout=15)
    tok = server.token("r1", "bob")
    seen, before = [], None
    while True:
        body = page(server, tok, f"limit=5" + (f"&before_seq={before}" if before else f"&before_seq={seqs[-1] + 100}"))
        got = [m["seq"] for m in body["messages"]]
        assert got == sorted(got, reverse=True), got
        seen += got
        if not body["has_more"]:
            break
        assert body["next_before_seq"] == got[-1]
        before = body["next_before_seq"]
    assert seen == list(reversed(seqs)), seen
    seen, since = [], 0
    while True:
        body = page(server, tok, f"limit=5&since_seq={since}")
        seen += [m["seq"] for m in body["messages"]]
        if not body["has_more"]:
            break
        since = body["next_since_seq"]
    assert seen == seqs


def test_resume_replays_operations_in_seq_order_with_tombstones(server):
    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        m1 = ok(await op(alice, "chat", client_id="a1", text="one"))
        m2 = ok(await op(alice, "chat", client_id="a2", text="two", reply_to=m1))
        e = ok(await op(alice, "chat-edit", client_id="a3", target=m2, text="two!"))
        r = ok(await op(alice, "chat-react", client_id="a4", target=m1, key="x"))
        d = ok(await op(alice, "chat-delete", client_id="a5", target=m2))
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob", last_seq=0)
        welcome = bob.welcome["payload"]
        assert welcome["replay_count"] == 5 and welcome["last_seq"] == d, welcome
        frames = [await bob.recv() for _ in range(5)]
        assert [f["payload"]["seq"] for f in frames] == [m1, m2, e, r, d], frames
        assert [f["type"] for f in frames] == ["chat", "chat", "chat-edit", "chat-react", "chat-delete"]
        assert frames[1]["payload"]["deleted"] is True and frames[1]["payload"]["text"] == "" and frames[1]["payload"]["meta"] is None
        assert frames[1]["payload"]["reply_to"] == m1
        assert frames[2]["payload"]["deleted"] is True and frames[2]["payload"]["text"] == ""
        assert frames[3]["payload"]["remove"] is False and frames[3]["payload"]["key"] == "x"
        # unread counts messages from others that are not deleted: m1 only.
        carol_view = await Peer.connect(server, server.token("r1", "bob"), "bob2")
        assert carol_view.welcome["payload"]["unread"] == 1, carol_view.welcome

    run(scenario(), timeout=15)


def test_inbox_with_a_user_token(server):
    async def scenario():
        alice = {}
        for room in ("ra", "rb", "rc"):
            alice[room] = await Peer.connect(server, server.token(room, "alice"), "alice")
            ok(await op(alice[room], "chat", client_id=f"{room}-1", text=f"first in {room}"))
            await asyncio.sleep(0.01)
        bob = await Peer.connect(server, server.token("rb", "bob"), "bob")
        ok(await op(bob, "chat", client_id="b1", text="x" * 300))
        await bob.send({"type": "read", "payload": {"seq": 1}})
        await asyncio.sleep(0.3)

    run(scenario(), timeout=15)
    user = token(server, None, "alice", "--scope", "user")
    status, headers, body = server.get_json("/v1/me/rooms?limit=2", user)
    assert status == 200, body
    assert [r["room_id"] for r in body["rooms"]] == ["rb", "rc"], body
    rb = body["rooms"][0]
    assert rb["last_seq"] == 2 and rb["unread"] == 1 and rb["read_seq"] == 0, rb
    assert rb["last_message"]["from"] == "bob" and len(rb["last_message"]["text"]) == 140
    assert body["has_more"] is True and body["next_cursor"]
    status, _, rest = server.get_json(f"/v1/me/rooms?limit=2&cursor={body['next_cursor']}", user)
    assert status == 200 and [r["room_id"] for r in rest["rooms"]] == ["ra"] and rest["has_more"] is False, rest
    bob_inbox = server.get_json("/v1/me/rooms", token(server, None, "bob", "--scope", "user"))[2]
    assert [(r["room_id"], r["read_seq"], r["unread"]) for r in bob_inbox["rooms"]] == [("rb", 1, 0)], bob_inbox
    # A room token is not a user token, and a user token joins no room.
    status, _, problem = server.get_json("/v1/me/rooms", server.token("ra", "alice"))
    assert status == 403, problem
    status, _, _ = server.get_json("/v1/me/rooms?cursor=AAAA", user)
    assert status == 400

    async def join_with_user_token():
        try:
            await Peer.connect(server, user, "alice")
        except websockets.InvalidStatus as refused:
            return refused.response.status_code
        return 101

    assert run(join_with_user_token()) in (401, 403)


def test_kill_9_keeps_acked_operations(start_server):
    server = start_server(**FAST)
    pid = server.pid
    total = 600

    def frame(i):
        # Messages 0, 3, 6 … ; each followed by an edit and a reaction on it.
        base = i - i % 3
        if i % 3 == 0:
            return {"type": "chat", "payload": {"client_id": f"c{i}", "text": f"m{i}"}}
        if i % 3 == 1:
            return {"type": "chat-edit", "payload": {"client_id": f"c{i}", "target": base + 1, "text": f"e{base}"}}
        return {"type": "chat-react", "payload": {"client_id": f"c{i}", "target": base + 1, "key": "k"}}

    async def burst():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        acks, errors = {}, []
        killed = asyncio.Event()

        async def reader():
            try:
                async for message in alice.ws:
                    f = json.loads(message)
                    if f["type"] != "chat-ack":
                        continue
                    if "error" in f:
                        errors.append(f)
                        continue
                    acks[f["payload"]["client_id"]] = f["payload"]["seq"]
                    if len(acks) >= total // 2 and not killed.is_set():
                        os.kill(pid, signal.SIGKILL)
                        killed.set()
            except websockets.ConnectionClosed:
                pass

        task = asyncio.create_task(reader())
        try:
            for i in range(total):
                if killed.is_set():
                    break
                await alice.send(frame(i))
                # Targets are seqs: keep each message acked before its operations go out.
                if i % 3 == 0:
                    while f"c{i}" not in acks and not killed.is_set():
                        await asyncio.sleep(0.001)
        except websockets.ConnectionClosed:
            pass
        await asyncio.wait_for(killed.wait(), 10)
        await asyncio.wait_for(task, 5)
        return acks, errors

    acks, errors = run(burst(), timeout=25)
    assert server.wait(5) == -signal.SIGKILL
    assert not errors, errors[:3]
    again = start_server(data_dir=server.data_dir, **FAST)

    async def resume_and_resend():
        bob = await Peer.connect(again, again.token("r1", "bob"), "bob", last_seq=0)
        count = bob.welcome["payload"]["replay_count"]
        frames = [await bob.recv() for _ in range(count)]
        seqs = [f["payload"]["seq"] for f in frames]
        assert seqs == list(range(1, count + 1)), "replay is not the gap-free log in seq order"
        by_client = {f["payload"]["client_id"]: f for f in frames}
        assert len(by_client) == count, "a client_id was stored twice"
        lost = [cid for cid in acks if cid not in by_client]
        assert not lost, f"acked operations lost after kill -9: {lost[:5]}"
        assert all(by_client[cid]["payload"]["seq"] == seq for cid, seq in acks.items())
        # Resending every acked frame changes nothing: original acks, no new rows.
        alice = await Peer.connect(again, again.token("r1", "alice"), "alice")
        for cid in acks:
            await alice.send(frame(int(cid[1:])))
        for _ in acks:
            ack = await alice.recv_type("chat-ack")
            assert ack["payload"]["seq"] == acks[ack["payload"]["client_id"]], ack
        return count

    count = run(resume_and_resend(), timeout=25)
    body = page(again, again.token("r1", "carol"), "since_seq=0&limit=200")
    assert body["last_seq"] == count
    for message in body["messages"]:
        reactions = message["reactions"]
        assert reactions in ([], [{"key": "k", "count": 1, "peers": ["alice"]}]), message


def test_post_tokens_mints_user_and_moderator_tokens(server):
    import http.client

    from support import jwt_payload

    created = subprocess.run([str(BINARY), "apikey", "create", "--name", "backend", "--scope", "calls", "--data-dir",
                              str(server.data_dir)], capture_output=True, text=True, timeout=10, env=server.env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()

    def post(body):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("POST", "/v1/tokens", body=json.dumps(body), headers={"X-API-Key": key, "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, json.loads(raw)

    status, user = post({"peer_id": "alice", "scope": "user"})
    assert status == 201 and user["scope"] == "user" and "room_id" not in user, user
    claims = jwt_payload(user["token"])
    assert claims["scope"] == "user" and "room_id" not in claims and claims["sub"] == "alice"
    status, _, body = server.get_json("/v1/me/rooms", user["token"])
    assert status == 200 and body == {"rooms": [], "has_more": False}, body
    status, room = post({"peer_id": "mod", "room_id": "r1", "moderator": True})
    assert status == 201 and jwt_payload(room["token"])["moderator"] is True, room
    status, plain = post({"peer_id": "bob", "room_id": "r1"})
    assert status == 201 and "moderator" not in jwt_payload(plain["token"])
    for bad in ({"peer_id": "a", "scope": "user", "room_id": "r1"}, {"peer_id": "a", "room_id": "r1", "moderator": "yes"},
                {"peer_id": "a", "scope": "admin"}):
        status, problem = post(bad)
        assert status == 400, (bad, problem)


def test_operations_count_against_the_frame_rate_limit(start_server):
    server = start_server(max_frames_per_second=1, frame_burst=3)

    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        for i in range(6):
            await alice.send({"type": "chat-react", "payload": {"client_id": f"r{i}", "target": 1, "key": "k"}})
        frames = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                frames.append(await alice.recv(timeout=max(0.05, deadline - time.monotonic())))
            except (AssertionError, asyncio.TimeoutError):
                break
        acks = [f for f in frames if f["type"] == "chat-ack"]
        limited = [f for f in frames if f["type"] == "error" and f["error"]["code"] == 429]
        # The burst's operations are answered (443: no message 1 yet); the rest are dropped with a 429.
        assert len(acks) <= 4 and all(a["error"]["code"] == 443 for a in acks), frames
        assert limited, frames

    run(scenario(), timeout=10)
