"""A cluster behind a load balancer: three nodes on one redis-server and one PostgreSQL database
(`database_url`), and a test client (cluster_lb.LoadBalancer) that sends every request and every
WebSocket to a random node, never the same one twice in a row. What a backend and its clients do
through one address must work whichever node answers (docs/operations.md, "What is shared").

The nodes start once for the module; each test uses its own rooms. /healthz's PostgreSQL
reachability is tested at the end on a node of its own with a PostgreSQL of its own, which the
test stops and kills.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import signal

import pytest

from cluster_lb import LoadBalancer
from support import PostgresServer, Server, raw_upgrade, run
from test_cluster import ANSWER, HEARTBEAT_MS, NODE_TTL_MS, OFFER, REDIS, SECRET, Redis, apikey, health, wait_for

pytestmark = pytest.mark.skipif(not os.path.exists(REDIS), reason="redis-server is not installed (deploy/install-deps.sh --test)")

TURN_SECRET = "lb-turn-secret-0123456789abcdef"
BAN_SYNC_MS = 100


class Cluster:
    def __init__(self, nodes, url, key):
        self.nodes = nodes
        self.url = url
        self.key = key

    def balancer(self, seed: int) -> LoadBalancer:
        return LoadBalancer(self.nodes, seed=seed)


def start_nodes(folder, redis: Redis, url: str, names, **flags) -> list:
    nodes = []
    for name in names:
        data = folder / name
        data.mkdir()
        node = Server(data, flags=dict(cluster_redis_url=redis.url, node_id=name, cluster_heartbeat_ms=HEARTBEAT_MS,
                                       cluster_node_ttl_ms=NODE_TTL_MS, database_url=url, **flags),
                      env={"CALLING_JWT_SECRET": SECRET, "CALLING_TURN_SECRET": TURN_SECRET})
        nodes.append(node)
        node.start()
    return nodes


@pytest.fixture(scope="module")
def lb_cluster(postgres, tmp_path_factory):
    folder = tmp_path_factory.mktemp("lb")
    redis = Redis(folder / "redis").start()
    url = postgres.create_database()
    nodes: list = []
    try:
        nodes += start_nodes(folder, redis, url, ("lb-a", "lb-b", "lb-c"), database_ban_sync_ms=BAN_SYNC_MS,
                             turn_urls="turn:127.0.0.1:3478")
        for node in nodes:
            wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
        created = apikey(nodes[0], url, "create", "--name", "lb", "--scope", "calls admin")
        assert created.returncode == 0, created.stderr
        yield Cluster(nodes, url, created.stdout.strip())
    finally:
        for node in nodes:
            node.kill()
        redis.stop()


async def in_thread(function, *args):
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def seated_everywhere(cluster: Cluster, room: str, peers: list[str]) -> bool:
    """Every node lists exactly `peers` in `room` (the admin API): each has heard of every seat."""
    lb = cluster.balancer(seed=0)
    for node in cluster.nodes:
        answer = lb.request("GET", f"/v1/admin/rooms/{room}", key=cluster.key, node=node)
        if answer.status != 200 or sorted(p["peer_id"] for p in answer.json["peers"]) != sorted(peers):
            return False
    return True


def turn_password(username: str) -> str:
    """coturn's REST credential for `username` (use-auth-secret): base64(HMAC-SHA1(secret, username))."""
    return base64.b64encode(hmac.new(TURN_SECRET.encode(), username.encode(), hashlib.sha1).digest()).decode()


