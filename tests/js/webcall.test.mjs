// WebCallClient through fakes: the webrtc-proxy session API (POST offer → answer, trickle PATCH,
// renegotiation PATCH, DELETE), the control channel, recovery by an ICE-restart PATCH on the same
// session, and reconnect by re-POST when that is refused or does not bring media back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { WebCallClient } from "../../sdk/js/calling-client.js";
import { FakeTimers, flush, makeFetch, makePeerConnectionClass, makeStream, makeTrack, record } from "./fakes.mjs";

const BASE = "http://127.0.0.1:9/webrtc-proxy/call_1";
const SESSIONS = `${BASE}/v1/webrtc/sessions`;

function setup({ routes, options = {} } = {}) {
  const clock = new FakeTimers();
  const PC = makePeerConnectionClass();
  let sessions = 0;
  const fetch = makeFetch(routes || (({ method, url, headers }) => {
    if (method === "POST" && url === SESSIONS) {
      sessions += 1;
      return created(`s${sessions}`, `agent-answer-${sessions}`);
    }
    // A restart PATCH finds the session gone, so a drop goes on to a re-POST.
    if (method === "PATCH" && headers["Content-Type"] === "application/sdp") return { status: 404, body: { code: "session_not_found" } };
    if (method === "PATCH") return { status: 204, body: "" };
    if (method === "DELETE") return { status: 204, body: "" };
    return null;
  }));
  const call = new WebCallClient({
    baseUrl: `${BASE}/`, accessToken: "access-token", iceServers: [{ urls: "stun:x" }],
    RTCPeerConnection: PC, fetch, timers: clock.api(), now: () => clock.now(), backoff: { jitter: 0 }, ...options,
  });
  return { clock, PC, fetch, call };
}

/** A 201 answer to the session POST. */
function created(sessionId, sdp) {
  return { status: 201, body: { session_id: sessionId, sdp } };
}

/** Routes that answer the session POST with `post()` (which may wait) and anything else with 204. */
function postRoutes(post) {
  return ({ method }) => (method === "POST" ? post() : { status: 204, body: "" });
}

function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

test("start: control channel before the offer, POST {identity, sdp} with the bearer token, answer applied", async () => {
  const env = setup();
  const mic = makeTrack("mic");
  const id = await env.call.start(makeStream("local", [mic]));
  assert.equal(id, "s1");
  assert.equal(env.call.sessionId, "s1");
  const pc = env.PC.last();
  assert.equal(env.call.pc, pc);
  assert.deepEqual(pc.config.iceServers, [{ urls: "stun:x" }]);
  assert.deepEqual(pc.log.map((l) => l[0]).slice(0, 4), ["createDataChannel", "addTrack", "createOffer", "setLocalDescription"]);
  assert.equal(pc.channels[0].label, "control");
  const post = env.fetch.calls[0];
  assert.equal(post.method, "POST");
  assert.equal(post.url, SESSIONS);
  assert.equal(post.headers.Authorization, "Bearer access-token");
  assert.equal(post.headers["Content-Type"], "application/json");
  assert.deepEqual(JSON.parse(post.body), { identity: "client", sdp: pc.localDescription.sdp });
  assert.deepEqual(pc.remoteDescription, { type: "answer", sdp: "agent-answer-1" });
  await assert.rejects(env.call.start(), (e) => e.code === "invalid_state");
});

