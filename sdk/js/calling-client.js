// calling-client.js: the browser SDK of calling-server.
//
// One ES2020 module, no build step, no dependency. Wire protocol: docs/protocol.md. Usage, every
// method and event, reconnect semantics: docs/browser.md. Typings: calling-client.d.ts (held
// against this file by tests/js/dts.test.mjs).
//
// The semantics follow the Swift SDK (Sources/CallingClient/SignalingClient.swift, docs/sdk.md):
// chat acks with retries under the same client_id, resume with last_seq after a reconnect
// (dedupe by seq, REST gap fill when the replay was capped), pending chats resent after each
// reconnect, terminal close codes respected, a token refresh before each reconnect attempt.
//
// Browser objects (WebSocket, fetch, RTCPeerConnection, MediaStream) and timers are taken from
// the constructor options when given, so the pure logic runs under Node's test runner with fakes.
// Helpers whose names start with "_" are exported for those tests only; they are not a stable API.

// ---------------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------------

const WS_OPEN = 1;
/** Error codes the server marks temporary (ErrorCode.isTemporary, docs/protocol.md "Error codes"). */
const TEMPORARY_CODES = new Set([404, 429, 480, 500, 503]);
const DTMF_KEYS = "0123456789*#ABCD";
/** Longest client_id the server accepts (max_client_id_bytes default). */
const MAX_CLIENT_ID_BYTES = 128;

const DEFAULT_BACKOFF = Object.freeze({ initialMs: 1000, maxMs: 30000, factor: 2, jitter: 0.2, maxAttempts: Infinity });

/** The backoff settings with the defaults for every field left out or undefined. */
function backoffOptions(given, defaults = DEFAULT_BACKOFF) {
  const out = { ...defaults };
  for (const [key, value] of Object.entries(given || {})) if (value !== undefined) out[key] = value;
  return out;
}

function defaultTimers() {
  return {
    setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
    clearTimeout: (id) => globalThis.clearTimeout(id),
    setInterval: (fn, ms) => globalThis.setInterval(fn, ms),
    clearInterval: (id) => globalThis.clearInterval(id),
  };
}

// ---------------------------------------------------------------------------------------------
// CallingError
// ---------------------------------------------------------------------------------------------

/**
 * Every error the SDK reports (rejected promises and `error` events).
 *
 * - `code`: the server's stable string code (`token_expired`, `no_answering_peer`, …), the numeric
 *   frame error code (422, 440, 503, …; docs/protocol.md "Error codes"), or one the SDK produces
 *   itself, listed in docs/browser.md "Errors" and as `CallingSdkErrorCode` in calling-client.d.ts
 *   (tests/js/error-codes.test.mjs holds all three together).
 * - `status`: the HTTP status when a request (or, as found by a probe, an upgrade) was refused.
 * - `retryable`: whether trying again unchanged can succeed.
 * - `closeCode`: the WebSocket close code for `closed` errors.
 * - `frameType`: the refused frame's type for server `error` frames.
 */
export class CallingError extends Error {
  /**
   * @param {string} message
   * @param {{code: string|number, status?: number, retryable?: boolean, closeCode?: number, frameType?: string, cause?: unknown}} init
   */
  constructor(message, init) {
    super(message);
    this.name = "CallingError";
    this.code = init.code;
    this.status = init.status;
    this.retryable = Boolean(init.retryable);
    this.closeCode = init.closeCode;
    this.frameType = init.frameType;
    if (init.cause !== undefined) this.cause = init.cause;
  }
}

function notConnected() {
  return new CallingError("not connected", { code: "not_connected", retryable: true });
}

function invalidState(message) {
  return new CallingError(message, { code: "invalid_state", retryable: false });
}

function invalidArgument(message) {
  return new CallingError(message, { code: "invalid_argument", retryable: false });
}

// ---------------------------------------------------------------------------------------------
// Pure helpers (exported for tests under "_" names)
// ---------------------------------------------------------------------------------------------

/**
 * Internal. A frame `{type, to?, payload?}` as JSON text; `to` and `payload` are omitted when
 * null or undefined (the server treats `null` as absent anyway).
 * @param {string} type
 * @param {unknown} [payload]
 * @param {string} [to]
 * @returns {string}
 */
export function _buildFrame(type, payload, to) {
  const frame = { type };
  if (to !== undefined && to !== null) frame.to = to;
  if (payload !== undefined && payload !== null) frame.payload = payload;
  return JSON.stringify(frame);
}

/**
 * Internal. The `candidate` frame payload `{candidate, sdpMid, sdpMLineIndex}` of an
 * RTCIceCandidate or RTCIceCandidateInit (`usernameFragment` is left out, as in the other SDKs).
 * `null` (end of gathering) becomes `candidate: ""`.
 * @param {RTCIceCandidateInit|null} candidate
 */
export function _candidatePayload(candidate) {
  if (!candidate) return { candidate: "", sdpMid: null, sdpMLineIndex: null };
  return {
    candidate: typeof candidate.candidate === "string" ? candidate.candidate : "",
    sdpMid: typeof candidate.sdpMid === "string" ? candidate.sdpMid : null,
    sdpMLineIndex: Number.isInteger(candidate.sdpMLineIndex) ? candidate.sdpMLineIndex : null,
  };
}

/**
 * Internal. The decoded payload (second segment, base64url JSON) of a JWT, or null. The
 * signature is not checked: the server does that; the client only reads claims it was given.
 * @param {string} token
 * @returns {Record<string, unknown>|null}
 */
export function _decodeJwtPayload(token) {
  if (typeof token !== "string") return null;
  const parts = token.split(".");
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    let b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    while (b64.length % 4 !== 0) b64 += "=";
    const binary = atob(b64);
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const json = JSON.parse(new TextDecoder().decode(bytes));
    return json && typeof json === "object" && !Array.isArray(json) ? json : null;
  } catch {
    return null;
  }
}

/**
 * Internal. The `room_id` claim of a peer JWT, or null.
 * @param {string} token
 * @returns {string|null}
 */
export function _roomIdFromToken(token) {
  const claims = _decodeJwtPayload(token);
  const room = claims && claims.room_id;
  return typeof room === "string" && room.length > 0 ? room : null;
}

/**
 * Internal. The HTTP base of a socket URL: ws→http, wss→https, same host and port, no path.
 * @param {string} url
 * @returns {string}
 */
export function _httpBase(url) {
  const parsed = new URL(url);
  const scheme = parsed.protocol === "wss:" || parsed.protocol === "https:" ? "https:" : "http:";
  return `${scheme}//${parsed.host}`;
}

/**
 * Internal. The socket URL with `token` and the given query parameters (null/undefined ones are
 * left out). http(s) is mapped to ws(s); an empty path becomes `defaultPath`.
 * @param {string} url
 * @param {string} token
 * @param {Record<string, string|number|null|undefined>} [params]
 * @param {string} [defaultPath]
 * @returns {string}
 */
export function _socketUrl(url, token, params = {}, defaultPath = "/v1/ws") {
  const parsed = new URL(url);
  if (parsed.protocol === "http:") parsed.protocol = "ws:";
  if (parsed.protocol === "https:") parsed.protocol = "wss:";
  if (parsed.pathname === "" || parsed.pathname === "/") parsed.pathname = defaultPath;
  parsed.searchParams.set("token", token);
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined) parsed.searchParams.delete(key);
    else parsed.searchParams.set(key, String(value));
  }
  return parsed.toString();
}

/**
 * Internal. The wait before reconnect attempt `attempt` (1-based): `initialMs * factor^(attempt-1)`
 * capped at `maxMs`, spread by ±`jitter` (so many clients dropped by one server restart do not
 * come back in the same millisecond), never above `maxMs`.
 * @param {number} attempt
 * @param {{initialMs?: number, maxMs?: number, factor?: number, jitter?: number}} [options]
 * @param {() => number} [random]
 * @returns {number}
 */
export function _backoffDelay(attempt, options = {}, random = Math.random) {
  const o = backoffOptions(options);
  const n = Math.max(1, Math.floor(attempt));
  const base = Math.min(o.initialMs * Math.pow(o.factor, n - 1), o.maxMs);
  const jitter = Math.min(Math.max(o.jitter, 0), 1);
  const spread = jitter > 0 ? base * (1 - jitter + 2 * jitter * random()) : base;
  return Math.max(0, Math.round(Math.min(spread, o.maxMs)));
}

/**
 * Internal. Whether a close code forbids reconnecting on our own: 4400–4999 (docs/protocol.md
 * "Close codes": 4400 replaced, 4401 token expired, 4410 consultation ended, …).
 * @param {number} code
 */
export function _isTerminalClose(code) {
  return code >= 4400 && code <= 4999;
}

/**
 * Internal. Whether a refused HTTP request (or upgrade) may succeed if simply retried: 408, 429
 * and 5xx. 401/403/400/404/409/410 need the app to change something.
 * @param {number} status
 */
export function _isRetryableStatus(status) {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * Internal. Whether a numeric frame error code is temporary (404, 429, 480, 500, 503).
 * @param {number} code
 */
export function _isTemporaryCode(code) {
  return TEMPORARY_CODES.has(code);
}

function statsValues(report) {
  if (!report) return [];
  if (typeof report.values === "function") return Array.from(report.values());
  if (Array.isArray(report)) return report;
  const out = [];
  if (typeof report.forEach === "function") report.forEach((v) => out.push(v));
  return out;
}

/**
 * Internal. One quality sample from a `getStats()` report, in the keys and units of the `stats`
 * frame: `rtt_ms` from the selected candidate pair's `currentRoundTripTime`; `jitter_ms` the
 * largest inbound audio jitter; `packet_loss` inbound audio `packetsLost / (packetsLost +
 * packetsReceived)` since the call began (as the Linux engine computes it); `bitrate_kbps` the
 * outbound RTP bytes since `previous`, per elapsed time. Returns the new byte baseline too.
 * @param {Iterable<any>|Map<string, any>} report
 * @param {{bytesSent: number, timestamp: number}|null} previous
 */
export function _statsFromReport(report, previous) {
  const stats = statsValues(report);
  const byId = new Map(stats.map((s) => [s.id, s]));
  let pair = null;
  for (const s of stats) {
    if (s.type === "transport" && s.selectedCandidatePairId && byId.has(s.selectedCandidatePairId)) {
      pair = byId.get(s.selectedCandidatePairId);
      break;
    }
  }
  if (!pair) {
    // Firefox marks the pair itself; otherwise take the nominated, succeeded one.
    pair = stats.find((s) => s.type === "candidate-pair" && s.selected === true)
      || stats.find((s) => s.type === "candidate-pair" && s.nominated && s.state === "succeeded")
      || null;
  }
  let rtt = null;
  if (pair && typeof pair.currentRoundTripTime === "number") rtt = pair.currentRoundTripTime * 1000;

  let jitter = null;
  let lost = 0;
  let received = 0;
  let sawInbound = false;
  let bytesSent = 0;
  let sawOutbound = false;
  let timestamp = null;
  for (const s of stats) {
    const kind = s.kind || s.mediaType;
    if (s.type === "inbound-rtp" && kind === "audio") {
      sawInbound = true;
      if (typeof s.jitter === "number") jitter = Math.max(jitter ?? 0, s.jitter * 1000);
      if (typeof s.packetsLost === "number") lost += Math.max(0, s.packetsLost);
      if (typeof s.packetsReceived === "number") received += s.packetsReceived;
    } else if (s.type === "outbound-rtp" && !s.isRemote) {
      if (typeof s.bytesSent === "number") {
        sawOutbound = true;
        bytesSent += s.bytesSent;
        if (typeof s.timestamp === "number") timestamp = Math.max(timestamp ?? 0, s.timestamp);
      }
    }
  }
  const expected = lost + received;
  const packetLoss = sawInbound && expected > 0 ? Math.min(1, lost / expected) : null;
  let bitrate = null;
  const bytes = sawOutbound && timestamp !== null ? { bytesSent, timestamp } : null;
  if (bytes && previous && bytes.timestamp > previous.timestamp && bytes.bytesSent >= previous.bytesSent) {
    // bytes * 8 / ms = kbit/s
    bitrate = ((bytes.bytesSent - previous.bytesSent) * 8) / (bytes.timestamp - previous.timestamp);
  }
  const round = (v, digits) => (v === null ? null : Number(v.toFixed(digits)));
  return {
    sample: {
      rtt_ms: round(rtt, 1),
      jitter_ms: round(jitter, 2),
      packet_loss: round(packetLoss, 4),
      bitrate_kbps: round(bitrate, 1),
    },
    bytes,
  };
}

/**
 * Internal. `sdp` with every media stream id (`a=msid:<stream> <track>` and the legacy
 * `a=ssrc:<n> msid:<stream> <track>`) replaced by `streamId`, so the remote side sees all our
 * tracks in one stream named `local-<peerId>`, as the mobile SDKs send it. A browser cannot choose
 * a MediaStream's id, and munging the local description is not allowed, so only the SDP sent on
 * the wire is rewritten; the stream id carries no meaning for the media itself. `-` (no stream)
 * is left alone.
 * @param {string} sdp
 * @param {string} streamId
 * @returns {string}
 */
export function _withStreamId(sdp, streamId) {
  if (typeof sdp !== "string" || !streamId) return sdp;
  return sdp
    .replace(/^(a=msid:)(\S+)( \S+)?$/gm, (line, prefix, stream, track) => (stream === "-" ? line : `${prefix}${streamId}${track || ""}`))
    .replace(/^(a=ssrc:\d+ msid:)(\S+)( \S+)?$/gm, (line, prefix, stream, track) => (stream === "-" ? line : `${prefix}${streamId}${track || ""}`));
}

/**
 * Internal. The session id of an SDP (the second field of its `o=` line, RFC 8866 §5.2), or null.
 * It stays the same for every offer of one peer connection (an ICE restart or renegotiation only
 * raises the version) and a new connection draws a new one, so it tells a late renegotiation of
 * a call that already ended from a new call.
 * @param {string} sdp
 * @returns {string | null}
 */
export function _sdpSessionId(sdp) {
  if (typeof sdp !== "string") return null;
  const match = /^o=\S+ (\S+) /m.exec(sdp);
  return match ? match[1] : null;
}

/**
 * Internal. DTMF digits as single keys (`0-9 * # A-D`, lower case a–d accepted); throws
 * `invalid_argument` for anything else, as the Linux engine ignores unknown keys.
 * @param {string} digits
 * @returns {string[]}
 */
export function _dtmfDigits(digits) {
  const keys = Array.from(String(digits).toUpperCase());
  if (keys.length === 0) throw invalidArgument("no DTMF digits");
  for (const key of keys) {
    if (!DTMF_KEYS.includes(key)) throw invalidArgument(`not a DTMF key: ${JSON.stringify(key)}`);
  }
  return keys;
}

function utf8Length(text) {
  return new TextEncoder().encode(text).length;
}

function newClientId(random) {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === "function") return globalThis.crypto.randomUUID();
  let out = "";
  for (let i = 0; i < 32; i++) out += Math.floor(random() * 16).toString(16);
  return `${out.slice(0, 8)}-${out.slice(8, 12)}-4${out.slice(13, 16)}-a${out.slice(17, 20)}-${out.slice(20)}`;
}

// ---------------------------------------------------------------------------------------------
// Internal state machines
// ---------------------------------------------------------------------------------------------

/**
 * Internal. A minimal event emitter: `on` returns an unsubscribe function, `once` a Promise.
 * A throwing handler does not stop the others; its error goes to `reportError` (the console and
 * `window.onerror` in browsers), or is rethrown in a microtask where there is none.
 */
export class _Emitter {
  constructor() {
    /** @type {Map<string, Set<Function>>} */
    this._handlers = new Map();
  }

  /** Subscribes; returns the unsubscribe function. */
  on(event, handler) {
    if (typeof handler !== "function") throw invalidArgument("handler must be a function");
    if (!this._handlers.has(event)) this._handlers.set(event, new Set());
    this._handlers.get(event).add(handler);
    return () => this.off(event, handler);
  }

  /** Unsubscribes. */
  off(event, handler) {
    const set = this._handlers.get(event);
    if (set) set.delete(handler);
  }

  /** Resolves with the payload of the next `event`. */
  once(event) {
    return new Promise((resolve) => {
      const off = this.on(event, (payload) => {
        off();
        resolve(payload);
      });
    });
  }

  /** Calls every handler of `event` with `payload`. */
  emit(event, payload) {
    const set = this._handlers.get(event);
    if (!set) return;
    for (const handler of Array.from(set)) {
      try {
        handler(payload);
      } catch (error) {
        if (typeof globalThis.reportError === "function") globalThis.reportError(error);
        else {
          queueMicrotask(() => {
            throw error;
          });
        }
      }
    }
  }
}

/**
 * Internal. Remote ICE candidates of one peer connection, held until its remote description is
 * set (adding them earlier fails), then released in arrival order.
 */
export class _CandidateQueue {
  constructor() {
    this._ready = false;
    this._items = [];
  }

  /** Whether the remote description is set. */
  get ready() {
    return this._ready;
  }

  /** Candidates waiting. */
  get length() {
    return this._items.length;
  }

  /** Holds `candidate` until ready; returns true when the caller should add it now. */
  push(candidate) {
    if (this._ready) return true;
    this._items.push(candidate);
    return false;
  }

