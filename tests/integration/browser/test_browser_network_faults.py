"""Calls through network faults, browser to browser (issue #36, docs/browser.md "What survives a
drop").

Two Chromium sessions on two peer hosts of the lab (netns.py): alice on host A, bob on host B,
each with its own chromedriver, each page running sdk/js/calling-client.js directly (imported from
the server, no demo UI) with the SDK's ICE options of the test. Alice calls bob (so alice is the
side that restarts ICE); once audio flows both ways, every packet to and from host A is dropped
(`Lab.cut_a`: blackhole routes, the links and the open sockets stay, as on a Wi-Fi that goes
silent). The server's keep-alive (30 s) does not notice a cut this short: both signaling sockets
survive it.

- test_a_3_s_cut_is_survived: the cut lasts 3 s; inbound audio grows again on both pages, no
  `hangup`, both connections `connected`. The time from the end of the cut until both pages count
  new packets is printed (`recovery_s=`, read by docs/benchmarks.md "Calls through network faults").
- test_a_cut_longer_than_the_window_ends_as_disconnected: iceRestartWindowMs is 4 s; the cut lasts
  until both pages have ended the call, each with `hangup {reason: "disconnected"}`, and neither
  connection is left `connected`.
"""

from __future__ import annotations

import time

import pytest

import browser_lab

SETUP = """
const [options, done] = [arguments[0], arguments[arguments.length - 1]];
import("/sdk/calling-client.js").then(async ({ CallingClient }) => {
  const client = new CallingClient({ url: "ws://" + location.host + "/v1/ws", ...options });
  const t = window.__t = { client, events: [] };
  const record = (name, payload) => t.events.push([name, payload]);
  for (const name of ["hangup", "peer-left", "peer-reconnecting", "peer-resumed", "ice-restart", "connection-state"]) {
    client.on(name, (p) => record(name, p));
  }
  client.on("disconnected", (p) => record("disconnected", { code: p.code, willReconnect: p.willReconnect }));
  client.on("incoming", async (incoming) => {
    record("incoming", { peerId: incoming.peerId });
    incoming.accept(await navigator.mediaDevices.getUserMedia({ audio: true, video: false }));
  });
  await client.connect();
  done("connected");
}).catch((error) => done("setup failed: " + error));
"""

CALL = """
const [peer, done] = [arguments[0], arguments[arguments.length - 1]];
navigator.mediaDevices.getUserMedia({ audio: true, video: false })
  .then((stream) => window.__t.client.call(peer, stream)).then(() => done("calling"), (e) => done("call failed: " + e));
"""

INBOUND = """
const [peer, done] = [arguments[0], arguments[arguments.length - 1]];
const pc = window.__t.client.connection(peer);
if (!pc) { done(null); return; }
pc.getStats().then((report) => {
  let packets = 0;
  report.forEach((s) => { if (s.type === "inbound-rtp" && s.kind === "audio") packets += s.packetsReceived || 0; });
  done({ packets, state: pc.connectionState, ice: pc.iceConnectionState });
}, (error) => done({ error: String(error) }));
"""

# Small ICE timings so the give-up test stays short; the 3 s cut runs with the SDK's defaults.
SHORT_WINDOW = {"iceRestartWindowMs": 4000, "iceDisconnectedDebounceMs": 1000, "iceRestartRetryMs": 2000}


@pytest.fixture
def pages(blab):
    """alice's page on host A (the blab's chromedriver) and bob's on host B (a second one)."""
    blab_b = browser_lab.BrowserLab(blab.lab, blab.server, host=blab.lab.b)
    try:
        yield blab, blab_b
    finally:
        blab_b.close()


def sdk_page(blab, peer: str, room: str, options: dict):
    browser = blab.browser(peer)
    browser.open("/")
    token = blab.server.token(room, peer, name=peer.title())
    result = browser.js_async(SETUP, {"token": token, **options}, timeout=15)
    assert result == "connected", f"{peer}: {result}"
    return browser


def inbound(browser, peer: str) -> dict | None:
    return browser.js_async(INBOUND, peer, timeout=5)


def events(browser, name: str | None = None) -> list:
    return [p for n, p in browser.js("return window.__t.events;") if name is None or n == name]


def call_with_audio(pages, room: str, options: dict):
    blab_a, blab_b = pages
    alice = sdk_page(blab_a, "alice", room, options)
    bob = sdk_page(blab_b, "bob", room, options)
    assert alice.js_async(CALL, "bob") == "calling"
    for me, other in ((alice, "bob"), (bob, "alice")):
        me.wait(lambda b, o=other: (inbound(b, o) or {}).get("packets", 0) > 50, 15, f"audio from {other}")
    return alice, bob


def test_a_3_s_cut_is_survived(pages):
    alice, bob = call_with_audio(pages, "cut-3", {})
    lab = pages[0].lab
    lab.cut_a(True)
    try:
        time.sleep(3)
        frozen = {"alice": inbound(alice, "bob")["packets"], "bob": inbound(bob, "alice")["packets"]}
    finally:
        lab.cut_a(False)
    restored = time.monotonic()
    back: dict[str, float] = {}
    deadline = restored + 20
    while len(back) < 2 and time.monotonic() < deadline:
        for label, page, other in (("alice", alice, "bob"), ("bob", bob, "alice")):
            if label not in back and (inbound(page, other) or {}).get("packets", 0) > frozen[label] + 5:
                back[label] = time.monotonic() - restored
        time.sleep(0.05)
    assert len(back) == 2, f"media did not come back within 20 s: {back}; alice {events(alice)}; bob {events(bob)}"
    recovery = max(back.values())
    print(f"recovery_s={recovery:.2f} alice={back['alice']:.2f} bob={back['bob']:.2f} "
          f"ice_restarts={len(events(alice, 'ice-restart'))}")

    time.sleep(2)  # and it keeps flowing
    for label, page, other in (("alice", alice, "bob"), ("bob", bob, "alice")):
        stats = inbound(page, other)
        assert stats is not None, f"{label}'s call is gone: {events(page)}"
        assert stats["packets"] > frozen[label] + 75, (label, frozen[label], stats)
        assert stats["state"] == "connected", (label, stats)
        assert events(page, "hangup") == [], (label, events(page))
    states = [p["state"] for p in events(alice, "connection-state")]
    assert "disconnected" in states or "failed" in states, f"the cut went unnoticed by alice: {states}"


def test_a_cut_longer_than_the_window_ends_as_disconnected(pages):
    alice, bob = call_with_audio(pages, "cut-long", SHORT_WINDOW)
    lab = pages[0].lab
    lab.cut_a(True)
    cut = time.monotonic()
    try:
        for page in (alice, bob):
            page.wait(lambda b: events(b, "hangup"), 25, "the call's end")
        ended = time.monotonic() - cut
    finally:
        lab.cut_a(False)
    print(f"ended_after_s={ended:.2f}")
    for label, page, other in (("alice", alice, "bob"), ("bob", bob, "alice")):
        assert events(page, "hangup") == [{"peerId": other, "reason": "disconnected"}], (label, events(page))
        assert page.js("return window.__t.client.connection(arguments[0]);", other) is None, label
    time.sleep(2)  # nothing comes back to life once the network is back
    for label, page, other in (("alice", alice, "bob"), ("bob", bob, "alice")):
        assert len(events(page, "hangup")) == 1, (label, events(page))
        assert inbound(page, other) is None, label