def test_calls_tokens_ice_history_and_a_call_between_peers_on_two_nodes(lb_cluster):
    lb = lb_cluster.balancer(seed=1)
    key = lb_cluster.key
    created = lb.request("POST", "/v1/calls", key=key, body={"room_id": "lb-call", "peer_id": "patient", "metadata": {"order": 7}})
    assert created.status == 201, created
    call = created.json
    # Read back through every other pick: a call kept by the node that created it would be 404 on the next.
    seen = set()
    for _ in range(4):
        read = lb.request("GET", f"/v1/calls/{call['call_id']}", key=key)
        assert read.status == 200 and (read.json["room_id"], read.json["state"], read.json["metadata"]) \
            == ("lb-call", "registered", {"order": 7}), read
        seen.add(read.node)
    assert len(seen | {created.node}) >= 2, lb.picks
    missing = lb.request("GET", "/v1/calls/no-such-call", key=key)
    assert (missing.status, missing.json["code"]) == (404, "call_not_found"), missing
    wrong_key = lb.request("GET", f"/v1/calls/{call['call_id']}", key="csk_not_a_key")
    assert (wrong_key.status, wrong_key.json["code"]) == (401, "api_key_invalid"), wrong_key
    doctor = lb.request("POST", "/v1/tokens", key=key, body={"call_id": call["call_id"], "peer_id": "doctor", "role": "agent"})
    assert doctor.status == 201, doctor

    # TURN credentials from any node are coturn's for one shared secret, bound to the token's peer.
    for token, peer in ((call["access_token"], "patient"), (doctor.json["token"], "doctor")):
        ice = lb.request("GET", "/v1/ice", token=token)
        assert ice.status == 200 and ice.headers["cache-control"] == "no-store", ice
        turn = ice.json["ice_servers"][0]
        assert turn["username"].endswith(f":{peer}") and turn["credential"] == turn_password(turn["username"]), (ice, turn)

    async def body():
        patient = await lb.connect(call["access_token"], "patient")
        await in_thread(wait_for, lambda: seated_everywhere(lb_cluster, "lb-call", ["patient"]), 5, "patient seated everywhere")
        doctor_peer = await lb.connect(doctor.json["token"], "doctor")
        assert patient.node is not doctor_peer.node
        assert (await patient.recv_type("peer-joined"))["from"] == "doctor"
        assert "patient" in [entry["peer_id"] for entry in doctor_peer.welcome["payload"]["peers"]]
        # A call: offer, answer and a candidate across the two nodes.
        await doctor_peer.send({"type": "offer", "to": "patient", "payload": {"type": "offer", "sdp": OFFER}})
        offer = await patient.recv_type("offer")
        assert offer["from"] == "doctor" and offer["payload"]["sdp"] == OFFER
        await patient.send({"type": "answer", "to": "doctor", "payload": {"type": "answer", "sdp": ANSWER}})
        assert (await doctor_peer.recv_type("answer"))["payload"]["sdp"] == ANSWER
        candidate = {"candidate": "candidate:1 1 udp 2122260223 192.0.2.7 50000 typ host", "sdpMid": "0", "sdpMLineIndex": 0}
        await patient.send({"type": "candidate", "to": "doctor", "payload": candidate})
        assert (await doctor_peer.recv_type("candidate"))["payload"] == candidate
        await patient.send({"type": "chat", "payload": {"text": "through the balancer", "client_id": "c1"}})
        ack = await patient.recv_type("chat-ack", skip=("chat",))
        assert "error" not in ack, ack
        chat = await doctor_peer.recv_type("chat", skip=("typing",))
        assert chat["payload"]["text"] == "through the balancer"
        await patient.send({"type": "stats", "payload": {"rtt_ms": 42}})

        def ongoing():
            read = lb.request("GET", f"/v1/calls/{call['call_id']}", key=key)
            return read.status == 200 and read.json["state"] == "ongoing" and read
        assert (await in_thread(wait_for, ongoing, 5, "call ongoing")).json["joined_ms"] is not None
        await patient.close()
        await doctor_peer.close()

    run(body(), timeout=20)
    # History: the chat is one row in the shared store, read through whichever node.
    for _ in range(3):
        page = lb.request("GET", "/v1/rooms/lb-call/messages", token=doctor.json["token"])
        assert page.status == 200 and [m["text"] for m in page.json["messages"]] == ["through the balancer"], page

    def ended():
        read = lb.request("GET", f"/v1/calls/{call['call_id']}", key=key)
        return read.status == 200 and read.json["state"] == "ended" and read
    assert wait_for(ended, what="call ended").json["end_reason"] == "last_peer_left"

    def stats():
        read = lb.request("GET", f"/v1/calls/{call['call_id']}/stats", key=key)
        return read.status == 200 and read.json["aggregate"]["samples"] == 1 and read
    assert wait_for(stats, what="the stats sample").json["peers"][0]["peer_id"] == "patient"
    late = lb.request("POST", "/v1/tokens", key=key, body={"call_id": call["call_id"], "peer_id": "late"})
    assert (late.status, late.json["code"]) == (409, "call_ended"), late


