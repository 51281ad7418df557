// What survives a drop (docs/browser.md "What survives a drop"): the pure units (_RelayHold,
// _IceRecovery, _reconcileCalls) and CallingClient driven through the fakes of fakes.mjs: a peer in
// its reconnect grace keeps its call and gets its refused relays again after peer-resumed, our own
// resume reconciles calls with the roster, a ringing offer ends as "cancelled", leave before every
// close, and ICE restarts from the caller with a give-up window.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CallingClient, _IceRecovery, _RelayHold, _reconcileCalls } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, flush, makeFetch, makePeerConnectionClass, makeToken, makeTrack, makeWebSocketClass, record } from "./fakes.mjs";

const ICE = { ice_servers: [{ urls: ["stun:stun.example.org:3478"] }], ttl: 3600, expires_at: 1 };

/** A minimal EventTarget for `window` and `navigator.connection`. */
class FakeTarget {
  constructor() {
    this.handlers = new Map();
  }

  addEventListener(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, new Set());
    this.handlers.get(name).add(fn);
  }

  removeEventListener(name, fn) {
    this.handlers.get(name)?.delete(fn);
  }

  dispatch(name) {
    for (const fn of Array.from(this.handlers.get(name) || [])) fn({ type: name });
  }

  count(name) {
    return this.handlers.get(name)?.size ?? 0;
  }
}

function setup(clientOptions = {}) {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const PC = makePeerConnectionClass();
  let iceFetches = 0;
  const fetch = makeFetch(({ url }) => {
    if (!url.endsWith("/v1/ice")) return null;
    iceFetches += 1;
    return { status: 200, body: { ...ICE, ice_servers: [{ urls: [`turn:turn.example.org?n=${iceFetches}`] }] } };
  });
  const page = new FakeTarget();
  const network = new FakeTarget();
  const client = new CallingClient({
    url: "ws://127.0.0.1:9/v1/ws",
    token: makeToken({ sub: "alice", room_id: "r1", scope: "room", exp: 4102444800 }),
    WebSocket: WS,
    fetch,
    RTCPeerConnection: PC,
    timers: clock.api(),
    random: () => 0.5,
    backoff: { jitter: 0 },
    statsIntervalMs: 0,
    pingIntervalMs: 0,
    window: page,
    network,
    ...clientOptions,
  });
  return { clock, WS, PC, fetch, client, page, network };
}

function welcome(peers = ["bob"], extra = {}) {
  return {
    type: "welcome",
    payload: {
      peer_id: "alice", room_id: "r1", call_id: "call_1", role: "host", name: "Alice",
      peers: peers.map((id) => ({ peer_id: id, role: "peer", name: id })),
      ping_interval_ms: 25000, server_time: 1, last_seq: 0, read_seq: 0, unread: 0, ...extra,
    },
  };
}

/** alice calls bob; bob answers; ICE connects. */
async function inCall(env, peers = ["bob"]) {
  const ws = await connectWith(env, welcome(peers));
  const pc = await env.client.call("bob", [makeTrack("mic")]);
  ws.receive({ type: "answer", from: "bob", payload: { sdp: "bob-answer", type: "answer" } });
  await flush();
  pc.setIceState("connected");
  return { ws, pc };
}

/** bob calls alice; alice accepts; ICE connects. */
async function answered(env) {
  const ws = await connectWith(env, welcome());
  const events = record(env.client, ["incoming"]);
  ws.receive({ type: "offer", from: "bob", payload: { sdp: "bob-offer", type: "offer" } });
  const pc = await events.of("incoming")[0].accept([makeTrack("mic")]);
  await flush();
  pc.setIceState("connected");
  return { ws, pc };
}

// The server's own frame (Hub.route): the refused type only, no `to`; the message is for humans.
const refused = (type, peer = "bob") => ({ type: "error", error: { code: 480, message: `peer '${peer}' is reconnecting; send again after peer-resumed` }, payload: { type } });

// --- pure units -----------------------------------------------------------------------------------

