"""The presence dashboard (sdk/js/demo/dashboard.html) in real Chromium, as a supervisor and as an agent.

A supervisor (role `dashboard`) and an agent (role `agent`) each open `/dashboard#token=<jwt>` in
their own Chromium session; the caller is a plain WebSocket client on /v1/presence (role
`caller`), as a caller's app would be. Everything on the pages is read through the stable
selectors of the top comment of sdk/js/demo/dashboard.js.
"""

from __future__ import annotations

from selenium.webdriver.support.ui import Select

from browser_lab import presence_socket, recv_type, room_socket


def open_dashboard(blab, label: str, peer: str, role: str, name: str | None = None):
    browser = blab.browser(label)
    token = blab.server.token(None, peer, role=role, name=name, scope="presence")
    browser.open(f"/dashboard#token={token}")
    browser.wait_css('#status[data-state="connected"]', 10, "connected status")
    assert browser.attr("#me", "data-peer-id") == peer
    assert browser.attr("#me", "data-role") == role
    return browser


def agent_status(browser, agent: str):
    return browser.attr(f'#agents tr[data-agent-id="{agent}"]', "data-status")


def test_dashboard_shows_status_changes_and_a_request_accepted_into_a_room(blab, artifacts):
    """The supervisor sees ann arrive `available`, turn `away` and back (the agent picks it in its
    own status form), then carl's request to ann ringing (caller, agent, countdown, ringing count);
    ann accepts on its page; the supervisor's entry turns `accepted` with the room and call ids
    and no room link (dashboards never get tokens), ann is `busy`; ann's entry links into the
    room, and clicking it opens a tab that puts ann in that room with carl, who joined with its own token."""
    server = blab.server
    supervisor = open_dashboard(blab, "supervisor", "sup", "dashboard")
    agent = open_dashboard(blab, "agent", "ann", "agent", name="Ann")
    supervisor.wait(lambda b: agent_status(b, "ann") == "available", 10, "ann available on the dashboard")
    assert agent.find("#agent-panel").is_displayed()
    assert "me" in agent.attr('#agents tr[data-agent-id="ann"]', "class").split()

    # A status change in the agent's own form reaches the supervisor.
    Select(agent.find("#my-status")).select_by_value("away")
    supervisor.wait(lambda b: agent_status(b, "ann") == "away", 10, "ann away on the dashboard")
    assert supervisor.find('#agents tr[data-agent-id="ann"] .status').text == "away"
    agent.find("#my-note").send_keys("back from lunch")
    Select(agent.find("#my-status")).select_by_value("available")
    supervisor.wait(lambda b: agent_status(b, "ann") == "available", 10, "ann available again")
    supervisor.wait(lambda b: "back from lunch" in b.find('#agents tr[data-agent-id="ann"] .note').text, 5,
                    "ann's note on the dashboard")

    # carl asks for ann; the request rings on both pages.
    caller = presence_socket(server, server.token(None, "carl", role="caller", name="Carl", scope="presence"))
    try:
        assert recv_type(caller, "connected")["payload"]["role"] == "caller"
        caller.send_json({"type": "request", "payload": {"agent_id": "ann"}})
        ack = recv_type(caller, "request")["payload"]
        assert ack["state"] == "ringing", ack
        request_id = ack["request_id"]
        entry = f'#requests li[data-request-id="{request_id}"]'

        supervisor.wait_css(f'{entry}[data-state="ringing"]', 10, "the ringing request on the dashboard")
        assert "carl" in supervisor.find(f"{entry} .caller").text.lower()
        assert "ann" in supervisor.find(f"{entry} .agent").text.lower()
        assert int(supervisor.attr(f"{entry} .countdown", "data-remaining-s")) > 0
        assert supervisor.find("#ringing-count").text.strip().startswith("1")
        assert not supervisor.find_all(f"{entry} button.accept"), "a supervisor must not accept for the agent"
        supervisor.screenshot(artifacts / "dashboard-ringing.png")

        agent.wait_css(f'{entry}[data-state="ringing"] button.accept', 10, "the Accept button at the agent")
        agent.find(f"{entry} button.accept").click()

        accepted = recv_type(caller, "accepted")["payload"]
        room_id, call_id = accepted["room_id"], accepted["call_id"]
        assert accepted["request_id"] == request_id and accepted["agent_id"] == "ann", accepted

        supervisor.wait_css(f'{entry}[data-state="accepted"]', 10, "the accepted request on the dashboard")
        assert supervisor.attr(entry, "data-room-id") == room_id
        assert supervisor.attr(entry, "data-call-id") == call_id
        assert room_id in supervisor.find(f"{entry} .outcome").text
        assert not supervisor.find_all(f"{entry} a.open-call"), "a dashboard got a room link (a token)"
        supervisor.wait(lambda b: agent_status(b, "ann") == "busy", 10, "ann busy after accepting")
        assert not supervisor.find("#ringing-count").is_displayed()
        supervisor.screenshot(artifacts / "dashboard.png")

        # The agent's entry links into the room with ann's own token; carl joins with its own.
        link = agent.wait_css(f'{entry}[data-state="accepted"] a.open-call', 10, "the agent's room link")
        href = link.get_attribute("href")
        assert href.startswith(blab.base_url + "/#token="), href
        carl_room = room_socket(server, accepted["token"])
        try:
            assert carl_room.recv_json()["type"] == "welcome"
            # The link opens a new tab (target=_blank), as a click does for a person.
            before = set(agent.driver.window_handles)
            link.click()
            opened = agent.wait(lambda b: set(b.driver.window_handles) - before, 10, "the call's tab")
            agent.driver.switch_to.window(opened.pop())
            agent.wait_css('#status[data-state="connected"]', 10, "the agent in the room")
            assert agent.attr("#me", "data-room-id") == room_id
            assert agent.attr("#me", "data-call-id") == call_id
            assert agent.attr("#me", "data-peer-id") == "ann"
            assert agent.attr("#me", "data-role") == "agent"
            agent.wait_css('#peers li[data-peer-id="carl"]', 10, "carl in ann's room")
            joined = recv_type(carl_room, "peer-joined")
            assert joined["payload"]["peer_id"] == "ann", joined
        finally:
            carl_room.close()
    finally:
        caller.close()