def test_api_keys_made_through_one_node_work_through_every_node_and_their_revocation_too(lb_cluster):
    lb = lb_cluster.balancer(seed=2)
    made = apikey(lb.pick(), lb_cluster.url, "create", "--name", "short-lived", "--scope", "calls")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    key_id = made.stderr.split("created API key ")[1].split(" ")[0]
    for _ in range(4):
        answer = lb.request("POST", "/v1/tokens", key=key, body={"room_id": "lb-keys", "peer_id": "p"})
        assert answer.status == 201, answer
        # Scopes hold on every node: this key has no `admin`.
        refused = lb.request("GET", "/v1/admin/rooms", key=key)
        assert (refused.status, refused.json["code"]) == (403, "api_key_wrong_scope"), refused
    revoked = apikey(lb.pick(), lb_cluster.url, "revoke", "--id", key_id)
    assert revoked.returncode == 0, revoked.stderr
    for node in lb_cluster.nodes:
        answer = lb.request("POST", "/v1/tokens", key=key, body={"room_id": "lb-keys", "peer_id": "p"}, node=node)
        assert (answer.status, answer.json["code"]) == (401, "api_key_invalid"), answer


def test_admin_routes_see_every_node_and_a_kick_is_refused_on_every_node(lb_cluster):
    lb = lb_cluster.balancer(seed=3)
    key = lb_cluster.key
    any_node = lb_cluster.nodes[0]
    tokens = {peer: any_node.token("lb-admin", peer) for peer in ("ann", "bob", "cid")}

    async def body():
        peers = {}
        for name, token in tokens.items():
            peers[name] = await lb.connect(token, name)
        assert len({peer.node.port for peer in peers.values()}) >= 2

        def everyone_listed():
            listing = lb.request("GET", "/v1/admin/rooms", key=key)
            assert listing.status == 200, listing
            room = next((r for r in listing.json["rooms"] if r["room_id"] == "lb-admin"), None)
            return room is not None and sorted(p["peer_id"] for p in room["peers"]) == ["ann", "bob", "cid"] and listing
        await in_thread(wait_for, everyone_listed, 5, "every peer listed")
        await in_thread(wait_for, lambda: seated_everywhere(lb_cluster, "lb-admin", ["ann", "bob", "cid"]), 5, "seated everywhere")
        shown = lb.request("GET", "/v1/admin/rooms/lb-admin", key=key)
        assert shown.status == 200 and shown.json["peer_count"] == 3, shown
        data = lb.request("POST", "/v1/admin/rooms/lb-admin/data", key=key, body={"payload": {"notice": 1}, "to": "cid"})
        assert data.status == 200 and data.json["delivered"] == 1, data
        got = await peers["cid"].recv_type("data", skip=("peer-joined",))
        assert (got["from"], got["payload"]) == ("_server", {"notice": 1})

        kicked = lb.request("POST", "/v1/admin/rooms/lb-admin/peers/bob/kick", key=key)
        assert kicked.status == 200, kicked
        assert (await peers["bob"].wait_closed(5))[0] == 4403
        # Ended: every seat closes with 4404, wherever it is.
        ended = lb.request("POST", "/v1/admin/rooms/lb-admin/end", key=key)
        assert ended.status == 200 and ended.json["peers_closed"] == 2, ended
        for name in ("ann", "cid"):
            assert (await peers[name].wait_closed(5))[0] == 4404
        # Every node hears of the leaves over the bus, the node asked first: the others within moments.
        def gone():
            answers = [lb.request("GET", "/v1/admin/rooms/lb-admin", key=key, node=node) for node in lb_cluster.nodes]
            return all(a.status == 404 and a.json["code"] == "room_not_found" for a in answers)
        await in_thread(wait_for, gone, 3, "the ended room gone on every node")

    run(body(), timeout=20)
    # The kicked token and the ended room's tokens are refused on every node, not only the one asked.
    for node in lb_cluster.nodes:
        for name, token in tokens.items():
            def refused(node=node, token=token):
                status, _, raw = raw_upgrade(node.port, f"/v1/ws?token={token}")
                return status == 403 and json.loads(raw)["code"] in ("kicked", "room_closed") and raw
            wait_for(refused, timeout=3, what=f"{name}'s token refused on {node.port}")
    fresh = any_node.token("lb-admin", "bob")
    status, _, raw = raw_upgrade(lb.pick().port, f"/v1/ws?token={fresh}")
    assert status == 101, raw


