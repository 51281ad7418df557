"""Cluster mode: three real calling-server processes sharing one real redis-server
(docs/operations.md, "Running a cluster"). Redis runs on a free loopback port in the test's temp
folder, without persistence, and is killed after the test. The chat tests add one PostgreSQL
database all three nodes share (`database_url`, the session's `postgres` fixture)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support import Peer, jwt_payload, kill_and_reap, parse_metrics, run, sign_jwt

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
SECRET = "cluster-test-secret-0123456789abcdef"
HEARTBEAT_MS = 200
NODE_TTL_MS = 1000

pytestmark = pytest.mark.skipif(not os.path.exists(REDIS), reason="redis-server is not installed (deploy/install-deps.sh --test)")


def free_port() -> int:
    """redis-server cannot pick a port itself (`--port 0` disables TCP): bind one, release it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Redis:
    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> "Redis":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", str(self.folder), "--daemonize", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not listen")

    def stop(self) -> None:
        kill_and_reap(self.proc)
        self.proc = None


class RedisProxy:
    """A TCP relay between one node and Redis that the test can cut and heal: cut closes every
    relayed connection and refuses new ones (accepted, then closed at once), so that node alone
    cannot reach Redis while the others can."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if not self.open:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
                except OSError:
                    client.close()
                    continue
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            self.open = False
            for sock in self.sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self.sockets = []

    def heal(self) -> None:
        with self.lock:
            self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def redis(tmp_path):
    server = Redis(tmp_path / "redis").start()
    yield server
    server.stop()


def start_node(start_server, redis: Redis, node: str, **flags):
    return start_server(env={"CALLING_JWT_SECRET": SECRET}, cluster_redis_url=redis.url, node_id=node,
                        cluster_heartbeat_ms=HEARTBEAT_MS, cluster_node_ttl_ms=NODE_TTL_MS, **flags)


def health(server) -> dict:
    status, _, body = server.http("GET", "/healthz")
    assert status == 200
    return json.loads(body)


def wait_for(predicate, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def wait_remote(nodes, counts, timeout: float = 5.0):
    """Waits until each node seats the given number of peers from other nodes."""
    deadline = time.monotonic() + timeout
    while True:
        seen = [health(node)["cluster"]["remote_peers"] for node in nodes]
        if seen == list(counts):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"remote peers {seen}, expected {list(counts)}")
        await asyncio.sleep(0.02)


@pytest.fixture
def cluster(start_server, redis):
    # A short reconnect grace, for the test that waits one out.
    nodes = [start_node(start_server, redis, name, reconnect_grace_ms=2000) for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    return nodes


def ids(welcome) -> list:
    return [entry["peer_id"] for entry in welcome["payload"]["peers"]]


def test_one_room_spans_three_nodes_membership_and_relay(cluster):
    a, b, c = cluster

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice", name="Alice"), "alice")
        assert ids(alice.welcome) == []
        await wait_remote(cluster, [0, 1, 1])
        bob = await Peer.connect(b, b.token("r1", "bob", role="doctor"), "bob")
        assert bob.welcome["payload"]["peers"] == [{"peer_id": "alice", "role": "peer", "name": "Alice"}]
        joined = await alice.recv_type("peer-joined")
        assert joined["from"] == "bob" and joined["payload"] == {"peer_id": "bob", "role": "doctor", "name": None}
        await wait_remote(cluster, [1, 1, 2])
        carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
        assert ids(carol.welcome) == ["alice", "bob"]
        for peer in (alice, bob):
            assert (await peer.recv_type("peer-joined"))["from"] == "carol"
        await alice.assert_silent(0.2)

        # offer/answer/candidate across nodes, `from` stamped by the sending node.
        await alice.send({"type": "offer", "to": "carol", "payload": {"sdp": "v=0 a", "type": "offer"}})
        offer = await carol.recv_type("offer")
        assert offer == {"type": "offer", "from": "alice", "to": "carol", "payload": {"sdp": "v=0 a", "type": "offer"}}
        await carol.send({"type": "answer", "to": "alice", "from": "mallory", "payload": {"sdp": "v=0 c", "type": "answer"}})
        answer = await alice.recv_type("answer")
        assert answer["from"] == "carol" and answer["payload"]["sdp"] == "v=0 c"
        await bob.send({"type": "candidate", "to": "alice", "payload": {"candidate": "candidate:1 1 udp 1 1.2.3.4 5 typ host"}})
        assert (await alice.recv_type("candidate"))["from"] == "bob"
        await bob.assert_silent(0.2)
        await carol.assert_silent(0.1)

        # A broadcast `data` reaches every other member on every node, once.
        await carol.send({"type": "data", "payload": {"hello": 1}})
        for peer in (alice, bob):
            frame = await peer.recv_type("data")
            assert frame["from"] == "carol" and frame["payload"] == {"hello": 1}
        await alice.assert_silent(0.2)
        await bob.assert_silent(0.05)

        # A peer that is nowhere in the cluster is still a 404.
        await alice.send({"type": "offer", "to": "nobody", "payload": {"sdp": "x"}})
        assert (await alice.recv_type("error"))["error"]["code"] == 404

        # Leaving on one node: peer-left everywhere.
        await bob.close()
        for peer in (alice, carol):
            left = await peer.recv_type("peer-left")
            assert left["from"] == "bob" and left["payload"] == {"peer_id": "bob"}
        await wait_remote(cluster, [1, 2, 1])
        dave = await Peer.connect(b, b.token("r1", "dave"), "dave")
        assert ids(dave.welcome) == ["alice", "carol"]
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-joined"))["from"] == "dave"

        # Another room on the same nodes is another world.
        zed = await Peer.connect(c, c.token("r2", "zed"), "zed")
        assert ids(zed.welcome) == []
        await alice.assert_silent(0.3)

    run(body(), timeout=40)
    for node in cluster:
        metrics = node.metrics()
        assert metrics["calling_cluster_redis_up"] == 1
    assert a.metrics()["calling_peers"] == 1, "calling_peers counts this node's peers only"


def test_takeover_across_nodes_closes_the_old_connection_with_replaced_and_the_room_sees_no_flicker(cluster):
    a, b, c = cluster

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice-on-a")
        carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
        await wait_remote(cluster, [1, 2, 1])
        assert (await alice.recv_type("peer-joined"))["from"] == "carol"

        again = await Peer.connect(b, b.token("r1", "alice", name="Alice 2"), "alice-on-b")
        assert ids(again.welcome) == ["carol"], "the new connection sees the room, not itself"
        code, reason = await alice.wait_closed(5)
        assert (code, reason) == (4400, "replaced")
        await carol.assert_silent(0.5)  # no peer-left, no peer-joined: the seat moved
        await wait_remote(cluster, [2, 1, 1])

        # Frames for alice now reach her new connection on b.
        await carol.send({"type": "offer", "to": "alice", "payload": {"sdp": "v=0", "type": "offer"}})
        offer = await again.recv_type("offer")
        assert offer["from"] == "carol"
        await again.send({"type": "answer", "to": "carol", "payload": {"sdp": "v=0", "type": "answer"}})
        assert (await carol.recv_type("answer"))["from"] == "alice"

        # And back to a: the seat on b is replaced in turn.
        third = await Peer.connect(a, a.token("r1", "alice"), "alice-on-a-again")
        assert ids(third.welcome) == ["carol"]
        assert (await again.wait_closed(5))[0] == 4400
        await carol.assert_silent(0.3)
        await third.close()
        assert (await carol.recv_type("peer-left"))["from"] == "alice"

    run(body(), timeout=40)
    assert b.metrics().get('calling_closes_total{reason="replaced"}') == 1


def test_a_killed_node_s_peers_leave_within_the_bound_and_resume_on_another_node(cluster):
    a, b, c = cluster
    bound = (NODE_TTL_MS + HEARTBEAT_MS) / 1000  # docs/operations.md, "Node loss"

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
        bob = await Peer.connect(b, b.token("r1", "bob"), "bob")
        carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
        await wait_remote(cluster, [2, 2, 2])
        for peer in (alice, alice, bob):
            await peer.recv_type("peer-joined")

        b.kill()  # SIGKILL: no leave is ever published
        killed = time.monotonic()
        for peer in (alice, carol):
            left = await peer.recv_type("peer-left", timeout=bound + 3)
            assert left["from"] == "bob"
        elapsed = time.monotonic() - killed
        # One heartbeat of slack for the check that notices it and the test's own scheduling.
        assert elapsed < bound + HEARTBEAT_MS / 1000 + 1.0, f"peer-left after {elapsed:.2f}s, bound {bound}s"
        await wait_remote([a, c], [1, 1])

        # bob reconnects to a surviving node and is in the same room again.
        bob2 = await Peer.connect(c, c.token("r1", "bob"), "bob-on-c")
        assert ids(bob2.welcome) == ["alice", "carol"]
        assert (await alice.recv_type("peer-joined"))["from"] == "bob"
        await bob2.send({"type": "data", "to": "alice", "payload": {"back": True}})
        assert (await alice.recv_type("data"))["payload"] == {"back": True}
        return elapsed

    elapsed = run(body(), timeout=40)
    print(f"node loss noticed after {elapsed:.2f}s (bound {bound}s)")
    health_a = health(a)["cluster"]
    assert health_a["redis"] == "up" and health_a["remote_peers"] == 2


def test_a_redis_restart_is_reported_survived_and_the_cluster_reforms(cluster, redis):
    a, b, c = cluster

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
        bob = await Peer.connect(b, b.token("r1", "bob"), "bob")
        await wait_remote(cluster, [1, 1, 2])
        assert (await alice.recv_type("peer-joined"))["from"] == "bob"

        redis.stop()
        wait_for(lambda: all(health(n)["status"] == "degraded" for n in cluster), what="degraded health")
        for node in cluster:
            state = health(node)["cluster"]
            assert state["redis"] == "down" and state["error"], state
            assert node.metrics()["calling_cluster_redis_up"] == 0
        # A room on one node keeps working without Redis.
        ann = await Peer.connect(a, a.token("r2", "ann"), "ann")
        ben = await Peer.connect(a, a.token("r2", "ben"), "ben")
        assert ids(ben.welcome) == ["ann"]
        assert (await ann.recv_type("peer-joined"))["from"] == "ben"
        await ann.send({"type": "offer", "to": "ben", "payload": {"sdp": "v=0"}})
        assert (await ben.recv_type("offer"))["from"] == "ann"
        # Peers across nodes stay listed (nobody can tell who left) and get no flicker.
        await alice.assert_silent(0.3)

        redis.start()  # empty: nothing of the cluster's state survived
        wait_for(lambda: all(health(n)["status"] == "ok" and health(n)["cluster"]["synced"] for n in cluster),
                 timeout=10, what="reconnected")
        await wait_remote(cluster, [1, 3, 4])
        # alice and bob never saw the outage as a leave.
        await alice.assert_silent(0.3)
        await bob.assert_silent(0.05)
        await bob.send({"type": "data", "to": "alice", "payload": {"after": "restart"}})
        assert (await alice.recv_type("data"))["payload"] == {"after": "restart"}
        carol = await Peer.connect(c, c.token("r2", "carol"), "carol")
        assert ids(carol.welcome) == ["ann", "ben"]
        for peer in (ann, ben):
            assert (await peer.recv_type("peer-joined"))["from"] == "carol"

    run(body(), timeout=60)
    for node in cluster:
        assert node.metrics()["calling_cluster_reconnects_total"] >= 1
        assert "cluster lost Redis" in node.stderr_text()


OFFER = ("v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
         "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n")
ANSWER = ("v=0\r\no=- 3 4 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
          "a=ice-ufrag:ansU\r\na=ice-pwd:answerpassword0123456789\r\na=candidate:1 1 udp 2122260223 192.0.2.7 50000 typ host\r\n"
          "a=end-of-candidates\r\n")


def test_an_http_session_finds_its_answering_peer_on_another_node(cluster):
    import http.client

    a, b, _ = cluster

    def post_whip(token):
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=10)
        conn.request("POST", "/whip/r1", body=OFFER, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/sdp"})
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body.decode()

    async def body():
        agent = await Peer.connect(a, a.token("r1", "ann", role="agent"), "agent-on-a")
        await wait_remote(cluster, [0, 1, 1])
        posting = asyncio.get_running_loop().run_in_executor(None, post_whip, b.token("r1", "pub", role="client"))
        joined = await agent.recv_type("peer-joined", timeout=5)
        assert joined["from"] == "pub"
        offer = await agent.recv_type("offer", timeout=5)
        assert offer["from"] == "pub" and offer["payload"]["transport"] == "whip"
        await agent.send({"type": "answer", "to": "pub", "payload": {"sdp": ANSWER, "type": "answer",
                                                                      "session_id": offer["payload"]["session_id"]}})
        status, answer = await posting
        assert status == 201, answer
        assert "a=ice-ufrag:ansU" in answer

    run(body(), timeout=30)


FORWARD_TIMEOUT_MS = 300
FORWARD_NODE_TTL_MS = 3000
ANSWER_TIMEOUT_MS = 500


def test_an_http_session_request_for_an_owner_that_does_not_answer_is_504_and_for_a_dead_owner_404(start_server, redis):
    """A PATCH through node a for a WHIP resource node b holds: while b is frozen (SIGSTOP, its
    heartbeat not yet lapsed) a answers 504 `session_owner_timeout` after
    `cluster_forward_timeout_ms`; once b is declared gone its sessions are gone with it: 404
    `session_not_found`, and DELETE 204 as for any session that no longer exists; without Redis,
    503 `cluster_unavailable`."""
    import http.client

    # A node TTL well above the forward wait (timeout plus the answer wait of an SDP fragment), so
    # that the frozen b is still alive to a when the forward times out.
    a, b = [start_server(env={"CALLING_JWT_SECRET": SECRET}, cluster_redis_url=redis.url, node_id=name, cluster_heartbeat_ms=HEARTBEAT_MS,
                         cluster_node_ttl_ms=FORWARD_NODE_TTL_MS, cluster_forward_timeout_ms=FORWARD_TIMEOUT_MS,
                         session_answer_timeout_ms=ANSWER_TIMEOUT_MS)
            for name in ("fwd-a", "fwd-b")]
    for node in (a, b):
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    token = b.token("r-fwd", "pub", role="client")

    etag = {}

    def call(node, method, path, body=b"", content_type=None):
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
        headers = {"Authorization": f"Bearer {token}", **etag}
        if content_type:
            headers["Content-Type"] = content_type
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, dict((k.lower(), v) for k, v in response.getheaders()), raw.decode()

    frag = "a=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\na=mid:0\r\na=candidate:1 1 udp 1 192.0.2.1 4000 typ host\r\n"

    async def body():
        agent = await Peer.connect(a, a.token("r-fwd", "ann", role="agent"), "agent-on-a")
        await wait_remote([a, b], [0, 1])
        posting = asyncio.get_running_loop().run_in_executor(None, call, b, "POST", "/whip/r-fwd", OFFER, "application/sdp")
        offer = await agent.recv_type("offer", timeout=5, skip=("peer-joined",))
        await agent.send({"type": "answer", "to": "pub", "payload": {"sdp": ANSWER, "type": "answer",
                                                                      "session_id": offer["payload"]["session_id"]}})
        status, headers, answer = await posting
        assert status == 201, answer
        location = headers["location"]
        etag["If-Match"] = headers["etag"]
        # Through a, while b answers: b's response, ETag and all.
        status, _, text = await asyncio.get_running_loop().run_in_executor(None, call, a, "PATCH", location, frag,
                                                                            "application/trickle-ice-sdpfrag")
        assert status == 204, text
        assert (await agent.recv_type("candidate", timeout=5))["from"] == "pub"
        await agent.close()
        return location

    location = run(body(), timeout=20)
    b.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        status, headers, text = call(a, "PATCH", location, frag, "application/trickle-ice-sdpfrag")
        elapsed = time.monotonic() - started
        assert (status, json.loads(text)["code"]) == (504, "session_owner_timeout"), text
        assert headers["content-type"] == "application/problem+json" and headers["retry-after"] == "1", headers
        # An SDP fragment may be an ICE restart, which waits for the answer: both waits, not the node TTL.
        wait = (FORWARD_TIMEOUT_MS + ANSWER_TIMEOUT_MS) / 1000
        assert wait <= elapsed < wait + 1.0, elapsed
    finally:
        b.kill()
    # Once b's heartbeat lapses, a knows its sessions died with it.
    wait_for(lambda: call(a, "PATCH", location, frag, "application/trickle-ice-sdpfrag")[0] == 404,
             timeout=(FORWARD_NODE_TTL_MS + HEARTBEAT_MS) / 1000 + 3, what="404 once b is gone")
    status, _, text = call(a, "PATCH", location, frag, "application/trickle-ice-sdpfrag")
    assert (status, json.loads(text)["code"]) == (404, "session_not_found"), text
    status, _, text = call(a, "DELETE", location)
    assert status == 204, text
    # Without Redis no owner can be reached: 503, to retry.
    redis.stop()
    status, headers, text = wait_for(lambda: (answer := call(a, "PATCH", location, frag, "application/trickle-ice-sdpfrag"))[0] == 503
                                     and answer, timeout=5, what="503 without Redis")
    assert json.loads(text)["code"] == "cluster_unavailable" and headers["retry-after"] == "1", text


def test_an_admin_kick_of_a_peer_on_another_node_is_carried_out_by_that_node(cluster):
    import http.client

    from support import BINARY

    a, b, c = cluster
    created = subprocess.run([str(BINARY), "apikey", "create", "--name", "ops", "--scope", "admin", "--data-dir", str(a.data_dir)],
                             capture_output=True, text=True, timeout=10, env=a.env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
        bob = await Peer.connect(b, b.token("r1", "bob"), "bob")
        carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
        await wait_remote(cluster, [2, 2, 2])
        for peer in (alice, alice, bob):
            await peer.recv_type("peer-joined")

        def kick():
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=5)
            conn.request("POST", "/v1/admin/rooms/r1/peers/bob/kick", headers={"X-API-Key": key})
            response = conn.getresponse()
            response.read()
            conn.close()
            return response.status

        def drain_status():
            status, _, raw = a.http("GET", "/v1/admin/drain", headers={"X-API-Key": key})
            assert status == 200
            return json.loads(raw)

        # The drain status counts this node's peers, not the other nodes' seated here.
        drain = await asyncio.get_running_loop().run_in_executor(None, drain_status)
        assert (drain["peers"], drain["rooms"], drain["empty"]) == (1, 1, False), drain

        assert await asyncio.get_running_loop().run_in_executor(None, kick) == 200
        code, _ = await bob.wait_closed(5)
        assert code == 4403
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-left"))["from"] == "bob"
        await wait_remote(cluster, [1, 2, 1])

    run(body(), timeout=30)


async def presence_peer(server, token, label):
    from websockets.asyncio.client import connect as ws_connect

    ws = await ws_connect(f"ws://127.0.0.1:{server.port}/v1/presence?token={token}", proxy=None, compression=None,
                          open_timeout=5, ping_interval=None)
    peer = Peer(ws, label)
    peer.welcome = await peer.recv_type("connected", skip=("status",))
    return peer


def test_presence_is_shared_a_dashboard_sees_an_agent_on_another_node_and_an_accepted_call_spans_nodes(cluster):
    a, b, c = cluster
    leaders = wait_for(lambda: (lambda seen: seen if len(set(seen)) == 1 and seen[0] else None)(
        [health(n)["cluster"]["presence_leader"] for n in cluster]), what="one presence leader")
    assert leaders[0] in ("node-a", "node-b", "node-c")

    async def body():
        dashboard = await presence_peer(a, a.token(None, "sup", role="dashboard", scope="presence"), "dashboard-on-a")
        agent = await presence_peer(b, b.token(None, "ann", role="agent", scope="presence"), "agent-on-b")
        status = await dashboard.recv_type("status")
        assert status["from"] == "ann" and status["payload"]["status"] == "available"

        caller = await presence_peer(c, c.token(None, "carl", role="caller", name="Carl", scope="presence"), "caller-on-c")
        assert [e["agent_id"] for e in caller.welcome["payload"]["agents"]] == ["ann"]
        await caller.send({"type": "request", "payload": {"agent_id": "ann"}})
        offer = await agent.recv_type("request", skip=("status",))
        assert offer["from"] == "carl"
        request_id = offer["payload"]["request_id"]
        await agent.send({"type": "accept", "payload": {"request_id": request_id}})
        agent_accepted = (await agent.recv_type("accepted", skip=("status",)))["payload"]
        caller_accepted = (await caller.recv_type("accepted", skip=("status", "request")))["payload"]
        assert agent_accepted["room_id"] == caller_accepted["room_id"] and agent_accepted["call_id"] == caller_accepted["call_id"]

        # Both parties land in one room, each on its own node.
        agent_room = await Peer.connect(b, agent_accepted["token"], "ann-in-room")
        await wait_remote([c], [1])
        caller_room = await Peer.connect(c, caller_accepted["token"], "carl-in-room")
        assert ids(caller_room.welcome) == ["ann"]
        assert (await agent_room.recv_type("peer-joined"))["from"] == "carl"

        # A bad frame relayed to the leader is answered there, to the right connection.
        await caller.send("not json")
        assert (await caller.recv_type("error", skip=("status",)))["error"]["code"] in (400, 410, 411, 412, 413, 414, 415, 416)

    run(body(), timeout=40)


@pytest.mark.parametrize("shared", [False, True], ids=["sqlite", "database_url"])
def test_a_consultation_meter_runs_once_on_the_call_s_node_for_peers_on_other_nodes(start_server, redis, postgres, shared):
    """With each node's SQLite the call is only in a's store; with `database_url` every node reads it,
    and the meter still runs once, on a, which created it."""
    import http.client

    from support import BINARY

    url = postgres.create_database() if shared else None
    extra = {"database_url": url} if shared else {}
    nodes = [start_node(start_server, redis, name, meter_interval_seconds=1, **extra) for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what="synced")
    a, b, c = nodes
    created = subprocess.run([str(BINARY), "apikey", "create", "--name", "calls", "--scope", "calls", "--data-dir", str(a.data_dir)]
                             + (["--database-url", url] if shared else []),
                             capture_output=True, text=True, timeout=10, env=a.env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()

    def post(path, body):
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=5)
        conn.request("POST", path, body=json.dumps(body), headers={"X-API-Key": key, "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        assert response.status == 201, raw
        return json.loads(raw)

    call = post("/v1/calls", {"room_id": "consult", "peer_id": "patient", "meter": {"limit_s": 3, "warning_s": 1}})
    doctor_token = post("/v1/tokens", {"call_id": call["call_id"], "peer_id": "doctor", "role": "agent"})["token"]

    async def meter_frames(peer):
        states = []
        while True:
            frame = await peer.recv_type("meter", timeout=6, skip=("peer-joined",))
            states.append(frame["payload"]["state"])
            if frame["payload"]["state"] == "ended":
                return states

    async def body():
        # Neither peer is on node a, which holds the call: its hub seats both as remote seats.
        patient = await Peer.connect(b, call["access_token"], "patient-on-b")
        await wait_remote(nodes, [1, 0, 1])
        doctor = await Peer.connect(c, doctor_token, "doctor-on-c")
        patient_states, doctor_states = await asyncio.gather(meter_frames(patient), meter_frames(doctor))
        for states in (patient_states, doctor_states):
            assert states[0] == "running" and states[-1] == "ended", states
            assert [s for s in states if s != "running"] == ["warning", "ended"], "one meter, not one per node"
        assert (await patient.wait_closed(5))[0] == 4410
        assert (await doctor.wait_closed(5))[0] == 4410

    run(body(), timeout=40)
    status, _, raw = a.http("GET", f"/v1/calls/{call['call_id']}", headers={"X-API-Key": key})
    assert status == 200 and json.loads(raw)["end_reason"] == "consultation_ended", raw


def test_when_the_presence_leader_dies_another_node_takes_the_lease_and_presence_goes_on(cluster):
    by_name = {health(n)["cluster"]["node_id"]: n for n in cluster}
    leader_name = wait_for(lambda: (lambda seen: seen[0] if len(set(seen)) == 1 and seen[0] else None)(
        [health(n)["cluster"]["presence_leader"] for n in cluster]), what="one presence leader")
    survivors = [n for name, n in by_name.items() if name != leader_name]
    x, y = survivors

    async def body():
        agent = await presence_peer(x, x.token(None, "ann", role="agent", scope="presence"), "agent")
        dashboard = await presence_peer(y, y.token(None, "sup", role="dashboard", scope="presence"), "dashboard")
        assert [e["agent_id"] for e in dashboard.welcome["payload"]["agents"]] == ["ann"]

        by_name[leader_name].kill()
        # The lease lapses after cluster_node_ttl_ms; the next heartbeat of a survivor takes it.
        new = wait_for(lambda: (lambda seen: seen[0] if len(set(seen)) == 1 and seen[0] != leader_name else None)(
            [health(n)["cluster"]["presence_leader"] for n in survivors]), timeout=NODE_TTL_MS / 1000 + 3, what="a new leader")
        assert new in {health(n)["cluster"]["node_id"] for n in survivors}
        # The new leader's hub starts afresh: both connections are opened there again.
        await agent.recv_type("connected", timeout=5, skip=("status",))
        again = await dashboard.recv_type("connected", timeout=5, skip=("status",))
        if "ann" not in [e["agent_id"] for e in again["payload"]["agents"]]:
            # The dashboard's node reopened it first: the agent's arrival comes as a status.
            assert (await dashboard.recv_type("status", timeout=5))["from"] == "ann"
        await agent.send({"type": "status", "payload": {"status": "busy"}})
        deadline = time.monotonic() + 5
        while True:
            status = await dashboard.recv_type("status", timeout=max(0.1, deadline - time.monotonic()))
            if status["from"] == "ann" and status["payload"]["status"] == "busy":
                break

    run(body(), timeout=40)



PRESENCE_RESUME_MS = 1500


@pytest.fixture
def presence_cluster(start_server, redis):
    nodes = [start_node(start_server, redis, name, cluster_presence_resume_ms=PRESENCE_RESUME_MS)
             for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    return nodes


def one_leader(nodes) -> str:
    return wait_for(lambda: (lambda seen: seen[0] if len(set(seen)) == 1 and seen[0] else None)(
        [health(n)["cluster"]["presence_leader"] for n in nodes]), what="one presence leader")


async def recv_until(peer, predicate, timeout: float, what: str) -> dict:
    """The first frame for which `predicate` holds; every frame before it is dropped."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{peer.label}: no {what} within {timeout} s")
        frame = await peer.recv(left)
        if predicate(frame):
            return frame


