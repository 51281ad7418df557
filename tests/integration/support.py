"""Helpers shared by the integration tests: a real `calling-server` process, token minting,
raw HTTP / raw WebSocket clients, and a small JSON-frame client on top of `websockets`.

Everything talks to 127.0.0.1 only. Nothing here imports the server's code: the tests treat the
binary as a black box.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import websockets
from websockets.asyncio.client import connect as ws_connect

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("SERVER_BIN_UNDER_TEST", REPO / ".build" / "debug" / "calling-server"))
HOST = "127.0.0.1"
BANNER = re.compile(rb"calling-server listening on https?://[^\s:]+:(\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
_RUNS = itertools.count(1)


def run(coro, timeout: float = 15.0):
    """Runs one async test body with a hard time bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def kill_and_reap(proc: "subprocess.Popen | None", group: bool = False) -> None:
    """SIGKILLs `proc` (with `group`, its whole process group: what it started dies with it) and
    waits for it, so no test leaves a process or a zombie behind. Idempotent."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass


# --------------------------------------------------------------------------------------------
# The server process


class Server:
    """One `calling-server serve --port 0` process on its own data dir."""

    def __init__(self, data_dir: Path, flags: dict | None = None, env: dict | None = None):
        self.data_dir = Path(data_dir)
        self.flags = dict(flags or {})
        self.env = dict(os.environ)
        # Never let a developer's environment configure the server under test.
        for key in list(self.env):
            if key.startswith("CALLING_"):
                del self.env[key]
        self.env.update(env or {})
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        # Set (before start) for a server with tls_cert_file: http(), ws_url() and Peer use TLS
        # verified with this context.
        self.ssl_context: ssl.SSLContext | None = None

    # lifecycle -------------------------------------------------------------------------------

    # Where the server listens, and which errors of a /healthz probe mean "not up yet"; a
    # subclass running the server elsewhere (media/netns.py: in a network namespace) changes them.
    listen_host = HOST
    probe_errors: tuple = (OSError,)

    def command(self, args: list[str]) -> list[str]:
        """The argv that runs `args`; here as is."""
        return args

    def start(self, timeout: float = 10.0) -> "Server":
        assert BINARY.exists(), f"{BINARY} is missing: run `swift build` first"
        n = next(_RUNS)
        self.stdout_path = self.data_dir.parent / f"{self.data_dir.name}.stdout.{n}"
        self.stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.{n}"
        args = [str(BINARY), "serve", "--host", self.listen_host, "--port", "0", "--data-dir", str(self.data_dir)]
        # The session runs a copy of the binary outside the checkout (conftest.py), so the default
        # web_root (found beside the binary) would not be the repository's: name it.
        if "web_root" not in self.flags and "web-root" not in self.flags:
            args += ["--web_root", str(REPO / "sdk" / "js")]
        for key, value in self.flags.items():
            args += [f"--{key}", str(value)]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.command(args), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            match = BANNER.search(self.stdout_path.read_bytes())
            if match:
                self.port = int(match.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before listening:\n{self.stderr_text()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server printed no banner within {timeout}s:\n{self.stderr_text()}")
            time.sleep(0.02)
        while True:
            try:
                status, _, _ = self.http("GET", "/healthz", timeout=1)
                if status == 200:
                    return self
            except self.probe_errors:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server did not answer /healthz:\n{self.stderr_text()}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL (idempotent); always reaps the process."""
        kill_and_reap(self.proc)

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except (OSError, AttributeError):
            return ""

    # tokens ------------------------------------------------------------------------------------

    def token(self, room: str | None, peer: str, role: str | None = None, name: str | None = None,
              ttl: int | None = None, call: str | None = None, scope: str | None = None) -> str:
        args = [str(BINARY), "token", "--data-dir", str(self.data_dir), "--peer", peer]
        for flag, value in (("room", room), ("role", role), ("name", name), ("ttl", ttl), ("call", call),
                            ("scope", scope)):
            if value is not None:
                args += [f"--{flag}", str(value)]
        result = subprocess.run(args, capture_output=True, text=True, timeout=10, env=self.env)
        assert result.returncode == 0, f"token CLI failed ({result.returncode}): {result.stderr}"
        token = result.stdout.strip()
        assert token.count(".") == 2, token
        return token

    def secret(self) -> bytes:
        return (self.data_dir / "jwt-secret").read_bytes().strip()

    # HTTP --------------------------------------------------------------------------------------

    def http(self, method: str, path: str, headers: dict | None = None, timeout: float = 5.0):
        """Plain HTTP request; returns (status, headers(lower-cased), body bytes)."""
        if self.ssl_context is not None:
            conn = http.client.HTTPSConnection(HOST, self.port, timeout=timeout, context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            body = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, body
        finally:
            conn.close()

    def get_json(self, path: str, token: str | None = None, timeout: float = 5.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        status, hdrs, body = self.http("GET", path, headers, timeout)
        return status, hdrs, json.loads(body) if body else None

    def metrics(self) -> dict:
        status, _, body = self.http("GET", "/metrics")
        assert status == 200
        return parse_metrics(body.decode())

    def cpu_seconds(self) -> float:
        """utime + stime of the server process, from /proc/PID/stat."""
        with open(f"/proc/{self.pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        # After "pid (comm) ": state is field 3, utime field 14, stime field 15 (1-based).
        utime, stime = int(fields[11]), int(fields[12])
        return (utime + stime) / CLK_TCK

    def ws_url(self, token: str | None, **query) -> str:
        params = {}
        if token is not None:
            params["token"] = token
        params.update({k: str(v) for k, v in query.items()})
        qs = urllib.parse.urlencode(params)
        scheme = "ws" if self.ssl_context is None else "wss"
        return f"{scheme}://{HOST}:{self.port}/v1/ws" + (f"?{qs}" if qs else "")


def parse_metrics(text: str) -> dict:
    """Prometheus text → {"name{labels}": value}."""
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        values[name] = float(value)
    return values


# --------------------------------------------------------------------------------------------
# JWTs built by hand


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_jwt(payload: dict, secret: bytes, alg: str = "HS256", header: dict | None = None) -> str:
    header = header if header is not None else {"alg": alg, "typ": "JWT"}
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + b64url(json.dumps(payload, separators=(",", ":")).encode()))
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}.get(alg)
    if digest is None:  # "none" and friends: empty signature
        return signing_input + "."
    return signing_input + "." + b64url(hmac.new(secret, signing_input.encode(), digest).digest())


def jwt_payload(token: str) -> dict:
    return json.loads(b64url_decode(token.split(".")[1]))


def claims(room: str | None = "r1", sub: str = "alice", aud: str | None = "calling-server", ttl: int = 600,
           **extra) -> dict:
    now = int(time.time())
    payload = {"sub": sub, "iat": now, "exp": now + ttl, "role": "peer", "scope": "room"}
    if room is not None:
        payload["room_id"] = room
    if aud is not None:
        payload["aud"] = aud
    payload.update(extra)
    return payload


# --------------------------------------------------------------------------------------------
# Raw HTTP upgrade (to read refusals) and a raw WebSocket client (for frames `websockets` won't send)


def upgrade_request(path: str, extra_headers: dict | None = None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {HOST}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    for name, value in (extra_headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_http_response(sock: socket.socket, timeout: float = 5.0):
    """Reads a response head (and a content-length body). Returns (status, headers, body, leftover)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a full response head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if status == 101:
        return status, headers, b"", rest
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length], rest[length:]


def raw_upgrade(port: int, path: str, extra_headers: dict | None = None, timeout: float = 5.0):
    """Sends a WebSocket upgrade request; returns (status, headers, body)."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(upgrade_request(path, extra_headers))
        status, headers, body, _ = read_http_response(sock, timeout)
        return status, headers, body


def encode_frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", first, (0x80 if mask else 0) | length)
    elif length < 65536:
        head = struct.pack("!BBH", first, (0x80 if mask else 0) | 126, length)
    else:
        head = struct.pack("!BBQ", first, (0x80 if mask else 0) | 127, length)
    if not mask:
        return head + payload
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + masked


class RawWebSocket:
    """A minimal blocking WebSocket client on a plain socket."""

    def __init__(self, port: int, token: str, rcvbuf: int | None = None, query: str = "", timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Before connect, so the TCP window is negotiated small.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((HOST, port))
        self.sock.sendall(upgrade_request(f"/v1/ws?token={token}{query}"))
        status, headers, body, self.buffer = read_http_response(self.sock, timeout)
        if status != 101:
            self.sock.close()
            raise ConnectionError(f"upgrade refused: {status} {body!r}")

    def send_frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        self.sock.sendall(encode_frame(opcode, payload, fin))

    def send_text_bytes(self, payload: bytes) -> None:
        self.send_frame(0x1, payload)

    def send_json(self, obj) -> None:
        self.send_frame(0x1, json.dumps(obj).encode())

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def recv_frame(self, timeout: float = 5.0):
        """Returns (opcode, payload). Answers nothing by itself."""
        self.sock.settimeout(timeout)
        first, second = self._read_exact(2)
        opcode = first & 0x0F
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exact(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exact(8))
        if second & 0x80:
            key = self._read_exact(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(self._read_exact(length)))
        else:
            payload = self._read_exact(length)
        return opcode, payload

    def recv_json(self, timeout: float = 5.0) -> dict:
        """Next text frame as JSON, answering protocol pings on the way."""
        deadline = time.monotonic() + timeout
        while True:
            opcode, payload = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if opcode == 0x9:
                self.send_frame(0xA, payload)
                continue
            if opcode == 0x1:
                return json.loads(payload)
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"closed by server: {code} {payload[2:]!r}")

    def abort(self) -> None:
        """Abrupt disconnect: RST instead of a close handshake or FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------------------------
# A JSON-frame client on `websockets`


class Peer:
    """A connected peer: JSON frames in, JSON frames out, with time-bounded receives."""

    def __init__(self, ws, label: str):
        self.ws = ws
        self.label = label
        self.welcome: dict | None = None

    @classmethod
    async def connect(cls, server: Server, token: str, label: str = "", expect_welcome: bool = True,
                      headers: dict | None = None, **query) -> "Peer":
        tls = {} if server.ssl_context is None else {"ssl": server.ssl_context}
        ws = await ws_connect(server.ws_url(token, **query), proxy=None, compression=None, open_timeout=5,
                              close_timeout=2, ping_interval=None, max_size=16 * 1024 * 1024,
                              additional_headers=headers, **tls)
        peer = cls(ws, label)
        if expect_welcome:
            peer.welcome = await peer.recv(timeout=5)
            assert peer.welcome["type"] == "welcome", peer.welcome
        return peer

    async def send(self, frame) -> None:
        await self.ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))

    async def recv(self, timeout: float = 3.0) -> dict:
        try:
            message = await asyncio.wait_for(self.ws.recv(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"{self.label}: no frame within {timeout}s") from None
        assert isinstance(message, str), f"{self.label}: server sent a binary frame"
        return json.loads(message)

    async def recv_type(self, frame_type: str, timeout: float = 3.0, skip: tuple = ()) -> dict:
        """Next frame, which must be `frame_type`; frames whose type is in `skip` are ignored."""
        deadline = time.monotonic() + timeout
        while True:
            frame = await self.recv(max(0.01, deadline - time.monotonic()))
            if frame["type"] in skip:
                continue
            assert frame["type"] == frame_type, f"{self.label}: expected {frame_type}, got {frame}"
            return frame

    async def assert_silent(self, duration: float) -> None:
        """No frame at all arrives for `duration` seconds."""
        try:
            message = await asyncio.wait_for(self.ws.recv(), duration)
        except asyncio.TimeoutError:
            return
        raise AssertionError(f"{self.label}: unexpected frame {message!r}")

    async def ping(self, nonce=None, timeout: float = 3.0, skip: tuple = ()) -> dict:
        """App-level ping → pong round trip; returns the pong."""
        nonce = nonce if nonce is not None else os.urandom(4).hex()
        await self.send({"type": "ping", "payload": {"nonce": nonce}})
        pong = await self.recv_type("pong", timeout, skip=skip)
        assert pong.get("payload") == {"nonce": nonce}, pong
        return pong

    async def wait_closed(self, timeout: float = 5.0):
        """Waits for the server to close; returns (code, reason)."""
        try:
            await asyncio.wait_for(self.ws.wait_closed(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"{self.label}: not closed within {timeout}s") from None
        return self.ws.close_code, self.ws.close_reason

    async def recv_until_closed(self, timeout: float = 5.0) -> list:
        """Collects every frame until the connection closes."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.label}: not closed within {timeout}s; got {frames}")
            try:
                message = await asyncio.wait_for(self.ws.recv(), remaining)
            except websockets.ConnectionClosed:
                return frames
            except asyncio.TimeoutError:
                continue
            frames.append(json.loads(message))

    async def close(self) -> None:
        await self.ws.close()


def fresh_dir(prefix: str = "calling-it-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# --------------------------------------------------------------------------------------------
# PostgreSQL (shared chat history, `database_url`)

PG_BIN = Path(os.environ.get("CALLING_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class PostgresServer:
    """A throwaway PostgreSQL: `initdb` in a fresh temporary folder, `postgres` on a free loopback
    port (TCP only; the socket folder is the temporary folder), trust auth for superuser `calling`.

    PostgreSQL refuses to run as root: started by root, it runs as the `postgres` user Debian's
    package creates (or CALLING_TEST_PG_USER) through `setpriv`. `stop()` is a fast shutdown and
    removes the folder. The Swift tests have the same helper (Sources/CallingTesting/TestPostgres.swift).
    """

    user = "calling"

    def __init__(self):
        self.directory = Path(tempfile.mkdtemp(prefix="calling-pg-"))
        self.data = self.directory / "data"
        self.run_as = os.environ.get("CALLING_TEST_PG_USER", "postgres") if os.geteuid() == 0 else None
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def _argv(self, args: list[str]) -> list[str]:
        if self.run_as is None:
            return args
        return ["setpriv", f"--reuid={self.run_as}", f"--regid={self.run_as}", "--init-groups", "--"] + args

    def start(self) -> "PostgresServer":
        if self.run_as is not None:
            subprocess.run(["chown", "-R", f"{self.run_as}:{self.run_as}", str(self.directory)], check=True)
        env = dict(os.environ, LC_ALL="C")
        result = subprocess.run(self._argv([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", self.user,
                                            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
                                            "--no-instructions"]),
                                capture_output=True, text=True, env=env, cwd="/", timeout=120)
        assert result.returncode == 0, f"initdb failed: {result.stdout}{result.stderr}"
        for _ in range(5):
            self.port = free_loopback_port()
            self._launch()
            if self._wait_ready():
                return self
            kill_and_reap(self.proc)
        raise RuntimeError(f"postgres did not start:\n{self.log_text()}")

    def _launch(self) -> None:
        log = open(self.directory / "postgres.log", "ab")
        env = dict(os.environ, LC_ALL="C")
        self.proc = subprocess.Popen(
            self._argv([str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                        "-c", f"listen_addresses={HOST}", "-c", f"unix_socket_directories={self.directory}",
                        "-c", "max_connections=200", "-c", "logging_collector=off"]),
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
        log.close()

    def _wait_ready(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", HOST, "-p", str(self.port)]).returncode == 0:
                return True
            time.sleep(0.05)
        return False

    def log_text(self) -> str:
        try:
            return (self.directory / "postgres.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{HOST}:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """An empty database (a fresh name unless given); returns its URL."""
        name = name or f"t_{os.urandom(8).hex()}"
        subprocess.run([str(PG_BIN / "createdb"), "-h", HOST, "-p", str(self.port), "-U", self.user, name],
                       check=True, capture_output=True, timeout=30)
        return self.url(name)

    def psql(self, database_url: str, sql: str) -> str:
        """Runs `sql`; returns psql's unaligned, tuples-only output."""
        result = subprocess.run([str(PG_BIN / "psql"), database_url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"psql failed: {result.stderr}"
        return result.stdout.strip()

    def kill9(self) -> None:
        """SIGKILL to the postmaster and its backends, as a crash would (a postmaster killed alone
        leaves its backends running until they notice, and they may still commit); `restart()`
        brings it back on the same port and data."""
        kill_and_reap(self.proc, group=True)

    def restart(self) -> None:
        for _ in range(50):
            self._launch()
            if self._wait_ready():
                return
            kill_and_reap(self.proc)
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not restart:\n{self.log_text()}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after 10 s; removes the folder. Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                kill_and_reap(self.proc)
        shutil.rmtree(self.directory, ignore_errors=True)
