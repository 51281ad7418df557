"""Calls that survive a drop, in real Chromium on the demo page (issue #36, docs/browser.md "What
survives a drop").

- test_caller_gives_up_while_ringing: bob calls alice and hangs up before she accepts; alice's
  incoming card closes and her SDK says `hangup {reason: "cancelled"}`. Needs nothing new on the
  server (the hangup is a plain `data` relay).
- test_signaling_blip_keeps_the_call: alice and bob in a call, bob's signaling socket is closed
  from his page (close code 3000, not a clean leave) and reconnects; neither page gets a `hangup`
  and audio keeps arriving on both (inbound-rtp packets measured before and after). Runs on the
  server's seat grace (`peer-reconnecting`/`peer-resumed`, reconnect_grace_ms, default 15 s).
- test_server_restart_keeps_the_call (SIGTERM, SIGKILL): the server restarts mid-call on the same
  data dir and port; both pages reconnect and resume, the one back first sees the other
  `reconnecting` (the restarted server holds the remembered seats in their grace, docs/protocol.md
  "Across a server restart"), the other's return is `peer-resumed`; no `hangup`, and audio keeps
  arriving on both sides.
"""

from __future__ import annotations

import signal
import time

import pytest

from test_browser_media import inbound_audio, wait_audio

RECORD = """
window.__events = [];
for (const name of ["hangup", "peer-left", "peer-reconnecting", "peer-resumed", "ice-restart", "connected"]) {
  window.demo.client.on(name, (p) => window.__events.push([name, name === "connected" ? {resumed: p.resumed} : p]));
}
"""


def demo_pages(blab, room: str):
    pages = {}
    for peer, name in (("alice", "Alice"), ("bob", "Bob")):
        browser = blab.browser(peer)
        browser.open(f"/#token={blab.server.token(room, peer, name=name)}")
        browser.wait_css('#status[data-state="connected"]', 10, "connected status")
        browser.js(RECORD)
        pages[peer] = browser
    pages["alice"].wait_css('#peers li[data-peer-id="bob"]', 5, "bob in alice's list")
    pages["bob"].wait_css('#peers li[data-peer-id="alice"]', 5, "alice in bob's list")
    return pages["alice"], pages["bob"]


def events(browser, name: str | None = None) -> list:
    got = browser.js("return window.__events;")
    return [p for n, p in got if name is None or n == name]


def test_caller_gives_up_while_ringing(blab):
    alice, bob = demo_pages(blab, "ring-1")
    bob.find('#peers li[data-peer-id="alice"] button.call').click()
    alice.wait_css('#incoming[data-peer-id="bob"]', 10, "bob's call ringing at alice")
    assert not alice.find("#incoming").get_attribute("hidden")
    bob.wait_css('#peers li[data-peer-id="alice"] button.hangup:not([hidden])', 5, "bob's hang-up button")
    bob.find('#peers li[data-peer-id="alice"] button.hangup').click()

    alice.wait_js("document.querySelector('#incoming').hidden", 5, "alice's incoming card closed")
    assert events(alice, "hangup") == [{"peerId": "bob", "reason": "cancelled"}]
    assert alice.find("#notice").text == "Bob cancelled the call."
    assert alice.attr('#peers li[data-peer-id="bob"]', "data-call-state") == "none"
    # Accepting now is impossible; the SDK says why instead of a stale card.
    err = alice.js_async("""const done = arguments[arguments.length - 1];
        window.demo.client.call('bob', []).then((pc) => { window.demo.client.hangup('bob'); done('called'); },
                                                (e) => done(String(e.code)));""")
    assert err == "called", "alice can call bob afterwards"


def call_connected(alice, bob) -> None:
    bob.find('#peers li[data-peer-id="alice"] button.call').click()
    alice.wait_css('#incoming[data-peer-id="bob"]', 10, "bob's call ringing at alice")
    alice.find("#accept").click()
    for me, other in ((alice, "bob"), (bob, "alice")):
        me.wait_css(f'#peers li[data-peer-id="{other}"][data-call-state="connected"]', 15, "the call connected")
        wait_audio(me, f"window.demo.client.connection('{other}')")