def test_a_killed_presence_leader_s_successor_resumes_away_agents_and_the_ringing_request(presence_cluster):
    by_name = {health(n)["cluster"]["node_id"]: n for n in presence_cluster}
    leader_name = one_leader(presence_cluster)
    x, y = [n for name, n in by_name.items() if name != leader_name]

    async def body():
        ann = await presence_peer(x, x.token(None, "ann", role="agent", scope="presence") + "&queues=sales,vip", "ann-on-x")
        bob = await presence_peer(y, y.token(None, "bob", role="agent", scope="presence") + "&queues=sales", "bob-on-y")
        carl = await presence_peer(x, x.token(None, "carl", role="caller", name="Carl", scope="presence"), "carl-on-x")
        await ann.send({"type": "status", "payload": {"status": "away", "note": "dentist"}})
        await recv_until(carl, lambda f: f["type"] == "status" and f["from"] == "ann" and f["payload"]["status"] == "away", 5, "ann away")
        await carl.send({"type": "request", "payload": {"agent_id": "bob", "metadata": {"topic": "refund"}}})
        offer = await recv_until(bob, lambda f: f["type"] == "request", 5, "the offer")
        request_id = offer["payload"]["request_id"]
        expires_at = offer["payload"]["expires_at"]
        ack = await recv_until(carl, lambda f: f["type"] == "request", 5, "the ack")
        assert ack["payload"]["request_id"] == request_id

        killed = time.monotonic()
        by_name[leader_name].kill()
        wait_for(lambda: (lambda seen: len(set(seen)) == 1 and seen[0] not in (None, leader_name))(
            [health(n)["cluster"]["presence_leader"] for n in (x, y)]), timeout=NODE_TTL_MS / 1000 + 3, what="a new leader")

        # Each connection is opened at the new leader again; its `connected` shows ann as she was.
        again = await recv_until(ann, lambda f: f["type"] == "connected", 5, "ann's new connected")
        entry = next(e for e in again["payload"]["agents"] if e["agent_id"] == "ann")
        assert (entry["status"], entry["note"], entry["queues"]) == ("away", "dentist", ["sales", "vip"]), entry
        # The caller hears its request still rings; the agent gets the offer again.
        await recv_until(carl, lambda f: f["type"] == "connected", 5, "carl's new connected")
        still = await recv_until(carl, lambda f: f["type"] in ("request", "ended"), 5, "the ringing ack again")
        assert still["type"] == "request" and still["payload"]["request_id"] == request_id, still
        assert still["payload"]["state"] == "ringing" and still["payload"]["expires_at"] == expires_at
        again_offer = await recv_until(bob, lambda f: f["type"] == "request", 5, "the offer again")
        assert again_offer["payload"]["request_id"] == request_id
        assert again_offer["payload"]["metadata"] == {"topic": "refund"}
        resumed_in = time.monotonic() - killed

        # ann is still away: not offered calls, by name or by queue.
        cora = await presence_peer(y, y.token(None, "cora", role="caller", scope="presence"), "cora-on-y")
        assert next(e for e in cora.welcome["payload"]["agents"] if e["agent_id"] == "ann")["status"] == "away"
        await cora.send({"type": "request", "payload": {"agent_id": "ann"}})
        assert (await recv_until(cora, lambda f: f["type"] == "error", 5, "409"))["error"]["code"] == 409
        await cora.send({"type": "request", "payload": {"queue": "vip"}})
        assert (await recv_until(cora, lambda f: f["type"] == "error", 5, "409"))["error"]["code"] == 409

        # The resumed request goes on: bob's accept makes the call for both.
        await bob.send({"type": "accept", "payload": {"request_id": request_id}})
        bob_accepted = await recv_until(bob, lambda f: f["type"] == "accepted", 5, "bob's accepted")
        carl_accepted = await recv_until(carl, lambda f: f["type"] in ("accepted", "ended"), 5, "carl's accepted")
        assert carl_accepted["type"] == "accepted", carl_accepted
        assert carl_accepted["payload"]["call_id"] == bob_accepted["payload"]["call_id"]
        print(f"takeover to resumed request: {resumed_in:.2f} s after kill -9")

    run(body(), timeout=60)


