// A WebSocket client (RFC 6455) on node:http, with the part of the WHATWG interface the SDK uses:
// `new WebSocket(url)`, onopen / onmessage / onerror / onclose, send(text), close(code, reason)
// and readyState. Debian 12's Node 18 has no WebSocket of its own, so live-server.test.mjs runs
// the SDK over this one there, and over this one as well as Node's where Node has one: real
// sockets to the real server either way. ws:// only; the tests talk to 127.0.0.1.
import { request } from "node:http";
import { createHash, randomBytes } from "node:crypto";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

export class NodeWebSocket {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSING = 2;
  static CLOSED = 3;

  constructor(url) {
    const target = new URL(url);
    if (target.protocol !== "ws:") throw new SyntaxError(`only ws:// URLs: ${url}`);
    this.url = url;
    this.readyState = NodeWebSocket.CONNECTING;
    this.onopen = this.onmessage = this.onerror = this.onclose = null;
    this._socket = null;
    this._buffer = Buffer.alloc(0);
    this._fragments = [];
    this._text = true;
    this._failed = false;
    this._closeSent = false;
    this._closeFrame = null;
    const key = randomBytes(16).toString("base64");
    const req = (this._request = request({
      host: target.hostname.replace(/^\[|\]$/g, ""),
      port: target.port || 80,
      path: target.pathname + target.search,
      headers: { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13" },
    }));
    req.on("upgrade", (res, socket, head) => {
      const accept = createHash("sha1").update(key + GUID).digest("base64");
      // Closed while connecting: the upgrade that comes anyway is dropped, as a browser aborts it.
      if (this.readyState !== NodeWebSocket.CONNECTING) return socket.destroy();
      if (res.headers["sec-websocket-accept"] !== accept) {
        socket.destroy();
        return this._fail();
      }
      this._socket = socket;
      socket.setNoDelay(true);
      socket.on("data", (chunk) => this._receive(chunk));
      socket.on("close", () => this._closed());
      socket.on("error", () => {}); // "close" follows
      this.readyState = NodeWebSocket.OPEN;
      this.onopen?.({ type: "open" });
      if (head.length) this._receive(head);
    });
    // Not upgraded (401, 503, …) or not reachable: as a browser does, error then close 1006.
    req.on("response", (res) => {
      res.resume();
      this._fail();
    });
    req.on("error", () => this._fail());
    req.end();
  }

  send(text) {
    if (this.readyState !== NodeWebSocket.OPEN) throw new Error("WebSocket is not open");
    this._write(0x1, Buffer.from(String(text), "utf8"));
  }

  close(code = 1000, reason = "") {
    if (this.readyState >= NodeWebSocket.CLOSING) return;
    if (this.readyState === NodeWebSocket.CONNECTING) return this._fail();
    this.readyState = NodeWebSocket.CLOSING;
    this._sendClose(code, reason);
    this._dropLater();
  }

  // A peer that never finishes the closing handshake does not keep the socket: 2 s, then it goes.
  _dropLater() {
    setTimeout(() => this._socket?.destroy(), 2000).unref();
  }

  // Events are queued, never fired inside the call that caused them, as in a browser.
  _fail() {
    if (this.readyState === NodeWebSocket.CLOSED) return;
    this.readyState = NodeWebSocket.CLOSED;
    this._request.destroy();
    this._socket?.destroy();
    setImmediate(() => {
      this.onerror?.({ type: "error" });
      this.onclose?.({ type: "close", code: 1006, reason: "", wasClean: false });
    });
  }

  _sendClose(code, reason) {
    if (this._closeSent) return;
    this._closeSent = true;
    const payload = Buffer.concat([Buffer.from([code >> 8, code & 0xff]), Buffer.from(reason, "utf8")]);
    this._write(0x8, payload);
  }

  _write(opcode, payload) {
    const mask = randomBytes(4);
    const length = payload.length;
    const head = length < 126 ? Buffer.from([0x80 | opcode, 0x80 | length])
      : length < 65536 ? Buffer.from([0x80 | opcode, 0x80 | 126, length >> 8, length & 0xff])
        : Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 127]), bigEndian64(length)]);
    const masked = Buffer.allocUnsafe(length);
    for (let i = 0; i < length; i++) masked[i] = payload[i] ^ mask[i & 3];
    this._socket.write(Buffer.concat([head, mask, masked]));
  }

  _receive(chunk) {
    if (this._closeFrame || this._failed) return; // nothing counts after a close frame or a failure
    this._buffer = this._buffer.length ? Buffer.concat([this._buffer, chunk]) : chunk;
    for (;;) {
      const b = this._buffer;
      if (b.length < 2) return;
      if (b[1] & 0x80 || b[0] & 0x70) return this._protocolError();
      let length = b[1] & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (b.length < 4) return;
        length = b.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (b.length < 10) return;
        length = Number(b.readBigUInt64BE(2));
        offset = 10;
      }
      if (b.length < offset + length) return;
      const payload = b.subarray(offset, offset + length);
      this._buffer = b.subarray(offset + length);
      this._frame(b[0] & 0x80, b[0] & 0x0f, payload);
      if (this._closeFrame || this._failed) return;
    }
  }

  _frame(fin, opcode, payload) {
    if (opcode >= 0x8) {
      if (!fin || payload.length > 125 || opcode > 0xa) return this._protocolError();
      if (opcode === 0x9) return this._write(0xa, Buffer.from(payload)); // ping → pong
      if (opcode === 0xa) return;
      const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
      this._closeFrame = { code, reason: payload.subarray(2).toString("utf8") };
      this.readyState = NodeWebSocket.CLOSING;
      this._sendClose(code === 1005 ? 1000 : code, "");
      this._socket.end();
      this._dropLater();
      return;
    }
    // A continuation needs a message to continue, and a new message needs the last one finished.
    const continuing = this._fragments.length > 0;
    if (opcode > 0x2 || (opcode === 0x0) !== continuing) return this._protocolError();
    if (opcode !== 0x0) this._text = opcode === 0x1;
    this._fragments.push(Buffer.from(payload));
    if (!fin) return;
    const whole = Buffer.concat(this._fragments);
    this._fragments = [];
    // Binary messages arrive as bytes, not text, as a browser's ArrayBuffer would.
    this.onmessage?.({ type: "message", data: this._text ? whole.toString("utf8") : whole });
  }

  // The connection is failed, as a browser fails it: close 1002 sent, 1006 reported.
  _protocolError() {
    this._failed = true;
    this._sendClose(1002, "");
    this._socket.destroy();
  }

  _closed() {
    if (this.readyState === NodeWebSocket.CLOSED) return;
    this.readyState = NodeWebSocket.CLOSED;
    const frame = this._closeFrame;
    this.onclose?.({ type: "close", code: frame ? frame.code : 1006, reason: frame ? frame.reason : "", wasClean: Boolean(frame) });
  }
}

function bigEndian64(n) {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}