  /** The remote description is set: returns the held candidates, oldest first. */
  markReady() {
    this._ready = true;
    return this._items.splice(0);
  }

  /** Forgets everything (the call ended). */
  clear() {
    this._ready = false;
    this._items = [];
  }
}

/**
 * Internal. Chat seq bookkeeping across reconnects, as in the Swift SDK: every seq is delivered
 * once (live, replayed or gap-filled), `lastSeq` is the highest seen, and the next connection
 * resumes from `lastSeq` (or from an open gap's cursor, which live chats move past).
 */
export class _ResumeState {
  constructor() {
    this._lastSeq = 0;
    this._seen = new Set();
    /** Seqs at or below the floor count as seen (pruned, or history before the first welcome). */
    this._floor = 0;
    this._resumable = false;
    this._replayRemaining = 0;
    this._gapFillPending = false;
    /** Where the REST gap fill has got to; null when no gap is open. */
    this._gapCursor = null;
    /** Highest seq of the current socket's replay. */
    this._replayHigh = 0;
    /** The `last_seq` the current connection sent. */
    this._resumedFrom = 0;
  }

  /** Highest seq seen. */
  get lastSeq() {
    return this._lastSeq;
  }

  /** Whether a welcome was seen (later connections send `last_seq`). */
  get resumable() {
    return this._resumable;
  }

  /** Replayed `chat` frames still expected on this socket. */
  get replayRemaining() {
    return this._replayRemaining;
  }

  /** The `last_seq` for the next connection, or null for a fresh one. */
  resumeFrom() {
    if (!this._resumable) return null;
    this._resumedFrom = this._gapCursor === null ? this._lastSeq : Math.min(this._lastSeq, this._gapCursor);
    return this._resumedFrom;
  }

  /**
   * A `welcome` arrived. Returns `resumed` (this connection sent `last_seq`) and `gapFill` (start
   * the REST gap fill now: the replay was capped and no replayed frame is expected).
   */
  onWelcome(welcome) {
    const resumed = this._resumable;
    this._replayHigh = 0;
    if (resumed) {
      this._replayRemaining = Math.max(0, Number(welcome.replay_count) || 0);
      this._gapFillPending = welcome.recovered === false;
    } else {
      this._replayRemaining = 0;
      this._gapFillPending = false;
      const last = Number(welcome.last_seq) || 0;
      // Messages before the first session are history (fetchMessages), not live events.
      if (last > this._lastSeq) this._lastSeq = last;
      this._floor = Math.max(this._floor, last);
    }
    this._resumable = true;
    return { resumed, gapFill: this._gapFillPending && this._replayRemaining === 0 };
  }

  /**
   * A `chat` frame arrived on the socket. `deliver`: first time this seq is seen. `gapFill`: it
   * was the last replayed frame and the replay was capped: start the REST gap fill now.
   */
  onChat(seq) {
    const replayed = this._replayRemaining > 0;
    if (replayed) this._replayHigh = Math.max(this._replayHigh, seq);
    const deliver = this.accept(seq);
    let gapFill = false;
    if (replayed) {
      this._replayRemaining -= 1;
      if (this._replayRemaining === 0 && this._gapFillPending) gapFill = true;
    }
    return { deliver, gapFill };
  }

  /** Dedupe only (gap-fill pages): true the first time `seq` is seen. */
  accept(seq) {
    if (!Number.isFinite(seq) || this.hasSeen(seq)) return false;
    this.markSeen(seq);
    return true;
  }

  /** Whether `seq` was seen. */
  hasSeen(seq) {
    return seq <= this._floor || this._seen.has(seq);
  }

  /** Records `seq` as seen (also our own acks). */
  markSeen(seq) {
    this._seen.add(seq);
    if (seq > this._lastSeq) this._lastSeq = seq;
    if (this._seen.size > 4096) {
      // Never above an open gap: its messages are still to come.
      const floor = Math.min(this._lastSeq - 1024, this._gapCursor === null ? Infinity : this._gapCursor);
      for (const s of this._seen) if (s <= floor) this._seen.delete(s);
      this._floor = Math.max(this._floor, floor);
    }
  }

  /** Starts a gap fill; returns the `since_seq` of its first page. */
  gapStart() {
    this._gapFillPending = false;
    // The replay covered resume point…replayHigh (after a reconnect in the middle of a gap, the
    // resume point is the gap's cursor). Not lastSeq: a live message or an ack may be past the gap.
    const since = Math.max(this._gapCursor === null ? this._resumedFrom : this._gapCursor, this._replayHigh);
    this._gapCursor = since;
    return since;
  }

  /** Moves the open gap's cursor, or closes the gap (null). */
  setGapCursor(seq) {
    this._gapCursor = seq;
  }
}

/**
 * Internal. Pending `sendChat` calls: one promise per client_id, an ack timer, resends under the
 * same client_id (the server stores a client_id once and answers every retry with the original
 * ack), and a free resend of everything after each reconnect.
 */
export class _PendingChats {
  /**
   * @param {{ackTimeoutMs?: number, retries?: number, timers?: object, send: (text: string) => unknown, canSend: () => boolean}} options
   */
  constructor(options) {
    this._ackTimeoutMs = options.ackTimeoutMs ?? 10000;
    this._maxSends = 1 + Math.max(0, options.retries ?? 2);
    this._timers = options.timers ?? defaultTimers();
    this._send = options.send;
    this._canSend = options.canSend;
    /** @type {Map<string, {type: string, body: object, sends: number, timer: unknown, resolve: Function, reject: Function}>} */
    this._pending = new Map();
  }

  /** Pending messages. */
  get size() {
    return this._pending.size;
  }

  /** Whether `clientId` is pending. */
  has(clientId) {
    return this._pending.has(clientId);
  }

  /** Pending client_ids, oldest first. */
  ids() {
    return Array.from(this._pending.keys());
  }

  /** Adds a message (sent at once when possible); resolves with its ack. */
  add(clientId, text, meta, replyTo) {
    const body = { text };
    if (meta !== undefined && meta !== null) body.meta = meta;
    if (replyTo !== undefined && replyTo !== null) body.reply_to = replyTo;
    return this.addOp(clientId, "chat", body);
  }

  /**
   * Adds any acked chat operation: `type` is the frame type (`chat`, `chat-edit`, `chat-delete`,
   * `chat-react`) and `body` its payload after `client_id`, in wire order. One ledger for all of
   * them: they share the server's client_id namespace, the ack and the resend rules.
   */
  addOp(clientId, type, body) {
    if (this._pending.has(clientId)) return Promise.reject(invalidState(`client_id ${clientId} is already pending`));
    return new Promise((resolve, reject) => {
      this._pending.set(clientId, { type, body, sends: 0, timer: null, resolve, reject });
      if (this._canSend()) this.transmit(clientId);
    });
  }

  /** The frame type of a pending operation, or null. */
  typeOf(clientId) {
    const entry = this._pending.get(clientId);
    return entry ? entry.type : null;
  }

  /** Sends one message and arms its ack timer; `counts` false for resends after a reconnect. */
  transmit(clientId, counts = true) {
    const entry = this._pending.get(clientId);
    if (!entry) return;
    if (counts) entry.sends += 1;
    this._clearTimer(entry);
    this._send(_buildFrame(entry.type, { client_id: clientId, ...entry.body }));
    this._arm(clientId, this._ackTimeoutMs);
  }

  /** Resends every pending message, oldest first, without using up retries. */
  resendAll() {
    for (const id of this.ids()) this.transmit(id, false);
  }

  /** The ack (or our own replayed message) arrived. Returns false when it was not pending. */
  resolve(clientId, ack) {
    const entry = this._take(clientId);
    if (!entry) return false;
    entry.resolve(ack);
    return true;
  }

  /** A `chat-ack` with an error: temporary ones (503) are resent after 1 s, others reject. */
  failAck(clientId, error) {
    const entry = this._pending.get(clientId);
    if (!entry) return false;
    if (error.retryable) {
      this._clearTimer(entry);
      this._arm(clientId, Math.min(1000, this._ackTimeoutMs));
      return true;
    }
    return this.reject(clientId, error);
  }

  /** Rejects one message. */
  reject(clientId, error) {
    const entry = this._take(clientId);
    if (!entry) return false;
    entry.reject(error);
    return true;
  }

  /** Rejects every message (terminal failure, disconnect()). */
  rejectAll(error) {
    for (const id of this.ids()) this.reject(id, error);
  }

  _take(clientId) {
    const entry = this._pending.get(clientId);
    if (!entry) return null;
    this._pending.delete(clientId);
    this._clearTimer(entry);
    return entry;
  }

  _clearTimer(entry) {
    if (entry.timer !== null) this._timers.clearTimeout(entry.timer);
    entry.timer = null;
  }

  _arm(clientId, ms) {
    const entry = this._pending.get(clientId);
    if (!entry) return;
    entry.timer = this._timers.setTimeout(() => this._timedOut(clientId), ms);
  }

  _timedOut(clientId) {
    const entry = this._pending.get(clientId);
    if (!entry) return;
    entry.timer = null;
    if (entry.sends >= this._maxSends) {
      this.reject(clientId, new CallingError(`no chat-ack for ${clientId} after ${entry.sends} sends`, { code: "timeout", retryable: true }));
    } else if (this._canSend()) {
      this.transmit(clientId);
    }
    // Not connected: the next welcome resends it.
  }
}

/**
 * Internal. The local typing indicator: only changes are sent; `set(true)` renews a timer that
 * turns it off after `timeoutMs` (the server's own TTL, typing_ttl_ms, is longer).
 */
export class _TypingState {
  /** @param {{timeoutMs?: number, timers?: object, send: (typing: boolean) => void}} options */
  constructor(options) {
    this._timeoutMs = options.timeoutMs ?? 3000;
    this._timers = options.timers ?? defaultTimers();
    this._send = options.send;
    this._on = false;
    this._timer = null;
  }

  /** Whether the indicator is on. */
  get on() {
    return this._on;
  }

  /** Turns the indicator on or off; nothing happens while not connected. */
  set(on, connected = true) {
    this._clear();
    if (!connected) return;
    if (on) {
      if (!this._on) this._send(true);
      this._on = true;
      this._timer = this._timers.setTimeout(() => {
        this._timer = null;
        if (this._on) {
          this._on = false;
          this._send(false);
        }
      }, this._timeoutMs);
    } else if (this._on) {
      this._on = false;
      this._send(false);
    }
  }

  /** Forgets the state without sending (the socket is gone; the server cleared it). */
  reset() {
    this._clear();
    this._on = false;
  }

  _clear() {
    if (this._timer !== null) this._timers.clearTimeout(this._timer);
    this._timer = null;
  }
}

/** Relayed frame types a peer in its reconnect grace refuses (docs/browser.md "What survives a drop"). */
const RELAY_TYPES = new Set(["offer", "answer", "candidate", "data"]);
/** `error.code` of a relay addressed to a peer whose seat is held for it (`peer_reconnecting`). */
const PEER_RECONNECTING = 480;

/**
 * Internal. Relays to peers in their reconnect grace (`peer-reconnecting` … `peer-resumed` or
 * `peer-left`). While a peer is held, frames to it are queued here instead of sent. Frames sent
 * just before the `peer-reconnecting` arrived are refused by the server, one `error` 480 each. That
 * error names only the refused frame's type (`payload.type`), not its `to`, so `refused()` works out
 * which frame it was: the server handles one connection's frames in order and answers in that
 * order, so each 480 is for the earliest frame sent after the one the previous 480 was for, among
 * the frames of that type sent to a held peer (one global log order, `seq`). With one held peer
 * this is exact; with two held peers sent the same type in the same instants it can pick the wrong
 * one (the error carries nothing to tell them apart). On `peer-resumed`, `release()` gives the
 * refused and the queued frames, oldest first, to send again; on `peer-left`, `drop()` forgets
 * them. At most `limit` frames per peer are logged or queued; a frame beyond that is refused
 * (`push` returns false).
 */
export class _RelayHold {
  /** @param {{limit?: number}} [options] */
  constructor(options = {}) {
    this._limit = Math.max(1, options.limit ?? 100);
    /** peerId → {log: {seq, type, text, refused}[], held: {type, text}[] | null} */
    this._peers = new Map();
    /** Order of relays sent, across peers. */
    this._seq = 0;
    /** `seq` of the frame the latest 480 was counted against: later 480s are for later frames. */
    this._cursor = 0;
  }

  _entry(peerId) {
    let entry = this._peers.get(peerId);
    if (!entry) {
      entry = { log: [], held: null };
      this._peers.set(peerId, entry);
    }
    return entry;
  }

  /** Whether frames to `peerId` are being held. */
  isHeld(peerId) {
    const entry = this._peers.get(peerId);
    return Boolean(entry && entry.held);
  }

  /** Peers being held. */
  heldPeers() {
    return Array.from(this._peers).filter(([, e]) => e.held).map(([id]) => id);
  }

  /** Frames waiting for `peerId` (refused plus queued). */
  waiting(peerId) {
    const entry = this._peers.get(peerId);
    return entry && entry.held ? entry.log.filter((f) => f.refused).length + entry.held.length : 0;
  }

  /** A relay frame went out to `peerId`: remembered in case the server refuses it. */
  sent(peerId, type, text) {
    const entry = this._entry(peerId);
    entry.log.push({ seq: ++this._seq, type, text, refused: false });
    if (entry.log.length > this._limit) entry.log.shift();
  }

  /** `peer-reconnecting` (or a roster entry `reconnecting: true`): hold later frames to `peerId`. */
  hold(peerId) {
    const entry = this._entry(peerId);
    if (!entry.held) entry.held = [];
  }

  /** Queues a frame for a held peer; false when the queue is full (the frame is dropped). */
  push(peerId, type, text) {
    const entry = this._entry(peerId);
    if (!entry.held) entry.held = [];
    if (this.waiting(peerId) >= this._limit) return false;
    entry.held.push({ type, text });
    return true;
  }

  /**
   * An `error` 480 for a frame of `type`. Returns the held peer it was counted against, or null
   * when no frame of that type to a held peer is left to refuse (the caller reports the error).
   */
  refused(type) {
    let best = null;
    for (const [peerId, entry] of this._peers) {
      if (!entry.held) continue;
      const frame = entry.log.find((f) => f.seq > this._cursor && !f.refused && f.type === type);
      if (frame && (best === null || frame.seq < best.frame.seq)) best = { peerId, frame };
    }
    if (best === null) return null;
    best.frame.refused = true;
    this._cursor = best.frame.seq;
    return best.peerId;
  }

  /** The peer is back (`peer-resumed`, or listed without `reconnecting` after our own resume): the frames to send again, oldest first. */
  release(peerId) {
    const entry = this._peers.get(peerId);
    if (!entry || !entry.held) return [];
    const out = entry.log.filter((f) => f.refused).concat(entry.held).map((f) => f.text);
    this._peers.delete(peerId);
    return out;
  }

  /** `peer-left` (or the call is over): forgets everything for `peerId`; returns how many frames were dropped. */
  drop(peerId) {
    const n = this.waiting(peerId);
    this._peers.delete(peerId);
    return n;
  }

  /** Forgets everything (our own session ended). */
  clear() {
    this._peers.clear();
  }
}

/**
 * Internal. When one call's ICE needs a restart and when to give up, as a timer state machine
 * (docs/browser.md "What survives a drop"). ICE `disconnected` opens the give-up window
 * (`windowMs`) and, after `debounceMs` without recovery, asks for a restart; `failed` asks at once;
 * while the window is open a restart is asked again every `retryMs`. `connected`/`completed`
 * closes the window. A network change asks for a restart even on a healthy connection (its path
 * may be gone); a signaling resume asks for one when the connection is not healthy. Only the
 * `restarter` side (the one that offered the call) restarts; both sides give up when the window
 * runs out, unless `canGiveUp()` says to wait (the peer is in its reconnect grace).
 */
export class _IceRecovery {
  /**
   * @param {{restarter: boolean, windowMs?: number, debounceMs?: number, retryMs?: number, timers?: object,
   *   restart: () => void, giveUp: () => void, canGiveUp?: () => boolean}} options
   */
  constructor(options) {
    this._restarter = Boolean(options.restarter);
    this._windowMs = options.windowMs ?? 15000;
    this._debounceMs = options.debounceMs ?? 2000;
    this._retryMs = options.retryMs ?? 5000;
    this._timers = options.timers ?? defaultTimers();
    this._restart = options.restart;
    this._giveUp = options.giveUp;
    this._canGiveUp = options.canGiveUp ?? (() => true);
    this._window = null;
    this._debounce = null;
    this._retry = null;
    this._stopped = false;
    this._restarts = 0;
  }

  /** Restarts asked for since the call began. */
  get restarts() {
    return this._restarts;
  }

  /** Whether the give-up window is open (media is not known to flow). */
  get recovering() {
    return this._window !== null;
  }

  /** A new `iceConnectionState` or `connectionState`. */
  onIceState(state) {
    if (this._stopped) return;
    if (state === "connected" || state === "completed") {
      this._clearAll();
    } else if (state === "disconnected") {
      this._openWindow();
      if (this._debounce === null && this._retry === null) {
        this._debounce = this._timers.setTimeout(() => {
          this._debounce = null;
          this._attempt();
        }, this._debounceMs);
      }
    } else if (state === "failed") {
      this._openWindow();
      // iceConnectionState and connectionState both report it: one restart, not two.
      if (this._retry === null) this._attempt();
    }
  }

