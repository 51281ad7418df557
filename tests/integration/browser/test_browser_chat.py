"""The demo page (sdk/js/demo/) in real Chromium: two browsers chatting, and a server restart mid-chat.

Each browser is its own Chromium session (browser_lab.py) that opens `/#token=<jwt>` from the
server, exactly as the links `make serve` prints; everything is read through the page's stable
selectors (the top comment of sdk/js/demo/demo.js) and checked against the server's history API.
"""

from __future__ import annotations

import signal
import time

HISTORY_PAGE = 20  # sdk/js/demo/demo.js: messages per history page


def join(blab, label: str, peer: str, name: str, room: str = "r1"):
    browser = blab.browser(label)
    token = blab.server.token(room, peer, name=name)
    browser.open(f"/#token={token}")
    browser.wait_css('#status[data-state="connected"]', 10, "connected status")
    assert browser.attr("#me", "data-peer-id") == peer
    assert browser.attr("#me", "data-room-id") == room
    return browser, token


def type_and_send(browser, texts: list[str]) -> None:
    """Sends each text through the compose form, as pressing Enter would."""
    browser.js("""const [texts] = arguments;
        const input = document.querySelector('#chat-input'), form = document.querySelector('#chat-form');
        for (const text of texts) { input.value = text; form.requestSubmit(); }""", texts)


def wait_committed(browser, count: int, timeout: float = 10.0) -> None:
    """`count` committed messages in the log and none pending or failed."""
    browser.wait_js(f"document.querySelectorAll('#chat-log li[data-seq]').length === {count} && "
                    "!document.querySelector('#chat-log li[data-pending], #chat-log li[data-failed]')",
                    timeout, f"{count} committed messages, none pending")


def history(server, token: str, room: str = "r1") -> list[dict]:
    messages, since = [], 0
    while True:
        status, _, page = server.get_json(f"/v1/rooms/{room}/messages?since_seq={since}&limit=200", token)
        assert status == 200, page
        messages += page["messages"]
        if not page["has_more"]:
            return messages
        since = page["next_since_seq"]


def test_two_browsers_chat_with_ack_typing_receipts_history_and_unread(blab):
    """alice sends 23 messages through the compose form (each acked: it gets its seq and leaves
    the pending state); bob joins and sees the newest page of 20, "load earlier" brings the
    first 3 and then reports the beginning; alice typing shows "is typing" at bob and sending
    clears it; with bob scrolled
    up (by clicking "load earlier"), 3 new messages raise bob's unread count to 3 and the "3 new"
    button scrolls down, clears it and marks them read (receipts on every alice message, the text
    "read by Bob" once, at the newest); a message arriving while bob is at the bottom is read at once."""
    server = blab.server
    alice, alice_token = join(blab, "alice", "alice", "Alice")
    sent = [f"message {i:02d}" for i in range(1, 24)]
    type_and_send(alice, sent)
    wait_committed(alice, len(sent))
    assert alice.seqs() == list(range(1, 24))
    assert [item["text"] for item in alice.chat_items()] == sent
    assert all(item["own"] == "true" for item in alice.chat_items())

    bob, _ = join(blab, "bob", "bob", "Bob")
    bob.wait_js(f"document.querySelectorAll('#chat-log li[data-seq]').length === {HISTORY_PAGE}", 10,
                "the newest history page")
    assert bob.seqs() == list(range(24 - HISTORY_PAGE, 24)), "bob's first page is not the newest 20"
    assert bob.attr("#load-history", "data-has-more") == "true"
    bob.find("#load-history").click()
    bob.wait_js("document.querySelector('#load-history').dataset.hasMore === 'false'", 10, "the beginning")
    assert bob.seqs() == list(range(1, 24))
    assert [item["text"] for item in bob.chat_items()] == sent
    assert all(item["from"] == "alice" and item["own"] == "false" for item in bob.chat_items())
    assert bob.attr("#unread", "data-count") == "0"

    # Clicking "load earlier" scrolled bob's log up to the button, so what arrives now is unread.
    assert not bob.js("const s = document.querySelector('#chat-scroll');"
                      "return s.scrollHeight - s.scrollTop - s.clientHeight < 24;"), "bob's log is still at the bottom"

    # Typing: alice types (real key events), bob sees it; sending turns it off.
    alice.wait_css('#peers li[data-peer-id="bob"]', 5, "bob in alice's peer list")
    alice.find("#chat-input").send_keys("hello bo")
    bob.wait_js("document.querySelector('#typing').dataset.peers === 'alice'", 5, "alice typing at bob")
    assert "is typing" in bob.find("#typing").text
    alice.find("#chat-input").send_keys("b\n")
    bob.wait_js("document.querySelector('#typing').dataset.peers === ''", 5, "typing cleared at bob")
    wait_committed(alice, 24)
    bob.wait_js("document.querySelector('#chat-log li[data-seq=\"24\"]')?.querySelector('.text').textContent"
                " === 'hello bob'", 5, "message 24 at bob")

    # Unread: bob is scrolled up, so alice's messages count until bob looks.
    type_and_send(alice, ["later 1", "later 2"])
    wait_committed(alice, 26)
    bob.wait_js("document.querySelector('#unread').dataset.count === '3'", 10, "3 unread at bob")
    assert bob.find("#unread").is_displayed() and "3 new" in bob.find("#unread").text
    # bob read up to 23 when it joined at the bottom of the newest page; nothing after that.
    readers = {item["seq"]: item["readBy"].split() for item in alice.chat_items()}
    assert all("bob" in readers[seq] for seq in range(1, 24)), readers
    assert not any("bob" in readers[seq] for seq in range(24, 27)), readers

    # Read receipts: the "3 new" button scrolls bob to the latest message, which marks it read.
    bob.find("#unread").click()
    bob.wait_js("document.querySelector('#unread').dataset.count === '0'", 5, "unread cleared at bob")
    assert not bob.find("#unread").is_displayed()
    alice.wait_js("(document.querySelector('#chat-log li[data-seq=\"26\"] .receipt')?.dataset.readBy ?? '')"
                  ".split(' ').includes('bob')", 10, "bob's read receipt on message 26")
    assert "read by Bob" in alice.find('#chat-log li[data-seq="26"] .receipt').text
    assert all("bob" in item["readBy"].split() for item in alice.chat_items()), alice.chat_items()

    # At the bottom, a new message is read at once: a receipt, and no unread count.
    type_and_send(alice, ["later 3"])
    wait_committed(alice, 27)
    alice.wait_js("(document.querySelector('#chat-log li[data-seq=\"27\"] .receipt')?.dataset.readBy ?? '')"
                  ".split(' ').includes('bob')", 10, "bob's read receipt on message 27")
    assert bob.attr("#unread", "data-count") == "0"
    # The receipt text names bob once, at the newest message bob has read.
    assert alice.find('#chat-log li[data-seq="26"] .receipt').text == ""

    # The server's history agrees with both pages.
    stored = history(server, alice_token)
    assert [m["seq"] for m in stored] == list(range(1, 28))
    assert [m["text"] for m in stored] == [*sent, "hello bob", "later 1", "later 2", "later 3"]
    assert bob.seqs() == alice.seqs() == list(range(1, 28))


