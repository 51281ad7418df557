"""Private network namespaces for the media tests, and the processes that run inside them.

libnice gathers no ICE candidates on loopback, so two WebRTC peers on 127.0.0.1 never connect.
Each media test therefore builds its own small network out of Linux network namespaces and
removes it at teardown:

    peer host A (10.231.1.2) --veth-- server host (10.231.1.1 | 10.231.2.1) --veth-- peer host B (10.231.2.2)

The server host runs calling-server (on 0.0.0.0) and optionally coturn. With `routed=True` it
forwards between its two links, so A and B reach each other directly (host candidates). With
`routed=False` it does not forward: A and B can reach only the server host's own addresses, so
media between them can only flow through the TURN relay on the server host; a connection in that
lab proves the relay path by construction.

The addresses exist only inside these namespaces (nothing is added to the host's own network),
and nothing here sends traffic anywhere else. Namespace names carry the pytest process id and a
counter, so parallel runs never share one; namespaces left behind by a run that was SIGKILLed
(its pid is gone) are removed when the next lab is created. Needs root (CI runs as root),
iproute2 and nsenter (util-linux, in every Debian).

Commands enter a namespace with `nsenter --net`, not `ip netns exec` or `ip -n`: those also
unshare the mount namespace, make / a slave mount and remount /sys; the first step fails where /
is not a mount point (`"mount --make-rslave /" failed: Invalid argument` in a chroot, as a freshly
debootstrapped Debian is tested in). Nothing started here reads /sys for its network:
interfaces and addresses come from netlink, and /proc/sys/net answers for the namespace of the
process that opens it.

The test process itself stays in the host's namespace. HTTP requests to the server (metrics,
API keys) go through a worker thread that has entered the server host's namespace with setns(2):
sockets belong to the namespace of the thread that creates them.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import http.client
import itertools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import support

PREFIX = "csmedia"
_COUNTER = itertools.count(1)
CLONE_NEWNET = 0x40000000
TURN_PORT = 3478
TURN_REALM = "media-test"
SUMMARY = re.compile(r"^summary (\{.*\})\s*$", re.M)


class LabError(RuntimeError):
    pass


def fresh_base() -> str:
    """A name prefix no other namespace of this or any live run has: the pytest pid and a counter,
    the pattern `sweep_stale_namespaces` recognises."""
    return f"{PREFIX}-{os.getpid()}-{next(_COUNTER)}"


def ip(*args: str, timeout: float = 10.0) -> str:
    return _run(["ip", *args], timeout)


def ip_in(namespace: str, *args: str, timeout: float = 10.0) -> str:
    """`ip ARGS` inside network namespace `namespace`."""
    return _run(["nsenter", f"--net=/run/netns/{namespace}", "--", "ip", *args], timeout)


def _run(argv: list[str], timeout: float) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def namespaces_available() -> str | None:
    """None when this process can create network namespaces, else the reason it cannot."""
    if os.geteuid() != 0:
        return "the media tests create network namespaces and must run as root (as CI does)"
    try:
        subprocess.run(["ip", "-V"], capture_output=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return "iproute2 (`ip`) is missing: run deploy/install-deps.sh --test"
    if shutil.which("nsenter") is None:
        return "nsenter (util-linux) is missing: run deploy/install-deps.sh --test"
    return None


def sweep_stale_namespaces() -> None:
    """Removes namespaces of earlier runs whose pytest process no longer exists (SIGKILLed runs)."""
    try:
        listing = ip("netns", "list")
    except LabError:
        return
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(rf"{PREFIX}-(\d+)-\d+-\w+", name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue  # its run is still going
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        Namespace.adopt(name).delete()


def _enter_namespace(name: str) -> None:
    """ThreadPoolExecutor initializer: moves the worker thread into network namespace `name`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({name}): {os.strerror(errno)}")
    finally:
        os.close(fd)


