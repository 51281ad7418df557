"""Webhooks of a cluster with `database_url`: three real calling-server processes on one real
redis-server and one PostgreSQL database, counted at a real HTTP receiver (docs/operations.md,
"Webhooks in a cluster"). The outbox is shared: each event goes out once cluster-wide, in order per
room, even when the node that wrote it is killed before delivering it; a room's call starts and
ends once however many nodes its peers are on; a killed node's peers get their `peer_left` once."""

from __future__ import annotations

import asyncio
import json
import time

from support import Peer, run
from test_cluster import HEARTBEAT_MS, NODE_TTL_MS, SECRET, health, redis, wait_for  # noqa: F401 (redis: fixture)
from test_cluster import pytestmark  # noqa: F401 (skipped, as test_cluster.py, without redis-server)
from test_webhooks import ENV as WEBHOOK_ENV, Receiver, once_each_in_order, summary

LEASE_MS = 3000
CALL_END_SETTLE_MS = 300


def start_nodes(start_server, redis, url: str, receiver: Receiver, names=("node-a", "node-b", "node-c"), **flags):
    nodes = [start_server(env={"CALLING_JWT_SECRET": SECRET, **WEBHOOK_ENV}, cluster_redis_url=redis.url, node_id=name,
                          cluster_heartbeat_ms=HEARTBEAT_MS, cluster_node_ttl_ms=NODE_TTL_MS, database_url=url,
                          webhook_urls=receiver.url, webhook_poll_ms=100, webhook_lease_ms=LEASE_MS, webhook_timeout_ms=1000,
                          webhook_retry_base_ms=100, webhook_retry_max_ms=300, webhook_max_attempts=1000,
                          webhook_call_end_settle_ms=CALL_END_SETTLE_MS, **flags)
             for name in names]
    for node in nodes:
        wait_for(lambda: health(node)["cluster"]["synced"], what=f"{node.port} synced")
    return nodes


def in_room_order(events: list[dict], room: str) -> list[tuple]:
    return [summary(e) for e in events if e["data"].get("room_id") == room]


def assert_lifecycle(events: list[tuple], room: str, peers: list[str]):
    """One call_started first, one call_ended last, each peer joined once before it left once."""
    assert events[0] == ("call_started", room, None), events
    assert events[-1] == ("call_ended", room, None), events
    assert sum(1 for e in events if e[0] == "call_started") == 1, events
    assert sum(1 for e in events if e[0] == "call_ended") == 1, events
    for peer in peers:
        joined = [i for i, e in enumerate(events) if e == ("peer_joined", room, peer)]
        left = [i for i, e in enumerate(events) if e == ("peer_left", room, peer)]
        assert len(joined) == 1 and len(left) == 1 and joined[0] < left[0], (peer, events)


def test_one_room_on_three_nodes_starts_and_ends_once(start_server, redis, postgres):
    receiver = Receiver()
    try:
        url = postgres.create_database()
        a, b, c = start_nodes(start_server, redis, url, receiver)

        async def body():
            alice = await Peer.connect(a, a.token("r1", "alice"), "alice")
            bob = await Peer.connect(b, b.token("r1", "bob"), "bob")
            carol = await Peer.connect(c, c.token("r1", "carol"), "carol")
            for peer in (alice, bob):
                await peer.recv_type("peer-joined")
            await alice.ws.close()
            await bob.ws.close()
            await carol.ws.close()

        run(body(), timeout=20)
        receiver.wait_for(lambda r: any(json.loads(x["body"])["type"] == "call_ended" for x in r.accepted()), 10, "call_ended")
        time.sleep(1.0)  # anything sent twice would arrive by now
        events = once_each_in_order(receiver)
        assert len(events) == 8, [summary(e) for e in events]
        assert_lifecycle(in_room_order(events, "r1"), "r1", ["alice", "bob", "carol"])
        ended = next(e for e in events if e["type"] == "call_ended")
        assert ended["data"]["reason"] == "last_peer_left"
        assert postgres.psql(url, "SELECT count(*) FROM webhook_outbox") == "0"
        assert postgres.psql(url, "SELECT count(*) FROM webhook_seats") == "0"
    finally:
        receiver.close()


