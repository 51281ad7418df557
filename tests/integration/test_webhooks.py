"""Webhooks against a real HTTP receiver on loopback: every delivery's Standard Webhooks signature
is verified; after 500s, a timeout, a restart and a kill -9 each event arrives exactly once (counted
by webhook-id), in order per room."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import signal
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import websockets

from support import Peer, run

SECRET_KEY = bytes(range(1, 33))
SECRET = "whsec_" + base64.b64encode(SECRET_KEY).decode()
ENV = {"CALLING_WEBHOOK_SECRET": SECRET}
FAST_RETRY = dict(webhook_retry_base_ms=100, webhook_retry_max_ms=400, webhook_timeout_ms=1000)


class Receiver:
    """A webhook endpoint: records every request, verifies its signature, answers what `plan` says."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        # (record, attempt number of this id, counting from 1) -> (status, delay seconds)
        self.plan = lambda record, attempt: (200, 0.0)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                record = {
                    "id": self.headers.get("webhook-id"),
                    "timestamp": self.headers.get("webhook-timestamp"),
                    "signature": self.headers.get("webhook-signature"),
                    "content_type": self.headers.get("content-type"),
                    "body": body,
                    "valid": verify(self.headers, body),
                    "at": time.monotonic(),
                }
                with receiver.lock:
                    attempt = 1 + sum(1 for r in receiver.requests if r["id"] == record["id"])
                    record["attempt"] = attempt
                    status, delay = receiver.plan(record, attempt)
                    record["status"] = status
                    receiver.requests.append(record)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:  # the server gave up on this attempt already
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks"

    def all(self) -> list[dict]:
        with self.lock:
            return list(self.requests)

    def accepted(self) -> list[dict]:
        """Requests answered 2xx, in arrival order, with their parsed bodies."""
        out = []
        for record in self.all():
            if 200 <= record["status"] < 300:
                out.append({**record, "event": json.loads(record["body"])})
        return out

    def wait_for(self, condition, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; received: "
                             + repr([(r["id"], r["status"], json.loads(r["body"])["type"]) for r in self.all()]))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def verify(headers, body: bytes) -> bool:
    """The Standard Webhooks check, written from the spec: HMAC-SHA256 over `id.timestamp.body`
    with the base64-decoded `whsec_` key, `v1,<base64>`, timestamp within five minutes."""
    msg_id, timestamp, signatures = headers.get("webhook-id"), headers.get("webhook-timestamp"), headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        return False
    if abs(time.time() - int(timestamp)) > 300:
        return False
    expected = base64.b64encode(hmac.new(SECRET_KEY, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(candidate, f"v1,{expected}") for candidate in signatures.split(" "))


def once_each_in_order(receiver: Receiver) -> list[dict]:
    """The accepted events; asserts every signature was valid and no id was accepted twice."""
    for record in receiver.all():
        assert record["valid"], f"bad signature on {record}"
        assert record["content_type"] == "application/json"
        assert json.loads(record["body"])["id"] == record["id"]
    accepted = receiver.accepted()
    ids = [r["id"] for r in accepted]
    assert len(ids) == len(set(ids)), f"an event was accepted twice: {ids}"
    return [r["event"] for r in accepted]


def summary(event: dict) -> tuple:
    data = event["data"]
    return (event["type"], data.get("room_id"), data.get("peer_id"))


ROOM_SCRIPT = [("call_started", "r1", None), ("peer_joined", "r1", "alice"), ("peer_joined", "r1", "bob"),
               ("peer_left", "r1", "bob"), ("peer_left", "r1", "alice"), ("call_ended", "r1", None)]


async def play_room(server, room="r1"):
    """alice joins, bob joins, bob leaves, alice leaves: the six events of ROOM_SCRIPT."""
    alice = await Peer.connect(server, server.token(room, "alice"), "alice")
    bob = await Peer.connect(server, server.token(room, "bob"), "bob")
    await alice.recv_type("peer-joined")
    await bob.ws.close()
    await alice.recv_type("peer-left")
    await alice.ws.close()


def test_room_events_are_signed_and_arrive_in_order(start_server):
    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, webhook_chat_messages="true")

        async def body():
            alice = await Peer.connect(server, server.token("r1", "alice", role="agent", call="c1"), "alice")
            bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
            await alice.recv_type("peer-joined")
            await bob.send({"type": "chat", "payload": {"client_id": "m1", "text": "hello"}})
            await bob.recv_type("chat-ack")
            await alice.recv_type("chat")
            await bob.ws.close()
            await alice.recv_type("peer-left")
            await alice.ws.close()

        run(body())
        receiver.wait_for(lambda r: len(r.accepted()) >= 7, 10, "seven events")
        events = once_each_in_order(receiver)
        assert [e["type"] for e in events] == ["call_started", "peer_joined", "peer_joined", "chat_message", "peer_left",
                                               "peer_left", "call_ended"]
        started, joined_alice, joined_bob, chat, left_bob, left_alice, ended = events
        assert started["data"] == {"room_id": "r1", "call_id": "c1", "started_at": started["data"]["started_at"]}
        assert joined_alice["data"]["peer_id"] == "alice" and joined_alice["data"]["role"] == "agent"
        assert joined_alice["data"]["transport"] == "websocket"
        assert joined_bob["data"]["peer_id"] == "bob" and left_bob["data"]["peer_id"] == "bob"
        assert chat["data"]["text"] == "hello" and chat["data"]["from"] == "bob" and chat["data"]["seq"] == 1
        assert left_alice["data"]["peer_id"] == "alice"
        assert ended["data"]["reason"] == "last_peer_left"
        assert ended["data"]["call_id"] == "c1"
        assert ended["data"]["duration_ms"] == ended["data"]["ended_at"] - ended["data"]["started_at"] >= 0
        assert all(e["timestamp"] > 1_700_000_000_000 for e in events)
        # Every header id is unique per event and starts with msg_.
        assert all(e["id"].startswith("msg_") for e in events)
        receiver.wait_for(lambda r: server.metrics().get("calling_webhook_queue_depth") == 0, 5, "an empty queue")
        metrics = server.metrics()
        assert metrics["calling_webhook_deliveries_total"] == 7
        assert metrics["calling_webhook_dropped_total"] == 0
    finally:
        receiver.close()


