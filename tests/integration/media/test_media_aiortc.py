"""Real WebRTC media through calling-server's signaling, with aiortc peers only (issue #7).

These prove the harness and the server's part of a call with a WebRTC stack that owes nothing to
this repository: two aiortc processes in their own network namespaces find each other through a
real calling-server (offer/answer/candidates relayed over /v1/ws), then carry Opus audio and a
data channel directly, or only through a real coturn when the network leaves no other path; an
aiortc "app" calls an aiortc agent over the webrtc-proxy HTTP session API. Tones are measured on
the receiving side, so "connected" alone never passes a test: the right audio must arrive.
"""

from __future__ import annotations

from peers import (CALLEE_SECONDS, HANGUP_GRACE, SECONDS, SUMMARY_TIMEOUT, aiortc_peer, assert_got_data,
                   assert_heard, assert_relayed_through, session_caller, signaling_frames, wait_relayed_packets)


def test_two_aiortc_peers_call_each_other_through_the_server(lab):
    """alice (host A) calls bob (host B): 440 Hz one way, 660 Hz the other, a data message each
    way, alice hangs up with `data {kind:"hangup"}` and bob's call ends on it. This is the
    server-protocol interop test: everything the peers know of each other came through /v1/ws."""
    server = lab.start_server()
    bob = aiortc_peer(lab, lab.b, server, server.token("r1", "bob"), "bob", tone=660, send_data="hello from bob",
                      seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    alice = aiortc_peer(lab, lab.a, server, server.token("r1", "alice"), "alice", call="bob", tone=440,
                        send_data="hello from alice", seconds=SECONDS, hangup=True)
    a, b = alice.summary(SUMMARY_TIMEOUT), bob.summary(HANGUP_GRACE)

    assert_heard(a, "alice", 660)
    assert_heard(b, "bob", 440)
    assert_got_data(a, "alice", "hello from bob")
    assert_got_data(b, "bob", "hello from alice")
    assert a["hangup_reason"] == "local-hangup", a
    assert b["hangup_reason"] == "remote-hangup", f"bob's call did not end on alice's hangup: {b}"
    # Routed lab: the peers reach each other directly, host candidate to host candidate.
    assert a["selected_pair"] and a["selected_pair"]["local"] == "host", a["selected_pair"]
    relayed = signaling_frames(server)
    assert relayed["offer"] == 1 and relayed["answer"] == 1, relayed
    assert relayed["data"] >= 1, f"the hangup did not go through the server: {relayed}"


def test_aiortc_relay_only_call_through_coturn(make_lab):
    """Forced relay: the server host does not forward between the peer hosts, so alice and bob can
    only reach each other through coturn's relays on the server host, and both use iceTransportPolicy
    relay with the TURN credentials that GET /v1/ice issued. Audio and data still arrive both ways,
    the nominated pair is relay↔relay, and coturn itself counts the media it relayed."""
    lab = make_lab(routed=False)
    turn = lab.start_turn()
    server = lab.start_server(turn=turn)
    bob = aiortc_peer(lab, lab.b, server, server.token("r1", "bob"), "bob", tone=660, send_data="relayed bob",
                      seconds=CALLEE_SECONDS, relay_only=True)
    server.wait_peers(1)
    alice = aiortc_peer(lab, lab.a, server, server.token("r1", "alice"), "alice", call="bob", tone=440,
                        send_data="relayed alice", seconds=SECONDS, hangup=True, relay_only=True)
    a, b = alice.summary(SUMMARY_TIMEOUT), bob.summary(HANGUP_GRACE)

    assert_heard(a, "alice", 660)
    assert_heard(b, "bob", 440)
    assert_got_data(a, "alice", "relayed bob")
    assert_got_data(b, "bob", "relayed alice")
    for summary, who in ((a, "alice"), (b, "bob")):
        pair = summary["selected_pair"]
        assert pair and pair["local"] == "relay" and pair["remote"] == "relay", f"{who}: {pair}"
        assert_relayed_through(turn, who)
    # Seconds of 20 ms audio packets each way went through the relays (coturn's own counters).
    for who in ("alice", "bob"):
        received, sent = wait_relayed_packets(turn, who, minimum=100)
        assert received >= 100 and sent >= 100, f"coturn relayed {received}/{sent} packets for {who}"


def test_session_caller_reaches_an_aiortc_agent_over_http(lab):
    """The native web call flow end to end, aiortc on both sides: the backend creates the call with an
    API key, the app POSTs its offer to /webrtc-proxy/{call_id}/v1/webrtc/sessions, the agent in the
    room answers over /v1/ws (session_id echoed), and media flows: 440 Hz app→agent, 660 Hz
    agent→app. On the `control` channel the app gets `status connected`, a `pong` echoing its
    ping's ts, and its dtmf, mute and hangup reach the agent, which ends the session (a PATCH then
    answers 404) before the app's DELETE (204)."""
    server = lab.start_server()
    agent = aiortc_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "agent", tone=660,
                        answer_sessions=True, seconds=CALLEE_SECONDS)
    server.wait_peers(1)
    caller = session_caller(lab, lab.a, server, "app", api_key=server.apikey(), room="support-1", agent="agent-1",
                            tone=440, seconds=SECONDS, mute=True)
    c, g = caller.summary(SUMMARY_TIMEOUT), agent.summary(HANGUP_GRACE)

    assert c["post_status"] == 201, c
    assert c["errors"] == [], c
    assert_heard(c, "app", 660)
    assert_heard(g, "agent", 440)
    assert c["status_messages"][:1] == ["connected"], c["status_messages"]
    assert c["pong_ok"] is True, c["control_received"]
    assert g["session_id"] == c["session_id"], (g["session_id"], c["session_id"])
    kinds = [m.get("type") for m in g["control_received"] if isinstance(m, dict)]
    assert kinds == ["ping", "dtmf", "mute", "hangup"], g["control_received"]
    assert {"type": "dtmf", "digit": "5"} in g["control_received"]
    assert g["hangup_reason"] == "control-hangup", g
    assert c["agent_ended_session"] is True, f"the agent did not end the session on the control hangup: {c}"
    assert c["delete_status"] == 204, c