  /** The browser reports a network change (`online`, `navigator.connection` change). */
  onNetworkChange() {
    if (this._stopped) return;
    this._attempt();
  }

  /** Signaling is back (our own resume, or the peer's `peer-resumed`). */
  onSignalingResumed(healthy) {
    if (this._stopped) return;
    if (healthy) {
      // Still inside a window (ICE disconnected before the socket dropped): try again now.
      if (this.recovering) this._attempt();
      return;
    }
    this._openWindow();
    this._attempt();
  }

  /** The call is over: no more timers. */
  stop() {
    this._stopped = true;
    this._clearAll();
  }

  _attempt() {
    if (this._stopped || !this._restarter) return;
    this._clear("_debounce");
    this._clear("_retry");
    this._restarts += 1;
    this._restart();
    if (this.recovering) {
      this._retry = this._timers.setTimeout(() => {
        this._retry = null;
        this._attempt();
      }, this._retryMs);
    }
  }

  _openWindow() {
    if (this._window !== null) return;
    this._window = this._timers.setTimeout(() => {
      this._window = null;
      if (this._stopped) return;
      if (!this._canGiveUp()) {
        this._openWindow();
        return;
      }
      this.stop();
      this._giveUp();
    }, this._windowMs);
  }

  _clear(name) {
    if (this[name] !== null) this._timers.clearTimeout(this[name]);
    this[name] = null;
  }

  _clearAll() {
    this._clear("_window");
    this._clear("_debounce");
    this._clear("_retry");
  }
}

/**
 * Internal. After our own resume (a `welcome` with `resumed: true`): which calls and ringing
 * offers go on and which end, against the new roster. A call whose peer is not in the room any
 * more ends (`hangup {reason: "peer-left"}`); a ringing offer whose caller is gone ends as
 * `cancelled`; the rest are kept.
 * @param {Iterable<string>} callPeers
 * @param {Iterable<string>} offerPeers
 * @param {{peer_id: string}[]} roster
 */
