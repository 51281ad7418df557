"""Calls from the demo page and the SDK in real Chromium, with real audio (issue #11).

Chromium (fake microphone: a beep) runs on peer host A of the lab, the repository's Linux peer
(`calling-server peer`, GStreamer) on peer host B, calling-server on the server host between them
(browser_lab.py). Each side checks what it received itself: the browser's getStats() (inbound-rtp
audio packets and energy), the Linux peer's summary and its --record WAV (not silent).

Data both ways: the SDK's `sendData` is signaling (`data` frames through the server, which the
Linux peer does not surface), and the SDK opens no data channel of its own (docs/sdk.md, "Client
SDK compatibility": no data channels; `connection(peerId)` hands out the RTCPeerConnection for that).
So the page gets a small instrumented RTCPeerConnection (installed before it connects; the SDK
takes `globalThis.RTCPeerConnection` when the client is created) that, as the Linux peer's
`--send-data` does, sends one text on the reliable channel "chat" when it opens: created before
the offer when the browser calls, taken from `datachannel` when the Linux peer calls. Browser ↔
browser, `sendData` itself is checked (test_browser_call_and_chat_screenshots).
"""

from __future__ import annotations

import json
import time

from browser_lab import wav_rms
from peers import HANGUP_GRACE, linux_peer

FROM_BROWSER = "hello-from-chromium"
FROM_LINUX = "hello-from-linux"
MIN_PACKETS = 50  # 20 ms Opus packets: one second of audio

INSTRUMENT = """
if (!window.__test) {
  const Native = window.RTCPeerConnection;
  const t = window.__test = { openChat: false, sendText: null, received: [], sent: [], labels: [] };
  const wire = (channel) => {
    t.labels.push(channel.label);
    if (channel.label !== "chat") return;
    channel.addEventListener("message", (event) => t.received.push(String(event.data)));
    const send = () => { if (t.sendText) { channel.send(t.sendText); t.sent.push(t.sendText); } };
    if (channel.readyState === "open") send(); else channel.addEventListener("open", send, { once: true });
  };
  window.RTCPeerConnection = class extends Native {
    constructor(config) {
      super(config);
      this.addEventListener("datachannel", (event) => wire(event.channel));
      if (t.openChat) wire(this.createDataChannel("chat"));
    }
  };
}
"""

INBOUND_AUDIO = """
const done = arguments[arguments.length - 1];
const pc = (%s);
if (!pc) { done(null); return; }
pc.getStats().then((report) => {
  const out = { packets: 0, energy: 0, codec: null, state: pc.connectionState };
  report.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      out.packets += s.packetsReceived || 0;
      out.energy += s.totalAudioEnergy || 0;
      const codec = s.codecId && report.get(s.codecId);
      if (codec) out.codec = codec.mimeType;
    }
  });
  done(out);
}, (error) => done({ error: String(error) }));
"""


def inbound_audio(browser, pc_expression: str) -> dict | None:
    return browser.js_async(INBOUND_AUDIO % pc_expression, timeout=5)


def wait_audio(browser, pc_expression: str, timeout: float = 10.0) -> dict:
    """Waits until the connection has received MIN_PACKETS audio packets with energy (not silence)."""
    last = []

    def heard(b):
        stats = inbound_audio(b, pc_expression)
        last[:] = [stats]
        return stats if stats and stats.get("packets", 0) > MIN_PACKETS and stats.get("energy", 0) > 0 else None
    try:
        return browser.wait(heard, timeout, f"inbound audio on {pc_expression}")
    except AssertionError as error:
        raise AssertionError(f"{error}; last getStats: {last}") from None


def connect_instrumented(blab, label: str, peer: str, name: str, room: str = "r1"):
    """The demo page with the data-channel instrument, connected through its token form."""
    browser = blab.browser(label)
    browser.open("/")
    browser.js(INSTRUMENT)
    browser.js("window.__test.sendText = arguments[0];", FROM_BROWSER)
    browser.find("#token-input").send_keys(blab.server.token(room, peer, name=name))
    browser.find("#connect").click()
    browser.wait_css('#status[data-state="connected"]', 10, "connected status")
    return browser


