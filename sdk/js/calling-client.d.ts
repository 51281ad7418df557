// Type declarations for calling-client.js, the browser SDK of calling-server.
// Hand-written; tests/js/dts.test.mjs holds this file against the module's exports and methods.
// Wire protocol: docs/protocol.md. Usage, events and reconnect semantics: docs/browser.md.

// ---------------------------------------------------------------------------------------------
// Shared types
// ---------------------------------------------------------------------------------------------

/** Lifecycle of a `CallingClient` or `PresenceClient`. */
export type ClientState = "idle" | "connecting" | "connected" | "reconnecting" | "closed";

/** A handler for one event. */
export type Handler<T> = (payload: T) => void;

/** Timer functions; defaults are the global ones. Tests inject fakes. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(id: unknown): void;
}

/** Reconnect backoff: attempt n waits min(initialMs * factor^(n-1), maxMs), randomised by ±jitter. */
export interface BackoffOptions {
  /** Wait before the first attempt. Default 1000. */
  initialMs?: number;
  /** Cap of the wait. Default 30000. */
  maxMs?: number;
  /** Growth per attempt. Default 2 (1 s, 2 s, 4 s, 8 s …). */
  factor?: number;
  /** Fraction of random spread around each wait, 0–1. Default 0.2 (±20 %). 0 disables. */
  jitter?: number;
  /** Attempts after a drop before giving up (state "closed"). Default Infinity. */
  maxAttempts?: number;
}

/** A peer as the server lists it (`welcome.peers`, `peer-joined`). */
export interface PeerInfo {
  peer_id: string;
  role: string;
  name: string | null;
  /** `true` while the peer is in its reconnect grace (`welcome.peers`, `peer-reconnecting` … `peer-resumed`); absent otherwise. */
  reconnecting?: boolean;
}

/** The `welcome` payload (docs/protocol.md "welcome"). */
export interface Welcome {
  peer_id: string;
  room_id: string;
  call_id: string | null;
  role: string;
  name: string | null;
  peers: PeerInfo[];
  ping_interval_ms: number;
  server_time: number;
  last_seq: number;
  read_seq: number;
  unread: number;
  /** Only on a resumed connection (`last_seq` was sent). */
  recovered?: boolean;
  /** Only on a resumed connection: how many replayed `chat` frames follow. */
  replay_count?: number;
  /** Client-side: true when this welcome ended a reconnect (not the first `connect()`). */
  resumed: boolean;
}

/** A committed chat message (live, replayed or from history). */
export interface ChatMessage {
  seq: number;
  from: string;
  client_id: string;
  text: string;
  meta: Record<string, unknown> | null;
  ts: number;
  /** The seq of the message this one answers, or null. */
  reply_to: number | null;
  /** A tombstone: the content was deleted (`text` "", `meta` null). */
  deleted: boolean;
  /** History only: the last edit's ts. */
  edited_ts?: number;
  /** History only: when it was deleted. */
  deleted_ts?: number;
  /** History only: reaction counts by key, sorted by key. */
  reactions?: ReactionCount[];
  /** History with `includeEdits` only: the edits, oldest first. */
  edits?: ChatEditEntry[];
}

/** One reaction key on a message (history). */
export interface ReactionCount {
  key: string;
  count: number;
  peers: string[];
}

/** One edit of a message (history with `includeEdits`). */
export interface ChatEditEntry {
  seq: number;
  ts: number;
  text: string;
  meta: Record<string, unknown> | null;
}

/** `chat-edited`: a peer replaced the text of message `target`. */
export interface ChatEdited {
  from: string;
  seq: number;
  ts: number;
  client_id: string;
  target: number;
  text: string;
  meta: Record<string, unknown> | null;
  /** A replayed edit of a message deleted since (text "", meta null). */
  deleted: boolean;
}

/** `chat-deleted`: message `target` is a tombstone now. */
export interface ChatDeleted {
  from: string;
  seq: number;
  ts: number;
  client_id: string;
  target: number;
}

/** `chat-reaction`: a peer added (or, `removed`, took back) reaction `key` on message `target`. */
export interface ChatReaction {
  from: string;
  seq: number;
  ts: number;
  client_id: string;
  target: number;
  key: string;
  removed: boolean;
}

/** The successful `chat-ack` of `sendChat`. */
export interface ChatAck {
  seq: number;
  client_id: string;
  ts: number;
}

/** One page of `GET /v1/rooms/{room_id}/messages`. */
export interface MessagesPage {
  room_id: string;
  /** Oldest first with `sinceSeq`, newest first with `beforeSeq`. */
  messages: ChatMessage[];
  next_since_seq: number;
  /** With `beforeSeq`: the lowest seq the page covered; pass it as the next `beforeSeq`. */
  next_before_seq?: number;
  has_more: boolean;
  last_seq: number;
  limit: number;
}

