"""The Linux peer (`calling-server peer`, GStreamer webrtcbin) in real calls (issue #7).

Every test here runs the repository's own WebRTC peer in a private network namespace and checks
what arrived on the other side: the tone's pitch (±5 %), enough audio frames, data-channel
messages both ways, and that a hangup ends the other side's call promptly. Against itself (direct,
and forced through a real coturn), against aiortc in both roles, and as the agent that answers a
webrtc-proxy HTTP session (aiortc's session_caller.py as the app).

Skipped while `calling-server peer --help` exits non-zero, i.e. until the peer CLI lands. Its
contract: `calling-server peer --url ws://HOST:PORT/v1/ws --token T [--call PEER] [--tone HZ]
[--play in.wav] [--record out.wav] [--echo] [--send-data TEXT] [--answer-sessions] [--relay-only]
[--seconds N]`; it answers offers without --call and ends with one `summary {json}` line (connected,
connect_ms, packets_sent, packets_received, audio_frames_received, rms_dbfs, dominant_hz,
data_received, data_sent, control_received, hangup_reason).
"""

from __future__ import annotations

import json
import math
import struct
import wave

import pytest

import support
from peers import (CALLEE_SECONDS, HANGUP_GRACE, SECONDS, SUMMARY_TIMEOUT, aiortc_peer, assert_got_data,
                   assert_heard, assert_relayed_through, assert_sent_data, clean_env, linux_peer, linux_peer_missing,
                   session_caller)


@pytest.fixture(autouse=True)
def linux_peer_cli():
    """Skips (before any namespace is built) while the binary has no working `peer` command."""
    reason = linux_peer_missing()
    if reason is not None:
        pytest.skip(reason)


def control_messages(summary: dict) -> list:
    """control_received as JSON objects (the CLI may report them parsed or as the raw text)."""
    messages = []
    for message in summary.get("control_received") or []:
        if isinstance(message, str):
            try:
                message = json.loads(message)
            except ValueError:
                pass
        messages.append(message)
    return messages


# How each peer reports a call the other side ended (docs/media.md; aiortc_peer.py). A Linux peer
# names whichever of the other side's two hangup signals reached it first: its signaled hangup
# (`remote`) or the DTLS close of its peer connection (`closed`).
REMOTE_HANGUP = {"linux": {"remote", "closed"}, "aiortc": {"remote-hangup", "peer-left"}}


def assert_ended_by_hangup(proc, label: str, kind: str = "linux") -> dict:
    """The callee's call ends promptly once the caller hung up (its own --seconds are far longer),
    and it says the other side ended it; returns the callee's summary."""
    try:
        summary = proc.summary(HANGUP_GRACE)
    except AssertionError as error:
        raise AssertionError(f"the caller hung up, but {label}'s call did not end within {HANGUP_GRACE}s: {error}") \
            from None
    assert summary.get("hangup_reason") in REMOTE_HANGUP[kind], \
        f"{label} ended for {summary.get('hangup_reason')!r}, not the caller's hangup: {summary}"
    return summary


def test_two_linux_peers_call_each_other(lab):
    """Linux peer ↔ Linux peer through calling-server: 440 Hz and 660 Hz both ways, a data message
    each way, and the callee's call ends when the caller hangs up."""
    server = lab.start_server()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660,
                     send_data="hello from linux bob", seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       send_data="hello from linux alice", seconds=SECONDS)
    a = alice.summary(SUMMARY_TIMEOUT)
    b = assert_ended_by_hangup(bob, "linux-bob")

    assert_heard(a, "linux-alice", 660)
    assert_heard(b, "linux-bob", 440)
    assert_got_data(a, "linux-alice", "hello from linux bob")
    assert_got_data(b, "linux-bob", "hello from linux alice")
    assert_sent_data(a, "linux-alice", "hello from linux alice")
    assert_sent_data(b, "linux-bob", "hello from linux bob")
    for summary, who in ((a, "linux-alice"), (b, "linux-bob")):
        assert (summary.get("packets_sent") or 0) > 0 and (summary.get("packets_received") or 0) > 0, \
            f"{who}: {summary}"
    # The engine reported the remote audio track (CallingEvent.track, docs/sdk.md "Events").
    assert "track audio bob-audio-1 peer=bob" in alice.output(), alice.tail()