test("trickle: candidates gathered during the POST are PATCHed after it, in order; later ones at once", async () => {
  const gate = deferred();
  const env = setup({
    routes: postRoutes(async () => {
      await gate.promise;
      return created("s1", "ans");
    }),
  });
  const started = env.call.start([makeTrack("mic")]);
  await flush();
  const pc = env.PC.last();
  pc.emitCandidate({ candidate: "c1", sdpMid: "0", sdpMLineIndex: 0 });
  pc.emitCandidate({ candidate: "c2", sdpMid: "0", sdpMLineIndex: 0 });
  assert.equal(env.fetch.calls.length, 1, "nothing before the session exists");
  gate.resolve();
  await started;
  pc.emitCandidate({ candidate: "c3", sdpMid: "0", sdpMLineIndex: 0 });
  pc.emitCandidate(null);
  await flush();
  const patches = env.fetch.calls.filter((c) => c.method === "PATCH");
  assert.ok(patches.every((c) => c.url === `${SESSIONS}/s1` && c.headers["Content-Type"] === "application/json"));
  assert.deepEqual(patches.map((c) => JSON.parse(c.body)), [
    { candidate: { candidate: "c1", sdpMid: "0", sdpMLineIndex: 0 } },
    { candidate: { candidate: "c2", sdpMid: "0", sdpMLineIndex: 0 } },
    { candidate: { candidate: "c3", sdpMid: "0", sdpMLineIndex: 0 } },
    { candidate: { candidate: "", sdpMid: null, sdpMLineIndex: null } },
  ]);
});

test("control channel: status, mute, dtmf, ping/pong; status ended ends the call", async () => {
  const env = setup();
  const events = record(env.call, ["status", "control", "ended"]);
  const mic = makeTrack("mic");
  await env.call.start(makeStream("local", [mic]));
  const control = env.PC.last().channels[0];
  assert.throws(() => env.call.sendDtmf("1"), (e) => e.code === "not_connected");
  control.open();
  control.peerSend({ type: "status", state: "connected" });
  assert.deepEqual(events.of("status"), [{ state: "connected" }]);
  env.call.mute(true);
  assert.equal(mic.enabled, false);
  assert.equal(env.call.muted, true);
  env.call.sendDtmf("5#");
  const rtt = env.call.ping();
  const [, , , ping] = control.messages;
  assert.deepEqual(control.messages.slice(0, 3), [{ type: "mute", muted: true }, { type: "dtmf", digit: "5" }, { type: "dtmf", digit: "#" }]);
  assert.equal(ping.type, "ping");
  await env.clock.advance(42);
  control.peerSend({ type: "pong", ts: ping.ts });
  assert.equal(await rtt, 42);
  env.call.mute(false);
  assert.equal(mic.enabled, true);
  assert.throws(() => env.call.sendDtmf("x"), (e) => e.code === "invalid_argument");
  control.peerSend({ type: "status", state: "ended" });
  assert.deepEqual(events.of("ended"), [{ reason: "remote" }]);
  assert.equal(env.call.state, "ended");
  assert.equal(env.PC.last().closed, true);
  assert.ok(events.of("control").length >= 3);
  await env.clock.advance(60000);
  assert.equal(env.fetch.calls.filter((c) => c.method === "DELETE").length, 0, "the agent ended it: nothing to delete");
});

test("hangup: control hangup, peer connection closed, DELETE; a session already gone is fine", async () => {
  const env = setup();
  const events = record(env.call, ["ended"]);
  await env.call.start([makeTrack("mic")]);
  const pc = env.PC.last();
  pc.channels[0].open();
  await env.call.hangup();
  assert.deepEqual(pc.channels[0].messages.at(-1), { type: "hangup" });
  assert.equal(pc.closed, true);
  const del = env.fetch.calls.at(-1);
  assert.equal(del.method, "DELETE");
  assert.equal(del.url, `${SESSIONS}/s1`);
  assert.deepEqual(events.of("ended"), [{ reason: "hangup" }]);
  assert.equal(env.call.sessionId, null);

  const gone = setup({ routes: ({ method }) => (method === "POST" ? created("s9", "a") : { status: 404, body: { code: "session_not_found" } }) });
  await gone.call.start();
  await gone.call.hangup();
});