/** One room of `inbox()`. */
export interface InboxRoom {
  room_id: string;
  last_seq: number;
  last_ts: number;
  /** The newest message not deleted (text cut to 140 characters), or null. */
  last_message: { seq: number; from: string; text: string; ts: number } | null;
  read_seq: number;
  unread: number;
}

/** One page of `GET /v1/me/rooms`. */
export interface InboxPage {
  rooms: InboxRoom[];
  has_more: boolean;
  next_cursor?: string;
}

/** A 5-second quality sample of one peer connection; the same keys are sent as a `stats` frame. */
export interface StatsSample {
  peerId: string;
  /** Selected candidate pair's currentRoundTripTime, in ms. */
  rtt_ms: number | null;
  /** Inbound audio jitter, in ms (the largest over inbound audio streams). */
  jitter_ms: number | null;
  /** Inbound audio packetsLost / (packetsLost + packetsReceived), 0–1, since the call began. */
  packet_loss: number | null;
  /** Outbound RTP bitrate (all kinds) since the previous sample, in kbit/s. */
  bitrate_kbps: number | null;
}

/** Meter payload (docs/protocol.md "meter"). */
export interface MeterPayload {
  state: "running" | "warning" | "ended" | string;
  elapsed_s: number;
  limit_s: number;
  remaining_s: number;
}

/** Why a call ended, in the `hangup` event. */
export type HangupReason =
  | "local"        // hangup() here
  | "remote"       // the peer sent data {kind:"hangup"}
  | "rejected"     // the peer rejected our offer (data {kind:"reject"})
  | "peer-left"    // the peer left the room
  | "failed"       // the peer connection reached "failed"
  | "closed"       // the peer connection reached "closed"
  | "replaced"     // an HTTP session caller posted a new offer (data {kind:"replaced"})
  | "cancelled"    // a ringing offer ended before the answer: the caller hung up or left
  | "disconnected" // no media for iceRestartWindowMs despite ICE restarts; retryable: call again
  | "disconnect";  // disconnect() or a terminal close of the client

/** An incoming call: answer with accept(stream) or decline with reject(). */
export interface IncomingCall {
  peerId: string;
  /** The offer's payload as received (`{sdp, type, session_id?, transport?}`). */
  offer: { sdp: string; type?: string; session_id?: string; transport?: string };
  /** Creates the peer connection, applies the offer, adds the stream's tracks, sends the answer. */
  accept(stream?: MediaStream | MediaStreamTrack[] | null): Promise<RTCPeerConnection>;
  /** Sends `data {kind:"reject"}` to the caller. */
  reject(): void;
}

/** Events of `CallingClient`, by name. */
export interface CallingClientEvents {
  connected: Welcome;
  "peer-joined": PeerInfo;
  "peer-left": { peer_id: string };
  /** The peer's socket dropped; the server holds its seat (reconnect grace). Its call is kept. */
  "peer-reconnecting": { peer_id: string };
  /** The peer is back within the grace; frames held for it were sent again. */
  "peer-resumed": { peer_id: string };
  /** An ICE-restart offer to the peer is being made (this side offered the call). */
  "ice-restart": { peerId: string; attempt: number };
  incoming: IncomingCall;
  track: { peerId: string; track: MediaStreamTrack; streams: readonly MediaStream[] };
  "connection-state": { peerId: string; state: RTCPeerConnectionState };
  hangup: { peerId: string; reason: HangupReason };
  rejected: { peerId: string };
  data: { from: string; payload: unknown };
  meter: MeterPayload;
  "consultation-ended": MeterPayload;
  stats: StatsSample;
  error: CallingError;
  /** Every end of a socket; `error` says why (null after disconnect()). */
  disconnected: { code: number; reason: string; willReconnect: boolean; error: CallingError | null };
  reconnecting: { attempt: number; delayMs: number };
  state: { state: ClientState };
  chat: ChatMessage;
  "chat-edited": ChatEdited;
  "chat-deleted": ChatDeleted;
  "chat-reaction": ChatReaction;
  typing: { from: string; typing: boolean };
  read: { from: string; seq: number };
  pong: unknown;
}

// ---------------------------------------------------------------------------------------------
// CallingError
// ---------------------------------------------------------------------------------------------

export interface CallingErrorInit {
  code: string | number;
  status?: number;
  retryable?: boolean;
  closeCode?: number;
  /** The refused frame's type (`error.payload.type`), for server errors. */
  frameType?: string;
  cause?: unknown;
}

/**
 * The codes the SDK gives its own errors (docs/browser.md "Errors"). `token_no_room`,
 * `token_wrong_scope`, `token_wrong_role` and `token_expired` are also server codes; the SDK
 * produces them from the token or a close code when the server's answer cannot be read.
 */
