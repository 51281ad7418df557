// Hand-written fakes of the browser objects calling-client.js uses (WebSocket, fetch,
// RTCPeerConnection, RTCDataChannel) and a manual clock, for the pure unit tests in this folder.
// The SDK takes all of them from its constructor options. End-to-end behaviour in a real browser
// against the real server is tested in tests/integration (Chromium).

/** A manual clock: timers run only inside advance(), in due order. */
export class FakeTimers {
  constructor() {
    this.time = 0;
    this.seq = 0;
    this.timers = new Map();
  }

  setTimeout(fn, ms) {
    const id = ++this.seq;
    this.timers.set(id, { fn, at: this.time + Math.max(0, ms || 0), every: null });
    return id;
  }

  clearTimeout(id) {
    this.timers.delete(id);
  }

  setInterval(fn, ms) {
    const id = ++this.seq;
    this.timers.set(id, { fn, at: this.time + ms, every: ms });
    return id;
  }

  clearInterval(id) {
    this.timers.delete(id);
  }

  now() {
    return this.time;
  }

  /** Pending timers (intervals included). */
  get pending() {
    return this.timers.size;
  }

  /** Moves the clock forward, running every timer that falls due, with microtasks in between. */
  async advance(ms) {
    const end = this.time + ms;
    for (;;) {
      await flush();
      let nextId = null;
      let next = null;
      for (const [id, t] of this.timers) {
        if (t.at <= end && (next === null || t.at < next.at || (t.at === next.at && id < nextId))) {
          next = t;
          nextId = id;
        }
      }
      if (!next) break;
      this.time = next.at;
      if (next.every !== null) next.at += next.every;
      else this.timers.delete(nextId);
      next.fn();
    }
    this.time = end;
    await flush();
  }

  /** As used by the SDK's `timers` option. */
  api() {
    return {
      setTimeout: (fn, ms) => this.setTimeout(fn, ms),
      clearTimeout: (id) => this.clearTimeout(id),
      setInterval: (fn, ms) => this.setInterval(fn, ms),
      clearInterval: (id) => this.clearInterval(id),
    };
  }
}

/** Lets pending promise callbacks run. */
export async function flush(rounds = 20) {
  for (let i = 0; i < rounds; i++) await Promise.resolve();
  await new Promise((resolve) => setImmediate(resolve));
}

/** A WebSocket the test drives: open(), receive(frame), serverClose(code), drop(). */
export function makeWebSocketClass() {
  class FakeWebSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.closedByClient = null;
      this.onopen = null;
      this.onmessage = null;
      this.onclose = null;
      this.onerror = null;
      FakeWebSocket.instances.push(this);
    }

    get query() {
      return new URL(this.url).searchParams;
    }

    /** Frames the client sent, parsed. */
    get frames() {
      return this.sent.map((text) => JSON.parse(text));
    }

    framesOf(type) {
      return this.frames.filter((f) => f.type === type);
    }

    send(text) {
      if (this.readyState !== 1) throw new Error("send on a socket that is not open");
      this.sent.push(text);
    }

    close(code, reason) {
      this.closedByClient = { code, reason };
      this.readyState = 3;
    }

    open() {
      this.readyState = 1;
      if (this.onopen) this.onopen({});
    }

    receive(frame) {
      if (this.onmessage) this.onmessage({ data: typeof frame === "string" ? frame : JSON.stringify(frame) });
    }

    /** The server closed with a close frame. */
    serverClose(code, reason = "") {
      this.readyState = 3;
      if (this.onclose) this.onclose({ code, reason, wasClean: true });
    }

    /** The connection died without a close frame (or the upgrade was refused). */
    drop() {
      this.readyState = 3;
      if (this.onerror) this.onerror({});
      if (this.onclose) this.onclose({ code: 1006, reason: "", wasClean: false });
    }
  }
  FakeWebSocket.instances = [];
  FakeWebSocket.last = () => FakeWebSocket.instances[FakeWebSocket.instances.length - 1];
  return FakeWebSocket;
}

/** A fetch answering from `routes(method, url, init)` → {status, body, headers}; records calls. */
export function makeFetch(routes) {
  const calls = [];
  const fetchFn = async (url, init = {}) => {
    const call = { url: String(url), method: init.method || "GET", headers: init.headers || {}, body: init.body };
    calls.push(call);
    const answer = (await routes(call)) || { status: 404, body: { code: "not_found" } };
    if (answer.networkError) throw new TypeError("Failed to fetch");
    const headers = new Map(Object.entries(answer.headers || {}).map(([k, v]) => [k.toLowerCase(), String(v)]));
    const text = typeof answer.body === "string" ? answer.body : answer.body === undefined ? "" : JSON.stringify(answer.body);
    if (!headers.has("content-type")) headers.set("content-type", typeof answer.body === "string" ? "text/plain" : "application/json");
    return { status: answer.status, headers: { get: (name) => headers.get(name.toLowerCase()) ?? null }, text: async () => text };
  };
  fetchFn.calls = calls;
  return fetchFn;
}