test("_RelayHold: refused frames are the last ones sent; resent with the held ones, in order, on release", () => {
  const hold = new _RelayHold({ limit: 10 });
  hold.sent("bob", "offer", "o1");
  hold.sent("bob", "candidate", "c1");
  hold.sent("bob", "candidate", "c2");
  hold.hold("bob");
  assert.equal(hold.isHeld("bob"), true);
  assert.equal(hold.refused("candidate"), "bob"); // the 480 names no peer: the one held
  assert.equal(hold.refused("candidate"), "bob");
  assert.equal(hold.refused("candidate"), null, "no third candidate was sent");
  assert.equal(hold.push("bob", "candidate", "c3"), true);
  assert.equal(hold.waiting("bob"), 3);
  assert.deepEqual(hold.release("bob"), ["c1", "c2", "c3"]);
  assert.equal(hold.isHeld("bob"), false);
  assert.deepEqual(hold.release("bob"), []);
});

test("_RelayHold: 480s are counted in the order frames were sent, across held peers; unknown refusals are not absorbed", () => {
  const hold = new _RelayHold();
  assert.equal(hold.refused("offer"), null, "nobody held: the error is the app's");
  hold.sent("bob", "data", "d-bob");
  hold.sent("bob", "candidate", "c-bob");
  hold.sent("carol", "data", "d-carol");
  hold.sent("dave", "data", "d-dave"); // dave is not held: never counted
  hold.hold("bob");
  hold.hold("carol");
  // The server answers in the order it got the frames: data (bob), candidate (bob), data (carol).
  assert.equal(hold.refused("data"), "bob");
  assert.equal(hold.refused("candidate"), "bob");
  assert.equal(hold.refused("data"), "carol");
  assert.equal(hold.refused("data"), null, "dave's data was delivered");
  assert.deepEqual(hold.release("carol"), ["d-carol"]);
  assert.deepEqual(hold.release("bob"), ["d-bob", "c-bob"]);
});

test("_RelayHold: at most `limit` frames wait per peer; drop() forgets them", () => {
  const hold = new _RelayHold({ limit: 3 });
  hold.sent("bob", "candidate", "c0");
  hold.hold("bob");
  hold.refused("candidate");
  assert.equal(hold.push("bob", "candidate", "c1"), true);
  assert.equal(hold.push("bob", "candidate", "c2"), true);
  assert.equal(hold.push("bob", "candidate", "c3"), false);
  assert.equal(hold.drop("bob"), 3);
  assert.equal(hold.isHeld("bob"), false);
  // The log itself is bounded too: only the last `limit` frames can be counted back.
  for (let i = 0; i < 10; i++) hold.sent("bob", "candidate", `x${i}`);
  hold.hold("bob");
  for (let i = 0; i < 5; i++) hold.refused("candidate");
  assert.deepEqual(hold.release("bob"), ["x7", "x8", "x9"]);
});

test("_IceRecovery: disconnected restarts after the debounce, again every retryMs, gives up after the window", async () => {
  const clock = new FakeTimers();
  const log = [];
  const r = new _IceRecovery({ restarter: true, windowMs: 15000, debounceMs: 2000, retryMs: 5000, timers: clock.api(),
    restart: () => log.push(["restart", clock.time]), giveUp: () => log.push(["giveUp", clock.time]) });
  r.onIceState("connected");
  r.onIceState("disconnected");
  assert.equal(r.recovering, true);
  await clock.advance(1999);
  assert.deepEqual(log, []);
  await clock.advance(20000);
  assert.deepEqual(log, [["restart", 2000], ["restart", 7000], ["restart", 12000], ["giveUp", 15000]]);
  assert.equal(r.restarts, 3);
  assert.equal(clock.pending, 0);
});

test("_IceRecovery: failed restarts at once; connected closes the window; only the restarter restarts", async () => {
  const clock = new FakeTimers();
  const log = [];
  const r = new _IceRecovery({ restarter: true, timers: clock.api(), restart: () => log.push("restart"), giveUp: () => log.push("giveUp") });
  r.onIceState("failed");
  assert.deepEqual(log, ["restart"]);
  await clock.advance(6000);
  r.onIceState("checking");
  r.onIceState("connected");
  assert.equal(r.recovering, false);
  await clock.advance(60000);
  assert.deepEqual(log, ["restart", "restart"]);

  const other = [];
  const callee = new _IceRecovery({ restarter: false, timers: clock.api(), restart: () => other.push("restart"), giveUp: () => other.push("giveUp") });
  callee.onIceState("failed");
  callee.onNetworkChange();
  callee.onSignalingResumed(false);
  await clock.advance(15000);
  assert.deepEqual(other, ["giveUp"]);
});