test("hangup waits for the control hangup to leave the channel before closing, at most 500 ms", async () => {
  const env = setup();
  await env.call.start([makeTrack("mic")]);
  const pc = env.PC.last();
  const control = pc.channels[0];
  control.open();
  control.bufferedAmount = 120;
  const done = env.call.hangup();
  await flush();
  assert.deepEqual(control.messages.at(-1), { type: "hangup" });
  assert.equal(pc.closed, false, "closing now could drop the queued hangup");
  await env.clock.advance(30);
  assert.equal(pc.closed, false);
  control.bufferedAmount = 0;
  await env.clock.advance(10);
  await done;
  assert.equal(pc.closed, true);

  const stuck = setup();
  await stuck.call.start([makeTrack("mic")]);
  const stuckPC = stuck.PC.last();
  stuckPC.channels[0].open();
  stuckPC.channels[0].bufferedAmount = 1;
  const ending = stuck.call.hangup();
  await stuck.clock.advance(490);
  assert.equal(stuckPC.closed, false);
  await stuck.clock.advance(20);
  await ending;
  assert.equal(stuckPC.closed, true, "a channel that never drains does not hold the hangup");
});

test("a refused POST rejects start() with the problem code, status, retryable and Retry-After", async () => {
  let refuse = true;
  const env = setup({
    routes: postRoutes(() => (refuse
      ? { status: 503, headers: { "Retry-After": "2" }, body: { code: "no_answering_peer", detail: "nobody with role agent is in the room", status: 503 } }
      : created("s1", "a"))),
  });
  await assert.rejects(env.call.start([]), (e) => e.code === "no_answering_peer" && e.status === 503 && e.retryable === true && e.retryAfter === 2);
  assert.equal(env.call.retryAfter, 2);
  assert.equal(env.call.state, "ended");
  assert.equal(env.PC.last().closed, true);
  refuse = false;
  assert.equal(await env.call.start([]), "s1");
  assert.equal(env.call.retryAfter, null);
});

test("renegotiate: PATCH application/sdp with the new offer, the answer body applied", async () => {
  const env = setup({
    routes: ({ method, headers }) => {
      if (method === "POST") return created("s1", "a1");
      if (method === "PATCH" && headers["Content-Type"] === "application/sdp") return { status: 200, body: "v=0 renegotiated answer" };
      return { status: 204, body: "" };
    },
  });
  await env.call.start([]);
  const pc = env.PC.last();
  await env.call.renegotiate();
  const patch = env.fetch.calls.at(-1);
  assert.equal(patch.method, "PATCH");
  assert.equal(patch.url, `${SESSIONS}/s1`);
  assert.equal(patch.body, pc.localDescription.sdp);
  assert.deepEqual(pc.remoteDescription, { type: "answer", sdp: "v=0 renegotiated answer" });
});

test("a failed connection re-POSTs with the same token: new peer connection, old one closed after the answer", async () => {
  const env = setup();
  const events = record(env.call, ["reconnecting", "session", "connection-state", "ended"]);
  await env.call.start([makeTrack("mic")]);
  const first = env.PC.last();
  first.setConnectionState("connected");
  assert.equal(env.call.state, "connected");
  first.setConnectionState("failed");
  await flush();
  await flush();
  const second = env.PC.last();
  assert.notEqual(second, first);
  assert.equal(first.closed, true);
  assert.equal(env.call.sessionId, "s2");
  assert.equal(env.fetch.calls.filter((c) => c.method === "POST").length, 2);
  assert.ok(env.fetch.calls.filter((c) => c.method === "POST").every((c) => c.headers.Authorization === "Bearer access-token"));
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 0 }]);
  assert.deepEqual(events.of("session"), [{ sessionId: "s2" }]);
  // Late events of the replaced connection are ignored.
  first.setConnectionState("closed");
  assert.equal(events.of("ended").length, 0);
  // "disconnected" that recovers within the grace period: no re-POST.
  second.setConnectionState("disconnected");
  await env.clock.advance(500);
  second.setConnectionState("connected");
  await env.clock.advance(5000);
  assert.equal(env.fetch.calls.filter((c) => c.method === "POST").length, 2);
  // One that does not: re-POST after 1 s.
  second.setConnectionState("disconnected");
  await env.clock.advance(1000);
  await flush();
  assert.equal(env.fetch.calls.filter((c) => c.method === "POST").length, 3);
  assert.equal(env.call.sessionId, "s3");
});