def wait_linux_received(linux, packets: int = 150, timeout: float = 10.0) -> None:
    """Waits for a `peer-stats` line (every second with --stats-seconds 1) showing `packets` RTP
    packets received from alice: three seconds of Chromium's beep, so the recording has some."""
    linux.wait_for_output(rf"peer-stats peer=alice sent=\d+ received=([2-9]\d\d|1[5-9]\d|\d{{4,}})\b", timeout)


def assert_linux_heard_browser(linux, summary: dict, recording) -> None:
    assert summary.get("connected") is True, f"the Linux peer did not connect: {summary}"
    assert (summary.get("packets_received") or 0) > MIN_PACKETS, summary
    assert summary.get("rms_dbfs", -120) > -60, f"the Linux peer heard silence from Chromium: {summary}"
    seconds, rms = wav_rms(recording)
    assert seconds > 1.0, f"{recording}: only {seconds:.2f} s recorded"
    assert rms > 100, f"{recording}: {seconds:.1f} s of near-silence (RMS {rms:.1f})"
    assert FROM_BROWSER in (summary.get("data_received") or []), \
        f"the Linux peer got no {FROM_BROWSER!r} on the data channel: {summary.get('data_by_label')}"
    assert FROM_LINUX in (summary.get("data_sent") or []), summary


def test_browser_calls_the_linux_peer(blab):
    """alice clicks Call on the Linux peer in the demo page: the call connects, alice's getStats
    shows the Linux peer's tone arriving (packets and energy), the Linux peer records non-silent
    audio from Chromium's microphone, a text crosses the "chat" data channel each way, and when
    alice hangs up the Linux peer's call ends on it (`remote`)."""
    server, lab = blab.server, blab.lab
    recording = lab.workdir / "linux-heard.wav"
    linux = linux_peer(lab, lab.b, server, server.token("r1", "linux", name="Linux peer"), "linux-callee",
                       tone=660, send_data=FROM_LINUX, record=recording, seconds=25, stats_seconds=1)
    server.wait_peers(1)
    alice = connect_instrumented(blab, "alice", "alice", "Alice")
    alice.js("window.__test.openChat = true;")
    alice.wait_css('#peers li[data-peer-id="linux"] button.call', 10, "the Linux peer's Call button").click()
    alice.wait_css('#peers li[data-peer-id="linux"][data-call-state="connected"]', 15, "the call connected")
    assert alice.find("#call-panel").is_displayed()
    alice.wait_css('#remote-audio audio[data-peer-id="linux"]', 5, "an <audio> for the Linux peer")
    stats = wait_audio(alice, "window.demo.client.connection('linux')")
    assert (stats.get("codec") or "").lower() == "audio/opus", stats
    alice.wait_js(f"window.__test.received.includes({json.dumps(FROM_LINUX)})", 10, "the Linux peer's data message")
    linux.wait_for_output(rf"data chat peer=alice {FROM_BROWSER}", 10)
    wait_linux_received(linux)
    alice.find("#hangup").click()
    alice.wait_css('#peers li[data-peer-id="linux"][data-call-state="none"]', 5, "the call gone from the page")
    summary = linux.summary(HANGUP_GRACE)
    # alice's hangup reaches the Linux peer twice: as `data {kind: hangup}` through the server and as
    # the DTLS close of her peer connection straight over the media path; whichever comes first
    # names the reason (`remote` or `closed`, docs/media.md). Either is her hangup, never the clock.
    assert summary.get("hangup_reason") in ("remote", "closed"), f"the Linux peer's call did not end on alice's hangup: {summary}"
    assert_linux_heard_browser(linux, summary, recording)