def test_chat_operations_ride_chat_message_events_with_their_kind(start_server):
    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, webhook_chat_messages="true")

        async def body():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            for frame_type, payload in (("chat", {"client_id": "m1", "text": "hello"}),
                                        ("chat", {"client_id": "m2", "text": "reply", "reply_to": 1}),
                                        ("chat-edit", {"client_id": "e1", "target": 1, "text": "hello!"}),
                                        ("chat-react", {"client_id": "r1", "target": 1, "key": "k"}),
                                        ("chat-react", {"client_id": "r2", "target": 1, "key": "k", "remove": True}),
                                        ("chat-delete", {"client_id": "d1", "target": 2}),
                                        ("chat-edit", {"client_id": "e2", "target": 2, "text": "refused"})):
                await alice.send({"type": frame_type, "payload": payload})
                await alice.recv_type("chat-ack")
            await alice.ws.close()

        run(body())
        receiver.wait_for(lambda r: sum(json.loads(x["body"])["type"] == "chat_message" for x in r.accepted()) >= 6, 10,
                          "six chat_message events")
        time.sleep(0.3)
        events = [e for e in once_each_in_order(receiver) if e["type"] == "chat_message"]
        data = [{k: v for k, v in e["data"].items() if k not in ("ts", "room_id", "from", "meta")} for e in events]
        assert data == [
            {"seq": 1, "client_id": "m1", "text": "hello"},
            {"seq": 2, "client_id": "m2", "text": "reply", "kind": "message", "reply_to": 1},
            {"seq": 3, "client_id": "e1", "text": "hello!", "kind": "edit", "target": 1},
            {"seq": 4, "client_id": "r1", "text": "", "kind": "react", "target": 1, "key": "k"},
            {"seq": 5, "client_id": "r2", "text": "", "kind": "unreact", "target": 1, "key": "k"},
            {"seq": 6, "client_id": "d1", "text": "", "kind": "delete", "target": 2},
        ], data
    finally:
        receiver.close()