test("re-POST refused for good (404 call_not_found) ends the call as failed", async () => {
  let posts = 0;
  const env = setup({
    routes: postRoutes(() => {
      posts += 1;
      return posts === 1 ? created("s1", "a") : { status: 404, body: { code: "call_not_found" } };
    }),
  });
  const events = record(env.call, ["ended", "error"]);
  await env.call.start([]);
  env.PC.last().setConnectionState("failed");
  await flush();
  await flush();
  assert.deepEqual(events.of("ended"), [{ reason: "failed" }]);
  assert.equal(events.of("error")[0].code, "call_not_found");
  assert.equal(posts, 2);
});

test("hangup during the POST: the session that comes back is deleted", async () => {
  const gate = deferred();
  const env = setup({
    routes: postRoutes(async () => {
      await gate.promise;
      return created("late", "a");
    }),
  });
  const started = env.call.start([]).catch((e) => e);
  await flush();
  await env.call.hangup();
  gate.resolve();
  const error = await started;
  assert.equal(error.code, "invalid_state");
  await flush();
  const del = env.fetch.calls.find((c) => c.method === "DELETE");
  assert.equal(del.url, `${SESSIONS}/late`);
  assert.equal(env.call.state, "ended");
});

test("reconnect(): the old connection's 'replaced' and teardown during our own re-POST do not end the call", async () => {
  const gate = deferred();
  let posts = 0;
  const env = setup({
    routes: postRoutes(async () => {
      posts += 1;
      if (posts === 2) await gate.promise;
      return created(`s${posts}`, `a${posts}`);
    }),
  });
  const events = record(env.call, ["ended", "reconnecting"]);
  await env.call.start([makeTrack("mic")]);
  const old = env.PC.last();
  old.channels[0].open();
  old.setConnectionState("connected");
  const again = env.call.reconnect();
  await flush();
  // The server hands the seat over before our POST returns: the agent says "replaced" on the old
  // channel and closes the old connection.
  old.channels[0].peerSend({ type: "status", state: "replaced" });
  old.setConnectionState("failed");
  await flush();
  assert.equal(events.of("ended").length, 0);
  assert.equal(posts, 2, "no extra POST for the old connection's failure");
  gate.resolve();
  assert.equal(await again, "s2");
  assert.equal(env.call.sessionId, "s2");
  assert.equal(old.closed, true);
  assert.notEqual(env.call.pc, old);
  // Without a re-POST of ours, "replaced" means another client took the call.
  env.PC.last().channels[0].open();
  env.PC.last().channels[0].peerSend({ type: "status", state: "replaced" });
  assert.deepEqual(events.of("ended"), [{ reason: "replaced" }]);
});

/** Routes: the session POST answered `s1`, `s2`, …; an `application/sdp` PATCH by `restart()`. */
function restartRoutes(restart) {
  let posts = 0;
  return ({ method, headers }) => {
    if (method === "POST") {
      posts += 1;
      return created(`s${posts}`, `a${posts}`);
    }
    if (method === "PATCH" && headers["Content-Type"] === "application/sdp") return restart();
    return { status: 204, body: "" };
  };
}

const posts = (env) => env.fetch.calls.filter((c) => c.method === "POST").length;