def test_signaling_blip_keeps_the_call(blab):
    """The server holds bob's seat (docs/protocol.md "Reconnect grace"); a server without the
    grace sends peer-left, alice's SDK hangs up and this test fails."""
    alice, bob = demo_pages(blab, "blip-1")
    call_connected(alice, bob)
    before = {"alice": inbound_audio(alice, "window.demo.client.connection('bob')")["packets"],
              "bob": inbound_audio(bob, "window.demo.client.connection('alice')")["packets"]}

    # Not a clean leave: close code 3000 (1000 would leave at once); the SDK reconnects on its own.
    bob.js("window.demo.client._ws.close(3000, 'test blip');")
    alice.wait_js("window.__events.some(([n]) => n === 'peer-reconnecting')", 5, "peer-reconnecting at alice")
    bob.wait_js("window.__events.some(([n, p]) => n === 'connected' && p.resumed)", 10, "bob resumed")
    alice.wait_js("window.__events.some(([n]) => n === 'peer-resumed')", 5, "peer-resumed at alice")
    time.sleep(2)  # media keeps flowing after the resume

    after = {"alice": inbound_audio(alice, "window.demo.client.connection('bob')"),
             "bob": inbound_audio(bob, "window.demo.client.connection('alice')")}
    for page in ("alice", "bob"):
        assert after[page] is not None, f"{page}'s call is gone"
        gained = after[page]["packets"] - before[page]
        assert gained > 75, f"{page} got {gained} audio packets across the blip (before {before[page]}, after {after[page]})"
        assert after[page]["state"] == "connected", after[page]
    assert events(alice, "hangup") == [] and events(bob, "hangup") == [], (events(alice), events(bob))
    assert events(alice, "peer-left") == []


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_server_restart_keeps_the_call(blab, how):
    """A server that forgets its seats on a restart lists neither peer to the one back first: its
    SDK reconciles the call away (`hangup {reason: "peer-left"}`) and this test fails."""
    alice, bob = demo_pages(blab, "restart-1")
    call_connected(alice, bob)
    before = {"alice": inbound_audio(alice, "window.demo.client.connection('bob')")["packets"],
              "bob": inbound_audio(bob, "window.demo.client.connection('alice')")["packets"]}
    # The seats table is written once per tick_ms (250 ms): the call's seats are in by now.
    marks = {"alice": len(events(alice)), "bob": len(events(bob))}

    if how == signal.SIGTERM:
        blab.server.signal(signal.SIGTERM)
        assert blab.server.wait(8) == 0, blab.server.stderr_text()
    blab.server.restart()  # SIGKILL (a no-op after the SIGTERM's exit), same data dir and port
    assert "seats restored" in blab.server.stderr_text()

    def resumed(page, mark):
        return page.js(f"return window.__events.slice({mark}).some(([n, p]) => n === 'connected' && p.resumed);")
    for name, page in (("alice", alice), ("bob", bob)):
        page.wait(lambda b, page=page, name=name: resumed(page, marks[name]), 12, f"{name} resumed on the restarted server")
    # The one back first hears the other's return; never a peer-left.
    alice.wait(lambda b: events(alice, "peer-resumed")[-1:] or events(bob, "peer-resumed")[-1:], 5, "peer-resumed on one side")
    time.sleep(2)  # media keeps flowing after the restart

    after = {"alice": inbound_audio(alice, "window.demo.client.connection('bob')"),
             "bob": inbound_audio(bob, "window.demo.client.connection('alice')")}
    for page in ("alice", "bob"):
        assert after[page] is not None, f"{page}'s call is gone"
        gained = after[page]["packets"] - before[page]
        assert gained > 75, f"{page} got {gained} audio packets across the restart (before {before[page]}, after {after[page]})"
        assert after[page]["state"] == "connected", after[page]
    assert events(alice, "hangup") == [] and events(bob, "hangup") == [], (events(alice), events(bob))
    assert events(alice, "peer-left") == [] and events(bob, "peer-left") == [], (events(alice), events(bob))
