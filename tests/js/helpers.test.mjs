// Pure helpers of sdk/js/calling-client.js: frames, candidates, JWT room id, URLs, backoff,
// close codes, stats, DTMF, the candidate queue, typing auto-off, pending chat bookkeeping.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  CallingError,
  _buildFrame,
  _candidatePayload,
  _roomIdFromToken,
  _decodeJwtPayload,
  _httpBase,
  _socketUrl,
  _backoffDelay,
  _isTerminalClose,
  _isRetryableStatus,
  _isTemporaryCode,
  _statsFromReport,
  _dtmfDigits,
  _CandidateQueue,
  _TypingState,
  _PendingChats,
  _Emitter,
  _withStreamId,
} from "../../sdk/js/calling-client.js";
import { FakeTimers, flush, makeToken } from "./fakes.mjs";

test("frames: type first, to and payload only when present", () => {
  assert.equal(_buildFrame("ping"), '{"type":"ping"}');
  assert.equal(_buildFrame("ping", null), '{"type":"ping"}');
  assert.equal(_buildFrame("data", { kind: "hangup" }, "bob"), '{"type":"data","to":"bob","payload":{"kind":"hangup"}}');
  assert.equal(_buildFrame("data", { a: 1 }, null), '{"type":"data","payload":{"a":1}}');
  assert.deepEqual(JSON.parse(_buildFrame("chat", { client_id: "m1", text: "hi" })), { type: "chat", payload: { client_id: "m1", text: "hi" } });
  // A falsy but present payload is kept.
  assert.equal(_buildFrame("data", 0, "bob"), '{"type":"data","to":"bob","payload":0}');
});

test("candidate payload: candidate, sdpMid, sdpMLineIndex only", () => {
  const c = { candidate: "candidate:1 1 udp 2122260223 192.0.2.1 54400 typ host", sdpMid: "0", sdpMLineIndex: 0, usernameFragment: "abcd" };
  assert.deepEqual(_candidatePayload(c), { candidate: c.candidate, sdpMid: "0", sdpMLineIndex: 0 });
  assert.deepEqual(_candidatePayload({ candidate: "x", sdpMid: undefined, sdpMLineIndex: null }), { candidate: "x", sdpMid: null, sdpMLineIndex: null });
  assert.deepEqual(_candidatePayload(null), { candidate: "", sdpMid: null, sdpMLineIndex: null });
  // An RTCIceCandidate-like object with getters works the same.
  const withGetters = Object.create({ get candidate() { return "y"; }, get sdpMid() { return "1"; }, get sdpMLineIndex() { return 1; } });
  assert.deepEqual(_candidatePayload(withGetters), { candidate: "y", sdpMid: "1", sdpMLineIndex: 1 });
});

test("JWT room id: base64url payload, unicode, padding, malformed tokens", () => {
  assert.equal(_roomIdFromToken(makeToken({ sub: "alice", room_id: "support-42" })), "support-42");
  // Non-ASCII and a payload whose base64url uses '-' and '_' and needs padding.
  const room = "salle-été-✓?>>";
  const token = makeToken({ sub: "b", room_id: room, n: "??>>" });
  assert.match(token.split(".")[1], /[-_]/);
  assert.equal(_roomIdFromToken(token), room);
  assert.equal(_roomIdFromToken(makeToken({ sub: "a" })), null);
  assert.equal(_roomIdFromToken(makeToken({ sub: "a", room_id: "" })), null);
  assert.equal(_roomIdFromToken(makeToken({ sub: "a", room_id: 7 })), null);
  assert.equal(_roomIdFromToken("not-a-jwt"), null);
  assert.equal(_roomIdFromToken("a.%%%.c"), null);
  assert.equal(_roomIdFromToken(`a.${Buffer.from("[1,2]").toString("base64url")}.c`), null);
  assert.equal(_roomIdFromToken(undefined), null);
  assert.deepEqual(_decodeJwtPayload(makeToken({ sub: "a", exp: 5 })), { sub: "a", exp: 5 });
});

test("URLs: http base from the socket URL, socket URL with token and last_seq", () => {
  assert.equal(_httpBase("ws://127.0.0.1:8080/v1/ws"), "http://127.0.0.1:8080");
  assert.equal(_httpBase("wss://calls.example.org/v1/ws"), "https://calls.example.org");
  assert.equal(_httpBase("wss://calls.example.org:8443/x"), "https://calls.example.org:8443");
  const url = new URL(_socketUrl("ws://h:1/v1/ws", "t.o+k/en", { last_seq: 7 }));
  assert.equal(url.pathname, "/v1/ws");
  assert.equal(url.searchParams.get("token"), "t.o+k/en");
  assert.equal(url.searchParams.get("last_seq"), "7");
  const fresh = new URL(_socketUrl("ws://h:1/v1/ws", "tok", { last_seq: null }));
  assert.equal(fresh.searchParams.has("last_seq"), false);
  assert.equal(new URL(_socketUrl("http://h:1", "tok")).toString(), "ws://h:1/v1/ws?token=tok");
  assert.equal(new URL(_socketUrl("https://h", "tok", {}, "/v1/presence")).toString(), "wss://h/v1/presence?token=tok");
  // last_seq 0 is a real resume point, not "absent".
  assert.equal(new URL(_socketUrl("ws://h:1/v1/ws", "tok", { last_seq: 0 })).searchParams.get("last_seq"), "0");
});