export function _reconcileCalls(callPeers, offerPeers, roster) {
  const present = new Set(roster.map((p) => p.peer_id));
  const ended = [];
  const kept = [];
  for (const id of callPeers) (present.has(id) ? kept : ended).push(id);
  const cancelled = Array.from(offerPeers).filter((id) => !present.has(id));
  return { ended, cancelled, kept };
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/** One request; resolves `{status, headers, body}` (body parsed as JSON when it is JSON). */
async function httpRequest(fetchFn, method, url, { token, body, contentType } = {}) {
  if (typeof fetchFn !== "function") throw new CallingError("no fetch available", { code: "network", retryable: false });
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (contentType) headers["Content-Type"] = contentType;
  let response;
  try {
    response = await fetchFn(url, { method, headers, body });
  } catch (error) {
    throw new CallingError(`network error: ${error && error.message ? error.message : error}`, { code: "network", retryable: true, cause: error });
  }
  const text = typeof response.text === "function" ? await response.text() : "";
  const type = (response.headers && typeof response.headers.get === "function" && response.headers.get("content-type")) || "";
  let parsed = text;
  if (/json/.test(type) || (text && (text[0] === "{" || text[0] === "["))) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  return { status: response.status, headers: response.headers, body: parsed };
}

/** A CallingError for a refused request (problem+json `code`, `detail`). */
function problemError(status, body, headers) {
  const problem = body && typeof body === "object" ? body : {};
  const retryAfter = headers && typeof headers.get === "function" ? headers.get("retry-after") : null;
  const error = new CallingError(problem.detail || problem.title || `HTTP ${status}`, {
    code: problem.code || "http_error",
    status,
    retryable: _isRetryableStatus(status),
  });
  if (retryAfter !== null && retryAfter !== undefined && retryAfter !== "" && !Number.isNaN(Number(retryAfter))) {
    error.retryAfter = Number(retryAfter);
  }
  return error;
}

// ---------------------------------------------------------------------------------------------
// Client base (shared by CallingClient, PresenceClient and WebCallClient; not exported)
// ---------------------------------------------------------------------------------------------

/**
 * What every client has: the injectable browser objects and timers, the event emitter and the
 * lifecycle state with its getter.
 */
class ClientBase {
  constructor(options) {
    const fetchFn = options.fetch || globalThis.fetch;
    this._fetch = fetchFn ? (...args) => fetchFn(...args) : null;
    this._timers = options.timers || defaultTimers();
    this._random = options.random || Math.random;
    this._now = options.now || (() => Date.now());
    this._events = new _Emitter();
    this._state = "idle";
  }

  /** Lifecycle state (idle, connecting, connected, reconnecting, then closed or ended). */
  get state() {
    return this._state;
  }

  /** Subscribes to an event; returns the unsubscribe function. */
  on(event, handler) {
    return this._events.on(event, handler);
  }

  /** Unsubscribes a handler. */
  off(event, handler) {
    this._events.off(event, handler);
  }

  /** Resolves with the payload of the next `event`. */
  once(event) {
    return this._events.once(event);
  }
}

/** Runs `op` after the earlier operations queued on `holder.chain`, so SDP steps never interleave. */
function enqueue(holder, op) {
  const next = holder.chain.then(op);
  holder.chain = next.catch(() => {});
  return next;
}

/** A new RTCPeerConnection with `config` and `iceServers`, or `media` when there is none. */
function newPeerConnection(RTCPeerConnectionCtor, config, iceServers) {
  if (typeof RTCPeerConnectionCtor !== "function") throw new CallingError("no RTCPeerConnection available", { code: "media", retryable: false });
  return new RTCPeerConnectionCtor({ ...config, iceServers });
}

/**
 * Close code for a socket the SDK drops without leaving (RFC 6455 §7.4.2: 4000–4999 are the
 * application's; browsers accept only 1000 and 3000–4999 from a page).
 */
const ABANDON_CLOSE_CODE = 4000;

/** Closes a peer connection, data channel or socket that may be closed already. */
function closeQuietly(closable, ...args) {
  try {
    closable.close(...args);
  } catch {
    // already closed
  }
}

// ---------------------------------------------------------------------------------------------
// Reconnecting socket (shared by CallingClient and PresenceClient; not exported)
// ---------------------------------------------------------------------------------------------

class ReconnectingSocket extends ClientBase {
  constructor(options, { defaultPath, readyType }) {
    if (!options || typeof options.url !== "string") throw invalidArgument("options.url is required");
    if (typeof options.token !== "string" || options.token === "") throw invalidArgument("options.token is required");
    super(options);
    this._url = options.url;
    this._tokenValue = options.token;
    this._defaultPath = defaultPath;
    this._readyType = readyType;
    this._reconnect = options.reconnect !== false;
    this._refreshToken = typeof options.refreshToken === "function" ? options.refreshToken : null;
    this._backoff = backoffOptions(options.backoff);
    this._connectTimeoutMs = options.connectTimeoutMs ?? 10000;
    this._WebSocket = options.WebSocket || globalThis.WebSocket;

    this._ws = null;
    /** Bumped whenever a socket or reconnect timer is abandoned; their late events are ignored. */
    this._gen = 0;
    this._ready = false;
    this._connectWaiter = null;
    this._connectTimer = null;
    this._reconnectTimer = null;
    this._attempt = 0;
    this._userClosed = false;
    this._pongWaiters = [];
  }

  /** Current token. */
  get token() {
    return this._tokenValue;
  }

  /**
   * Opens the socket; resolves with the first frame's payload. Allowed from idle and closed.
   * The first connect is not retried on its own: the app sees why it failed.
   */
  connect(token) {
    if (this._state !== "idle" && this._state !== "closed") {
      return Promise.reject(invalidState(`connect() while ${this._state}`));
    }
    if (typeof token === "string" && token !== "") this._tokenValue = token;
    this._userClosed = false;
    this._attempt = 0;
    this._setState("connecting");
    return new Promise((resolve, reject) => {
      this._connectWaiter = { resolve, reject };
      this._openSocket();
    });
  }

  /** App-level `ping`; resolves with the `pong` payload. Rejects with `not_connected`. */
  ping(payload) {
    try {
      return this._ping(payload, true);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Closes the socket (1000); no reconnect. `disconnected` follows when the socket is closed. */
  disconnect() {
    if (this._state === "idle" || this._state === "closed") return;
    this._userClosed = true;
    this._clearTimer("_reconnectTimer");
    this._clearTimer("_connectTimer");
    this._beforeClose();
    this._beforeSocketEnd();
    this._onSessionEnd(notConnected(), "disconnect");
    const waiter = this._takeConnectWaiter();
    if (waiter) waiter.reject(notConnected());
    this._setState("closed");
    if (this._ws) {
      this._ws.onclose = null;
      this._ws.onmessage = null;
      this._ws.onerror = null;
    }
    this._abandonSocket(1000, "normal");
    // Reported at once rather than from the socket's close callback: the session is over now,
    // and a server that is slow to answer the close must not hold the event back.
    this._emitEnd(1000, "normal", false, null, false);
  }

  // --- subclass hooks --------------------------------------------------------------------------

  /** disconnect() is about to close an open socket: a last frame may go out. */
  _beforeClose() {}

  _socketParams() {
    return {};
  }

  _onFrame() {}

  _onReady() {}

  /** The socket ended (any reason): stop timers, reset per-socket state. */
  _beforeSocketEnd() {}

  /** The session is over (disconnect or terminal failure). */
  _onSessionEnd() {}

  /** Extra local checks after a refused upgrade whose token still works for /v1/ice. */
  _localRefusal() {
    return null;
  }

  // --- internals -------------------------------------------------------------------------------

  _setState(state) {
    if (this._state === state) return;
    this._state = state;
    this._events.emit("state", { state });
  }

  _clearTimer(name) {
    if (this[name] !== null) this._timers.clearTimeout(this[name]);
    this[name] = null;
  }

  _sendText(text) {
    const ws = this._ws;
    if (!ws || ws.readyState !== WS_OPEN) return false;
    ws.send(text);
    return true;
  }

  _send(type, payload, to) {
    return this._sendText(_buildFrame(type, payload, to));
  }

  _requireConnected() {
    if (this._state !== "connected") throw notConnected();
  }

  _ping(payload, userVisible) {
    this._requireConnected();
    return new Promise((resolve, reject) => {
      this._pongWaiters.push(userVisible ? { resolve, reject } : null);
      this._send("ping", payload);
      if (!userVisible) resolve(undefined);
    });
  }

  _handlePong(payload) {
    const waiter = this._pongWaiters.shift();
    if (waiter) waiter.resolve(payload === undefined ? null : payload);
    this._events.emit("pong", payload === undefined ? null : payload);
  }

  _openSocket() {
    const gen = ++this._gen;
    this._ready = false;
    const url = _socketUrl(this._url, this._tokenValue, this._socketParams(), this._defaultPath);
    let opened = false;
    let ws;
    try {
      if (typeof this._WebSocket !== "function") throw new Error("no WebSocket available");
      ws = new this._WebSocket(url);
    } catch (error) {
      this._timers.setTimeout(() => {
        if (gen === this._gen) this._socketEnded(gen, 1006, String(error && error.message ? error.message : error), false);
      }, 0);
      return;
    }
    this._ws = ws;
    ws.onopen = () => {
      if (gen === this._gen) opened = true;
    };
    ws.onmessage = (event) => {
      if (gen !== this._gen || typeof event.data !== "string") return;
      let json;
      try {
        json = JSON.parse(event.data);
      } catch {
        return;
      }
      if (!json || typeof json.type !== "string") return;
      this._dispatch(json);
    };
    ws.onerror = () => {
      if (gen !== this._gen || opened) return; // after open, `close` follows with the code
      // Failed before opening (refused upgrade, unreachable). Browsers follow with `close`; some
      // implementations (Node 20's WebSocket) never do, so this is where the attempt ends.
      this._abandonSocket();
      this._socketEnded(this._gen, 1006, "", false);
    };
    ws.onclose = (event) => {
      if (gen !== this._gen) return;
      this._ws = null;
      this._socketEnded(gen, event && event.code ? event.code : 1006, (event && event.reason) || "", opened);
    };
    this._clearTimer("_connectTimer");
    this._connectTimer = this._timers.setTimeout(() => {
      this._connectTimer = null;
      if (gen !== this._gen || this._ready) return;
      this._abandonSocket();
      this._afterSocketEnd(1006, "timeout", new CallingError(`no ${this._readyType} within ${this._connectTimeoutMs} ms`, { code: "timeout", retryable: true }));
    }, this._connectTimeoutMs);
  }

  /**
   * Forgets the current socket (its later events are ignored) and closes it. Only `disconnect()`
   * (after `leave`) closes with 1000: the server reads 1000 and 1001 as a clean leave and frees our
   * seat at once, while a socket dropped for any other reason (connect timeout, unanswered ping, a
   * refused first connect) must leave the seat in its reconnect grace (docs/protocol.md
   * "Reconnect grace"), so it closes with a code of our own.
   */
  _abandonSocket(code = ABANDON_CLOSE_CODE, reason = "abandoned") {
    this._gen += 1;
    const ws = this._ws;
    this._ws = null;
    if (ws) closeQuietly(ws, code, reason);
  }

  /** The pending connect() promise's callbacks, now taken (null when none is pending). */
  _takeConnectWaiter() {
    const waiter = this._connectWaiter;
    this._connectWaiter = null;
    return waiter;
  }

  _dispatch(json) {
    const payload = json.payload === null ? undefined : json.payload;
    if (json.type === this._readyType) {
      this._clearTimer("_connectTimer");
      this._ready = true;
      this._attempt = 0;
      this._onReady(payload || {});
      return;
    }
    if (json.type === "error" && !this._ready && this._connectWaiter) {
      const error = this._frameError(json, payload);
      const waiter = this._takeConnectWaiter();
      this._abandonSocket();
      this._clearTimer("_connectTimer");
      this._events.emit("error", error);
      this._beforeSocketEnd();
      this._setState("closed");
      this._emitEnd(1006, error.message, false, error, false);
      waiter.reject(error);
      return;
    }
    if (json.type === "pong") {
      this._handlePong(payload);
      return;
    }
    this._onFrame(json.type, json, payload);
  }

  _frameError(json, payload) {
    const wire = json.error || {};
    const code = Number(wire.code) || 0;
    return new CallingError(wire.message || `server error ${code}`, {
      code,
      retryable: _isTemporaryCode(code),
      frameType: payload && typeof payload.type === "string" ? payload.type : undefined,
    });
  }

  /** The socket closed (or never opened). Works out why, then decides. */
  _socketEnded(gen, code, reason, opened) {
    this._clearTimer("_connectTimer");
    if (this._userClosed) return;
    if (opened) {
      let retryable = !_isTerminalClose(code);
      // 4401: the token expired while connected; a refresh callback can get a fresh one.
      if (code === 4401 && this._refreshToken && !this._connectWaiter) retryable = true;
      const error = new CallingError(`socket closed (${code}${reason ? ` ${reason}` : ""})`, { code: "closed", closeCode: code, retryable });
      if (code === 4400) error.code = "replaced";
      if (code === 4401) error.code = "token_expired";
      this._afterSocketEnd(code, reason, error);
      return;
    }
    // Browsers hide the HTTP answer of a refused upgrade: ask /v1/ice with the same token.
    this._probeRefusal().then(
      (refusal) => {
        if (gen !== this._gen || this._userClosed) return;
        const error = refusal || new CallingError(`could not open ${this._url}`, { code: "connect_failed", retryable: true });
        this._afterSocketEnd(code, reason || error.message, error);
      },
      () => {
        if (gen !== this._gen || this._userClosed) return;
        this._afterSocketEnd(code, reason, new CallingError(`could not open ${this._url}`, { code: "connect_failed", retryable: true }));
      },
    );
  }

  async _probeRefusal() {
    if (!this._fetch) return this._localRefusal();
    const url = `${_httpBase(this._url)}/v1/ice`;
    let answer;
    try {
      answer = await httpRequest(this._fetch, "GET", url, { token: this._tokenValue });
    } catch {
      // The Authorization header makes that request preflighted, and a browser reports a refused
      // preflight as a network failure. A simple request (no header, so no preflight) gets the
      // server's 403 `origin_not_allowed` readable; anything else leaves it a network failure.
      try {
        const simple = await httpRequest(this._fetch, "GET", url);
        if (simple.status === 403 && simple.body && simple.body.code === "origin_not_allowed") {
          return problemError(simple.status, simple.body, simple.headers);
        }
      } catch {
        // unreachable as well
      }
      return null; // unreachable: a network failure, retryable
    }
    if (answer.status === 401 || answer.status === 403) return problemError(answer.status, answer.body, answer.headers);
    if (answer.status >= 200 && answer.status < 300) return this._localRefusal();
    return null;
  }

  _afterSocketEnd(code, reason, error) {
    this._beforeSocketEnd();
    const first = this._connectWaiter;
    const willReconnect = !first && this._reconnect && error.retryable && this._attempt + 1 <= this._backoff.maxAttempts;
    this._emitEnd(code, reason, willReconnect, error, code !== 1006 && code !== 1005);
    if (first) {
      this._takeConnectWaiter();
      this._setState("closed");
      this._onSessionEnd(error, "disconnect");
      first.reject(error);
      return;
    }
    if (willReconnect) this._scheduleReconnect();
    else this._fail(error);
  }

  /** `disconnected` (and for the presence channel `closed`) for one socket end. */
  _emitEnd(code, reason, willReconnect, error, _closeFrame) {
    this._events.emit("disconnected", { code, reason, willReconnect, error: error || null });
  }

  _scheduleReconnect() {
    this._attempt += 1;
    const attempt = this._attempt;
    const delayMs = _backoffDelay(attempt, this._backoff, this._random);
    this._setState("reconnecting");
    this._events.emit("reconnecting", { attempt, delayMs });
    const gen = ++this._gen;
    this._clearTimer("_reconnectTimer");
    this._reconnectTimer = this._timers.setTimeout(() => {
      this._reconnectTimer = null;
      if (gen !== this._gen) return;
      if (!this._refreshToken) {
        this._openSocket();
        return;
      }
      Promise.resolve()
        .then(() => this._refreshToken())
        .then(
          (fresh) => {
            if (gen !== this._gen) return;
            if (typeof fresh !== "string" || fresh === "") throw new CallingError("refreshToken gave no token", { code: "refresh_failed", retryable: true });
            this._tokenValue = fresh;
            this._openSocket();
          },
        )
        .catch((error) => {
          if (gen !== this._gen) return;
          const failure = error instanceof CallingError ? error : new CallingError(`refreshToken failed: ${error && error.message ? error.message : error}`, { code: "refresh_failed", retryable: true, cause: error });
          this._events.emit("error", failure);
          if (failure.retryable && this._attempt + 1 <= this._backoff.maxAttempts) this._scheduleReconnect();
          else this._fail(failure);
        });
    }, delayMs);
  }

  /** Terminal: no reconnect. */
  _fail(error) {
    this._gen += 1;
    this._abandonSocket();
    this._clearTimer("_reconnectTimer");
    this._onSessionEnd(error, "disconnect");
    this._setState("closed");
    this._events.emit("error", error);
  }

  _rejectPongs(error) {
    const waiters = this._pongWaiters;
    this._pongWaiters = [];
    for (const waiter of waiters) if (waiter) waiter.reject(error);
  }
}

// ---------------------------------------------------------------------------------------------
// RPC (docs/protocol.md "RPC"; the same API and codes in every SDK, docs/sdk.md "RPC")
// ---------------------------------------------------------------------------------------------

/**
 * Why an RPC call failed: `code`, `message`, `data` (a string or null). The codes the SDKs raise
 * are LiveKit's numbers, as static members (`RpcError.RESPONSE_TIMEOUT` …, docs/protocol.md
 * "RPC"); a handler may throw an `RpcError` with a code of its own, which the caller gets as thrown.
 */
export class RpcError extends Error {
  static UNSUPPORTED_METHOD = 1400;
  static RECIPIENT_NOT_FOUND = 1401;
  static REQUEST_PAYLOAD_TOO_LARGE = 1402;
  static APPLICATION_ERROR = 1500;
  static CONNECTION_TIMEOUT = 1501;
  static RESPONSE_TIMEOUT = 1502;
  static RECIPIENT_DISCONNECTED = 1503;
  static RESPONSE_PAYLOAD_TOO_LARGE = 1504;
  static SEND_FAILED = 1505;

  /**
   * @param {number} code
   * @param {string} message
   * @param {string|null} [data]
   */
  constructor(code, message, data = null) {
    super(message);
    this.name = "RpcError";
    this._code = code;
    this._data = data ?? null;
  }

  /** The error's code. */
  get code() {
    return this._code;
  }

  /** Extra detail (the handler's, or the server's error name for a refused request), or null. */
  get data() {
    return this._data;
  }
}

const RpcErrorCode = RpcError;

const RPC_TYPES = new Set(["rpc-request", "rpc-ack", "rpc-response"]);

/**
 * Internal. The RPC calls of one client, as caller and as callee: pending calls with their ack and
 * response timers, and the registered handlers. The server keeps nothing per call, so everything
 * that needs a call's lifetime is here: timeouts, matching a response to its request (and to the
 * peer it went to), failing the calls to a peer that left.
 */
export class _RpcCalls {
  /**
   * @param {{timers: object, send: (type: string, payload: object, to: string) => boolean, newId: () => string,
   *   ackTimeoutMs?: number, maxPayloadBytes?: number}} options
   */
  constructor(options) {
    this._timers = options.timers;
    this._sendFrame = options.send;
    this._newId = options.newId;
    this.ackTimeoutMs = options.ackTimeoutMs ?? 7000;
    this.maxPayloadBytes = options.maxPayloadBytes ?? 15360;
    /** id → {to, resolve, reject, ackTimer, responseTimer} */
    this._pending = new Map();
    /** method → handler */
    this._handlers = new Map();
  }

  /** Calls still waiting for their response. */
  get pendingCount() {
    return this._pending.size;
  }

  perform(to, method, payload, timeoutMs, connected) {
    if (typeof to !== "string" || to === "") return Promise.reject(invalidArgument("performRpc needs a peer id"));
    if (typeof method !== "string" || method === "") return Promise.reject(invalidArgument("performRpc needs a method name"));
    if (typeof payload !== "string") return Promise.reject(invalidArgument("an RPC payload is a string"));
    if (!(timeoutMs > 0)) return Promise.reject(invalidArgument("an RPC timeout is a positive number of ms"));
    if (utf8Length(payload) > this.maxPayloadBytes) {
      return Promise.reject(new RpcError(RpcErrorCode.REQUEST_PAYLOAD_TOO_LARGE, "request payload too large"));
    }
    if (!connected) return Promise.reject(new RpcError(RpcErrorCode.SEND_FAILED, "not connected"));
    const id = this._newId();
    const timeout = Math.round(timeoutMs);
    return new Promise((resolve, reject) => {
      const entry = { to, resolve, reject, ackTimer: null, responseTimer: null };
      this._pending.set(id, entry);
      entry.ackTimer = this._timers.setTimeout(
        () => this._fail(id, new RpcError(RpcErrorCode.CONNECTION_TIMEOUT, "no ack from the peer")),
        Math.min(this.ackTimeoutMs, timeout),
      );
      entry.responseTimer = this._timers.setTimeout(
        () => this._fail(id, new RpcError(RpcErrorCode.RESPONSE_TIMEOUT, "no response from the peer")),
        timeout,
      );
      if (!this._sendFrame("rpc-request", { id, method, payload, timeout_ms: timeout }, to)) {
        this._fail(id, new RpcError(RpcErrorCode.SEND_FAILED, "not connected"));
      }
    });
  }

  register(method, handler) {
    if (typeof method !== "string" || method === "") throw invalidArgument("registerRpcMethod needs a method name");
    if (typeof handler !== "function") throw invalidArgument("registerRpcMethod needs a handler function");
    this._handlers.set(method, handler);
  }

  unregister(method) {
    this._handlers.delete(method);
  }

  /** An inbound `rpc-request`, `rpc-ack` or `rpc-response` from `from`. */
  receive(type, from, payload) {
    if (!from || !payload || typeof payload.id !== "string") return;
    if (type === "rpc-request") this._request(from, payload);
    else if (type === "rpc-ack") this._ack(from, payload.id);
    else if (type === "rpc-response") this._response(from, payload);
  }

  /**
   * A server `error` that names an RPC frame: true when it was about a call of ours (which it
   * fails) or about our answer to a caller who is gone, false otherwise (the client reports it as
   * any error).
   */
  refused(error, payload) {
    if (!payload || typeof payload.id !== "string") return false;
    // Our ack or response to a caller who left (404) or is reconnecting (480): it no longer waits
    // for it (its own SDK fails or times out the call), and there is nothing for the app to do.
    if (payload.type !== "rpc-request") return error.code === 404 || error.code === 480;
    if (!this._pending.has(payload.id)) return false;
    let rpcError;
    if (error.code === 404) rpcError = new RpcError(RpcErrorCode.RECIPIENT_NOT_FOUND, error.message);
    else if (error.code === 460) rpcError = new RpcError(RpcErrorCode.REQUEST_PAYLOAD_TOO_LARGE, error.message);
    else rpcError = new RpcError(RpcErrorCode.SEND_FAILED, error.message, errorName(error.code));
    this._fail(payload.id, rpcError);
    return true;
  }

  /** `peer-left`: the calls to that peer cannot be answered any more. */
  peerLeft(peerId) {
    for (const [id, entry] of [...this._pending]) {
      if (entry.to === peerId) this._fail(id, new RpcError(RpcErrorCode.RECIPIENT_DISCONNECTED, `peer '${peerId}' left`));
    }
  }

  /** The client is closed: every open call fails. */
  failAll(message) {
    for (const id of [...this._pending.keys()]) this._fail(id, new RpcError(RpcErrorCode.SEND_FAILED, message));
  }

  _fail(id, error) {
    const entry = this._take(id);
    if (entry) entry.reject(error);
  }

  _take(id) {
    const entry = this._pending.get(id);
    if (!entry) return null;
    this._pending.delete(id);
    this._timers.clearTimeout(entry.ackTimer);
    this._timers.clearTimeout(entry.responseTimer);
    return entry;
  }

  _ack(from, id) {
    const entry = this._pending.get(id);
    if (!entry || entry.to !== from || entry.ackTimer === null) return;
    this._timers.clearTimeout(entry.ackTimer);
    entry.ackTimer = null;
  }

  _response(from, payload) {
    const entry = this._pending.get(payload.id);
    if (!entry || entry.to !== from) return; // late, duplicated, or not from the callee: dropped
    this._take(payload.id);
    const error = payload.error;
    if (error && typeof error === "object") {
      entry.reject(new RpcError(Number(error.code) || RpcErrorCode.APPLICATION_ERROR, String(error.message ?? ""),
        typeof error.data === "string" ? error.data : null));
    } else {
      entry.resolve(typeof payload.payload === "string" ? payload.payload : "");
    }
  }

  async _request(from, payload) {
    const id = payload.id;
    this._sendFrame("rpc-ack", { id }, from);
    const handler = this._handlers.get(payload.method);
    const respond = (body) => this._sendFrame("rpc-response", { id, ...body }, from);
    const fail = (code, message, data) => respond({ error: data == null ? { code, message } : { code, message, data } });
    if (!handler) return fail(RpcErrorCode.UNSUPPORTED_METHOD, `method '${payload.method}' not supported`);
    let result;
    try {
      result = await handler({
        requestId: id,
        callerId: from,
        payload: typeof payload.payload === "string" ? payload.payload : "",
        responseTimeoutMs: typeof payload.timeout_ms === "number" ? payload.timeout_ms : 10000,
      });
    } catch (error) {
      if (error instanceof RpcError) return fail(error.code, error.message, error.data);
      return fail(RpcErrorCode.APPLICATION_ERROR, error instanceof Error ? error.message : String(error));
    }
    const text = result == null ? "" : String(result);
    if (utf8Length(text) > this.maxPayloadBytes) return fail(RpcErrorCode.RESPONSE_PAYLOAD_TOO_LARGE, "response payload too large");
    respond({ payload: text });
  }
}

/** The server's name of a frame error code, for `RpcError.data` of a refused request. */
function errorName(code) {
  return { 480: "peer_reconnecting", 429: "rate_limited", 422: "invalid_payload" }[code] ?? String(code);
}

// ---------------------------------------------------------------------------------------------
// CallingClient
// ---------------------------------------------------------------------------------------------

/**
 * A room peer over `/v1/ws`: WebRTC signaling (the browser's RTCPeerConnection), chat with acks
 * and resume, typing, read receipts, quality stats. Reconnects on its own after a drop (backoff,
 * `last_seq` resume, pending chats resent with their client_id); terminal close codes (4400
 * replaced, 4401 token expired without `refreshToken`, 4410 …) and refused tokens stop it.
 *
 * ```js
 * const client = new CallingClient({ url: "wss://calls.example.org/v1/ws", token });
 * client.on("incoming", (call) => call.accept(localStream));
 * client.on("track", ({ streams }) => { audio.srcObject = streams[0]; });
 * client.on("chat", (m) => show(m));
 * await client.connect();
 * await client.call(client.peers[0].peer_id, localStream);
 * const ack = await client.sendChat("hello");
 * ```
 */
export class CallingClient extends ReconnectingSocket {
  /** @param {import("./calling-client.js").CallingClientOptions} options */
  constructor(options) {
    super(options, { defaultPath: "/v1/ws", readyType: "welcome" });
    this._iceServers = Array.isArray(options.iceServers) ? options.iceServers : null;
    this._rtcConfig = options.rtcConfig || {};
    this._RTCPeerConnection = options.RTCPeerConnection || globalThis.RTCPeerConnection;
    this._MediaStream = options.MediaStream || globalThis.MediaStream;
    this._statsIntervalMs = options.statsIntervalMs ?? 5000;
    this._pingIntervalMs = options.pingIntervalMs;

    this._peerId = null;
    this._roomId = null;
    this._callId = null;
    this._role = null;
    this._name = null;
    this._peers = [];
    this._welcome = null;
    this._resume = new _ResumeState();
    this._chats = new _PendingChats({
      ackTimeoutMs: options.chatAckTimeoutMs ?? 10000,
      retries: options.chatRetries ?? 2,
      timers: this._timers,
      send: (text) => this._sendText(text),
      canSend: () => this._state === "connected",
    });
    this._typing = new _TypingState({
      timeoutMs: options.typingTimeoutMs ?? 3000,
      timers: this._timers,
      send: (typing) => {
        if (this._state === "connected") this._send("typing", { typing });
      },
    });
    /** peerId → {pc, queue, sessionId, chain, statsBase} */
    this._calls = new Map();
    /** peerId → {offer, queue, sessionId} for offers not yet accepted */
    this._offers = new Map();
    /** peerId → the SDP session id of the last call with that peer that ended here */
    this._endedSessions = new Map();
    this._statsTimer = null;
    this._pingTimer = null;
    this._awaitingPong = false;
    /** Relays to peers in their reconnect grace (peer-reconnecting … peer-resumed). */
    this._relays = new _RelayHold({ limit: options.heldRelayLimit ?? 100 });
    this._rpc = new _RpcCalls({
      timers: this._timers,
      send: (type, payload, to) => this._send(type, payload, to),
      newId: () => newClientId(Math.random),
      ackTimeoutMs: options.rpcAckTimeoutMs,
      maxPayloadBytes: options.rpcMaxPayloadBytes,
    });
    this._ice = {
      windowMs: options.iceRestartWindowMs ?? 15000,
      debounceMs: options.iceDisconnectedDebounceMs ?? 2000,
      retryMs: options.iceRestartRetryMs ?? 5000,
    };
    // Where `pagehide` and `online` come from, and the Network Information API's `change`; null
    // turns them off (tests pass fakes).
    this._page = options.window !== undefined ? options.window : globalThis.window ?? null;
    const nav = globalThis.navigator;
    this._network = options.network !== undefined ? options.network : (nav && nav.connection) || null;
    this._pageListeners = null;
  }

  /**
   * Opens the socket; resolves with `welcome`. Also listens to the page: `pagehide` says `leave`
   * and closes (a closed tab is not a network blip), `online` and a network change restart ICE.
   */
  connect(token) {
    const result = super.connect(token);
    if (this._state === "connecting") this._listenToPage();
    return result;
  }

  /** Our peer id (`welcome.peer_id`), or null before the first welcome. */
  get peerId() {
    return this._peerId;
  }

  /** The room: `welcome.room_id`, or before the first welcome the token's `room_id` claim. */
  get roomId() {
    return this._roomId || _roomIdFromToken(this._tokenValue);
  }

  /** `welcome.call_id`. */
  get callId() {
    return this._callId;
  }

  /** `welcome.role`. */
  get role() {
    return this._role;
  }

  /** `welcome.name`. */
  get name() {
    return this._name;
  }

  /** The other peers `{peer_id, role, name, reconnecting?}`, in join order (a copy); `reconnecting: true` while a peer is in its reconnect grace. */
  get peers() {
    return this._peers.slice();
  }

  /** Highest chat seq seen. */
  get lastSeq() {
    return this._resume.lastSeq;
  }

  /** The last welcome payload (plus `resumed`), or null. */
  get welcome() {
    return this._welcome;
  }

  /** STUN/TURN servers for a peer connection: `iceServers` if given, else `GET /v1/ice`. */
  async fetchIceServers() {
    if (this._iceServers) return this._iceServers;
    const answer = await httpRequest(this._fetch, "GET", `${_httpBase(this._url)}/v1/ice`, { token: this._tokenValue });
    if (answer.status !== 200) throw problemError(answer.status, answer.body, answer.headers);
    return Array.isArray(answer.body && answer.body.ice_servers) ? answer.body.ice_servers : [];
  }

  /**
   * Calls `peerId`: a new peer connection with the stream's tracks (one stream, so the callee's
   * `track` event carries all of them in `streams[0]`), then the offer. Resolves with the peer
   * connection once the offer is sent. A call already up with that peer is replaced.
   * @param {string} peerId
   * @param {MediaStream|MediaStreamTrack[]|null} [stream]
   */
  async call(peerId, stream) {
    this._requireConnected();
    if (typeof peerId !== "string" || peerId === "") throw invalidArgument("peerId is required");
    if (this._calls.has(peerId)) {
      // Tell the peer first, so that it ends its side before our new offer arrives (frames to one
      // peer keep their order) instead of taking the offer for a renegotiation of the old call.
      this._endCall(peerId, "local");
      this._sendRelay("data", { kind: "hangup" }, peerId);
    }
    this._offers.delete(peerId);
    const call = this._newCall(peerId, null);
    const pc = await this._preparePeerConnection(call, stream);
    try {
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      if (this._calls.get(peerId) !== call) throw invalidState(`call with ${peerId} ended`);
      const local = pc.localDescription || offer;
      this._sendRelay("offer", { sdp: _withStreamId(local.sdp, `local-${this.peerId}`), type: "offer" }, peerId);
      return pc;
    } catch (error) {
      if (this._calls.get(peerId) === call) this._endCall(peerId, "failed");
      throw mediaError(error);
    }
  }

  /**
   * Ends the call with `peerId` (closes its peer connection, emits `hangup {reason:"local"}`);
   * `notify` (default true) sends `data {kind:"hangup"}` to it.
   */
  hangup(peerId, notify = true) {
    const hadOffer = this._offers.delete(peerId);
    const hadCall = this._endCall(peerId, "local");
    if (!hadCall && hadOffer) this._events.emit("hangup", { peerId, reason: "local" });
    if (notify && this._state === "connected") this._sendRelay("data", { kind: "hangup" }, peerId);
  }

  /** The peer connection of the call with `peerId`, if one is up. */
  connection(peerId) {
    const call = this._calls.get(peerId);
    return call && call.pc ? call.pc : undefined;
  }

  /** Sends `data` to `to`, or to every other peer. Throws `not_connected`. */
  sendData(payload, to) {
    this._requireConnected();
    if (typeof to === "string" && to !== "") this._sendRelay("data", payload, to);
    else this._send("data", payload, to);
  }

  /**
   * Asks `to` to run `method` with `payload` (a string); resolves with the handler's result (a
   * string) or rejects with an `RpcError` (docs/protocol.md "RPC"): 1401 not in the room, 1402
   * payload too large, 1501 no ack within `rpcAckTimeoutMs`, 1502 no response within `timeoutMs`,
   * 1503 the peer left, 1505 not connected or refused, 1400 no such method there, or the handler's
   * own error.
   * @param {string} to
   * @param {string} method
   * @param {string} [payload]
   * @param {number} [timeoutMs]
   * @returns {Promise<string>}
   */
  performRpc(to, method, payload = "", timeoutMs = 10000) {
    return this._rpc.perform(to, method, payload, timeoutMs, this._state === "connected");
  }

  /**
   * Answers `rpc-request`s for `method` with `handler({requestId, callerId, payload,
   * responseTimeoutMs})`, whose result (a string, or a Promise of one) is the response. A thrown
   * `RpcError` goes to the caller as it is; anything else thrown as 1500 with its message.
   * Registering a method again replaces its handler.
   * @param {string} method
   * @param {(data: {requestId: string, callerId: string, payload: string, responseTimeoutMs: number}) => string|Promise<string>} handler
   */
  registerRpcMethod(method, handler) {
    this._rpc.register(method, handler);
  }

  /** Stops answering `method`: later requests for it get 1400. */
  unregisterRpcMethod(method) {
    this._rpc.unregister(method);
  }

  /**
   * Sends a chat message; resolves with its ack `{seq, client_id, ts}` once committed. Without an
   * ack within `chatAckTimeoutMs` the same client_id is sent again (up to `chatRetries` times);
   * after a reconnect every pending message is sent again (free). A failed ack rejects at once
   * (440 empty, 441 too long, 442 bad meta); 503 is retried after 1 s. While connecting or
   * reconnecting the message waits.
   * `replyTo` names the seq of the message this one answers (`reply_to`).
   * @param {string} text
   * @param {{meta?: object|null, clientId?: string, replyTo?: number|null}} [options]
   */
  sendChat(text, options = {}) {
    if (typeof text !== "string") return Promise.reject(invalidArgument("text must be a string"));
    const replyTo = options.replyTo === undefined ? null : options.replyTo;
    if (replyTo !== null && !isSeq(replyTo)) return Promise.reject(invalidArgument("replyTo must be an integer ≥ 1"));
    return this._submitChatOp("chat", options, () => {
      const body = { text };
      if (options.meta !== undefined && options.meta !== null) body.meta = options.meta;
      if (replyTo !== null) body.reply_to = replyTo;
      return body;
    });
  }

  /**
   * Replaces the text (and meta) of our message `seq` (`chat-edit`); resolves with the edit's own
   * ack once committed. Same retries as sendChat; 443 unknown target, 444 not ours, deleted or
   * past the edit window.
   * @param {number} seq
   * @param {string} text
   * @param {{meta?: object|null, clientId?: string}} [options]
   */
  editChat(seq, text, options = {}) {
    if (!isSeq(seq)) return Promise.reject(invalidArgument("seq must be an integer ≥ 1"));
    if (typeof text !== "string") return Promise.reject(invalidArgument("text must be a string"));
    return this._submitChatOp("chat-edit", options, () => {
      const body = { target: seq, text };
      if (options.meta !== undefined && options.meta !== null) body.meta = options.meta;
      return body;
    });
  }

  /**
   * Deletes message `seq` (`chat-delete`: ours, or anyone's with a moderator token); the server
   * erases its content. Resolves with the delete's own ack. Same retries as sendChat.
   * @param {number} seq
   * @param {{clientId?: string}} [options]
   */
  deleteChat(seq, options = {}) {
    if (!isSeq(seq)) return Promise.reject(invalidArgument("seq must be an integer ≥ 1"));
    return this._submitChatOp("chat-delete", options, () => ({ target: seq }));
  }

  /**
   * Adds our reaction `key` (a short emoji or word) to message `seq` (`chat-react`). Adding one we
   * already have is acked and changes nothing. 445 for a bad key or too many keys.
   * @param {number} seq
   * @param {string} key
   * @param {{clientId?: string}} [options]
   */
  react(seq, key, options = {}) {
    return this._reaction(seq, key, false, options);
  }

  /**
   * Removes our reaction `key` from message `seq` (`chat-react` with `remove: true`).
   * @param {number} seq
   * @param {string} key
   * @param {{clientId?: string}} [options]
   */
  unreact(seq, key, options = {}) {
    return this._reaction(seq, key, true, options);
  }

  _reaction(seq, key, remove, options) {
    if (!isSeq(seq)) return Promise.reject(invalidArgument("seq must be an integer ≥ 1"));
    if (typeof key !== "string" || key === "") return Promise.reject(invalidArgument("key must be a non-empty string"));
    return this._submitChatOp("chat-react", options, () => {
      const body = { target: seq, key };
      if (remove) body.remove = true;
      return body;
    });
  }

  /** Checks what every chat operation shares (state, meta, client_id), then queues it in the ledger. */
  _submitChatOp(type, options, makeBody) {
    if (this._state === "idle" || this._state === "closed") return Promise.reject(notConnected());
    const meta = options.meta === undefined ? null : options.meta;
    if (meta !== null && (typeof meta !== "object" || Array.isArray(meta))) {
      return Promise.reject(new CallingError("meta must be an object", { code: 442, retryable: false }));
    }
    const clientId = options.clientId === undefined ? newClientId(this._random) : options.clientId;
    if (typeof clientId !== "string" || clientId === "" || utf8Length(clientId) > MAX_CLIENT_ID_BYTES) {
      return Promise.reject(new CallingError(`client_id must be 1–${MAX_CLIENT_ID_BYTES} bytes`, { code: 422, retryable: false }));
    }
    return this._chats.addOp(clientId, type, makeBody());
  }

  /** Typing indicator: only changes are sent; `true` turns itself off after `typingTimeoutMs`. */
  setTyping(on) {
    this._typing.set(Boolean(on), this._state === "connected");
  }

  /** Moves our read marker to `seq` (others get `read`). Throws `not_connected`. */
  markRead(seq) {
    this._requireConnected();
    if (!Number.isInteger(seq) || seq < 0) throw invalidArgument("seq must be an integer ≥ 0");
    this._send("read", { seq });
  }

  /**
   * One page of history, `GET /v1/rooms/{room}/messages`, with this client's token. Works before
   * connect() (the room comes from the token). Does not change `lastSeq` and emits nothing.
   * `sinceSeq` pages forward (oldest first), `beforeSeq` backward (newest first, `next_before_seq`);
   * each message is as it is now (edited text, tombstone, reactions); `includeEdits` adds `edits`.
   * @param {{sinceSeq?: number, beforeSeq?: number, limit?: number, includeEdits?: boolean}} [options]
   */
  async fetchMessages({ sinceSeq, beforeSeq, limit = 50, includeEdits = false } = {}) {
    const room = this.roomId;
    if (!room) throw new CallingError("the token has no room_id claim", { code: "invalid_token", retryable: false });
    if (sinceSeq !== undefined && beforeSeq !== undefined) throw invalidArgument("give sinceSeq or beforeSeq, not both");
    const backward = beforeSeq !== undefined;
    const cursor = backward ? `before_seq=${encodeURIComponent(beforeSeq)}` : `since_seq=${encodeURIComponent(sinceSeq ?? 0)}`;
    const edits = includeEdits ? "&include=edits" : "";
    const url = `${_httpBase(this._url)}/v1/rooms/${encodeURIComponent(room)}/messages?${cursor}&limit=${encodeURIComponent(limit)}${edits}`;
    const answer = await httpRequest(this._fetch, "GET", url, { token: this._tokenValue });
    if (answer.status !== 200 || !answer.body || typeof answer.body !== "object") throw problemError(answer.status, answer.body, answer.headers);
    const body = answer.body;
    const page = {
      room_id: body.room_id ?? room,
      messages: Array.isArray(body.messages) ? body.messages.map(historyMessage).filter((m) => m !== null) : [],
      next_since_seq: body.next_since_seq ?? sinceSeq ?? 0,
      has_more: Boolean(body.has_more),
      last_seq: body.last_seq ?? 0,
      limit: body.limit ?? limit,
    };
    if (backward) page.next_before_seq = body.next_before_seq ?? beforeSeq;
    return page;
  }

  /**
   * The rooms of the token's peer id, most recent activity first (`GET /v1/me/rooms`), each with
   * `last_seq`, `last_ts`, `last_message`, `read_seq` and `unread`. Needs a user token (scope
   * `user`, no room): make a client with it and call this without connect().
   * @param {{limit?: number, cursor?: string}} [options]
   */
  async inbox({ limit, cursor } = {}) {
    const query = [];
    if (limit !== undefined) query.push(`limit=${encodeURIComponent(limit)}`);
    if (cursor !== undefined && cursor !== null) query.push(`cursor=${encodeURIComponent(cursor)}`);
    const url = `${_httpBase(this._url)}/v1/me/rooms${query.length ? `?${query.join("&")}` : ""}`;
    const answer = await httpRequest(this._fetch, "GET", url, { token: this._tokenValue });
    if (answer.status !== 200 || !answer.body || typeof answer.body !== "object") throw problemError(answer.status, answer.body, answer.headers);
    const body = answer.body;
    const page = { rooms: Array.isArray(body.rooms) ? body.rooms : [], has_more: Boolean(body.has_more) };
    if (typeof body.next_cursor === "string") page.next_cursor = body.next_cursor;
    return page;
  }

  // --- socket hooks ----------------------------------------------------------------------------

  _socketParams() {
    const from = this._resume.resumeFrom();
    return { last_seq: from === null ? null : from };
  }

  _localRefusal() {
    const claims = _decodeJwtPayload(this._tokenValue);
    if (!claims || typeof claims.room_id !== "string" || claims.room_id === "") {
      return new CallingError("the token has no room_id", { code: "token_no_room", status: 403, retryable: false });
    }
    if (typeof claims.scope === "string" && !claims.scope.split(" ").includes("room")) {
      return new CallingError("the token's scope lacks room", { code: "token_wrong_scope", status: 403, retryable: false });
    }
    return null;
  }

  _beforeSocketEnd() {
    this._stopTimers();
    this._typing.reset();
    this._rejectPongs(notConnected());
  }

  _onSessionEnd(error) {
    this._stopTimers();
    this._endAllCalls("disconnect");
    this._relays.clear();
    this._chats.rejectAll(error);
    this._rpc.failAll(error ? error.message : "disconnected");
    this._unlistenToPage();
  }

  _beforeClose() {
    // Without it the server would hold our seat for its reconnect grace and tell the room we are
    // reconnecting; close 1000 says the same, but a page that is going away may not get it out.
    this._send("leave");
  }

  // --- page and network ------------------------------------------------------------------------

  _listenToPage() {
    if (this._pageListeners) return;
    const listeners = [];
    const add = (target, event, handler) => {
      if (!target || typeof target.addEventListener !== "function") return;
      target.addEventListener(event, handler);
      listeners.push(() => target.removeEventListener(event, handler));
    };
    add(this._page, "pagehide", () => this.disconnect());
    add(this._page, "online", () => this._networkChanged());
    add(this._network, "change", () => this._networkChanged());
    this._pageListeners = listeners;
  }

  _unlistenToPage() {
    const listeners = this._pageListeners;
    this._pageListeners = null;
    if (listeners) for (const off of listeners) off();
  }

  _networkChanged() {
    for (const call of this._calls.values()) if (call.recovery) call.recovery.onNetworkChange();
  }

  _onReady(payload) {
    const { resumed, gapFill } = this._resume.onWelcome(payload);
    this._peerId = payload.peer_id ?? null;
    this._roomId = payload.room_id ?? null;
    this._callId = payload.call_id ?? null;
    this._role = payload.role ?? null;
    this._name = payload.name ?? null;
    this._welcome = { ...payload, resumed };
    const roster = Array.isArray(payload.peers) ? payload.peers.filter((p) => p && typeof p.peer_id === "string") : [];
    const before = this._peers;
    this._peers = roster.slice();
    this._setState("connected");
    this._events.emit("connected", this._welcome);
    // A peer listed `reconnecting: true` is in its grace: hold relays to it (the frames for it that
    // we did not see, peer-reconnecting or peer-resumed, went to our old socket). A held peer
    // listed without it came back while we were away: no peer-resumed will come, send now.
    for (const p of roster) {
      if (p.reconnecting === true) this._relays.hold(p.peer_id);
      else for (const text of this._relays.release(p.peer_id)) this._sendText(text);
    }
    if (resumed) {
      // The roster may have changed while we were away: report the difference, then keep the
      // calls whose peer is still here and end (with a hangup event) those whose peer is not.
      const after = new Set(roster.map((p) => p.peer_id));
      const had = new Set(before.map((p) => p.peer_id));
      for (const gone of before) {
        if (after.has(gone.peer_id)) continue;
        this._rpc.peerLeft(gone.peer_id);
        this._events.emit("peer-left", { peer_id: gone.peer_id });
      }
      for (const joined of roster) if (!had.has(joined.peer_id)) this._events.emit("peer-joined", joined);
      const { ended, cancelled, kept } = _reconcileCalls(this._calls.keys(), this._offers.keys(), roster);
      for (const id of cancelled) this._cancelOffer(id);
      for (const id of ended) this._peerGone(id);
      for (const id of this._relays.heldPeers()) if (!after.has(id)) this._relays.drop(id);
      for (const id of kept) {
        const call = this._calls.get(id);
        if (call && call.recovery && call.pc) call.recovery.onSignalingResumed(mediaHealthy(call.pc));
      }
    }
    const waiter = this._takeConnectWaiter();
    if (waiter) waiter.resolve(this._welcome);
    // Everything not acked yet, oldest first, same client_ids. The server reads these after the
    // join, so the replay (which may already hold some of them) comes first.
    this._chats.resendAll();
    this._startTimers(payload.ping_interval_ms);
    if (gapFill) this._startGapFill();
  }

  _onFrame(type, json, payload) {
    const from = typeof json.from === "string" ? json.from : null;
    switch (type) {
      case "error": {
        const error = this._frameError(json, payload);
        if (RPC_TYPES.has(error.frameType) && this._rpc.refused(error, payload)) return;
        if (error.code === PEER_RECONNECTING && RELAY_TYPES.has(error.frameType)) {
          // Sent again on peer-resumed, dropped on peer-left: nothing for the app to do. The error
          // names the refused type only; _RelayHold finds the frame by the order of our sends.
          if (this._relays.refused(error.frameType) !== null) return;
        }
        this._events.emit("error", error);
        if (CHAT_OP_TYPES.has(error.frameType) && !error.retryable) {
          // The frame names no client_id; the latest operation of that type sent is the one
          // refused (our own checks make this rare: client_id and text are validated before sending).
          const id = this._chats.ids().filter((pending) => this._chats.typeOf(pending) === error.frameType).pop();
          if (id) this._chats.reject(id, error);
        }
        return;
      }
      case "chat-ack": {
        const id = payload && payload.client_id;
        if (typeof id !== "string") return;
        if (json.error) {
          const error = this._frameError(json, { type: this._chats.typeOf(id) ?? "chat" });
          this._events.emit("error", error);
          this._chats.failAck(id, error);
          return;
        }
        if (typeof payload.seq !== "number") return;
        this._resume.markSeen(payload.seq);
        this._chats.resolve(id, { seq: payload.seq, client_id: id, ts: payload.ts ?? 0 });
        return;
      }
      case "chat": {
        const message = chatMessage(payload, from);
        if (!message) return;
        const { deliver, gapFill } = this._resume.onChat(message.seq);
        if (deliver) this._deliverChat(message);
        if (gapFill) this._startGapFill();
        return;
      }
      case "chat-edit":
      case "chat-delete":
      case "chat-react": {
        const op = chatOperation(type, payload, from);
        if (!op) return;
        // Operations have seqs of their own: the same dedupe, and the replay counts them.
        const { deliver, gapFill } = this._resume.onChat(op.event.seq);
        if (deliver) this._deliverOp(op);
        if (gapFill) this._startGapFill();
        return;
      }
      case "typing":
        if (from && payload && typeof payload.typing === "boolean") this._events.emit("typing", { from, typing: payload.typing });
        return;
      case "read":
        if (from && payload && typeof payload.seq === "number") this._events.emit("read", { from, seq: payload.seq });
        return;
      case "peer-joined": {
        if (!payload || typeof payload.peer_id !== "string") return;
        const info = { peer_id: payload.peer_id, role: payload.role ?? "peer", name: payload.name ?? null };
        this._peers = this._peers.filter((p) => p.peer_id !== info.peer_id).concat([info]);
        this._events.emit("peer-joined", info);
        return;
      }
      case "peer-left": {
        const id = (payload && payload.peer_id) || from;
        if (typeof id !== "string") return;
        this._peers = this._peers.filter((p) => p.peer_id !== id);
        this._relays.drop(id);
        this._peerGone(id);
        this._rpc.peerLeft(id);
        this._events.emit("peer-left", { peer_id: id });
        return;
      }
      case "peer-reconnecting": {
        // The peer's socket dropped; the server holds its seat. Its call stays up (media is peer
        // to peer), and relays to it wait here until peer-resumed.
        const id = (payload && payload.peer_id) || from;
        if (typeof id !== "string") return;
        this._relays.hold(id);
        this._peers = this._peers.map((p) => (p.peer_id === id ? { ...p, reconnecting: true } : p));
        this._events.emit("peer-reconnecting", { peer_id: id });
        return;
      }
      case "peer-resumed": {
        const id = (payload && payload.peer_id) || from;
        if (typeof id !== "string") return;
        for (const text of this._relays.release(id)) this._sendText(text);
        this._peers = this._peers.map((p) => {
          if (p.peer_id !== id || !p.reconnecting) return p;
          const { reconnecting, ...rest } = p;
          return rest;
        });
        this._events.emit("peer-resumed", { peer_id: id });
        const call = this._calls.get(id);
        if (call && call.recovery && call.pc) call.recovery.onSignalingResumed(mediaHealthy(call.pc));
        return;
      }
      case "offer":
        if (from && payload && typeof payload.sdp === "string") this._handleOffer(from, payload);
        return;
      case "answer":
        if (from && payload && typeof payload.sdp === "string") this._handleAnswer(from, payload);
        return;
      case "candidate":
        if (from && payload && typeof payload.candidate === "string") this._handleCandidate(from, payload);
        return;
      case "data":
        if (from) this._handleData(from, payload);
        return;
      case "rpc-request":
      case "rpc-ack":
      case "rpc-response":
        this._rpc.receive(type, from, payload);
        return;
      case "meter":
        this._events.emit("meter", payload || {});
        if (payload && payload.state === "ended") this._events.emit("consultation-ended", payload);
        return;
      default:
        // Anything newer than this SDK.
    }
  }

  _handlePong(payload) {
    this._awaitingPong = false;
    super._handlePong(payload);
  }

  // --- chat internals --------------------------------------------------------------------------

  _deliverChat(message) {
    if (message.from === this._peerId && this._chats.has(message.client_id)) {
      // Our own message in a resume replay: committed, its ack was lost with the socket.
      this._chats.resolve(message.client_id, { seq: message.seq, client_id: message.client_id, ts: message.ts });
      return;
    }
    this._events.emit("chat", message);
  }

  _deliverOp({ name, event }) {
    if (event.from === this._peerId && this._chats.has(event.client_id)) {
      // Our own operation in a resume replay: committed, its ack was lost with the socket.
      this._chats.resolve(event.client_id, { seq: event.seq, client_id: event.client_id, ts: event.ts });
      return;
    }
    this._events.emit(name, event);
  }

  /** The replay was capped (`recovered: false`): page the rest over REST through the same dedupe. */
  _startGapFill() {
    const gen = this._gen;
    let cursor = this._resume.gapStart();
    const run = async () => {
      for (;;) {
        const page = await this.fetchMessages({ sinceSeq: cursor, limit: 200 });
        if (gen !== this._gen) return;
        // Messages as they are now: operations in the gap are folded into them (edited text,
        // tombstone, reactions), not reported one by one.
        for (const message of page.messages) {
          if (this._resume.accept(message.seq)) this._deliverChat(message);
        }
        const more = page.has_more && page.next_since_seq > cursor;
        this._resume.setGapCursor(more ? page.next_since_seq : null);
        if (!more) return;
        cursor = page.next_since_seq;
      }
    };
    run().catch((error) => {
      if (gen === this._gen) this._events.emit("error", error instanceof CallingError ? error : new CallingError(String(error), { code: "http_error", retryable: true }));
    });
  }

  // --- timers ----------------------------------------------------------------------------------

  _startTimers(serverPingMs) {
    this._stopTimers();
    if (this._statsIntervalMs > 0) {
      this._statsTimer = this._timers.setInterval(() => this._collectStats(), this._statsIntervalMs);
    }
    const interval = this._pingIntervalMs ?? (Number(serverPingMs) > 0 ? Number(serverPingMs) : 25000);
    if (interval > 0) {
      this._pingTimer = this._timers.setInterval(() => this._pingTick(), interval);
    }
  }

  _stopTimers() {
    if (this._statsTimer !== null) this._timers.clearInterval(this._statsTimer);
    if (this._pingTimer !== null) this._timers.clearInterval(this._pingTimer);
    this._statsTimer = null;
    this._pingTimer = null;
    this._awaitingPong = false;
  }

  _pingTick() {
    if (this._state !== "connected") return;
    if (this._awaitingPong) {
      // The previous ping was never answered: the connection is dead (half-open TCP). Drop it
      // and reconnect, as a close without a close frame would.
      this._abandonSocket();
      this._afterSocketEnd(1006, "no pong", new CallingError("ping unanswered", { code: "closed", closeCode: 1006, retryable: true }));
      return;
    }
    this._awaitingPong = true;
    this._ping(undefined, false).catch(() => {});
  }

  async _collectStats() {
    if (this._state !== "connected") return;
    const gen = this._gen;
    for (const [peerId, call] of Array.from(this._calls)) {
      if (!call.pc || typeof call.pc.getStats !== "function") continue;
      let report;
      try {
        report = await call.pc.getStats();
      } catch {
        continue;
      }
      if (gen !== this._gen || this._calls.get(peerId) !== call || this._state !== "connected") continue;
      const { sample, bytes } = _statsFromReport(report, call.statsBase);
      call.statsBase = bytes;
      if (sample.rtt_ms === null && sample.jitter_ms === null && sample.packet_loss === null && sample.bitrate_kbps === null) continue;
      this._events.emit("stats", { peerId, ...sample });
      this._send("stats", _clampStats(sample));
    }
  }

  // --- media internals -------------------------------------------------------------------------

  _newCall(peerId, sessionId) {
    const call = { peerId, pc: null, queue: new _CandidateQueue(), sessionId, chain: Promise.resolve(), statsBase: null };
    this._calls.set(peerId, call);
    return call;
  }

  async _preparePeerConnection(call, stream) {
    let iceServers = [];
    try {
      iceServers = await this.fetchIceServers();
    } catch (error) {
      // Without STUN/TURN a call can still work on a LAN; tell the app and go on.
      this._events.emit("error", error instanceof CallingError ? error : new CallingError(String(error), { code: "network", retryable: true }));
    }
    if (this._calls.get(call.peerId) !== call) throw invalidState(`call with ${call.peerId} ended`);
    const pc = newPeerConnection(this._RTCPeerConnection, this._rtcConfig, iceServers);
    call.pc = pc;
    const peerId = call.peerId;
    pc.onicecandidate = (event) => {
      if (this._calls.get(peerId) !== call || !event.candidate || this._state !== "connected") return;
      this._sendRelay("candidate", _candidatePayload(event.candidate), peerId);
    };
    pc.ontrack = (event) => {
      if (this._calls.get(peerId) !== call) return;
      this._events.emit("track", { peerId, track: event.track, streams: event.streams || [] });
    };
    if (!call.sessionId) {
      // A room call outlives ICE trouble for iceRestartWindowMs; the side that offered restarts
      // ICE. (An HTTP session's caller restarts on its own, with PATCH or a new POST.)
      call.recovery = new _IceRecovery({
        restarter: !call.accepted,
        ...this._ice,
        timers: this._timers,
        restart: () => this._restartIce(call),
        giveUp: () => this._giveUpCall(call),
        canGiveUp: () => !this._relays.isHeld(peerId),
      });
      pc.oniceconnectionstatechange = () => {
        if (this._calls.get(peerId) === call && call.recovery) call.recovery.onIceState(pc.iceConnectionState);
      };
    }
    pc.onconnectionstatechange = () => {
      if (this._calls.get(peerId) !== call) return;
      const state = pc.connectionState;
      this._events.emit("connection-state", { peerId, state });
      if (call.recovery && state !== "closed") {
        call.recovery.onIceState(state);
        return;
      }
      if (state === "failed" || state === "closed") {
        // An HTTP session is ended by the server only when told (docs/protocol.md "HTTP sessions").
        if (call.sessionId && this._state === "connected") this._send("data", { kind: "hangup" }, peerId);
        this._endCall(peerId, state);
      }
    };
    addStream(pc, stream, this._MediaStream);
    return pc;
  }

  _handleOffer(from, payload) {
    const sessionId = typeof payload.session_id === "string" ? payload.session_id : null;
    const call = this._calls.get(from);
    if (call && call.pc && call.accepted && call.sessionId === sessionId && call.pc.connectionState !== "closed") {
      // A new offer on a live call (HTTP session renegotiation, an ICE restart): answer it on
      // the same peer connection.
      enqueue(call, async () => {
        await call.pc.setRemoteDescription({ type: "offer", sdp: payload.sdp });
        const answer = await call.pc.createAnswer();
        await call.pc.setLocalDescription(answer);
        if (payload.transport) await waitForGathering(call.pc, 1000, this._timers);
        if (this._calls.get(from) !== call) return;
        const local = call.pc.localDescription || answer;
        const out = { sdp: _withStreamId(local.sdp, `local-${this.peerId}`), type: "answer" };
        if (sessionId) out.session_id = sessionId;
        this._sendRelay("answer", out, from);
      }).catch((error) => this._events.emit("error", mediaError(error)));
      return;
    }
    const origin = _sdpSessionId(payload.sdp);
    if (!call && !sessionId && origin !== null && this._endedSessions.get(from) === origin) {
      // A renegotiation (an ICE restart) of the call with this peer that already ended here,
      // delivered late (it waited in a stalled socket while the network was down): not a new call.
      // Tell the other side again that the call is over, in case it is still trying.
      this._sendRelay("data", { kind: "hangup" }, from);
      return;
    }
    const entry = { offer: payload, queue: new _CandidateQueue(), sessionId };
    this._offers.set(from, entry);
    this._events.emit("incoming", {
      peerId: from,
      offer: payload,
      accept: (stream) => this._accept(from, entry, stream),
      reject: () => this._reject(from, entry),
    });
  }

  async _accept(from, entry, stream) {
    if (this._offers.get(from) !== entry) throw invalidState(`no incoming call from ${from}`);
    this._requireConnected();
    this._offers.delete(from);
    if (this._calls.has(from)) this._endCall(from, "replaced");
    const call = this._newCall(from, entry.sessionId);
    call.queue = entry.queue; // candidates that came with the offer
    call.accepted = true;
    try {
      const pc = await this._preparePeerConnection(call, stream);
      await enqueue(call, async () => {
        await pc.setRemoteDescription({ type: "offer", sdp: entry.offer.sdp });
        await this._flushCandidates(call);
        const answer = await pc.createAnswer();
        await pc.setLocalDescription(answer);
        // An HTTP caller has no channel for trickled candidates: the answer must carry them all.
        if (entry.offer.transport) await waitForGathering(pc, 1000, this._timers);
        if (this._calls.get(from) !== call) throw invalidState(`call with ${from} ended`);
        const local = pc.localDescription || answer;
        const out = { sdp: _withStreamId(local.sdp, `local-${this.peerId}`), type: "answer" };
        if (entry.sessionId) out.session_id = entry.sessionId;
        this._sendRelay("answer", out, from);
      });
      return pc;
    } catch (error) {
      if (this._calls.get(from) === call) this._endCall(from, "failed");
      throw mediaError(error);
    }
  }

  _reject(from, entry) {
    if (this._offers.get(from) === entry) this._offers.delete(from);
    entry.queue.clear();
    if (this._state === "connected") this._sendRelay("data", { kind: "reject" }, from);
  }

  _handleAnswer(from, payload) {
    const call = this._calls.get(from);
    if (!call || !call.pc || call.accepted) return;
    enqueue(call, async () => {
      if (this._calls.get(from) !== call) return;
      // An answer sent again after the peer's resume, to an offer already answered.
      if (call.pc.signalingState && call.pc.signalingState !== "have-local-offer") return;
      await call.pc.setRemoteDescription({ type: "answer", sdp: payload.sdp });
      await this._flushCandidates(call);
    }).catch((error) => this._events.emit("error", mediaError(error)));
  }

  _handleCandidate(from, payload) {
    const init = { candidate: payload.candidate, sdpMid: payload.sdpMid ?? null, sdpMLineIndex: payload.sdpMLineIndex ?? null };
    const call = this._calls.get(from);
    const target = call ? call.queue : this._offers.has(from) ? this._offers.get(from).queue : null;
    if (!target) return; // no call with that peer (a late candidate of an ended call)
    if (target.push(init) && call) this._addCandidate(call, init);
  }

  /** Inside a queued operation, right after the remote description: adds the held candidates. */
  async _flushCandidates(call) {
    for (const candidate of call.queue.markReady()) {
      try {
        await call.pc.addIceCandidate(candidate);
      } catch (error) {
        this._events.emit("error", mediaError(error));
      }
    }
  }

  _addCandidate(call, candidate) {
    enqueue(call, async () => {
      if (this._calls.get(call.peerId) !== call) return;
      await call.pc.addIceCandidate(candidate);
    }).catch((error) => this._events.emit("error", mediaError(error)));
  }

  _handleData(from, payload) {
    const kind = payload && typeof payload === "object" ? payload.kind : undefined;
    if (kind === "hangup") {
      // Before our answer it is the caller giving up: the ringing ends as "cancelled".
      if (!this._endCall(from, "remote")) this._cancelOffer(from);
      return;
    }
    if (kind === "reject") {
      this._events.emit("rejected", { peerId: from });
      this._endCall(from, "rejected");
      return;
    }
    if (kind === "replaced") {
      // An HTTP session's caller posted again: its next offer is a new peer connection.
      this._endCall(from, "replaced");
    }
    this._events.emit("data", { from, payload: payload === undefined ? null : payload });
  }

  /** Closes the call with `peerId` and emits `hangup`; false when there was none. */
  _endCall(peerId, reason) {
    const call = this._calls.get(peerId);
    if (!call) return false;
    this._calls.delete(peerId);
    const origin = call.pc && call.pc.remoteDescription ? _sdpSessionId(call.pc.remoteDescription.sdp) : null;
    if (origin !== null) this._endedSessions.set(peerId, origin);
    else this._endedSessions.delete(peerId);
    call.queue.clear();
    if (call.recovery) call.recovery.stop();
    if (call.pc) closeQuietly(call.pc);
    this._events.emit("hangup", { peerId, reason });
    return true;
  }

  /** A ringing offer from `peerId` ends before it was answered: `hangup {reason: "cancelled"}`. */
  _cancelOffer(peerId) {
    const entry = this._offers.get(peerId);
    if (!entry) return false;
    this._offers.delete(peerId);
    entry.queue.clear();
    this._events.emit("hangup", { peerId, reason: "cancelled" });
    return true;
  }

  _peerGone(peerId) {
    this._cancelOffer(peerId);
    this._endCall(peerId, "peer-left");
    this._endedSessions.delete(peerId);
  }

  _endAllCalls(reason) {
    for (const peerId of Array.from(this._calls.keys())) this._endCall(peerId, reason);
    this._offers.clear();
  }

  /**
   * Sends a relay to one peer, or holds it while that peer is in its reconnect grace (sent again
   * on peer-resumed). Returns false when it could not be sent or held.
   */
  _sendRelay(type, payload, to) {
    const text = _buildFrame(type, payload, to);
    if (this._relays.isHeld(to)) {
      if (this._relays.push(to, type, text)) return true;
      this._events.emit("error", new CallingError(`${type} to ${to} dropped: ${to} is reconnecting and heldRelayLimit frames already wait for it`, { code: "relay_overflow", retryable: false, frameType: type }));
      return false;
    }
    if (!this._sendText(text)) return false;
    this._relays.sent(to, type, text);
    return true;
  }

  /**
   * An ICE restart offer on the call's own peer connection, with fresh `/v1/ice` credentials
   * (TURN passwords expire). Skipped while our socket or the peer's is down: the resume asks again.
   */
  _restartIce(call) {
    const peerId = call.peerId;
    if (this._state !== "connected" || this._relays.isHeld(peerId) || !call.pc) return;
    const attempt = call.recovery ? call.recovery.restarts : 1;
    this._events.emit("ice-restart", { peerId, attempt });
    enqueue(call, async () => {
      if (this._calls.get(peerId) !== call) return;
      const pc = call.pc;
      // An earlier restart offer that was never answered (lost with a dead path) is taken back.
      if (pc.signalingState === "have-local-offer") await pc.setLocalDescription({ type: "rollback" });
      else if (pc.signalingState && pc.signalingState !== "stable") return;
      if (typeof pc.setConfiguration === "function") {
        try {
          const iceServers = await this.fetchIceServers();
          pc.setConfiguration({ ...this._rtcConfig, iceServers });
        } catch (error) {
          // The old servers may still do; the restart goes on with them.
          this._events.emit("error", error instanceof CallingError ? error : mediaError(error));
        }
      }
      if (this._calls.get(peerId) !== call || this._state !== "connected") return;
      const offer = await pc.createOffer({ iceRestart: true });
      await pc.setLocalDescription(offer);
      const local = pc.localDescription || offer;
      this._sendRelay("offer", { sdp: _withStreamId(local.sdp, `local-${this.peerId}`), type: "offer" }, peerId);
    }).catch((error) => this._events.emit("error", mediaError(error)));
  }

  /** The give-up window ran out without media: the call ends as "disconnected" (call again). */
  _giveUpCall(call) {
    if (this._calls.get(call.peerId) !== call) return;
    if (this._state === "connected") this._sendRelay("data", { kind: "hangup" }, call.peerId);
    this._endCall(call.peerId, "disconnected");
  }
}

/** Frame types of the acked chat operations (one ledger, one client_id namespace). */
const CHAT_OP_TYPES = new Set(["chat", "chat-edit", "chat-delete", "chat-react"]);

/** A seq as the chat operations take it: an integer ≥ 1. */
function isSeq(value) {
  return Number.isInteger(value) && value >= 1;
}

function chatMessage(payload, from) {
  if (!payload || typeof payload.seq !== "number") return null;
  return {
    seq: payload.seq,
    from: typeof from === "string" ? from : payload.from ?? null,
    client_id: payload.client_id ?? null,
    text: payload.text ?? "",
    meta: payload.meta ?? null,
    ts: payload.ts ?? 0,
    reply_to: typeof payload.reply_to === "number" ? payload.reply_to : null,
    deleted: payload.deleted === true,
  };
}

/** A message of a history page: a chat message plus its state now (edits, tombstone, reactions). */
function historyMessage(raw) {
  const message = chatMessage(raw, raw && raw.from);
  if (!message) return null;
  if (typeof raw.edited_ts === "number") message.edited_ts = raw.edited_ts;
  if (typeof raw.deleted_ts === "number") message.deleted_ts = raw.deleted_ts;
  message.reactions = Array.isArray(raw.reactions) ? raw.reactions : [];
  if (Array.isArray(raw.edits)) message.edits = raw.edits;
  return message;
}

/**
 * A live or replayed `chat-edit`/`chat-delete`/`chat-react` as the event it raises
 * (`chat-edited`, `chat-deleted`, `chat-reaction`), or null when malformed.
 */
function chatOperation(type, payload, from) {
  if (!payload || typeof payload.seq !== "number" || typeof payload.target !== "number") return null;
  const base = {
    from: typeof from === "string" ? from : payload.from ?? null,
    seq: payload.seq,
    ts: payload.ts ?? 0,
    client_id: payload.client_id ?? null,
    target: payload.target,
  };
  switch (type) {
    case "chat-edit":
      return { name: "chat-edited", event: { ...base, text: payload.text ?? "", meta: payload.meta ?? null, deleted: payload.deleted === true } };
    case "chat-delete":
      return { name: "chat-deleted", event: base };
    case "chat-react":
      if (typeof payload.key !== "string") return null;
      return { name: "chat-reaction", event: { ...base, key: payload.key, removed: payload.remove === true } };
    default:
      return null;
  }
}

/**
 * Internal (exported for tests/vectors/client-frames.json). The server refuses out-of-range
 * samples (docs/protocol.md "stats"); keep within them.
 */
export function _clampStats(sample) {
  const clamp = (v, hi) => (v === null ? null : Math.min(Math.max(v, 0), hi));
  return {
    rtt_ms: clamp(sample.rtt_ms, 60000),
    jitter_ms: clamp(sample.jitter_ms, 60000),
    packet_loss: clamp(sample.packet_loss, 1),
    bitrate_kbps: clamp(sample.bitrate_kbps, 1000000),
  };
}

/** Longest wait for a data channel's queue to empty before a close. */
const HANGUP_DRAIN_MS = 500;

/** Resolves once `channel.bufferedAmount` is 0 (polled every 10 ms) or after `maxMs`. */
function drainChannel(channel, maxMs, timers) {
  return new Promise((resolve) => {
    let waited = 0;
    const check = () => {
      if (!(channel.bufferedAmount > 0) || channel.readyState !== "open" || waited >= maxMs) return resolve();
      waited += 10;
      timers.setTimeout(check, 10);
    };
    check();
  });
}

/** Whether ICE says media can flow (`connected`/`completed`). */
function mediaHealthy(pc) {
  const ice = pc.iceConnectionState;
  if (ice === "connected" || ice === "completed") return true;
  return ice === undefined && pc.connectionState === "connected";
}

function mediaError(error) {
  if (error instanceof CallingError) return error;
  return new CallingError(`media: ${error && error.message ? error.message : error}`, { code: "media", retryable: false, cause: error });
}

function addStream(pc, stream, MediaStreamCtor) {
  if (!stream) return [];
  const tracks = Array.isArray(stream) ? stream : typeof stream.getTracks === "function" ? stream.getTracks() : [];
  let owner = Array.isArray(stream) ? null : stream;
  if (!owner && typeof MediaStreamCtor === "function") {
    try {
      owner = new MediaStreamCtor(tracks);
    } catch {
      owner = null;
    }
  }
  for (const track of tracks) {
    if (owner) pc.addTrack(track, owner);
    else pc.addTrack(track);
  }
  return tracks;
}

/** Resolves when ICE gathering is complete or after `ms`, whichever is first. */
function waitForGathering(pc, ms, timers) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      timers.clearTimeout(timer);
      if (typeof pc.removeEventListener === "function") pc.removeEventListener("icegatheringstatechange", onChange);
      resolve();
    };
    const onChange = () => {
      if (pc.iceGatheringState === "complete") finish();
    };
    const timer = timers.setTimeout(finish, ms);
    if (typeof pc.addEventListener === "function") pc.addEventListener("icegatheringstatechange", onChange);
  });
}