export type CallingSdkErrorCode =
  | "not_connected"
  | "connect_failed"
  | "closed"
  | "replaced"
  | "token_expired"
  | "timeout"
  | "invalid_argument"
  | "invalid_state"
  | "invalid_token"
  | "token_no_room"
  | "token_wrong_scope"
  | "token_wrong_role"
  | "http_error"
  | "network"
  | "media"
  | "refresh_failed"
  | "relay_overflow";

/**
 * Every error the SDK reports. `code` is the server's stable string code (`token_expired`,
 * `origin_not_allowed`, `no_answering_peer`, …), the numeric frame error code (422, 440, …), or
 * one of the SDK's own, {@link CallingSdkErrorCode}.
 */
/** What an RPC handler is given. */
export interface RpcInvocationData {
  /** The caller's request id. */
  requestId: string;
  /** The caller's peer id. */
  callerId: string;
  /** The request's payload ("" when it had none). */
  payload: string;
  /** How long the caller waits for the response, in ms. */
  responseTimeoutMs: number;
}

/** A registered RPC method: returns the response payload, or throws. */
export type RpcHandler = (data: RpcInvocationData) => string | Promise<string>;

/**
 * Why an RPC call failed: one of the static codes (LiveKit's numbers, docs/protocol.md "RPC") or
 * a code the callee's handler threw.
 */
export class RpcError extends Error {
  static readonly UNSUPPORTED_METHOD: 1400;
  static readonly RECIPIENT_NOT_FOUND: 1401;
  static readonly REQUEST_PAYLOAD_TOO_LARGE: 1402;
  static readonly APPLICATION_ERROR: 1500;
  static readonly CONNECTION_TIMEOUT: 1501;
  static readonly RESPONSE_TIMEOUT: 1502;
  static readonly RECIPIENT_DISCONNECTED: 1503;
  static readonly RESPONSE_PAYLOAD_TOO_LARGE: 1504;
  static readonly SEND_FAILED: 1505;
  constructor(code: number, message: string, data?: string | null);
  readonly code: number;
  /** Extra detail: the handler's, or the server's error name for a refused request (e.g. `peer_reconnecting`). */
  readonly data: string | null;
}

/** @internal The RPC calls of one client, as caller and callee (timeouts, matching, handlers). */
export class _RpcCalls {
  constructor(options: {
    timers: Timers;
    send: (type: string, payload: object, to: string) => boolean;
    newId: () => string;
    ackTimeoutMs?: number;
    maxPayloadBytes?: number;
  });
  readonly pendingCount: number;
  perform(to: string, method: string, payload: string, timeoutMs: number, connected: boolean): Promise<string>;
  register(method: string, handler: RpcHandler): void;
  unregister(method: string): void;
  receive(type: string, from: string | null, payload: any): void;
  /** True when the error was about a call of ours (which it fails). */
  refused(error: CallingError, payload: any): boolean;
  peerLeft(peerId: string): void;
  failAll(message: string): void;
}

export class CallingError extends Error {
  constructor(message: string, init: CallingErrorInit);
  readonly code: CallingSdkErrorCode | (string & {}) | number;
  /** HTTP status, when a request or an upgrade was refused. */
  readonly status: number | undefined;
  /** Whether trying again unchanged can succeed. */
  readonly retryable: boolean;
  /** WebSocket close code, for `closed` errors. */
  readonly closeCode: number | undefined;
  readonly frameType: string | undefined;
  /** Retry-After seconds of a refused HTTP request, when it had one. */
  retryAfter?: number;
  /** Presence errors: the refused frame's request_id. */
  requestId?: string;
}

// ---------------------------------------------------------------------------------------------
// CallingClient (/v1/ws)
// ---------------------------------------------------------------------------------------------