def test_500s_and_a_timeout_are_retried_and_each_event_arrives_once_in_order(start_server):
    receiver = Receiver()
    timed_out: list[str] = []

    def plan(record, attempt):
        kind = json.loads(record["body"])["type"]
        if kind == "peer_joined" and json.loads(record["body"])["data"]["peer_id"] == "bob" and attempt == 1:
            timed_out.append(record["id"])
            return 503, 3.0  # far beyond webhook_timeout_ms: the server must give up on this attempt
        return (500, 0.0) if attempt <= 2 else (200, 0.0)

    receiver.plan = plan
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, **FAST_RETRY)
        run(play_room(server))
        receiver.wait_for(lambda r: len(r.accepted()) >= 6, 20, "six events")
        events = once_each_in_order(receiver)
        assert [summary(e) for e in events] == ROOM_SCRIPT
        everything = receiver.all()
        # Each event took three attempts (500, 500 or the timeout, then 200), never a fourth.
        for event in events:
            attempts = [r for r in everything if r["id"] == event["id"]]
            assert [r["attempt"] for r in attempts] == [1, 2, 3], attempts
        # The retry after the timeout came long before the slow answer would have.
        [slow] = timed_out
        first, second = [r["at"] for r in everything if r["id"] == slow][:2]
        assert second - first < 2.5, second - first
        # Order: no attempt of an event starts before the previous event of the room was accepted.
        accepted_at = {r["id"]: r["at"] for r in receiver.accepted()}
        for previous, current in zip(events, events[1:]):
            first_attempt = min(r["at"] for r in everything if r["id"] == current["id"])
            assert first_attempt >= accepted_at[previous["id"]]
        # The receiver has answered the sixth 200 before the server has read it and counted it.
        receiver.wait_for(lambda r: server.metrics().get("calling_webhook_queue_depth") == 0, 5, "an empty queue")
        metrics = server.metrics()
        assert metrics['calling_webhook_failures_total{reason="status_5xx"}'] >= 11
        assert metrics['calling_webhook_failures_total{reason="timeout"}'] == 1
        assert metrics["calling_webhook_deliveries_total"] == 6
    finally:
        receiver.close()


def test_deliveries_pending_at_a_kill_arrive_once_after_the_restart(start_server, tmp_path):
    receiver = Receiver()
    receiver.plan = lambda record, attempt: (500, 0.0)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    flags = dict(webhook_urls=receiver.url, webhook_retry_base_ms=200, webhook_retry_max_ms=1000)
    try:
        server = start_server(data_dir=data_dir, env=ENV, **flags)

        async def two_rooms():
            await play_room(server, "r1")
            await play_room(server, "r2")

        run(two_rooms())
        # Both rooms' first events have been tried (and refused) at least once.
        receiver.wait_for(lambda r: len({x["id"] for x in r.all()}) >= 2, 10, "first attempts")
        receiver.wait_for(lambda r: server.metrics().get("calling_webhook_queue_depth") == 12, 5, "twelve queued")
        server.kill()
        attempted = {r["id"] for r in receiver.all()}

        receiver.plan = lambda record, attempt: (200, 0.0)
        restarted = start_server(data_dir=data_dir, env=ENV, **flags)
        receiver.wait_for(lambda r: len(r.accepted()) >= 12, 15, "twelve events")
        time.sleep(0.5)  # nothing further may arrive
        events = once_each_in_order(receiver)
        assert len(events) == 12
        assert attempted <= {e["id"] for e in events}
        for room in ("r1", "r2"):
            assert [summary(e) for e in events if e["data"]["room_id"] == room] == [(t, room, p) for t, _, p in ROOM_SCRIPT]
        receiver.wait_for(lambda r: restarted.metrics().get("calling_webhook_queue_depth") == 0, 5, "an empty queue")
        assert "webhook deliveries restored" in restarted.stderr_text()
    finally:
        receiver.close()