test("_IceRecovery: a network change restarts even a healthy call (no window); a resume restarts only an unhealthy one", async () => {
  const clock = new FakeTimers();
  const log = [];
  const r = new _IceRecovery({ restarter: true, timers: clock.api(), restart: () => log.push("restart"), giveUp: () => log.push("giveUp") });
  r.onIceState("connected");
  r.onNetworkChange();
  assert.deepEqual(log, ["restart"]);
  assert.equal(r.recovering, false);
  r.onSignalingResumed(true);
  assert.deepEqual(log, ["restart"]);
  r.onSignalingResumed(false);
  assert.deepEqual(log, ["restart", "restart"]);
  assert.equal(r.recovering, true);
  r.stop();
  await clock.advance(60000);
  assert.deepEqual(log, ["restart", "restart"]);
});

test("_IceRecovery: the window does not run out while canGiveUp() says no (the peer is in its grace)", async () => {
  const clock = new FakeTimers();
  let peerAway = true;
  const log = [];
  const r = new _IceRecovery({ restarter: false, windowMs: 1000, timers: clock.api(), restart: () => {}, giveUp: () => log.push(clock.time),
    canGiveUp: () => !peerAway });
  r.onIceState("failed");
  await clock.advance(5000);
  assert.deepEqual(log, []);
  peerAway = false;
  await clock.advance(1000);
  assert.deepEqual(log, [6000]);
});

test("_reconcileCalls: calls with a peer gone end, ringing offers of a gone caller are cancelled, the rest stay", () => {
  const out = _reconcileCalls(["bob", "carol"], ["dave", "bob"], [{ peer_id: "bob" }]);
  assert.deepEqual(out, { ended: ["carol"], cancelled: ["dave"], kept: ["bob"] });
});

// --- CallingClient --------------------------------------------------------------------------------

test("peer-reconnecting keeps the call; relays are held, refused ones (480) taken back, all resent after peer-resumed", async () => {
  const env = setup();
  const events = record(env.client, ["hangup", "peer-reconnecting", "peer-resumed", "error"]);
  const { ws, pc } = await inCall(env);
  pc.emitCandidate({ candidate: "cand-1", sdpMid: "0", sdpMLineIndex: 0 });
  ws.receive({ type: "peer-reconnecting", payload: { peer_id: "bob" } });
  // The server refused the candidate that was on its way when the grace began.
  ws.receive(refused("candidate"));
  pc.emitCandidate({ candidate: "cand-2", sdpMid: "0", sdpMLineIndex: 0 });
  env.client.sendData({ kind: "note" }, "bob");
  assert.deepEqual(ws.framesOf("candidate").map((f) => f.payload.candidate), ["cand-1"], "nothing sent while bob is away");
  assert.equal(ws.framesOf("data").length, 0);
  assert.deepEqual(events.of("peer-reconnecting"), [{ peer_id: "bob" }]);
  assert.deepEqual(events.of("error"), [], "a refusal the SDK handles is not the app's error");
  assert.deepEqual(events.of("hangup"), []);
  assert.equal(env.client.connection("bob"), pc);
  assert.deepEqual(env.client.peers.map((p) => p.peer_id), ["bob"], "bob's seat is held");

  ws.receive({ type: "peer-resumed", payload: { peer_id: "bob" } });
  const after = ws.frames.slice(-3);
  assert.deepEqual(after.map((f) => [f.type, f.payload.candidate ?? f.payload.kind]), [["candidate", "cand-1"], ["candidate", "cand-2"], ["data", "note"]]);
  assert.deepEqual(events.of("peer-resumed"), [{ peer_id: "bob" }]);
  assert.deepEqual(events.of("hangup"), []);
  assert.equal(pc.closed, false);
});