def test_linux_peer_calls_the_browser(blab):
    """The Linux peer calls alice: the demo page rings (#incoming names the caller), alice
    accepts, audio flows both ways (getStats; the Linux peer's recording), the Linux peer's
    "chat" channel carries a text each way, and when the Linux peer hangs up after its --seconds
    the page ends the call and says so."""
    server, lab = blab.server, blab.lab
    alice = connect_instrumented(blab, "alice", "alice", "Alice")
    recording = lab.workdir / "linux-heard.wav"
    linux = linux_peer(lab, lab.b, server, server.token("r1", "linux", name="Linux peer"), "linux-caller",
                       call="alice", tone=440, send_data=FROM_LINUX, record=recording, seconds=9)
    alice.wait_css('#incoming[data-peer-id="linux"]', 15, "the incoming call")
    assert alice.find("#incoming").is_displayed()
    assert "Linux peer" in alice.find("#incoming .caller").text
    alice.find("#accept").click()
    alice.wait_css('#peers li[data-peer-id="linux"][data-call-state="connected"]', 15, "the call connected")
    assert not alice.find("#incoming").is_displayed()
    wait_audio(alice, "window.demo.client.connection('linux')")
    alice.wait_js(f"window.__test.received.includes({json.dumps(FROM_LINUX)})", 10, "the Linux peer's data message")
    linux.wait_for_output(rf"data chat peer=alice {FROM_BROWSER}", 10)
    summary = linux.summary(12)
    assert summary.get("hangup_reason") == "time", summary
    # The Linux peer leaves the room once its call is over, so its entry may be gone already.
    alice.wait_js("!document.querySelector('#peers li[data-peer-id=\"linux\"]:not([data-call-state=\"none\"])')",
                  HANGUP_GRACE, "the call ended by the Linux peer")
    assert "hung up" in alice.find("#notice").text
    assert not alice.find("#call-panel").is_displayed()
    assert_linux_heard_browser(linux, summary, recording)


WEB_CALL = """
const [baseUrl, accessToken, iceServers, done] = arguments;
import("/sdk/calling-client.js").then(async ({ WebCallClient }) => {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const call = new WebCallClient({ baseUrl, accessToken, iceServers });
  const log = window.__web = { call, statuses: [], control: [], ended: [], errors: [] };
  call.on("status", (s) => log.statuses.push(s.state));
  call.on("control", (m) => log.control.push(m));
  call.on("ended", (e) => log.ended.push(e.reason));
  call.on("error", (e) => log.errors.push(`${e.code}: ${e.message}`));
  // Played out, as an app would: Chromium computes inbound audio energy for rendered tracks.
  call.on("track", ({ track, streams }) => {
    const audio = document.createElement("audio");
    audio.autoplay = true;
    audio.srcObject = streams[0] ?? new MediaStream([track]);
    document.body.append(audio);
  });
  const sessionId = await call.start(stream);
  done({ sessionId });
}).catch((error) => done({ error: `${error.code ?? ""} ${error.message ?? error}` }));
"""


def test_web_call_client_answered_by_the_linux_peer(blab):
    """The native-app flow from a browser: the backend creates a call (POST /v1/calls with an API
    key), the page's WebCallClient posts its offer to /webrtc-proxy/{call_id} and the Linux peer
    (`--answer-sessions`, role agent) answers; the control channel says `status connected`, a
    ping comes back as a round-trip time, audio arrives both ways, and hangup() ends the agent's
    call (it received the dtmf and the hangup on the control channel)."""
    server, lab = blab.server, blab.lab
    recording = lab.workdir / "agent-heard.wav"
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, record=recording, seconds=25, stats_seconds=1)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    browser = blab.browser("app")
    browser.open("/")
    base = f"{blab.base_url}/webrtc-proxy/{call['call_id']}"
    started = browser.js_async(WEB_CALL, base, call["access_token"], call["ice_servers"], timeout=15)
    assert started and started.get("sessionId"), f"WebCallClient.start failed: {started}"
    browser.wait_js("window.__web.statuses.includes('connected')", 10, "control status connected")
    assert browser.js("return window.__web.call.state;") == "connected"
    wait_audio(browser, "window.__web.call.pc")
    rtt = browser.js_async("const done = arguments[0]; window.__web.call.ping().then(done, (e) => done(String(e)));",
                           timeout=5)
    assert isinstance(rtt, (int, float)) and 0 <= rtt < 2000, f"ping: {rtt}"
    browser.js("window.__web.call.sendDtmf('5');")
    agent.wait_for_output(r'control peer=\S+ \{.*"type":"dtmf"', 5)
    agent.wait_for_output(r"peer-stats peer=\S+ sent=\d+ received=([2-9]\d\d|1[5-9]\d|\d{4,})\b", 10)
    done = browser.js_async("const done = arguments[0]; window.__web.call.hangup().then(() => done('ok'),"
                            " (e) => done(String(e)));", timeout=10)
    assert done == "ok", done
    summary = agent.summary(HANGUP_GRACE)
    assert summary.get("connected") is True, summary
    assert summary.get("rms_dbfs", -120) > -60, f"the agent heard silence from Chromium: {summary}"
    seconds, rms = wav_rms(recording)
    assert seconds > 1.0 and rms > 100, f"{recording}: {seconds:.1f} s, RMS {rms:.1f}"
    received = [json.loads(m) if isinstance(m, str) else m for m in summary.get("control_received") or []]
    assert {"type": "dtmf", "digit": "5"} in received, received
    assert {"type": "hangup"} in received, received
    # The control channel's hangup and the peer connection's DTLS close race (as above).
    assert summary.get("hangup_reason") in ("remote", "closed"), summary
    assert browser.js("return window.__web.errors;") == []


