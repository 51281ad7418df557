// CallingClient driven through hand-written fakes of WebSocket, fetch, RTCPeerConnection and
// timers (tests/js/fakes.mjs): connect/welcome, chat acks and retries, typing, reconnect with
// backoff, token refresh, resume without loss or duplicates, terminal close codes, media signaling.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CallingClient, CallingError } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, flush, makeFetch, makePeerConnectionClass, makeStream, makeToken, makeTrack, makeWebSocketClass, record } from "./fakes.mjs";

const ICE = { ice_servers: [{ urls: ["stun:stun.example.org:3478"] }], ttl: 3600, expires_at: 1 };

function setup({ routes, client: clientOptions = {}, claims = {} } = {}) {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const PC = makePeerConnectionClass();
  const fetch = makeFetch(routes || (({ url }) => (url.endsWith("/v1/ice") ? { status: 200, body: ICE } : null)));
  const token = makeToken({ sub: "alice", room_id: "r1", scope: "room", exp: 4102444800, ...claims });
  const client = new CallingClient({
    url: "ws://127.0.0.1:9/v1/ws",
    token,
    WebSocket: WS,
    fetch,
    RTCPeerConnection: PC,
    timers: clock.api(),
    random: () => 0.5,
    backoff: { jitter: 0 },
    ...clientOptions,
  });
  return { clock, WS, PC, fetch, client, token };
}

function welcome(extra = {}) {
  return {
    type: "welcome",
    payload: {
      peer_id: "alice", room_id: "r1", call_id: "call_1", role: "host", name: "Alice",
      peers: [{ peer_id: "bob", role: "peer", name: "Bob" }],
      ping_interval_ms: 25000, server_time: 1, last_seq: 0, read_seq: 0, unread: 0, ...extra,
    },
  };
}

function connect(env, extra = {}) {
  return connectWith(env, welcome(extra));
}

function chat(seq, from, clientId, text = `m${seq}`) {
  return { type: "chat", from, payload: { seq, client_id: clientId, text, meta: null, ts: 1000 + seq } };
}

test("connect resolves on welcome and fills peerId, roomId, callId, peers", async () => {
  const env = setup();
  const events = record(env.client, ["state", "connected"]);
  assert.equal(env.client.state, "idle");
  assert.equal(env.client.roomId, "r1", "from the token before connect");
  const promise = env.client.connect();
  const ws = env.WS.last();
  assert.equal(ws.query.get("token"), env.token);
  assert.equal(ws.query.has("last_seq"), false);
  assert.equal(new URL(ws.url).pathname, "/v1/ws");
  ws.open();
  ws.receive(welcome({ last_seq: 12 }));
  const w = await promise;
  assert.equal(w.peer_id, "alice");
  assert.equal(w.resumed, false);
  assert.equal(env.client.peerId, "alice");
  assert.equal(env.client.roomId, "r1");
  assert.equal(env.client.callId, "call_1");
  assert.equal(env.client.role, "host");
  assert.equal(env.client.name, "Alice");
  assert.deepEqual(env.client.peers, [{ peer_id: "bob", role: "peer", name: "Bob" }]);
  assert.equal(env.client.lastSeq, 12);
  assert.equal(env.client.state, "connected");
  assert.deepEqual(events.of("state").map((s) => s.state), ["connecting", "connected"]);
  assert.equal(events.of("connected").length, 1);
  await assert.rejects(env.client.connect(), (e) => e.code === "invalid_state");
});

test("an error frame before welcome rejects connect(); nothing reconnects", async () => {
  const env = setup();
  const events = record(env.client, ["error", "disconnected"]);
  const promise = env.client.connect();
  const ws = env.WS.last();
  ws.open();
  ws.receive({ type: "error", error: { code: 400, message: "unexpected character at byte 1" } });
  await assert.rejects(promise, (e) => e instanceof CallingError && e.code === 400 && e.retryable === false);
  assert.equal(env.client.state, "closed");
  assert.equal(events.of("error").length, 1);
  assert.equal(events.of("disconnected")[0].willReconnect, false);
  await env.clock.advance(60000);
  assert.equal(env.WS.instances.length, 1);
});

test("a refused upgrade is explained by GET /v1/ice with the token (401 token_expired: not retryable)", async () => {
  const env = setup({
    routes: ({ url, headers }) => {
      assert.equal(headers.Authorization.startsWith("Bearer "), true);
      if (url === "http://127.0.0.1:9/v1/ice") return { status: 401, body: { code: "token_expired", detail: "The token has expired.", status: 401 } };
      return null;
    },
  });
  const promise = env.client.connect();
  env.WS.last().drop();
  await assert.rejects(promise, (e) => e.code === "token_expired" && e.status === 401 && e.retryable === false);
  assert.equal(env.client.state, "closed");
});

