// PresenceClient through fakes: snapshot, agents and requests maps, frames for each role, close
// handling (closed vs disconnected, terminal 4400/4401, reconnect otherwise), the agent's status
// set again after a reconnect to a server that lost it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PresenceClient, _AgentStatusMemory } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, makeFetch, makeToken, makeWebSocketClass, record } from "./fakes.mjs";

function setup(options = {}, claims = {}) {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const fetch = makeFetch(({ url }) => (url.endsWith("/v1/ice") ? { status: 200, body: { ice_servers: [] } } : null));
  const token = makeToken({ sub: "ann", role: "agent", scope: "presence", exp: 4102444800, ...claims });
  const client = new PresenceClient({ url: "ws://127.0.0.1:9/v1/presence", token, WebSocket: WS, fetch, timers: clock.api(), backoff: { jitter: 0 }, ...options });
  return { clock, WS, client, token };
}

const snapshot = {
  peer_id: "ann", role: "agent", server_time: 5,
  agents: [{ agent_id: "ann", status: "available", note: null, queues: ["sales"], updated_at: 1 }],
  requests: [{ request_id: "req_1", agent_id: "bea", caller_id: "carl", name: null, queue: null, state: "ringing", expires_at: 99 }],
};

function connect(env) {
  return connectWith(env, { type: "connected", payload: snapshot });
}

test("connect resolves with the snapshot; agents and requests maps follow the frames", async () => {
  const env = setup({ queues: ["sales", "support"] });
  const events = record(env.client, ["connected", "status", "request", "accepted", "ended", "error"]);
  const promise = env.client.connect();
  const ws = env.WS.last();
  assert.equal(new URL(ws.url).pathname, "/v1/presence");
  assert.equal(ws.query.get("queues"), "sales,support");
  assert.equal(ws.query.get("token"), env.token);
  ws.open();
  ws.receive({ type: "connected", payload: snapshot });
  assert.deepEqual(await promise, snapshot);
  assert.equal(env.client.peerId, "ann");
  assert.equal(env.client.role, "agent");
  assert.equal(env.client.agents.get("ann").status, "available");
  assert.equal(env.client.requests.get("req_1").caller_id, "carl");
  ws.receive({ type: "status", from: "bea", payload: { agent_id: "bea", status: "busy", note: "lunch", queues: [], updated_at: 2 } });
  assert.equal(env.client.agents.get("bea").status, "busy");
  ws.receive({ type: "request", from: "carl", payload: { request_id: "req_2", from: "carl", name: "Carl", queue: "sales", metadata: { topic: "x" }, expires_at: 100 } });
  assert.equal(env.client.requests.size, 2);
  ws.receive({ type: "accepted", payload: { request_id: "req_2", call_id: "call_1", room_id: "room_1", agent_id: "ann", caller_id: "carl", token: "room-token" } });
  ws.receive({ type: "ended", payload: { request_id: "req_1", reason: "timeout", agent_id: "bea", caller_id: "carl" } });
  assert.equal(env.client.requests.size, 0);
  ws.receive({ type: "error", error: { code: 409, message: "already accepted" }, payload: { type: "accept", request_id: "req_2" } });
  const [error] = events.of("error");
  assert.equal(error.code, 409);
  assert.equal(error.frameType, "accept");
  assert.equal(error.requestId, "req_2");
  assert.deepEqual(events.of("accepted")[0].token, "room-token");
  assert.deepEqual(events.of("ended")[0].reason, "timeout");
  assert.equal(events.of("status").length, 1);
  assert.equal(events.of("request").length, 1);
});