export interface CallingClientOptions {
  /** `ws://host:port/v1/ws` or `wss://…`; http(s) base for /v1/ice and history is derived. */
  url: string;
  /** Peer JWT (sent as `?token=`; browsers cannot set headers on a WebSocket). */
  token: string;
  /** RTCIceServer list; when given, /v1/ice is not fetched. */
  iceServers?: RTCIceServer[];
  /** Reconnect after a drop. Default true. */
  reconnect?: boolean;
  /** Asked for a fresh token before each reconnect attempt. */
  refreshToken?: () => string | Promise<string>;
  backoff?: BackoffOptions;
  /** Stats sampling interval; 0 disables. Default 5000. */
  statsIntervalMs?: number;
  /** Wait for a chat-ack before resending the same client_id. Default 10000. */
  chatAckTimeoutMs?: number;
  /** Resends after an ack timeout before sendChat rejects with `timeout`. Default 2. */
  chatRetries?: number;
  /** setTyping(true) turns itself off after this. Default 3000. */
  typingTimeoutMs?: number;
  /** Wait for `welcome` on each attempt. Default 10000. */
  connectTimeoutMs?: number;
  /** App-level ping interval; default: welcome.ping_interval_ms. 0 disables. An unanswered ping drops the socket. */
  pingIntervalMs?: number;
  /** Extra RTCConfiguration fields for every peer connection (iceServers are set by the SDK). */
  rtcConfig?: RTCConfiguration;
  /** How long a call may be without ICE connectivity (ICE restarts meanwhile) before it ends as `disconnected`. Default 15000. */
  iceRestartWindowMs?: number;
  /** ICE `disconnected` this long before the first restart (`failed` restarts at once). Default 2000. */
  iceDisconnectedDebounceMs?: number;
  /** Wait between ICE restarts while the window is open. Default 5000. */
  iceRestartRetryMs?: number;
  /** Frames held per peer in its reconnect grace; beyond it a frame is dropped (`relay_overflow`). Default 100. */
  heldRelayLimit?: number;
  /** How long `performRpc` waits for the callee's `rpc-ack` (or the call's timeout if shorter). Default 7000. */
  rpcAckTimeoutMs?: number;
  /** Largest RPC payload sent or answered, in UTF-8 bytes; keep it ≤ the server's `rpc_max_payload_bytes`. Default 15360. */
  rpcMaxPayloadBytes?: number;
  /** Source of `pagehide` and `online` (default `window`); null ignores them. */
  window?: EventTarget | null;
  /** Source of network `change` events (default `navigator.connection`); null ignores them. */
  network?: EventTarget | null;
  WebSocket?: typeof WebSocket;
  fetch?: typeof fetch;
  RTCPeerConnection?: typeof RTCPeerConnection;
  MediaStream?: typeof MediaStream;
  timers?: Timers;
  /** Random source in [0, 1) for backoff jitter and client ids. Default Math.random. */
  random?: () => number;
  /** Clock in ms. Default Date.now. */
  now?: () => number;
}

/**
 * A room peer over `/v1/ws`: signaling with browser WebRTC, chat with acks and resume, typing,
 * read markers, stats. Reconnects on its own (backoff, `last_seq` resume, pending chats resent).
 */
export class CallingClient {
  constructor(options: CallingClientOptions);
  readonly peerId: string | null;
  /** `welcome.room_id`, or before the first welcome the token's `room_id` claim. */
  readonly roomId: string | null;
  readonly callId: string | null;
  readonly role: string | null;
  readonly name: string | null;
  /** The other peers, in join order. */
  readonly peers: PeerInfo[];
  /** Highest chat seq seen (welcome.last_seq, live and replayed chat, own acks). */
  readonly lastSeq: number;
  readonly state: ClientState;
  /** The last `welcome` payload, or null. */
  readonly welcome: Welcome | null;
  /** The current token (replaced by refreshToken and connect(token)). */
  readonly token: string;

  on<K extends keyof CallingClientEvents>(event: K, handler: Handler<CallingClientEvents[K]>): () => void;
  off<K extends keyof CallingClientEvents>(event: K, handler: Handler<CallingClientEvents[K]>): void;
  once<K extends keyof CallingClientEvents>(event: K): Promise<CallingClientEvents[K]>;

  /** Opens the socket; resolves with `welcome`. Rejects with CallingError (error frame, refused upgrade, timeout). */
  connect(token?: string): Promise<Welcome>;
  /** Closes with 1000; ends every call; pending sendChat calls reject with `not_connected`. */
  disconnect(): void;