class Namespace:
    """One network namespace: lo up, IPv6 off (fewer, all-IPv4 candidates), commands run inside."""

    def __init__(self, name: str, create: bool = True):
        self.name = name
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        if create:
            ip("netns", "add", name)
            try:
                ip_in(name, "link", "set", "lo", "up")
                self.sysctl("net.ipv6.conf.all.disable_ipv6", "1", required=False)
                self.sysctl("net.ipv6.conf.default.disable_ipv6", "1", required=False)
            except BaseException:
                # No object is returned for a lab to close: the namespace would outlive the run.
                self.delete()
                raise

    @classmethod
    def adopt(cls, name: str) -> "Namespace":
        return cls(name, create=False)

    def exec_args(self, argv: list[str]) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.name}", "--", *map(str, argv)]

    def run(self, argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess:
        return subprocess.run(self.exec_args(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def sysctl(self, key: str, value: str, required: bool = True) -> None:
        path = "/proc/sys/" + key.replace(".", "/")
        result = self.run(["sh", "-c", f"echo {value} > {path}"])
        if required and result.returncode != 0:
            raise LabError(f"{self.name}: cannot set {key}={value}: {result.stderr.strip()}")

    def call(self, fn, *args, timeout: float = 15.0, **kwargs):
        """Runs `fn(*args, **kwargs)` on a thread inside this namespace (for sockets); bounded."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"ns-{self.name}", initializer=_enter_namespace, initargs=(self.name,))
        return self._executor.submit(fn, *args, **kwargs).result(timeout)

    def http(self, method: str, host: str, port: int, path: str, body: bytes | None = None,
             headers: dict | None = None, timeout: float = 5.0):
        """Plain HTTP from inside the namespace; returns (status, headers(lower-cased), body bytes)."""
        def request():
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                response = conn.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            finally:
                conn.close()
        return self.call(request, timeout=timeout + 2)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in ip("netns", "pids", self.name).split()]
        except LabError:
            return []

    def delete(self) -> None:
        """SIGKILLs whatever still runs inside (only processes this harness started end up there),
        then removes the namespace and, with it, its veth ends. Idempotent."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        for _ in range(20):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        try:
            ip("netns", "delete", self.name)
        except LabError:
            pass


class Proc:
    """A process started inside a namespace, in its own process group, output to a file."""

    def __init__(self, label: str, argv: list[str], host: Namespace, log_path: Path, env: dict | None = None):
        self.label = label
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(host.exec_args(self.argv), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, chars: int = 3000) -> str:
        return self.output()[-chars:]

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.label} still running after {timeout}s:\n{self.tail()}") from None

    def wait_for_output(self, pattern: str, timeout: float) -> re.Match:
        """Waits (bounded) until the output matches `pattern`; fails early if the process exits."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern, re.M)
        while True:
            match = regex.search(self.output())
            if match:
                return match
            if not self.running():
                raise AssertionError(f"{self.label} exited ({self.proc.returncode}) before /{pattern}/:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.label}: no /{pattern}/ within {timeout}s:\n{self.tail()}")
            time.sleep(0.02)

    def summary(self, timeout: float) -> dict:
        """Waits for the process to exit and returns its final `summary {json}` line."""
        self.wait(timeout)
        lines = SUMMARY.findall(self.output())
        assert lines, f"{self.label} exited ({self.proc.returncode}) without a summary line:\n{self.tail()}"
        return json.loads(lines[-1])

    def kill(self) -> None:
        support.kill_and_reap(self.proc, group=True)


class NsServer(support.Server):
    """calling-server on 0.0.0.0 inside the server host's namespace. token()/apikey run in the host
    namespace (they only touch the data dir); http()/metrics()/get_json() go through the namespace."""

    def __init__(self, lab: "Lab", data_dir: Path, flags: dict | None = None, env: dict | None = None):
        super().__init__(data_dir, flags=flags, env=env)
        self.lab = lab
        self.host = lab.server_host

    listen_host = "0.0.0.0"
    # The probe runs in a worker thread inside the namespace; its wait can time out too.
    probe_errors = (OSError, concurrent.futures.TimeoutError)

    def command(self, args: list[str]) -> list[str]:
        return self.host.exec_args(args)

    def kill(self) -> None:
        # The whole group: whatever runs the server may leave it a child of its own.
        support.kill_and_reap(self.proc, group=True)
        super().kill()

    def http(self, method: str, path: str, headers: dict | None = None, timeout: float = 5.0,
             body: bytes | None = None):
        return self.host.http(method, "127.0.0.1", self.port, path, body=body, headers=headers, timeout=timeout)

    def post_json(self, path: str, payload, headers: dict | None = None, timeout: float = 5.0):
        status, hdrs, body = self.http("POST", path, {"Content-Type": "application/json", **(headers or {})},
                                       timeout, body=json.dumps(payload).encode())
        return status, hdrs, json.loads(body) if body else None

    def apikey(self, name: str = "media-tests") -> str:
        result = subprocess.run([str(support.BINARY), "apikey", "create", "--name", name, "--data-dir",
                                 str(self.data_dir)], capture_output=True, text=True, timeout=10, env=self.env)
        assert result.returncode == 0, f"apikey create failed ({result.returncode}): {result.stderr}"
        key = result.stdout.strip().splitlines()[-1].strip()
        assert key.startswith("csk_"), result.stdout
        return key

    def ws_url_for(self, peer_host: "PeerHost") -> str:
        return f"ws://{peer_host.gateway}:{self.port}/v1/ws"

    def base_url_for(self, peer_host: "PeerHost") -> str:
        return f"http://{peer_host.gateway}:{self.port}"

    def wait_peers(self, count: int, timeout: float = 10.0) -> None:
        """Waits until `calling_peers` (peers joined to a room, HTTP sessions included) is `count`."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.metrics().get("calling_peers")
            if value == count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"calling_peers is {value}, not {count}, after {timeout}s")
            time.sleep(0.05)


class RestartableServer(NsServer):
    """An NsServer whose `restart()` starts a new process on the same data dir and the same port
    (the first start takes port 0), as a crashed-and-restarted deployment would come back."""

    fixed_port: int | None = None

    def command(self, args: list[str]) -> list[str]:
        if self.fixed_port is not None:
            index = args.index("--port")
            args = [*args[:index + 1], str(self.fixed_port), *args[index + 2:]]
        return super().command(args)

    def restart(self, timeout: float = 10.0) -> "RestartableServer":
        port = self.port
        self.kill()
        self.fixed_port = port
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.start(timeout=max(1.0, deadline - time.monotonic()))
            except RuntimeError as error:
                # The old socket may linger for a moment; anything else is a real failure.
                if "address" not in str(error).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


class NsTurn:
    """coturn (turnserver) in REST-API mode inside the server host, listening on both of its
    addresses, relaying from 10.231.1.1; the same static secret is given to calling-server."""

    def __init__(self, lab: "Lab"):
        self.lab = lab
        self.secret = secrets.token_hex(24)
        self.address = lab.peer_hosts[0].gateway
        self.port = TURN_PORT
        self.workdir = lab.workdir / "turn"
        self.workdir.mkdir(exist_ok=True)
        self.proc: Proc | None = None

    def start(self, timeout: float = 10.0) -> "NsTurn":
        turnserver = support_which("turnserver")
        listening = [arg for host in self.lab.peer_hosts for arg in ("--listening-ip", host.gateway)]
        args = [
            turnserver, "-n", *listening, "--relay-ip", self.address, "--listening-port", str(self.port),
            "--use-auth-secret", f"--static-auth-secret={self.secret}", "--realm", TURN_REALM, "--fingerprint",
            "--no-cli", "--no-tls", "--no-dtls", "--no-rfc5780",
            "--min-port", "50000", "--max-port", "50999",
            "--userdb", str(self.workdir / "turndb"), "--pidfile", str(self.workdir / "turnserver.pid"),
            "--log-file", "stdout", "--simple-log", "--verbose",
        ]
        self.proc = self.lab.spawn(self.lab.server_host, args, "turnserver")
        for host in self.lab.peer_hosts:
            for proto in ("UDP", "TCP"):
                self.proc.wait_for_output(rf"{proto} listener opened on\s*:\s*{re.escape(host.gateway)}:{self.port}",
                                          timeout)
        return self

    def urls(self) -> list[str]:
        return [f"turn:{self.address}:{self.port}?transport=udp", f"turn:{self.address}:{self.port}?transport=tcp"]

    def log(self) -> str:
        return self.proc.output() if self.proc else ""

    def allocations(self) -> int:
        return len(re.findall(r"ALLOCATE processed, success", self.log()))


def support_which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LabError(f"{name} is missing: run deploy/install-deps.sh --test")
    return path


class PeerHost(Namespace):
    """A peer host: one veth link to the server host, default route through it."""

    def __init__(self, name: str, address: str, gateway: str):
        super().__init__(name)
        self.address = address
        self.gateway = gateway


class Lab:
    """The namespaces of one test and everything started in them; `close()` removes it all."""

    def __init__(self, workdir: Path, routed: bool = True, peers: int = 2):
        assert 1 <= peers <= 2
        self.workdir = Path(workdir)
        self.routed = routed
        self.procs: list[Proc] = []
        self.servers: list[NsServer] = []
        self.turns: list[NsTurn] = []
        self.server_host: Namespace | None = None
        self.peer_hosts: list[PeerHost] = []
        sweep_stale_namespaces()
        base = fresh_base()
        try:
            self.server_host = Namespace(f"{base}-srv")
            for index in range(peers):
                subnet = f"10.231.{index + 1}"
                host = PeerHost(f"{base}-p{index + 1}", f"{subnet}.2", f"{subnet}.1")
                self.peer_hosts.append(host)
                link = f"to-p{index + 1}"
                ip_in(self.server_host.name, "link", "add", link, "type", "veth", "peer", "name", "eth0",
                   "netns", host.name)
                ip_in(self.server_host.name, "addr", "add", f"{host.gateway}/24", "dev", link)
                ip_in(self.server_host.name, "link", "set", link, "up")
                ip_in(host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
                ip_in(host.name, "link", "set", "eth0", "up")
                ip_in(host.name, "route", "add", "default", "via", host.gateway)
            self.server_host.sysctl("net.ipv4.ip_forward", "1" if routed else "0")
            self._wait_links_up()
        except BaseException:
            self.close()
            raise

    def _wait_links_up(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for host in self.peer_hosts:
            while "LOWER_UP" not in ip_in(host.name, "link", "show", "eth0"):
                if time.monotonic() > deadline:
                    raise LabError(f"{host.name}: eth0 not up within {timeout}s")
                time.sleep(0.02)

    @property
    def a(self) -> PeerHost:
        return self.peer_hosts[0]

    @property
    def b(self) -> PeerHost:
        return self.peer_hosts[-1]

    def cut_a(self, dropping: bool) -> None:
        """Drops (or passes again) every packet to and from peer host A, as a Wi-Fi that goes silent:
        blackhole routes more specific than the lab's own, on A (to the server host and B's subnet),
        on the server host (to A) and on B (to A's subnet). Links, addresses and open sockets stay."""
        action = "add" if dropping else "del"
        for host, prefix in ((self.a, f"{self.a.gateway}/32"), (self.a, f"{self.b.address.rsplit('.', 1)[0]}.0/24"),
                             (self.server_host, f"{self.a.address}/32"),
                             (self.b, f"{self.a.address.rsplit('.', 1)[0]}.0/24")):
            result = host.run(["ip", "route", action, "blackhole", prefix])
            if result.returncode != 0:
                raise LabError(f"{host.name}: ip route {action} blackhole {prefix}: {result.stderr.strip()}")

    def silence_a(self, dropping: bool) -> None:
        """Drops (or passes again) every packet to and from peer host A on the server host alone, the
        router between A, the server and B: a policy rule drops whatever arrives from A's link
        (forwarded or for the server itself) and a blackhole route drops what is forwarded to A. No
        host on A's or B's side has a route changed, so the peers' own sends never fail, which
        `cut_a` makes them do (EINVAL from a local blackhole route: Chromium closes a UDP socket on
        that error, which only an ICE restart's fresh gathering replaces). The server's own sends
        to A fail instead; its TCP retransmits them. Routed labs only."""
        host, link = self.server_host, "to-p1"
        if dropping and not getattr(self, "_local_rule_moved", False):
            # Rules are tried by preference; `local` (0) would deliver A's packets for the server
            # itself before the drop rule, so it moves behind it once.
            for argv in (["ip", "rule", "add", "pref", "100", "lookup", "local"], ["ip", "rule", "del", "pref", "0"]):
                result = host.run(argv)
                if result.returncode != 0:
                    raise LabError(f"{host.name}: {' '.join(argv)}: {result.stderr.strip()}")
            self._local_rule_moved = True
        action = "add" if dropping else "del"
        for argv in (["ip", "rule", action, "pref", "10", "iif", link, "blackhole"],
                     ["ip", "route", action, "blackhole", f"{self.a.address}/32"]):
            result = host.run(argv)
            if result.returncode != 0:
                raise LabError(f"{host.name}: {' '.join(argv)}: {result.stderr.strip()}")

    def kill_signaling(self, host: PeerHost, server: NsServer) -> None:
        """Destroys every TCP connection from `host` to `server` (SOCK_DESTROY, `ss -K`): the
        process in `host` gets ECONNABORTED on its signaling socket, the server a reset, as when a
        NAT or proxy drops the connection. UDP (media) is not touched."""
        result = host.run(["ss", "-K", "-t", "-n", "dst", host.gateway, "dport", "=", f":{server.port}"])
        if result.returncode != 0:
            raise LabError(f"{host.name}: ss -K failed: {result.stderr.strip()}")
        if f":{server.port}" not in result.stdout:
            raise LabError(f"{host.name}: no TCP connection to the server to destroy: {result.stdout.strip()}")

    def spawn(self, host: Namespace, argv: list, label: str, env: dict | None = None) -> Proc:
        log_path = self.workdir / f"{len(self.procs):02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}.log"
        proc = Proc(label, argv, host, log_path, env=env)
        self.procs.append(proc)
        return proc

    def start_turn(self) -> NsTurn:
        turn = NsTurn(self)
        self.turns.append(turn)
        return turn.start()

    def start_server(self, turn: NsTurn | None = None, env: dict | None = None, **flags) -> NsServer:
        data_dir = self.workdir / f"data{len(self.servers)}"
        data_dir.mkdir()
        env = dict(env or {})
        if turn is not None:
            env["CALLING_TURN_SECRET"] = turn.secret
            flags.setdefault("turn_urls", ",".join(turn.urls()))
        server = NsServer(self, data_dir, flags=flags, env=env)
        self.servers.append(server)
        return server.start()

    def diagnostics(self) -> str:
        parts = []
        for server in self.servers:
            parts.append(f"--- calling-server (port {server.port}) stderr ---\n{server.stderr_text()}")
        for proc in self.procs:
            parts.append(f"--- {proc.label} (exit {proc.proc.poll()}) ---\n{proc.tail(4000)}")
        return "\n".join(parts)

    def close(self) -> None:
        """Kills every process (peers first, then servers), then deletes the namespaces."""
        for proc in reversed(self.procs):
            proc.kill()
        for server in self.servers:
            server.kill()
        for host in [*self.peer_hosts, self.server_host]:
            if host is not None:
                host.delete()