def test_a_ringing_request_whose_agent_died_with_the_presence_leader_ends_for_its_caller(presence_cluster):
    by_name = {health(n)["cluster"]["node_id"]: n for n in presence_cluster}
    leader_name = one_leader(presence_cluster)
    leader = by_name[leader_name]
    x = next(n for name, n in by_name.items() if name != leader_name)

    async def body():
        # The agent is on the leader's own node and does not come back after it dies.
        bob = await presence_peer(leader, leader.token(None, "bob", role="agent", scope="presence"), "bob-on-leader")
        carl = await presence_peer(x, x.token(None, "carl", role="caller", scope="presence"), "carl-on-x")
        await carl.send({"type": "request", "payload": {"agent_id": "bob"}})
        request_id = (await recv_until(bob, lambda f: f["type"] == "request", 5, "the offer"))["payload"]["request_id"]
        await recv_until(carl, lambda f: f["type"] == "request", 5, "the ack")

        killed = time.monotonic()
        leader.kill()
        # Bound: the lease lapses (node TTL), a heartbeat takes it, then the resume window and a tick.
        bound = (NODE_TTL_MS + HEARTBEAT_MS + PRESENCE_RESUME_MS) / 1000 + 1.5
        ended = await recv_until(carl, lambda f: f["type"] == "ended", bound, "ended")
        took = time.monotonic() - killed
        assert ended["payload"] == {"request_id": request_id, "reason": "disconnected"}, ended
        assert took >= PRESENCE_RESUME_MS / 1000, f"ended before the resume window ({took:.2f} s)"
        print(f"kill -9 to ended: {took:.2f} s (bound {bound:.2f} s)")

    run(body(), timeout=60)