def test_an_http_session_and_a_whip_publisher_are_answered_by_an_agent_on_another_node(lb_cluster):
    lb = lb_cluster.balancer(seed=4)
    key = lb_cluster.key
    call = lb.request("POST", "/v1/calls", key=key, body={"room_id": "lb-http", "peer_id": "patient"}).json
    agent_token = lb.request("POST", "/v1/tokens", key=key, body={"call_id": call["call_id"], "peer_id": "ann", "role": "agent"})
    assert agent_token.status == 201, agent_token
    whip_agent_token = lb_cluster.nodes[0].token("lb-whip", "wes", role="agent")
    publisher = lb_cluster.nodes[0].token("lb-whip", "pub", role="client")

    async def answer_offer(agent, sender: str, transport: str):
        offer = await agent.recv_type("offer", timeout=5, skip=("peer-joined",))
        assert offer["from"] == sender and offer["payload"]["transport"] == transport, offer
        await agent.send({"type": "answer", "to": sender, "payload": {"sdp": ANSWER, "type": "answer",
                                                                     "session_id": offer["payload"]["session_id"]}})
        return offer["payload"]["session_id"]

    async def body():
        agent = await lb.connect(agent_token.json["token"], "agent")
        await in_thread(wait_for, lambda: seated_everywhere(lb_cluster, "lb-http", ["ann"]), 5, "the agent seated everywhere")
        posting = asyncio.ensure_future(in_thread(lambda: lb.request("POST", f"/webrtc-proxy/{call['call_id']}/v1/webrtc/sessions",
                                               token=call["access_token"], body={"identity": "client", "sdp": OFFER})))
        session_id = await answer_offer(agent, "patient", "http")
        created = await posting
        assert created.status == 201 and "a=ice-ufrag:ansU" in created.json["sdp"], created
        assert created.node != agent.node.port and created.json["session_id"] == session_id
        location = created.headers["location"]
        # The session lives on the node that took the POST: its PATCH and DELETE go there
        # (docs/operations.md, "What is shared").
        owner = next(n for n in lb_cluster.nodes if n.port == created.node)
        candidate = {"candidate": {"candidate": "candidate:2 1 udp 1 192.0.2.9 4000 typ host", "sdpMid": "0", "sdpMLineIndex": 0}}
        patched = lb.request("PATCH", location, token=call["access_token"], body=candidate, node=owner)
        assert patched.status == 204, patched
        relayed = await agent.recv_type("candidate", timeout=5)
        assert relayed["from"] == "patient" and relayed["payload"]["candidate"] == candidate["candidate"]["candidate"]
        deleted = lb.request("DELETE", location, token=call["access_token"], node=owner)
        assert deleted.status == 204, deleted
        hangup = await agent.recv_type("data", timeout=5)
        assert hangup["payload"] == {"kind": "hangup", "session_id": session_id}, hangup
        assert (await agent.recv_type("peer-left", timeout=5))["from"] == "patient"
        await agent.close()

        wes = await lb.connect(whip_agent_token, "whip-agent")
        await in_thread(wait_for, lambda: seated_everywhere(lb_cluster, "lb-whip", ["wes"]), 5, "the WHIP agent seated everywhere")
        posting = asyncio.ensure_future(in_thread(lambda: lb.request("POST", "/whip/lb-whip", token=publisher, body=OFFER,
                                               headers={"Content-Type": "application/sdp"})))
        resource = await answer_offer(wes, "pub", "whip")
        created = await posting
        assert created.status == 201 and "a=ice-ufrag:ansU" in created.text, created
        assert created.headers["location"] == f"/whip/lb-whip/{resource}" and created.node != wes.node.port, created
        owner = next(n for n in lb_cluster.nodes if n.port == created.node)
        deleted = lb.request("DELETE", created.headers["location"], token=publisher, node=owner)
        assert deleted.status == 204, deleted
        assert (await wes.recv_type("data", timeout=5))["payload"]["kind"] == "hangup"
        await wes.close()

    run(body(), timeout=25)