test("a refused origin (preflight fails as a network error) is origin_not_allowed from a simple probe, not retryable", async () => {
  const env = setup({
    routes: ({ url, headers }) => {
      if (url !== "http://127.0.0.1:9/v1/ice") return null;
      // A browser fails the preflighted request outright; the plain GET shows the server's 403.
      if (headers.Authorization) return { networkError: true };
      return { status: 403, body: { code: "origin_not_allowed", detail: "this origin is not in the server's allowed_origins", status: 403 } };
    },
  });
  const promise = env.client.connect();
  env.WS.last().drop();
  await assert.rejects(promise, (e) => e.code === "origin_not_allowed" && e.status === 403 && e.retryable === false);
  assert.equal(env.client.state, "closed");
  const probes = env.fetch.calls.filter((c) => c.url.endsWith("/v1/ice"));
  assert.equal(probes.length, 2);
  assert.deepEqual(Object.keys(probes[1].headers), [], "the second probe must be a simple request");
  await env.clock.advance(60_000);
  await flush();
  assert.equal(env.WS.instances.length, 1, "no reconnect after a refused origin");
});

test("an unreachable server stays connect_failed (retryable) when the simple probe fails too", async () => {
  const env = setup({ routes: ({ url }) => (url.endsWith("/v1/ice") ? { networkError: true } : null) });
  const promise = env.client.connect();
  env.WS.last().drop();
  await assert.rejects(promise, (e) => e.code === "connect_failed" && e.retryable === true);
});

test("an upgrade that fails while the token is fine is connect_failed (retryable); a token without room_id is token_no_room", async () => {
  const env = setup();
  const promise = env.client.connect();
  env.WS.last().drop();
  await assert.rejects(promise, (e) => e.code === "connect_failed" && e.retryable === true);
  const noRoom = setup({ claims: { room_id: undefined } });
  const p2 = noRoom.client.connect();
  noRoom.WS.last().drop();
  await assert.rejects(p2, (e) => e.code === "token_no_room" && e.status === 403 && e.retryable === false);
});

test("sendChat resolves with the ack; without one in 10 s it resends the same client_id", async () => {
  const env = setup();
  const ws = await connect(env);
  const promise = env.client.sendChat("hello", { meta: { k: 1 } });
  const [first] = ws.framesOf("chat");
  assert.equal(first.payload.text, "hello");
  assert.deepEqual(first.payload.meta, { k: 1 });
  assert.match(first.payload.client_id, /^[0-9a-f-]{36}$/);
  await env.clock.advance(10000);
  const sends = ws.framesOf("chat");
  assert.equal(sends.length, 2);
  assert.equal(sends[1].payload.client_id, first.payload.client_id);
  ws.receive({ type: "chat-ack", payload: { client_id: first.payload.client_id, seq: 5, ts: 77 } });
  assert.deepEqual(await promise, { seq: 5, client_id: first.payload.client_id, ts: 77 });
  assert.equal(env.client.lastSeq, 5);
  await env.clock.advance(30000);
  assert.equal(ws.framesOf("chat").length, 2);
});

test("a failed chat-ack and an error frame for a chat reject sendChat at once, with the error event", async () => {
  const env = setup();
  const errors = record(env.client, ["error"]);
  const ws = await connect(env);
  const empty = env.client.sendChat(" ", { clientId: "e1" });
  ws.receive({ type: "chat-ack", error: { code: 440, message: "chat text is empty" }, payload: { client_id: "e1" } });
  await assert.rejects(empty, (e) => e.code === 440 && e.retryable === false);
  const refused = env.client.sendChat("x", { clientId: "e2" });
  ws.receive({ type: "error", error: { code: 422, message: "chat client_id too long" }, payload: { type: "chat" } });
  await assert.rejects(refused, (e) => e.code === 422 && e.frameType === "chat");
  assert.deepEqual(errors.of("error").map((e) => e.code), [440, 422]);
  // Checked before sending: no frame for a client_id the server would refuse.
  await assert.rejects(env.client.sendChat("x", { clientId: "x".repeat(129) }), (e) => e.code === 422);
  await assert.rejects(env.client.sendChat("x", { meta: [1] }), (e) => e.code === 442);
  assert.equal(ws.framesOf("chat").length, 2);
  // 503: not stored, resent after 1 s with the same client_id.
  const busy = env.client.sendChat("later", { clientId: "b1" });
  ws.receive({ type: "chat-ack", error: { code: 503, message: "store busy" }, payload: { client_id: "b1" } });
  await env.clock.advance(1000);
  assert.equal(ws.framesOf("chat").filter((f) => f.payload.client_id === "b1").length, 2);
  ws.receive({ type: "chat-ack", payload: { client_id: "b1", seq: 1, ts: 1 } });
  assert.equal((await busy).seq, 1);
});