test("frames sent for setStatus, request, accept, decline, cancel, ping", async () => {
  const env = setup();
  const ws = await connect(env);
  env.client.setStatus("away", { note: "back soon", queues: ["sales"] });
  env.client.setStatus("available");
  env.client.request({ agentId: "bea", metadata: { topic: "billing" } });
  env.client.request({ queue: "sales" });
  env.client.accept("req_1");
  env.client.decline("req_2");
  env.client.cancel("req_3");
  const pong = env.client.ping({ n: 2 });
  ws.receive({ type: "pong", payload: { n: 2 } });
  assert.deepEqual(await pong, { n: 2 });
  assert.deepEqual(ws.frames, [
    { type: "status", payload: { status: "away", note: "back soon", queues: ["sales"] } },
    { type: "status", payload: { status: "available" } },
    { type: "request", payload: { agent_id: "bea", metadata: { topic: "billing" } } },
    { type: "request", payload: { queue: "sales" } },
    { type: "accept", payload: { request_id: "req_1" } },
    { type: "decline", payload: { request_id: "req_2" } },
    { type: "cancel", payload: { request_id: "req_3" } },
    { type: "ping", payload: { n: 2 } },
  ]);
  assert.throws(() => env.client.request({}), (e) => e.code === "invalid_argument");
  assert.throws(() => env.client.request({ agentId: "a", queue: "q" }), (e) => e.code === "invalid_argument");
  assert.throws(() => env.client.accept(""), (e) => e.code === "invalid_argument");
});

test("4400 replaced: closed then disconnected, no reconnect; 4401 terminal without refreshToken", async () => {
  for (const code of [4400, 4401]) {
    const env = setup();
    const events = record(env.client, ["closed", "disconnected", "reconnecting"]);
    const ws = await connect(env);
    ws.serverClose(code, "x");
    assert.deepEqual(events.map(([name, e]) => [name, e.code, e.willReconnect]), [["closed", code, false], ["disconnected", code, false]]);
    assert.equal(env.client.state, "closed");
    await env.clock.advance(60000);
    assert.equal(env.WS.instances.length, 1);
    assert.throws(() => env.client.setStatus("busy"), (e) => e.code === "not_connected");
  }
});

test("a drop (no close frame) is only disconnected, then reconnects and takes a new snapshot", async () => {
  const env = setup({ refreshToken: () => "fresh" });
  const events = record(env.client, ["closed", "disconnected", "reconnecting", "connected"]);
  const ws = await connect(env);
  ws.drop();
  assert.deepEqual(events.of("disconnected").map((d) => [d.code, d.willReconnect]), [[1006, true]]);
  assert.equal(events.of("closed").length, 0);
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 1000 }]);
  await env.clock.advance(1000);
  const ws2 = env.WS.last();
  assert.equal(ws2.query.get("token"), "fresh");
  ws2.open();
  ws2.receive({ type: "connected", payload: { ...snapshot, agents: [], requests: [] } });
  assert.equal(env.client.state, "connected");
  assert.equal(env.client.agents.size, 0);
  assert.equal(env.client.requests.size, 0);
  assert.equal(events.of("connected").length, 2);
  // 1001 (server restart) is a close frame that allows a reconnect.
  ws2.serverClose(1001, "server shutting down");
  assert.deepEqual(events.of("closed").map((c) => [c.code, c.willReconnect]), [[1001, true]]);
});

test("a refused presence upgrade: the token's scope is checked locally when /v1/ice accepts it", async () => {
  const env = setup({}, { scope: "room" });
  const promise = env.client.connect();
  env.WS.last().drop();
  await assert.rejects(promise, (e) => e.code === "token_wrong_scope" && e.retryable === false);
  const dash = setup({}, { role: "peer" });
  const p2 = dash.client.connect();
  dash.WS.last().drop();
  await assert.rejects(p2, (e) => e.code === "token_wrong_role");
});

test("disconnect() emits disconnected only", async () => {
  const env = setup();
  const events = record(env.client, ["closed", "disconnected"]);
  const ws = await connect(env);
  env.client.disconnect();
  assert.deepEqual(ws.closedByClient, { code: 1000, reason: "normal" });
  assert.deepEqual(events.map(([n]) => n), ["disconnected"]);
});

