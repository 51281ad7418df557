"""Calls across a network that drops out (docs/sdk.md "Media", call timing).

Two Linux peers (`calling-server peer`, the Swift SDK on GStreamer) call each other in a private
namespace lab; mid-call every packet to and from peer host A is dropped (`Lab.cut_a`: blackhole
routes on every host; the links stay up, as on a Wi-Fi that goes silent). The SDK notices the
silence within `MediaOptions.mediaStallTimeout` (2 s), reports the call `disconnected`, and a room
call then has `iceRestartWindow` (15 s) to come back (docs/sdk.md "What survives a drop"):

- a 3 s outage: the call survives and ends by the caller's own `--seconds`;
- an 8 s outage: still inside the window, the call survives too (it ended as `disconnected`
  before the window existed, under the 5 s `mediaDisconnectGrace` that now applies to HTTP
  sessions' calls only);
- an 18 s outage: longer than the window; both sides end the call as `disconnected` before the
  network is back, and neither is left `connected`;
- a signaling blip: the caller's WebSocket is destroyed mid-call (`ss -K` in its host; media, on
  UDP, untouched); it reconnects and resumes in the server's seat grace, the
  callee sees `peer-reconnecting`/`peer-resumed`, neither hangs up and both count more than 75 new
  RTP packets after it;
- an 8 s outage under an HTTP session's app (`--web-call`): its ICE-restart PATCH on the same
  session cannot reach the server, so it posts a new session with the same token (retrying while
  the network is down) and the call goes on;
- a short cut of the media path under a web call answered by the Linux agent: the app's restart
  PATCH is answered on the agent's same peer connection and the call goes on with one session;
- an HTTP session the server ended (the session DELETEd while the media path is cut): the app's
  restart PATCH gets 404 `session_not_found` and it falls back to posting a new session, which
  the agent (`--stay`) answers.
"""

from __future__ import annotations

import re
import time

import pytest

import support
from peers import (CONNECT_TIMEOUT, SUMMARY_TIMEOUT, clean_env, linux_peer, linux_peer_missing, received_packets,
                   wait_received_packets)


@pytest.fixture(autouse=True)
def linux_peer_cli():
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


def call_with_outage(lab, outage_seconds: float, caller_seconds: int):
    server = lab.start_server()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660, seconds=40)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       seconds=caller_seconds)
    alice.wait_for_output(r"connect-time peer=bob", CONNECT_TIMEOUT)
    time.sleep(1)  # media flowing both ways
    lab.cut_a(True)
    try:
        time.sleep(outage_seconds)
    finally:
        lab.cut_a(False)
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


def test_an_8_s_outage_is_inside_the_ice_restart_window(make_lab):
    lab = make_lab(routed=True)
    alice, bob = call_with_outage(lab, 8, caller_seconds=14)
    summary = alice.summary(SUMMARY_TIMEOUT)
    output = alice.output()
    assert "call-state disconnected peer=bob" in output, f"the outage went unnoticed: {alice.tail()}"
    assert output.rfind("call-state connected peer=bob") > output.find("call-state disconnected peer=bob"), \
        f"the call did not come back: {alice.tail()}"
    assert "call-failed" not in output, alice.tail()
    assert summary.get("hangup_reason") == "time", f"the call ended early: {summary}"
    assert "call-failed" not in bob.output(), bob.tail()


def test_an_outage_longer_than_the_window_ends_the_call_as_disconnected_on_both_sides(make_lab):
    """2 s to notice + 15 s window < 18 s: both sides give up while the network is still down."""
    lab = make_lab(routed=True)
    alice, bob = call_with_outage(lab, 18, caller_seconds=40)
    summary = alice.summary(SUMMARY_TIMEOUT)
    assert "call-failed bob call disconnected" in alice.output(), alice.tail()
    assert summary.get("hangup_reason") == "disconnected", summary
    bob_summary = bob.summary(SUMMARY_TIMEOUT)
    assert bob_summary.get("hangup_reason") == "disconnected", f"{bob_summary}\n{bob.tail()}"
    for peer, other in ((alice, "bob"), (bob, "alice")):
        output = peer.output()
        assert output.rfind(f"call-state connected peer={other}") < output.find(f"call-state disconnected peer={other}"), \
            f"connected again after the outage: {peer.tail()}"


def start_web_call(lab, app_seconds: int):
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, stay=True, seconds=60)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    argv = [support.BINARY, "peer", "--web-call", call["call_id"], "--url", server.base_url_for(lab.a),
            "--token", call["access_token"], "--tone", "440", "--seconds", str(app_seconds)]
    app = lab.spawn(lab.a, argv, "linux-web-call", env=clean_env())
    app.wait_for_output(r"status connected", CONNECT_TIMEOUT)
    return server, agent, app, call


def set_media_cut(lab, cut: bool) -> None:
    """Drops every packet between peer hosts A and B; both still reach the server."""
    action = "add" if cut else "del"
    for host, prefix in ((lab.a, f"{lab.b.address}/32"), (lab.b, f"{lab.a.address}/32")):
        result = host.run(["ip", "route", action, "blackhole", prefix])
        assert result.returncode == 0, f"{host.name}: ip route {action} blackhole {prefix}: {result.stderr.strip()}"


def server_log(server) -> str:
    return "".join(path.read_text(errors="replace") for path in (server.stdout_path, server.stderr_path) if path.exists())