test("setTyping sends changes only and turns itself off after 3 s; markRead and sendData frames", async () => {
  const env = setup();
  const ws = await connect(env);
  env.client.setTyping(true);
  env.client.setTyping(true);
  await env.clock.advance(2999);
  assert.deepEqual(ws.framesOf("typing").map((f) => f.payload.typing), [true]);
  await env.clock.advance(1);
  assert.deepEqual(ws.framesOf("typing").map((f) => f.payload.typing), [true, false]);
  env.client.markRead(4);
  env.client.sendData({ kind: "hello" }, "bob");
  env.client.sendData({ all: true });
  assert.deepEqual(ws.framesOf("read"), [{ type: "read", payload: { seq: 4 } }]);
  assert.deepEqual(ws.framesOf("data"), [{ type: "data", to: "bob", payload: { kind: "hello" } }, { type: "data", payload: { all: true } }]);
  assert.throws(() => env.client.markRead(-1), (e) => e.code === "invalid_argument");
});

test("inbound typing, read, data, meter, consultation-ended, peer-joined and peer-left events", async () => {
  const env = setup();
  const events = record(env.client, ["typing", "read", "data", "meter", "consultation-ended", "peer-joined", "peer-left"]);
  const ws = await connect(env);
  ws.receive({ type: "typing", from: "bob", payload: { typing: true } });
  ws.receive({ type: "read", from: "bob", payload: { seq: 3 } });
  ws.receive({ type: "data", from: "bob", payload: { x: 1 } });
  ws.receive({ type: "meter", payload: { state: "warning", elapsed_s: 841, limit_s: 900, remaining_s: 59 } });
  ws.receive({ type: "meter", payload: { state: "ended", elapsed_s: 900, limit_s: 900, remaining_s: 0 } });
  ws.receive({ type: "peer-joined", from: "carol", payload: { peer_id: "carol", role: "agent", name: null } });
  ws.receive({ type: "peer-left", from: "bob", payload: { peer_id: "bob" } });
  ws.receive({ type: "something-new", payload: {} });
  assert.deepEqual(events.of("typing"), [{ from: "bob", typing: true }]);
  assert.deepEqual(events.of("read"), [{ from: "bob", seq: 3 }]);
  assert.deepEqual(events.of("data"), [{ from: "bob", payload: { x: 1 } }]);
  assert.equal(events.of("meter").length, 2);
  assert.deepEqual(events.of("consultation-ended").map((m) => m.state), ["ended"]);
  assert.deepEqual(events.of("peer-joined"), [{ peer_id: "carol", role: "agent", name: null }]);
  assert.deepEqual(events.of("peer-left"), [{ peer_id: "bob" }]);
  assert.deepEqual(env.client.peers.map((p) => p.peer_id), ["carol"]);
});

test("a dropped socket: backoff, token refresh, resume from last_seq; no chat lost or duplicated", async () => {
  let refreshes = 0;
  const env = setup({ client: { refreshToken: async () => `fresh-token-${++refreshes}` } });
  const events = record(env.client, ["chat", "disconnected", "reconnecting", "connected"]);
  const ws1 = await connect(env, { last_seq: 2 });
  ws1.receive(chat(3, "bob", "b3"));
  const sentBeforeDrop = env.client.sendChat("sent, ack lost", { clientId: "c1" });
  assert.equal(ws1.framesOf("chat").length, 1);
  ws1.drop();
  assert.equal(env.client.state, "reconnecting");
  assert.deepEqual(events.of("disconnected").map((d) => [d.code, d.willReconnect]), [[1006, true]]);
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 1000 }]);
  const sentWhileAway = env.client.sendChat("written while away", { clientId: "c2" });
  await env.clock.advance(999);
  assert.equal(env.WS.instances.length, 1);
  assert.equal(refreshes, 0);
  await env.clock.advance(1);
  assert.equal(refreshes, 1, "refreshToken is asked before the attempt");
  const ws2 = env.WS.last();
  assert.notEqual(ws2, ws1);
  assert.equal(ws2.query.get("token"), "fresh-token-1");
  assert.equal(ws2.query.get("last_seq"), "3");
  assert.equal(env.client.token, "fresh-token-1");
  ws2.open();
  ws2.receive(welcome({ last_seq: 6, recovered: true, replay_count: 3 }));
  // Pending chats go out again at once, oldest first, with their client_ids.
  assert.deepEqual(ws2.framesOf("chat").map((f) => f.payload.client_id), ["c1", "c2"]);
  // Replay: our own c1 (committed; its ack was lost with the socket), then two from bob.
  ws2.receive(chat(4, "alice", "c1", "sent, ack lost"));
  ws2.receive(chat(5, "bob", "b5"));
  ws2.receive(chat(6, "bob", "b6"));
  assert.deepEqual(await sentBeforeDrop, { seq: 4, client_id: "c1", ts: 1004 });
  // The server answers the resent c1 with its original ack (ignored now) and stores c2.
  ws2.receive({ type: "chat-ack", payload: { client_id: "c1", seq: 4, ts: 1004 } });
  ws2.receive({ type: "chat-ack", payload: { client_id: "c2", seq: 7, ts: 1007 } });
  assert.equal((await sentWhileAway).seq, 7);
  // A live copy of a replayed message (it raced the replay) is not delivered twice.
  ws2.receive(chat(6, "bob", "b6"));
  ws2.receive(chat(8, "bob", "b8"));
  assert.deepEqual(events.of("chat").map((m) => m.seq), [3, 5, 6, 8]);
  assert.equal(env.client.lastSeq, 8);
  assert.equal(events.of("connected")[1].resumed, true);
  assert.equal(env.client.state, "connected");
  // The attempt counter starts again after a success.
  ws2.drop();
  assert.deepEqual(events.of("reconnecting").map((r) => r.delayMs), [1000, 1000]);
  await env.clock.advance(1000);
  assert.equal(env.WS.last().query.get("last_seq"), "8");
});

