// Chat operations (issue 43; the wire contract is docs/protocol.md "Chat operations"): sendChat's
// reply_to, editChat, deleteChat, react and unreact through the same pending ledger as sendChat
// (ack, retry with the same client_id, resend after a reconnect, a replayed own operation
// completing the call), the chat-edited / chat-deleted / chat-reaction events once per seq (live
// and replayed; the replay count includes operations), and history both ways and the inbox over
// fake WebSocket and fetch (tests/js/fakes.mjs). Frames are the spec's, byte for byte.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CallingClient } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, makeFetch, makeToken, makeWebSocketClass, record } from "./fakes.mjs";

function setup({ routes, claims = {} } = {}) {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const fetch = makeFetch(routes || (() => null));
  const token = makeToken({ sub: "alice", room_id: "r1", scope: "room", exp: 4102444800, ...claims });
  const client = new CallingClient({
    url: "ws://127.0.0.1:9/v1/ws", token, WebSocket: WS, fetch, timers: clock.api(), random: () => 0.5, backoff: { jitter: 0 },
    statsIntervalMs: 0,
  });
  return { clock, WS, fetch, client, token };
}

function welcome(extra = {}) {
  return {
    type: "welcome",
    payload: {
      peer_id: "alice", room_id: "r1", call_id: null, role: "peer", name: null, peers: [{ peer_id: "bob", role: "peer", name: null }],
      ping_interval_ms: 25000, server_time: 1, last_seq: 0, read_seq: 0, unread: 0, ...extra,
    },
  };
}

const EVENTS = ["chat", "chat-edited", "chat-deleted", "chat-reaction", "error"];

test("every operation sends the spec's frame and resolves with its own ack", async () => {
  const env = setup();
  const ws = await connectWith(env, welcome({ last_seq: 4 }));
  const reply = env.client.sendChat("yes", { clientId: "c1", replyTo: 3 });
  const edit = env.client.editChat(3, "fixed", { clientId: "c2", meta: { k: 1 } });
  const del = env.client.deleteChat(2, { clientId: "c3" });
  const add = env.client.react(3, "👍", { clientId: "c4" });
  const remove = env.client.unreact(3, "👍", { clientId: "c5" });
  assert.deepEqual(ws.sent, [
    '{"type":"chat","payload":{"client_id":"c1","text":"yes","reply_to":3}}',
    '{"type":"chat-edit","payload":{"client_id":"c2","target":3,"text":"fixed","meta":{"k":1}}}',
    '{"type":"chat-delete","payload":{"client_id":"c3","target":2}}',
    '{"type":"chat-react","payload":{"client_id":"c4","target":3,"key":"👍"}}',
    '{"type":"chat-react","payload":{"client_id":"c5","target":3,"key":"👍","remove":true}}',
  ]);
  for (const [i, id] of ["c1", "c2", "c3", "c4", "c5"].entries()) ws.receive({ type: "chat-ack", payload: { client_id: id, seq: 5 + i, ts: 100 + i } });
  assert.deepEqual(await Promise.all([reply, edit, del, add, remove]).then((acks) => acks.map((a) => [a.client_id, a.seq, a.ts])),
    [["c1", 5, 100], ["c2", 6, 101], ["c3", 7, 102], ["c4", 8, 103], ["c5", 9, 104]]);
  assert.equal(env.client.lastSeq, 9);
  // Checked before anything is sent.
  await assert.rejects(env.client.editChat(0, "x"), (e) => e.code === "invalid_argument");
  await assert.rejects(env.client.sendChat("x", { replyTo: 1.5 }), (e) => e.code === "invalid_argument");
  await assert.rejects(env.client.react(3, ""), (e) => e.code === "invalid_argument");
  await assert.rejects(env.client.editChat(3, "x", { meta: [1] }), (e) => e.code === 442);
  assert.equal(ws.sent.length, 5);
});