def test_a_killed_node_s_undelivered_events_go_out_once_in_order_from_another_node(start_server, redis, postgres):
    receiver = Receiver()
    down = [True]
    receiver.plan = lambda record, attempt: (503, 0.0) if down[0] else (200, 0.0)
    try:
        url = postgres.create_database()
        # a alone first: it writes and claims the events (any node may claim a head nobody holds);
        # b and c start once a holds them.
        (a,) = start_nodes(start_server, redis, url, receiver, names=("node-a",))

        async def body():
            alice = await Peer.connect(a, a.token("k1", "alice"), "alice")
            bob = await Peer.connect(a, a.token("k1", "bob"), "bob")
            await alice.recv_type("peer-joined")
            await bob.ws.close()
            await alice.recv_type("peer-left")

        run(body(), timeout=20)
        # call_started, peer_joined ×2, peer_left(bob): written, held by a, refused by the receiver.
        wait_for(lambda: postgres.psql(url, "SELECT count(*) FROM webhook_outbox") == "4", what="four queued")
        receiver.wait_for(lambda r: len(r.all()) >= 2, 5, "a's failed attempts")
        b, c = start_nodes(start_server, redis, url, receiver, names=("node-b", "node-c"))
        assert postgres.psql(url, "SELECT DISTINCT claimed_by FROM webhook_outbox WHERE claimed_by IS NOT NULL") == "node-a"
        a.kill()  # SIGKILL: its claims run out after webhook_lease_ms; alice's seat is a dead node's
        killed = time.monotonic()
        down[0] = False
        receiver.wait_for(lambda r: any(json.loads(x["body"])["type"] == "call_ended" for x in r.accepted()), 15, "call_ended")
        took = time.monotonic() - killed
        time.sleep(1.0)
        events = once_each_in_order(receiver)
        assert [summary(e) for e in events] == [("call_started", "k1", None), ("peer_joined", "k1", "alice"),
                                                ("peer_joined", "k1", "bob"), ("peer_left", "k1", "bob"),
                                                ("peer_left", "k1", "alice"), ("call_ended", "k1", None)]
        assert events[-1]["data"]["reason"] == "node_lost"
        assert b.metrics()["calling_webhook_deliveries_total"] + c.metrics()["calling_webhook_deliveries_total"] == 6
        # a renewed its claims every third of the lease while alive, so they ran out between two
        # thirds of a lease and a whole one after the kill: a takeover sooner broke a live lease.
        assert took >= LEASE_MS / 1000 * 2 / 3 - 0.3, f"a's claims were taken over after {took:.1f}s, before their lease ran out"
        assert postgres.psql(url, "SELECT count(*) FROM webhook_outbox") == "0"
    finally:
        receiver.close()


def test_kill_9_of_a_node_sends_its_peers_peer_left_once_and_the_room_ends_with_its_last_seat(start_server, redis, postgres):
    receiver = Receiver()
    try:
        url = postgres.create_database()
        a, b, c = start_nodes(start_server, redis, url, receiver)

        async def body():
            alice = await Peer.connect(a, a.token("d1", "alice"), "alice")
            bob = await Peer.connect(b, b.token("d1", "bob"), "bob")
            carol = await Peer.connect(b, b.token("d1", "carol"), "carol")
            zed = await Peer.connect(b, b.token("d2", "zed"), "zed")
            for _ in range(2):
                await alice.recv_type("peer-joined")
            receiver.wait_for(lambda r: len(r.accepted()) == 6, 10, "six events before the kill")
            b.kill()  # SIGKILL: bob, carol and zed are a dead node's
            killed = time.monotonic()
            receiver.wait_for(lambda r: len(r.accepted()) == 6 + 4, 10, "peer_left of bob, carol and zed and d2's call_ended")
            assert (await alice.recv_type("peer-left"))["from"] in ("bob", "carol")
            await asyncio.sleep(1.0)  # anything sent twice would arrive by now
            assert len(receiver.accepted()) == 10
            await alice.ws.close()
            receiver.wait_for(lambda r: len(r.accepted()) == 12, 10, "alice's peer_left and d1's call_ended")
            return time.monotonic() - killed

        run(body(), timeout=25)
        events = once_each_in_order(receiver)
        d1 = in_room_order(events, "d1")
        assert_lifecycle(d1, "d1", ["alice", "bob", "carol"])
        assert d1[-2:] == [("peer_left", "d1", "alice"), ("call_ended", "d1", None)], d1
        d2 = in_room_order(events, "d2")
        assert_lifecycle(d2, "d2", ["zed"])
        ends = {e["data"]["room_id"]: e["data"]["reason"] for e in events if e["type"] == "call_ended"}
        assert ends == {"d1": "last_peer_left", "d2": "node_lost"}
        assert postgres.psql(url, "SELECT count(*) FROM webhook_seats") == "0"
    finally:
        receiver.close()