def test_reconnect_after_server_restart_loses_and_duplicates_nothing(blab):
    """alice and bob chat; the server is SIGKILLed right after a burst of alice's messages
    (some acked, some maybe not) and while it is down alice sends two more (pending); it is
    started again on the same port and data dir. Both pages reconnect by themselves, and then
    every message is in both logs exactly once, in seq order, as the server's history has them,
    with nothing pending; bob's reply after the restart arrives too."""
    server = blab.server
    alice, alice_token = join(blab, "alice", "alice", "Alice")
    bob, _ = join(blab, "bob", "bob", "Bob")
    type_and_send(alice, ["before 1", "before 2"])
    type_and_send(bob, ["before 3"])
    wait_committed(alice, 3)
    wait_committed(bob, 3)

    type_and_send(alice, [f"burst {i}" for i in range(1, 6)])
    server.signal(signal.SIGKILL)
    server.wait(5)
    for browser in (alice, bob):
        browser.wait_css('#status[data-state="reconnecting"]', 10, "reconnecting after the server died")
    type_and_send(alice, ["while down 1", "while down 2"])
    alice.wait_js("document.querySelectorAll('#chat-log li[data-pending]').length >= 2", 5,
                  "the two messages pending while the server is down")

    server.restart()
    for browser in (alice, bob):
        browser.wait_css('#status[data-state="connected"]', 20, "connected again after the restart")
    type_and_send(bob, ["after restart"])

    expected_texts = ["before 1", "before 2", "before 3", *[f"burst {i}" for i in range(1, 6)],
                      "while down 1", "while down 2", "after restart"]
    deadline = time.monotonic() + 20
    while True:
        stored = history(server, alice_token)
        if len(stored) >= len(expected_texts) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    texts = [m["text"] for m in stored]
    assert sorted(texts) == sorted(expected_texts), \
        f"server history after the restart: {texts}; alice's log: {alice.chat_items()}"
    assert len(set(m["client_id"] for m in stored)) == len(stored), "a client_id was stored twice"
    seqs = [m["seq"] for m in stored]
    assert seqs == list(range(1, len(expected_texts) + 1)), seqs
    # The order of alice's messages is hers (one socket, resent in order).
    alice_texts = [t for t in texts if t.startswith(("before 1", "before 2", "burst", "while down"))]
    assert alice_texts == [t for t in expected_texts if t in alice_texts], texts

    for browser in (alice, bob):
        wait_committed(browser, len(expected_texts), timeout=15)
        items = browser.chat_items()
        assert [i["seq"] for i in items] == seqs, f"{browser.label}: {items}"
        assert [i["text"] for i in items] == texts, f"{browser.label}: {items}"
        last_seq = browser.js("return window.demo.client.lastSeq;")
        assert last_seq == len(expected_texts), f"{browser.label}: lastSeq {last_seq}"