def test_a_web_call_answered_by_the_linux_agent_recovers_a_short_media_cut_on_the_same_session(make_lab):
    """The Linux agent (the Swift SDK answering) gets the app's restart PATCH as an offer naming the
    session it answers and answers it on the same peer connection (no second `incoming`); with the
    path restored the call goes on with one session: one `session started`, a `session
    renegotiated`, no new POST, and the agent's call never failed."""
    lab = make_lab(routed=True)
    server, agent, app, _ = start_web_call(lab, app_seconds=8)
    time.sleep(1)
    set_media_cut(lab, True)
    try:
        app.wait_for_output(r"restarting since_drop_ms=", 10)
    finally:
        set_media_cut(lab, False)
    app.wait_for_output(r"restarted since_drop_ms=", 10)
    summary = app.summary(SUMMARY_TIMEOUT)
    output = app.output()
    print("\n".join(line for line in output.splitlines() if line.startswith(("restart", "reconnecting"))))
    assert "reconnecting" not in output, app.tail()
    assert summary["statuses"] == ["connected"] and summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    log = server_log(server)
    assert log.count("session started") == 1 and "session renegotiated" in log, log[-2000:]
    agent_output = agent.output()
    assert agent_output.count("incoming ") == 1, agent.tail()
    assert "call-failed" not in agent_output, agent.tail()
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary


def test_a_web_call_whose_session_the_server_ended_falls_back_from_the_patch_to_a_new_post(make_lab):
    """The media path is cut and the session is DELETEd meanwhile (the agent gets `hangup`, ends
    that call and stays): the app's restart PATCH is refused with 404 `session_not_found`, it posts
    a new session with the same token, the agent answers it, and once the path is back the call
    goes on under the new session (`status connected` again)."""
    lab = make_lab(routed=True)
    server, agent, app, call = start_web_call(lab, app_seconds=12)
    session = re.search(r"web-call started session=(\S+)", app.output()).group(1)
    time.sleep(1)
    set_media_cut(lab, True)
    try:
        status, _, _ = server.http("DELETE", f"/webrtc-proxy/{call['call_id']}/v1/webrtc/sessions/{session}",
                                   {"Authorization": f"Bearer {call['access_token']}"})
        assert status == 204
        app.wait_for_output(r"reconnecting attempt=1 ", 10)
    finally:
        set_media_cut(lab, False)
    summary = app.summary(SUMMARY_TIMEOUT)
    output = app.output()
    print("\n".join(line for line in output.splitlines() if line.startswith(("restart", "reconnecting"))))
    assert "restarting since_drop_ms=" in output, app.tail()
    assert "restart-failed http 404 session_not_found" in output, app.tail()
    assert output.index("restart-failed") < output.index("reconnecting attempt=1"), app.tail()
    assert summary["statuses"].count("connected") >= 2, f"no second session: {app.tail()}"
    assert summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary
    assert server_log(server).count("session started") == 2, "the fallback POST did not reach the server"
    assert agent.running(), f"the agent (--stay) should still be serving: {agent.tail()}"


def test_a_signaling_blip_keeps_the_call(make_lab):
    lab = make_lab(routed=True)
    server = lab.start_server()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660, seconds=40,
                     stats_seconds=1)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       seconds=11, stats_seconds=1)
    for peer in (alice, bob):
        wait_received_packets(peer, 50, CONNECT_TIMEOUT, "audio from the other side")
    before = {peer.label: received_packets(peer) for peer in (alice, bob)}
    marks = {peer.label: len(peer.output()) for peer in (alice, bob)}

    lab.kill_signaling(lab.a, server)
    bob.wait_for_output(r"^peer-reconnecting alice", 5)
    alice.wait_for_output(r"^state connected .*resumed=", 10)
    bob.wait_for_output(r"^peer-resumed alice", 5)
    time.sleep(2)  # media keeps flowing after the resume
    for peer in (alice, bob):
        wait_received_packets(peer, before[peer.label] + 75, 3, "75 more packets after the blip")
        since = peer.output()[marks[peer.label]:]
        for line in ("hangup ", "call-failed", "peer-left", "call-state disconnected"):
            assert f"\n{line}" not in since, f"{peer.label}: {line!r} after the blip:\n{since[-3000:]}"
    summary = alice.summary(SUMMARY_TIMEOUT)
    assert summary.get("hangup_reason") == "time", f"the call ended early: {summary}"
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary


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
            "--token", call["access_token"], "--tone", "440", "--seconds", "22"]
    app = lab.spawn(lab.a, argv, "linux-web-call", env=clean_env())
    app.wait_for_output(r"status connected", CONNECT_TIMEOUT)
    time.sleep(1)
    lab.cut_a(True)
    try:
        time.sleep(8)
    finally:
        lab.cut_a(False)
    summary = app.summary(40)
    print("\n".join(line for line in app.output().splitlines() if line.startswith(("restart", "reconnecting"))))
    assert summary["statuses"].count("connected") >= 2, f"no second session: {app.tail()}"
    assert summary["restart_attempts"] >= 1 and "restart-failed" in app.output(), app.tail()
    assert summary["reconnect_attempts"] >= 1, summary
    assert summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary
    assert agent.running(), f"the agent (--stay) should still be serving: {agent.tail()}"
