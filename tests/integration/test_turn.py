"""TURN credentials from `GET /v1/ice` checked by a REAL coturn.

A `turnserver` runs on 127.0.0.1 (random port, UDP and TCP) in REST-API mode with the same static
secret as calling-server (`CALLING_TURN_SECRET`). `turnutils_uclient` (also from the coturn
package) must ALLOCATE relays with the issued credentials and send data through them, and must be
refused (401 in coturn's log) with an expired credential, a tampered credential or a tampered
username. The credential is also recomputed here with Python's hmac, independently of the
server's code. deploy/coturn.conf is run too, with only its deployment values filled in.

Needs the Debian package `coturn` (`deploy/install-deps.sh --test`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import support
from support import HOST, REPO

TURNSERVER = shutil.which("turnserver")
UCLIENT = shutil.which("turnutils_uclient")
REALM = "test"
TTL = 600


def rest_credential(secret: str, username: str) -> str:
    """coturn's REST API: base64(HMAC-SHA1(static-auth-secret, username))."""
    return base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()


def free_udp_and_tcp_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 at the time of asking."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind((HOST, 0))
            port = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind((HOST, port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port free for both UDP and TCP")


def stun_binding_answered(port: int, timeout: float = 0.2) -> bool:
    """Sends a STUN Binding request (RFC 5389) over UDP; True when a Binding success comes back."""
    transaction = os.urandom(12)
    request = struct.pack("!HHI", 0x0001, 0, 0x2112A442) + transaction
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendto(request, (HOST, port))
            data, _ = sock.recvfrom(2048)
        except OSError:
            return False
    return len(data) >= 20 and struct.unpack("!H", data[:2])[0] == 0x0101 and data[8:20] == transaction


class Turn:
    """One `turnserver` process in REST-API mode on 127.0.0.1, with its own files under `workdir`."""

    def __init__(self, workdir: Path, secret: str, config: Path | None = None, exempt_loopback: bool = True):
        self.workdir = workdir
        self.secret = secret
        self.config = config
        self.exempt_loopback = exempt_loopback
        self.port = free_udp_and_tcp_port()
        self.log_path = workdir / "turnserver.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> "Turn":
        # The relayed peers of these tests are on 127.0.0.1: coturn refuses loopback peers by default,
        # and a config file's denied-peer-ip may cover 127.0.0.0/8 (exempt_loopback lifts that too).
        test_only = [
            "--allow-loopback-peers", *([f"--allowed-peer-ip={HOST}"] if self.exempt_loopback else []),
            "--no-tls", "--no-dtls", "--no-rfc5780",  # no certificate, no second port
            "--userdb", str(self.workdir / "turndb"), "--pidfile", str(self.workdir / "turnserver.pid"),
            "--log-file", "stdout", "--simple-log", "--verbose",  # -v: one line per ALLOCATE outcome
        ]
        if self.config is None:
            args = [
                TURNSERVER, "-n",  # no /etc/turnserver.conf: only these flags
                "--listening-ip", HOST, "--relay-ip", HOST, "--listening-port", str(self.port),
                "--use-auth-secret", f"--static-auth-secret={self.secret}", "--realm", REALM, "--fingerprint",
                "--no-cli", *test_only,
            ]
        else:
            args = [TURNSERVER, "-c", str(self.localized_config()), *test_only]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while not stun_binding_answered(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"turnserver exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"turnserver did not answer STUN within {timeout}s:\n{self.log()[-3000:]}")
        listening = f"TCP listener opened on : {HOST}:{self.port}"
        while listening not in self.log():
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"turnserver opened no TCP listener within {timeout}s:\n{self.log()[-3000:]}")
            time.sleep(0.02)
        return self

    def localized_config(self) -> Path:
        """A copy of `self.config` with only the deployment values (CHANGE in the file) replaced."""
        replaced = {"listening-ip": HOST, "relay-ip": HOST, "listening-port": str(self.port),
                    "static-auth-secret": self.secret, "realm": REALM}
        lines = []
        for line in self.config.read_text().splitlines():
            key = line.partition("=")[0].strip()
            if key in replaced:
                line = f"{key}={replaced.pop(key)}"
            elif key == "syslog":
                continue  # the test reads the log from stdout
            lines.append(line)
        assert not replaced, f"{self.config} lacks {sorted(replaced)}"
        path = self.workdir / "turnserver.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        support.kill_and_reap(self.proc, group=True)

    def allocate(self, username: str, password: str, tcp: bool = False, timeout: float = 15.0):
        """Runs turnutils_uclient in client-to-client mode (-y: two relays, data sent through them)."""
        args = [UCLIENT, "-y", "-c", "-n", "3", "-p", str(self.port), "-u", username, "-w", password]
        if tcp:
            args.insert(1, "-t")
        args.append(HOST)
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return result.returncode, result.stdout + result.stderr

    def outcomes(self, username: str) -> tuple[int, int]:
        """(successful ALLOCATEs, 401 answers) coturn logged for `username`."""
        prefix = f"user <{username}>: incoming packet"
        lines = [line for line in self.log().splitlines() if prefix in line]
        return (sum("ALLOCATE processed, success" in line for line in lines),
                sum("error 401" in line for line in lines))


@pytest.fixture
def start_turn(tmp_path):
    """`start_turn(config=None)` starts a turnserver (from flags, or from a coturn config file with
    its deployment values localized); every one is SIGKILLed and reaped at teardown."""
    if TURNSERVER is None or UCLIENT is None:
        pytest.fail("turnserver/turnutils_uclient are missing: run deploy/install-deps.sh --test (Debian package coturn)")
    started: list[Turn] = []

    def start(config: Path | None = None, exempt_loopback: bool = True) -> Turn:
        workdir = tmp_path / f"turn{len(started)}"
        workdir.mkdir()
        server = Turn(workdir, secret=secrets.token_hex(24), config=config, exempt_loopback=exempt_loopback)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def turn(start_turn) -> Turn:
    return start_turn()


def issued_credentials(turn, start_server, peer: str = "alice") -> tuple[str, str]:
    """Starts calling-server with `turn`'s secret and URLs, fetches /v1/ice as `peer`, checks the
    answer against coturn's REST formula, and returns (username, credential)."""
    urls = [f"turn:{HOST}:{turn.port}?transport=udp", f"turn:{HOST}:{turn.port}?transport=tcp"]
    server = start_server(env={"CALLING_TURN_SECRET": turn.secret}, turn_urls=",".join(urls),
                          stun_urls=f"stun:{HOST}:{turn.port}", ice_ttl_seconds=TTL)
    status, _, problem = server.get_json("/v1/ice")
    assert status == 401 and problem["code"] == "token_missing", problem

    before = int(time.time())
    status, headers, answer = server.get_json("/v1/ice", server.token("r1", peer))
    after = int(time.time())
    assert status == 200, answer
    assert headers.get("cache-control") == "no-store", headers
    assert answer["ttl"] == TTL
    assert answer["ice_servers"][1] == {"urls": [f"stun:{HOST}:{turn.port}"]}
    entry = answer["ice_servers"][0]
    assert entry["urls"] == urls
    username, credential = entry["username"], entry["credential"]
    expiry, _, suffix = username.partition(":")
    assert suffix == peer
    assert before + TTL <= int(expiry) <= after + TTL, (username, before, after)
    assert answer["expires_at"] == int(expiry)
    assert credential == rest_credential(turn.secret, username), "credential is not coturn's REST HMAC"
    return username, credential


def wait_for(condition, timeout: float = 2.0) -> bool:
    """coturn's log line may trail uclient's exit by a moment."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_issued_credentials_allocate_relays_over_udp_and_tcp(turn, start_server):
    username, credential = issued_credentials(turn, start_server)
    # uclient spends 3-6 s in its own timers per run, so UDP and TCP run side by side.
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda tcp: (tcp, *turn.allocate(username, credential, tcp=tcp)), (False, True)))
    for tcp, code, output in runs:
        assert code == 0, f"uclient (tcp={tcp}) failed with {code}:\n{output[-2000:]}\n{turn.log()[-2000:]}"
        # The final tally (the progress lines before it carry "msz="): data went through the relays.
        tally = re.search(r"start_mclient: tot_send_msgs=(\d+), tot_recv_msgs=(\d+)", output)
        assert tally and int(tally.group(1)) > 0 and int(tally.group(2)) > 0, output[-2000:]
    # -y: two allocations per run, each logged by coturn as a success for this username.
    assert wait_for(lambda: turn.outcomes(username)[0] >= 4), turn.log()[-3000:]


def test_expired_and_tampered_credentials_are_refused(turn, start_server):
    username, credential = issued_credentials(turn, start_server)
    expiry = int(username.partition(":")[0])
    expired_user = f"{int(time.time()) - 60}:alice"
    flipped = credential[:5] + ("A" if credential[5] != "A" else "B") + credential[6:]
    forged = [
        ("expired: right HMAC, timestamp passed", expired_user, rest_credential(turn.secret, expired_user)),
        ("tampered credential", username, flipped),
        ("extended expiry with the issued credential", f"{expiry + 86_400}:alice", credential),
        ("other peer with the issued credential", f"{expiry}:mallory", credential),
        ("signed with another secret", username, rest_credential(turn.secret + "x", username)),
    ]
    for label, user, password in forged:
        allocated_before, refused_before = turn.outcomes(user)
        code, output = turn.allocate(user, password)
        assert code != 0, f"{label}: uclient allocated with a forged credential:\n{output[-2000:]}"
        assert "Cannot complete Allocation" in output, f"{label}:\n{output[-2000:]}"
        assert wait_for(lambda: turn.outcomes(user)[1] > refused_before), \
            f"{label}: coturn logged no 401 for {user}:\n{turn.log()[-3000:]}"
        assert turn.outcomes(user)[0] == allocated_before, f"{label}: coturn allocated:\n{turn.log()[-3000:]}"

    # The genuine credential still allocates after the refusals: they were refused for what they
    # are, not because this client or user got blocked.
    code, output = turn.allocate(username, credential)
    assert code == 0, output[-2000:]


def test_deploy_coturn_conf_accepts_issued_credentials(start_turn, start_server):
    conf = REPO / "deploy" / "coturn.conf"
    active = {line.partition("=")[0].strip() for line in conf.read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")}
    assert {"use-auth-secret", "static-auth-secret", "realm", "fingerprint", "no-cli", "listening-ip"} <= active, active
    assert not active & {"lt-cred-mech", "allow-loopback-peers", "user", "cli-password"}, active

    # The shipped file, with only its CHANGE values set (and loopback peers allowed for the test).
    turn = start_turn(config=conf)
    username, credential = issued_credentials(turn, start_server)
    code, output = turn.allocate(username, credential)
    assert code == 0, f"{output[-2000:]}\n{turn.log()[-2000:]}"
    assert wait_for(lambda: turn.outcomes(username)[0] >= 2), turn.log()[-3000:]
    expired_user = f"{int(time.time()) - 60}:alice"
    code, output = turn.allocate(expired_user, rest_credential(turn.secret, expired_user))
    assert code != 0 and "Cannot complete Allocation" in output, output[-2000:]


def test_deploy_coturn_conf_refuses_to_relay_into_private_networks(start_turn):
    # coturn's built-in loopback refusal is lifted here, so what refuses the relay to 127.0.0.1 (with
    # valid credentials) is the file's denied-peer-ip list: coturn is no proxy into its own network.
    turn = start_turn(config=REPO / "deploy" / "coturn.conf", exempt_loopback=False)
    username = f"{int(time.time()) + TTL}:alice"
    code, output = turn.allocate(username, rest_credential(turn.secret, username))
    assert code != 0, output[-2000:]
    assert wait_for(lambda: "403: Forbidden IP" in turn.log()), turn.log()[-3000:]
    assert "denied in the range: 127.0.0.0-127.255.255.255" in turn.log(), turn.log()[-3000:]


def test_turn_urls_without_the_secret_refuse_to_start(start_server):
    with pytest.raises(RuntimeError) as refused:
        start_server(turn_urls=f"turn:{HOST}:3478")
    message = str(refused.value)
    assert "exited with 1" in message and "CALLING_TURN_SECRET" in message, message

    with pytest.raises(RuntimeError) as refused:
        start_server(env={"CALLING_TURN_SECRET": "s"}, turn_urls=f"stun:{HOST}:3478")
    message = str(refused.value)
    assert "exited with 78" in message and "turn_urls" in message, message
