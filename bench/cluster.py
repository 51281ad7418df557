#!/usr/bin/env python3
"""Cluster benchmark: relay round trip between two peers on the same node against two peers on
different nodes of a cluster, and the throughput of a relay pair across nodes.

    python bench/cluster.py [--rounds 2000] [--seconds 3] [--binary .build/release/calling-server]

Starts one redis-server (a free loopback port, a temp folder, no persistence) and two
calling-server nodes in cluster mode on 127.0.0.1. Three peers join one room: `a1` and `a2` on
node A, `b1` on node B. Round trip: `a1` sends a `data` frame to the echoing peer, which sends it
back; sequential, one in flight. Throughput: `a1` sends `candidate` frames to `a2`, then to `b1`,
with 32 in flight for `--seconds` each. Then `--peers` idle peers join rooms of 4, alternating
between the two nodes, so every room spans both: time until all are welcomed and until each node
seats the other's half, and the RSS of each node. Every frame is checked (a counter in the payload).

    python bench/cluster.py --chat 1000 [--senders 4] [--binary …]

measures chat across nodes instead: a throwaway PostgreSQL (tests/integration/support.py's
PostgresServer), one redis-server and three nodes sharing both (`database_url`). Latency: `a1`
on node A sends `--chat` chats one at a time to a room with `a2` (node A), `b1` (node B) and
`c1` (node C): the time to its `chat-ack` (the commit) and until each receiver has the `chat`.
Throughput: `--senders` senders on each node send `--chat` chats each, one in flight per sender;
every receiver must get every other sender's chat exactly once with seqs 1..N. The client is Python
(`websockets`), which costs more than the server: the figures compare same-node with cross-node,
they are not the server's limits (bench/README.md has those). Prints a Markdown table for
docs/benchmarks.md. Everything started is killed at the end.

    python bench/cluster.py --webhooks 200 [--binary …]

measures webhooks of a cluster with a shared PostgreSQL instead (docs/operations.md, "Webhooks in
a cluster"): three nodes, one redis-server, one throwaway PostgreSQL and a loopback HTTP receiver.
Delivery latency: `--webhooks` rooms, each with one peer joining on one node and one on the next,
then both leaving (6 events per room, rooms one after another): from each event's `timestamp`
(the server's clock when it happened) to its arrival at the receiver (the same machine's clock),
every event counted once by `webhook-id`. Then node C is killed (SIGKILL) with 20 peers of its own
in rooms shared with node A: the time from the kill to each of their `peer_left` arrivals, with
the cluster's default heartbeat (1 s) and node TTL (3 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import support  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

SECRET = "cluster-bench-secret-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def join(server, peer: str):
    token = support.sign_jwt(support.claims(room="bench", sub=peer, ttl=3600), SECRET.encode())
    ws = await connect(f"ws://127.0.0.1:{server.port}/v1/ws?token={token}", proxy=None, compression=None, ping_interval=None,
                       max_size=1 << 22)
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome", welcome
    return ws


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def join_room(server, room: str, peer: str):
    token = support.sign_jwt(support.claims(room=room, sub=peer, ttl=3600), SECRET.encode())
    ws = await connect(f"ws://127.0.0.1:{server.port}/v1/ws?token={token}", proxy=None, compression=None, ping_interval=None,
                       open_timeout=30)
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome", welcome
    return ws


async def echo(ws, stop: asyncio.Event):
    """Sends every `data` frame back to its sender."""
    while not stop.is_set():
        try:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 0.2))
        except asyncio.TimeoutError:
            continue
        if frame["type"] == "data":
            await ws.send(json.dumps({"type": "data", "to": frame["from"], "payload": frame["payload"]}))


async def drain_until(ws, frame_type: str, count: int = 1):
    seen = 0
    while seen < count:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 5))
        if frame["type"] == frame_type:
            seen += 1


async def round_trips(sender, target: str, rounds: int) -> list[float]:
    times = []
    for i in range(rounds):
        started = time.perf_counter()
        await sender.send(json.dumps({"type": "data", "to": target, "payload": {"n": i}}))
        while True:
            frame = json.loads(await asyncio.wait_for(sender.recv(), 5))
            if frame["type"] == "data":
                assert frame["from"] == target and frame["payload"] == {"n": i}, frame
                break
        times.append((time.perf_counter() - started) * 1e6)
    return times


async def throughput(sender, receiver, target: str, seconds: float, window: int = 32) -> float:
    sent = 0
    received = 0
    deadline = time.monotonic() + seconds
    in_flight = asyncio.Semaphore(window)

    async def produce():
        nonlocal sent
        while time.monotonic() < deadline:
            await in_flight.acquire()
            await sender.send(json.dumps({"type": "candidate", "to": target,
                                          "payload": {"candidate": f"candidate:{sent:010d} 1 udp 1 192.0.2.1 9 typ host"}}))
            sent += 1

    async def consume():
        nonlocal received
        while True:
            try:
                frame = json.loads(await asyncio.wait_for(receiver.recv(), 2))
            except asyncio.TimeoutError:
                return
            if frame["type"] == "candidate":
                assert frame["payload"]["candidate"].startswith(f"candidate:{received:010d}"), frame
                received += 1
                in_flight.release()
                if time.monotonic() >= deadline and received == sent:
                    return

    started = time.monotonic()
    await asyncio.gather(produce(), consume())
    assert received == sent, (received, sent)
    return received / (time.monotonic() - started)


async def join_chat(server, room: str, peer: str):
    token = support.sign_jwt(support.claims(room=room, sub=peer, ttl=3600), SECRET.encode())
    ws = await connect(f"ws://127.0.0.1:{server.port}/v1/ws?token={token}", proxy=None, compression=None, ping_interval=None,
                       max_size=1 << 22, open_timeout=30)
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome", welcome
    return ws


async def chat_latency(nodes, count: int) -> dict[str, list[float]]:
    """`a1` sends `count` chats one at a time; per chat the µs until its ack and until each receiver has it."""
    a, b, c = nodes
    a1 = await join_chat(a, "lat", "a1")
    receivers = {"a2 (same node)": await join_chat(a, "lat", "a2"), "b1 (node B)": await join_chat(b, "lat", "b1"),
                 "c1 (node C)": await join_chat(c, "lat", "c1")}
    await asyncio.sleep(1.0)  # every node seats the others
    for ws in receivers.values():  # the peer-joined frames so far
        while True:
            try:
                await asyncio.wait_for(ws.recv(), 0.2)
            except asyncio.TimeoutError:
                break
    times: dict[str, list[float]] = {"chat-ack (commit)": [], **{name: [] for name in receivers}}

    async def receive(name, ws, client_id, started):
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if frame["type"] == "chat":
                assert frame["payload"]["client_id"] == client_id, frame
                times[name].append((time.perf_counter() - started) * 1e6)
                return

    async def ack(client_id, started):
        while True:
            frame = json.loads(await asyncio.wait_for(a1.recv(), 10))
            if frame["type"] == "chat-ack":
                assert frame["payload"]["client_id"] == client_id and "error" not in frame, frame
                times["chat-ack (commit)"].append((time.perf_counter() - started) * 1e6)
                return

    for i in range(count):
        client_id = f"m{i}"
        started = time.perf_counter()
        await a1.send(json.dumps({"type": "chat", "payload": {"client_id": client_id, "text": f"message {i}"}}))
        await asyncio.gather(ack(client_id, started), *(receive(n, ws, client_id, started) for n, ws in receivers.items()))
    for ws in (a1, *receivers.values()):
        await ws.close()
    return times


async def chat_throughput(nodes, senders: int, count: int) -> tuple[float, int]:
    """`senders` senders per node, `count` chats each, one in flight per sender; returns chats/s and N."""
    peers = []
    for n, node in enumerate(nodes):
        for i in range(senders):
            peers.append((f"n{n}s{i}", await join_chat(node, "tput", f"n{n}s{i}")))
    await asyncio.sleep(1.0)
    total = len(peers) * count
    received: dict[str, list[int]] = {name: [] for name, _ in peers}

    async def run(name, ws):
        pending = None
        sent = 0
        expected = total - count
        while sent < count or pending is not None or len(received[name]) < expected:
            if pending is None and sent < count:
                pending = f"{name}-{sent}"
                await ws.send(json.dumps({"type": "chat", "payload": {"client_id": pending, "text": f"{name} {sent}"}}))
                sent += 1
            frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
            if frame["type"] == "chat":
                received[name].append(frame["payload"]["seq"])
            elif frame["type"] == "chat-ack":
                assert frame["payload"]["client_id"] == pending and "error" not in frame, frame
                pending = None

    started = time.monotonic()
    await asyncio.gather(*(run(name, ws) for name, ws in peers))
    elapsed = time.monotonic() - started
    for name, seqs in received.items():
        assert len(seqs) == len(set(seqs)) == total - count, (name, len(seqs))
        assert max(seqs) <= total
    for _, ws in peers:
        await ws.close()
    return total / elapsed, total


def chat_main(args, redis_binary: str) -> int:
    """Three nodes, one Redis, one PostgreSQL: chat latency and throughput across nodes."""
    folder = Path(tempfile.mkdtemp(prefix="calling-cluster-chat-bench-"))
    port = free_port()
    redis = subprocess.Popen([redis_binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    postgres = support.PostgresServer().start()
    nodes = []
    try:
        url = postgres.create_database()
        flags = {"cluster_redis_url": f"redis://127.0.0.1:{port}", "database_url": url, "log_level": "warning",
                 "max_frames_per_second": 1000000, "frame_burst": 1000000, "flood_close_after": 1000000}
        for name in ("node-a", "node-b", "node-c"):
            (folder / name).mkdir()
            node = support.Server(folder / name, flags={**flags, "node_id": name}, env={"CALLING_JWT_SECRET": SECRET})
            nodes.append(node.start())
        load = os.getloadavg()[0]
        latency = asyncio.run(chat_latency(nodes, args.chat))
        rate, total = asyncio.run(chat_throughput(nodes, args.senders, args.chat // 2))
        seqs = postgres.psql(url, "SELECT count(*) || ',' || max(seq) FROM chat_messages WHERE room_id = 'tput'")
        assert seqs == f"{total},{total}", seqs
        metrics = [node.metrics() for node in nodes]
        print(f"load before: {load:.2f}, after: {os.getloadavg()[0]:.2f}")
        print("| a1 (node A) sends, one at a time | p50 | p99 | chats |")
        print("| --- | --- | --- | --- |")
        for label, values in latency.items():
            print(f"| {label} | {percentile(values, 0.5):.0f} µs | {percentile(values, 0.99):.0f} µs | {len(values)} |")
        print(f"\n{args.senders} senders on each of 3 nodes, one chat in flight each: {total} chats in one room at "
              f"{rate:,.0f} chats/s (seq 1..{total} in PostgreSQL, every receiver got each other sender's chat once); "
              "gap fills " + ", ".join(str(int(m.get("calling_cluster_chat_gap_fills_total", 0))) for m in metrics)
              + ", duplicates dropped " + ", ".join(str(int(m.get("calling_cluster_chat_duplicates_dropped_total", 0))) for m in metrics))
        return 0
    finally:
        for node in nodes:
            node.kill()
        support.kill_and_reap(redis)
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


class HookReceiver:
    """Records each webhook's arrival time (monotonic wall clock in ms) and body; answers 200."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.lock = threading.Lock()
        self.events: list[tuple[float, str, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                arrived = time.time() * 1000
                with receiver.lock:
                    receiver.events.append((arrived, self.headers.get("webhook-id"), json.loads(body)))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks"

    def snapshot(self) -> list[tuple[float, str, dict]]:
        with self.lock:
            return list(self.events)


def webhooks_main(args, redis_binary: str) -> int:
    folder = Path(tempfile.mkdtemp(prefix="calling-cluster-hooks-bench-"))
    port = free_port()
    redis = subprocess.Popen([redis_binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    postgres = support.PostgresServer().start()
    receiver = HookReceiver()
    nodes = []
    try:
        url = postgres.create_database()
        flags = {"cluster_redis_url": f"redis://127.0.0.1:{port}", "database_url": url, "log_level": "warning",
                 "webhook_urls": receiver.url}
        env = {"CALLING_JWT_SECRET": SECRET, "CALLING_WEBHOOK_SECRET": "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="}
        for name in ("node-a", "node-b", "node-c"):
            (folder / name).mkdir()
            node = support.Server(folder / name, flags={**flags, "node_id": name}, env=env)
            nodes.append(node.start())
        time.sleep(1.5)  # every node registered and synced
        load = os.getloadavg()[0]

        async def rooms():
            for i in range(args.webhooks):
                first = await join_room(nodes[i % 3], f"w{i}", "p")
                second = await join_room(nodes[(i + 1) % 3], f"w{i}", "q")
                await drain_until(first, "peer-joined")
                await second.close()
                await drain_until(first, "peer-left")
                await first.close()

        asyncio.run(rooms())
        expected = 6 * args.webhooks
        deadline = time.monotonic() + 60
        while len(receiver.snapshot()) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        delivered = receiver.snapshot()
        ids = [event_id for _, event_id, _ in delivered]
        assert len(ids) == expected and len(set(ids)) == expected, (len(ids), len(set(ids)), expected)
        for i in range(args.webhooks):
            kinds = [body["type"] for _, _, body in delivered if body["data"]["room_id"] == f"w{i}"]
            assert kinds[0] == "call_started" and kinds[-1] == "call_ended" and kinds.count("call_started") == 1, kinds
        latency = [arrived - body["timestamp"] for arrived, _, body in delivered]
        load_after = os.getloadavg()[0]

        async def death():
            watchers = []
            for i in range(20):
                watchers.append(await join_room(nodes[0], f"d{i}", "watcher"))
                await join_room(nodes[2], f"d{i}", "doomed")
            await asyncio.sleep(2.0)  # the joins' events out first
            killed = time.time() * 1000
            nodes[2].kill()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                left = [arrived for arrived, _, body in receiver.snapshot()
                        if body["type"] == "peer_left" and body["data"]["peer_id"] == "doomed"]
                if len(left) >= 20:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            left = [arrived - killed for arrived, _, body in receiver.snapshot()
                    if body["type"] == "peer_left" and body["data"]["peer_id"] == "doomed"]
            for ws in watchers:
                await ws.close()
            return left

        left = asyncio.run(death())
        print(f"load before: {load:.2f}, after the rooms: {load_after:.2f}, after the kill: {os.getloadavg()[0]:.2f}")
        print("| webhooks, 3 nodes, shared PostgreSQL outbox | p50 | p99 | max | events |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| event timestamp → arrival at the receiver | {percentile(latency, 0.5):.1f} ms | {percentile(latency, 0.99):.1f} ms "
              f"| {max(latency):.1f} ms | {len(latency)} (each once; per room 1 call_started first, 1 call_ended last) |")
        if left:
            print(f"| kill -9 of node C → `peer_left` of its 20 peers | {percentile(left, 0.5):.0f} ms | {percentile(left, 0.99):.0f} ms "
                  f"| {max(left):.0f} ms | {len(left)} of 20 (each once: {len(left) == 20}) |")
        return 0
    finally:
        for node in nodes:
            node.kill()
        support.kill_and_reap(redis)
        postgres.stop()
        receiver.httpd.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chat", type=int, default=0,
                        help="measure chat across three nodes with a shared PostgreSQL instead (this many chats)")
    parser.add_argument("--senders", type=int, default=4, help="--chat: concurrent senders per node")
    parser.add_argument("--webhooks", type=int, default=0,
                        help="measure webhook delivery across three nodes with a shared PostgreSQL instead (this many rooms)")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--binary", default=str(ROOT / ".build/release/calling-server"))
    parser.add_argument("--peers", type=int, default=1000,
                        help="then this many idle peers in rooms of 4, alternating between the nodes (0 skips it)")
    args = parser.parse_args()
    redis_binary = shutil.which("redis-server")
    if not redis_binary or not Path(args.binary).exists():
        print("needs redis-server and a built calling-server (make release)", file=sys.stderr)
        return 2
    os.environ["SERVER_BIN_UNDER_TEST"] = args.binary
    support.BINARY = Path(args.binary)
    if args.chat > 0:
        return chat_main(args, redis_binary)
    if args.webhooks > 0:
        return webhooks_main(args, redis_binary)
    folder = Path(tempfile.mkdtemp(prefix="calling-cluster-bench-"))
    port = free_port()
    redis = subprocess.Popen([redis_binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    nodes = []
    try:
        time.sleep(0.3)
        flags = {"cluster_redis_url": f"redis://127.0.0.1:{port}", "log_level": "warning", "max_frames_per_second": 1000000,
                 "frame_burst": 1000000, "flood_close_after": 1000000}
        for name in ("node-a", "node-b"):
            (folder / name).mkdir()
            node = support.Server(folder / name, flags={**flags, "node_id": name}, env={"CALLING_JWT_SECRET": SECRET})
            nodes.append(node.start())
        a, b = nodes
        load = os.getloadavg()[0]

        async def body():
            stop = asyncio.Event()
            a1 = await join(a, "a1")
            await asyncio.sleep(0.3)
            a2 = await join(a, "a2")
            await asyncio.sleep(0.3)
            b1 = await join(b, "b1")
            await asyncio.sleep(0.3)
            await drain_until(a1, "peer-joined", 2)
            await drain_until(a2, "peer-joined", 1)
            echoes = [asyncio.create_task(echo(a2, stop)), asyncio.create_task(echo(b1, stop))]
            await round_trips(a1, "a2", 200)  # warm-up
            same = await round_trips(a1, "a2", args.rounds)
            await round_trips(a1, "b1", 200)
            cross = await round_trips(a1, "b1", args.rounds)
            stop.set()
            await asyncio.gather(*echoes)
            same_rate = await throughput(a1, a2, "a2", args.seconds)
            cross_rate = await throughput(a1, b1, "b1", args.seconds)
            return same, cross, same_rate, cross_rate

        same, cross, same_rate, cross_rate = asyncio.run(body())

        async def spread():
            """`args.peers` peers in rooms of 4, peer i on node i % 2: every room spans both nodes."""
            rss_before = [rss_kib(node.pid) for node in nodes]
            gate = asyncio.Semaphore(64)
            sockets = []

            async def one(i):
                async with gate:
                    sockets.append(await join_room(nodes[i % 2], f"room{i // 4}", f"p{i}"))

            started = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(args.peers)))
            joined = time.monotonic() - started
            # Every node must seat the other node's half as remote seats before the figures count.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                remote = [json.loads(node.http("GET", "/healthz")[2])["cluster"]["remote_peers"] for node in nodes]
                if remote == [args.peers // 2, args.peers - args.peers // 2]:
                    break
                await asyncio.sleep(0.1)
            settled = time.monotonic() - started
            await asyncio.sleep(1)
            rss_after = [rss_kib(node.pid) for node in nodes]
            for ws in sockets:
                await ws.close()
            return joined, settled, remote, rss_before, rss_after

        spread_result = asyncio.run(spread()) if args.peers > 0 else None
        print(f"load before: {load:.2f}, after: {os.getloadavg()[0]:.2f}")
        print("| path | round trip p50 | p99 | frames |")
        print("| --- | --- | --- | --- |")
        for label, times in (("same node (a1 → a2 → a1)", same), ("across nodes (a1 → b1 → a1, via Redis)", cross)):
            print(f"| {label} | {percentile(times, 0.5):.0f} µs | {percentile(times, 0.99):.0f} µs | {len(times)} |")
        print(f"\nrelay pair, 32 in flight (every frame checked, in order): same node {same_rate:,.0f} frames/s, "
              f"across nodes {cross_rate:,.0f} frames/s")
        if spread_result:
            joined, settled, remote, before, after = spread_result
            print(f"\n{args.peers} peers in rooms of 4 over 2 nodes: all welcomed in {joined:.2f} s, every node seated the "
                  f"other's half ({remote}) after {settled:.2f} s; RSS per node "
                  + ", ".join(f"{b / 1024:.1f} -> {a / 1024:.1f} MiB" for b, a in zip(before, after))
                  + f" ({(sum(after) - sum(before)) / args.peers:.1f} KiB per peer, both nodes together)")
        return 0
    finally:
        for node in nodes:
            node.kill()
        support.kill_and_reap(redis)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
