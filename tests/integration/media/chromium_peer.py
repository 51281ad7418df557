#!/usr/bin/env python3
"""Headless Chromium as an independent WebRTC peer that speaks calling-server's room protocol.

    python3 chromium_peer.py --url ws://HOST:PORT/v1/ws --token T [--call PEER] [--send-data TEXT]
        [--seconds N] [--connect-timeout S] [--chromium /usr/bin/chromium] [--workdir DIR]

Runs where it is started (the media tests start it inside a peer host's network namespace with
`nsenter --net`, so Chromium and everything it opens live there). It launches Chromium headless
with a fresh --user-data-dir in a temporary directory, a fake microphone (a beep) and
--remote-debugging-pipe (the DevTools protocol over fds 3/4: no port, nothing listening), loads
chromium/peer.html from a file:// URL and awaits its `runCall(config)` (chromium/peer.js): join the
room, call PEER or answer the first offer, send TEXT on the "chat" data channel, and --seconds after
connecting read getStats() and hang up. The page's console lines are printed as `console …`; the
last line is always `summary {json}` (the page's report plus `chromium_version`, and the end of
Chromium's stderr when the call did not connect). Chromium is killed and its profile removed on
every way out, SIGTERM/SIGINT included: its process group is SIGKILLed, and since this driver is a
child subreaper, helpers that left the group (the crashpad handler) are killed and reaped too; if
the driver itself is SIGKILLed, Chromium gets SIGKILL (PR_SET_PDEATHSIG). The whole run is bounded
by --connect-timeout + --seconds + 6 s. Exit status 0 when the call connected.

The page is a file:// URL: Chromium treats it as a secure context (getUserMedia works) and lets it
open ws:// connections (calling-server does not check Origin).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "chromium" / "peer.html"
CHROMIUM = "/usr/bin/chromium"
# Beyond --connect-timeout + --seconds: Chromium's start (about 1 s), getStats, hangup and close.
STARTUP_AND_TEARDOWN_S = 6.0

# Headless as root (no sandbox), no GPU, fake capture devices with the permission prompt answered,
# autoplay allowed (the received track is played out so audio levels are computed), real host
# candidates instead of mDNS names, and none of the background services that would try the network.
# tests/integration/browser/browser_lab.py starts its Chromium sessions with these too.
CHROMIUM_BASE_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-features=WebRtcHideLocalIpsWithMdns,MediaRouter,OptimizationHints,Translate",
    "--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-sync",
    "--disable-component-update", "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
    "--disable-breakpad", "--password-store=basic", "--use-mock-keychain", "--mute-audio",
]
# The DevTools protocol over fds 3/4 (PipeCDP).
CHROMIUM_FLAGS = [*CHROMIUM_BASE_FLAGS, "--remote-debugging-pipe"]


def emit(kind: str, **fields) -> None:
    print(f"{kind} {json.dumps(fields, sort_keys=True, default=str)}", flush=True)


class CDPError(RuntimeError):
    pass


class PipeCDP:
    """A minimal DevTools protocol client over Chromium's --remote-debugging-pipe: requests are
    JSON messages ending in NUL on fd 3 (Chromium's side), replies and events come back on fd 4."""

    def __init__(self, write_fd: int, read_fd: int):
        self._out = os.fdopen(write_fd, "wb")  # buffered: flush() writes a whole message
        self._in = os.fdopen(read_fd, "rb", buffering=0)
        self._next_id = 0
        self._lock = threading.Lock()
        self._waiters: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="cdp-reader", daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._in.read(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\0" in buffer:
                    raw, buffer = buffer.split(b"\0", 1)
                    message = json.loads(raw)
                    waiter = self._waiters.pop(message["id"], None) if "id" in message else None
                    if waiter is not None:
                        waiter.put(message)
                    elif "method" in message:
                        self.events.put(message)
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            for waiter in list(self._waiters.values()):
                waiter.put({"error": {"message": "Chromium closed the DevTools pipe"}})

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 10.0) -> dict:
        with self._lock:
            self._next_id += 1
            message_id = self._next_id
            waiter: queue.Queue = queue.Queue()
            self._waiters[message_id] = waiter
            message = {"id": message_id, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            if self.closed.is_set():
                raise CDPError(f"{method}: the DevTools pipe is closed")
            self._out.write(json.dumps(message).encode() + b"\0")
            self._out.flush()
        try:
            reply = waiter.get(timeout=timeout)
        except queue.Empty:
            self._waiters.pop(message_id, None)
            raise CDPError(f"{method}: no reply within {timeout}s") from None
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def close(self) -> None:
        for stream in (self._out, self._in):
            try:
                stream.close()
            except OSError:
                pass


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> None:
    """Best effort (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the driver exits."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def orphans() -> list[int]:
    """Processes whose parent is this driver: Chromium, and (as a subreaper) any of its descendants
    whose parent died first."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(entry))
    return found


class Chromium:
    """One headless Chromium process (in its own process group) with a throw-away profile."""

    def __init__(self, binary: str, workdir: Path, keep_log: bool):
        self.dir = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
        self.profile = self.dir / "profile"
        self.log_path = self.dir / "chromium.log"
        self.keep_log = keep_log
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        argv = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"]
        # The pipe must be fds 3 (Chromium reads) and 4 (Chromium writes): the shell moves them there.
        # Its own process group, so that kill() reaches every Chromium process; and SIGKILLed if this
        # driver dies first (the lab's teardown also kills whatever is left in the namespace).
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["sh", "-c", 'exec "$@" 3<&0 4>&1 0</dev/null 1>&2', "sh", *argv],
                stdin=to_chrome_r, stdout=from_chrome_w, stderr=log, start_new_session=True,
                preexec_fn=die_with_parent)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.cdp = PipeCDP(to_chrome_w, from_chrome_r)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of Chromium's stderr without its harmless dbus and ALSA complaints."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        noise = ("dbus/", "ALSA lib", "alsa_util")
        return "\n".join(line for line in lines if not any(n in line for n in noise))[-chars:]

    def kill(self) -> None:
        """SIGKILLs Chromium's process group and anything else left below this driver, reaps it all
        (this driver is a subreaper: nothing is left as a zombie for init), removes the profile."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = orphans()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, os.WNOHANG)
                except (ProcessLookupError, ChildProcessError):
                    pass
            time.sleep(0.02)
        self.cdp.close()
        shutil.rmtree(self.profile if self.keep_log else self.dir, ignore_errors=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/ws")
    parser.add_argument("--token", required=True)
    parser.add_argument("--call", metavar="PEER", help="call this peer id (otherwise answer the first offer)")
    parser.add_argument("--send-data", default="hello-from-chromium", metavar="TEXT",
                        help='sent on the "chat" data channel when it opens')
    parser.add_argument("--seconds", type=float, default=4.0, help="call length once connected")
    parser.add_argument("--connect-timeout", type=float, default=15.0,
                        help="give up when not connected this long after the page starts")
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument("--workdir", default=None,
                        help="where the temporary profile goes; Chromium's log is kept there (default: $TMPDIR, "
                             "log removed)")
    return parser.parse_args(argv)


def run(args, chromium: Chromium) -> dict:
    """Loads the page and awaits runCall; every step is bounded by one overall deadline."""
    deadline = time.monotonic() + args.connect_timeout + args.seconds + STARTUP_AND_TEARDOWN_S

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CDPError("out of time")
        return remaining

    cdp = chromium.cdp
    version = cdp.send("Browser.getVersion", timeout=min(10, left()))
    emit("chromium", product=version.get("product"))
    target = cdp.send("Target.createTarget", {"url": PAGE.as_uri()}, timeout=left())["targetId"]
    session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True}, timeout=left())["sessionId"]
    cdp.send("Runtime.enable", session=session, timeout=left())
    threading.Thread(target=print_console, args=(cdp,), name="console", daemon=True).start()
    while True:  # the page (and peer.js) loaded
        ready = cdp.send("Runtime.evaluate", {"expression": "typeof runCall === 'function'", "returnByValue": True},
                         session=session, timeout=left())
        if ready.get("result", {}).get("value") is True:
            break
        if left() < args.connect_timeout + args.seconds:
            raise CDPError(f"{PAGE} did not define runCall")
        time.sleep(0.05)
    config = {"url": args.url, "token": args.token, "call": args.call, "sendData": args.send_data,
              "seconds": args.seconds, "connectTimeout": args.connect_timeout}
    reply = cdp.send("Runtime.evaluate", {"expression": f"runCall({json.dumps(config)})", "awaitPromise": True,
                                          "returnByValue": True}, session=session, timeout=left())
    if "exceptionDetails" in reply:
        raise CDPError(f"runCall threw: {reply['exceptionDetails']}")
    report = reply["result"]["value"]
    report["chromium_version"] = version.get("product")
    return report


def print_console(cdp: PipeCDP) -> None:
    while not cdp.closed.is_set():
        try:
            event = cdp.events.get(timeout=0.2)
        except queue.Empty:
            continue
        if event.get("method") == "Runtime.consoleAPICalled":
            parts = [a.get("value", a.get("description", "")) for a in event["params"].get("args", [])]
            emit("console", text=" ".join(str(p) for p in parts))
        elif event.get("method") == "Runtime.exceptionThrown":
            emit("page-exception", details=event["params"].get("exceptionDetails", {}).get("text"))


class Terminated(Exception):
    pass


def on_signal(number, frame):
    raise Terminated(f"signal {signal.Signals(number).name}")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main() -> int:
    args = parse_args()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir())
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # Chromium's orphaned helpers become ours to kill and reap
    chromium = Chromium(args.chromium, workdir, keep_log=args.workdir is not None)
    summary: dict = {"connected": False, "errors": []}
    try:
        # SIGTERM/SIGINT/SIGHUP end the call early: the summary is still printed, Chromium killed.
        for signum in STOP_SIGNALS:
            signal.signal(signum, on_signal)
        summary = run(args, chromium)
    except Exception as error:  # noqa: BLE001 - Terminated too: the summary says what went wrong
        summary["errors"].append(f"driver: {error!r}")
    finally:
        for signum in STOP_SIGNALS:  # nothing may interrupt the clean-up
            signal.signal(signum, signal.SIG_IGN)
        try:
            chromium.cdp.send("Browser.close", timeout=2)
        except Exception:  # noqa: BLE001 - killed below anyway
            pass
        if not summary.get("connected"):
            summary["chromium_log"] = chromium.log_tail()
        chromium.kill()
    emit("summary", **summary)
    return 0 if summary.get("connected") else 1


if __name__ == "__main__":
    sys.exit(main())