def test_kill_9_during_a_chat_burst_loses_no_queued_event(start_server, tmp_path):
    """In the spirit of test_durability.py: whatever the queue had committed when the process was
    killed is delivered after the restart, exactly once, in seq order per room."""
    receiver = Receiver()
    receiver.plan = lambda record, attempt: (500, 0.0)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    flags = dict(webhook_urls=receiver.url, webhook_chat_messages="true", webhook_retry_base_ms=5000,
                 max_frames_per_second=1_000_000, frame_burst=1_000_000)
    try:
        server = start_server(data_dir=data_dir, env=ENV, **flags)
        pid = server.pid

        async def burst():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            acked = 0
            try:
                for i in range(3000):
                    await alice.send({"type": "chat", "payload": {"client_id": f"b{i}", "text": f"text {i}"}})
                    if i % 50 == 49:
                        while acked < i - 100:
                            frame = await alice.recv(timeout=5)
                            acked += frame["type"] == "chat-ack"
                    if i == 1500:
                        os.kill(pid, signal.SIGKILL)
                        break
            except (websockets.ConnectionClosed, AssertionError):
                pass

        run(burst(), timeout=25)
        server.kill()
        db = sqlite3.connect(data_dir / "calling.sqlite")
        try:
            queued = [row[0] for row in db.execute("SELECT event_id FROM webhook_deliveries ORDER BY seq")]
        finally:
            db.close()
        attempted = {r["id"] for r in receiver.all()}
        assert len(queued) > 100, len(queued)
        assert attempted <= set(queued), "an event was sent before it was committed"

        receiver.plan = lambda record, attempt: (200, 0.0)
        start_server(data_dir=data_dir, env=ENV, **{**flags, "webhook_retry_base_ms": 100, "webhook_max_in_flight": 32})
        receiver.wait_for(lambda r: len(r.accepted()) >= len(queued), 20, f"{len(queued)} events")
        time.sleep(0.5)
        events = once_each_in_order(receiver)
        assert [e["id"] for e in events] == queued
        seqs = [e["data"]["seq"] for e in events if e["type"] == "chat_message"]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    finally:
        receiver.close()


def test_a_full_queue_drops_new_events_and_counts_them(start_server):
    receiver = Receiver()
    receiver.plan = lambda record, attempt: (500, 0.0)
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, webhook_queue_max=4, webhook_retry_base_ms=10000)
        run(play_room(server))
        receiver.wait_for(lambda r: server.metrics().get("calling_webhook_dropped_total") == 2, 5, "two drops")
        metrics = server.metrics()
        assert metrics["calling_webhook_queue_depth"] == 4
        assert "webhook queue full; events dropped" in server.stderr_text()
        # The first four (the oldest) are the ones kept.
        receiver.wait_for(lambda r: len(r.all()) >= 1, 5, "a first attempt")
        assert json.loads(receiver.all()[0]["body"])["type"] == "call_started"
    finally:
        receiver.close()


def test_webhook_urls_without_a_secret_do_not_start(start_server):
    try:
        start_server(webhook_urls="http://127.0.0.1:9/hooks")
    except RuntimeError as error:
        assert "no webhook secret" in str(error)
    else:
        raise AssertionError("the server started without a webhook secret")


OFFER = ("v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
         "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n")
ANSWER = ("v=0\r\no=- 3 4 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
          "a=ice-ufrag:ansU\r\na=ice-pwd:answerpassword0123456789\r\na=candidate:1 1 udp 2122260223 192.0.2.7 50000 typ host\r\n"
          "a=end-of-candidates\r\n")


def test_an_http_session_sends_session_started_and_session_ended(start_server):
    import asyncio
    import http.client

    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url)

        def post_whip(token):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request("POST", "/whip/r1", body=OFFER, headers={"Authorization": f"Bearer {token}",
                                                                  "Content-Type": "application/sdp"})
            response = conn.getresponse()
            response.read()
            conn.close()
            return response.status, response.getheader("location")

        async def body():
            agent = await Peer.connect(server, server.token("r1", "ann", role="agent"), "agent")
            posting = asyncio.get_running_loop().run_in_executor(None, post_whip, server.token("r1", "pub", role="client"))
            offer = await agent.recv_type("offer", timeout=5, skip=("peer-joined",))
            await agent.send({"type": "answer", "to": offer["from"], "payload": {"sdp": ANSWER, "type": "answer"}})
            status, location = await posting
            assert status == 201
            status, _, _ = server.http("DELETE", location, headers={"Authorization": f"Bearer {server.token('r1', 'pub', role='client')}"})
            assert status == 204
            await agent.recv_type("peer-left", skip=("data",))
            await agent.ws.close()

        run(body())
        receiver.wait_for(lambda r: len(r.accepted()) >= 7, 10, "seven events")
        events = once_each_in_order(receiver)
        assert [e["type"] for e in events] == ["call_started", "peer_joined", "session_started", "peer_joined", "session_ended",
                                               "peer_left", "peer_left", "call_ended"][:len(events)]
        started = events[2]["data"]
        assert started["kind"] == "whip" and started["peer_id"] == "pub" and started["answerer_id"] == "ann"
        ended = next(e["data"] for e in events if e["type"] == "session_ended")
        assert ended["session_id"] == started["session_id"] and ended["reason"] == "deleted" and ended["duration_ms"] >= 0
        assert events[3]["data"]["transport"] == "http"
    finally:
        receiver.close()