test("failed attempts back off 1 s, 2 s, 4 s, 8 s … up to maxMs; maxAttempts stops", async () => {
  const env = setup({ client: { backoff: { jitter: 0, maxMs: 5000, maxAttempts: 5 } } });
  const events = record(env.client, ["reconnecting", "disconnected", "error"]);
  const ws = await connect(env);
  ws.drop();
  for (let i = 0; i < 5; i++) {
    const delay = events.of("reconnecting").at(-1).delayMs;
    await env.clock.advance(delay);
    env.WS.last().drop(); // refused before open; /v1/ice says the token is fine → retryable
    await flush();
  }
  assert.deepEqual(events.of("reconnecting").map((r) => r.delayMs), [1000, 2000, 4000, 5000, 5000]);
  assert.equal(env.client.state, "closed");
  assert.equal(events.of("disconnected").at(-1).willReconnect, false);
  assert.equal(events.of("error").at(-1).code, "connect_failed");
  await env.clock.advance(60000);
  assert.equal(env.WS.instances.length, 6);
});

test("jitter spreads the reconnect delay", async () => {
  const env = setup({ client: { backoff: { jitter: 0.2 }, random: () => 0 } });
  const events = record(env.client, ["reconnecting"]);
  const ws = await connect(env);
  ws.drop();
  assert.deepEqual(events.of("reconnecting"), [{ attempt: 1, delayMs: 800 }]);
});

test("terminal closes: 4400 replaced, 4410, 4401 without refreshToken stop reconnecting; pending chats reject", async () => {
  for (const [code, expected] of [[4400, "replaced"], [4410, "closed"], [4401, "token_expired"]]) {
    const env = setup();
    const events = record(env.client, ["disconnected", "error", "reconnecting"]);
    const ws = await connect(env);
    const pending = env.client.sendChat("x", { clientId: "p" }).catch((e) => e);
    ws.serverClose(code, "bye");
    const error = await pending;
    assert.equal(error.code, expected, `close ${code}`);
    assert.equal(error.closeCode, code);
    assert.equal(error.retryable, false);
    assert.equal(env.client.state, "closed");
    assert.equal(events.of("disconnected")[0].willReconnect, false);
    assert.equal(events.of("error").at(-1).closeCode, code);
    await env.clock.advance(120000);
    assert.equal(env.WS.instances.length, 1, `no reconnect after ${code}`);
    assert.equal(events.of("reconnecting").length, 0);
  }
});

test("4401 with refreshToken reconnects with the fresh token; 1001 and 4000 reconnect", async () => {
  const env = setup({ client: { refreshToken: () => "renewed" } });
  const ws = await connect(env);
  ws.serverClose(4401, "token expired");
  assert.equal(env.client.state, "reconnecting");
  await env.clock.advance(1000);
  assert.equal(env.WS.last().query.get("token"), "renewed");
  for (const code of [1001, 4000, 4001]) {
    const other = setup();
    const s = await connect(other);
    s.serverClose(code, "x");
    assert.equal(other.client.state, "reconnecting", `close ${code}`);
    await other.clock.advance(1000);
    assert.equal(other.WS.instances.length, 2);
  }
});

