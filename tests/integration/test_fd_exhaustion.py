"""Issue #15 item 1: file-descriptor exhaustion. With the process at `ulimit -n 300`, 290 sockets
that each send `CONNECT` and stay open (and, separately, 290 sockets that never finish their
headers) must not take the server down: /healthz keeps answering, the log stays small, the
service loop does not spin, and new WebSocket upgrades work once the sockets are gone."""

from __future__ import annotations

import socket
import time

import pytest

import json

from support import Peer, RawWebSocket, Server, raw_upgrade, run

NOFILE = 300
ATTACKERS = 290
CONNECT = b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n"
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


class LimitedServer(Server):
    """The server under `prlimit --nofile=300:300`: soft and hard limit, so it cannot raise it."""

    def command(self, args):
        return ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"] + args


@pytest.fixture
def limited(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    server = LimitedServer(data)
    try:
        yield server.start()
    finally:
        server.kill()


def open_attackers(port: int, payload: bytes) -> list[socket.socket]:
    sockets = []
    for _ in range(ATTACKERS):
        s = socket.socket()
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        s.sendall(payload)
        sockets.append(s)
    return sockets


def healthz_seconds(server: Server) -> float:
    started = time.monotonic()
    status, _, _ = server.http("GET", "/healthz", timeout=3)
    assert status == 200
    return time.monotonic() - started


def cpu_share_over(server: Server, seconds: float) -> float:
    before, started = server.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (server.cpu_seconds() - before) / (time.monotonic() - started)


def assert_survives(server: Server, attackers: list[socket.socket]) -> None:
    time.sleep(0.5)
    assert healthz_seconds(server) < 1.0
    share = cpu_share_over(server, 1.0)
    assert share < 0.3, f"server burns {share:.0%} of a core with {ATTACKERS} hostile sockets open"
    for _ in range(5):
        assert healthz_seconds(server) < 1.0
    log_bytes = server.stderr_path.stat().st_size
    assert log_bytes < 64 * 1024, f"{log_bytes} bytes of stderr:\n{server.stderr_text()}"
    for s in attackers:
        s.close()
    time.sleep(0.3)

    async def upgrade():
        peer = await Peer.connect(server, server.token("r1", "after"))
        await peer.close()

    run(upgrade())


def test_connect_flood_at_the_open_file_limit_is_answered_and_closed(limited):
    attackers = open_attackers(limited.port, CONNECT)
    # Every CONNECT gets its answer at once and the server closes the socket: nothing is held.
    answered = 0
    for s in attackers[:20]:
        head = s.recv(200)
        assert head.startswith(b"HTTP/1.1 405 "), head
        answered += 1
    assert answered == 20
    assert_survives(limited, attackers)
    metrics = limited.metrics()
    handled = sum(metrics[k] for k in ("calling_http_rejected_total", "calling_sockets_refused_total", "calling_sockets_evicted_total"))
    assert handled >= ATTACKERS, {k: v for k, v in metrics.items() if "socket" in k or "rejected" in k}


def test_sockets_that_never_finish_their_headers_cannot_lock_out_healthz(limited):
    attackers = open_attackers(limited.port, PARTIAL)
    assert_survives(limited, attackers)
    metrics = limited.metrics()
    # 300 - reserved_fds (128) = 172 sockets; the oldest silent ones made room for the rest.
    assert metrics["calling_sockets_evicted_total"] + metrics["calling_sockets_refused_total"] > 0
    assert "socket budget full" in limited.stderr_text()


def open_file_limits(pid: int) -> tuple[str, str]:
    """The soft and hard "Max open files" of a process, as /proc/PID/limits writes them."""
    with open(f"/proc/{pid}/limits") as f:
        [line] = [line for line in f if line.startswith("Max open files")]
    soft, hard = line.split()[3:5]
    return soft, hard


def test_max_sockets_caps_the_budget_below_the_open_file_limit(start_server):
    """max_sockets 40 under a hard open-file limit of thousands: the soft limit set to 40 +
    reserved_fds (128), raised to the floor of 1,024, a socket budget of 40, so 32 peers after
    health_reserved_sockets (8), and the 33rd upgrade is refused with 503 at_capacity."""
    server = start_server(max_sockets=40)
    assert server.metrics()["calling_peer_capacity"] == 32
    log = server.stderr_path.read_text()
    assert "socket_budget=40" in log and "peer_capacity=32" in log, log
    # The ceiling is the process's own limit (lws keeps a table that size), not only the budget.
    soft, hard = open_file_limits(server.pid)
    assert soft == str(min(1024, int(hard))), (soft, hard)
    peers = []
    try:
        for n in range(32):
            peers.append(RawWebSocket(server.port, server.token(f"r{n}", f"p{n}")))
            assert peers[-1].recv_json()["type"] == "welcome"
        status, headers, body = raw_upgrade(server.port, f"/v1/ws?token={server.token('r32', 'p32')}")
        assert status == 503, (status, body)
        assert json.loads(body)["code"] == "at_capacity"
    finally:
        for peer in peers:
            peer.close()
    status, _, _ = server.http("GET", "/healthz")
    assert status == 200


class RaisableServer(Server):
    """The server started with a soft open-file limit of 150 under a hard one of 5,000."""

    def command(self, args):
        return ["prlimit", "--nofile=150:5000", "--"] + args


@pytest.mark.parametrize("max_sockets, soft", [(0, "5000"), (2000, "2128"), (4000, "4128"), (9000, "5000"), (10, "1024")])
def test_the_soft_open_file_limit_is_the_hard_one_or_max_sockets_plus_the_reserve(tmp_path, max_sockets, soft):
    """Raised from 150: to the hard limit with max_sockets 0 or one above it, to max_sockets +
    reserved_fds (128) below it, and never below 1,024; the budget follows."""
    data = tmp_path / "data"
    data.mkdir()
    server = RaisableServer(data, flags={"max_sockets": max_sockets})
    try:
        server.start()
        assert open_file_limits(server.pid) == (soft, "5000")
        budget = min(int(soft) - 128, max_sockets or int(soft))
        assert f"socket_budget={budget}" in server.stderr_path.read_text()
        assert server.metrics()["calling_peer_capacity"] == budget - 8
    finally:
        server.kill()
