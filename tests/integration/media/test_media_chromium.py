"""Real headless Chromium against the Linux peer (`calling-server peer`) through calling-server.

Chromium (Debian `chromium`, with its fake microphone: an intermittent beep) runs
chromium/peer.js, a browser peer written against docs/protocol.md alone, inside peer host A of a
private network lab (netns.py); the Linux peer runs in peer host B with a 660 Hz tone; the server
relays their offer/answer/trickled candidates over /v1/ws from the server host. Both roles are
tested (Chromium offers, and Chromium answers the Linux peer's offer). Each side's own
measurements are checked: Chromium's getStats() (inbound-rtp packets and audio energy, connection
state) and the Linux peer's summary (RTP packets, decoded frames, level), plus a data-channel
message each way and the end of the call on Chromium's `data {kind:"hangup"}`. The beep is not
a steady tone, so its frequency is not asserted.

Skipped when not root (network namespaces), without /usr/bin/chromium, or while
`calling-server peer --help` fails. chromium_peer.py runs Chromium with a throw-away profile and
kills it on every way out; the lab's teardown SIGKILLs whatever still runs in the namespaces.
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest

import netns
from peers import HANGUP_GRACE, MIN_FRAMES, assert_got_data, clean_env, flags, linux_peer, linux_peer_missing

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chromium_peer.py")
CALL_SECONDS = 5  # Chromium's call length once connected: ~250 Opus packets each way
CONNECT_TIMEOUT = 8  # from the page's start; it takes under 1 s
LINUX_SECONDS = 20  # the Linux peer's own bound; its call ends on Chromium's hangup long before
# chromium_peer.py gives up after CONNECT_TIMEOUT + CALL_SECONDS + 6 s; with the Linux peer's
# HANGUP_GRACE the test stays inside the suite's 30 s per-test limit.
CHROMIUM_TIMEOUT = CONNECT_TIMEOUT + CALL_SECONDS + 8
FROM_CHROMIUM = "hello-from-chromium"
FROM_LINUX = "hello-from-linux"
MIN_PACKETS = 100


@pytest.fixture(autouse=True)
def chromium_and_linux_peer():
    """Skips (before any namespace is built) when a piece of the call is missing."""
    reason = netns.namespaces_available()
    if reason is not None:
        pytest.skip(reason)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: install the Debian package `chromium` (deploy/install-deps.sh --test)")
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


def chromium_peer(lab: netns.Lab, host: netns.PeerHost, server: netns.NsServer, token: str, label: str,
                  **options) -> netns.Proc:
    options.setdefault("connect_timeout", CONNECT_TIMEOUT)
    argv = [sys.executable, CHROMIUM_PEER, "--url", server.ws_url_for(host), "--token", token,
            "--workdir", lab.workdir, *flags(**options)]
    return lab.spawn(host, argv, label, env=clean_env())


def assert_chromium_heard(report: dict) -> None:
    assert report.get("connected") is True, f"Chromium did not connect: {report}"
    assert "connected" in report.get("connection_states", []), report
    assert report.get("connect_ms") is not None and report["connect_ms"] > 0, report
    stats = report.get("stats") or {}
    inbound = stats.get("inbound_audio") or {}
    packets = inbound.get("packetsReceived") or 0
    assert packets > MIN_PACKETS, f"Chromium's inbound-rtp audio has {packets} packets, expected > {MIN_PACKETS}: {stats}"
    energy = inbound.get("totalAudioEnergy") or 0
    assert energy > 0 and (inbound.get("audioLevel") or 0) > 0, \
        f"Chromium received silence (totalAudioEnergy {energy}, audioLevel {inbound.get('audioLevel')}): {stats}"
    assert (stats.get("codec") or {}).get("mimeType", "").lower() == "audio/opus", stats
    assert report.get("errors") == [], report["errors"]


def assert_linux_heard(summary: dict) -> None:
    assert summary.get("connected") is True, f"the Linux peer did not connect: {summary}"
    assert summary.get("connect_ms") is not None, f"the Linux peer reported no connect_ms: {summary}"
    packets = summary.get("packets_received") or 0
    assert packets > MIN_PACKETS, f"the Linux peer received {packets} RTP packets, expected > {MIN_PACKETS}: {summary}"
    frames = summary.get("audio_frames_received") or 0
    assert frames > MIN_FRAMES, f"the Linux peer decoded {frames} frames, expected > {MIN_FRAMES}: {summary}"
    assert summary.get("rms_dbfs", -120) > -60, f"the Linux peer heard only silence from Chromium: {summary}"
    assert (summary.get("packets_sent") or 0) > MIN_PACKETS, summary


def chromium_received(report: dict) -> list[str]:
    return [message["text"] for message in report.get("data_received", [])]


@pytest.mark.parametrize("caller", ["chromium", "linux"], ids=["chromium-calls-linux", "linux-calls-chromium"])
def test_chromium_and_linux_peer_interoperate(lab, caller):
    """Headless Chromium and the Linux peer in one call, in both roles: audio arrives both ways
    (Chromium's inbound-rtp has packets and energy; the Linux peer decoded frames above -60 dBFS),
    "hello-from-chromium" and "hello-from-linux" cross on the "chat" data channel, and when
    Chromium hangs up after its call the Linux peer's call ends on it (hangup_reason `remote`)."""
    server = lab.start_server()
    if caller == "chromium":
        linux = linux_peer(lab, lab.b, server, server.token("r1", "linux"), "linux-callee", tone=660,
                           send_data=FROM_LINUX, seconds=LINUX_SECONDS)
        server.wait_peers(1)
        chromium = chromium_peer(lab, lab.a, server, server.token("r1", "chromium"), "chromium-caller", call="linux",
                                 send_data=FROM_CHROMIUM, seconds=CALL_SECONDS)
    else:
        chromium = chromium_peer(lab, lab.a, server, server.token("r1", "chromium"), "chromium-callee",
                                 send_data=FROM_CHROMIUM, seconds=CALL_SECONDS)
        server.wait_peers(1, timeout=15)
        linux = linux_peer(lab, lab.b, server, server.token("r1", "linux"), "linux-caller", call="chromium",
                           tone=660, send_data=FROM_LINUX, seconds=LINUX_SECONDS)
    report = chromium.summary(CHROMIUM_TIMEOUT)
    try:
        summary = linux.summary(HANGUP_GRACE)
    except AssertionError as error:
        raise AssertionError(f"Chromium hung up, but the Linux peer's call did not end within {HANGUP_GRACE}s: "
                             f"{error}") from None

    assert report.get("role") == ("caller" if caller == "chromium" else "callee"), report
    assert_chromium_heard(report)
    assert_linux_heard(summary)
    assert FROM_LINUX in chromium_received(report), f"Chromium got no {FROM_LINUX!r}: {report['data_received']}"
    assert FROM_CHROMIUM in report.get("data_sent", []), report
    if report.get("resent"):
        # peer.js sends again only when Chromium's own stats show the first send never left it.
        warnings.warn(f"Chromium dropped {FROM_CHROMIUM!r} on its first send() and sent it again: "
                      f"{(report.get('stats') or {}).get('data_channels')}")
    try:
        assert_got_data(summary, "the Linux peer", FROM_CHROMIUM)
    except AssertionError as error:
        raise AssertionError(f"{error}; Chromium's data channels: {(report.get('stats') or {}).get('data_channels')}, "
                             f"resent: {report.get('resent')}") from None
    assert report.get("hangup_reason") == "local-hangup" and report.get("sent_hangup") is True, report
    # Chromium's hangup arrives signaled (`remote`) and as its DTLS close (`closed`): either may be first.
    assert summary.get("hangup_reason") in ("remote", "closed"), f"the Linux peer's call did not end on Chromium's hangup: {summary}"
    # Routed lab: Chromium reached the Linux peer directly, host candidate to host candidate, in the lab.
    pair = report["stats"].get("pair") or {}
    assert (pair.get("local") or {}).get("address") == lab.a.address, pair
    assert (pair.get("remote") or {}).get("address") == lab.b.address, pair