test("a peer whose grace runs out (peer-left) ends the call as peer-left; held frames are dropped", async () => {
  const env = setup();
  const events = record(env.client, ["hangup"]);
  const { ws, pc } = await inCall(env);
  ws.receive({ type: "peer-reconnecting", payload: { peer_id: "bob" } });
  env.client.sendData({ kind: "note" }, "bob");
  ws.receive({ type: "peer-left", payload: { peer_id: "bob" } });
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "peer-left" }]);
  assert.equal(pc.closed, true);
  const sent = ws.sent.length;
  ws.receive({ type: "peer-resumed", payload: { peer_id: "bob" } });
  assert.equal(ws.sent.length, sent, "nothing held any more");
});

test("heldRelayLimit: one frame too many for a reconnecting peer is dropped with relay_overflow", async () => {
  const env = setup({ heldRelayLimit: 2 });
  const events = record(env.client, ["error"]);
  const { ws } = await inCall(env);
  ws.receive({ type: "peer-reconnecting", payload: { peer_id: "bob" } });
  env.client.sendData({ n: 1 }, "bob");
  env.client.sendData({ n: 2 }, "bob");
  env.client.sendData({ n: 3 }, "bob");
  assert.deepEqual(events.of("error").map((e) => [e.code, e.retryable, e.frameType]), [["relay_overflow", false, "data"]]);
  ws.receive({ type: "peer-resumed", payload: { peer_id: "bob" } });
  assert.deepEqual(ws.framesOf("data").map((f) => f.payload.n), [1, 2]);
});

test("a 480 for a peer nobody knows to be reconnecting is reported as a temporary error", async () => {
  const env = setup();
  const events = record(env.client, ["error"]);
  const { ws } = await inCall(env);
  ws.receive(refused("offer"));
  assert.deepEqual(events.of("error").map((e) => [e.code, e.retryable, e.frameType]), [[480, true, "offer"]]);
});

test("our own resume: a call whose peer is gone ends (peer-left), one whose peer is present is kept", async () => {
  const env = setup();
  const events = record(env.client, ["hangup", "peer-left"]);
  const ws = await connectWith(env, welcome(["bob", "carol"]));
  const bobPc = await env.client.call("bob", [makeTrack("a")]);
  const carolPc = await env.client.call("carol", [makeTrack("b")]);
  ws.receive({ type: "offer", from: "dave", payload: { sdp: "dave-offer", type: "offer" } }); // dave joined and rings
  for (const pc of [bobPc, carolPc]) pc.setIceState("connected");
  ws.drop();
  await env.clock.advance(1000);
  env.WS.last().open();
  env.WS.last().receive(welcome(["bob"], { recovered: true, replay_count: 0 }));
  assert.deepEqual(events.of("hangup"), [{ peerId: "dave", reason: "cancelled" }, { peerId: "carol", reason: "peer-left" }]);
  assert.deepEqual(events.of("peer-left"), [{ peer_id: "carol" }]);
  assert.equal(env.client.connection("bob"), bobPc);
  assert.equal(bobPc.closed, false);
  assert.equal(carolPc.closed, true);
});

test("welcome.peers `reconnecting: true` holds relays to that peer; a held peer listed without it after our resume gets them at once", async () => {
  const env = setup();
  const events = record(env.client, ["error"]);
  const ws = await connectWith(env, { ...welcome(["bob"]), payload: { ...welcome(["bob"]).payload, peers: [{ peer_id: "bob", role: "peer", name: "bob", reconnecting: true }] } });
  assert.equal(env.client.peers[0].reconnecting, true);
  env.client.sendData({ n: 1 }, "bob");
  assert.equal(ws.framesOf("data").length, 0, "bob is in his grace: held, not refused by the server");
  // Our own socket drops; bob came back meanwhile, so no peer-resumed will ever reach us.
  ws.drop();
  await env.clock.advance(1000);
  const ws2 = env.WS.last();
  ws2.open();
  ws2.receive(welcome(["bob"], { recovered: true, replay_count: 0 }));
  assert.deepEqual(ws2.framesOf("data").map((f) => [f.to, f.payload.n]), [["bob", 1]]);
  assert.deepEqual(events.of("error"), []);
  env.client.sendData({ n: 2 }, "bob");
  assert.deepEqual(ws2.framesOf("data").map((f) => f.payload.n), [1, 2]);
});

