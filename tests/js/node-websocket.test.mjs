// node-websocket.mjs against a node:http server that speaks the protocol by hand: a browser's
// order of events where the live-server test does not reach (a close while connecting, a
// fragmented message, a peer that breaks the protocol, a refused upgrade).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { NodeWebSocket } from "./node-websocket.mjs";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** A server whose upgrades `onUpgrade(socket, accept)` answers; resolves to its ws:// URL. */
async function server(t, onUpgrade) {
  const http = createServer((req, res) => {
    res.writeHead(401).end();
  });
  const sockets = [];
  http.on("upgrade", (req, socket) => {
    sockets.push(socket);
    socket.on("error", () => {});
    const accept = createHash("sha1").update(req.headers["sec-websocket-key"] + GUID).digest("base64");
    onUpgrade(socket, () => socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`));
  });
  http.listen(0, "127.0.0.1");
  await once(http, "listening");
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    http.close();
  });
  return { url: `ws://127.0.0.1:${http.address().port}/ws`, sockets };
}

function events(ws) {
  const seen = [];
  const closed = new Promise((resolve) => {
    ws.onopen = () => seen.push("open");
    ws.onmessage = (event) => seen.push(`message ${typeof event.data === "string" ? event.data : `bytes ${event.data.length}`}`);
    ws.onerror = () => seen.push("error");
    ws.onclose = (event) => {
      seen.push(`close ${event.code} ${event.wasClean}`);
      resolve();
    };
  });
  return { seen, closed };
}

const frame = (first, payload) => Buffer.concat([Buffer.from([first, payload.length]), Buffer.from(payload)]);

/** The opcodes of the client's frames in `bytes` (short, masked frames: 2 + 4 + length bytes). */
function clientOpcodes(bytes) {
  const opcodes = [];
  for (let at = 0; at + 6 <= bytes.length; at += 6 + (bytes[at + 1] & 0x7f)) opcodes.push(bytes[at] & 0x0f);
  return opcodes;
}

test("a close while connecting ends it as a browser does, and the late upgrade is dropped", async (t) => {
  let answer;
  const { url, sockets } = await server(t, (socket, accept) => (answer = accept));
  const ws = new NodeWebSocket(url);
  const { seen, closed } = events(ws);
  while (sockets.length === 0) await new Promise((r) => setTimeout(r, 5));
  ws.close();
  assert.deepEqual(seen, [], "events are queued, not fired inside close()");
  assert.equal(ws.readyState, NodeWebSocket.CLOSED);
  await closed;
  answer?.();
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(seen, ["error", "close 1006 false"]);
  assert.equal(ws.readyState, NodeWebSocket.CLOSED);
  assert.ok(sockets[0].destroyed || sockets[0].readableEnded, "the server's end of the abandoned upgrade is closed");
});

test("fragments make one message, pings are answered, the server's close is echoed", async (t) => {
  let received = Buffer.alloc(0);
  const { url } = await server(t, (socket, accept) => {
    accept();
    socket.on("data", (chunk) => {
      received = Buffer.concat([received, chunk]);
      if (clientOpcodes(received).includes(0x8)) socket.end(); // the closing handshake is complete
    });
    socket.write(Buffer.concat([frame(0x01, "hel"), frame(0x89, "p"), frame(0x80, "lo"), frame(0x82, "xyz"), frame(0x88, Buffer.from([0x03, 0xe9]))]));
  });
  const ws = new NodeWebSocket(url);
  const { seen, closed } = events(ws);
  await closed;
  assert.deepEqual(seen, ["open", "message hello", "message bytes 3", "close 1001 true"]);
  assert.deepEqual(clientOpcodes(received), [0xa, 0x8], "a pong, then the close echoed");
  assert.deepEqual([...received.subarray(received.length - 2)].map((b, i) => b ^ received[received.length - 6 + i]), [0x03, 0xe9], "with the server's code");
});

test("a peer that breaks the protocol fails the connection: 1006, not clean", async (t) => {
  const { url } = await server(t, (socket, accept) => {
    accept();
    socket.write(Buffer.concat([frame(0x81, "ok"), frame(0x80, "stray continuation"), frame(0x81, "never delivered")]));
  });
  const ws = new NodeWebSocket(url);
  const { seen, closed } = events(ws);
  await closed;
  assert.deepEqual(seen, ["open", "message ok", "close 1006 false"]);
});

test("a refused upgrade, or no server at all, is an error, then close 1006", async (t) => {
  const { url } = await server(t, (socket) => socket.end("HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"));
  const refused = events(new NodeWebSocket(url));
  await refused.closed;
  assert.deepEqual(refused.seen, ["error", "close 1006 false"]);
  // A loopback port nobody listens on (9, discard): the connection is refused at once.
  const nobody = events(new NodeWebSocket("ws://127.0.0.1:9/"));
  await nobody.closed;
  assert.deepEqual(nobody.seen, ["error", "close 1006 false"]);
});