test("a dropped connection restarts ICE on the same session first: iceRestart offer PATCHed, answer applied, connected again, no POST", async () => {
  const env = setup({ routes: restartRoutes(() => ({ status: 200, body: "v=0 restart answer" })) });
  const events = record(env.call, ["restarting", "restarted", "restart-failed", "reconnecting", "session", "ended"]);
  await env.call.start([makeTrack("mic")]);
  const pc = env.PC.last();
  pc.setConnectionState("connected");
  pc.setConnectionState("disconnected");
  await env.clock.advance(1000); // disconnectedGraceMs
  await flush();
  assert.deepEqual(pc.log.filter((l) => l[0] === "createOffer").at(-1), ["createOffer", "iceRestart"]);
  const patch = env.fetch.calls.at(-1);
  assert.equal(patch.method, "PATCH");
  assert.equal(patch.url, `${SESSIONS}/s1`);
  assert.equal(patch.headers["Content-Type"], "application/sdp");
  assert.equal(patch.body, pc.localDescription.sdp);
  assert.deepEqual(pc.remoteDescription, { type: "answer", sdp: "v=0 restart answer" });
  assert.deepEqual(events.of("restarting"), [{ sessionId: "s1" }]);
  await env.clock.advance(300);
  pc.setConnectionState("connected");
  await flush();
  assert.deepEqual(events.of("restarted"), [{ sessionId: "s1", ms: 300 }]);
  await env.clock.advance(10000);
  assert.equal(posts(env), 1, "the session kept the call");
  assert.equal(env.PC.instances.length, 1);
  assert.equal(env.call.sessionId, "s1");
  assert.equal(env.call.state, "connected");
  assert.deepEqual(events.of("reconnecting"), []);
  assert.deepEqual(events.of("restart-failed"), []);
});

test("a restart PATCH refused because the server ended the session (404 session_not_found) falls back to a re-POST", async () => {
  const env = setup({ routes: restartRoutes(() => ({ status: 404, body: { code: "session_not_found" } })) });
  const events = record(env.call, ["restarting", "restart-failed", "reconnecting", "session", "ended"]);
  await env.call.start([]);
  const first = env.PC.last();
  first.setConnectionState("connected");
  first.setConnectionState("failed");
  await flush();
  await flush();
  const failed = events.of("restart-failed");
  assert.equal(failed.length, 1);
  assert.equal(failed[0].reason, "http 404 session_not_found");
  assert.equal(failed[0].error.code, "session_not_found");
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 0 }]);
  assert.equal(posts(env), 2);
  assert.equal(env.call.sessionId, "s2");
  assert.equal(first.closed, true);
  assert.deepEqual(events.of("ended"), []);
  // PATCH before the POST: the re-POST comes only after the refusal.
  const methods = env.fetch.calls.map((c) => c.method);
  assert.ok(methods.lastIndexOf("PATCH") < methods.lastIndexOf("POST"), methods.join(","));
});

test("a restart that does not bring media back within restartWindowMs falls back to a re-POST", async () => {
  const env = setup({ routes: restartRoutes(() => ({ status: 200, body: "v=0 restart answer" })), options: { restartWindowMs: 2000 } });
  const events = record(env.call, ["restart-failed", "reconnecting"]);
  await env.call.start([]);
  const first = env.PC.last();
  first.setConnectionState("connected");
  first.setConnectionState("failed");
  await flush();
  await env.clock.advance(1999);
  await flush();
  assert.equal(posts(env), 1, "still inside the window");
  await env.clock.advance(1);
  await flush();
  await flush();
  assert.deepEqual(events.of("restart-failed"), [{ reason: "window" }]);
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 0 }]);
  assert.equal(posts(env), 2);
  assert.equal(env.call.sessionId, "s2");
  // The old connection coming back after the window changes nothing: the new session holds the call.
  first.setConnectionState("connected");
  assert.equal(env.call.pc, env.PC.last());
});

test("restartWindowMs 0 re-POSTs at once, without a restart PATCH", async () => {
  const env = setup({ routes: restartRoutes(() => ({ status: 200, body: "v=0" })), options: { restartWindowMs: 0 } });
  const events = record(env.call, ["restarting", "reconnecting"]);
  await env.call.start([]);
  env.PC.last().setConnectionState("failed");
  await flush();
  await flush();
  assert.deepEqual(events.of("restarting"), []);
  assert.equal(env.fetch.calls.filter((c) => c.method === "PATCH").length, 0);
  assert.equal(posts(env), 2);
});