test("peers marks a peer `reconnecting: true` between peer-reconnecting and peer-resumed", async () => {
  const env = setup();
  const ws = await connectWith(env, welcome(["bob", "carol"]));
  ws.receive({ type: "peer-reconnecting", from: "bob", payload: { peer_id: "bob" } });
  assert.deepEqual(env.client.peers.map((p) => [p.peer_id, p.reconnecting === true]), [["bob", true], ["carol", false]]);
  ws.receive({ type: "peer-resumed", from: "bob", payload: { peer_id: "bob" } });
  assert.deepEqual(env.client.peers, [{ peer_id: "bob", role: "peer", name: "bob" }, { peer_id: "carol", role: "peer", name: "carol" }]);
});

test("ringing ends cleanly: the caller's hangup before the answer, or the caller leaving, is `cancelled`; accept() then fails", async () => {
  const env = setup();
  const events = record(env.client, ["incoming", "hangup"]);
  const ws = await connectWith(env, welcome(["bob", "carol"]));
  ws.receive({ type: "offer", from: "bob", payload: { sdp: "bob-offer", type: "offer" } });
  ws.receive({ type: "data", from: "bob", payload: { kind: "hangup" } });
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "cancelled" }]);
  await assert.rejects(events.of("incoming")[0].accept([makeTrack("m")]), (e) => e.code === "invalid_state");
  ws.receive({ type: "offer", from: "carol", payload: { sdp: "carol-offer", type: "offer" } });
  ws.receive({ type: "peer-reconnecting", payload: { peer_id: "carol" } });
  assert.equal(events.of("hangup").length, 1, "a caller on a blip keeps ringing");
  ws.receive({ type: "peer-left", payload: { peer_id: "carol" } });
  assert.deepEqual(events.of("hangup").at(-1), { peerId: "carol", reason: "cancelled" });
  // A hangup with no call and no offer stays silent.
  ws.receive({ type: "data", from: "bob", payload: { kind: "hangup" } });
  assert.equal(events.of("hangup").length, 2);
});

test("disconnect() and pagehide send leave before closing with 1000; the page listeners go with the session", async () => {
  const env = setup();
  const ws = await connectWith(env, welcome());
  assert.equal(env.page.count("pagehide"), 1);
  env.client.disconnect();
  assert.deepEqual(ws.frames.at(-1), { type: "leave" });
  assert.deepEqual(ws.closedByClient, { code: 1000, reason: "normal" });
  assert.equal(env.page.count("pagehide"), 0);
  assert.equal(env.page.count("online"), 0);
  assert.equal(env.network.count("change"), 0);

  const again = env.client.connect();
  const ws2 = env.WS.last();
  ws2.open();
  ws2.receive(welcome());
  await again;
  env.page.dispatch("pagehide");
  assert.deepEqual(ws2.frames.at(-1), { type: "leave" });
  assert.deepEqual(ws2.closedByClient, { code: 1000, reason: "normal" });
  assert.equal(env.client.state, "closed");
});

test("a socket the SDK drops without leaving closes with 4000, never 1000/1001 (a clean leave to the server): unanswered ping, connect timeout, early error", async () => {
  const cleanLeave = (ws) => ws.closedByClient && (ws.closedByClient.code === 1000 || ws.closedByClient.code === 1001);
  // An unanswered keep-alive ping: the half-open socket is dropped and replaced.
  const env = setup({ pingIntervalMs: 1000, connectTimeoutMs: 5000 });
  const ws = await connectWith(env, welcome());
  await env.clock.advance(1000);
  await env.clock.advance(1000); // no pong
  assert.deepEqual(ws.closedByClient, { code: 4000, reason: "abandoned" });
  assert.deepEqual(ws.framesOf("leave"), [], "no leave: our seat must wait for the reconnect");
  // The reconnect opens but no welcome comes within connectTimeoutMs: dropped the same way.
  await env.clock.advance(1000);
  const stuck = env.WS.last();
  assert.notEqual(stuck, ws);
  stuck.open();
  await env.clock.advance(5000);
  assert.deepEqual(stuck.closedByClient, { code: 4000, reason: "abandoned" });
  assert.equal(env.client.state, "reconnecting");
  // The one that gets its welcome, then disconnect(): leave, then 1000.
  while (env.WS.last() === stuck) await env.clock.advance(100);
  const good = env.WS.last();
  good.open();
  good.receive(welcome());
  assert.equal(env.client.state, "connected");
  env.client.disconnect();
  assert.deepEqual(good.framesOf("leave"), [{ type: "leave" }]);
  assert.deepEqual(good.closedByClient, { code: 1000, reason: "normal" });
  for (const socket of env.WS.instances.slice(0, -1)) assert.equal(cleanLeave(socket), false, JSON.stringify(socket.closedByClient));

  // A first connect refused by an early `error` frame.
  const env2 = setup();
  const pending = env2.client.connect();
  const first = env2.WS.last();
  first.open();
  first.receive({ type: "error", error: { code: 429, message: "slow down" } });
  await assert.rejects(pending);
  assert.deepEqual(first.closedByClient, { code: 4000, reason: "abandoned" });
});