test("backoff: 1 s, 2 s, 4 s … capped, jitter within ±20 % and never above the cap", () => {
  const none = { jitter: 0 };
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7].map((n) => _backoffDelay(n, none)), [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(_backoffDelay(3, { initialMs: 500, factor: 3, maxMs: 100000, jitter: 0 }), 4500);
  assert.equal(_backoffDelay(1, { jitter: 0.2 }, () => 0), 800);
  assert.equal(_backoffDelay(1, { jitter: 0.2 }, () => 0.5), 1000);
  assert.equal(_backoffDelay(1, { jitter: 0.2 }, () => 0.999999), 1200);
  assert.equal(_backoffDelay(10, { jitter: 0.2 }, () => 0.999999), 30000);
  assert.equal(_backoffDelay(10, { jitter: 0.2 }, () => 0), 24000);
  for (let i = 0; i < 200; i++) {
    const d = _backoffDelay(2);
    assert.ok(d >= 1600 && d <= 2400, `delay ${d}`);
  }
});

test("close codes, HTTP statuses, frame error codes", () => {
  for (const code of [4400, 4401, 4404, 4409, 4410, 4999]) assert.equal(_isTerminalClose(code), true, String(code));
  for (const code of [1000, 1001, 1006, 1011, 4000, 4001, 4002, 4399]) assert.equal(_isTerminalClose(code), false, String(code));
  for (const s of [429, 500, 502, 503]) assert.equal(_isRetryableStatus(s), true);
  for (const s of [400, 401, 403, 404, 409, 410]) assert.equal(_isRetryableStatus(s), false);
  for (const c of [404, 429, 480, 500, 503]) assert.equal(_isTemporaryCode(c), true);
  for (const c of [400, 401, 402, 413, 422, 440, 441, 442]) assert.equal(_isTemporaryCode(c), false);
});

test("stats: rtt from the selected pair, inbound audio jitter and loss, outbound bitrate as a delta", () => {
  const report = (bytesSent, timestamp, extra = []) => new Map([
    ["T1", { id: "T1", type: "transport", selectedCandidatePairId: "CP2" }],
    ["CP1", { id: "CP1", type: "candidate-pair", currentRoundTripTime: 0.9, state: "succeeded", nominated: true }],
    ["CP2", { id: "CP2", type: "candidate-pair", currentRoundTripTime: 0.0215, state: "succeeded", nominated: true }],
    ["IA", { id: "IA", type: "inbound-rtp", kind: "audio", jitter: 0.0034, packetsLost: 5, packetsReceived: 995 }],
    ["IV", { id: "IV", type: "inbound-rtp", kind: "video", jitter: 0.5, packetsLost: 500, packetsReceived: 500 }],
    ["OA", { id: "OA", type: "outbound-rtp", kind: "audio", bytesSent, timestamp }],
    ["RO", { id: "RO", type: "remote-outbound-rtp", kind: "audio", bytesSent: 999999, timestamp }],
    ...extra,
  ]);
  const first = _statsFromReport(report(10000, 1000), null);
  assert.deepEqual(first.sample, { rtt_ms: 21.5, jitter_ms: 3.4, packet_loss: 0.005, bitrate_kbps: null });
  assert.deepEqual(first.bytes, { bytesSent: 10000, timestamp: 1000 });
  // 40000 bytes in 5 s = 64 kbit/s.
  const second = _statsFromReport(report(50000, 6000), first.bytes);
  assert.equal(second.sample.bitrate_kbps, 64);
  // Video outbound counts too.
  const both = _statsFromReport(report(50000, 6000, [["OV", { id: "OV", type: "outbound-rtp", kind: "video", bytesSent: 62500, timestamp: 6000 }]]), first.bytes);
  assert.equal(both.sample.bitrate_kbps, 164);
  // A reset counter (new connection) gives no bitrate rather than a negative one.
  assert.equal(_statsFromReport(report(10, 7000), second.bytes).sample.bitrate_kbps, null);
  // Firefox: the pair says selected; stats as an array.
  const ff = _statsFromReport([
    { id: "a", type: "candidate-pair", selected: true, currentRoundTripTime: 0.05 },
    { id: "b", type: "inbound-rtp", mediaType: "audio", jitter: 0.01, packetsLost: 0, packetsReceived: 10 },
  ], null);
  assert.deepEqual(ff.sample, { rtt_ms: 50, jitter_ms: 10, packet_loss: 0, bitrate_kbps: null });
  assert.deepEqual(_statsFromReport(new Map(), null).sample, { rtt_ms: null, jitter_ms: null, packet_loss: null, bitrate_kbps: null });
});