def test_presence_request_outcomes(start_server):
    receiver = Receiver()
    try:
        # Only the outcomes: the ringing and status events have their own test below.
        server = start_server(env=ENV, webhook_urls=receiver.url, presence_request_ttl_seconds=1,
                              webhook_events="presence_request_ended")

        async def presence(token, label):
            from websockets.asyncio.client import connect as ws_connect
            ws = await ws_connect(f"ws://127.0.0.1:{server.port}/v1/presence?token={token}", proxy=None, compression=None,
                                  open_timeout=5, ping_interval=None)
            peer = Peer(ws, label)
            await peer.recv_type("connected", skip=("status",))
            return peer

        async def body():
            agent = await presence(server.token(None, "ann", role="agent", scope="presence"), "agent")
            caller = await presence(server.token(None, "carl", role="caller", scope="presence"), "caller")
            await agent.send({"type": "status", "payload": {"status": "available"}})
            await agent.recv_type("status")

            async def ring():
                await caller.send({"type": "request", "payload": {"agent_id": "ann"}})
                # Both sides hear `ended` of the previous request; skip it.
                offer = await agent.recv_type("request", skip=("status", "ended"))
                await caller.recv_type("request", skip=("status", "ended"))
                return offer["payload"]["request_id"]

            declined = await ring()
            await agent.send({"type": "decline", "payload": {"request_id": declined}})
            await caller.recv_type("ended", skip=("status",))
            cancelled = await ring()
            await caller.send({"type": "cancel", "payload": {"request_id": cancelled}})
            await agent.recv_type("ended", skip=("status",))
            timed_out = await ring()
            await caller.recv_type("ended", timeout=4, skip=("status",))
            accepted = await ring()
            await agent.send({"type": "accept", "payload": {"request_id": accepted}})
            frame = await caller.recv_type("accepted", skip=("status",))
            return [declined, cancelled, timed_out, accepted], frame["payload"]

        ids, accepted_frame = run(body())
        receiver.wait_for(lambda r: len(r.accepted()) >= 4, 10, "four outcomes")
        events = once_each_in_order(receiver)
        assert [(e["type"], e["data"]["request_id"], e["data"]["outcome"]) for e in events] == [
            ("presence_request_ended", ids[0], "declined"), ("presence_request_ended", ids[1], "cancelled"),
            ("presence_request_ended", ids[2], "timeout"), ("presence_request_ended", ids[3], "accepted")]
        last = events[3]["data"]
        assert (last["call_id"], last["room_id"], last["agent_id"], last["caller_id"]) == (
            accepted_frame["call_id"], accepted_frame["room_id"], "ann", "carl")
    finally:
        receiver.close()


