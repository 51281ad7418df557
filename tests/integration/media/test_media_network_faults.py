"""Calls across a network that drops out (docs/sdk.md "Media", call timing).

Two Linux peers (`calling-server peer`, the Swift SDK on GStreamer) call each other in a private
namespace lab; mid-call every packet to and from peer host A is dropped (blackhole routes on
every host; the links stay up, as on a Wi-Fi that goes silent). The SDK notices the silence within `MediaOptions.mediaStallTimeout` (2 s), reports the
call `disconnected`, and gives it `mediaDisconnectGrace` (5 s) to come back:

- a 3 s outage: the call survives and ends by the caller's own `--seconds`;
- an 8 s outage: the call ends as `disconnected` (retryable) before the network is back;
- the same 8 s outage under an HTTP session's app (`--web-call`): it starts posting a new session
  with the same token as soon as the connection is `disconnected` (retrying while the network is
  down) and the call goes on.
"""

from __future__ import annotations

import time

import pytest

import support
from peers import CONNECT_TIMEOUT, SUMMARY_TIMEOUT, clean_env, linux_peer, linux_peer_missing


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


def test_a_web_call_reconnects_with_a_new_session_after_a_long_outage(make_lab):
    """The Linux app of an HTTP session (`--web-call`) loses its network for 8 s: once `disconnected`
    it posts a new peer connection with the same token (WebCallClient.reconnect), retrying with backoff
    while the network is still down; the agent (`--stay`) answers the new session, `status connected`
    comes again and the call ends by the app's own time, with the agent's tone heard afterwards."""
    lab = make_lab(routed=True)
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, stay=True, seconds=60)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    argv = [support.BINARY, "peer", "--web-call", call["call_id"], "--url", server.base_url_for(lab.a),
            "--token", call["access_token"], "--tone", "440", "--seconds", "26"]
    app = lab.spawn(lab.a, argv, "linux-web-call", env=clean_env())
    app.wait_for_output(r"status connected", CONNECT_TIMEOUT)
    time.sleep(1)
    set_loss(lab, True)
    try:
        time.sleep(8)
    finally:
        set_loss(lab, False)
    summary = app.summary(40)
    assert summary["statuses"].count("connected") >= 2, f"no second session: {app.tail()}"
    assert summary["reconnect_attempts"] >= 1, summary
    assert summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary
    assert agent.running(), f"the agent (--stay) should still be serving: {agent.tail()}"