test("an operation without an ack is resent with the same client_id; failed acks reject at once", async () => {
  const env = setup();
  const events = record(env.client, EVENTS);
  const ws = await connectWith(env, welcome());
  const edit = env.client.editChat(1, "again", { clientId: "e1" });
  await env.clock.advance(10000);
  assert.deepEqual(ws.framesOf("chat-edit").map((f) => f.payload.client_id), ["e1", "e1"]);
  ws.receive({ type: "chat-ack", payload: { client_id: "e1", seq: 2, ts: 2 } });
  assert.equal((await edit).seq, 2);
  const forbidden = env.client.deleteChat(1, { clientId: "d1" });
  ws.receive({ type: "chat-ack", error: { code: 444, message: "not the author" }, payload: { client_id: "d1" } });
  await assert.rejects(forbidden, (e) => e.code === 444 && e.retryable === false && e.frameType === "chat-delete");
  const missing = env.client.react(99, "x", { clientId: "r1" });
  ws.receive({ type: "chat-ack", error: { code: 443, message: "no message 99" }, payload: { client_id: "r1" } });
  await assert.rejects(missing, (e) => e.code === 443);
  // An error frame refusing a chat-react frame rejects the latest pending reaction, not a pending chat.
  const chat = env.client.sendChat("still pending", { clientId: "m1" });
  const bad = env.client.react(1, "ok", { clientId: "r2" });
  ws.receive({ type: "error", error: { code: 422, message: "bad frame" }, payload: { type: "chat-react" } });
  await assert.rejects(bad, (e) => e.code === 422);
  ws.receive({ type: "chat-ack", payload: { client_id: "m1", seq: 3, ts: 3 } });
  assert.equal((await chat).seq, 3);
  assert.deepEqual(events.of("error").map((e) => e.code), [444, 443, 422]);
  // Out of retries: timeout, as for sendChat.
  const lost = env.client.unreact(1, "ok", { clientId: "u1" });
  const rejected = assert.rejects(lost, (e) => e.code === "timeout");
  await env.clock.advance(30000);
  await rejected;
  assert.equal(ws.framesOf("chat-react").filter((f) => f.payload.client_id === "u1").length, 3);
});

test("inbound operations: events once per seq, live and replayed; replays count operations; own ones complete pending calls", async () => {
  const env = setup();
  const events = record(env.client, EVENTS);
  const ws = await connectWith(env, welcome({ last_seq: 1 }));
  ws.receive({ type: "chat", from: "bob", payload: { client_id: "b2", seq: 2, ts: 20, text: "re", meta: null, reply_to: 1 } });
  ws.receive({ type: "chat-edit", from: "bob", payload: { client_id: "b3", seq: 3, ts: 30, target: 2, text: "re!", meta: { m: 1 } } });
  ws.receive({ type: "chat-react", from: "bob", payload: { client_id: "b4", seq: 4, ts: 40, target: 2, key: "🎉", remove: false } });
  ws.receive({ type: "chat-react", from: "bob", payload: { client_id: "b4", seq: 4, ts: 40, target: 2, key: "🎉", remove: false } });
  // Sent before the drop; the ack is lost with the socket.
  const del = env.client.deleteChat(2, { clientId: "a5" });
  ws.drop();
  await env.clock.advance(1000);
  const ws2 = env.WS.last();
  assert.equal(ws2.query.get("last_seq"), "4");
  ws2.open();
  ws2.receive(welcome({ last_seq: 7, recovered: true, replay_count: 4 }));
  assert.deepEqual(ws2.framesOf("chat-delete").map((f) => f.payload.client_id), ["a5"], "pending operations are resent after the welcome");
  // The replay: an overlap (seq 4), our own delete (completes the call), and bob's frames on the now deleted message.
  ws2.receive({ type: "chat-react", from: "bob", payload: { client_id: "b4", seq: 4, ts: 40, target: 2, key: "🎉", remove: false } });
  ws2.receive({ type: "chat-delete", from: "alice", payload: { client_id: "a5", seq: 5, ts: 50, target: 2 } });
  ws2.receive({ type: "chat-edit", from: "bob", payload: { client_id: "b6", seq: 6, ts: 60, target: 2, text: "", meta: null, deleted: true } });
  ws2.receive({ type: "chat-react", from: "bob", payload: { client_id: "b7", seq: 7, ts: 70, target: 2, key: "🎉", remove: true } });
  assert.equal(env.client._resume.replayRemaining, 0);
  assert.deepEqual(await del, { seq: 5, client_id: "a5", ts: 50 });
  ws2.receive({ type: "chat-delete", from: "carol", payload: { client_id: "c8", seq: 8, ts: 80, target: 2 } });
  ws2.receive({ type: "chat", from: "bob", payload: { client_id: "b9", seq: 9, ts: 90, text: "", meta: null, deleted: true } });
  assert.deepEqual(events.map(([name, e]) => [name, e.seq]), [
    ["chat", 2], ["chat-edited", 3], ["chat-reaction", 4], ["chat-edited", 6], ["chat-reaction", 7], ["chat-deleted", 8], ["chat", 9],
  ]);
  assert.deepEqual(events.of("chat")[0], { seq: 2, from: "bob", client_id: "b2", text: "re", meta: null, ts: 20, reply_to: 1, deleted: false });
  assert.deepEqual(events.of("chat-edited")[0], { from: "bob", seq: 3, ts: 30, client_id: "b3", target: 2, text: "re!", meta: { m: 1 }, deleted: false });
  assert.equal(events.of("chat-edited")[1].deleted, true);
  assert.deepEqual(events.of("chat-reaction").map((r) => [r.key, r.removed, r.target]), [["🎉", false, 2], ["🎉", true, 2]]);
  assert.deepEqual(events.of("chat-deleted")[0], { from: "carol", seq: 8, ts: 80, client_id: "c8", target: 2 });
  assert.deepEqual(events.of("chat")[1], { seq: 9, from: "bob", client_id: "b9", text: "", meta: null, ts: 90, reply_to: null, deleted: true });
  assert.equal(env.client.lastSeq, 9);
});