// ---------------------------------------------------------------------------------------------
// PresenceClient
// ---------------------------------------------------------------------------------------------

/**
 * Internal. The status an agent last had, for `PresenceClient` to set again after a reconnect
 * (docs/browser.md "PresenceClient"): what the app passed to `setStatus`, then what the server's
 * `status` frames about the agent said (also the server's own changes, like `busy` on `accept`).
 * `note` and `queues` are `undefined` while never known (the server's value is left alone); a
 * `null` note was cleared.
 */
export class _AgentStatusMemory {
  constructor() {
    this._value = null;
  }

  /** `{status, note?, queues?}`, or null while nothing was set or heard. */
  get value() {
    return this._value ? { ...this._value } : null;
  }

  /** `setStatus(status, {note, queues})`, on top of what was remembered. */
  set(status, note, queues) {
    const next = this._value ? { ...this._value } : { status, note: undefined, queues: undefined };
    next.status = status;
    if (note !== undefined) next.note = note;
    if (queues !== undefined) next.queues = Array.isArray(queues) ? queues.slice() : queues;
    this._value = next;
  }

  /** A `status` frame about the agent itself. */
  learn(agent) {
    this._value = { status: agent.status, note: agent.note ?? null, queues: Array.isArray(agent.queues) ? agent.queues.slice() : undefined };
  }

