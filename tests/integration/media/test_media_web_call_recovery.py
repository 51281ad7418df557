"""How the Linux app of an HTTP session (`calling-server peer --web-call`, `GStreamerWebCall`)
recovers, against an independent aiortc answering agent (docs/media.md "Reconnect", docs/protocol.md
"Call and session rules"):

- when the transport is lost it first restarts ICE on the same session (an offer sent by `PATCH`,
  answered by the agent on the same peer connection) within about a second of `disconnected`;
  a short cut of the media path between app and agent (both still reach the server) is
  recovered that way: one POST in the server's log, a `session renegotiated`, no second session;
- when the restart does not bring media back within `sessionRestartWindow` (a hung agent), it
  posts a new offer (the agent side ends a call after 5 s of `disconnected`), before closing the
  old connection, so the agent's `status replaced` reaches the old one;
- an agent that is connected but sends no audio (it still answers `ping`) causes no reconnect;
- `--dtmf` is sent once per call, not again after a reconnect;
- once the app hung up (`DELETE`) and the agent left, the call is `ended` and a new POST with the
  same token answers 404 `call_not_found`.
"""

from __future__ import annotations

import json
import re
import time

import pytest

import support
from peers import CONNECT_TIMEOUT, aiortc_peer, clean_env, linux_peer_missing

# From `media-disconnected` to the restart PATCH: the liveness ping's window (0.5 s) plus making the offer.
MAX_SINCE_DROP_MS = 1200
# `GStreamerWebCall.sessionRestartWindow`: how long the PATCH may take to bring media back before a new POST.
RESTART_WINDOW_MS = 2000


@pytest.fixture(autouse=True)
def linux_peer_cli():
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


def start_call(lab, agent_options: dict, app_seconds: int, dtmf: str | None = None):
    server = lab.start_server()
    agent = aiortc_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "aiortc-agent",
                        tone=660, answer_sessions=True, seconds=60, **agent_options)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    argv = [support.BINARY, "peer", "--web-call", call["call_id"], "--url", server.base_url_for(lab.a),
            "--token", call["access_token"], "--tone", "440", "--seconds", str(app_seconds)]
    if dtmf:
        argv += ["--dtmf", dtmf]
    app = lab.spawn(lab.a, argv, "linux-web-call", env=clean_env())
    app.wait_for_output(r"status connected", CONNECT_TIMEOUT)
    return server, agent, app, call


def since_drop(output: str, step: str = "reconnecting attempt=\\d+") -> list[int]:
    return [int(m) for m in re.findall(step + r" since_drop_ms=(\d+)", output)]


def server_log(server) -> str:
    return "".join(path.read_text(errors="replace") for path in (server.stdout_path, server.stderr_path) if path.exists())


def test_a_hung_agent_connection_is_replaced_post_first_and_dtmf_goes_once(make_lab):
    """The agent's first connection hangs 2 s in (no RTP, no `pong`): the app reconnects within a
    second of noticing, the old connection gets the agent's `status replaced` (the new offer was
    posted while it was open), the call goes on with the agent's tone, and `5` reached the agent once."""
    lab = make_lab(routed=True)
    _, agent, app, _ = start_call(lab, {"stall_after": 2}, app_seconds=12, dtmf="5")
    summary = app.summary(40)
    output = app.output()
    restarts = since_drop(output, "restarting")
    assert restarts and restarts[0] <= MAX_SINCE_DROP_MS, f"restart PATCH {restarts} ms after the drop: {app.tail()}"
    # The hung agent answers the PATCH but sends nothing: media stays away for the window.
    assert "restart-failed window" in output, app.tail()
    waits = since_drop(output)
    assert waits, f"no reconnect: {app.tail()}"
    print(f"restarting_since_drop_ms={restarts} since_drop_ms={waits}")
    assert waits[0] <= MAX_SINCE_DROP_MS + RESTART_WINDOW_MS, f"the new POST came {waits[0]} ms after the drop: {app.tail()}"
    assert summary["previous_replaced"] >= 1, f"the old connection never heard `status replaced`: {app.tail()}"
    assert summary["statuses"].count("connected") >= 2, summary
    assert summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    assert output.count("dtmf sent") == 1, app.tail()
    agent_summary = agent.summary(20)
    assert "status-replaced-sent" in agent.output(), agent.tail()
    dtmf = [m for m in agent_summary["control_received"] if isinstance(m, dict) and m.get("type") == "dtmf"]
    assert dtmf == [{"type": "dtmf", "digit": "5"}], agent_summary["control_received"]
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary


def test_a_silent_but_connected_agent_causes_no_reconnect(make_lab):
    """The agent stops sending audio 2 s in (no RTP at all) but its connection is fine and answers
    `ping`: 10 s of that (longer than the old 2 s + 5 s rule) end the call by the app's own time
    on its first connection."""
    lab = make_lab(routed=True)
    _, agent, app, _ = start_call(lab, {"silent_after": 2}, app_seconds=12)
    agent.wait_for_output(r"^silent ", 10)
    summary = app.summary(40)
    output = app.output()
    assert "state media-disconnected" in output, f"the silence went unnoticed by the watchdog: {app.tail()}"
    assert "reconnecting" not in output, app.tail()
    assert summary["reconnect_attempts"] == 0, summary
    assert summary["statuses"] == ["connected"], summary
    assert summary["hangup_reason"] == "time", summary


def set_media_cut(lab, cut: bool) -> None:
    """Drops every packet between peer hosts A and B (the media path); both still reach the server."""
    action = "add" if cut else "del"
    for host, prefix in ((lab.a, f"{lab.b.address}/32"), (lab.b, f"{lab.a.address}/32")):
        result = host.run(["ip", "route", action, "blackhole", prefix])
        if result.returncode != 0:
            raise AssertionError(f"{host.name}: ip route {action} blackhole {prefix}: {result.stderr.strip()}")


def test_a_short_media_cut_is_recovered_by_an_ice_restart_patch_on_the_same_session(make_lab):
    """The media path between app and agent is cut: the app reports `disconnected` (no RTP for
    `mediaStallTimeout`, 2 s), PATCHes an ICE-restart offer on its session within about a second of
    that, the agent answers it on the same peer connection, and once the path is back media flows
    on the same session: the server saw one POST and a renegotiation, no second session, the
    control channel never said `connected` again, and `--dtmf` went once."""
    lab = make_lab(routed=True)
    server, agent, app, _ = start_call(lab, {}, app_seconds=10, dtmf="5")
    time.sleep(1)
    cut_at = time.monotonic()
    set_media_cut(lab, True)
    try:
        app.wait_for_output(r"restarting since_drop_ms=", 10)
        cut_to_patch = time.monotonic() - cut_at
    finally:
        set_media_cut(lab, False)
    restored_at = time.monotonic()
    app.wait_for_output(r"restarted since_drop_ms=", 10)
    restored_to_media = time.monotonic() - restored_at
    summary = app.summary(40)
    output = app.output()
    patched = since_drop(output, "restarting")
    recovered = since_drop(output, "restarted")
    print(f"cut_to_patch_s={cut_to_patch:.2f} restarting_since_drop_ms={patched} restarted_since_drop_ms={recovered} "
          f"path_back_to_media_s={restored_to_media:.2f}")
    assert patched and patched[0] <= MAX_SINCE_DROP_MS, f"restarting since_drop_ms={patched}: {app.tail()}"
    assert "reconnecting" not in output, f"a new session was posted: {app.tail()}"
    assert summary["reconnect_attempts"] == 0 and summary["restarts_recovered"] >= 1, summary
    assert summary["statuses"] == ["connected"], summary
    assert summary["hangup_reason"] == "time", f"{summary}\n{app.tail()}"
    assert output.count("dtmf sent") == 1, app.tail()
    log = server_log(server)
    assert log.count("session started") == 1, "a second POST reached the server"
    assert "session renegotiated" in log, "the server saw no renegotiation PATCH"
    assert re.search(r"answer-sent .*renegotiation.*true", agent.output(), re.I), agent.tail()
    assert "replaced" not in agent.output(), agent.tail()
    assert summary["dominant_hz"] and abs(summary["dominant_hz"] - 660) < 33, summary


def test_after_the_app_hangs_up_and_the_agent_leaves_the_call_is_ended_and_a_new_post_is_a_404(make_lab):
    lab = make_lab(routed=True)
    server, agent, app, call = start_call(lab, {}, app_seconds=3)
    assert app.summary(20)["hangup_reason"] == "time", app.tail()
    agent.summary(20)  # the agent ends on the control channel's `hangup` and leaves the room
    key = server.apikey("probe")
    deadline = time.monotonic() + 5
    while True:
        status, _, body = server.http("GET", f"/v1/calls/{call['call_id']}", {"X-API-Key": key})
        record = json.loads(body)
        if record.get("state") == "ended" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 200 and record["state"] == "ended", record
    assert record["end_reason"] == "last_peer_left", record
    status, _, problem = server.post_json(f"/webrtc-proxy/{call['call_id']}/v1/webrtc/sessions",
                                          {"identity": "client", "sdp": "v=0\r\n"},
                                          {"Authorization": f"Bearer {call['access_token']}"})
    assert status == 404, problem
    assert problem["code"] == "call_not_found", problem