test("DTMF digits: 0-9 * # A-D, one key each", () => {
  assert.deepEqual(_dtmfDigits("12#*a"), ["1", "2", "#", "*", "A"]);
  assert.throws(() => _dtmfDigits("1,2"), (e) => e instanceof CallingError && e.code === "invalid_argument");
  assert.throws(() => _dtmfDigits(""), CallingError);
});

test("candidate queue: held until the remote description is set, then released in order", () => {
  const q = new _CandidateQueue();
  assert.equal(q.ready, false);
  assert.equal(q.push("c1"), false);
  assert.equal(q.push("c2"), false);
  assert.equal(q.length, 2);
  assert.deepEqual(q.markReady(), ["c1", "c2"]);
  assert.equal(q.length, 0);
  assert.equal(q.push("c3"), true);
  assert.deepEqual(q.markReady(), []);
  q.clear();
  assert.equal(q.ready, false);
  assert.equal(q.push("c4"), false);
});

test("typing: only changes are sent, auto-off after 3 s, renewed by set(true)", async () => {
  const clock = new FakeTimers();
  const sent = [];
  const typing = new _TypingState({ timers: clock.api(), send: (on) => sent.push(on) });
  typing.set(true);
  typing.set(true);
  assert.deepEqual(sent, [true]);
  await clock.advance(2000);
  typing.set(true); // renews: off at 5000, not 3000
  await clock.advance(2999);
  assert.deepEqual(sent, [true]);
  assert.equal(typing.on, true);
  await clock.advance(1);
  assert.deepEqual(sent, [true, false]);
  assert.equal(typing.on, false);
  typing.set(false);
  assert.deepEqual(sent, [true, false], "off while off sends nothing");
  typing.set(true);
  typing.set(false);
  assert.deepEqual(sent, [true, false, true, false]);
  await clock.advance(10000);
  assert.deepEqual(sent, [true, false, true, false], "explicit off cancels the timer");
  typing.set(true, false);
  assert.deepEqual(sent, [true, false, true, false], "nothing while not connected");
  typing.set(true);
  typing.reset();
  await clock.advance(10000);
  assert.deepEqual(sent, [true, false, true, false, true], "reset forgets without sending");
  assert.equal(clock.pending, 0);
});

function pendingChats(clock, { connected = true, ...options } = {}) {
  const sent = [];
  const state = { connected };
  const chats = new _PendingChats({
    timers: clock.api(),
    send: (text) => sent.push(JSON.parse(text)),
    canSend: () => state.connected,
    ...options,
  });
  return { chats, sent, state };
}

test("pending chats: no ack in 10 s → resent with the same client_id; after 3 sends → timeout", async () => {
  const clock = new FakeTimers();
  const { chats, sent } = pendingChats(clock);
  const result = chats.add("m1", "hi", { k: 1 }).then((ack) => ({ ack }), (error) => ({ error }));
  assert.deepEqual(sent, [{ type: "chat", payload: { client_id: "m1", text: "hi", meta: { k: 1 } } }]);
  await clock.advance(9999);
  assert.equal(sent.length, 1);
  await clock.advance(1);
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1], sent[0]);
  await clock.advance(10000);
  assert.equal(sent.length, 3);
  assert.ok(sent.every((f) => f.payload.client_id === "m1"));
  await clock.advance(10000);
  const { error } = await result;
  assert.ok(error instanceof CallingError);
  assert.equal(error.code, "timeout");
  assert.equal(error.retryable, true);
  assert.equal(sent.length, 3);
  assert.equal(chats.size, 0);
});

test("pending chats: a late ack resolves; a second ack for it is ignored", async () => {
  const clock = new FakeTimers();
  const { chats, sent } = pendingChats(clock, { ackTimeoutMs: 1000, retries: 2 });
  const promise = chats.add("m1", "hi");
  assert.deepEqual(sent[0].payload, { client_id: "m1", text: "hi" }, "no meta key without meta");
  await clock.advance(1000);
  assert.equal(sent.length, 2);
  assert.equal(chats.resolve("m1", { seq: 4, client_id: "m1", ts: 9 }), true);
  assert.deepEqual(await promise, { seq: 4, client_id: "m1", ts: 9 });
  assert.equal(chats.resolve("m1", { seq: 4, client_id: "m1", ts: 9 }), false);
  await clock.advance(5000);
  assert.equal(sent.length, 2, "no more resends after the ack");
  assert.equal(clock.pending, 0);
});