  /** `disconnect()`: nothing to restore any more. */
  forget() {
    this._value = null;
  }

  /** The `status` payload to send after a reconnect whose snapshot lists the agent as `agent` (undefined: not listed), or null when nothing differs. */
  restore(agent) {
    const memory = this._value;
    if (!memory || matchesAgent(memory, agent)) return null;
    const payload = { status: memory.status };
    if (memory.note !== undefined) payload.note = memory.note;
    if (memory.queues !== undefined) payload.queues = memory.queues.slice();
    return payload;
  }
}

/** Whether the server's entry for the agent already is the remembered status (queues in any order). */
function matchesAgent(memory, agent) {
  if (!agent || agent.status !== memory.status) return false;
  if (memory.note !== undefined && memory.note !== (agent.note ?? null)) return false;
  if (memory.queues !== undefined) {
    const mine = Array.isArray(memory.queues) ? memory.queues.slice().sort() : [];
    const theirs = Array.isArray(agent.queues) ? agent.queues.slice().sort() : [];
    if (mine.length !== theirs.length || mine.some((q, k) => q !== theirs[k])) return false;
  }
  return true;
}

/**
 * The presence channel, `/v1/presence` (docs/protocol.md "Presence channel"): agents publish a
 * status and answer call requests, callers ask for calls, dashboards watch every agent and every
 * ringing request. `agents` and `requests` are kept up to date from the frames. Reconnects after
 * a drop with the same backoff as CallingClient (an agent back within the server's grace period
 * keeps its status); 4400 replaced and 4401 token expired (without `refreshToken`) are terminal.
 * `closed` is emitted when the server closed the socket with a close frame, `disconnected` for
 * every end of a socket.
 */
