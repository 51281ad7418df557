// performRpc / registerRpcMethod (docs/protocol.md "RPC", docs/browser.md "RPC") through the fake
// WebSocket and a manual clock: frames, ack and response timeouts, typed errors, unknown methods,
// a callee that leaves, the server's refusals naming the request, late responses dropped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CallingClient, RpcError } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, flush, makeToken, makeWebSocketClass } from "./fakes.mjs";

function setup(clientOptions = {}) {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const client = new CallingClient({
    url: "ws://127.0.0.1:9/v1/ws",
    token: makeToken({ sub: "agent", room_id: "r1", scope: "room", exp: 4102444800 }),
    WebSocket: WS,
    RTCPeerConnection: class {},
    timers: clock.api(),
    random: () => 0.5,
    window: null,
    network: null,
    ...clientOptions,
  });
  return { clock, WS, client };
}

const welcome = {
  type: "welcome",
  payload: { peer_id: "agent", room_id: "r1", call_id: null, role: "peer", name: null, peers: [{ peer_id: "page", role: "peer", name: null }],
    ping_interval_ms: 0, server_time: 1, last_seq: 0, read_seq: 0, unread: 0 },
};

/** The promise's outcome so far: {value} / {error} / null while pending. */
function watch(promise) {
  const state = { settled: null };
  promise.then((value) => (state.settled = { value }), (error) => (state.settled = { error }));
  return state;
}

test("performRpc sends rpc-request and resolves with the callee's response", async () => {
  const env = setup();
  const ws = await connectWith(env, welcome);
  const timers = env.clock.pending;
  const call = watch(env.client.performRpc("page", "get-location", '{"precise":true}', 5000));
  const [request] = ws.framesOf("rpc-request");
  assert.equal(request.to, "page");
  assert.deepEqual(Object.keys(request.payload).sort(), ["id", "method", "payload", "timeout_ms"]);
  assert.equal(request.payload.method, "get-location");
  assert.equal(request.payload.payload, '{"precise":true}');
  assert.equal(request.payload.timeout_ms, 5000);
  const id = request.payload.id;
  ws.receive({ type: "rpc-ack", from: "page", to: "agent", payload: { id } });
  // A response from another peer for the same id is not the callee's: ignored.
  ws.receive({ type: "rpc-response", from: "mallory", to: "agent", payload: { id, payload: "forged" } });
  await env.clock.advance(4000);
  assert.equal(call.settled, null);
  ws.receive({ type: "rpc-response", from: "page", to: "agent", payload: { id, payload: '{"city":"Lyon"}' } });
  await flush();
  assert.deepEqual(call.settled, { value: '{"city":"Lyon"}' });
  assert.equal(env.clock.pending, timers, "no timer left behind");
});

test("no ack within rpcAckTimeoutMs fails with 1501; no response within the timeout with 1502", async () => {
  const env = setup({ rpcAckTimeoutMs: 1000 });
  const ws = await connectWith(env, welcome);
  const noAck = watch(env.client.performRpc("page", "m", "", 5000));
  await env.clock.advance(999);
  assert.equal(noAck.settled, null);
  await env.clock.advance(1);
  assert.equal(noAck.settled.error.code, RpcError.CONNECTION_TIMEOUT);
  assert.ok(noAck.settled.error instanceof RpcError);

  const slow = watch(env.client.performRpc("page", "m", "", 3000));
  const id = ws.framesOf("rpc-request")[1].payload.id;
  ws.receive({ type: "rpc-ack", from: "page", payload: { id } });
  await env.clock.advance(2999);
  assert.equal(slow.settled, null, "acked: the ack timer is off");
  await env.clock.advance(1);
  assert.equal(slow.settled.error.code, RpcError.RESPONSE_TIMEOUT);
  // A response after the timeout is dropped.
  ws.receive({ type: "rpc-response", from: "page", payload: { id, payload: "late" } });
  assert.equal(env.client._rpc.pendingCount, 0);
});