# ---- chat across nodes: one PostgreSQL database (`database_url`) shared by all three nodes ----

CHAT_SKIP = ("peer-joined", "peer-left", "typing", "read")


@pytest.fixture
def chat_cluster(start_server, redis, postgres):
    """Three nodes on one Redis and one PostgreSQL database: chat is cluster-wide."""
    url = postgres.create_database()
    nodes = [start_node(start_server, redis, name, database_url=url, max_frames_per_second=100_000, frame_burst=100_000)
             for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    return nodes, url


class ChatPeer:
    """A peer whose frames are read by one background task: chats and other frames are collected,
    chat-acks complete the sender's futures by client_id, so sending and receiving overlap."""

    def __init__(self, peer: Peer, name: str):
        self.peer = peer
        self.name = name
        self.chats: list[dict] = []
        self.frames: list[dict] = []
        self.acks: dict[str, asyncio.Future] = {}
        self.closed = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, server, room: str, name: str, **query) -> "ChatPeer":
        return cls(await Peer.connect(server, server.token(room, name), name, **query), name)

    async def _read(self):
        try:
            async for message in self.peer.ws:
                frame = json.loads(message)
                if frame["type"] == "chat":
                    self.chats.append(frame)
                elif frame["type"] == "chat-ack":
                    future = self.acks.pop(frame["payload"]["client_id"], None)
                    if future is not None and not future.done():
                        future.set_result(frame)
                    else:
                        self.frames.append(frame)
                else:
                    self.frames.append(frame)
        except Exception:  # the connection went away (a killed node); the frames so far stay
            pass
        finally:
            self.closed.set()

    async def send_chat(self, client_id: str, text: str, timeout: float = 10.0) -> dict:
        future = asyncio.get_running_loop().create_future()
        self.acks[client_id] = future
        await self.peer.send({"type": "chat", "payload": {"client_id": client_id, "text": text}})
        return await asyncio.wait_for(future, timeout)

    def seqs(self) -> list[int]:
        return [frame["payload"]["seq"] for frame in self.chats]

    async def wait_frame(self, frame_type: str, predicate=lambda frame: True, timeout: float = 5.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.frames:
                if frame["type"] == frame_type and predicate(frame):
                    self.frames.remove(frame)
                    return frame
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {frame_type} within {timeout}s; frames {self.frames}")
            await asyncio.sleep(0.01)

    async def wait_chats(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.chats) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: {len(self.chats)} chats, expected {count}")
            await asyncio.sleep(0.01)

    async def close(self):
        await self.peer.close()
        await self.closed.wait()


def room_history(server, room: str) -> list[dict]:
    token = server.token(room, "history-reader")
    messages, since = [], 0
    while True:
        status, _, body = server.get_json(f"/v1/rooms/{room}/messages?since_seq={since}&limit=200", token)
        assert status == 200, body
        messages += body["messages"]
        since = body["next_since_seq"]
        if not body["has_more"]:
            return messages


def postgres_rows(postgres, url: str, room: str) -> str:
    """`count,max(seq),rooms.last_seq` of a room's messages in the database."""
    return postgres.psql(url, f"SELECT count(*) || ',' || max(seq) || ',' || (SELECT last_seq FROM rooms WHERE room_id = '{room}') "
                              f"FROM chat_messages WHERE room_id = '{room}'")


def test_chat_across_three_nodes_one_gap_free_seq_delivered_once_retry_history_typing_read(chat_cluster, postgres):
    nodes, url = chat_cluster
    per_sender = 25

    async def body():
        peers = []
        for n, node in enumerate(nodes):
            for i in range(2):
                peers.append(await ChatPeer.connect(node, "talk", f"n{n}p{i}"))
        await wait_remote(nodes, [4, 4, 4])

        async def sender(peer: ChatPeer) -> dict[str, int]:
            acked = {}
            for k in range(per_sender):
                ack = await peer.send_chat(f"{peer.name}-{k}", f"{peer.name} says {k}")
                assert "error" not in ack, ack
                acked[ack["payload"]["client_id"]] = ack["payload"]["seq"]
            return acked

        results = await asyncio.gather(*(sender(peer) for peer in peers))
        acks = {client: seq for result in results for client, seq in result.items()}
        total = len(peers) * per_sender
        assert sorted(acks.values()) == list(range(1, total + 1)), "one gap-free seq across three nodes"
        for result in results:  # each sender's own messages keep their order
            assert list(result.values()) == sorted(result.values())

        # Every peer gets every other peer's chat exactly once (stored once, forwarded once per node).
        for peer in peers:
            await peer.wait_chats(total - per_sender)
        await asyncio.sleep(0.3)  # nothing more arrives: no copy per node
        for peer in peers:
            seqs = peer.seqs()
            assert len(seqs) == len(set(seqs)) == total - per_sender, (peer.name, len(seqs), len(set(seqs)))
            own = {seq for client, seq in acks.items() if client.startswith(peer.name + "-")}
            assert set(seqs) == set(range(1, total + 1)) - own, peer.name
            for frame in peer.chats:
                assert acks[frame["payload"]["client_id"]] == frame["payload"]["seq"]
                assert frame["from"] == frame["payload"]["client_id"].split("-")[0]

        # A retry of a message stored through node a, sent through node c: the original ack, no new
        # seq, nothing broadcast. (The same peer id on node c takes the seat over: 4400 on node a.)
        first = peers[0]
        again = await ChatPeer.connect(nodes[2], "talk", first.name)
        await first.closed.wait()
        assert first.peer.ws.close_code == 4400
        ack = await again.send_chat(f"{first.name}-7", "changed text")
        assert ack["payload"]["seq"] == acks[f"{first.name}-7"] and "error" not in ack, ack
        await asyncio.sleep(0.3)
        for peer in peers[1:]:
            assert len(peer.chats) == total - per_sender, f"{peer.name} got a copy of the retry"

        # typing and read across nodes: one sender on node b, heard on a and c (once each).
        typer = peers[2]
        await typer.peer.send({"type": "typing", "payload": {"typing": True}})
        for peer in (peers[1], peers[3], peers[4], peers[5], again):
            frame = await peer.wait_frame("typing", lambda f: f["from"] == typer.name)
            assert frame["payload"] == {"typing": True}
        # A peer joining on another node meanwhile gets the indicator right after its welcome.
        late = await ChatPeer.connect(nodes[0], "talk", "late")
        frame = await late.wait_frame("typing", lambda f: f["from"] == typer.name)
        assert frame["payload"] == {"typing": True}
        await typer.peer.send({"type": "read", "payload": {"seq": total}})
        for peer in (peers[1], peers[3], peers[4], peers[5], again, late):
            frame = await peer.wait_frame("read", lambda f: f["from"] == typer.name)
            assert frame["payload"]["seq"] == total, frame
        await asyncio.sleep(0.2)
        for peer in peers[1:] + [again, late]:
            extra = [f for f in peer.frames if f["type"] in ("typing", "read") and f["from"] == typer.name]
            assert extra == [], (peer.name, extra)  # each once, not once per node

        # History from any node: complete, in seq order, as acked.
        for node in nodes:
            messages = room_history(node, "talk")
            assert [m["seq"] for m in messages] == list(range(1, total + 1))
            assert {m["client_id"]: m["seq"] for m in messages} == acks
        # Resume on any node after last_seq: exactly the messages after it.
        for node in nodes:
            resumed = await Peer.connect(node, node.token("talk", "resumer"), "resumer", last_seq=total - 4)
            payload = resumed.welcome["payload"]
            assert payload["recovered"] is True and payload["replay_count"] == 4 and payload["last_seq"] == total, payload
            assert [(await resumed.recv())["payload"]["seq"] for _ in range(4)] == list(range(total - 3, total + 1))
            await resumed.close()
        for peer in peers[1:] + [again, late]:
            await peer.close()
        return total

    total = run(body(), timeout=120)
    # The database, not any node, holds the rows: once each.
    assert postgres_rows(postgres, url, "talk") == f"{total},{total},{total}"


def test_a_killed_node_mid_chat_loses_no_acked_chat_and_its_peer_resumes_on_another_node(chat_cluster, postgres):
    nodes, url = chat_cluster
    a, b, c = nodes
    bound = (NODE_TTL_MS + HEARTBEAT_MS) / 1000  # docs/operations.md, "What each failure does"

    async def body():
        alice = await ChatPeer.connect(a, "mid", "alice")
        bob = await ChatPeer.connect(b, "mid", "bob")
        carol = await ChatPeer.connect(c, "mid", "carol")
        await wait_remote(nodes, [2, 2, 2])
        acked: dict[str, int] = {}

        async def talk(peer: ChatPeer, prefix: str, count: int):
            for k in range(count):
                ack = await peer.send_chat(f"{prefix}{k}", f"{peer.name} {prefix}{k}")
                assert "error" not in ack, ack
                acked[f"{peer.name}:{prefix}{k}"] = ack["payload"]["seq"]

        await asyncio.gather(talk(alice, "before-", 10), talk(bob, "before-", 10), talk(carol, "before-", 10))
        await bob.wait_chats(20)

        # bob sends one more without waiting; node b dies with it in flight (acked or not).
        await bob.peer.send({"type": "chat", "payload": {"client_id": "in-flight", "text": "maybe stored"}})
        b.kill()  # SIGKILL: no leave is published, its PostgreSQL connections just drop
        killed = time.monotonic()
        talking = asyncio.ensure_future(asyncio.gather(talk(alice, "during-", 10), talk(carol, "during-", 10)))
        for peer in (alice, carol):
            await peer.wait_frame("peer-left", lambda f: f["from"] == "bob", timeout=bound + 3)
        elapsed = time.monotonic() - killed
        assert elapsed < bound + HEARTBEAT_MS / 1000 + 1.0, f"peer-left after {elapsed:.2f}s, bound {bound}s"
        await talking
        await bob.closed.wait()

        # bob's last contiguous seq: what he saw, and his own acked messages.
        seen = set(bob.seqs()) | {seq for key, seq in acked.items() if key.startswith("bob:")}
        last_seq = 0
        while last_seq + 1 in seen:
            last_seq += 1
        assert last_seq >= 30, last_seq

        bob2 = await Peer.connect(c, c.token("mid", "bob"), "bob-on-c", last_seq=last_seq)
        payload = bob2.welcome["payload"]
        history = room_history(a, "mid")
        top = history[-1]["seq"]
        assert [m["seq"] for m in history] == list(range(1, top + 1))
        assert payload["recovered"] is True and payload["last_seq"] == top, payload
        assert payload["replay_count"] == top - last_seq, (payload, last_seq)
        replay = [await bob2.recv() for _ in range(payload["replay_count"])]
        assert [f["payload"]["seq"] for f in replay] == list(range(last_seq + 1, top + 1))

        # No acked chat lost: every ack is in the history with its seq, and the in-flight one is
        # there at most once; its retry on node c answers with its seq (the original, or a new one).
        stored = {(m["from"], m["client_id"]): m["seq"] for m in history}
        for key, seq in acked.items():
            peer, client = key.split(":", 1)
            assert stored[(peer, client)] == seq, key
        await bob2.send({"type": "chat", "payload": {"client_id": "in-flight", "text": "maybe stored"}})
        retry = await bob2.recv_type("chat-ack", timeout=10, skip=CHAT_SKIP + ("chat",))
        assert "error" not in retry, retry
        if ("bob", "in-flight") in stored:
            assert retry["payload"]["seq"] == stored[("bob", "in-flight")]
        else:
            assert retry["payload"]["seq"] == top + 1
        final = room_history(c, "mid")
        assert [m["seq"] for m in final] == list(range(1, len(final) + 1))
        assert sum(1 for m in final if m["client_id"] == "in-flight") == 1
        for peer in (alice, carol):
            await peer.wait_frame("peer-joined", lambda f: f["from"] == "bob")
        return elapsed

    elapsed = run(body(), timeout=60)
    print(f"node loss noticed after {elapsed:.2f}s (bound {bound}s)")
    assert postgres.psql(url, "SELECT count(*) = count(DISTINCT seq) FROM chat_messages WHERE room_id = 'mid'") == "t"


def test_chats_stored_while_redis_is_down_reach_the_other_nodes_peers_once_it_is_back(chat_cluster, redis):
    nodes, url = chat_cluster
    a, b, c = nodes

    async def body():
        alice = await ChatPeer.connect(a, "outage", "alice")
        bob = await ChatPeer.connect(b, "outage", "bob")
        await wait_remote(nodes, [1, 1, 2])
        for k in range(3):
            await alice.send_chat(f"a{k}", f"before {k}")
        await bob.wait_chats(3)

        redis.stop()
        wait_for(lambda: all(health(n)["cluster"]["redis"] == "down" for n in nodes), what="Redis down everywhere")
        # PostgreSQL is up: chats are stored and acked on each node, but the bus cannot carry them.
        during = {}
        for k in range(4):
            during[f"a-during{k}"] = (await alice.send_chat(f"a-during{k}", f"alice during {k}"))["payload"]["seq"]
            during[f"b-during{k}"] = (await bob.send_chat(f"b-during{k}", f"bob during {k}"))["payload"]["seq"]
        assert sorted(during.values()) == list(range(4, 12))
        await asyncio.sleep(0.3)
        assert bob.seqs() == [1, 2, 3] and alice.seqs() == []

        redis.start()
        wait_for(lambda: all(health(n)["cluster"]["synced"] for n in nodes), timeout=10, what="reconnected")
        # Each peer gets the other's chats from the outage from the store, once.
        await alice.wait_chats(4)
        await bob.wait_chats(7)
        after = await alice.send_chat("a-after", "after")
        assert after["payload"]["seq"] == 12
        await bob.wait_chats(8)
        await asyncio.sleep(0.3)
        assert sorted(alice.seqs()) == [seq for client, seq in sorted(during.items(), key=lambda kv: kv[1]) if client.startswith("b-")]
        assert sorted(bob.seqs()) == [1, 2, 3] + [seq for client, seq in during.items() if client.startswith("a-")] + [12]
        assert len(bob.seqs()) == len(set(bob.seqs())) and len(alice.seqs()) == len(set(alice.seqs()))
        for peer in (alice, bob):
            for frame in peer.chats:
                assert frame["from"] != peer.name

    run(body(), timeout=60)
    assert a.metrics()["calling_cluster_chat_gap_fills_total"] == 4
    assert b.metrics()["calling_cluster_chat_gap_fills_total"] == 4


def test_without_database_url_chat_is_per_node_and_no_seq_is_taken_for_another_node_s(cluster):
    a, b, _ = cluster

    async def body():
        alice = await ChatPeer.connect(a, "local-chat", "alice")
        bob = await ChatPeer.connect(b, "local-chat", "bob")
        await wait_remote(cluster, [1, 1, 2])
        assert [(await alice.send_chat(f"a{k}", "hi"))["payload"]["seq"] for k in range(2)] == [1, 2]
        # Node b's SQLite has its own sequence: bob's first chat is seq 1 there.
        assert (await bob.send_chat("b0", "hello"))["payload"]["seq"] == 1
        await bob.wait_chats(2)
        await alice.wait_chats(1)
        # Forwarded as it is: a seq alice "has" (her own 1) does not hide bob's 1 from her.
        assert bob.seqs() == [1, 2] and alice.seqs() == [1] and alice.chats[0]["from"] == "bob"
        assert [m["client_id"] for m in room_history(a, "local-chat")] == ["a0", "a1"]
        assert [m["client_id"] for m in room_history(b, "local-chat")] == ["b0"]

    run(body(), timeout=30)
    assert a.metrics().get("calling_cluster_chat_gap_fills_total", 0) == 0


def test_a_chat_stored_before_its_node_heard_of_a_new_seat_still_reaches_that_peer_once(chat_cluster, redis):
    nodes, url = chat_cluster
    a, _, c = nodes

    async def body():
        alice = await ChatPeer.connect(a, "race", "alice")
        await wait_remote(nodes, [0, 1, 1])
        assert (await alice.send_chat("first", "before bob"))["payload"]["seq"] == 1
        # A slow bus: Redis paused (shorter than the heartbeat lifetime and the Redis timeouts), so
        # bob's seat on node c has not reached node a when alice's next chat commits there.
        os.kill(redis.proc.pid, signal.SIGSTOP)
        try:
            bob = await ChatPeer.connect(c, "race", "bob", last_seq=1)
            assert bob.peer.welcome["payload"]["last_seq"] == 1
            ack = await alice.send_chat("second", "while bob's seat is on its way")
            assert ack["payload"]["seq"] == 2
            await asyncio.sleep(0.4)
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        await alice.wait_frame("peer-joined", lambda f: f["from"] == "bob")
        # Node a never forwarded seq 2 to bob; node c reads it for him (once cluster_chat_gap_ms
        # after his join), and the last chat of the room shows no gap by itself.
        await bob.wait_chats(1, timeout=5)
        await asyncio.sleep(0.5)
        assert bob.seqs() == [2], bob.chats
        ack = await alice.send_chat("third", "after")
        await bob.wait_chats(2)
        assert bob.seqs() == [2, 3]

    run(body(), timeout=30)
    assert c.metrics()["calling_cluster_chat_gap_fills_total"] == 1


def test_a_peer_in_its_grace_on_one_node_resumes_through_another_with_peer_resumed(cluster):
    """docs/protocol.md, "Reconnect grace", in a cluster: bob's socket on a drops; carol on c sees
    peer-reconnecting (forwarded from a); bob comes back through b; carol sees peer-resumed, never
    peer-left, and relays reach bob's new socket; a later drop expires with peer-left everywhere."""
    a, b, c = cluster

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
        bob = await Peer.connect(a, a.token("r1", "bob"), "bob-on-a")
        carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
        await wait_remote(cluster, [1, 3, 2])
        await alice.recv_type("peer-joined")
        await alice.recv_type("peer-joined")
        bob.ws.transport.abort()
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-reconnecting", skip=("peer-joined",)))["from"] == "bob"

        again = await Peer.connect(b, b.token("r1", "bob"), "bob-on-b")
        assert ids(again.welcome) == ["alice", "carol"]
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-resumed"))["from"] == "bob"
        await wait_remote(cluster, [2, 2, 2])
        await carol.send({"type": "data", "to": "bob", "payload": {"n": 1}})
        assert (await again.recv_type("data"))["from"] == "carol"
        # Past a's grace: the takeover ended it, no peer-left anywhere.
        await alice.assert_silent(2.5)
        await carol.assert_silent(0.1)

        again.ws.transport.abort()
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-reconnecting"))["from"] == "bob"
        for peer in (alice, carol):
            assert (await peer.recv_type("peer-left", timeout=5))["from"] == "bob"

    run(body(), timeout=40)


def test_a_relay_to_a_peer_in_its_grace_on_another_node_is_refused_with_480_and_goes_through_after_resume(cluster):
    """docs/protocol.md, "Reconnect grace", in a cluster: bob's socket on b drops without `leave`;
    alice on a sends bob a `candidate` and a `data`: each is answered with `error` 480
    `peer_reconnecting` naming its type (from b, which holds the grace), as a sender on b would get
    it, and nothing reaches bob. Bob resumes on b; the same relay from alice then reaches him."""
    a, b, _ = cluster

    async def body():
        alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
        bob = await Peer.connect(b, b.token("r1", "bob"), "bob-on-b")
        await wait_remote(cluster, [1, 1, 2])
        await alice.recv_type("peer-joined")
        bob.ws.transport.abort()
        assert (await alice.recv_type("peer-reconnecting"))["from"] == "bob"
        candidate = {"candidate": "candidate:1 1 udp 2122260223 10.0.0.2 50000 typ host", "sdpMid": "0"}
        await alice.send({"type": "candidate", "to": "bob", "payload": candidate})
        await alice.send({"type": "data", "to": "bob", "payload": {"n": 1}})
        for refused in ("candidate", "data"):
            error = await alice.recv_type("error")
            assert error["error"]["code"] == 480, error
            assert "is reconnecting" in error["error"]["message"], error
            assert error["payload"]["type"] == refused, error
        assert b.metrics()["calling_cluster_relays_refused_total"] == 2

        again = await Peer.connect(b, b.token("r1", "bob"), "bob-again")
        assert ids(again.welcome) == ["alice"]
        assert (await alice.recv_type("peer-resumed"))["from"] == "bob"
        await alice.send({"type": "data", "to": "bob", "payload": {"n": 2}})
        relayed = await again.recv_type("data")
        assert relayed["from"] == "alice" and relayed["payload"] == {"n": 2}, relayed
        await alice.assert_silent(0.3)

    run(body(), timeout=20)


def test_after_a_partition_heals_a_peer_that_joined_again_elsewhere_keeps_one_seat_the_later_one(start_server, redis):
    """docs/operations.md, "What each failure does": node d is cut off from Redis (its own proxy)
    with d1 seated; d1 joins again through a while d still holds the old connection. When the
    partition heals, the later join (on a) wins on every node: the old connection gets 4400
    `replaced`, its close is no leave, and every node, d included, goes on seating d1 on a."""
    proxy = RedisProxy(redis.port)
    try:
        a = start_node(start_server, redis, "node-a")
        b = start_node(start_server, redis, "node-b")
        d = start_server(env={"CALLING_JWT_SECRET": SECRET}, cluster_redis_url=proxy.url, node_id="node-d",
                         cluster_heartbeat_ms=HEARTBEAT_MS, cluster_node_ttl_ms=NODE_TTL_MS)
        nodes = [a, b, d]
        for node in nodes:
            wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")

        async def body():
            bob = await Peer.connect(b, b.token("r1", "bob"), "bob")
            old = await Peer.connect(d, d.token("r1", "d1"), "d1-on-d")
            await wait_remote(nodes, [2, 1, 1])
            assert (await bob.recv_type("peer-joined"))["from"] == "d1"
            proxy.cut()
            # a and b lose d (its heartbeat lapses); d keeps its own peer.
            assert (await bob.recv_type("peer-left", timeout=NODE_TTL_MS / 1000 + 3))["from"] == "d1"
            await wait_remote([a, b], [1, 0])
            new = await Peer.connect(a, a.token("r1", "d1"), "d1-on-a")
            assert ids(new.welcome) == ["bob"]
            assert (await bob.recv_type("peer-joined"))["from"] == "d1"

            proxy.heal()
            code, reason = await old.wait_closed(NODE_TTL_MS / 1000 + 8)
            assert (code, reason) == (4400, "replaced")
            # Every node seats d1 once, on a: d as a remote seat; nobody heard a leave.
            await wait_remote(nodes, [1, 1, 2], timeout=8)
            await bob.assert_silent(1.0)
            await new.send({"type": "data", "to": "bob", "payload": {"n": 1}})
            assert (await bob.recv_type("data"))["from"] == "d1"
            eve = await Peer.connect(d, d.token("r1", "eve"), "eve-on-d")
            assert sorted(ids(eve.welcome)) == ["bob", "d1"], "d still lists d1 after its old connection closed"
            await eve.send({"type": "data", "to": "d1", "payload": {"n": 2}})
            assert (await new.recv_type("data", skip=("peer-joined",)))["from"] == "eve"

        run(body(), timeout=60)
    finally:
        proxy.close()


def race_token(template: dict, room: str, peer: str) -> str:
    payload = dict(template, sub=peer, room_id=room)
    return sign_jwt(payload, SECRET.encode())


async def race_join(server, token: str, label: str):
    """One joiner of a race: ("seated", peer) with its welcome, ("409", None) when refused before
    the upgrade, or ("closed", code, reason) when the socket closed before any frame."""
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    try:
        ws = await ws_connect(server.ws_url(token), proxy=None, compression=None, open_timeout=5, close_timeout=2,
                              ping_interval=None)
    except InvalidStatus as error:
        return ("409" if error.response.status_code == 409 else f"status {error.response.status_code}", None)
    peer = Peer(ws, label)
    try:
        peer.welcome = await peer.recv(timeout=5)
    except ConnectionClosed:
        return ("closed", ws.close_code, ws.close_reason)
    assert peer.welcome["type"] == "welcome", peer.welcome
    return ("seated", peer)


def test_the_last_seat_of_a_room_is_given_once_across_three_nodes_even_for_joins_at_the_same_moment(start_server, redis):
    """docs/operations.md, "What is shared": room limits are exact across nodes. Each trial, three
    joiners of a fresh room capped at 2, one per node, are released at the same moment."""
    nodes = [start_node(start_server, redis, name, max_peers_per_room=2) for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    template = jwt_payload(nodes[0].token("x", "x"))
    trials = 50
    outcomes = {"409": 0, "closed": 0}

    async def body():
        for trial in range(trials):
            room = f"race-{trial}"
            peers = [f"p{index}" for index in range(3)]
            tokens = [race_token(template, room, peer) for peer in peers]
            results = await asyncio.gather(*(race_join(node, token, peer) for node, token, peer in zip(nodes, tokens, peers)))
            seated = [result[1] for result in results if result[0] == "seated"]
            refused = [result for result in results if result[0] != "seated"]
            assert len(seated) == 2, f"trial {trial}: {results}"
            assert len(refused) == 1, f"trial {trial}: {results}"
            kind = refused[0][0]
            if kind == "closed":
                assert refused[0][1:] == (4409, "room full"), f"trial {trial}: {refused}"
            else:
                assert kind == "409", f"trial {trial}: {refused}"
            outcomes[kind] += 1
            # The refused joiner was never announced: the two seated see each other and nobody else.
            loser = next(peer for peer, result in zip(peers, results) if result[0] != "seated")
            for peer in seated:
                assert loser not in ids(peer.welcome), f"trial {trial}: {peer.welcome}"
            for peer in seated:
                try:
                    while True:
                        frame = await peer.recv(timeout=0.15)
                        assert frame.get("from") != loser and frame.get("payload", {}).get("peer_id") != loser, frame
                except AssertionError as error:
                    if "no frame within" not in str(error):
                        raise
            for peer in seated:
                await peer.close()

        # Seats come back on leave: a fresh pair takes the last room on the other two nodes.
        room = f"race-{trials - 1}"

        async def pair():
            joined = await asyncio.gather(race_join(nodes[1], race_token(template, room, "q1"), "q1"),
                                          race_join(nodes[2], race_token(template, room, "q2"), "q2"))
            return joined

        deadline = time.monotonic() + 5
        while True:
            joined = await pair()
            if all(result[0] == "seated" for result in joined):
                break
            for result in joined:
                if result[0] == "seated":
                    await result[1].close()
            assert time.monotonic() < deadline, f"seats not given back after leave: {joined}"
            await asyncio.sleep(0.1)
        for result in joined:
            await result[1].close()

    run(body(), timeout=180)
    assert outcomes["closed"] > 0, f"no race reached the shared count: {outcomes}"
    closes = sum(node.metrics().get('calling_closes_total{reason="room full"}', 0) for node in nodes)
    assert closes == outcomes["closed"], (closes, outcomes)


# Shared REST state (`database_url`): API keys and kicked tokens live in PostgreSQL, so any node
# answers (docs/operations.md, "What is shared").

BAN_SYNC_MS = 100


@pytest.fixture
def shared_cluster(start_server, redis, postgres):
    """Three nodes on one Redis and one PostgreSQL database, reading kicked tokens every BAN_SYNC_MS."""
    url = postgres.create_database()
    nodes = [start_node(start_server, redis, name, database_url=url, database_ban_sync_ms=BAN_SYNC_MS)
             for name in ("node-a", "node-b", "node-c")]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    return nodes, url


def apikey(node, url: str, *args: str) -> subprocess.CompletedProcess:
    from support import BINARY

    return subprocess.run([str(BINARY), "apikey", *args, "--data-dir", str(node.data_dir), "--database-url", url],
                          capture_output=True, text=True, timeout=10, env=node.env)


def request(node, method: str, path: str, key: str, body: dict | None = None):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=5)
    headers = {"X-API-Key": key}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, json.loads(raw) if raw else None


def test_with_database_url_an_api_key_created_through_one_node_works_on_every_node_and_its_revocation_too(shared_cluster):
    nodes, url = shared_cluster
    a, b, c = nodes
    created = apikey(a, url, "create", "--name", "ops", "--scope", "calls admin")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    key_id = created.stderr.split("created API key ")[1].split(" ")[0]
    for node in nodes:
        status, body = request(node, "GET", "/v1/admin/rooms", key)
        assert status == 200, (node.port, body)
    listed = apikey(c, url, "list")
    assert listed.returncode == 0 and key_id in listed.stdout, listed
    # Each node's own SQLite file has no key: the one in PostgreSQL is the only one.
    from support import BINARY
    local = subprocess.run([str(BINARY), "apikey", "list", "--data-dir", str(b.data_dir)],
                           capture_output=True, text=True, timeout=10, env=b.env)
    assert local.returncode == 0 and key_id not in local.stdout, local

    revoked = apikey(b, url, "revoke", "--id", key_id)
    assert revoked.returncode == 0, revoked.stderr
    for node in nodes:
        status, body = request(node, "GET", "/v1/admin/rooms", key)
        assert (status, body["code"]) == (401, "api_key_invalid"), (node.port, body)


def test_with_database_url_a_kick_through_one_node_refuses_the_token_on_every_node(shared_cluster, start_server, redis):
    from support import raw_upgrade

    nodes, url = shared_cluster
    a, b, c = nodes
    created = apikey(a, url, "create", "--name", "ops", "--scope", "admin")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    bob_token = a.token("r1", "bob")
    other_token = a.token("r1", "bob")  # another jti, same peer

    carol_token = c.token("r1", "carol")

    async def body():
        alice = await Peer.connect(b, b.token("r1", "alice"), "alice")
        bob = await Peer.connect(a, bob_token, "bob")
        carol = await Peer.connect(c, carol_token, "carol")
        await wait_remote(nodes, [2, 2, 2])
        # bob is on a, carol on c (a's kick of her is carried out by c): both through a.
        for peer, victim in ((bob, "bob"), (carol, "carol")):
            status, answer = await asyncio.get_running_loop().run_in_executor(
                None, lambda: request(a, "POST", f"/v1/admin/rooms/r1/peers/{victim}/kick", key))
            assert status == 200, answer
            assert (await peer.wait_closed(5))[0] == 4403
        await alice.close()

    run(body(), timeout=20)
    # Each node reads the bans within database_ban_sync_ms; the tokens are refused there before their upgrade.
    for node in (a, b, c):
        for token in (bob_token, carol_token):
            def refused(node=node, token=token):
                status, _, raw = raw_upgrade(node.port, f"/v1/ws?token={token}")
                return status == 403 and json.loads(raw)["code"] == "kicked"
            wait_for(refused, timeout=3, what=f"a kicked token refused on {node.port}")
    status, _, raw = raw_upgrade(c.port, f"/v1/ws?token={other_token}")
    assert status == 101, raw

    # A node started after the kick refuses the token from its start.
    late = start_node(start_server, redis, "node-d", database_url=url)
    status, _, raw = raw_upgrade(late.port, f"/v1/ws?token={bob_token}")
    assert status == 403 and json.loads(raw)["code"] == "kicked", raw


def test_with_database_url_a_call_created_through_one_node_is_read_joined_and_ended_through_the_others(shared_cluster):
    nodes, url = shared_cluster
    a, b, c = nodes
    created = apikey(a, url, "create", "--name", "backend", "--scope", "calls")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    status, call = request(a, "POST", "/v1/calls", key, {"room_id": "consult-1", "peer_id": "patient", "metadata": {"order": 7}})
    assert status == 201, call
    call_id = call["call_id"]
    for node in (b, c):
        status, read = request(node, "GET", f"/v1/calls/{call_id}", key)
        assert status == 200, read
        assert (read["room_id"], read["state"], read["metadata"]) == ("consult-1", "registered", {"order": 7})
    # A token for the call through c (the call lookup reads the shared store).
    status, doctor = request(c, "POST", "/v1/tokens", key, {"call_id": call_id, "peer_id": "doctor", "role": "agent"})
    assert status == 201, doctor

    async def body():
        patient = await Peer.connect(b, call["access_token"], "patient-on-b")

        def ongoing():
            status, read = request(c, "GET", f"/v1/calls/{call_id}", key)
            return status == 200 and read["state"] == "ongoing" and read

        read = await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(ongoing, what="call ongoing on c"))
        assert read["joined_ms"] is not None
        await patient.send({"type": "stats", "payload": {"rtt_ms": 42}})
        doctor_peer = await Peer.connect(c, doctor["token"], "doctor-on-c")
        await patient.close()
        await doctor_peer.close()

    run(body(), timeout=20)

    def ended():
        status, read = request(a, "GET", f"/v1/calls/{call_id}", key)
        return status == 200 and read["state"] == "ended" and read

    read = wait_for(ended, what="call ended after its last peer left")
    assert read["end_reason"] == "last_peer_left", read
    # b, the patient's node, writes its stats samples with its next tick; c reads them.
    def stats():
        status, stats = request(c, "GET", f"/v1/calls/{call_id}/stats", key)
        return status == 200 and stats["aggregate"]["samples"] == 1 and stats
    assert wait_for(stats, what="the sample sent through b, read through c")["peers"][0]["peer_id"] == "patient"
    # An ended call takes no new tokens, on any node.
    status, refused = request(b, "POST", "/v1/tokens", key, {"call_id": call_id, "peer_id": "late"})
    assert (status, refused["code"]) == (409, "call_ended"), refused