test("a reconnect refused for the token (401 on /v1/ice) stops; refreshToken errors", async () => {
  let iceStatus = 200;
  const env = setup({ routes: ({ url }) => (url.endsWith("/v1/ice") ? (iceStatus === 200 ? { status: 200, body: ICE } : { status: 401, body: { code: "token_bad_signature" } }) : null) });
  const events = record(env.client, ["error"]);
  const ws = await connect(env);
  ws.drop();
  await env.clock.advance(1000);
  iceStatus = 401;
  env.WS.last().drop();
  await flush();
  assert.equal(env.client.state, "closed");
  assert.equal(events.of("error").at(-1).code, "token_bad_signature");

  // A throwing refreshToken counts as a failed attempt; a non-retryable CallingError stops.
  let calls = 0;
  const env2 = setup({
    client: {
      refreshToken: async () => {
        calls += 1;
        if (calls === 1) throw new Error("backend down");
        throw new CallingError("user signed out", { code: "signed_out", retryable: false });
      },
    },
  });
  const events2 = record(env2.client, ["reconnecting", "error"]);
  const s2 = await connect(env2);
  s2.drop();
  await env2.clock.advance(1000);
  assert.deepEqual(events2.of("reconnecting").map((r) => r.attempt), [1, 2]);
  assert.equal(events2.of("error")[0].code, "refresh_failed");
  await env2.clock.advance(2000);
  assert.equal(env2.client.state, "closed");
  assert.equal(events2.of("error").at(-1).code, "signed_out");
  assert.equal(env2.WS.instances.length, 1);
});

test("capped replay (recovered: false): the rest is paged over REST, each seq once", async () => {
  const history = (sinceSeq) => {
    const all = [5, 6, 7, 8].map((seq) => ({ seq, from: "bob", client_id: `b${seq}`, text: `m${seq}`, meta: null, ts: seq }));
    const page = all.filter((m) => m.seq > sinceSeq).slice(0, 2);
    const last = page.length ? page[page.length - 1].seq : sinceSeq;
    return { room_id: "r1", messages: page, next_since_seq: last, has_more: last < 8, last_seq: 9, limit: 200 };
  };
  const env = setup({
    routes: ({ url }) => {
      const u = new URL(url);
      if (u.pathname === "/v1/rooms/r1/messages") return { status: 200, body: history(Number(u.searchParams.get("since_seq"))) };
      return null;
    },
  });
  const events = record(env.client, ["chat"]);
  const ws = await connect(env, { last_seq: 2 });
  ws.drop();
  await env.clock.advance(1000);
  const ws2 = env.WS.last();
  ws2.open();
  ws2.receive(welcome({ last_seq: 9, recovered: false, replay_count: 2 }));
  ws2.receive(chat(3, "bob", "b3"));
  ws2.receive(chat(4, "bob", "b4"));
  ws2.receive(chat(9, "bob", "b9")); // live, arrives before the gap is filled
  await flush();
  await flush();
  const pages = env.fetch.calls.filter((c) => c.url.includes("/messages"));
  assert.deepEqual(pages.map((c) => new URL(c.url).searchParams.get("since_seq")), ["4", "6", "8"].slice(0, pages.length));
  assert.ok(pages.every((c) => c.headers.Authorization === `Bearer ${env.token}`));
  assert.deepEqual(events.of("chat").map((m) => m.seq).sort((a, b) => a - b), [3, 4, 5, 6, 7, 8, 9]);
});

test("a resumed welcome reports roster changes as peer-left / peer-joined", async () => {
  const env = setup();
  const events = record(env.client, ["peer-left", "peer-joined"]);
  const ws = await connect(env);
  ws.drop();
  await env.clock.advance(1000);
  const ws2 = env.WS.last();
  ws2.open();
  ws2.receive(welcome({ peers: [{ peer_id: "carol", role: "agent", name: null }], recovered: true, replay_count: 0 }));
  assert.deepEqual(events.of("peer-left"), [{ peer_id: "bob" }]);
  assert.deepEqual(events.of("peer-joined"), [{ peer_id: "carol", role: "agent", name: null }]);
});

test("fetchMessages before connect: room from the token, bearer header, problem errors", async () => {
  const env = setup({
    routes: ({ url }) => {
      const u = new URL(url);
      if (u.pathname === "/v1/rooms/r1/messages" && u.searchParams.get("since_seq") === "0") {
        return { status: 200, body: { room_id: "r1", messages: [{ seq: 1, from: "bob", client_id: "x", text: "hi", meta: null, ts: 1 }], next_since_seq: 1, has_more: false, last_seq: 1, limit: 50 } };
      }
      return { status: 400, body: { code: "bad_parameter", detail: "since_seq must be an integer ≥ 0" } };
    },
  });
  const page = await env.client.fetchMessages();
  assert.equal(page.messages[0].text, "hi");
  assert.equal(page.has_more, false);
  const call = env.fetch.calls[0];
  assert.equal(call.url, "http://127.0.0.1:9/v1/rooms/r1/messages?since_seq=0&limit=50");
  assert.equal(call.headers.Authorization, `Bearer ${env.token}`);
  await assert.rejects(env.client.fetchMessages({ sinceSeq: -1 }), (e) => e.code === "bad_parameter" && e.status === 400 && !e.retryable);
  const noRoom = setup({ claims: { room_id: undefined } });
  await assert.rejects(noRoom.client.fetchMessages(), (e) => e.code === "invalid_token");
});