test("fetchMessages backward with edits, forward by default; both cursors refused; inbox with a user token", async () => {
  const message = {
    seq: 7, from: "bob", client_id: "b7", text: "now", meta: null, ts: 70, reply_to: 3, edited_ts: 80,
    reactions: [{ key: "👍", count: 2, peers: ["alice", "carol"] }], edits: [{ seq: 8, ts: 80, text: "now", meta: null }],
  };
  const tomb = { seq: 5, from: "bob", client_id: "b5", text: "", meta: null, ts: 50, deleted: true, deleted_ts: 60, reactions: [] };
  const env = setup({
    routes: ({ url }) => {
      const u = new URL(url);
      if (u.pathname === "/v1/rooms/r1/messages") {
        return { status: 200, body: { room_id: "r1", messages: [message, tomb], next_before_seq: 5, has_more: true, last_seq: 9, limit: 2 } };
      }
      if (u.pathname === "/v1/me/rooms") {
        return { status: 200, body: { rooms: [{ room_id: "r1", last_seq: 9, last_ts: 90, last_message: { seq: 7, from: "bob", text: "now", ts: 70 }, read_seq: 4, unread: 2 }], has_more: true, next_cursor: "abc" } };
      }
      return null;
    },
  });
  const page = await env.client.fetchMessages({ beforeSeq: 10, limit: 2, includeEdits: true });
  assert.equal(env.fetch.calls[0].url, "http://127.0.0.1:9/v1/rooms/r1/messages?before_seq=10&limit=2&include=edits");
  assert.equal(page.next_before_seq, 5);
  assert.equal(page.has_more, true);
  assert.deepEqual(page.messages[0], { seq: 7, from: "bob", client_id: "b7", text: "now", meta: null, ts: 70, reply_to: 3, deleted: false,
    edited_ts: 80, reactions: [{ key: "👍", count: 2, peers: ["alice", "carol"] }], edits: [{ seq: 8, ts: 80, text: "now", meta: null }] });
  assert.deepEqual(page.messages[1], { seq: 5, from: "bob", client_id: "b5", text: "", meta: null, ts: 50, reply_to: null, deleted: true, deleted_ts: 60, reactions: [] });
  await env.client.fetchMessages({ limit: 5 });
  assert.equal(env.fetch.calls[1].url, "http://127.0.0.1:9/v1/rooms/r1/messages?since_seq=0&limit=5");
  await assert.rejects(env.client.fetchMessages({ sinceSeq: 1, beforeSeq: 5 }), (e) => e.code === "invalid_argument");

  const user = setup({ routes: env.fetch && (({ url }) => (new URL(url).pathname === "/v1/me/rooms"
    ? { status: 200, body: { rooms: [], has_more: false } } : null)), claims: { room_id: undefined, scope: "user", sub: "alice" } });
  assert.deepEqual(await user.client.inbox(), { rooms: [], has_more: false });
  assert.equal(user.fetch.calls[0].url, "http://127.0.0.1:9/v1/me/rooms");
  assert.equal(user.fetch.calls[0].headers.Authorization, `Bearer ${user.token}`);
  const inbox = await env.client.inbox({ limit: 1, cursor: "x y" });
  assert.equal(env.fetch.calls.at(-1).url, "http://127.0.0.1:9/v1/me/rooms?limit=1&cursor=x%20y");
  assert.equal(inbox.next_cursor, "abc");
  assert.deepEqual(inbox.rooms[0].last_message, { seq: 7, from: "bob", text: "now", ts: 70 });
});
