// The SDK against the real server binary on 127.0.0.1, port 0, over real sockets (no fakes):
// connect, roster, chat with acks, typing, read, data, ping, history, a server restart with chat
// on both sides during the outage (nothing lost, nothing duplicated), takeover (4400, terminal),
// presence (an agent's status set again after a server restart). Media needs a browser:
// tests/integration covers that in Chromium.
//
// Node 22 has a global WebSocket; Node 20 has it behind --experimental-websocket, so on Node 20
// this file re-runs itself with that flag (20.10 and later). Node 18 (Debian 12's) has none. Every Node also runs
// the same test over node-websocket.mjs (RFC 6455 on node:http), so the real server is exercised
// on Debian 12 too. Without a built .build/debug/calling-server: skipped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { CallingClient, PresenceClient } from "../../sdk/js/calling-client.js";
import { NodeWebSocket } from "./node-websocket.mjs";

const BINARY = fileURLToPath(new URL("../../.build/debug/calling-server", import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const haveBinary = existsSync(BINARY);
const haveWebSocket = typeof globalThis.WebSocket === "function";
const canEnable = !haveWebSocket && process.allowedNodeEnvironmentFlags.has("--experimental-websocket");

if (canEnable && !process.env.CALLING_JS_LIVE_CHILD) {
  test("real server (re-run with --experimental-websocket)", { skip: !haveBinary && `${BINARY} is missing: run swift build` }, () => {
    const env = { ...process.env, CALLING_JS_LIVE_CHILD: "1" };
    delete env.NODE_TEST_CONTEXT; // set by the runner for its children; the nested run reports on its own
    const run = spawnSync(process.execPath, ["--experimental-websocket", "--no-warnings", "--test", SELF], {
      env,
      encoding: "utf8",
      timeout: 120000,
    });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
  });
} else {
  const skip = !haveWebSocket ? "this Node has no WebSocket (the test below runs over node-websocket.mjs)" : !haveBinary ? `${BINARY} is missing: run swift build` : false;
  test("real server: chat, typing, read, data, history, restart resume, takeover, presence", { skip, timeout: 90000 }, () => liveTest());
}

if (!process.env.CALLING_JS_LIVE_CHILD) {
  const skip = !haveBinary && `${BINARY} is missing: run swift build`;
  test("real server over node-websocket.mjs: the same", { skip, timeout: 90000 }, () => liveTest(NodeWebSocket));
}

function serverEnv(secret) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("CALLING_")) env[k] = v;
  env.CALLING_JWT_SECRET = secret;
  return env;
}

