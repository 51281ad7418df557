"""A call between two Linux peers (`calling-server peer`: the Swift CallingClient on CallingMedia's
GStreamer engine) survives a restart of the server mid-call, SIGTERM then SIGKILL, on the same
data dir and port (docs/protocol.md "Across a server restart", docs/sdk.md "What survives a
drop"): both SDKs reconnect and resume, the one back first finds the other `reconnecting` in its
`welcome`, the other's return is `peer-resumed`, no call ends, and the media (which never went
through the server) keeps flowing: the caller's call ends by its own `--seconds`, having heard the
callee's tone for nearly all of it.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

import netns
from peers import CONNECT_TIMEOUT, SUMMARY_TIMEOUT, assert_heard, linux_peer, linux_peer_missing

CALLER_SECONDS = 10


@pytest.fixture(autouse=True)
def linux_peer_cli():
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_linux_call_survives_a_server_restart(make_lab, how):
    lab = make_lab()
    data_dir = lab.workdir / "data-restart"
    data_dir.mkdir()
    server = netns.RestartableServer(lab, data_dir)
    lab.servers.append(server)
    server.start()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660, seconds=40)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       seconds=CALLER_SECONDS)
    alice.wait_for_output(r"connect-time peer=bob", CONNECT_TIMEOUT)
    time.sleep(1)  # media flowing both ways; the seats table (written every tick_ms) holds both

    if how == signal.SIGTERM:
        server.signal(signal.SIGTERM)
        assert server.wait(8) == 0, server.stderr_text()
    server.restart()  # SIGKILL (a no-op after the SIGTERM's exit), same data dir and port
    assert "seats restored" in server.stderr_text()
    for peer in (alice, bob):
        peer.wait_for_output(r"resumed peers=", 10)
    # The one back first hears the other's return.
    deadline = time.monotonic() + 5
    while not re.search(r"^peer-resumed (alice|bob)", alice.output() + bob.output(), re.M):
        assert time.monotonic() < deadline, f"no peer-resumed:\n{alice.tail()}\n{bob.tail()}"
        time.sleep(0.05)

    summary = alice.summary(SUMMARY_TIMEOUT)
    assert summary.get("hangup_reason") == "time", f"the call ended early: {summary}\n{alice.tail()}"
    # Nearly the whole call's audio: 50 frames a second, the restart included.
    assert_heard(summary, "alice", 660, min_frames=int(50 * CALLER_SECONDS * 0.7))
    for peer, other in ((alice, "bob"), (bob, "alice")):
        # Until the call's own end (the other side's leave after it is normal).
        output = peer.output().split("ending reason=")[0]
        assert f"peer-left {other}" not in output and "call-failed" not in output, peer.tail()
        assert not re.search(rf"hangup {other} reason=(peer_left|disconnected|failed)", output), peer.tail()
    # Exactly one of them came back to find the other still away.
    outputs = alice.output() + bob.output()
    assert "(reconnecting)" in outputs, (alice.tail(), bob.tail())