def test_presence_ringing_and_agent_status_events_reach_a_backend(start_server):
    """What a backend needs to push an incoming call to a sleeping app: `presence_request_ringing`
    once per request (not again when the agent's new connection takes over and is offered it
    again), with the ids, queue, metadata and TTL; `presence_agent_status` for every status change,
    also while nobody is connected to hear the `status` frame."""
    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, presence_request_ttl_seconds=7,
                              presence_grace_seconds=1, webhook_events="presence_request_ringing,presence_agent_status")

        async def presence(token, label):
            from websockets.asyncio.client import connect as ws_connect
            ws = await ws_connect(f"ws://127.0.0.1:{server.port}/v1/presence?token={token}", proxy=None, compression=None,
                                  open_timeout=5, ping_interval=None)
            peer = Peer(ws, label)
            await peer.recv_type("connected", skip=("status",))
            return peer

        async def body():
            ann_token = server.token(None, "ann", role="agent", scope="presence")
            agent = await presence(ann_token, "agent")  # new agent: available
            await agent.send({"type": "status", "payload": {"status": "available", "queues": ["sales"]}})
            await agent.recv_type("status")
            caller = await presence(server.token(None, "carl", role="caller", name="Carl", scope="presence"), "caller")
            await caller.send({"type": "request", "payload": {"queue": "sales", "metadata": {"topic": "billing"}}})
            offer = await agent.recv_type("request", skip=("status",))
            request_id = offer["payload"]["request_id"]
            await caller.recv_type("request", skip=("status",))
            # The agent's app wakes up from the push and connects again: a takeover, offered again.
            again = await presence(ann_token, "agent again")
            reoffer = await again.recv_type("request", skip=("status",))
            assert reoffer["payload"]["request_id"] == request_id
            await again.send({"type": "accept", "payload": {"request_id": request_id}})
            await caller.recv_type("accepted", skip=("status",))
            await again.ws.close()
            await caller.ws.close()
            return request_id, offer["payload"]["expires_at"]

        request_id, expires_at = run(body())
        # available (connect), available+sales, busy (accept), offline (grace of 1 s ran out with nobody connected)
        receiver.wait_for(lambda r: any(e["event"]["type"] == "presence_agent_status" and e["event"]["data"]["status"] == "offline"
                                        for e in r.accepted()), 8, "the offline status")
        events = once_each_in_order(receiver)
        ringing = [e for e in events if e["type"] == "presence_request_ringing"]
        assert [e["data"] for e in ringing] == [{
            "request_id": request_id, "caller_id": "carl", "caller_name": "Carl", "agent_id": "ann", "queue": "sales",
            "metadata": {"topic": "billing"}, "expires_at": expires_at, "ttl_ms": 7000}]
        statuses = [(e["data"]["agent_id"], e["data"]["status"], e["data"]["queues"]) for e in events if e["type"] == "presence_agent_status"]
        assert statuses == [("ann", "available", []), ("ann", "available", ["sales"]), ("ann", "busy", ["sales"]),
                            ("ann", "offline", ["sales"])]
        assert set(events[0]["data"]) == {"agent_id", "status", "note", "queues", "updated_at"}
    finally:
        receiver.close()


def test_a_graceful_stop_queues_its_events_and_keeps_the_seats_for_the_restart(start_server, tmp_path):
    """A single node's SIGTERM is a restart (docs/protocol.md, "Across a server restart"): the
    events queued before it go out after it, and alice's seat, held again by the restarted
    server, ends with peer_left and call_ended (reason last_peer_left) once its grace runs out
    unresumed. Before seats were remembered, the stop itself ended the call (server_shutdown)."""
    receiver = Receiver()
    receiver.plan = lambda record, attempt: (500, 0.0)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # The backoff of the failed first attempt is kept across the restart: short here.
    flags = dict(webhook_urls=receiver.url, webhook_retry_base_ms=1000)
    try:
        server = start_server(data_dir=data_dir, env=ENV, **flags)

        async def body():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            server.signal(signal.SIGTERM)
            try:
                await alice.recv(timeout=5)
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd.code == 1001
            else:
                raise AssertionError("expected the 1001 close")

        run(body())
        assert server.wait(15) == 0
        receiver.plan = lambda record, attempt: (200, 0.0)
        start_server(data_dir=data_dir, env=ENV, **{**flags, "webhook_retry_base_ms": 100, "reconnect_grace_ms": 1000})
        receiver.wait_for(lambda r: len(r.accepted()) >= 4, 10, "four events")
        events = once_each_in_order(receiver)
        assert [summary(e) for e in events] == [("call_started", "r1", None), ("peer_joined", "r1", "alice"),
                                                ("peer_left", "r1", "alice"), ("call_ended", "r1", None)]
        assert events[3]["data"]["reason"] == "last_peer_left"
        assert events[3]["data"]["started_at"] == events[0]["data"]["started_at"]
    finally:
        receiver.close()