test("ping resolves with the pong; an unanswered keep-alive ping drops the socket and reconnects", async () => {
  const env = setup({ client: { pingIntervalMs: 1000 } });
  const events = record(env.client, ["disconnected", "reconnecting"]);
  const ws = await connect(env);
  const pong = env.client.ping({ n: 1 });
  assert.deepEqual(ws.framesOf("ping"), [{ type: "ping", payload: { n: 1 } }]);
  ws.receive({ type: "pong", payload: { n: 1 } });
  assert.deepEqual(await pong, { n: 1 });
  await env.clock.advance(1000);
  assert.equal(ws.framesOf("ping").length, 2, "keep-alive ping");
  ws.receive({ type: "pong" });
  await env.clock.advance(1000);
  assert.equal(ws.framesOf("ping").length, 3);
  await env.clock.advance(1000); // no pong for the third
  assert.ok(ws.closedByClient, "the dead socket was closed");
  assert.equal(events.of("disconnected")[0].willReconnect, true);
  assert.equal(env.client.state, "reconnecting");
  const notConnected = await env.client.ping().catch((e) => e);
  assert.equal(notConnected.code, "not_connected");
});

test("disconnect(): close 1000, pending chats reject, no reconnect; connect() again resumes", async () => {
  const env = setup();
  const events = record(env.client, ["disconnected", "state"]);
  const ws = await connect(env, { last_seq: 4 });
  const pending = env.client.sendChat("x").catch((e) => e);
  env.client.disconnect();
  assert.deepEqual(ws.closedByClient, { code: 1000, reason: "normal" });
  assert.equal((await pending).code, "not_connected");
  assert.equal(env.client.state, "closed");
  assert.deepEqual(events.of("disconnected").map((d) => [d.code, d.willReconnect]), [[1000, false]]);
  await env.clock.advance(60000);
  assert.equal(env.WS.instances.length, 1);
  await assert.rejects(env.client.sendChat("y"), (e) => e.code === "not_connected");
  assert.throws(() => env.client.sendData({}), (e) => e.code === "not_connected");
  const again = env.client.connect().catch((e) => e);
  assert.equal(env.WS.last().query.get("last_seq"), "4");
  env.client.disconnect(); // while connecting
  assert.equal(env.client.state, "closed");
  assert.equal((await again).code, "not_connected");
});

test("call(): /v1/ice with the token, tracks in one stream, offer; candidates queued until the answer", async () => {
  const env = setup();
  const events = record(env.client, ["track", "connection-state", "hangup"]);
  const ws = await connect(env);
  const mic = makeTrack("mic");
  const cam = makeTrack("cam", "video");
  const pc = await env.client.call("bob", makeStream("local-stream", [mic, cam]));
  assert.equal(env.client.connection("bob"), pc);
  const ice = env.fetch.calls.find((c) => c.url.endsWith("/v1/ice"));
  assert.equal(ice.headers.Authorization, `Bearer ${env.token}`);
  assert.deepEqual(pc.config.iceServers, ICE.ice_servers);
  assert.deepEqual(pc.log.filter((l) => l[0] === "addTrack"), [["addTrack", "mic", ["local-stream"]], ["addTrack", "cam", ["local-stream"]]]);
  assert.deepEqual(ws.framesOf("offer"), [{ type: "offer", to: "bob", payload: { sdp: pc.localDescription.sdp, type: "offer" } }]);
  // Remote candidates before the answer wait.
  ws.receive({ type: "candidate", from: "bob", to: "alice", payload: { candidate: "c1", sdpMid: "0", sdpMLineIndex: 0 } });
  ws.receive({ type: "candidate", from: "bob", to: "alice", payload: { candidate: "c2", sdpMid: "0", sdpMLineIndex: 0 } });
  await flush();
  assert.equal(pc.log.filter((l) => l[0] === "addIceCandidate").length, 0);
  ws.receive({ type: "answer", from: "bob", payload: { sdp: "bob-answer", type: "answer" } });
  ws.receive({ type: "candidate", from: "bob", payload: { candidate: "c3", sdpMid: "0", sdpMLineIndex: 0 } });
  await flush();
  const order = pc.log.filter((l) => l[0] === "setRemoteDescription" || l[0] === "addIceCandidate").map((l) => l.slice(0, 2).concat(l[0] === "addIceCandidate" ? [l[1]] : [l[2]]));
  assert.deepEqual(order, [["setRemoteDescription", "answer", "bob-answer"], ["addIceCandidate", "c1", "c1"], ["addIceCandidate", "c2", "c2"], ["addIceCandidate", "c3", "c3"]]);
  // Local candidates go out with exactly the three fields.
  pc.emitCandidate({ candidate: "candidate:1 1 udp 1 192.0.2.1 5 typ host", sdpMid: "0", sdpMLineIndex: 0, usernameFragment: "u" });
  pc.emitCandidate(null);
  assert.deepEqual(ws.framesOf("candidate"), [{ type: "candidate", to: "bob", payload: { candidate: "candidate:1 1 udp 1 192.0.2.1 5 typ host", sdpMid: "0", sdpMLineIndex: 0 } }]);
  const remote = makeTrack("remote-mic");
  pc.emitTrack(remote, [{ id: "s" }]);
  assert.equal(events.of("track")[0].track, remote);
  assert.equal(events.of("track")[0].peerId, "bob");
  pc.setConnectionState("connected");
  pc.setConnectionState("failed");
  assert.deepEqual(events.of("connection-state").map((s) => s.state), ["connected", "failed"]);
  // A failed room call is not hung up: it is restarted (tests/js/survive.test.mjs), and only
  // closed is final.
  assert.deepEqual(events.of("hangup"), []);
  pc.setConnectionState("closed");
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "closed" }]);
  assert.equal(pc.closed, true);
  assert.equal(env.client.connection("bob"), undefined);
  assert.equal(ws.framesOf("data").length, 0, "a closed browser call sends no hangup");
});