/** A data channel; `peerSend` plays the remote side. */
export class FakeDataChannel {
  constructor(label) {
    this.label = label;
    this.readyState = "connecting";
    this.sent = [];
    this.onopen = null;
    this.onmessage = null;
  }

  get messages() {
    return this.sent.map((text) => JSON.parse(text));
  }

  send(text) {
    if (this.readyState !== "open") throw new Error("channel not open");
    this.sent.push(text);
  }

  close() {
    this.readyState = "closed";
  }

  open() {
    this.readyState = "open";
    if (this.onopen) this.onopen({});
  }

  peerSend(message) {
    if (this.onmessage) this.onmessage({ data: JSON.stringify(message) });
  }
}

/** An RTCPeerConnection that records every call in `log`, in order. */
export function makePeerConnectionClass() {
  class FakePeerConnection {
    constructor(config) {
      this.config = config;
      this.log = [];
      this.tracks = [];
      this.channels = [];
      this.localDescription = null;
      this.remoteDescription = null;
      this.connectionState = "new";
      this.iceGatheringState = "complete";
      this.signalingState = "stable";
      this.closed = false;
      this.statsReport = new Map();
      this.offerCount = 0;
      FakePeerConnection.instances.push(this);
    }

    addTrack(track, ...streams) {
      this.log.push(["addTrack", track.id, streams.map((s) => s.id)]);
      this.tracks.push({ track, streams });
      return {};
    }

    createDataChannel(label) {
      const channel = new FakeDataChannel(label);
      this.channels.push(channel);
      this.log.push(["createDataChannel", label]);
      return channel;
    }

    async createOffer(options) {
      this.offerCount += 1;
      this.log.push(options && options.iceRestart ? ["createOffer", "iceRestart"] : ["createOffer"]);
      return { type: "offer", sdp: `offer-sdp-${FakePeerConnection.instances.indexOf(this)}-${this.offerCount}` };
    }

    async createAnswer() {
      this.log.push(["createAnswer"]);
      return { type: "answer", sdp: `answer-sdp-${FakePeerConnection.instances.indexOf(this)}` };
    }

    // signalingState follows the offer/answer steps as in a browser (JSEP): a local offer makes
    // it have-local-offer until the answer, a remote offer have-remote-offer until ours.
    async setLocalDescription(description) {
      this.log.push(["setLocalDescription", description.type]);
      this.localDescription = description.type === "rollback" ? null : description;
      this.signalingState = description.type === "offer" ? "have-local-offer" : "stable";
    }

    async setRemoteDescription(description) {
      this.log.push(["setRemoteDescription", description.type, description.sdp]);
      this.remoteDescription = description;
      this.signalingState = description.type === "offer" ? "have-remote-offer" : "stable";
    }

    setConfiguration(config) {
      this.log.push(["setConfiguration", config.iceServers]);
      this.config = config;
    }

    async addIceCandidate(candidate) {
      this.log.push(["addIceCandidate", candidate.candidate]);
    }

    async getStats() {
      return this.statsReport;
    }

    close() {
      this.closed = true;
      this.log.push(["close"]);
    }

    // --- test side ---
    emitCandidate(candidate) {
      if (this.onicecandidate) this.onicecandidate({ candidate });
    }

    setConnectionState(state) {
      this.connectionState = state;
      if (this.onconnectionstatechange) this.onconnectionstatechange({});
    }

    /** ICE and the connection move together, as in Chromium for a one-transport call. */
    setIceState(state) {
      this.iceConnectionState = state;
      if (this.oniceconnectionstatechange) this.oniceconnectionstatechange({});
      this.setConnectionState(state === "completed" ? "connected" : state === "checking" ? "connecting" : state);
    }

    emitTrack(track, streams) {
      if (this.ontrack) this.ontrack({ track, streams });
    }
  }
  FakePeerConnection.instances = [];
  FakePeerConnection.last = () => FakePeerConnection.instances[FakePeerConnection.instances.length - 1];
  return FakePeerConnection;
}

/** `env.client.connect()` on the fake socket it opens: opened, `ready` received; resolves with the socket. */
export async function connectWith(env, ready) {
  const promise = env.client.connect();
  const ws = env.WS.last();
  ws.open();
  ws.receive(ready);
  await promise;
  return ws;
}

/** A JWT with the given claims (unsigned: the client never verifies signatures). */
export function makeToken(claims) {
  const enc = (obj) => Buffer.from(JSON.stringify(obj)).toString("base64url");
  return `${enc({ alg: "HS256", typ: "JWT" })}.${enc(claims)}.c2ln`;
}

/** A fake track and stream. */
export function makeTrack(id, kind = "audio") {
  return { id, kind, enabled: true };
}

export function makeStream(id, tracks) {
  return { id, getTracks: () => tracks.slice() };
}

/** Records every event of `emitter` for the given names, in order. */
export function record(client, names) {
  const events = [];
  for (const name of names) client.on(name, (payload) => events.push([name, payload]));
  events.of = (name) => events.filter(([n]) => n === name).map(([, p]) => p);
  return events;
}