test("ICE failed on the caller: fresh /v1/ice, setConfiguration, an iceRestart offer; the answer is applied on the same connection", async () => {
  const env = setup();
  const events = record(env.client, ["hangup", "ice-restart"]);
  const { ws, pc } = await inCall(env);
  const fetchesBefore = env.fetch.calls.length;
  pc.setIceState("failed");
  await flush();
  assert.deepEqual(events.of("ice-restart"), [{ peerId: "bob", attempt: 1 }]);
  assert.equal(env.fetch.calls.length, fetchesBefore + 1, "fresh credentials");
  const config = pc.log.filter((l) => l[0] === "setConfiguration");
  assert.deepEqual(config, [["setConfiguration", [{ urls: ["turn:turn.example.org?n=2"] }]]]);
  assert.deepEqual(pc.log.filter((l) => l[0] === "createOffer").at(-1), ["createOffer", "iceRestart"]);
  const offers = ws.framesOf("offer");
  assert.equal(offers.length, 2);
  assert.equal(offers[1].to, "bob");
  ws.receive({ type: "answer", from: "bob", payload: { sdp: "bob-restart-answer", type: "answer" } });
  await flush();
  assert.deepEqual(pc.log.filter((l) => l[0] === "setRemoteDescription").at(-1), ["setRemoteDescription", "answer", "bob-restart-answer"]);
  pc.setIceState("connected");
  await env.clock.advance(60000);
  assert.deepEqual(events.of("hangup"), []);
  assert.equal(events.of("ice-restart").length, 1);
  // A late duplicate of the answer (resent after a resume) is ignored, not an error.
  ws.receive({ type: "answer", from: "bob", payload: { sdp: "bob-restart-answer", type: "answer" } });
  await flush();
  assert.equal(pc.log.filter((l) => l[0] === "setRemoteDescription").length, 2);
});

test("ICE that never comes back: restarts every 5 s, then both sides end with `disconnected` after iceRestartWindowMs", async () => {
  const env = setup({ iceRestartWindowMs: 12000 });
  const events = record(env.client, ["hangup", "ice-restart"]);
  const { ws, pc } = await inCall(env);
  pc.setIceState("disconnected");
  await env.clock.advance(1999);
  assert.equal(events.of("ice-restart").length, 0, "debounced");
  await env.clock.advance(1);
  await env.clock.advance(9999);
  assert.deepEqual(events.of("ice-restart").map((e) => e.attempt), [1, 2]);
  // The unanswered restart offer is rolled back before the next one.
  assert.ok(pc.log.some((l) => l[0] === "setLocalDescription" && l[1] === "rollback"));
  assert.equal(events.of("hangup").length, 0);
  await env.clock.advance(1);
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "disconnected" }]);
  assert.deepEqual(ws.framesOf("data").at(-1), { type: "data", to: "bob", payload: { kind: "hangup" } });
  assert.equal(pc.closed, true);

  const callee = setup();
  const calleeEvents = record(callee.client, ["hangup", "ice-restart"]);
  const { pc: calleePc } = await answered(callee);
  calleePc.setIceState("failed");
  await callee.clock.advance(15000);
  assert.deepEqual(calleeEvents.of("ice-restart"), [], "the callee never offers");
  assert.deepEqual(calleeEvents.of("hangup"), [{ peerId: "bob", reason: "disconnected" }]);
});