def test_an_https_receiver_with_an_untrusted_certificate_is_refused(start_server, tmp_path):
    """https goes through URLSession's TLS with the system trust store: a self-signed receiver gets
    no event (each attempt is a `transport` failure), never a plaintext downgrade."""
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    receiver = Receiver()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    receiver.httpd.socket = context.wrap_socket(receiver.httpd.socket, server_side=True)
    try:
        url = receiver.url.replace("http://", "https://")
        server = start_server(env=ENV, webhook_urls=url, webhook_retry_base_ms=200, webhook_retry_max_ms=200)

        async def one_peer():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            await alice.ws.close()

        run(one_peer())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if server.metrics().get('calling_webhook_failures_total{reason="transport"}', 0) >= 2:
                break
            time.sleep(0.1)
        metrics = server.metrics()
        assert metrics.get('calling_webhook_failures_total{reason="transport"}', 0) >= 2, metrics
        assert metrics["calling_webhook_deliveries_total"] == 0
        assert receiver.all() == [], "no request may reach a receiver whose certificate is not trusted"
    finally:
        receiver.close()


def test_admin_kick_and_end_room_end_the_call_with_their_reason(start_server):
    import subprocess

    from support import BINARY

    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url)
        created = subprocess.run([str(BINARY), "apikey", "create", "--name", "ops", "--scope", "admin", "--data-dir",
                                  str(server.data_dir)], capture_output=True, text=True, timeout=10, env=server.env)
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip()

        def admin(path):
            status, _, body = server.http("POST", path, headers={"X-API-Key": key, "Content-Length": "0"})
            assert status == 200, body

        async def body():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            admin("/v1/admin/rooms/r1/peers/alice/kick")
            try:
                await alice.recv(timeout=5)
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd.code == 4403
            bob = await Peer.connect(server, server.token("r2", "bob"), "bob")
            carol = await Peer.connect(server, server.token("r2", "carol"), "carol")
            await bob.recv_type("peer-joined")
            admin("/v1/admin/rooms/r2/end")
            for peer in (bob, carol):
                try:
                    while True:
                        await peer.recv(timeout=5)
                except websockets.ConnectionClosed as closed:
                    assert closed.rcvd.code == 4404

        run(body())
        receiver.wait_for(lambda r: len(r.accepted()) >= 10, 10, "ten events")
        time.sleep(0.3)
        events = once_each_in_order(receiver)
        r1 = [(e["type"], e["data"].get("peer_id"), e["data"].get("reason")) for e in events if e["data"]["room_id"] == "r1"]
        assert r1 == [("call_started", None, None), ("peer_joined", "alice", None), ("peer_left", "alice", None),
                      ("call_ended", None, "kicked")]
        r2 = [(e["type"], e["data"].get("peer_id"), e["data"].get("reason")) for e in events if e["data"]["room_id"] == "r2"]
        assert r2 == [("call_started", None, None), ("peer_joined", "bob", None), ("peer_joined", "carol", None),
                      ("peer_left", "bob", None), ("peer_left", "carol", None), ("call_ended", None, "room_closed")]
    finally:
        receiver.close()


def test_peer_left_fires_only_when_a_seat_in_its_reconnect_grace_really_ends(start_server):
    """docs/protocol.md, "Reconnect grace": a dropped socket sends no peer_left; a resume within the
    grace sends nothing; the expiry of a second drop sends peer_left, and call_ended once empty."""
    receiver = Receiver()
    try:
        server = start_server(env=ENV, webhook_urls=receiver.url, reconnect_grace_ms=1500)

        async def body():
            alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
            bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
            await alice.recv_type("peer-joined")
            bob.ws.transport.abort()
            await alice.recv_type("peer-reconnecting")
            bob = await Peer.connect(server, server.token("r1", "bob"), "bob2")
            await alice.recv_type("peer-resumed")
            await asyncio.sleep(2.0)  # past the first drop's grace: nothing ends
            assert [summary(e) for e in [r["event"] for r in receiver.accepted()]] == ROOM_SCRIPT[:3]
            bob.ws.transport.abort()
            await alice.recv_type("peer-reconnecting")
            await asyncio.sleep(0.5)
            assert [summary(e) for e in [r["event"] for r in receiver.accepted()]] == ROOM_SCRIPT[:3], "no peer_left during the grace"
            await alice.recv_type("peer-left", timeout=4)
            await alice.ws.close()

        run(body())
        receiver.wait_for(lambda r: len(r.accepted()) >= 6, 10, "six events")
        assert [summary(e) for e in once_each_in_order(receiver)] == ROOM_SCRIPT
    finally:
        receiver.close()