def test_browser_call_and_chat_screenshots(blab, artifacts):
    """Two demo pages: alice and bob chat (and exchange a `sendData` message through the server),
    bob calls alice, alice accepts; both hear each other (getStats) and alice's page shows the
    call's live stats. Screenshots of both pages mid-call go to the artifacts folder (alice's is
    the one in docs/images/demo.png)."""
    server = blab.server
    pages = {}
    for peer, name in (("alice", "Alice"), ("bob", "Bob")):
        browser = blab.browser(peer)
        browser.open(f"/#token={server.token('consult-42', peer, name=name)}")
        browser.wait_css('#status[data-state="connected"]', 10, "connected status")
        pages[peer] = browser
    alice, bob = pages["alice"], pages["bob"]
    alice.wait_css('#peers li[data-peer-id="bob"]', 5, "bob in alice's list")

    # sendData: signaling data through the server, both ways.
    for sender, receiver in ((alice, bob), (bob, alice)):
        receiver.js("window.__data = []; window.demo.client.on('data', (d) => window.__data.push(d));")
        sender.js("window.demo.client.sendData({kind: 'note', text: 'from ' + window.demo.client.peerId});")
        got = receiver.wait_js("window.__data.length > 0 && window.__data[0]", 5, "a data message")
        assert got == {"from": sender.label, "payload": {"kind": "note", "text": f"from {sender.label}"}}, got

    lines = [(alice, "Hi Bob, I'm calling about the results."), (bob, "Sure, give me a second."),
             (bob, "Calling you now."), (alice, "I can hear you fine.")]
    for index, (browser, text) in enumerate(lines, start=1):
        browser.find("#chat-input").send_keys(text + "\n")
        for page in (alice, bob):
            page.wait_css(f'#chat-log li[data-seq="{index}"]', 5, f"message {index}")

    bob.find('#peers li[data-peer-id="alice"] button.call').click()
    alice.wait_css('#incoming[data-peer-id="bob"]', 10, "bob's call ringing at alice")
    alice.find("#accept").click()
    for me, other in ((alice, "bob"), (bob, "alice")):
        me.wait_css(f'#peers li[data-peer-id="{other}"][data-call-state="connected"]', 15, "the call connected")
        wait_audio(me, f"window.demo.client.connection('{other}')")
    # The SDK samples every 5 s; the first sample fills the stats row.
    alice.wait_css('#stats tr[data-peer-id="bob"] .rtt[data-value]', 8, "a stats row for bob")
    assert alice.find('#stats tr[data-peer-id="bob"] .state').text == "connected"
    alice.screenshot(artifacts / "demo-call-and-chat.png")
    bob.screenshot(artifacts / "demo-call-and-chat-bob.png")
    assert (artifacts / "demo-call-and-chat.png").stat().st_size > 10_000
    bob.find("#hangup").click()
    alice.wait_css('#peers li[data-peer-id="bob"][data-call-state="none"]', 5, "the call ended at alice")


