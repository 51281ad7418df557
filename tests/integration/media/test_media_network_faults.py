"""Calls across a network that drops out (docs/sdk.md "Media", call timing).

Two Linux peers (`calling-server peer`, the Swift SDK on GStreamer) call each other in a private
namespace lab; mid-call every packet to and from peer host A is dropped (blackhole routes on
every host; the links stay up, as on a Wi-Fi that goes silent). The SDK notices the silence within `MediaOptions.mediaStallTimeout` (2 s), reports the
call `disconnected`, and gives it `mediaDisconnectGrace` (5 s) to come back:

- a 3 s outage: the call survives and ends by the caller's own `--seconds`;
- an 8 s outage: the call ends as `disconnected` (retryable) before the network is back.
"""

from __future__ import annotations

import time

import pytest

from peers import CONNECT_TIMEOUT, SUMMARY_TIMEOUT, linux_peer, linux_peer_missing


@pytest.fixture(autouse=True)
def linux_peer_cli():
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


def set_loss(lab, dropping: bool) -> None:
    """Drops (or passes again) every packet to and from peer host A: blackhole routes more specific
    than the lab's own, on A (to the server host and B's subnet), on the server host (to A) and on
    B (to A's subnet). The links and the lab's routes stay as they are."""
    action = "add" if dropping else "del"
    for host, prefix in ((lab.a, f"{lab.a.gateway}/32"), (lab.a, "10.231.2.0/24"),
                         (lab.server_host, f"{lab.a.address}/32"), (lab.b, "10.231.1.0/24")):
        result = host.run(["ip", "route", action, "blackhole", prefix])
        if result.returncode != 0:
            raise AssertionError(f"{host.name}: ip route {action} blackhole {prefix}: {result.stderr.strip()}")


def call_with_outage(lab, outage_seconds: float, caller_seconds: int):
    server = lab.start_server()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660, seconds=40)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       seconds=caller_seconds)
    alice.wait_for_output(r"connect-time peer=bob", CONNECT_TIMEOUT)
    time.sleep(1)  # media flowing both ways
    set_loss(lab, True)
    try:
        time.sleep(outage_seconds)
    finally:
        set_loss(lab, False)
    return alice, bob


def test_a_3_s_outage_mid_call_is_survived(make_lab):
    lab = make_lab(routed=True)
    alice, bob = call_with_outage(lab, 3, caller_seconds=12)
    summary = alice.summary(SUMMARY_TIMEOUT)
    output = alice.output()
    assert "call-state disconnected peer=bob" in output, f"the outage went unnoticed: {alice.tail()}"
    assert output.rfind("call-state connected peer=bob") > output.find("call-state disconnected peer=bob"), \
        f"the call did not come back: {alice.tail()}"
    assert "call-failed" not in output, alice.tail()
    assert summary.get("hangup_reason") == "time", f"the call ended early: {summary}"
    assert "call-failed" not in bob.output(), bob.tail()


def test_an_8_s_outage_ends_the_call_as_disconnected(make_lab):
    lab = make_lab(routed=True)
    alice, _ = call_with_outage(lab, 8, caller_seconds=40)
    summary = alice.summary(SUMMARY_TIMEOUT)
    output = alice.output()
    assert "call-failed bob call disconnected" in output, alice.tail()
    assert summary.get("hangup_reason") == "disconnected", summary