def test_an_http_session_s_patch_and_delete_through_another_node_reach_it(lb_cluster):
    """The node that took the POST holds the session; another node forwards a PATCH or DELETE to it
    over its Redis channel and answers with its response (docs/operations.md, "What is shared")."""
    lb = lb_cluster.balancer(seed=5)
    key = lb_cluster.key
    call = lb.request("POST", "/v1/calls", key=key, body={"room_id": "lb-http-2", "peer_id": "patient"}).json
    agent_token = lb.request("POST", "/v1/tokens", key=key, body={"call_id": call["call_id"], "peer_id": "ann", "role": "agent"}).json

    async def body():
        agent = await lb.connect(agent_token["token"], "agent")
        await in_thread(wait_for, lambda: seated_everywhere(lb_cluster, "lb-http-2", ["ann"]), 5, "the agent seated everywhere")
        posting = asyncio.ensure_future(in_thread(lambda: lb.request("POST", f"/webrtc-proxy/{call['call_id']}/v1/webrtc/sessions",
                                               token=call["access_token"], body={"identity": "client", "sdp": OFFER})))
        offer = await agent.recv_type("offer", timeout=5, skip=("peer-joined",))
        session_id = offer["payload"]["session_id"]
        await agent.send({"type": "answer", "to": "patient", "payload": {"sdp": ANSWER, "type": "answer", "session_id": session_id}})
        created = await posting
        assert created.status == 201, created
        elsewhere = next(n for n in lb_cluster.nodes if n.port != created.node)
        location = created.headers["location"]
        candidate = {"candidate": {"candidate": "candidate:2 1 udp 1 192.0.2.9 4000 typ host", "sdpMid": "0", "sdpMLineIndex": 0}}
        patched = lb.request("PATCH", location, token=call["access_token"], body=candidate, node=elsewhere)
        assert patched.status == 204, patched
        relayed = await agent.recv_type("candidate", timeout=5)
        assert relayed["from"] == "patient" and relayed["payload"]["candidate"] == candidate["candidate"]["candidate"], relayed
        # The owner's refusals come back as they are: another peer's token is not the session's.
        other = lb.request("PATCH", location, token=agent_token["token"], body=candidate, node=elsewhere)
        assert (other.status, other.json["code"]) == (403, "session_not_yours"), other
        deleted = lb.request("DELETE", location, token=call["access_token"], node=elsewhere)
        assert deleted.status == 204, deleted
        hangup = await agent.recv_type("data", timeout=5)
        assert hangup["payload"] == {"kind": "hangup", "session_id": session_id}, hangup
        assert (await agent.recv_type("peer-left", timeout=5))["from"] == "patient"
        # It really ended: the owner itself no longer knows it.
        owner = next(n for n in lb_cluster.nodes if n.port == created.node)
        gone = lb.request("PATCH", location, token=call["access_token"], body=candidate, node=owner)
        assert (gone.status, gone.json["code"]) == (404, "session_not_found"), gone
        again = lb.request("PATCH", location, token=call["access_token"], body=candidate, node=elsewhere)
        assert (again.status, again.json["code"]) == (404, "session_not_found"), again
        await agent.close()

    run(body(), timeout=20)