def set_media_cut(lab, cut: bool) -> None:
    """Drops every packet between peer hosts A and B (the media path); both still reach the server."""
    action = "add" if cut else "del"
    for host, prefix in ((lab.a, f"{lab.b.address}/32"), (lab.b, f"{lab.a.address}/32")):
        result = host.run(["ip", "route", action, "blackhole", prefix])
        assert result.returncode == 0, f"{host.name}: ip route {action} blackhole {prefix}: {result.stderr.strip()}"


RECOVERY_EVENTS = """
const log = window.__web;
log.recovery = [];
for (const name of ["restarting", "restarted", "restart-failed", "reconnecting", "session", "connection-state"]) {
  log.call.on(name, (p) => log.recovery.push([name, name === "restart-failed" ? p.reason : p, Date.now()]));
}
"""


def test_web_call_client_after_a_media_cut_restarts_ice_on_its_session_first_then_reposts(blab):
    """The browser's WebCallClient, answered by the Linux peer (`--stay`), with the media path
    between them cut (both still reach the server), restored once the SDK has PATCHed its
    ICE-restart offer (new credentials) on the session. The SDK restarts first and POSTs a new
    session only after `restart-failed`; media is back either on the same session (`restarted`) or
    on the new one. Measured here (docs/benchmarks.md "Web call recovery"): Chromium reports
    `disconnected` about 5.4 s into the cut, while the Linux agent, whose watchdog noticed at 2 s,
    ends the call 5 s after that; so the restart's window passes and the re-POST recovers."""
    server, lab = blab.server, blab.lab
    agent = linux_peer(lab, lab.b, server, server.token("support-1", "agent-1", role="agent"), "linux-agent",
                       tone=660, answer_sessions=True, stay=True, seconds=40)
    server.wait_peers(1)
    status, _, call = server.post_json("/v1/calls", {"room_id": "support-1", "agent_id": "agent-1"},
                                       {"X-API-Key": server.apikey()})
    assert status == 201, call
    browser = blab.browser("app")
    browser.open("/")
    base = f"{blab.base_url}/webrtc-proxy/{call['call_id']}"
    started = browser.js_async(WEB_CALL, base, call["access_token"], call["ice_servers"], timeout=15)
    assert started and started.get("sessionId"), f"WebCallClient.start failed: {started}"
    browser.js(RECOVERY_EVENTS)
    browser.wait_js("window.__web.statuses.includes('connected')", 10, "control status connected")
    wait_audio(browser, "window.__web.call.pc")
    cut_at = time.time()
    set_media_cut(lab, True)
    try:
        browser.wait_js("window.__web.recovery.some((e) => e[0] === 'restarting')", 15, "restarting")
    finally:
        set_media_cut(lab, False)
    browser.wait_js("window.__web.recovery.some((e) => e[0] === 'restarted' || e[0] === 'session')", 15,
                    "media back on the session (restarted) or a new session")
    wait_audio(browser, "window.__web.call.pc")
    media_at = time.time() - cut_at
    recovery = [[name, payload, round(at / 1000 - cut_at, 2)] for name, payload, at in browser.js("return window.__web.recovery;")]
    print(f"recovery={json.dumps(recovery)} cut_to_audio_s={media_at:.2f}")
    names = [e[0] for e in recovery]
    assert "restarting" in names, recovery
    if "restarted" in names:
        assert "reconnecting" not in names, recovery
        assert browser.js("return window.__web.call.sessionId;") == started["sessionId"]
    else:
        assert names.index("restart-failed") < names.index("reconnecting") < names.index("session"), recovery
        assert names.index("restarting") < names.index("restart-failed"), recovery
        assert browser.js("return window.__web.call.sessionId;") != started["sessionId"]
    assert browser.js("return window.__web.call.state;") == "connected"
    assert browser.js("return window.__web.ended;") == [], agent.tail()
