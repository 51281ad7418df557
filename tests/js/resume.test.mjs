// _ResumeState: the chat seq bookkeeping behind "a dropped socket loses and duplicates no chat"
// (docs/protocol.md "Resume"; the same rules as Sources/CallingClient/SignalingClient.swift).
import { test } from "node:test";
import assert from "node:assert/strict";
import { _ResumeState } from "../../sdk/js/calling-client.js";

test("first welcome: history before it is not live; no last_seq on the first connection", () => {
  const r = new _ResumeState();
  assert.equal(r.resumeFrom(), null);
  assert.deepEqual(r.onWelcome({ last_seq: 10 }), { resumed: false, gapFill: false });
  assert.equal(r.lastSeq, 10);
  assert.equal(r.resumable, true);
  assert.equal(r.onChat(10).deliver, false, "a message from before the session is history");
  assert.equal(r.onChat(11).deliver, true);
  assert.equal(r.onChat(11).deliver, false, "duplicate");
  assert.equal(r.lastSeq, 11);
  assert.equal(r.resumeFrom(), 11);
});

test("own acks move lastSeq; a resume replay overlapping what we saw is deduplicated", () => {
  const r = new _ResumeState();
  r.onWelcome({ last_seq: 0 });
  r.onChat(1);
  r.markSeen(2); // our own message, acked
  r.onChat(3);
  assert.equal(r.resumeFrom(), 3);
  // Reconnect: the server replays 4 and 5 (missed while away) …
  assert.deepEqual(r.onWelcome({ last_seq: 5, recovered: true, replay_count: 2 }), { resumed: true, gapFill: false });
  assert.equal(r.replayRemaining, 2);
  assert.deepEqual(r.onChat(4), { deliver: true, gapFill: false });
  assert.deepEqual(r.onChat(5), { deliver: true, gapFill: false });
  assert.equal(r.replayRemaining, 0);
  // … and a live frame that duplicates one of them (it raced the replay) is dropped.
  assert.equal(r.onChat(5).deliver, false);
  assert.equal(r.onChat(6).deliver, true);
  assert.equal(r.lastSeq, 6);
});

test("capped replay: gap fill starts after the last replayed frame, from the replay's end", () => {
  const r = new _ResumeState();
  r.onWelcome({ last_seq: 2 });
  assert.deepEqual(r.onWelcome({ last_seq: 900, recovered: false, replay_count: 2 }), { resumed: true, gapFill: false });
  assert.deepEqual(r.onChat(3), { deliver: true, gapFill: false });
  assert.deepEqual(r.onChat(4), { deliver: true, gapFill: true });
  assert.equal(r.gapStart(), 4);
  // A live message arrives while the gap is open: lastSeq moves past the gap …
  assert.equal(r.onChat(901).deliver, true);
  assert.equal(r.lastSeq, 901);
  // … the next connection must resume from the gap, not from lastSeq.
  r.setGapCursor(200);
  assert.equal(r.resumeFrom(), 200);
  for (let s = 5; s <= 200; s++) assert.equal(r.accept(s), true);
  assert.equal(r.accept(150), false);
  // Reconnect mid-gap: replay covers 201…300, then the fill continues after 300.
  assert.deepEqual(r.onWelcome({ last_seq: 901, recovered: false, replay_count: 100 }), { resumed: true, gapFill: false });
  let last;
  for (let s = 201; s <= 300; s++) last = r.onChat(s);
  assert.deepEqual(last, { deliver: true, gapFill: true });
  assert.equal(r.gapStart(), 300);
  for (let s = 301; s <= 900; s++) assert.equal(r.accept(s), true, `seq ${s}`);
  assert.equal(r.accept(901), false, "the live one is not delivered twice");
  r.setGapCursor(null);
  assert.equal(r.resumeFrom(), 901);
});

test("capped replay with nothing replayed: gap fill at once from last_seq", () => {
  const r = new _ResumeState();
  r.onWelcome({ last_seq: 7 });
  assert.equal(r.resumeFrom(), 7); // the client asks this when it opens the next socket
  r.markSeen(8); // an ack that came in after the socket opened does not move the gap's start
  assert.deepEqual(r.onWelcome({ last_seq: 9000, recovered: false, replay_count: 0 }), { resumed: true, gapFill: true });
  assert.equal(r.gapStart(), 7);
});

test("pruning keeps dedupe exact below an open gap", () => {
  const r = new _ResumeState();
  r.onWelcome({ last_seq: 0 });
  r.onWelcome({ last_seq: 0, recovered: false, replay_count: 0 });
  r.gapStart(); // gap open at 0
  for (let s = 6000; s < 11000; s++) r.onChat(s); // many live messages while the gap fills
  assert.equal(r.accept(1), true, "gap messages are still delivered after pruning");
  assert.equal(r.accept(1), false);
  r.setGapCursor(null);
  for (let s = 11000; s < 16000; s++) r.onChat(s);
  assert.equal(r.onChat(6000).deliver, false, "pruned seqs still count as seen");
  assert.equal(r.onChat(15999).deliver, false);
});