export class PresenceClient extends ReconnectingSocket {
  /** @param {import("./calling-client.js").PresenceClientOptions} options */
  constructor(options) {
    super(options, { defaultPath: "/v1/presence", readyType: "connected" });
    this._queues = Array.isArray(options.queues) ? options.queues.slice() : null;
    this._agents = new Map();
    this._requests = new Map();
    this._peerIdValue = null;
    this._roleValue = null;
    /** The agent's own status, set again after a reconnect to a server that lost it. */
    this._statusMemory = new _AgentStatusMemory();
  }

  /** agent_id → agent `{agent_id, status, note, queues, updated_at}`. */
  get agents() {
    return this._agents;
  }

  /** request_id → ringing request. */
  get requests() {
    return this._requests;
  }

  /** Our id (`connected.peer_id`). */
  get peerId() {
    return this._peerIdValue;
  }

  /** Our role: agent, caller or dashboard. */
  get role() {
    return this._roleValue;
  }

  /** Agent: sets the status (`available`, `busy`, `away`, `offline`), optionally note and queues. */
  setStatus(status, { note, queues } = {}) {
    this._requireConnected();
    this._statusMemory.set(status, note, queues);
    // The frame says only what the app said: a note or queues it left out stay as they are.
    const payload = { status };
    if (note !== undefined) payload.note = note;
    if (queues !== undefined) payload.queues = queues;
    this._send("status", payload);
  }

  /** Closes the socket (1000), no reconnect; the agent's remembered status is forgotten. */
  disconnect() {
    this._statusMemory.forget();
    super.disconnect();
  }

  /** Caller: asks one agent (`agentId`) or a queue for a call. */
  request({ agentId, queue, metadata } = {}) {
    this._requireConnected();
    if ((agentId === undefined) === (queue === undefined)) throw invalidArgument("request needs exactly one of agentId and queue");
    const payload = agentId !== undefined ? { agent_id: agentId } : { queue };
    if (metadata !== undefined) payload.metadata = metadata;
    this._send("request", payload);
  }

  /** Agent: accepts a ringing request. */
  accept(requestId) {
    this._requestFrame("accept", requestId);
  }

  /** Agent: declines a ringing request. */
  decline(requestId) {
    this._requestFrame("decline", requestId);
  }

  /** Caller: withdraws its request. */
  cancel(requestId) {
    this._requestFrame("cancel", requestId);
  }

  _requestFrame(type, requestId) {
    this._requireConnected();
    if (typeof requestId !== "string" || requestId === "") throw invalidArgument("requestId is required");
    this._send(type, { request_id: requestId });
  }

  _socketParams() {
    return { queues: this._queues ? this._queues.join(",") : null };
  }

  _localRefusal() {
    const claims = _decodeJwtPayload(this._tokenValue);
    const scope = claims && typeof claims.scope === "string" ? claims.scope.split(" ") : [];
    if (!scope.includes("presence")) return new CallingError("the token's scope lacks presence", { code: "token_wrong_scope", status: 403, retryable: false });
    if (!claims || !["agent", "dashboard", "caller"].includes(claims.role)) {
      return new CallingError("the token's role is not agent, dashboard or caller", { code: "token_wrong_role", status: 403, retryable: false });
    }
    return null;
  }

  _beforeSocketEnd() {
    this._rejectPongs(notConnected());
  }

  _onSessionEnd() {}

  _emitEnd(code, reason, willReconnect, error, closeFrame) {
    const event = { code, reason, willReconnect, error: error || null };
    if (closeFrame && !this._userClosed) this._events.emit("closed", event);
    this._events.emit("disconnected", event);
  }

  _onReady(payload) {
    this._peerIdValue = payload.peer_id ?? null;
    this._roleValue = payload.role ?? null;
    this._agents = new Map();
    for (const agent of Array.isArray(payload.agents) ? payload.agents : []) {
      if (agent && typeof agent.agent_id === "string") this._agents.set(agent.agent_id, agent);
    }
    this._requests = new Map();
    for (const request of Array.isArray(payload.requests) ? payload.requests : []) {
      if (request && typeof request.request_id === "string") this._requests.set(request.request_id, request);
    }
    this._setState("connected");
    this._events.emit("connected", payload);
    // A restarted server brings the agent back `available` with the URL's queues: set what the
    // agent had again. Back within presence_grace_seconds the server kept it: nothing to send.
    const restore = this._statusMemory.restore(this._agents.get(this._peerIdValue));
    if (restore) this._send("status", restore);
    const waiter = this._takeConnectWaiter();
    if (waiter) waiter.resolve(payload);
  }

  _onFrame(type, json, payload) {
    switch (type) {
      case "status":
        if (payload && typeof payload.agent_id === "string") this._agents.set(payload.agent_id, payload);
        // The server's word about us (also its own changes, like busy on accept) is what to restore.
        if (payload && payload.agent_id === this._peerIdValue && typeof payload.status === "string") {
          this._statusMemory.learn(payload);
        }
        this._events.emit("status", payload || {});
        return;
      case "request":
        if (payload && typeof payload.request_id === "string") this._requests.set(payload.request_id, payload);
        this._events.emit("request", payload || {});
        return;
      case "accepted":
        if (payload && typeof payload.request_id === "string") this._requests.delete(payload.request_id);
        this._events.emit("accepted", payload || {});
        return;
      case "ended":
        if (payload && typeof payload.request_id === "string") this._requests.delete(payload.request_id);
        this._events.emit("ended", payload || {});
        return;
      case "error": {
        const error = this._frameError(json, payload);
        if (payload && typeof payload.request_id === "string") error.requestId = payload.request_id;
        this._events.emit("error", error);
        return;
      }
      default:
    }
  }
}

// ---------------------------------------------------------------------------------------------
// WebCallClient
// ---------------------------------------------------------------------------------------------

/**
 * A browser caller over the webrtc-proxy HTTP session API (docs/protocol.md "HTTP sessions"):
 * POST the offer, get the answering agent's SDP back, trickle later candidates with PATCH,
 * renegotiate with an `application/sdp` PATCH, DELETE to hang up. The `control` data channel
 * carries `status` (connected, ended, replaced), `ping`/`pong`, `mute`, `dtmf` and `hangup`, as
 * the Linux engine speaks them. After the peer connection fails (or stays disconnected for
 * `disconnectedGraceMs`), it first restarts ICE on the same session (an `iceRestart` offer sent
 * by PATCH, answered on the same peer connection); when that is refused (the session is gone:
 * 404, 409, 410…) or media is not back within `restartWindowMs`, a new peer connection is POSTed
 * with the same token and takes the call over ("reconnect by re-POST").
 *
 * ```js
 * const call = new WebCallClient({ baseUrl: `${origin}/webrtc-proxy/${callId}`, accessToken, iceServers });
 * call.on("track", ({ streams }) => { audio.srcObject = streams[0]; });
 * call.on("ended", ({ reason }) => show(reason));
 * await call.start(await navigator.mediaDevices.getUserMedia({ audio: true }));
 * ```
 */
