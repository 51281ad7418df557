"""kill -9 in the middle of a chat burst: every chat that was acked survives with its seq, seqs
stay gap-free, and resending every client_id is idempotent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import websockets

from support import Peer, run

TOTAL = 2000
FAST = dict(max_frames_per_second=1_000_000, frame_burst=1_000_000)


def client_id(i: int) -> str:
    return f"burst-{i:05d}"


def fetch_history(server, token, room="r1"):
    """Every message of the room via REST paging (limit 200)."""
    messages = []
    since = 0
    pages = 0
    while True:
        status, headers, page = server.get_json(f"/v1/rooms/{room}/messages?since_seq={since}&limit=200", token)
        assert status == 200, page
        assert page["room_id"] == room
        messages += page["messages"]
        pages += 1
        assert pages < 100, "history paging does not terminate"
        if not page["has_more"]:
            assert page["next_since_seq"] == (messages[-1]["seq"] if messages else since), page
            return messages, page
        assert page["messages"], page
        assert page["next_since_seq"] == page["messages"][-1]["seq"], page
        since = page["next_since_seq"]


def test_kill_9_during_chat_burst(start_server):
    server = start_server(**FAST)
    pid = server.pid

    async def burst():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        acks: dict[str, int] = {}
        errors = []
        killed = asyncio.Event()

        async def read_acks():
            try:
                async for message in alice.ws:
                    frame = json.loads(message)
                    if frame["type"] != "chat-ack":
                        continue
                    if "error" in frame:
                        errors.append(frame)
                        continue
                    acks[frame["payload"]["client_id"]] = frame["payload"]["seq"]
                    if len(acks) >= TOTAL // 2 and not killed.is_set():
                        os.kill(pid, signal.SIGKILL)
                        killed.set()
            except websockets.ConnectionClosed:
                pass

        reader = asyncio.create_task(read_acks())
        sent = 0
        try:
            for i in range(TOTAL):
                if killed.is_set():
                    break
                await alice.send({"type": "chat", "payload": {"client_id": client_id(i), "text": f"text {i}"}})
                sent += 1
        except websockets.ConnectionClosed:
            pass
        await asyncio.wait_for(killed.wait(), 10)
        await asyncio.wait_for(reader, 5)
        return acks, errors, sent

    acks, errors, sent = run(burst(), timeout=20)
    assert server.wait(5) == -signal.SIGKILL
    assert not errors, errors[:3]
    assert len(acks) >= TOTAL // 2
    assert len(set(acks.values())) == len(acks), "two client_ids were acked with the same seq"

    # Restart on the same data dir.
    again = start_server(data_dir=server.data_dir, **FAST)
    token = again.token("r1", "bob")
    messages, last_page = fetch_history(again, token)
    seqs = [m["seq"] for m in messages]
    assert seqs == list(range(1, len(seqs) + 1)), "history seqs are not exactly 1..N"
    assert last_page["last_seq"] == len(seqs)
    by_client = {}
    for m in messages:
        assert m["client_id"] not in by_client, f"client_id {m['client_id']} stored twice"
        by_client[m["client_id"]] = m
        assert m["from"] == "alice"
        assert m["text"] == f"text {int(m['client_id'].split('-')[1])}"
    assert set(by_client) <= {client_id(i) for i in range(sent)}
    lost = [(cid, seq) for cid, seq in acks.items() if cid not in by_client]
    assert not lost, f"{len(lost)} acked chats are missing after kill -9, e.g. {lost[:5]}"
    moved = [(cid, seq, by_client[cid]["seq"]) for cid, seq in acks.items() if by_client[cid]["seq"] != seq]
    assert not moved, f"acked chats changed seq after restart: {moved[:5]}"
    assert len(messages) >= len(acks)
    print(f"sent={sent} acked={len(acks)} stored={len(messages)}")

    # Resend every client_id, acked or not: acked ones come back with their original seq.
    async def resend():
        alice = await Peer.connect(again, again.token("r1", "alice"), "alice")
        assert alice.welcome["payload"]["last_seq"] == len(messages)
        for i in range(TOTAL):
            await alice.send({"type": "chat", "payload": {"client_id": client_id(i), "text": f"text {i}"}})
        second: dict[str, int] = {}
        deadline = time.monotonic() + 15
        while len(second) < TOTAL:
            frame = await alice.recv(timeout=max(0.1, deadline - time.monotonic()))
            assert frame["type"] == "chat-ack", frame
            assert "error" not in frame, frame
            cid = frame["payload"]["client_id"]
            assert cid not in second, f"two acks for {cid}"
            second[cid] = frame["payload"]["seq"]
        await alice.assert_silent(0.3)
        return second

    second = run(resend(), timeout=20)
    for cid, seq in acks.items():
        assert second[cid] == seq, (cid, seq, second[cid])
    for cid, m in by_client.items():
        assert second[cid] == m["seq"], (cid, m["seq"], second[cid])
    assert sorted(second.values()) == list(range(1, TOTAL + 1))

    messages, last_page = fetch_history(again, token)
    assert len(messages) == TOTAL
    assert len({m["client_id"] for m in messages}) == TOTAL
    assert [m["seq"] for m in messages] == list(range(1, TOTAL + 1))
    assert last_page["last_seq"] == TOTAL
    assert {m["client_id"]: m["seq"] for m in messages} == second
