// calling-client.d.ts must be valid TypeScript that a strict app compiles against: typechecks a
// small usage file with `tsc --strict` when a TypeScript compiler is on PATH (Debian package
// node-typescript); skipped otherwise. tests/js/dts.test.mjs holds the names against the module.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const probe = spawnSync("tsc", ["--version"], { encoding: "utf8" });
const skip = probe.status === 0 ? false : "no tsc on PATH (apt-get install node-typescript)";

const USAGE = `
import { CallingClient, PresenceClient, WebCallClient, CallingError, _backoffDelay, _ResumeState } from "./calling-client";

const client = new CallingClient({ url: "wss://calls.example.org/v1/ws", token: "t", backoff: { initialMs: 500, jitter: 0 },
  refreshToken: async () => "fresh", iceServers: [{ urls: "stun:stun.example.org" }] });
client.on("chat", (m) => { const seq: number = m.seq; const text: string = m.text; void seq; void text; });
client.on("incoming", (call) => { call.accept(null).then((pc) => pc.close()); call.reject(); });
client.on("disconnected", ({ code, willReconnect, error }) => { const c: number = code; const w: boolean = willReconnect; const e: string | number | undefined = error?.code; void c; void w; void e; });
client.on("hangup", ({ peerId, reason }) => { const r: "local" | "remote" | "rejected" | "peer-left" | "failed" | "closed" | "replaced" | "cancelled" | "disconnected" | "disconnect" = reason; void peerId; void r; });
client.on("stats", (s) => { const rtt: number | null = s.rtt_ms; void rtt; });
client.on("peer-reconnecting", ({ peer_id }) => { const id: string = peer_id; void id; });
client.on("peer-resumed", ({ peer_id }) => { const id: string = peer_id; void id; });
client.on("ice-restart", ({ peerId, attempt }) => { const n: number = attempt; void peerId; void n; });
const resilient = new CallingClient({ url: "wss://x/v1/ws", token: "t", iceRestartWindowMs: 20000, iceDisconnectedDebounceMs: 1000,
  iceRestartRetryMs: 4000, heldRelayLimit: 50, window: null, network: null });
void resilient;
const off: () => void = client.on("typing", ({ from, typing }) => { void from; void typing; });
off();
// @ts-expect-error: not an event
client.on("no-such-event", () => {});

async function flow(): Promise<unknown[]> {
  const welcome = await client.connect();
  const ack = await client.sendChat("hi", { meta: { a: 1 }, clientId: "c1" });
  const page = await client.fetchMessages({ sinceSeq: ack.seq, limit: 10 });
  const pc: RTCPeerConnection = await client.call("bob", new MediaStream());
  client.hangup("bob", false);
  client.setTyping(true);
  client.markRead(page.last_seq);
  client.sendData({ kind: "x" }, "bob");
  const pong: unknown = await client.ping({ n: 1 });
  const next = await client.once("peer-joined");
  const presence = new PresenceClient({ url: "wss://calls.example.org/v1/presence", token: "t", queues: ["sales"] });
  const snapshot = await presence.connect();
  presence.setStatus("away", { note: null });
  presence.request({ queue: "sales", metadata: { topic: "billing" } });
  const status: string | undefined = presence.agents.get("ann")?.status;
  const web = new WebCallClient({ baseUrl: "https://calls.example.org/webrtc-proxy/call_1", accessToken: "t" });
  const sessionId: string = await web.start(new MediaStream());
  const rtt: number = await web.ping();
  web.mute(true);
  web.sendDtmf("12#");
  await web.renegotiate();
  await web.hangup();
  const error = new CallingError("x", { code: "token_expired", status: 401 });
  const delay: number = _backoffDelay(2, { maxMs: 10_000 });
  const resume = new _ResumeState();
  const from: number | null = resume.resumeFrom();
  return [welcome.peers, pc, pong, next.peer_id, snapshot.agents, status, sessionId, rtt, error.retryable, delay, from];
}
void flow;
`;

test("calling-client.d.ts typechecks under tsc --strict with a usage file", { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), "calling-dts-"));
  try {
    copyFileSync(fileURLToPath(new URL("../../sdk/js/calling-client.d.ts", import.meta.url)), join(dir, "calling-client.d.ts"));
    writeFileSync(join(dir, "use.ts"), USAGE);
    const run = spawnSync("tsc", ["--strict", "--noEmit", "--target", "es2020", "--lib", "es2020,dom", "--moduleResolution", "node",
      join(dir, "use.ts"), join(dir, "calling-client.d.ts")], { encoding: "utf8" });
    assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