const ann = (status, note = null, queues = ["sales"]) => ({ agent_id: "ann", status, note, queues, updated_at: 1 });

/** Drops the socket, reconnects, and answers with a snapshot listing `agents`; returns the new socket. */
async function reconnectWith(env, ws, agents) {
  ws.drop();
  await env.clock.advance(1000);
  const next = env.WS.last();
  assert.notEqual(next, ws);
  next.open();
  next.receive({ type: "connected", payload: { ...snapshot, agents, requests: [] } });
  return next;
}

test("_AgentStatusMemory: setStatus on top of what the server said; restore() only when the snapshot differs", () => {
  const memory = new _AgentStatusMemory();
  assert.equal(memory.restore(ann("available")), null, "nothing set: nothing to restore");
  memory.set("away", "lunch");
  assert.deepEqual(memory.value, { status: "away", note: "lunch", queues: undefined });
  assert.deepEqual(memory.restore(ann("available")), { status: "away", note: "lunch" });
  assert.equal(memory.restore(ann("away", "lunch", ["any"])), null, "queues never set: the server's stay");
  assert.deepEqual(memory.restore(undefined), { status: "away", note: "lunch" }, "not listed at all");
  memory.learn(ann("busy", null, ["b", "a"]));
  memory.set("busy"); // the status only: note (cleared) and queues as the server said
  assert.equal(memory.restore(ann("busy", null, ["a", "b"])), null, "queues in any order");
  assert.deepEqual(memory.restore(ann("busy", "x", ["a", "b"])), { status: "busy", note: null, queues: ["b", "a"] });
  memory.forget();
  assert.equal(memory.value, null);
});

test("after a reconnect the agent's status is sent again when the new snapshot differs (a restarted server), not when it kept it", async () => {
  const env = setup();
  const events = record(env.client, ["status"]);
  let ws = await connect(env);
  env.client.setStatus("away", { note: "lunch" });
  assert.deepEqual(ws.framesOf("status"), [{ type: "status", payload: { status: "away", note: "lunch" } }]);
  // A restarted server lists the agent available with its URL's queues: the status goes out again.
  ws = await reconnectWith(env, ws, [ann("available")]);
  assert.deepEqual(ws.framesOf("status"), [{ type: "status", payload: { status: "away", note: "lunch" } }]);
  // Back within presence_grace_seconds: the server kept it, nothing is sent.
  ws = await reconnectWith(env, ws, [ann("away", "lunch")]);
  assert.deepEqual(ws.framesOf("status"), []);
  // The server's own change (busy on accept) is what is remembered from then on.
  ws.receive({ type: "status", from: "ann", payload: ann("busy", null, ["sales", "vip"]) });
  ws.receive({ type: "status", from: "bea", payload: { agent_id: "bea", status: "away", note: null, queues: [], updated_at: 2 } });
  assert.equal(events.of("status").length, 2);
  ws = await reconnectWith(env, ws, [ann("available")]);
  assert.deepEqual(ws.framesOf("status"), [{ type: "status", payload: { status: "busy", note: null, queues: ["sales", "vip"] } }]);
  // A terminal close (4400) then connect(): restored as well.
  ws.serverClose(4400, "replaced");
  assert.equal(env.client.state, "closed");
  const again = env.client.connect();
  ws = env.WS.last();
  ws.open();
  ws.receive({ type: "connected", payload: { ...snapshot, agents: [ann("available")], requests: [] } });
  await again;
  assert.equal(ws.framesOf("status").length, 1);
  // disconnect() forgets it: a new session starts from what the server says.
  env.client.disconnect();
  const fresh = env.client.connect();
  ws = env.WS.last();
  ws.open();
  ws.receive({ type: "connected", payload: { ...snapshot, agents: [ann("available")], requests: [] } });
  await fresh;
  assert.deepEqual(ws.framesOf("status"), []);
});