test("iceServers given up front: no /v1/ice request", async () => {
  const env = setup({ client: { iceServers: [{ urls: "stun:own" }] } });
  await connect(env);
  const pc = await env.client.call("bob", [makeTrack("t")]);
  assert.deepEqual(pc.config.iceServers, [{ urls: "stun:own" }]);
  assert.equal(env.fetch.calls.length, 0);
});

test("incoming: candidates that come with the offer wait for accept(); the answer follows", async () => {
  const env = setup();
  const events = record(env.client, ["incoming"]);
  const ws = await connect(env);
  ws.receive({ type: "offer", from: "bob", payload: { sdp: "bob-offer", type: "offer" } });
  ws.receive({ type: "candidate", from: "bob", payload: { candidate: "k1", sdpMid: "0", sdpMLineIndex: 0 } });
  const [incoming] = events.of("incoming");
  assert.equal(incoming.peerId, "bob");
  assert.equal(incoming.offer.sdp, "bob-offer");
  const pc = await incoming.accept(makeStream("s", [makeTrack("mic")]));
  ws.receive({ type: "candidate", from: "bob", payload: { candidate: "k2", sdpMid: "0", sdpMLineIndex: 0 } });
  await flush();
  assert.deepEqual(pc.log.map((l) => l[0]), ["addTrack", "setRemoteDescription", "addIceCandidate", "createAnswer", "setLocalDescription", "addIceCandidate"]);
  assert.deepEqual(ws.framesOf("answer"), [{ type: "answer", to: "bob", payload: { sdp: pc.localDescription.sdp, type: "answer" } }]);
  await assert.rejects(incoming.accept(), (e) => e.code === "invalid_state", "an offer is accepted once");

  // Reject: data {kind:"reject"} to the caller.
  ws.receive({ type: "offer", from: "carol", payload: { sdp: "carol-offer", type: "offer" } });
  events.of("incoming")[1].reject();
  assert.deepEqual(ws.framesOf("data").at(-1), { type: "data", to: "carol", payload: { kind: "reject" } });
});

test("hangup: local (notify), remote hangup, remote reject, peer-left all end the call", async () => {
  const env = setup();
  const events = record(env.client, ["hangup", "rejected"]);
  const ws = await connect(env);
  const pc1 = await env.client.call("bob", [makeTrack("a")]);
  env.client.hangup("bob");
  assert.deepEqual(ws.framesOf("data").at(-1), { type: "data", to: "bob", payload: { kind: "hangup" } });
  assert.equal(pc1.closed, true);
  const pc2 = await env.client.call("bob", [makeTrack("a")]);
  ws.receive({ type: "data", from: "bob", payload: { kind: "hangup" } });
  assert.equal(pc2.closed, true);
  const pc3 = await env.client.call("bob", [makeTrack("a")]);
  ws.receive({ type: "data", from: "bob", payload: { kind: "reject" } });
  assert.equal(pc3.closed, true);
  const pc4 = await env.client.call("bob", [makeTrack("a")]);
  ws.receive({ type: "peer-left", from: "bob", payload: { peer_id: "bob" } });
  assert.equal(pc4.closed, true);
  assert.deepEqual(events.of("hangup").map((h) => h.reason), ["local", "remote", "rejected", "peer-left"]);
  assert.deepEqual(events.of("rejected"), [{ peerId: "bob" }]);
  const before = ws.framesOf("data").length;
  env.client.hangup("bob", false);
  assert.equal(ws.framesOf("data").length, before, "notify false sends nothing");
});

