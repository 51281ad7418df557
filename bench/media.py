#!/usr/bin/env python3
"""Media benchmark: time from offer to connected, and CPU per streaming audio peer.

    sudo python3 bench/media.py [--pairs 4] [--seconds 20] [--binary .build/release/calling-server]

Runs a real calling-server and `pairs` calls between two `calling-server peer` processes each
(440 Hz and 660 Hz tones both ways, 32 kb/s Opus), all inside a private network namespace this
script creates and deletes (libnice finds no candidates on loopback; no traffic leaves the
namespace). Calls start one after another, 0.5 s apart, so connect times are not inflated by
each other; CPU is sampled from /proc while every call streams. Prints a Markdown table for
docs/benchmarks.md. Needs root (ip netns). Bounded: peers stop by themselves (--seconds), and everything left is killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_ADDRESS = "10.232.0.1"
PEER_ADDRESS = "10.232.0.2"
PORT = 8790
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each call")
    parser.add_argument("--binary", default=str(ROOT / ".build/release/calling-server"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/media.py needs root (it creates a network namespace)", file=sys.stderr)
        return 2
    binary = Path(args.binary)
    if not binary.exists():
        print(f"{binary} is missing: build it first (make release)", file=sys.stderr)
        return 2

    namespace = f"csbench{os.getpid()}"
    data_dir = Path(tempfile.mkdtemp(prefix="calling-bench-media-"))
    processes: list[subprocess.Popen] = []
    ip("netns", "add", namespace)
    # nsenter --net, not `ip netns exec`/`ip -n`: those also make / a slave mount in a new mount
    # namespace, which fails where / is not a mount point (a chroot; docs/operations.md).
    enter = ["nsenter", f"--net=/run/netns/{namespace}", "--"]

    def in_namespace(*args: str) -> None:
        subprocess.run([*enter, *args], check=True, capture_output=True, timeout=10)

    try:
        in_namespace("ip", "link", "set", "lo", "up")
        in_namespace("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        in_namespace("ip", "addr", "add", f"{SERVER_ADDRESS}/24", "dev", "v0")
        in_namespace("ip", "addr", "add", f"{PEER_ADDRESS}/24", "dev", "v1")
        in_namespace("ip", "link", "set", "v0", "up")
        in_namespace("ip", "link", "set", "v1", "up")

        def spawn(argv: list[str], log: Path) -> subprocess.Popen:
            process = subprocess.Popen([*enter, *argv], stdout=log.open("w"),
                                       stderr=subprocess.STDOUT)
            processes.append(process)
            return process

        spawn([str(binary), "serve", "--host", SERVER_ADDRESS, "--port", str(PORT), "--data-dir", str(data_dir)],
              data_dir / "server.log")
        deadline = time.monotonic() + 10
        while subprocess.run([*enter, "bash", "-c",
                              f"echo > /dev/tcp/{SERVER_ADDRESS}/{PORT}"], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start: " + (data_dir / "server.log").read_text())
            time.sleep(0.1)

        def token(room: str, peer: str) -> str:
            return subprocess.run([str(binary), "token", "--data-dir", str(data_dir), "--room", room, "--peer", peer],
                                  check=True, capture_output=True, text=True, timeout=10).stdout.strip()

        url = f"ws://{SERVER_ADDRESS}:{PORT}/v1/ws"
        peers = []
        for index in range(args.pairs):
            room = f"bench-{index}"
            callee = spawn([str(binary), "peer", "--url", url, "--token", token(room, "callee"),
                            "--tone", "660", "--seconds", str(args.seconds + 20)], data_dir / f"callee-{index}.log")
            peers.append(("callee", index, callee))
        time.sleep(2)  # every callee connected and past its DTLS prewarm
        started = time.monotonic()
        for index in range(args.pairs):
            room = f"bench-{index}"
            caller = spawn([str(binary), "peer", "--url", url, "--token", token(room, "caller"),
                            "--call", "callee", "--tone", "440", "--seconds", str(args.seconds)],
                           data_dir / f"caller-{index}.log")
            peers.append(("caller", index, caller))
            time.sleep(0.5)

        # CPU while every call streams: from 3 s after the last call started to 2 s before the first ends.
        time.sleep(3)
        window_start = time.monotonic()
        before = {process.pid: cpu_seconds(process.pid) for _, _, process in peers}
        time.sleep(max(1.0, args.seconds - (time.monotonic() - started) - 2))
        window = time.monotonic() - window_start
        cpu = {pid: (cpu_seconds(pid) - seconds) / window for pid, seconds in before.items()}

        summaries = {}
        for role, index, process in peers:
            process.wait(timeout=args.seconds + 40)
            log = (data_dir / f"{role}-{index}.log").read_text()
            lines = [line for line in log.splitlines() if line.startswith("summary ")]
            if not lines:
                raise RuntimeError(f"{role}-{index} printed no summary:\n{log[-2000:]}")
            summaries[(role, index)] = json.loads(lines[-1][len("summary "):])

        caller_ms = [summaries[("caller", i)]["connect_ms"] for i in range(args.pairs)]
        callee_ms = [summaries[("callee", i)]["connect_ms"] for i in range(args.pairs)]
        cpu_percent = [100 * value for value in cpu.values()]
        heard = all(abs(summaries[("caller", i)]["dominant_hz"] - 660) < 20 and
                    abs(summaries[("callee", i)]["dominant_hz"] - 440) < 20 for i in range(args.pairs))
        lost = sum(summary.get("packets_lost", 0) for summary in summaries.values())
        received = sum(summary.get("packets_received", 0) for summary in summaries.values())

        cores = os.cpu_count()
        print(f"media bench: {args.pairs} calls ({2 * args.pairs} peers), {args.seconds:.0f} s each, "
              f"{cores} cores, load {os.getloadavg()[0]:.2f}")
        print("| measure | median | max |")
        print("| --- | --- | --- |")
        print(f"| offer → connected, caller (ms) | {statistics.median(caller_ms):.0f} | {max(caller_ms):.0f} |")
        print(f"| offer received → connected, callee (ms) | {statistics.median(callee_ms):.0f} | {max(callee_ms):.0f} |")
        print(f"| CPU per streaming peer (% of one core) | {statistics.median(cpu_percent):.1f} | {max(cpu_percent):.1f} |")
        print(f"tones identified both ways in every call: {heard}; packets received {received}, lost {lost}")
        return 0 if heard else 1
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
