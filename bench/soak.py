#!/usr/bin/env python3
"""Soak run: many peers joined for a bounded time, with chat and relay traffic and peers leaving
and rejoining. Checks what a long run must not do: RSS keeps growing, the WAL grows without bound,
an error is logged, or an acked chat is missing from the store.

    python bench/soak.py [--peers 2000] [--minutes 10] [--binary .build/release/calling-server]

Talks to a server it starts on 127.0.0.1 (port 0) only. Prints a Markdown summary for
docs/benchmarks.md and exits 1 if a check fails. `make soak` runs it (not part of `make test`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import support  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

ROOM_SIZE = 10


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Soak:
    def __init__(self, server, peers: int, seconds: float):
        self.server, self.peers, self.seconds = server, peers, seconds
        self.secret = server.secret()
        self.acked: dict[str, set] = {}  # room -> client ids acked
        self.sent = self.relayed = self.rejoins = self.failures = 0

    def url(self, i: int) -> str:
        token = support.sign_jwt(support.claims(room=f"room{i // ROOM_SIZE}", sub=f"p{i}", ttl=3600), self.secret)
        return f"ws://127.0.0.1:{self.server.port}/v1/ws?token={token}"

    async def peer(self, i: int, deadline: float, gate: asyncio.Semaphore) -> None:
        room = f"room{i // ROOM_SIZE}"
        rng = random.Random(i)
        while time.monotonic() < deadline:
            try:
                async with gate:
                    ws = await connect(self.url(i), open_timeout=30, ping_interval=None, compression=None,
                                       max_size=1 << 20)
                    await ws.recv()  # welcome
                session_end = min(deadline, time.monotonic() + rng.uniform(20, 90))
                n = 0
                while time.monotonic() < session_end:
                    await asyncio.sleep(rng.uniform(1.0, 4.0))
                    n += 1
                    if rng.random() < 0.5:
                        client_id = f"p{i}-{n}-{rng.getrandbits(32)}"
                        await ws.send(json.dumps({"type": "chat", "payload": {"client_id": client_id, "text": "soak"}}))
                        self.sent += 1
                    else:
                        await ws.send(json.dumps({"type": "data", "payload": {"n": n}}))
                        self.relayed += 1
                    # Drain what arrived, noting acks.
                    while True:
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 0.01)
                        except asyncio.TimeoutError:
                            break
                        frame = json.loads(raw)
                        if frame.get("type") == "chat-ack" and not frame.get("error"):
                            self.acked.setdefault(room, set()).add(frame["payload"]["client_id"])
                await ws.close()
                self.rejoins += 1
            except Exception:
                self.failures += 1
                await asyncio.sleep(1)

    async def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        gate = asyncio.Semaphore(200)
        await asyncio.gather(*(self.peer(i, deadline, gate) for i in range(self.peers)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peers", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--binary", default=str(ROOT / ".build" / "release" / "calling-server"))
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    support.BINARY = Path(args.binary)
    server = support.Server(support.fresh_dir("calling-soak-")).start()
    soak = Soak(server, args.peers, args.minutes * 60)
    samples: list[tuple[float, float, int]] = []

    async def sample():
        wal = server.data_dir / "calling.sqlite-wal"
        while True:
            await asyncio.sleep(10)
            samples.append((time.monotonic(), rss_mib(server.pid), wal.stat().st_size if wal.exists() else 0))

    async def whole():
        sampler = asyncio.create_task(sample())
        await soak.run()
        sampler.cancel()

    started = time.monotonic()
    asyncio.run(whole())
    elapsed = time.monotonic() - started
    errors = [line for line in server.stderr_path.read_text(errors="replace").splitlines() if "level=error" in line or "level=critical" in line]
    alive = server.alive()
    server.kill()
    db = sqlite3.connect(server.data_dir / "calling.sqlite")
    stored = {(room, cid) for room, cid in db.execute("SELECT room_id, client_id FROM chat_messages")}
    acked = {(room, cid) for room, ids in soak.acked.items() for cid in ids}
    missing = acked - stored
    third = max(1, len(samples) // 3)
    rss_first = max((s[1] for s in samples[:third]), default=0)
    rss_last = max((s[1] for s in samples[-third:]), default=0)
    wal_max = max((s[2] for s in samples), default=0)
    wal_first = max((s[2] for s in samples[:third]), default=0)
    wal_last = max((s[2] for s in samples[-third:]), default=0)
    checks = {
        "server alive": alive,
        "no error logged": not errors,
        "every acked chat stored": not missing,
        "RSS levels off (last third ≤ first third + 10 %)": rss_last <= rss_first * 1.1 + 1,
        "WAL bounded (last third ≤ first third + 10 %, < 256 MiB)": wal_last <= wal_first * 1.1 + (1 << 20) and wal_max < 256 << 20,
    }
    print(f"| soak | {args.peers} peers, {elapsed / 60:.1f} min |\n| --- | --- |")
    print(f"| chats sent / acked | {soak.sent} / {len(acked)} |\n| relayed data frames | {soak.relayed} |")
    print(f"| sessions ended and rejoined | {soak.rejoins} |\n| client-side failures | {soak.failures} |")
    print(f"| RSS first / last third (max) | {rss_first:.0f} / {rss_last:.0f} MiB |\n| WAL first / last third (max) | {wal_first / 1048576:.1f} / {wal_last / 1048576:.1f} MiB |")
    for name, ok in checks.items():
        print(f"| {name} | {'yes' if ok else 'NO'} |")
    if errors:
        print("\n".join(errors[:10]))
    if missing:
        print(f"missing acked chats: {sorted(missing)[:10]}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