test("an HTTP-session caller: the answer echoes session_id; a failed connection tells the server", async () => {
  const env = setup();
  const events = record(env.client, ["incoming", "hangup", "data"]);
  const ws = await connect(env);
  ws.receive({ type: "offer", from: "app", payload: { sdp: "app-offer", type: "offer", session_id: "s1", transport: "http" } });
  const pc = await events.of("incoming")[0].accept([makeTrack("agent-mic")]);
  assert.deepEqual(ws.framesOf("answer")[0].payload, { sdp: pc.localDescription.sdp, type: "answer", session_id: "s1" });
  // A renegotiation offer on the same session is answered on the same connection.
  ws.receive({ type: "offer", from: "app", payload: { sdp: "app-offer-2", type: "offer", session_id: "s1", transport: "http" } });
  await flush();
  assert.equal(events.of("incoming").length, 1);
  assert.equal(ws.framesOf("answer").length, 2);
  assert.equal(pc.remoteDescription.sdp, "app-offer-2");
  pc.setConnectionState("failed");
  assert.deepEqual(ws.framesOf("data").at(-1), { type: "data", to: "app", payload: { kind: "hangup" } });
  // data {kind:"replaced"} ends a call with that peer and is also passed on.
  ws.receive({ type: "offer", from: "app", payload: { sdp: "o3", type: "offer", session_id: "s2", transport: "http" } });
  const pc3 = await events.of("incoming")[1].accept([]);
  ws.receive({ type: "data", from: "app", payload: { kind: "replaced", session_id: "s2" } });
  assert.equal(pc3.closed, true);
  assert.deepEqual(events.of("hangup").map((h) => h.reason), ["failed", "replaced"]);
  assert.deepEqual(events.of("data").at(-1), { from: "app", payload: { kind: "replaced", session_id: "s2" } });
});

test("stats every 5 s: rtt_ms, jitter_ms, packet_loss, bitrate_kbps emitted and sent as stats frames", async () => {
  const env = setup();
  const events = record(env.client, ["stats"]);
  const ws = await connect(env);
  const pc = await env.client.call("bob", [makeTrack("a")]);
  const report = (bytesSent, timestamp) => new Map([
    ["T", { id: "T", type: "transport", selectedCandidatePairId: "P" }],
    ["P", { id: "P", type: "candidate-pair", currentRoundTripTime: 0.02 }],
    ["I", { id: "I", type: "inbound-rtp", kind: "audio", jitter: 0.0035, packetsLost: 1, packetsReceived: 99 }],
    ["O", { id: "O", type: "outbound-rtp", kind: "audio", bytesSent, timestamp }],
  ]);
  pc.statsReport = report(1000, 0);
  await env.clock.advance(4999);
  assert.equal(events.of("stats").length, 0);
  await env.clock.advance(1);
  pc.statsReport = report(21000, 5000);
  await env.clock.advance(5000);
  assert.deepEqual(events.of("stats"), [
    { peerId: "bob", rtt_ms: 20, jitter_ms: 3.5, packet_loss: 0.01, bitrate_kbps: null },
    { peerId: "bob", rtt_ms: 20, jitter_ms: 3.5, packet_loss: 0.01, bitrate_kbps: 32 },
  ]);
  assert.deepEqual(ws.framesOf("stats").map((f) => f.payload), [
    { rtt_ms: 20, jitter_ms: 3.5, packet_loss: 0.01, bitrate_kbps: null },
    { rtt_ms: 20, jitter_ms: 3.5, packet_loss: 0.01, bitrate_kbps: 32 },
  ]);
  assert.equal(ws.framesOf("stats")[0].to, undefined, "stats are not addressed");
});

test("a reconnect keeps peer connections; disconnect() closes them", async () => {
  const env = setup();
  const events = record(env.client, ["hangup"]);
  const ws = await connect(env);
  const pc = await env.client.call("bob", [makeTrack("a")]);
  ws.drop();
  assert.equal(pc.closed, false);
  await env.clock.advance(1000);
  env.WS.last().open();
  env.WS.last().receive(welcome({ recovered: true, replay_count: 0 }));
  assert.equal(env.client.connection("bob"), pc);
  env.client.disconnect();
  assert.equal(pc.closed, true);
  assert.deepEqual(events.of("hangup"), [{ peerId: "bob", reason: "disconnect" }]);
});