test("the callee answers the caller's ICE-restart offer on the same peer connection", async () => {
  const env = setup();
  const { ws, pc } = await answered(env);
  const events = record(env.client, ["incoming", "hangup"]);
  pc.setIceState("disconnected");
  ws.receive({ type: "offer", from: "bob", payload: { sdp: "bob-restart-offer", type: "offer" } });
  await flush();
  assert.equal(events.of("incoming").length, 0, "not a new call");
  assert.deepEqual(pc.log.filter((l) => l[0] === "setRemoteDescription").at(-1), ["setRemoteDescription", "offer", "bob-restart-offer"]);
  assert.equal(ws.framesOf("answer").length, 2);
  pc.setIceState("connected");
  await env.clock.advance(60000);
  assert.deepEqual(events.of("hangup"), []);
});

test("the browser's online event and a network change restart ICE on the caller; no restart while our socket is down, one after the resume", async () => {
  const env = setup();
  const events = record(env.client, ["ice-restart", "hangup"]);
  const { ws, pc } = await inCall(env);
  env.page.dispatch("online");
  await flush();
  env.network.dispatch("change");
  await flush();
  assert.deepEqual(events.of("ice-restart").map((e) => e.attempt), [1, 2]);
  ws.receive({ type: "answer", from: "bob", payload: { sdp: "a", type: "answer" } });
  await flush();

  ws.drop();
  pc.setIceState("failed");
  await flush();
  assert.equal(events.of("ice-restart").length, 2, "no signaling: no restart offer");
  await env.clock.advance(1000);
  env.WS.last().open();
  env.WS.last().receive(welcome(["bob"], { recovered: true, replay_count: 0 }));
  await flush();
  assert.equal(events.of("ice-restart").length, 3);
  assert.equal(env.WS.last().framesOf("offer").length, 1, "the restart offer went out on the new socket");
  assert.deepEqual(events.of("hangup"), []);
});

test("a peer in its grace gets no restart offer and does not time the call out; peer-resumed restarts ICE", async () => {
  const env = setup({ iceRestartWindowMs: 5000 });
  const events = record(env.client, ["ice-restart", "hangup"]);
  const { ws, pc } = await inCall(env);
  ws.receive({ type: "peer-reconnecting", payload: { peer_id: "bob" } });
  pc.setIceState("failed");
  await env.clock.advance(20000);
  assert.deepEqual(events.of("hangup"), []);
  assert.equal(ws.framesOf("offer").length, 1);
  ws.receive({ type: "peer-resumed", payload: { peer_id: "bob" } });
  await flush();
  assert.equal(ws.framesOf("offer").length, 2);
  assert.ok(events.of("ice-restart").length >= 1);
});

test("a late ICE-restart offer of a call that already ended is no new call: answered with a hangup; a new connection's offer rings", async () => {
  const env = setup({ iceRestartWindowMs: 4000 });
  const ws = await connectWith(env, welcome());
  const events = record(env.client, ["incoming", "hangup"]);
  // The o= line's session id is the connection's; an ICE restart only raises the version.
  const offer = (session, version) => ({ type: "offer", sdp: `v=0\r\no=- ${session} ${version} IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n` });
  ws.receive({ type: "offer", from: "bob", payload: offer("7563413199071111170", 2) });
  const pc = await events.of("incoming")[0].accept([makeTrack("mic")]);
  await flush();
  pc.setIceState("connected");
  pc.setIceState("failed");
  await env.clock.advance(4000);
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "disconnected" }]);
  const sent = ws.framesOf("data").length;

  // bob's restart offer, held up while the network was down, arrives after our window ran out.
  ws.receive({ type: "offer", from: "bob", payload: offer("7563413199071111170", 3) });
  await flush();
  assert.equal(events.of("incoming").length, 1, "not rung as a new call");
  assert.equal(ws.framesOf("data").length, sent + 1);
  assert.deepEqual(ws.framesOf("data").at(-1), { type: "data", to: "bob", payload: { kind: "hangup" } });
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "disconnected" }], "no `cancelled` ring either");

  // A new call from bob (a new connection: a new session id) rings as always.
  ws.receive({ type: "offer", from: "bob", payload: offer("1111", 2) });
  await flush();
  assert.equal(events.of("incoming").length, 2);
});
