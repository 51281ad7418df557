// Chat operations (issue 43) end to end: the browser SDK over node-websocket.mjs against the real
// server binary on 127.0.0.1 (port 0, a fresh data dir, tokens from `calling-server token`):
// a reply, an edit, reactions added and removed, a delete, the server's refusals (443, 444, 445),
// operations replayed once each on a resume, history backward with the edit log, and the inbox
// with a user token. SERVER_BIN_UNDER_TEST picks another binary (as tests/integration/conftest.py
// does); without a built .build/debug/calling-server: skipped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { CallingClient } from "../../sdk/js/calling-client.js";
import { NodeWebSocket } from "./node-websocket.mjs";

const BINARY = process.env.SERVER_BIN_UNDER_TEST || fileURLToPath(new URL("../../.build/debug/calling-server", import.meta.url));
const skip = !existsSync(BINARY) && `${BINARY} is missing: run swift build`;

function startServer(dataDir, env) {
  const proc = spawn(BINARY, ["serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", dataDir], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  proc.stderr.on("data", (d) => { err += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner in 10 s: ${err}`)), 10000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/calling-server listening on http:\/\/[^\s:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]) });
      }
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
}

async function until(what, predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("real server: reply, edit, reactions, delete, refusals, resume replay, history backward, inbox", { skip, timeout: 30000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "calling-js-chat-ops-"));
  const dataDir = join(dir, "data");
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("CALLING_")) env[k] = v;
  env.CALLING_JWT_SECRET = randomBytes(32).toString("base64");
  const token = (...args) => execFileSync(BINARY, ["token", "--data-dir", dataDir, ...args], { env, encoding: "utf8" }).trim();
  const server = await startServer(dataDir, env);
  const clients = [];
  try {
    const url = `ws://127.0.0.1:${server.port}/v1/ws`;
    const make = (...args) => {
      const client = new CallingClient({ WebSocket: NodeWebSocket, url, token: token(...args), backoff: { initialMs: 200, maxMs: 1000, jitter: 0 } });
      clients.push(client);
      return client;
    };
    const alice = make("--room", "r1", "--peer", "alice");
    const bob = make("--room", "r1", "--peer", "bob");
    const at = { alice: [], bob: [] };
    for (const [name, client] of [["alice", alice], ["bob", bob]]) {
      for (const event of ["chat", "chat-edited", "chat-deleted", "chat-reaction"]) client.on(event, (e) => at[name].push([event, e]));
    }
    await alice.connect();
    await bob.connect();

    const question = await alice.sendChat("lunch at 12?");
    const answer = await bob.sendChat("yes", { replyTo: question.seq });
    await until("the reply at alice", () => at.alice.some(([n, e]) => n === "chat" && e.seq === answer.seq));
    assert.equal(at.alice.find(([, e]) => e.seq === answer.seq)[1].reply_to, question.seq);

    const edit = await bob.editChat(answer.seq, "yes, at 12:30");
    assert.ok(edit.seq > answer.seq, "an edit has a seq of its own");
    const thumbs = await alice.react(answer.seq, "👍");
    assert.ok((await alice.react(answer.seq, "👍")).seq > thumbs.seq, "adding it again is acked with its own seq");
    await alice.unreact(answer.seq, "👍");
    await alice.react(question.seq, "🎉");
    await until("the reactions at bob", () => at.bob.filter(([n]) => n === "chat-reaction").length === 4);
    const edited = at.alice.find(([n]) => n === "chat-edited")[1];
    assert.deepEqual([edited.from, edited.target, edited.text, edited.seq], ["bob", answer.seq, "yes, at 12:30", edit.seq]);
    assert.deepEqual(at.bob.filter(([n]) => n === "chat-reaction").map(([, r]) => [r.target, r.key, r.removed]),
      [[answer.seq, "👍", false], [answer.seq, "👍", false], [answer.seq, "👍", true], [question.seq, "🎉", false]]);

    // Refused for good: each rejects with its code at once.
    await assert.rejects(bob.deleteChat(question.seq), (e) => e.code === 444 && !e.retryable);
    await assert.rejects(alice.editChat(answer.seq, "not mine"), (e) => e.code === 444);
    await assert.rejects(alice.editChat(9999, "nothing there"), (e) => e.code === 443);
    await assert.rejects(alice.react(question.seq, "two words"), (e) => e.code === 445);
    await assert.rejects(alice.sendChat("re nothing", { replyTo: 9999 }), (e) => e.code === 443);

    const deleted = await bob.deleteChat(answer.seq);
    await until("the delete at alice", () => at.alice.some(([n]) => n === "chat-deleted"));
    assert.deepEqual(at.alice.find(([n]) => n === "chat-deleted")[1].target, answer.seq);
    assert.ok((await bob.deleteChat(answer.seq)).seq > deleted.seq, "deleting again is acked");
    await assert.rejects(alice.react(answer.seq, "👍"), (e) => e.code === 444);

    // bob away: alice's edit and reaction are replayed to him once each when he resumes.
    bob.disconnect();
    await alice.editChat(question.seq, "lunch at 12:30?");
    await alice.react(question.seq, "👍");
    const before = at.bob.length;
    const welcome = await bob.connect();
    assert.equal(welcome.resumed, true);
    await until("the replay at bob", () => at.bob.length === before + 2);
    assert.deepEqual(at.bob.slice(before).map(([n, e]) => [n, e.target]), [["chat-edited", question.seq], ["chat-reaction", question.seq]]);
    assert.equal(bob.lastSeq, alice.lastSeq);

    // History backward with the edit log: each message as it is now.
    const page = await bob.fetchMessages({ beforeSeq: bob.lastSeq + 1, limit: 10, includeEdits: true });
    assert.deepEqual(page.messages.map((m) => m.seq), [answer.seq, question.seq], "newest first, messages only");
    assert.equal(page.has_more, false);
    const [tomb, first] = page.messages;
    assert.deepEqual([tomb.deleted, tomb.text, tomb.meta, tomb.reply_to, tomb.reactions], [true, "", null, question.seq, []]);
    assert.deepEqual([first.text, first.deleted, first.edits.map((e) => e.text)], ["lunch at 12:30?", false, ["lunch at 12:30?"]]);
    assert.equal(typeof first.edited_ts, "number");
    assert.deepEqual(first.reactions, [{ key: "🎉", count: 1, peers: ["alice"] }, { key: "👍", count: 1, peers: ["alice"] }]);
    const forward = await bob.fetchMessages({ sinceSeq: 0 });
    assert.deepEqual(forward.messages.map((m) => m.seq), [question.seq, answer.seq]);

    // The inbox with a user token (no room): r1, with its newest message that is not deleted.
    const user = make("--scope", "user", "--peer", "bob");
    const inbox = await user.inbox({ limit: 10 });
    assert.deepEqual(inbox.rooms.map((r) => r.room_id), ["r1"]);
    assert.equal(inbox.rooms[0].last_message.seq, question.seq);
    assert.equal(inbox.rooms[0].last_message.text, "lunch at 12:30?");
    assert.equal(inbox.rooms[0].last_seq, alice.lastSeq);
    assert.equal(inbox.has_more, false);
    await assert.rejects(bob.inbox(), (e) => e.status === 401 || e.status === 403, "a room token is not a user token");
  } finally {
    for (const client of clients) client.disconnect();
    await new Promise((resolve) => {
      if (server.proc.exitCode !== null) return resolve();
      server.proc.once("exit", resolve);
      server.proc.kill("SIGTERM");
    });
    rmSync(dir, { recursive: true, force: true });
  }
});
