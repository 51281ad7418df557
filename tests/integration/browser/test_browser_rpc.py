"""RPC between a Linux voice agent and a Chromium page (issue 44, docs/protocol.md "RPC"): the
agent (`Examples/VoiceAgent`, the Swift SDK) on peer host B asks the page (the browser SDK in
Chromium on peer host A) for something with `performRpc` and prints the answer its handler
returned; the page asks the agent back (`agent-state`), and a method the page never registered
fails at the agent's side with 1400. Both through the real server in the lab (browser_lab.py)."""

from __future__ import annotations

import json
import os

import pytest

import support
from peers import clean_env

VOICE_AGENT = support.REPO / ".build" / "debug" / "VoiceAgent"

PAGE = """
const [options, done] = [arguments[0], arguments[arguments.length - 1]];
import("/sdk/calling-client.js").then(async ({ CallingClient, RpcError }) => {
  const client = new CallingClient({ url: "ws://" + location.host + "/v1/ws", ...options });
  const t = window.__t = { client, asked: [] };
  client.registerRpcMethod("get-location", ({ callerId, payload, responseTimeoutMs }) => {
    t.asked.push({ callerId, payload, responseTimeoutMs });
    return JSON.stringify({ city: "Lyon", precise: JSON.parse(payload).precise === true });
  });
  client.registerRpcMethod("refuse", () => { throw new RpcError(2001, "not on this page", "why"); });
  await client.connect();
  done("connected");
}).catch((error) => done("setup failed: " + error));
"""

ASK_AGENT = """
const done = arguments[arguments.length - 1];
window.__t.client.performRpc("agent", "agent-state", "", 5000).then((answer) => done({ answer }),
  (error) => done({ code: error.code, message: error.message }));
"""


def agent(blab, room: str, ask: str, label: str):
    if not os.access(VOICE_AGENT, os.X_OK):
        pytest.skip(f"{VOICE_AGENT} is missing: swift build (target VoiceAgent)")
    lab, server = blab.lab, blab.server
    env = {**clean_env(), "VOICE_URL": server.ws_url_for(lab.b), "VOICE_TOKEN": server.token(room, "agent"), "VOICE_ASK": ask}
    return lab.spawn(lab.b, [str(VOICE_AGENT)], label, env=env)


def test_a_voice_agent_asks_the_page_and_gets_its_answer(blab):
    page = blab.browser("page")
    page.open("/")
    assert page.js_async(PAGE, {"token": blab.server.token("rpc", "page", name="Page")}, timeout=15) == "connected"

    asking = agent(blab, "rpc", 'page get-location {"precise":true}', "voice-agent")
    answer = asking.wait_for_output(r"rpc page get-location: (.*)", 30).group(1)
    assert json.loads(answer) == {"city": "Lyon", "precise": True}
    asked = page.js("return window.__t.asked;")
    assert asked == [{"callerId": "agent", "payload": '{"precise":true}', "responseTimeoutMs": 10000}], asked

    # The page asks the agent back.
    assert page.js_async(ASK_AGENT, timeout=10) == {"answer": '{"state":"listening"}'}

    # A handler's own error, and a method the page never registered, reach the agent typed.
    refused = agent(blab, "rpc-2", "page refuse", "voice-agent-refused")
    other = blab.browser("page-2")
    other.open("/")
    assert other.js_async(PAGE, {"token": blab.server.token("rpc-2", "page", name="Page")}, timeout=15) == "connected"
    assert "failed: 2001 not on this page" in refused.wait_for_output(r"rpc page refuse failed: .*", 30).group(0)
    unknown = agent(blab, "rpc", "page nothing", "voice-agent-unknown")
    assert unknown.wait_for_output(r"rpc page nothing failed: (\d+)", 30).group(1) == "1400"