export class WebCallClient extends ClientBase {
  /** @param {import("./calling-client.js").WebCallClientOptions} options */
  constructor(options) {
    if (!options || typeof options.baseUrl !== "string") throw invalidArgument("options.baseUrl is required");
    if (typeof options.accessToken !== "string" || options.accessToken === "") throw invalidArgument("options.accessToken is required");
    super(options);
    let base = options.baseUrl.replace(/\/+$/, "");
    base = base.replace(/^ws:/, "http:").replace(/^wss:/, "https:");
    this._sessionsUrl = `${base}/v1/webrtc/sessions`;
    this._token = options.accessToken;
    this._iceServers = Array.isArray(options.iceServers) ? options.iceServers : [];
    this._rtcConfig = options.rtcConfig || {};
    this._gatherTimeoutMs = options.gatherTimeoutMs ?? 1000;
    this._autoReconnect = options.reconnect !== false;
    this._disconnectedGraceMs = options.disconnectedGraceMs ?? 1000;
    this._restartWindowMs = options.restartWindowMs ?? 2500;
    this._backoff = backoffOptions(options.backoff, { ...DEFAULT_BACKOFF, maxAttempts: 5 });
    this._RTCPeerConnection = options.RTCPeerConnection || globalThis.RTCPeerConnection;

    this._stream = null;
    this._muted = false;
    /** The attempt whose session is live: {pc, control, sessionId, trickle, chain, posted}. */
    this._live = null;
    /** Attempts (live or in flight) whose peer connections we own. */
    this._attempts = new Set();
    /** Bumped by every POST, hangup and end: a POST answered after a later one is void. */
    this._gen = 0;
    this._hungUp = false;
    this._retryAfter = null;
    this._pings = new Map();
    this._graceTimer = null;
    this._reconnecting = false;
  }

  /** The live session's id, or null. */
  get sessionId() {
    return this._live ? this._live.sessionId : null;
  }

  /** The live peer connection, or null. */
  get pc() {
    return this._live ? this._live.pc : null;
  }

  /** Whether mute(true) is in effect. */
  get muted() {
    return this._muted;
  }

  /** `Retry-After` seconds of the last refused request, or null. */
  get retryAfter() {
    return this._retryAfter;
  }

  /**
   * Starts the call: a peer connection with the stream's tracks and the `control` channel, the
   * offer (after up to `gatherTimeoutMs` of ICE gathering) POSTed, the answer applied. Resolves
   * with the session id. Refusals reject with the problem's code (`no_answering_peer`, 503,
   * retryable; `identity_in_use`, 409; …).
   * @param {MediaStream|MediaStreamTrack[]|null} [stream]
   */
  async start(stream) {
    if (this._state !== "idle" && this._state !== "ended") throw invalidState(`start() while ${this._state}`);
    this._stream = stream || null;
    this._hungUp = false;
    this._setState("connecting");
    try {
      return await this._establish();
    } catch (error) {
      if (!this._live) this._setState("ended");
      throw error;
    }
  }

  /**
   * After a network change: a new peer connection POSTed with the same token takes the call over
   * (the agent gets `data {kind:"replaced"}`); the old one is closed once the new answer is in.
   */
  async reconnect() {
    if (this._state === "idle" || this._state === "ended") throw invalidState(`reconnect() while ${this._state}`);
    this._setState("reconnecting");
    return this._establish();
  }

  /** A new offer on the live session (`PATCH` with `application/sdp`), its answer applied. */
  async renegotiate() {
    const live = this._live;
    if (!live) throw invalidState("no live session");
    await this._renegotiate(live, {});
  }

  /** `renegotiate` on `live`, with `createOffer` options (`{iceRestart: true}` for a restart). */
  async _renegotiate(live, offerOptions) {
    await enqueue(live, async () => {
      const offer = await live.pc.createOffer(offerOptions);
      await live.pc.setLocalDescription(offer);
      await waitForGathering(live.pc, this._gatherTimeoutMs, this._timers);
      const sdp = (live.pc.localDescription || offer).sdp;
      let answer;
      try {
        answer = await this._request("PATCH", live.sessionId, { body: sdp, contentType: "application/sdp" }, [200]);
      } catch (error) {
        try {
          await live.pc.setLocalDescription({ type: "rollback" });
        } catch {
          // nothing to roll back
        }
        throw error;
      }
      if (this._live !== live) return;
      await live.pc.setRemoteDescription({ type: "answer", sdp: typeof answer.body === "string" ? answer.body : String(answer.body) });
    });
  }

  /** Mutes or unmutes: `{type:"mute", muted}` on the control channel and local audio tracks disabled. */
  mute(muted) {
    this._muted = Boolean(muted);
    for (const track of localTracks(this._stream)) {
      if (track.kind === "audio") track.enabled = !this._muted;
    }
    const control = this._live && this._live.control;
    if (control && control.readyState === "open") control.send(JSON.stringify({ type: "mute", muted: this._muted }));
  }

  /** Sends each key (`0-9 * # A-D`) as `{type:"dtmf", digit}`. Throws `not_connected` without an open control channel. */
  sendDtmf(digits) {
    const keys = _dtmfDigits(digits);
    const control = this._openControl();
    for (const digit of keys) control.send(JSON.stringify({ type: "dtmf", digit }));
  }

  /** `{type:"ping", ts}`; resolves with the round trip in ms when the `pong` echoes `ts` (10 s timeout). */
  ping() {
    let control;
    try {
      control = this._openControl();
    } catch (error) {
      return Promise.reject(error);
    }
    let ts = this._now();
    while (this._pings.has(ts)) ts += 1;
    return new Promise((resolve, reject) => {
      const timer = this._timers.setTimeout(() => {
        this._pings.delete(ts);
        reject(new CallingError("no pong within 10 s", { code: "timeout", retryable: true }));
      }, 10000);
      this._pings.set(ts, { resolve, reject, timer, sentAt: this._now() });
      control.send(JSON.stringify({ type: "ping", ts }));
    });
  }

  /**
   * Hangs up: `{type:"hangup"}` on the control channel, the peer connection closed, the session
   * DELETEd (a session already gone counts as done). A start still in flight is abandoned and
   * its session deleted when its answer arrives. Emits `ended {reason:"hangup"}`.
   */
  async hangup() {
    this._hungUp = true;
    const live = this._live;
    if (live && live.control && live.control.readyState === "open") {
      try {
        live.control.send(JSON.stringify({ type: "hangup" }));
        // send() only queues: closing the peer connection at once aborts the SCTP association and
        // can drop the hangup, so the agent would learn of it only from the DELETE. Let it drain.
        await drainChannel(live.control, HANGUP_DRAIN_MS, this._timers);
      } catch {
        // channel closing
      }
    }
    const sessionId = live ? live.sessionId : null;
    this._finish("hangup", false);
    if (sessionId) await this._delete(sessionId);
  }

  // --- internals -------------------------------------------------------------------------------

  _setState(state) {
    this._state = state;
  }

  _openControl() {
    const control = this._live && this._live.control;
    if (!control || control.readyState !== "open") throw notConnected();
    return control;
  }

  async _request(method, sessionId, { body, contentType } = {}, expect = [200]) {
    const url = sessionId ? `${this._sessionsUrl}/${encodeURIComponent(sessionId)}` : this._sessionsUrl;
    const answer = await httpRequest(this._fetch, method, url, { token: this._token, body, contentType });
    if (!expect.includes(answer.status)) {
      const error = problemError(answer.status, answer.body, answer.headers);
      this._retryAfter = error.retryAfter ?? null;
      throw error;
    }
    this._retryAfter = null;
    return answer;
  }

  async _delete(sessionId) {
    try {
      await this._request("DELETE", sessionId, {}, [200, 204]);
    } catch (error) {
      if (error.status === 404) return; // session or call already gone
      throw error;
    }
  }

  /** One POST: new peer connection, offer, answer. The previous live attempt is closed after. */
  async _establish() {
    const gen = ++this._gen;
    const pc = newPeerConnection(this._RTCPeerConnection, this._rtcConfig, this._iceServers);
    const control = pc.createDataChannel("control");
    const attempt = { pc, control, sessionId: null, trickle: [], posted: false, chain: Promise.resolve() };
    this._attempts.add(attempt);
    this._wire(attempt);
    const tracks = addStream(pc, this._stream, globalThis.MediaStream);
    for (const track of tracks) if (track.kind === "audio" && this._muted) track.enabled = false;
    let sessionId = null;
    try {
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      await waitForGathering(pc, this._gatherTimeoutMs, this._timers);
      if (gen !== this._gen) throw invalidState("superseded by a later start, reconnect or hangup");
      // Candidates gathered from here on are not in the SDP below: they are trickled.
      attempt.posted = true;
      const sdp = (pc.localDescription || offer).sdp;
      const answer = await this._request("POST", null, { body: JSON.stringify({ identity: "client", sdp }), contentType: "application/json" }, [201]);
      const body = answer.body && typeof answer.body === "object" ? answer.body : {};
      if (typeof body.session_id !== "string" || typeof body.sdp !== "string") {
        throw new CallingError("answer without session_id or sdp", { code: "http_error", status: answer.status, retryable: false });
      }
      sessionId = body.session_id;
      if (gen !== this._gen) {
        // Hung up during the POST: the session we just got must not stay up.
        if (this._hungUp) this._delete(sessionId).catch(() => {});
        throw invalidState("superseded by a later reconnect or hangup");
      }
      attempt.sessionId = sessionId;
      await pc.setRemoteDescription({ type: "answer", sdp: body.sdp });
      if (gen !== this._gen) throw invalidState("superseded by a later reconnect or hangup");
      const previous = this._live;
      this._live = attempt;
      if (previous && previous !== attempt) this._closeAttempt(previous);
      for (const candidate of attempt.trickle.splice(0)) this._patchCandidate(attempt, candidate);
      this._setState(pc.connectionState === "connected" ? "connected" : this._state === "reconnecting" ? "reconnecting" : "connecting");
      if (previous) this._events.emit("session", { sessionId });
      return sessionId;
    } catch (error) {
      if (this._live !== attempt) this._closeAttempt(attempt);
      throw error;
    }
  }

  _wire(attempt) {
    const { pc, control } = attempt;
    pc.onicecandidate = (event) => {
      if (!attempt.posted || !this._attempts.has(attempt)) return;
      const candidate = _candidatePayload(event.candidate);
      if (attempt.sessionId) this._patchCandidate(attempt, candidate);
      else attempt.trickle.push(candidate);
    };
    pc.ontrack = (event) => {
      if (!this._attempts.has(attempt)) return;
      this._events.emit("track", { track: event.track, streams: event.streams || [] });
    };
    pc.onconnectionstatechange = () => {
      if (this._live !== attempt) return;
      const state = pc.connectionState;
      this._events.emit("connection-state", { state });
      // Our own re-POST is under way: the agent tears this connection down when the server hands
      // the seat to the new session; that is not the end of the call.
      if (this._supersededByOwnPost(attempt) && state !== "connected") return;
      if (state === "connected") {
        this._clearGrace();
        this._setState("connected");
        if (attempt.restarted) attempt.restarted();
      } else if (state === "disconnected") {
        if (!this._autoReconnect) return;
        this._clearGrace();
        this._graceTimer = this._timers.setTimeout(() => {
          this._graceTimer = null;
          if (this._live === attempt && pc.connectionState === "disconnected") this._recover();
        }, this._disconnectedGraceMs);
      } else if (state === "failed") {
        if (this._autoReconnect) this._recover();
        else this._finish("failed", true);
      } else if (state === "closed") {
        this._finish("closed", true);
      }
    };
    control.onopen = () => {
      if (this._muted && control.readyState === "open") control.send(JSON.stringify({ type: "mute", muted: true }));
    };
    control.onmessage = (event) => {
      if (!this._attempts.has(attempt)) return;
      let message;
      try {
        message = JSON.parse(typeof event.data === "string" ? event.data : "");
      } catch {
        return;
      }
      if (!message || typeof message.type !== "string") return;
      this._events.emit("control", message);
      if (message.type === "status" && typeof message.state === "string") {
        this._events.emit("status", { state: message.state });
        if (this._live === attempt && message.state === "ended") this._finish("remote", false);
        // `replaced` on the live connection while our own re-POST is in flight is that re-POST
        // taking over; otherwise another client took the call with the same token.
        if (this._live === attempt && message.state === "replaced" && !this._supersededByOwnPost(attempt)) this._finish("replaced", false);
      } else if (message.type === "pong") {
        const waiter = this._pings.get(message.ts);
        if (waiter) {
          this._pings.delete(message.ts);
          this._timers.clearTimeout(waiter.timer);
          waiter.resolve(this._now() - waiter.sentAt);
        }
      }
    };
  }

  /** Whether a newer attempt of ours (POST in flight) exists besides `attempt`. */
  _supersededByOwnPost(attempt) {
    for (const other of this._attempts) if (other !== attempt && other !== this._live) return true;
    return false;
  }

  _patchCandidate(attempt, candidate) {
    enqueue(attempt, async () => {
      if (!this._attempts.has(attempt) || !attempt.sessionId) return;
      await this._request("PATCH", attempt.sessionId, { body: JSON.stringify({ candidate }), contentType: "application/json" }, [204]);
    }).catch((error) => {
      if (this._attempts.has(attempt)) this._events.emit("error", error);
    });
  }

  _clearGrace() {
    if (this._graceTimer !== null) this._timers.clearTimeout(this._graceTimer);
    this._graceTimer = null;
  }

  /**
   * The connection failed or stayed disconnected: an ICE restart on the same session first
   * (`_restartOnSession`), then re-POST with backoff; terminal refusals end the call.
   */
  async _recover() {
    if (this._reconnecting || this._state === "ended") return;
    this._reconnecting = true;
    this._setState("reconnecting");
    try {
      if (await this._restartOnSession()) return;
      if (this._state === "ended") return;
      for (let attempt = 1; attempt <= this._backoff.maxAttempts; attempt++) {
        const delayMs = attempt === 1 ? 0 : _backoffDelay(attempt - 1, this._backoff, this._random);
        this._events.emit("reconnecting", { attempt, delayMs });
        if (delayMs > 0) await new Promise((resolve) => this._timers.setTimeout(resolve, delayMs));
        if (this._state === "ended") return;
        try {
          await this._establish();
          return;
        } catch (error) {
          if (this._state === "ended") return;
          const failure = error instanceof CallingError ? error : mediaError(error);
          this._events.emit("error", failure);
          if (!failure.retryable && failure.code !== "network") {
            this._finish("failed", true);
            return;
          }
        }
      }
      this._finish("failed", true);
    } finally {
      this._reconnecting = false;
    }
  }

  /**
   * An ICE-restart offer (`createOffer({iceRestart: true})`: new credentials, a fresh gathering)
   * PATCHed on the live session and answered on the same peer connection: the session keeps the
   * call and the agent its peer connection (docs/protocol.md "Call and session rules"). True when
   * the connection is `connected` again within `restartWindowMs` of the start; false (refused:
   * 404 once the server ended the session, 409, 410, 502…; unreachable; or the window passed)
   * sends `_recover` on to a new session. Emits `restarting`, then `restarted` or `restart-failed`.
   */
  async _restartOnSession() {
    const live = this._live;
    if (!live || !live.sessionId || this._restartWindowMs <= 0) return false;
    const started = this._now();
    this._events.emit("restarting", { sessionId: live.sessionId });
    let timer = null;
    const windowOver = new Promise((resolve) => {
      timer = this._timers.setTimeout(() => resolve({ reason: "window" }), this._restartWindowMs);
    });
    const connected = new Promise((resolve) => {
      live.restarted = () => resolve({ reason: null });
    });
    const restart = (async () => {
      try {
        await this._renegotiate(live, { iceRestart: true });
      } catch (error) {
        const failure = error instanceof CallingError ? error : mediaError(error);
        // `http 404 session_not_found` (the server ended the session), or the local code (`network`, `media`).
        return { reason: failure.status ? `http ${failure.status} ${failure.code}` : String(failure.code), error: failure };
      }
      return live.pc.connectionState === "connected" ? { reason: null } : connected;
    })();
    const outcome = await Promise.race([restart, windowOver]);
    this._timers.clearTimeout(timer);
    live.restarted = null;
    if (this._state === "ended" || this._live !== live) return true;
    if (outcome.reason === null) {
      this._events.emit("restarted", { sessionId: live.sessionId, ms: this._now() - started });
      return true;
    }
    this._events.emit("restart-failed", { reason: outcome.reason, ...(outcome.error ? { error: outcome.error } : {}) });
    return false;
  }

  _closeAttempt(attempt) {
    this._attempts.delete(attempt);
    closeQuietly(attempt.control);
    closeQuietly(attempt.pc);
  }

  /** Ends the call once: closes every peer connection, rejects pings, emits `ended`. */
  _finish(reason, deleteSession) {
    if (this._state === "ended") return;
    const live = this._live;
    this._gen += 1;
    this._clearGrace();
    this._live = null;
    for (const attempt of Array.from(this._attempts)) this._closeAttempt(attempt);
    for (const [ts, waiter] of this._pings) {
      this._timers.clearTimeout(waiter.timer);
      waiter.reject(new CallingError("call ended", { code: "not_connected", retryable: false }));
      this._pings.delete(ts);
    }
    this._setState("ended");
    // After a failure the agent would otherwise keep the seat until the token expires.
    if (deleteSession && live && live.sessionId) this._delete(live.sessionId).catch(() => {});
    this._events.emit("ended", { reason });
  }
}

function localTracks(stream) {
  if (!stream) return [];
  if (Array.isArray(stream)) return stream;
  return typeof stream.getTracks === "function" ? stream.getTracks() : [];
}