def test_with_database_url_a_session_post_for_a_call_created_on_one_node_is_answered_through_another(shared_cluster):
    """The session API's call lookup (`/webrtc-proxy/{call_id}/…`) reads the shared store: node b
    answers for a call only node a's SQLite would have known, with an agent seated on c."""
    import http.client

    nodes, url = shared_cluster
    a, b, c = nodes
    created = apikey(a, url, "create", "--name", "backend", "--scope", "calls")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    status, call = request(a, "POST", "/v1/calls", key, {"room_id": "consult-2", "peer_id": "patient"})
    assert status == 201, call
    status, agent_token = request(b, "POST", "/v1/tokens", key, {"call_id": call["call_id"], "peer_id": "ann", "role": "agent"})
    assert status == 201, agent_token

    def post_session():
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=10)
        conn.request("POST", f"/webrtc-proxy/{call['call_id']}/v1/webrtc/sessions", body=json.dumps({"identity": "client", "sdp": OFFER}),
                     headers={"Authorization": f"Bearer {call['access_token']}", "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, json.loads(raw)

    async def body():
        agent = await Peer.connect(c, agent_token["token"], "agent-on-c")
        await wait_remote(nodes, [1, 1, 0])
        posting = asyncio.get_running_loop().run_in_executor(None, post_session)
        offer = await agent.recv_type("offer", timeout=5, skip=("peer-joined",))
        assert offer["from"] == "patient"
        await agent.send({"type": "answer", "to": "patient", "payload": {"sdp": ANSWER, "type": "answer",
                                                                        "session_id": offer["payload"]["session_id"]}})
        status, answer = await posting
        assert status == 201, answer
        assert "a=ice-ufrag:ansU" in answer["sdp"]

    run(body(), timeout=20)


def test_chat_operations_cross_nodes_once_each_and_fold_into_the_shared_history(chat_cluster):
    """Edits, reactions, deletes and replies sent on one node reach the peers on the others once
    each, as their frames, in seq order; the catch-up counts their seqs (no gap fill doubles them)."""
    nodes, _ = chat_cluster

    async def send(peer: ChatPeer, frame_type: str, **payload) -> dict:
        future = asyncio.get_running_loop().create_future()
        peer.acks[payload["client_id"]] = future
        await peer.peer.send({"type": frame_type, "payload": payload})
        ack = await asyncio.wait_for(future, 10)
        assert "error" not in ack, ack
        return ack

    async def body():
        alice = await ChatPeer.connect(nodes[0], "ops", "alice")
        bob = await ChatPeer.connect(nodes[1], "ops", "bob")
        carol = await ChatPeer.connect(nodes[2], "ops", "carol")
        await wait_remote(nodes, [2, 2, 2])
        m1 = (await send(alice, "chat", client_id="a1", text="hello"))["payload"]["seq"]
        m2 = (await send(bob, "chat", client_id="b1", text="reply", reply_to=m1))["payload"]["seq"]
        e1 = (await send(alice, "chat-edit", client_id="a2", target=m1, text="hello!"))["payload"]["seq"]
        r1 = (await send(carol, "chat-react", client_id="c1", target=m1, key="👍"))["payload"]["seq"]
        d1 = (await send(bob, "chat-delete", client_id="b2", target=m2))["payload"]["seq"]
        assert [m1, m2, e1, r1, d1] == [1, 2, 3, 4, 5]
        await asyncio.sleep(0.5)
        for peer, own in ((alice, {m1, e1}), (bob, {m2, d1}), (carol, {r1})):
            rows = sorted([f for f in peer.chats + peer.frames if f["type"].startswith("chat")], key=lambda f: f["payload"]["seq"])
            seqs = [f["payload"]["seq"] for f in rows]
            assert seqs == sorted({1, 2, 3, 4, 5} - own), (peer.name, seqs)
            by_seq = {f["payload"]["seq"]: f for f in rows}
            if m2 in by_seq:
                assert by_seq[m2]["payload"]["reply_to"] == m1
            if e1 in by_seq:
                assert by_seq[e1]["type"] == "chat-edit" and by_seq[e1]["payload"]["target"] == m1
            if d1 in by_seq:
                assert by_seq[d1]["type"] == "chat-delete"
        for peer in (alice, bob, carol):
            await peer.close()

    run(body(), timeout=25)
    token = nodes[2].token("ops", "reader")
    status, _, page = nodes[2].get_json("/v1/rooms/ops/messages?before_seq=100", token)
    assert status == 200, page
    assert [m["seq"] for m in page["messages"]] == [2, 1]
    assert page["messages"][0]["deleted"] is True and page["messages"][0]["reply_to"] == 1
    assert page["messages"][1]["text"] == "hello!" and page["messages"][1]["reactions"] == [{"key": "👍", "count": 1, "peers": ["carol"]}]
    metrics = parse_metrics(nodes[0].http("GET", "/metrics")[2].decode())
    assert metrics.get("calling_cluster_chat_gap_fills_total", 0) == 0