test("pending chats: a permanent failed ack rejects at once; 503 is retried after 1 s", async () => {
  const clock = new FakeTimers();
  const { chats, sent } = pendingChats(clock);
  const empty = chats.add("m1", " ").catch((e) => e);
  chats.failAck("m1", new CallingError("chat text is empty", { code: 440, retryable: false }));
  const error = await empty;
  assert.equal(error.code, 440);
  const busy = chats.add("m2", "x");
  chats.failAck("m2", new CallingError("store busy", { code: 503, retryable: true }));
  await clock.advance(999);
  assert.equal(sent.filter((f) => f.payload.client_id === "m2").length, 1);
  await clock.advance(1);
  assert.equal(sent.filter((f) => f.payload.client_id === "m2").length, 2);
  chats.resolve("m2", { seq: 1, client_id: "m2", ts: 1 });
  assert.equal((await busy).seq, 1);
  chats.add("m3", "a");
  await assert.rejects(chats.add("m3", "b"), (e) => e.code === "invalid_state");
  assert.equal(sent.filter((f) => f.payload.client_id === "m3").length, 1, "the duplicate was not sent");
});

test("pending chats: offline messages wait; resendAll sends oldest first without using retries", async () => {
  const clock = new FakeTimers();
  const { chats, sent, state } = pendingChats(clock, { connected: false, retries: 0 });
  const a = chats.add("a", "1").catch((e) => e);
  const b = chats.add("b", "2").catch((e) => e);
  assert.equal(sent.length, 0);
  state.connected = true;
  chats.resendAll();
  chats.resendAll(); // a second reconnect: still free
  assert.deepEqual(sent.map((f) => f.payload.client_id), ["a", "b", "a", "b"]);
  // retries: 0 allows one counted send; the resends above did not count, so a timeout resends once.
  await clock.advance(10000);
  assert.deepEqual(sent.map((f) => f.payload.client_id), ["a", "b", "a", "b", "a", "b"]);
  await clock.advance(10000);
  assert.equal((await a).code, "timeout");
  assert.equal((await b).code, "timeout");
});

test("pending chats: a timeout while disconnected waits for the reconnect", async () => {
  const clock = new FakeTimers();
  const { chats, sent, state } = pendingChats(clock);
  const p = chats.add("m", "x");
  state.connected = false;
  await clock.advance(60000);
  assert.equal(sent.length, 1);
  assert.equal(chats.has("m"), true);
  state.connected = true;
  chats.resendAll();
  assert.equal(sent.length, 2);
  chats.rejectAll(new CallingError("bye", { code: "not_connected", retryable: true }));
  await assert.rejects(p, (e) => e.code === "not_connected");
  await flush();
});

test("emitter: on/off/once, a throwing handler does not stop the others", async () => {
  const e = new _Emitter();
  const seen = [];
  const off = e.on("x", (v) => seen.push(["a", v]));
  e.on("x", (v) => seen.push(["b", v]));
  const next = e.once("x");
  e.emit("x", 1);
  off();
  e.emit("x", 2);
  assert.deepEqual(seen, [["a", 1], ["b", 1], ["b", 2]]);
  assert.equal(await next, 1);
  const errors = [];
  const saved = globalThis.reportError;
  globalThis.reportError = (err) => errors.push(err.message);
  try {
    const e2 = new _Emitter();
    const order = [];
    e2.on("y", () => {
      throw new Error("boom");
    });
    e2.on("y", () => order.push("second"));
    e2.emit("y");
    assert.deepEqual(order, ["second"]);
  } finally {
    if (saved === undefined) delete globalThis.reportError;
    else globalThis.reportError = saved;
  }
  assert.deepEqual(errors, ["boom"]);
});

test("tracks go out under one stream id local-<peerId>, in msid and ssrc lines, on the wire only", () => {
  const sdp = [
    "v=0", "a=msid-semantic: WMS browser-stream", "m=audio 9 UDP/TLS/RTP/SAVPF 111",
    "a=msid:browser-stream 7f3c-track", "a=ssrc:1234 msid:browser-stream 7f3c-track", "a=ssrc:1234 cname:x",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=msid:- other-track", "",
  ].join("\r\n");
  const out = _withStreamId(sdp, "local-alice");
  assert.match(out, /^a=msid:local-alice 7f3c-track\r$/m);
  assert.match(out, /^a=ssrc:1234 msid:local-alice 7f3c-track\r$/m);
  assert.match(out, /^a=msid:- other-track\r$/m, "no-stream tracks stay without a stream");
  assert.match(out, /^a=ssrc:1234 cname:x\r$/m);
  assert.equal(out.split("\r\n").length, sdp.split("\r\n").length);
  assert.equal(_withStreamId(sdp, ""), sdp);
});