# ---------------------------------------------------------------------------------------------
# /healthz: PostgreSQL's reachability next to Redis's


def postgres_processes(pg: PostgresServer) -> list[int]:
    """The postmaster and its children: each backend is a process group of its own (PostgreSQL
    calls setsid in every child), so a signal to the postmaster's group does not reach them."""
    pids = [pg.proc.pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pg.proc.pid:
                pids.append(int(entry))
    return pids


def signal_postgres(pg: PostgresServer, sig: int) -> None:
    for pid in postgres_processes(pg):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.fixture
def private_postgres():
    """A PostgreSQL of the test's own: it is stopped and killed."""
    pg = PostgresServer().start()
    try:
        yield pg
    finally:
        if pg.proc is not None:
            signal_postgres(pg, signal.SIGCONT)
        pg.stop()


def test_healthz_reports_postgres_down_with_its_error_when_stopped_or_killed_and_up_again(start_server, tmp_path, private_postgres):
    from test_operators import check, healthz_schema

    pg = private_postgres
    redis = Redis(tmp_path / "redis").start()
    try:
        url = pg.create_database()
        node = start_server(env={"CALLING_JWT_SECRET": SECRET}, cluster_redis_url=redis.url, node_id="health-a",
                            database_url=url, database_ban_sync_ms=100, database_reconnect_ms=100, database_stall_ms=600)
        # A node alone (no Redis) on the same database: its status says degraded too.
        alone = start_server(env={"CALLING_JWT_SECRET": SECRET}, database_url=url, database_ban_sync_ms=100,
                             database_reconnect_ms=100, database_stall_ms=600)
        schema = healthz_schema()

        def state(expect: str):
            def probe():
                answer = health(node)
                return answer["cluster"]["postgres"] == expect and answer
            answer = wait_for(probe, timeout=8, what=f"postgres {expect}")
            assert check(answer, schema, "healthz") == [], answer
            return answer

        up = state("up")
        assert up["status"] == "ok" and up["cluster"]["redis"] == "up" and up["cluster"]["error"] is None, up

        # Stopped (as behind a partition): the connection stays open and nothing answers.
        signal_postgres(pg, signal.SIGSTOP)
        stopped = state("down")
        assert stopped["status"] == "degraded" and stopped["cluster"]["redis"] == "up", stopped
        assert stopped["cluster"]["error"].startswith("PostgreSQL has not answered for "), stopped
        signal_postgres(pg, signal.SIGCONT)
        back = state("up")
        assert back["status"] == "ok" and back["cluster"]["error"] is None, back

        # Killed: the connection is gone and reconnects are refused; libpq's words are in `error`.
        pg.kill9()
        killed = state("down")
        assert killed["status"] == "degraded" and killed["cluster"]["error"].startswith("PostgreSQL: "), killed
        assert "Connection refused" in killed["cluster"]["error"] or "connect" in killed["cluster"]["error"], killed
        assert wait_for(lambda: health(alone) == {"status": "degraded"}, timeout=5, what="the node alone degraded")
        pg.restart()
        again = state("up")
        assert again["status"] == "ok" and again["cluster"]["error"] is None, again
        assert wait_for(lambda: health(alone) == {"status": "ok"}, timeout=5, what="the node alone ok again")
    finally:
        redis.stop()