  /** STUN/TURN servers: `iceServers` if given, else GET /v1/ice with the token. */
  fetchIceServers(): Promise<RTCIceServer[]>;
  /** Calls a peer: new peer connection, the stream's tracks, offer. */
  call(peerId: string, stream?: MediaStream | MediaStreamTrack[] | null): Promise<RTCPeerConnection>;
  /** Ends the call with a peer; `notify` sends `data {kind:"hangup"}`. */
  hangup(peerId: string, notify?: boolean): void;
  /** The peer connection with a peer, if a call is up. */
  connection(peerId: string): RTCPeerConnection | undefined;
  /** `data` to one peer, or to every other peer. */
  sendData(payload: unknown, to?: string): void;
  /**
   * Asks `to` to run `method` with `payload`; resolves with the handler's result or rejects with an
   * `RpcError` (docs/protocol.md "RPC"). Default `timeoutMs` 10000.
   */
  performRpc(to: string, method: string, payload?: string, timeoutMs?: number): Promise<string>;
  /** Answers `rpc-request`s for `method`; a thrown `RpcError` goes to the caller as it is, anything else as 1500. */
  registerRpcMethod(method: string, handler: RpcHandler): void;
  /** Stops answering `method` (later requests get 1400). */
  unregisterRpcMethod(method: string): void;
  /** Sends a chat; resolves with its ack. Retries with the same client_id after timeouts and reconnects. */
  sendChat(text: string, options?: { meta?: Record<string, unknown> | null; clientId?: string; replyTo?: number | null }): Promise<ChatAck>;
  /** Edits our message `seq`; resolves with the edit's ack. Same retries as sendChat. */
  editChat(seq: number, text: string, options?: { meta?: Record<string, unknown> | null; clientId?: string }): Promise<ChatAck>;
  /** Deletes message `seq` (ours, or any with a moderator token); resolves with the delete's ack. */
  deleteChat(seq: number, options?: { clientId?: string }): Promise<ChatAck>;
  /** Adds our reaction `key` to message `seq`. */
  react(seq: number, key: string, options?: { clientId?: string }): Promise<ChatAck>;
  /** Removes our reaction `key` from message `seq`. */
  unreact(seq: number, key: string, options?: { clientId?: string }): Promise<ChatAck>;
  /** Typing indicator; only changes are sent; true turns itself off after typingTimeoutMs. */
  setTyping(on: boolean): void;
  /** Moves the read marker (the server only moves it forward). */
  markRead(seq: number): void;
  /** One history page over REST; works before connect() (room from the token). */
  fetchMessages(options?: { sinceSeq?: number; beforeSeq?: number; limit?: number; includeEdits?: boolean }): Promise<MessagesPage>;
  /** The token's rooms, newest activity first (`GET /v1/me/rooms`); needs a user token. */
  inbox(options?: { limit?: number; cursor?: string }): Promise<InboxPage>;
  /** App-level ping; resolves with the pong payload. */
  ping(payload?: unknown): Promise<unknown>;
}

// ---------------------------------------------------------------------------------------------
// PresenceClient (/v1/presence)
// ---------------------------------------------------------------------------------------------

export interface PresenceAgent {
  agent_id: string;
  status: "available" | "busy" | "away" | "offline" | string;
  note: string | null;
  queues: string[];
  updated_at: number;
}

/** A ringing request as dashboards see it (also `connected.requests`). */
export interface PresenceRequest {
  request_id: string;
  agent_id?: string;
  caller_id?: string;
  from?: string;
  name?: string | null;
  queue?: string | null;
  metadata?: Record<string, unknown> | null;
  state?: string;
  expires_at: number;
}

export interface PresenceSnapshot {
  peer_id: string;
  role: string;
  agents: PresenceAgent[];
  server_time: number;
  requests?: PresenceRequest[];
}

export interface PresenceClientEvents {
  connected: PresenceSnapshot;
  status: PresenceAgent;
  request: PresenceRequest;
  accepted: { request_id: string; call_id: string; room_id: string; agent_id: string; caller_id: string; token?: string };
  ended: { request_id: string; reason: string; agent_id?: string; caller_id?: string };
  error: CallingError;
  /** The server closed the socket with a close frame (followed by `disconnected`). */
  closed: { code: number; reason: string; willReconnect: boolean; error: CallingError | null };
  /** Every end of a socket: no close frame, a close frame (after `closed`), or disconnect(). */
  disconnected: { code: number; reason: string; willReconnect: boolean; error: CallingError | null };
  reconnecting: { attempt: number; delayMs: number };
  state: { state: ClientState };
  pong: unknown;
}

export interface PresenceClientOptions {
  /** `ws://host:port/v1/presence` or `wss://…`. */
  url: string;
  /** Presence JWT (`scope` presence, role agent/caller/dashboard). */
  token: string;
  /** Agents: queues to join at connect (`?queues=`). */
  queues?: string[];
  /** Reconnect after a drop. Default true. */
  reconnect?: boolean;
  refreshToken?: () => string | Promise<string>;
  backoff?: BackoffOptions;
  connectTimeoutMs?: number;
  WebSocket?: typeof WebSocket;
  fetch?: typeof fetch;
  timers?: Timers;
  random?: () => number;
  now?: () => number;
}

/** Agent status, call requests and dashboards over `/v1/presence`. */
export class PresenceClient {
  constructor(options: PresenceClientOptions);
  /** agent_id → agent, kept up to date from `connected` and `status`. */
  readonly agents: Map<string, PresenceAgent>;
  /** request_id → ringing request (dashboards: every one; agents/callers: their own). */
  readonly requests: Map<string, PresenceRequest>;
  readonly peerId: string | null;
  readonly role: string | null;
  readonly state: ClientState;
  readonly token: string;