test("the callee's error response, the server's 404/460/480 and peer-left each fail the call with its code", async () => {
  const env = setup();
  const ws = await connectWith(env, welcome);
  const timers = env.clock.pending;
  const calls = ["a", "b", "c", "d", "e"].map(() => watch(env.client.performRpc("page", "m", "x")));
  const ids = ws.framesOf("rpc-request").map((f) => f.payload.id);
  ws.receive({ type: "rpc-response", from: "page", payload: { id: ids[0], error: { code: 2001, message: "no map", data: "d" } } });
  ws.receive({ type: "error", error: { code: 404, message: "no peer" }, payload: { type: "rpc-request", id: ids[1] } });
  ws.receive({ type: "error", error: { code: 460, message: "too large" }, payload: { type: "rpc-request", id: ids[2] } });
  ws.receive({ type: "error", error: { code: 480, message: "reconnecting" }, payload: { type: "rpc-request", id: ids[3] } });
  ws.receive({ type: "peer-left", from: "page", payload: { peer_id: "page" } });
  await flush();
  const errors = calls.map((c) => c.settled.error);
  assert.deepEqual(errors.map((e) => e.code), [2001, RpcError.RECIPIENT_NOT_FOUND, RpcError.REQUEST_PAYLOAD_TOO_LARGE,
    RpcError.SEND_FAILED, RpcError.RECIPIENT_DISCONNECTED]);
  assert.equal(errors[0].message, "no map");
  assert.equal(errors[0].data, "d");
  assert.equal(errors[3].data, "peer_reconnecting");
  assert.equal(env.clock.pending, timers);
  // Our answer to a caller who left is refused with 404: nothing for the app to do, no error event.
  const errors2 = [];
  env.client.on("error", (e) => errors2.push(e));
  ws.receive({ type: "error", error: { code: 404, message: "no peer" }, payload: { type: "rpc-response", id: "x1" } });
  ws.receive({ type: "error", error: { code: 422, message: "bad" }, payload: { type: "rpc-response", id: "x2" } });
  assert.deepEqual(errors2.map((e) => e.code), [422]);
});

test("local checks: not connected, payload too large, bad arguments; disconnect fails open calls", async () => {
  const env = setup({ rpcMaxPayloadBytes: 4 });
  await assert.rejects(env.client.performRpc("page", "m", ""), (e) => e instanceof RpcError && e.code === RpcError.SEND_FAILED);
  const ws = await connectWith(env, welcome);
  await assert.rejects(env.client.performRpc("page", "m", "ééé"), (e) => e.code === RpcError.REQUEST_PAYLOAD_TOO_LARGE);
  await assert.rejects(env.client.performRpc("", "m"), (e) => e.code === "invalid_argument");
  await assert.rejects(env.client.performRpc("page", "m", { not: "a string" }), (e) => e.code === "invalid_argument");
  assert.equal(ws.framesOf("rpc-request").length, 0);
  const open = watch(env.client.performRpc("page", "m", "ok"));
  env.client.disconnect();
  await flush();
  assert.equal(open.settled.error.code, RpcError.SEND_FAILED);
});

test("a registered handler is acked at once and answered; unknown methods get 1400; thrown errors are typed", async () => {
  const env = setup({ rpcMaxPayloadBytes: 8 });
  const ws = await connectWith(env, welcome);
  const seen = [];
  env.client.registerRpcMethod("echo", async (data) => {
    seen.push(data);
    return data.payload.toUpperCase();
  });
  env.client.registerRpcMethod("fail", () => {
    throw new RpcError(2001, "nope", "why");
  });
  env.client.registerRpcMethod("crash", () => {
    throw new TypeError("boom");
  });
  env.client.registerRpcMethod("big", () => "123456789");
  const request = (id, method, payload = "hi") =>
    ws.receive({ type: "rpc-request", from: "page", to: "agent", payload: { id, method, payload, timeout_ms: 3000 } });
  request("r1", "echo");
  request("r2", "nothing");
  request("r3", "fail");
  request("r4", "crash");
  request("r5", "big");
  env.client.unregisterRpcMethod("echo");
  request("r6", "echo");
  await flush();
  assert.deepEqual(ws.framesOf("rpc-ack").map((f) => [f.to, f.payload.id]), ["r1", "r2", "r3", "r4", "r5", "r6"].map((id) => ["page", id]));
  const responses = Object.fromEntries(ws.framesOf("rpc-response").map((f) => [f.payload.id, f]));
  assert.deepEqual(responses.r1, { type: "rpc-response", to: "page", payload: { id: "r1", payload: "HI" } });
  assert.deepEqual(seen, [{ requestId: "r1", callerId: "page", payload: "hi", responseTimeoutMs: 3000 }]);
  assert.equal(responses.r2.payload.error.code, RpcError.UNSUPPORTED_METHOD);
  assert.deepEqual(responses.r3.payload.error, { code: 2001, message: "nope", data: "why" });
  assert.deepEqual(responses.r4.payload.error, { code: RpcError.APPLICATION_ERROR, message: "boom" });
  assert.equal(responses.r5.payload.error.code, RpcError.RESPONSE_PAYLOAD_TOO_LARGE);
  assert.equal(responses.r6.payload.error.code, RpcError.UNSUPPORTED_METHOD, "unregistered");
  assert.throws(() => env.client.registerRpcMethod("", () => ""), (e) => e.code === "invalid_argument");
});
