"""The demo page's replies, edits, reactions and deletions (issue 43) in real Chromium.

Two browsers chat through sdk/js/demo (browser_lab.py, the page's stable selectors listed at the
top of sdk/js/demo/demo.js); a third joins afterwards and sees the messages as they are now from
history. Every step goes through the page's own buttons and compose form, and the end state is
checked against the server's history API.
"""

from __future__ import annotations

import json

from test_browser_chat import history, join, type_and_send, wait_committed


def click(browser, css: str) -> None:
    browser.js("document.querySelector(arguments[0]).click();", css)


def msg(seq: int, rest: str = "") -> str:
    return f'#chat-log li[data-seq="{seq}"]{rest}'


def q(css: str) -> str:
    """A JS expression for the first element matching `css`."""
    return f"document.querySelector({json.dumps(css)})"


def test_reply_edit_react_and_delete_through_the_demo_and_history_shows_them(blab):
    """alice asks (seq 1); bob answers with Reply (seq 2: a quote of 1 at both); bob edits his
    answer with Edit (both show it edited); alice reacts 👍 on it and takes it back by clicking the
    pill, then reacts ❤️ on her question; bob deletes his answer (a tombstone at alice, no actions,
    its reply quote gone with it); carol joins later and her history page shows the question with
    alice's ❤️ and the answer as a tombstone still quoting the question. The server's history
    (with the edit log) agrees."""
    server = blab.server
    alice, alice_token = join(blab, "alice", "alice", "Alice")
    bob, _ = join(blab, "bob", "bob", "Bob")
    type_and_send(alice, ["lunch at 12?"])
    wait_committed(alice, 1)
    bob.wait_css(msg(1, " .actions button.reply"), 10, "alice's question with its actions at bob")

    click(bob, msg(1, " .actions button.reply"))
    assert bob.attr("#compose-context", "data-mode") == "reply"
    assert bob.attr("#compose-context", "data-seq") == "1"
    type_and_send(bob, ["yes"])
    wait_committed(bob, 2)
    assert bob.find("#compose-context").is_displayed() is False
    for browser in (alice, bob):
        browser.wait_js(f"{q(msg(2, ' .reply-quote'))}?.dataset.replyTo === '1'", 10,
                        "the quote of the question on the answer")
        assert "lunch at 12?" in browser.find(msg(2, " .reply-quote")).text

    assert not alice.find_all(msg(2, " .actions button.edit")), "only the author may edit"
    click(bob, msg(2, " .actions button.edit"))
    assert bob.attr("#compose-context", "data-mode") == "edit"
    assert bob.js("return document.querySelector('#chat-input').value;") == "yes"
    type_and_send(bob, ["yes, at 12:30"])
    for browser in (alice, bob):
        browser.wait_js(f"{q(msg(2))}?.dataset.edited === 'true' && "
                        f"{q(msg(2, ' .text'))}.textContent === 'yes, at 12:30'", 10,
                        "the edited answer")
    assert bob.seqs() == [1, 2], "an edit is not a new message"

    thumbs = msg(2, ' .reaction[data-key="👍"]')
    heart = msg(1, ' .reaction[data-key="❤️"]')
    click(alice, msg(2, ' .actions button.react[data-key="👍"]'))
    bob.wait_js(f"{q(thumbs)}?.dataset.count === '1'", 10, "alice's 👍 at bob")
    assert bob.attr(thumbs, "data-peers") == "alice"
    alice.wait_js(f"{q(thumbs)}?.getAttribute('aria-pressed') === 'true'", 10, "alice's own 👍 pressed")
    click(alice, thumbs)
    bob.wait_js(f"!{q(thumbs)}", 10, "the 👍 taken back at bob")
    click(alice, msg(1, ' .actions button.react[data-key="❤️"]'))
    bob.wait_js(f"{q(heart)}?.dataset.count === '1'", 10, "alice's ❤️ on her question at bob")

    assert not alice.find_all(msg(2, " .actions button.delete")), "only the author may delete"
    click(bob, msg(2, " .actions button.delete"))
    for browser in (alice, bob):
        browser.wait_js(f"{q(msg(2))}?.dataset.deleted === 'true'", 10, "the tombstone")
        assert browser.find(msg(2, " .text")).text == "message deleted"
        assert not browser.find_all(msg(2, " .actions")), "a tombstone has no actions"
        assert not browser.find_all(msg(2, " .reaction"))

    carol, _ = join(blab, "carol", "carol", "Carol")
    carol.wait_js("document.querySelectorAll('#chat-log li[data-seq]').length === 2", 10, "carol's history page")
    assert carol.seqs() == [1, 2]
    assert carol.attr("#load-history", "data-has-more") == "false"
    assert carol.attr(heart, "data-count") == "1"
    assert carol.attr(msg(2), "data-deleted") == "true"
    assert carol.attr(msg(2, " .reply-quote"), "data-reply-to") == "1"
    assert carol.find(msg(1, " .text")).text == "lunch at 12?"

    stored = history(server, alice_token)
    assert [(m["seq"], m["text"], m.get("deleted", False), m.get("reply_to")) for m in stored] == \
        [(1, "lunch at 12?", False, None), (2, "", True, 1)]
    assert stored[0]["reactions"] == [{"key": "❤️", "count": 1, "peers": ["alice"]}]
    status, _, page = server.get_json("/v1/rooms/r1/messages?before_seq=100&limit=10&include=edits", alice_token)
    assert status == 200, page
    assert [m["seq"] for m in page["messages"]] == [2, 1]
    assert [e["text"] for e in page["messages"][0]["edits"]] == [""], "a delete erases the edit's text too"