  on<K extends keyof PresenceClientEvents>(event: K, handler: Handler<PresenceClientEvents[K]>): () => void;
  off<K extends keyof PresenceClientEvents>(event: K, handler: Handler<PresenceClientEvents[K]>): void;
  once<K extends keyof PresenceClientEvents>(event: K): Promise<PresenceClientEvents[K]>;

  /** Resolves with the `connected` snapshot. */
  connect(token?: string): Promise<PresenceSnapshot>;
  disconnect(): void;
  setStatus(status: string, options?: { note?: string | null; queues?: string[] }): void;
  request(options: { agentId?: string; queue?: string; metadata?: Record<string, unknown> }): void;
  accept(requestId: string): void;
  decline(requestId: string): void;
  cancel(requestId: string): void;
  /** Resolves with the pong payload. */
  ping(payload?: unknown): Promise<unknown>;
}

// ---------------------------------------------------------------------------------------------
// WebCallClient (HTTP sessions, webrtc-proxy)
// ---------------------------------------------------------------------------------------------

/** A message on the `control` data channel. */
export type ControlMessage =
  | { type: "status"; state: "connected" | "ended" | "replaced" | string }
  | { type: "ping"; ts: number }
  | { type: "pong"; ts: number }
  | { type: "mute"; muted: boolean }
  | { type: "dtmf"; digit: string }
  | { type: "hangup" }
  | { type: string; [key: string]: unknown };

export interface WebCallClientEvents {
  /** `control` status messages: connected, ended, replaced. */
  status: { state: string };
  /** Every control message received. */
  control: ControlMessage;
  track: { track: MediaStreamTrack; streams: readonly MediaStream[] };
  "connection-state": { state: RTCPeerConnectionState };
  ended: { reason: "hangup" | "remote" | "replaced" | "failed" | "closed" | "error" | string };
  error: CallingError;
  /** The connection dropped: an ICE-restart offer is PATCHed on the live session first. */
  restarting: { sessionId: string };
  /** The restart brought media back on the same session, `ms` after it started. */
  restarted: { sessionId: string; ms: number };
  /** The restart did not: `http 404 session_not_found` (the session is gone) and other refusals, `network`, or `window`. A re-POST (`reconnecting`) follows. */
  "restart-failed": { reason: string; error?: CallingError };
  /** A re-POST attempt (after a failed restart). */
  reconnecting: { attempt: number; delayMs: number };
  /** A new session after a reconnect. */
  session: { sessionId: string };
}

export interface WebCallClientOptions {
  /** `http(s)://host:port/webrtc-proxy/{call_id}`; `/v1/webrtc/sessions` is appended. */
  baseUrl: string;
  /** `access_token` of POST /v1/calls (a peer token with the call's call_id). */
  accessToken: string;
  /** `ice_servers` of POST /v1/calls. */
  iceServers?: RTCIceServer[];
  rtcConfig?: RTCConfiguration;
  /** Wait for ICE gathering before the POST (later candidates are trickled). Default 1000. */
  gatherTimeoutMs?: number;
  /** Re-POST after the peer connection fails or stays disconnected. Default true. */
  reconnect?: boolean;
  /** How long "disconnected" may last before a reconnect. Default 1000. */
  disconnectedGraceMs?: number;
  /** How long an ICE restart PATCHed on the live session may take to bring media back before a re-POST; 0 re-POSTs at once. Default 2500. */
  restartWindowMs?: number;
  backoff?: BackoffOptions;
  RTCPeerConnection?: typeof RTCPeerConnection;
  fetch?: typeof fetch;
  timers?: Timers;
  random?: () => number;
  now?: () => number;
}

/** A browser caller over the webrtc-proxy HTTP session API, with its `control` channel. */
export class WebCallClient {
  constructor(options: WebCallClientOptions);
  readonly sessionId: string | null;
  readonly pc: RTCPeerConnection | null;
  readonly muted: boolean;
  /** "idle" | "connecting" | "connected" | "reconnecting" | "ended". */
  readonly state: string;
  /** Retry-After seconds of the last refused request, or null. */
  readonly retryAfter: number | null;

  on<K extends keyof WebCallClientEvents>(event: K, handler: Handler<WebCallClientEvents[K]>): () => void;
  off<K extends keyof WebCallClientEvents>(event: K, handler: Handler<WebCallClientEvents[K]>): void;
  once<K extends keyof WebCallClientEvents>(event: K): Promise<WebCallClientEvents[K]>;