def test_two_linux_peers_relay_only_through_coturn(make_lab):
    """--relay-only with the coturn URL and credentials from GET /v1/ice, in a lab whose server host
    does not forward between the peer hosts: a connection is only possible through coturn's
    relays, so connecting at all proves the relay path; coturn's log shows both peers allocating
    and opening their relays. Audio and data still arrive both ways."""
    lab = make_lab(routed=False)
    turn = lab.start_turn()
    server = lab.start_server(turn=turn)
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-bob", tone=660,
                     send_data="relayed linux bob", seconds=CALLEE_SECONDS, relay_only=True)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-alice", call="bob", tone=440,
                       send_data="relayed linux alice", seconds=SECONDS, relay_only=True)
    a = alice.summary(SUMMARY_TIMEOUT)
    b = assert_ended_by_hangup(bob, "linux-bob")

    assert_heard(a, "linux-alice", 660)
    assert_heard(b, "linux-bob", 440)
    assert_got_data(a, "linux-alice", "relayed linux bob")
    assert_got_data(b, "linux-bob", "relayed linux alice")
    for summary, who in ((a, "alice"), (b, "bob")):
        types = summary.get("local_candidate_types")
        assert types and set(types) == {"relay"}, f"linux-{who} used local candidates other than relay: {summary}"
        assert_relayed_through(turn, who)