function startServer(dataDir, env, port = 0) {
  const proc = spawn(BINARY, ["serve", "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDir], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  proc.stderr.on("data", (d) => {
    err += d;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner in 10 s: ${err}`)), 10000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/calling-server listening on http:\/\/[^\s:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]), stderr: () => err });
      }
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
}

function stopServer(server) {
  return new Promise((resolve) => {
    if (server.proc.exitCode !== null) return resolve();
    server.proc.once("exit", () => resolve());
    server.proc.kill("SIGTERM");
  });
}

async function until(what, predicate, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** `WebSocket`: the constructor every client of the run is given; undefined: Node's own. */
async function liveTest(WebSocket) {
  const dir = mkdtempSync(join(tmpdir(), "calling-js-live-"));
  const dataDir = join(dir, "data");
  const env = serverEnv(randomBytes(32).toString("base64"));
  const token = (...args) => execFileSync(BINARY, ["token", "--data-dir", dataDir, ...args], { env, encoding: "utf8" }).trim();
  let server = await startServer(dataDir, env);
  const clients = [];
  try {
    const url = `ws://127.0.0.1:${server.port}/v1/ws`;
    const backoff = { initialMs: 200, maxMs: 1000, jitter: 0 };
    const alice = new CallingClient({ WebSocket, url, token: token("--room", "r1", "--peer", "alice", "--name", "Alice"), backoff });
    let refreshed = 0;
    const bob = new CallingClient({ WebSocket,
      url,
      token: token("--room", "r1", "--peer", "bob"),
      backoff,
      refreshToken: () => {
        refreshed += 1;
        return token("--room", "r1", "--peer", "bob");
      },
    });
    clients.push(alice, bob);
    const got = { alice: [], bob: [] };
    const typing = [];
    const reads = [];
    const data = [];
    const joined = [];
    alice.on("chat", (m) => got.alice.push(m));
    bob.on("chat", (m) => got.bob.push(m));
    alice.on("typing", (t) => typing.push(t));
    alice.on("read", (r) => reads.push(r));
    bob.on("data", (d) => data.push(d));
    alice.on("peer-joined", (p) => joined.push(p.peer_id));

    const w = await alice.connect();
    assert.equal(w.peer_id, "alice");
    assert.equal(w.room_id, "r1");
    assert.equal(w.name, "Alice");
    await bob.connect();
    assert.deepEqual(bob.peers.map((p) => p.peer_id), ["alice"]);
    await until("peer-joined", () => joined.includes("bob"));

    const ack = await alice.sendChat("hello", { meta: { k: 1 } });
    assert.ok(ack.seq >= 1);
    await until("bob's chat", () => got.bob.length === 1);
    assert.deepEqual(got.bob[0], { seq: ack.seq, from: "alice", client_id: ack.client_id, text: "hello", meta: { k: 1 }, ts: ack.ts, reply_to: null, deleted: false });
    // A retry with the same client_id is answered with the original ack and stored once.
    assert.deepEqual(await alice.sendChat("hello again?", { clientId: ack.client_id }), ack);
    await assert.rejects(alice.sendChat("   "), (e) => e.code === 440);

    bob.setTyping(true);
    await until("typing on", () => typing.some((t) => t.from === "bob" && t.typing));
    bob.markRead(ack.seq);
    await until("read", () => reads.some((r) => r.from === "bob" && r.seq === ack.seq));
    alice.sendData({ kind: "custom", n: 1 }, "bob");
    await until("data", () => data.length === 1);
    assert.deepEqual(data[0], { from: "alice", payload: { kind: "custom", n: 1 } });
    assert.deepEqual(await alice.ping({ n: 7 }), { n: 7 });
    const page = await bob.fetchMessages({ sinceSeq: 0 });
    assert.deepEqual(page.messages.map((m) => m.text), ["hello"]);
    const ice = await bob.fetchIceServers();
    assert.ok(Array.isArray(ice));

    // Restart the server; both sides write while it is down.
    const port = server.port;
    const closes = [];
    alice.on("disconnected", (d) => closes.push(d));
    await stopServer(server);
    await until("alice reconnecting", () => alice.state === "reconnecting");
    assert.equal(closes[0].code, 1001);
    assert.equal(closes[0].willReconnect, true);
    const fromAlice = alice.sendChat("written while the server was down");
    const fromBob = bob.sendChat("bob too");
    server = await startServer(dataDir, env, port);
    const [a2, b2] = await Promise.all([fromAlice, fromBob]);
    await until("both resumed", () => alice.state === "connected" && bob.state === "connected");
    await until("cross delivery", () => got.bob.some((m) => m.seq === a2.seq) && got.alice.some((m) => m.seq === b2.seq));
    assert.ok(refreshed >= 1, "bob's refreshToken was used");
    assert.deepEqual(got.bob.map((m) => m.seq), [ack.seq, a2.seq].sort((x, y) => x - y));
    assert.deepEqual(got.alice.map((m) => m.seq), [b2.seq]);
    assert.equal(alice.lastSeq, Math.max(a2.seq, b2.seq));
    const history = await alice.fetchMessages();
    assert.equal(history.messages.length, 3, "stored once each");

    // Takeover: the same peer id joins elsewhere; the old connection is closed 4400 and stays closed.
    const alice2 = new CallingClient({ WebSocket, url, token: token("--room", "r1", "--peer", "alice"), backoff });
    clients.push(alice2);
    const aliceErrors = [];
    alice.on("error", (e) => aliceErrors.push(e));
    await alice2.connect();
    await until("alice replaced", () => alice.state === "closed");
    assert.equal(aliceErrors.at(-1).closeCode, 4400);
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(alice.state, "closed", "no reconnect after 4400");

    // A token that does not verify: history refused with the problem code; the upgrade refusal
    // (invisible to a WebSocket) is explained the same way.
    const good = token("--room", "r1", "--peer", "eve");
    const forged = new CallingClient({ WebSocket, url, token: `${good.slice(0, -4)}AAAA` });
    await assert.rejects(forged.fetchMessages(), (e) => e.code === "token_bad_signature" && e.status === 401 && !e.retryable);
    await assert.rejects(forged.connect(), (e) => e.code === "token_bad_signature" && e.status === 401);

    // Presence: an agent sees itself in the snapshot; a dashboard sees its status change.
    const purl = `ws://127.0.0.1:${server.port}/v1/presence`;
    const agent = new PresenceClient({ WebSocket, url: purl, token: token("--room", "x", "--peer", "ann", "--role", "agent", "--scope", "presence"), queues: ["sales"], backoff });
    const dash = new PresenceClient({ WebSocket, url: purl, token: token("--room", "x", "--peer", "dash", "--role", "dashboard", "--scope", "presence"), backoff });
    clients.push(agent, dash);
    const snap = await agent.connect();
    assert.equal(snap.peer_id, "ann");
    assert.deepEqual(agent.agents.get("ann").queues, ["sales"]);
    await dash.connect();
    agent.setStatus("away", { note: "coffee" });
    await until("dashboard status", () => dash.agents.get("ann") && dash.agents.get("ann").status === "away");
    assert.equal(dash.agents.get("ann").note, "coffee");
    // A restarted server has forgotten ann's status (it would list her available): her client
    // sets it again after the reconnect, and the dashboard sees it.
    await stopServer(server);
    await until("agent reconnecting", () => agent.state === "reconnecting" && dash.state === "reconnecting");
    server = await startServer(dataDir, env, port);
    await until("agent and dashboard back", () => agent.state === "connected" && dash.state === "connected");
    await until("status restored", () => dash.agents.get("ann") && dash.agents.get("ann").status === "away");
    assert.equal(dash.agents.get("ann").note, "coffee");
    // A refused upgrade (wrong scope) is explained without an HTTP status from the socket.
    const bad = new PresenceClient({ WebSocket, url: purl, token: token("--room", "x", "--peer", "z", "--role", "agent") });
    await assert.rejects(bad.connect(), (e) => e.code === "token_wrong_scope" && e.retryable === false);
    const expired = new CallingClient({ WebSocket, url, token: token("--room", "r1", "--peer", "old", "--ttl", "1") });
    await new Promise((r) => setTimeout(r, 2000));
    // Within jwt_leeway_seconds the token still works; the probe agrees with the server either way.
    await expired.connect().then(() => expired.disconnect(), (e) => assert.equal(e.code, "token_expired"));
  } finally {
    for (const c of clients) c.disconnect();
    await stopServer(server);
    rmSync(dir, { recursive: true, force: true });
  }
}