  /** Peer connection + tracks + `control` channel; POST offer → answer. Resolves with the session id. */
  start(stream?: MediaStream | MediaStreamTrack[] | null): Promise<string>;
  /** New offer on the live session (PATCH application/sdp). */
  renegotiate(): Promise<void>;
  /** New peer connection and POST with the same token; the old session is replaced. */
  reconnect(): Promise<string>;
  /** `{type:"mute"}` on the control channel and local audio tracks disabled/enabled. */
  mute(muted: boolean): void;
  /** One `{type:"dtmf", digit}` per character of 0-9 * # A-D. */
  sendDtmf(digits: string): void;
  /** `{type:"ping", ts}`; resolves with the round-trip time in ms when the pong arrives. */
  ping(): Promise<number>;
  /** `{type:"hangup"}` on the control channel, closes the peer connection, DELETEs the session. */
  hangup(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Internal helpers: exported for the Node unit tests (tests/js). Not a stable API.
// ---------------------------------------------------------------------------------------------

/** @internal A frame `{type, to?, payload?}` as JSON text; absent fields omitted. */
export function _buildFrame(type: string, payload?: unknown, to?: string): string;
/** @internal `{candidate, sdpMid, sdpMLineIndex}` of an RTCIceCandidate (or init). */
export function _candidatePayload(candidate: RTCIceCandidateInit | null): { candidate: string; sdpMid: string | null; sdpMLineIndex: number | null };
/** @internal A `stats` payload clamped to the ranges the server accepts (docs/protocol.md "stats"). */
export function _clampStats(sample: { rtt_ms: number | null; jitter_ms: number | null; packet_loss: number | null; bitrate_kbps: number | null }): { rtt_ms: number | null; jitter_ms: number | null; packet_loss: number | null; bitrate_kbps: number | null };
/** @internal The `room_id` claim of a JWT (base64url-decoded payload), or null. */
export function _roomIdFromToken(token: string): string | null;
/** @internal The decoded payload of a JWT, or null. */
export function _decodeJwtPayload(token: string): Record<string, unknown> | null;
/** @internal ws→http, wss→https, same host/port, no path. */
export function _httpBase(url: string): string;
/** @internal Socket URL with `token` and the given query parameters (null ones left out); http(s)→ws(s); empty path → defaultPath. */
export function _socketUrl(url: string, token: string, params?: Record<string, string | number | null | undefined>, defaultPath?: string): string;
/** @internal Wait before reconnect attempt n (1-based). */
export function _backoffDelay(attempt: number, options?: BackoffOptions, random?: () => number): number;
/** @internal Whether a close code forbids reconnecting (docs/protocol.md "Close codes"). */
export function _isTerminalClose(code: number): boolean;
/** @internal Whether an HTTP status of a refused request/upgrade is worth retrying. */
export function _isRetryableStatus(status: number): boolean;
/** @internal Whether a numeric frame error code is temporary (ErrorCode.isTemporary). */
export function _isTemporaryCode(code: number): boolean;
/** @internal A sample from a getStats() report and the previous outbound byte count. */
export function _statsFromReport(report: Iterable<any> | Map<string, any>, previous: { bytesSent: number; timestamp: number } | null):
  { sample: Omit<StatsSample, "peerId">; bytes: { bytesSent: number; timestamp: number } | null };
/** @internal `sdp` with its media stream ids (a=msid, a=ssrc msid) replaced by `streamId` (`local-<peerId>` on the wire). */
export function _withStreamId(sdp: string, streamId: string): string;
/** @internal The session id of an SDP's `o=` line, or null. */
export function _sdpSessionId(sdp: string): string | null;
/** @internal Validates and splits DTMF digits. */
export function _dtmfDigits(digits: string): string[];

/** @internal Remote candidates held until the remote description is set. */
export class _CandidateQueue {
  constructor();
  readonly ready: boolean;
  readonly length: number;
  /** Queues `candidate` until ready; returns true when it should be added now. */
  push(candidate: unknown): boolean;
  /** Marks the remote description set; returns the queued candidates in order. */
  markReady(): unknown[];
  clear(): void;
}

/** @internal Chat seq bookkeeping across reconnects: dedupe, lastSeq, replay and gap state. */
export class _ResumeState {
  constructor();
  readonly lastSeq: number;
  readonly resumable: boolean;
  readonly replayRemaining: number;
  /** The `last_seq` to send on the next connection, or null for a fresh one. */
  resumeFrom(): number | null;
  /** Feeds a welcome; `gapFill`: start the REST gap fill now. */
  onWelcome(welcome: { last_seq?: number; recovered?: boolean; replay_count?: number }): { resumed: boolean; gapFill: boolean };
  /** Feeds a socket chat seq; `deliver` the first time a seq is seen; `gapFill` after the last replayed frame of a capped replay. */
  onChat(seq: number): { deliver: boolean; gapFill: boolean };
  /** Dedupe only (gap-fill pages): true the first time a seq is seen. */
  accept(seq: number): boolean;
  /** Records a seq seen through our own ack. */
  markSeen(seq: number): void;
  /** Starts a gap fill; returns its first `since_seq`. */
  gapStart(): number;
  /** Advances (or closes, with null) the open gap. */
  setGapCursor(seq: number | null): void;
  hasSeen(seq: number): boolean;
}

/** @internal Pending sendChat bookkeeping: ack timeouts and retries with the same client_id. */
export class _PendingChats {
  constructor(options: { ackTimeoutMs?: number; retries?: number; timers?: Timers; send: (frameText: string) => boolean | void; canSend: () => boolean });
  readonly size: number;
  has(clientId: string): boolean;
  ids(): string[];
  /** A `chat` frame `{client_id, text, meta?, reply_to?}`. */
  add(clientId: string, text: string, meta?: Record<string, unknown> | null, replyTo?: number | null): Promise<ChatAck>;
  /** Any acked chat operation: frame `type` with payload `{client_id, ...body}`. */
  addOp(clientId: string, type: "chat" | "chat-edit" | "chat-delete" | "chat-react", body: Record<string, unknown>): Promise<ChatAck>;
  /** The frame type of a pending operation, or null. */
  typeOf(clientId: string): string | null;
  /** Sends (or resends) one pending chat and arms its ack timer; `counts` false for a reconnect resend. */
  transmit(clientId: string, counts?: boolean): void;
  /** Resends every pending chat, oldest first (after a reconnect); free of the retry budget. */
  resendAll(): void;
  resolve(clientId: string, ack: ChatAck): boolean;
  /** A failed chat-ack: 503 retried after 1 s, anything else rejects. */
  failAck(clientId: string, error: CallingError): boolean;
  reject(clientId: string, error: CallingError): boolean;
  rejectAll(error: CallingError): void;
}

/** @internal setTyping with auto-off: sends only changes; on(true) renews the timeout. */
export class _TypingState {
  constructor(options: { timeoutMs?: number; timers?: Timers; send: (typing: boolean) => void });
  readonly on: boolean;
  set(on: boolean, connected?: boolean): void;
  /** Forgets the state without sending (socket gone). */
  reset(): void;
}

/** @internal A tiny event emitter (on/off/once/emit). */
export class _Emitter {
  constructor();
  on(event: string, handler: Handler<any>): () => void;
  off(event: string, handler: Handler<any>): void;
  once(event: string): Promise<any>;
  emit(event: string, payload?: unknown): void;
}

/** @internal Relays to peers in their reconnect grace: held, counted back when refused (480), released on peer-resumed. */
export class _RelayHold {
  constructor(options?: { limit?: number });
  isHeld(peerId: string): boolean;
  heldPeers(): string[];
  /** Frames waiting for the peer (refused plus queued). */
  waiting(peerId: string): number;
  sent(peerId: string, type: string, text: string): void;
  hold(peerId: string): void;
  /** False when the peer's queue is full. */
  push(peerId: string, type: string, text: string): boolean;
  /** Counts an `error` 480 (it names the refused type only) against the earliest matching frame sent to a held peer; returns that peer, or null. */
  refused(type: string): string | null;
  /** The frames to send again, oldest first. */
  release(peerId: string): string[];
  drop(peerId: string): number;
  clear(): void;
}

/** @internal The agent's own status, remembered for `PresenceClient` to set again after a reconnect. */
export interface _AgentStatusMemoryValue {
  status: string;
  /** undefined: never known; null: cleared. */
  note?: string | null;
  queues?: string[];
}

/** @internal What `PresenceClient` remembers of the agent's status and sets again after a reconnect. */
export class _AgentStatusMemory {
  constructor();
  readonly value: _AgentStatusMemoryValue | null;
  set(status: string, note?: string | null, queues?: string[]): void;
  /** A `status` frame about the agent itself. */
  learn(agent: PresenceAgent): void;
  forget(): void;
  /** The `status` payload to send when the snapshot's entry (`agent`) differs, else null. */
  restore(agent: PresenceAgent | undefined): { status: string; note?: string | null; queues?: string[] } | null;
}

/** @internal When one call restarts ICE and when it gives up. */
export class _IceRecovery {
  constructor(options: {
    restarter: boolean; windowMs?: number; debounceMs?: number; retryMs?: number; timers?: Timers;
    restart: () => void; giveUp: () => void; canGiveUp?: () => boolean;
  });
  readonly recovering: boolean;
  /** Restarts asked for since the call began. */
  readonly restarts: number;
  onIceState(state: string): void;
  onNetworkChange(): void;
  onSignalingResumed(healthy: boolean): void;
  stop(): void;
}

/** @internal After our own resume: which calls end (peer gone), which ringing offers are cancelled, which are kept. */
export function _reconcileCalls(
  callPeers: Iterable<string>,
  offerPeers: Iterable<string>,
  roster: { peer_id: string }[],
): { ended: string[]; cancelled: string[]; kept: string[] };