@pytest.mark.parametrize("caller_kind", ["aiortc", "linux"], ids=["aiortc-calls-linux", "linux-calls-aiortc"])
def test_aiortc_and_linux_peer_interoperate(lab, caller_kind):
    """aiortc and the Linux peer in one call, in both roles (offerer and answerer): each hears the
    other's tone, data flows both ways, and the callee's call ends on the caller's hangup."""
    server = lab.start_server()
    start = {"aiortc": aiortc_peer, "linux": linux_peer}
    callee_kind = "linux" if caller_kind == "aiortc" else "aiortc"
    caller_extra = {"hangup": True} if caller_kind == "aiortc" else {}
    callee = start[callee_kind](lab, lab.b, server, server.token("r1", "callee"), f"{callee_kind}-callee", tone=660,
                                send_data=f"from {callee_kind} callee", seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    caller = start[caller_kind](lab, lab.a, server, server.token("r1", "caller"), f"{caller_kind}-caller",
                                call="callee", tone=440, send_data=f"from {caller_kind} caller", seconds=SECONDS,
                                **caller_extra)
    c = caller.summary(SUMMARY_TIMEOUT)
    e = assert_ended_by_hangup(callee, f"{callee_kind}-callee", callee_kind)

    assert_heard(c, f"{caller_kind}-caller", 660)
    assert_heard(e, f"{callee_kind}-callee", 440)
    assert_got_data(c, f"{caller_kind}-caller", f"from {callee_kind} callee")
    assert_got_data(e, f"{callee_kind}-callee", f"from {caller_kind} caller")


def test_session_caller_reaches_a_linux_agent_over_http(lab):
    """An HTTP session to the Linux peer as the agent (--answer-sessions, role agent): the aiortc app
    creates the call, POSTs its offer over HTTP and gets a 201 answer from the Linux peer; 440 Hz
    app→agent and 660 Hz agent→app; the control channel says `status connected`, answers the ping
    with a pong echoing its ts, and the app's dtmf and hangup reach the agent, which ends the session
    (a PATCH then answers 404) before the app's DELETE (204)."""
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    caller = session_caller(lab, lab.a, server, "app", api_key=server.apikey(), room="support-1", agent="agent-1",
                            tone=440, seconds=SECONDS)
    c = caller.summary(SUMMARY_TIMEOUT)
    g = assert_ended_by_hangup(agent, "linux-agent")

    assert c["post_status"] == 201, c
    assert_heard(c, "app", 660)
    assert_heard(g, "linux-agent", 440)
    assert c["status_messages"][:1] == ["connected"], c["control_received"]
    assert c["pong_ok"] is True, c["control_received"]
    received = control_messages(g)
    assert {"type": "ping", "ts": c["control_sent"][0]["ts"]} in received, received
    assert {"type": "dtmf", "digit": "5"} in received, received
    assert {"type": "hangup"} in received, received
    # And by its effect, seen from the app: the agent ended the session (a PATCH answered 404)
    # before the app's DELETE.
    assert c["agent_ended_session"] is True, f"the agent did not end the session on the control hangup: {c}"
    assert c["delete_status"] == 204, c
    assert c["errors"] == [], c


def test_linux_web_call_client_reaches_a_linux_agent_over_http(lab):
    """The Linux peer as the *app* of an HTTP session (`--web-call`: the Swift SDK's WebCallClient
    with CallingMedia's GStreamerWebCall) calling the Linux peer as the agent: the call is created
    with the API key, the offer goes out over HTTP with its candidates, 440 Hz app→agent and 660 Hz
    agent→app, `status connected` on the control channel, the ping answered with a pong, the dtmf
    and the control hangup reach the agent, whose call ends as the caller hung up."""
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    argv = [support.BINARY, "peer", "--web-call", call["call_id"], "--url", server.base_url_for(lab.a),
            "--token", call["access_token"], "--tone", "440", "--dtmf", "5", "--seconds", str(SECONDS)]
    app = lab.spawn(lab.a, argv, "linux-web-call", env=clean_env())
    a = app.summary(SUMMARY_TIMEOUT)
    g = assert_ended_by_hangup(agent, "linux-agent")

    assert a["statuses"][:1] == ["connected"], a
    assert a.get("pong_rtt_ms") is not None, f"no pong: {app.tail()}"
    assert a["hangup_reason"] == "time", a
    assert_heard(a, "linux-web-call", 660)
    assert_heard(g, "linux-agent", 440)
    received = control_messages(g)
    assert any(m.get("type") == "ping" for m in received if isinstance(m, dict)), received
    assert {"type": "dtmf", "digit": "5"} in received, received
    assert {"type": "hangup"} in received, received


def write_tone_wav(path, hz: float, seconds: float, rate: int = 16000) -> None:
    """A 16-bit mono WAV at `rate` (not 48 kHz: the peer must resample what it plays)."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * hz * i / rate)))
                                 for i in range(int(rate * seconds))))


def voiced_pitch(path) -> tuple[float, float]:
    """(seconds of non-silent audio, its pitch from zero crossings) of a 16-bit mono WAV."""
    with wave.open(str(path), "rb") as recording:
        assert (recording.getnchannels(), recording.getsampwidth()) == (1, 2), "not 16-bit mono"
        rate = recording.getframerate()
        samples = struct.unpack(f"<{recording.getnframes()}h", recording.readframes(recording.getnframes()))
    voiced, crossings, previous = 0, 0, 0
    frame = rate // 50
    for start in range(0, len(samples), frame):
        chunk = samples[start:start + frame]
        if math.sqrt(sum(x * x for x in chunk) / max(1, len(chunk))) < 100:
            continue
        voiced += len(chunk)
        for sample in chunk:
            crossings += (previous < 0) != (sample < 0)
            previous = sample
    return voiced / rate, (crossings / 2 / (voiced / rate) if voiced else 0.0)


def test_linux_peer_plays_a_wav_file_records_what_it_hears_and_echoes(lab):
    """--play sends a 16 kHz WAV file (resampled to Opus's 48 kHz) once; the far end, with --echo
    --record, writes what it hears to a WAV file and sends it back: the recording holds the file's
    3 s at its pitch, and the caller hears its own 523 Hz tone back. Messages on the unreliable,
    unordered channel `state` arrive and are echoed too."""
    played = lab.workdir / "in-523hz.wav"
    recorded = lab.workdir / "heard.wav"
    write_tone_wav(played, 523.25, 3.0)
    server = lab.start_server()
    bob = linux_peer(lab, lab.b, server, server.token("r1", "bob"), "linux-echo", echo=True, record=recorded,
                     seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    alice = linux_peer(lab, lab.a, server, server.token("r1", "alice"), "linux-player", call="bob", play=played,
                       send_unreliable="cursor 1,2", seconds=SECONDS)
    a = alice.summary(SUMMARY_TIMEOUT)
    b = assert_ended_by_hangup(bob, "linux-echo")

    assert_heard(b, "linux-echo", 523.25)
    assert_heard(a, "linux-player", 523.25)  # its own file, echoed
    seconds, pitch = voiced_pitch(recorded)
    assert 2.7 <= seconds <= 3.3, f"the recording holds {seconds:.2f} s of sound, the file 3 s"
    assert abs(pitch - 523.25) <= 0.02 * 523.25, f"the recording's pitch is {pitch:.1f} Hz, the file's 523.25 Hz"
    assert (b.get("data_by_label") or {}).get("state") == ["cursor 1,2"], b
    assert (a.get("data_by_label") or {}).get("state") == ["cursor 1,2"], f"the echo did not come back: {a}"


def test_linux_agent_with_stay_answers_one_session_caller_after_another(lab):
    """An agent or voice bot serves call after call: with --stay the Linux peer keeps answering
    after the first caller hangs up, and the second caller gets a full call too (answer, pong,
    the agent's tone)."""
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-2", "agent-2", role="agent"), "linux-agent-stay",
                       tone=660, answer_sessions=True, stay=True, seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    key = server.apikey()
    callers = []
    for index in range(2):
        caller = session_caller(lab, lab.a, server, f"app-{index}", api_key=key, room="support-2", agent="agent-2",
                                tone=440, seconds=2)
        callers.append(caller.summary(SUMMARY_TIMEOUT))
    g = agent.summary(CALLEE_SECONDS + SUMMARY_TIMEOUT)

    for index, c in enumerate(callers):
        assert c["post_status"] == 201, f"caller {index}: {c}"
        assert c["pong_ok"] is True, f"caller {index}: {c['control_received']}"
        assert_heard(c, f"app-{index}", 660, min_frames=50)
    assert g["calls"] == 2, g
    assert "ending reason=time" in agent.output(), f"the agent should have stayed until --seconds:\n{agent.tail()}"


def last_line(proc) -> str:
    lines = [line for line in proc.output().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def web_call(lab, server, key: str, room: str, agent: str, label: str, seconds: float):
    status, _, call = server.post_json("/v1/calls", {"room_id": room, "agent_id": agent}, {"X-API-Key": key})
    assert status == 201, call
    argv = [support.BINARY, "peer", "--web-call", call["call_id"], "--url", server.base_url_for(lab.a),
            "--token", call["access_token"], "--tone", "440", "--seconds", str(seconds)]
    return lab.spawn(lab.a, argv, label, env=clean_env())


def test_the_summary_is_the_last_line_of_every_web_call_that_ends_on_seconds(lab):
    """`--help` and docs/media.md promise `summary {json}` as the last line. A web call ending on
    --seconds hangs up, and its own hangup's `ended hangup` used to come after the summary (12 of
    15 runs); every run here must end on the summary, the agent's (--seconds, --stay) too."""
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-3", "agent-3", role="agent"), "linux-agent-stay",
                       tone=660, answer_sessions=True, stay=True, seconds=CALLEE_SECONDS + 6)
    server.wait_peers(1)
    key = server.apikey()
    for index in range(4):
        app = web_call(lab, server, key, "support-3", "agent-3", f"linux-web-call-{index}", 1.5)
        summary = app.summary(SUMMARY_TIMEOUT)
        assert summary["hangup_reason"] == "time", summary
        assert "ended hangup" in app.output(), f"run {index}: the hangup was not reported:\n{app.tail()}"
        assert last_line(app).startswith("summary {"), f"run {index} did not end on its summary:\n{app.tail()}"
    agent.summary(CALLEE_SECONDS + 6 + SUMMARY_TIMEOUT)
    assert last_line(agent).startswith("summary {"), f"the agent did not end on its summary:\n{agent.tail()}"


def test_a_web_call_the_agent_ends_reports_the_audio_that_flowed(lab):
    """The agent's side ends the call (its --seconds run out first): the app's summary says so and
    still counts the packets and the tone it received, read before the peer connection closed
    (it used to report 0 packets and -120 dBFS)."""
    server = lab.start_server()
    agent = linux_peer(lab, lab.b, server, server.token("support-4", "agent-4", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, seconds=6)
    server.wait_peers(1)
    app = web_call(lab, server, server.apikey(), "support-4", "agent-4", "linux-web-call", CALLEE_SECONDS)
    a = app.summary(SUMMARY_TIMEOUT)
    agent.summary(SUMMARY_TIMEOUT)

    assert a["hangup_reason"] == "ended", f"the agent's end was not seen as such: {a}"
    assert (a.get("packets_received") or 0) > 0 and (a.get("packets_sent") or 0) > 0, a
    assert a["rms_dbfs"] > -60, a
    assert_heard(a, "linux-web-call", 660)
    assert last_line(app).startswith("summary {"), app.tail()
