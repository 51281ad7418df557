"""Launchers for the media tests' peers inside a Lab, and the checks their summaries must pass.

Three peers, each a separate process in a peer host's namespace, each ending with one
`summary {json}` line:
  - aiortc_peer.py      aiortc over the room WebSocket (independent of this repository's code)
  - session_caller.py   aiortc over the webrtc-proxy HTTP session API (as a native app)
  - calling-server peer the repository's Linux peer (GStreamer webrtcbin), when it exists
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import support
from netns import Lab, NsServer, NsTurn, PeerHost, Proc

MEDIA = Path(__file__).resolve().parent
AIORTC_PEER = MEDIA / "aiortc_peer.py"
SESSION_CALLER = MEDIA / "session_caller.py"
TONE_TOLERANCE = 0.05  # dominant_hz within ±5 % of the tone sent
SECONDS = 4  # the caller's call length (aiortc_peer: after connecting; the Linux peer: after starting)
MIN_FRAMES = 100  # 20 ms frames: 2 s of audio must have arrived
CONNECT_TIMEOUT = 15
CALLEE_SECONDS = 12  # longer than the caller's call: a callee ends on the caller's hangup
SUMMARY_TIMEOUT = 25
HANGUP_GRACE = 5  # a callee's call ends this soon after the caller hung up


def flags(**options) -> list[str]:
    """call="bob", send_data="x", relay_only=True → ["--call", "bob", "--send-data", "x", "--relay-only"]."""
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def aiortc_peer(lab: Lab, host: PeerHost, server: NsServer, token: str, label: str, **options) -> Proc:
    options.setdefault("connect_timeout", CONNECT_TIMEOUT)
    argv = [sys.executable, AIORTC_PEER, "--url", server.ws_url_for(host), "--token", token, *flags(**options)]
    return lab.spawn(host, argv, label, env=clean_env())


def session_caller(lab: Lab, host: PeerHost, server: NsServer, label: str, **options) -> Proc:
    options.setdefault("connect_timeout", CONNECT_TIMEOUT)
    argv = [sys.executable, SESSION_CALLER, "--base", server.base_url_for(host), *flags(**options)]
    return lab.spawn(host, argv, label, env=clean_env())


def linux_peer(lab: Lab, host: PeerHost, server: NsServer, token: str, label: str, **options) -> Proc:
    argv = [support.BINARY, "peer", "--url", server.ws_url_for(host), "--token", token, *flags(**options)]
    return lab.spawn(host, argv, label, env=clean_env())


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLING_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@functools.lru_cache(maxsize=None)
def linux_peer_missing() -> str | None:
    """None when `calling-server peer --help` succeeds; otherwise why the Linux-peer tests skip."""
    try:
        result = subprocess.run([str(support.BINARY), "peer", "--help"], capture_output=True, text=True, timeout=15,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as error:
        return f"`calling-server peer --help` could not run: {error!r}"
    if result.returncode != 0:
        first = (result.stderr or result.stdout).strip().splitlines()[:1]
        return (f"`calling-server peer --help` exits {result.returncode} ({first[0] if first else 'no output'}): "
                "the Linux peer CLI has not landed in this binary yet")
    return None


def assert_heard(summary: dict, label: str, tone_hz: float, min_frames: int = MIN_FRAMES) -> None:
    """`label` connected and received the other side's tone: enough frames, at the right pitch."""
    assert summary.get("connected") is True, f"{label} did not connect: {summary}"
    frames = summary.get("audio_frames_received") or 0
    assert frames >= min_frames, f"{label} received {frames} audio frames, expected ≥ {min_frames}: {summary}"
    heard = summary.get("dominant_hz")
    assert heard is not None and abs(heard - tone_hz) <= TONE_TOLERANCE * tone_hz, \
        f"{label} heard {heard} Hz, expected {tone_hz} Hz ± {TONE_TOLERANCE:.0%}: {summary}"


PEER_STATS = re.compile(r"^peer-stats peer=(\S+) sent=(\d+) received=(\d+)", re.M)


def received_packets(peer: Proc) -> int:
    """RTP packets a running Linux peer counted, by its last `peer-stats` line (0 before one)."""
    lines = PEER_STATS.findall(peer.output())
    return int(lines[-1][2]) if lines else 0


def wait_received_packets(peer: Proc, minimum: int, timeout: float, what: str) -> int:
    """Waits (bounded) until the Linux peer's `peer-stats` count more than `minimum` packets received."""
    deadline = time.monotonic() + timeout
    while (count := received_packets(peer)) <= minimum:
        if time.monotonic() > deadline:
            raise AssertionError(f"{peer.label}: {what} not within {timeout}s (received {count}):\n{peer.tail()}")
        if not peer.running():
            raise AssertionError(f"{peer.label} exited before {what}:\n{peer.tail()}")
        time.sleep(0.1)
    return count


def assert_got_data(summary: dict, label: str, text: str) -> None:
    assert text in (summary.get("data_received") or []), \
        f"{label} did not receive {text!r} on the data channel: {summary.get('data_received')}"


def assert_sent_data(summary: dict, label: str, text: str) -> None:
    assert text in (summary.get("data_sent") or []), f"{label} did not send {text!r}: {summary.get('data_sent')}"


def signaling_frames(server: NsServer) -> dict:
    """offer/answer/candidate/data frames the server relayed (calling_frames_in_total by type)."""
    metrics = server.metrics()
    return {kind: int(metrics.get(f'calling_frames_in_total{{type="{kind}"}}', 0))
            for kind in ("offer", "answer", "candidate", "data")}


def turn_lines(turn: NsTurn, peer: str, what: str) -> list[str]:
    """coturn log lines about user `<expiry>:<peer>` containing `what`."""
    user = re.compile(rf"user <\d+:{re.escape(peer)}>|username=<\d+:{re.escape(peer)}>")
    return [line for line in turn.log().splitlines() if user.search(line) and what in line]


def assert_relayed_through(turn: NsTurn, peer: str) -> None:
    """coturn allocated a relay for `peer` and `peer` gave its relay a permission (or channel) to send to."""
    assert turn_lines(turn, peer, "ALLOCATE processed, success"), \
        f"coturn allocated no relay for {peer}:\n{turn.log()[-3000:]}"
    assert (turn_lines(turn, peer, "CREATE_PERMISSION processed, success")
            or turn_lines(turn, peer, "CHANNEL_BIND processed, success")), \
        f"{peer} never opened its relay towards the other peer:\n{turn.log()[-3000:]}"


def relayed_packets(turn: NsTurn, peer: str) -> tuple[int, int]:
    """(packets received from, sent to) the other side by `peer`'s relays, from the `peer usage` lines
    coturn writes when an allocation ends."""
    received = sent = 0
    for line in turn_lines(turn, peer, "peer usage:"):
        match = re.search(r"rp=(\d+), rb=\d+, sp=(\d+)", line)
        if match:
            received += int(match.group(1))
            sent += int(match.group(2))
    return received, sent


def wait_relayed_packets(turn: NsTurn, peer: str, minimum: int, timeout: float = 5.0) -> tuple[int, int]:
    """Waits (bounded) until coturn reports ≥ `minimum` packets each way through `peer`'s relays.
    coturn writes the counters when the client releases its allocation (REFRESH lifetime 0)."""
    deadline = time.monotonic() + timeout
    while True:
        counts = relayed_packets(turn, peer)
        if min(counts) >= minimum or time.monotonic() > deadline:
            return counts
        time.sleep(0.05)
