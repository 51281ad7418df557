// The browser SDK's frames against the shared wire vectors (tests/vectors/client-frames.json),
// which the Kotlin SDK's WireVectorsTest checks too: the same calls give the same bytes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { CallingClient, RpcError, _RpcCalls, _buildFrame, _candidatePayload, _clampStats } from "../../sdk/js/calling-client.js";
import { FakeTimers, connectWith, flush, makeFetch, makePeerConnectionClass, makeToken, makeWebSocketClass } from "./fakes.mjs";

const vectors = JSON.parse(readFileSync(new URL("../vectors/client-frames.json", import.meta.url), "utf8"));

async function connected() {
  const clock = new FakeTimers();
  const WS = makeWebSocketClass();
  const client = new CallingClient({
    url: "ws://127.0.0.1:9/v1/ws", token: makeToken({ sub: "me", room_id: "r", scope: "room", exp: 4102444800 }),
    WebSocket: WS, fetch: makeFetch(() => null), RTCPeerConnection: makePeerConnectionClass(), timers: clock.api(),
    random: () => 0.5, backoff: { jitter: 0 },
  });
  const ws = await connectWith({ client, WS }, {
    type: "welcome",
    payload: { peer_id: "me", room_id: "r", call_id: null, role: "peer", name: null, peers: [{ peer_id: "bob", role: "peer", name: null }],
               last_seq: 0, read_seq: 0, unread: 0 },
  });
  ws.sent.length = 0;
  return { client, ws };
}

/** What the browser SDK puts on the wire for one vector's call. */
async function frameOf({ op, args }) {
  switch (op) {
    case "chat": case "data": case "typing": case "read": case "chat-edit": case "chat-delete": case "chat-react": {
      const { client, ws } = await connected();
      if (op === "chat") {
        client.sendChat(args.text, { clientId: args.client_id, ...(args.meta ? { meta: args.meta } : {}), ...(args.reply_to ? { replyTo: args.reply_to } : {}) }).catch(() => {});
      }
      if (op === "chat-edit") client.editChat(args.target, args.text, { clientId: args.client_id, ...(args.meta ? { meta: args.meta } : {}) }).catch(() => {});
      if (op === "chat-delete") client.deleteChat(args.target, { clientId: args.client_id }).catch(() => {});
      if (op === "chat-react") (args.remove ? client.unreact : client.react).call(client, args.target, args.key, { clientId: args.client_id }).catch(() => {});
      if (op === "data") client.sendData(args.payload, args.to);
      if (op === "typing") client.setTyping(args.typing);
      if (op === "read") client.markRead(args.seq);
      await flush();
      assert.equal(ws.sent.length, 1, `one frame for ${op}: ${ws.sent}`);
      client.close?.();
      return ws.sent[0];
    }
    case "signal": return _buildFrame(args.type, args.payload, args.to);
    case "candidate": return _buildFrame("candidate", _candidatePayload(args.candidate === null ? null : args), args.to);
    case "stats": return _buildFrame("stats", _clampStats(args));
    case "rpc-request": case "rpc-ack": case "rpc-response": {
      // The client's own RPC calls (`CallingClient._rpc` is one), with the vector's request id.
      const sent = [];
      const rpc = new _RpcCalls({ timers: new FakeTimers().api(), send: (type, payload, to) => sent.push(_buildFrame(type, payload, to)),
        newId: () => args.id });
      if (op === "rpc-request") {
        rpc.perform(args.to, args.method, args.payload, args.timeout_ms, true).catch(() => {});
        return sent[0];
      }
      rpc.register("m", () => {
        if (args.error) throw new RpcError(args.error.code, args.error.message, args.error.data);
        return args.result;
      });
      rpc.receive("rpc-request", args.from, { id: args.id, method: "m" });
      await flush();
      return op === "rpc-ack" ? sent[0] : sent[1];
    }
    default: throw new Error(`unknown op ${op}`);
  }
}

for (const vector of vectors.cases) {
  test(`wire vector: ${vector.name}`, async () => {
    assert.equal(await frameOf(vector), vector.frame);
  });
}
