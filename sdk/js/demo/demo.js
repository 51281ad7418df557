// Demo page of calling-server (served at `/`): join a room with a peer token, call the other
// peers with audio, chat with typing indicators, read receipts, history, replies, edits,
// deletions and reactions, and watch the
// consultation meter and call quality. Plain ES module on top of /sdk/calling-client.js.
//
// Stable selectors for browser tests (keep them when changing the markup):
//
//   #status                 connection state; data-state = idle | connecting | connected | reconnecting | closed
//   #token-input            textarea for a peer token; #connect submits it.
//                           Opening the page as /#token=<jwt> fills nothing and connects at once.
//   #connect-error          last connect failure (data-code = CallingError.code), hidden otherwise
//   #disconnect             leave the room (shown while connected)
//   #me                     data-peer-id, data-room-id, data-call-id, data-role once welcomed;
//                           .peer-id .room-id dd.call-id .role
//   #peers li[data-peer-id=ID]   one per other peer, join order; data-call-state =
//                           none | calling | incoming | new | connecting | connected | disconnected | failed
//       button.call         call this peer (asks for the microphone); hidden while a call with it
//                           exists, disabled while #status is not connected
//       button.hangup       end the call with this peer
//   #incoming               shown while a call rings here; data-peer-id = caller; .caller = its name
//   #accept, #reject        answer / refuse the ringing call (the oldest one when several ring)
//   #call-panel             shown while at least one call exists
//   #mute                   toggles the microphone (track.enabled); aria-pressed="true" while muted
//   #hangup                 ends every call
//   #remote-audio audio[data-peer-id=ID]   one <audio autoplay> per remote peer
//   #stats tr[data-peer-id=ID]  .state .rtt .jitter .loss .bitrate; each cell also has data-value
//                           (the raw number of the last `stats` event, "" for null)
//   #meter                  shown after the first `meter` event; data-state = running | warning | ended;
//                           data-remaining-s, data-elapsed-s, data-limit-s; .elapsed .remaining .limit
//   #chat-log li[data-seq=N]  committed messages in seq order; data-from; data-own="true" for own;
//                           .text, .meta (sender and time); own messages also .receipt with
//                           data-read-by = space-separated peer ids that have read it; its text
//                           ("read by X") names each reader once, at the newest own message X has read
//   #chat-log li[data-client-id][data-pending]  own message waiting for its ack (data-failed if refused)
//       .reply-quote[data-reply-to=N]  the message this one answers (its sender and text), if any
//       data-edited="true"  the message was edited (.edited says so); .text is the edited text
//       data-deleted="true" a tombstone: .text says "message deleted", no actions, no reactions
//       .reactions button.reaction[data-key=K]  one per key with data-count and data-peers
//                           (space-separated); aria-pressed="true" when it is ours; click toggles ours
//       .actions button.reply / button.edit / button.delete (own only) / button.react[data-key=K]
//   #compose-context        shown while replying or editing: data-mode = reply | edit, data-seq;
//                           #compose-cancel leaves that mode
//   #chat-input, #chat-send compose and send (Enter sends too); in edit mode Send saves the edit
//   #typing                 "bob is typing…"; data-peers = space-separated ids of peers typing now
//   #unread                 "N new" button; data-count = N; hidden when 0; click scrolls to the latest
//   #load-history           loads the HISTORY_PAGE messages before the earliest one shown (paged
//                           backward with beforeSeq); disabled (data-has-more="false") at the beginning
//   window.demo.client      the CallingClient (null before the first connect)
//
// Chat history: on the first welcome the latest HISTORY_PAGE messages are loaded (each as it is
// now: edited text, tombstones, reaction counts, reply targets); edits, deletions and reactions
// that arrive later update the message they name. Messages count
// as read (markRead) while the log is scrolled to the bottom and the tab is visible, otherwise
// messages from others raise #unread.

import { CallingClient } from "/sdk/calling-client.js";
import { $, clientSession, connectElements, hide, renderStatus, show, socketURL } from "/sdk/demo/common.js";

/** Messages per history page (the first load and each "load earlier"). */
const HISTORY_PAGE = 20;
/** The reactions offered on each message (any short key works; these are the buttons). */
const REACTION_KEYS = ["👍", "❤️", "😂"];
/** Pixels from the bottom of the log that still count as "at the latest message". */
const BOTTOM_SLACK_PX = 24;

const el = {
  ...connectElements(),
  room: $("#room"),
  me: $("#me"),
  notice: $("#notice"),
  meter: $("#meter"),
  incoming: $("#incoming"),
  accept: $("#accept"),
  reject: $("#reject"),
  peers: $("#peers"),
  peersEmpty: $("#peers-empty"),
  peerCount: $("#peer-count"),
  callPanel: $("#call-panel"),
  mute: $("#mute"),
  hangup: $("#hangup"),
  enableAudio: $("#enable-audio"),
  stats: $("#stats tbody"),
  remoteAudio: $("#remote-audio"),
  chatScroll: $("#chat-scroll"),
  chatLog: $("#chat-log"),
  loadHistory: $("#load-history"),
  typing: $("#typing"),
  unread: $("#unread"),
  chatForm: $("#chat-form"),
  chatInput: $("#chat-input"),
  chatSend: $("#chat-send"),
  composeContext: $("#compose-context"),
  composeText: $("#compose-context .compose-text"),
  composeCancel: $("#compose-cancel"),
};

/** Everything the page knows about the current room session. Reset by `resetRoom()`. */
const app = {
  /** @type {CallingClient | null} */
  client: null,
  /** @type {MediaStream | null} the microphone, shared by every call */
  localStream: null,
  muted: false,
  /** peerId → call state shown in #peers ("calling", "incoming", or the RTCPeerConnection state). */
  calls: new Map(),
  /** Ringing incoming calls, oldest first (the SDK's IncomingCall objects). */
  incoming: [],
  /** seq → <li> of committed messages. */
  messages: new Map(),
  /** client_id → <li> of own messages waiting for their ack. */
  pending: new Map(),
  /** peerId → highest seq that peer has read (from `read` events). */
  readBy: new Map(),
  /** Peers whose typing indicator is on. */
  typing: new Set(),
  /** Our read marker as last sent (or welcome.read_seq). */
  readSeq: 0,
  /** Whether the first welcome of this client has been handled (history loaded). */
  welcomed: false,
  historyLoading: false,
  /** More history before the earliest message shown (null: not asked yet). */
  historyHasMore: null,
  /** seq → {from, text, replyTo, deleted, edited, reactions: Map key → Set of peer ids} */
  state: new Map(),
  /** Replying to or editing a message: {mode: "reply" | "edit", seq}, or null. */
  compose: null,
  /** Latest meter payload and when it arrived, to count down between frames. */
  meter: null,
  meterAt: 0,
  meterTimer: null,
};

// Tests read state through this (e.g. window.demo.client.lastSeq).
window.demo = {
  get client() { return app.client; },
};

// ---------------------------------------------------------------------------------------------
// Connecting
// ---------------------------------------------------------------------------------------------

const session = clientSession({
  el,
  app,
  createClient: (token) => new CallingClient({ url: socketURL("/v1/ws"), token }),
  subscribe,
  beforeLeave: () => {
    // Tell callers that are still ringing, while the socket is still there to say it.
    for (const call of app.incoming) {
      try { call.reject(); } catch { /* not connected: the server drops their offer anyway */ }
    }
  },
  reset: resetRoom,
  setStatus,
  closeTexts: {
    4400: "this peer connected somewhere else",
    4410: "the consultation time is over",
  },
  leaveText: "left the room",
  missingToken: "Paste a peer token first.",
});

function resetRoom() {
  app.incoming = [];
  app.calls.clear();
  releaseMicrophone();
  app.messages.clear();
  app.pending.clear();
  app.state.clear();
  app.historyHasMore = null;
  setCompose(null);
  app.readBy.clear();
  app.typing.clear();
  app.readSeq = 0;
  app.welcomed = false;
  app.meter = null;
  clearInterval(app.meterTimer);
  app.meterTimer = null;
  el.peers.replaceChildren();
  el.stats.replaceChildren();
  el.remoteAudio.replaceChildren();
  el.chatLog.replaceChildren();
  el.notice.textContent = "";
  hide(el.meter);
  renderIncoming();
  renderPeersMeta();
  renderCallPanel();
  renderTyping();
  renderUnread();
  renderHistoryButton();
  hide(el.room);
  el.disconnect.hidden = true;
  show(el.connectPanel);
}

/** Wires the client's events to the page; the handlers are removed again on leave. */
function subscribe(on) {
  on("connected", onWelcome);
  on("disconnected", ({ code, reason, willReconnect }) => {
    // Calls outlive a reconnect (the SDK reconciles them with the roster); chat resumes from lastSeq.
    app.typing.clear();
    renderTyping();
    if (!willReconnect) {
      // Nobody is "in the room" with us any more; the chat stays readable until the next connect.
      for (const li of [...el.peers.children]) removePeer(li.dataset.peerId);
      session.closed(code, reason);
    }
  });
  on("error", (error) => notify(`Server said: ${error.message} (${error.code})`));

  on("peer-joined", (peer) => upsertPeer(peer));
  on("peer-reconnecting", ({ peer_id: peerId }) => notify(`${peerName(peerId)} is reconnecting…`));
  on("peer-resumed", ({ peer_id: peerId }) => notify(`${peerName(peerId)} is back.`));
  on("peer-left", ({ peer_id: peerId }) => {
    removePeer(peerId);
    app.typing.delete(peerId);
    renderTyping();
  });

  on("incoming", (call) => {
    app.incoming = app.incoming.filter((c) => c.peerId !== call.peerId);
    app.incoming.push(call);
    setCallState(call.peerId, "incoming");
    renderIncoming();
  });
  on("track", ({ peerId, track, streams }) => playRemote(peerId, streams[0] ?? new MediaStream([track])));
  on("connection-state", ({ peerId, state }) => {
    if (app.calls.has(peerId)) setCallState(peerId, state);
  });
  on("hangup", ({ peerId, reason }) => endCall(peerId, hangupText(reason)));
  on("rejected", ({ peerId }) => endCall(peerId, "declined the call"));

  on("stats", renderStats);
  on("meter", renderMeter);
  on("consultation-ended", (meter) => {
    renderMeter(meter);
    notify("The consultation time is over.");
  });

  on("chat", (message) => addMessage(message));
  on("chat-edited", (edit) => applyEdit(edit.target, edit.text, edit.deleted));
  on("chat-deleted", ({ target }) => applyDelete(target));
  on("chat-reaction", ({ target, from, key, removed }) => applyReaction(target, from, key, !removed));
  on("typing", ({ from, typing }) => {
    if (typing) app.typing.add(from); else app.typing.delete(from);
    renderTyping();
  });
  on("read", ({ from, seq }) => {
    app.readBy.set(from, Math.max(seq, app.readBy.get(from) ?? 0));
    renderReceipts();
  });
}

/** Every `welcome`: the first one of a client and each one after a reconnect. */
function onWelcome(welcome) {
  setStatus("connected");
  hide(el.connectPanel);
  show(el.room);
  el.disconnect.hidden = false;

  el.me.dataset.peerId = welcome.peer_id;
  el.me.dataset.roomId = welcome.room_id;
  el.me.dataset.role = welcome.role;
  el.me.querySelector(".peer-id").textContent =
    welcome.name ? `${welcome.name} (${welcome.peer_id})` : welcome.peer_id;
  el.me.querySelector(".room-id").textContent = welcome.room_id;
  el.me.querySelector("dd.call-id").textContent = welcome.call_id ?? "";
  el.me.querySelectorAll(".call-id").forEach((node) => { node.hidden = !welcome.call_id; });
  el.me.dataset.callId = welcome.call_id ?? "";
  el.me.querySelector(".role").textContent = welcome.role;

  // The roster in a welcome is complete: make the list equal to it. After a reconnect the SDK also
  // reports the difference as peer-left/peer-joined; both paths are idempotent.
  const present = new Set(welcome.peers.map((p) => p.peer_id));
  for (const li of [...el.peers.children]) {
    if (!present.has(li.dataset.peerId)) removePeer(li.dataset.peerId);
  }
  for (const peer of welcome.peers) upsertPeer(peer);

  app.readSeq = Math.max(app.readSeq, welcome.read_seq);
  if (!app.welcomed) {
    app.welcomed = true;
    loadLatest(welcome.last_seq);
  }
  // After a reconnect the SDK replays and gap-fills missed messages itself (deduplicated by seq).
  renderHistoryButton();
  markVisibleRead();
}

function setStatus(state, detail = "") {
  renderStatus(el.status, state, detail);
  // A call needs the signaling socket; chat does not (the SDK holds messages until it is back).
  for (const button of el.peers.querySelectorAll("button.call")) button.disabled = state !== "connected";
}

/** A short message for the user, announced by screen readers (aria-live). */
function notify(text) {
  el.notice.textContent = text;
}

// ---------------------------------------------------------------------------------------------
// Peers and calls
// ---------------------------------------------------------------------------------------------

function peerName(peerId) {
  const li = el.peers.querySelector(`li[data-peer-id="${CSS.escape(peerId)}"]`);
  return li?.dataset.name || peerId;
}

function peerItem(peerId) {
  return el.peers.querySelector(`li[data-peer-id="${CSS.escape(peerId)}"]`);
}

function upsertPeer(peer) {
  let li = peerItem(peer.peer_id);
  if (!li) {
    li = document.createElement("li");
    li.dataset.peerId = peer.peer_id;
    li.innerHTML = `
      <span class="who"><span class="name"></span><small class="role"></small></span>
      <span class="badge state"></span>
      <button type="button" class="call">Call</button>
      <button type="button" class="hangup" hidden>Hang up</button>`;
    li.querySelector("button.call").addEventListener("click", () => startCall(peer.peer_id));
    li.querySelector("button.hangup").addEventListener("click", () => hangup(peer.peer_id));
    el.peers.append(li);
  }
  li.dataset.name = peer.name ?? "";
  li.querySelector(".name").textContent = peer.name ? `${peer.name} (${peer.peer_id})` : peer.peer_id;
  li.querySelector(".role").textContent = peer.role;
  li.querySelector("button.call").setAttribute("aria-label", `Call ${peer.name ?? peer.peer_id}`);
  li.querySelector("button.hangup").setAttribute("aria-label", `Hang up on ${peer.name ?? peer.peer_id}`);
  renderPeer(peer.peer_id);
  renderPeersMeta();
}

function removePeer(peerId) {
  peerItem(peerId)?.remove();
  // The SDK ends the call on peer-left; make sure the page forgets it even if it was ringing.
  app.incoming = app.incoming.filter((c) => c.peerId !== peerId);
  endCall(peerId, null);
  renderPeersMeta();
}

function renderPeersMeta() {
  const count = el.peers.children.length;
  el.peerCount.textContent = String(count);
  el.peersEmpty.hidden = count > 0;
}

function renderPeer(peerId) {
  const li = peerItem(peerId);
  if (!li) return;
  const state = app.calls.get(peerId) ?? "none";
  li.dataset.callState = state;
  const badge = li.querySelector(".state");
  badge.textContent = state === "none" ? "" : state;
  badge.hidden = state === "none";
  li.querySelector("button.call").hidden = state !== "none";
  li.querySelector("button.call").disabled = el.status.dataset.state !== "connected";
  li.querySelector("button.hangup").hidden = state === "none" || state === "incoming";
}

function setCallState(peerId, state) {
  app.calls.set(peerId, state);
  renderPeer(peerId);
  const cell = el.stats.querySelector(`tr[data-peer-id="${CSS.escape(peerId)}"] .state`);
  if (cell) cell.textContent = state;
  renderCallPanel();
}

/** The microphone, asked for once and shared by every call (one permission prompt). */
async function microphone() {
  if (app.localStream) return app.localStream;
  if (!navigator.mediaDevices?.getUserMedia) {
    // Browsers only expose getUserMedia to secure contexts: https, or http on localhost.
    throw new Error("this browser offers no microphone here (it needs https or localhost)");
  }
  app.localStream = await navigator.mediaDevices.getUserMedia({ audio: true, video: false });
  applyMute();
  return app.localStream;
}

/** Stops the microphone once no call needs it, so the browser's recording indicator goes off. */
function releaseMicrophone() {
  app.localStream?.getTracks().forEach((track) => track.stop());
  app.localStream = null;
  app.muted = false;
  applyMute();
}

async function startCall(peerId) {
  setCallState(peerId, "calling");
  try {
    const stream = await microphone();
    await app.client.call(peerId, stream);
  } catch (error) {
    notify(`Could not call ${peerName(peerId)}: ${error.message}`);
    endCall(peerId, null);
  }
}

async function acceptIncoming() {
  const call = app.incoming.shift();
  renderIncoming();
  if (!call) return;
  setCallState(call.peerId, "connecting");
  try {
    await call.accept(await microphone());
  } catch (error) {
    notify(`Could not answer ${peerName(call.peerId)}: ${error.message}`);
    try { call.reject(); } catch { /* already gone */ }
    endCall(call.peerId, null);
  }
}

function rejectIncoming() {
  const call = app.incoming.shift();
  renderIncoming();
  if (!call) return;
  call.reject();
  endCall(call.peerId, null);
}

function hangup(peerId) {
  // The SDK answers with a `hangup` event (reason "local"), which cleans up through endCall.
  app.client?.hangup(peerId, true);
  endCall(peerId, null);
}

function hangupAll() {
  for (const peerId of [...app.calls.keys()]) {
    if (app.calls.get(peerId) === "incoming") continue;
    hangup(peerId);
  }
}

/** Forgets a call (idempotent: the SDK's hangup event and our own clean-up may both land here). */
function endCall(peerId, why) {
  const known = app.calls.delete(peerId);
  el.remoteAudio.querySelector(`audio[data-peer-id="${CSS.escape(peerId)}"]`)?.remove();
  el.stats.querySelector(`tr[data-peer-id="${CSS.escape(peerId)}"]`)?.remove();
  const ringing = app.incoming.length;
  app.incoming = app.incoming.filter((c) => c.peerId !== peerId);
  if (ringing !== app.incoming.length) renderIncoming();
  renderPeer(peerId);
  renderCallPanel();
  if (known && why) notify(`${peerName(peerId)} ${why}.`);
  if (app.calls.size === 0) releaseMicrophone();
}

function hangupText(reason) {
  switch (reason) {
    case "remote": return "hung up";
    case "rejected": return "declined the call";
    case "peer-left": return "left the room";
    case "cancelled": return "cancelled the call";
    case "disconnected": return "could not be reached (no media); call again";
    case "failed": return "could not be reached (connection failed)";
    default: return null; // local hang-ups and teardown need no message
  }
}

function renderIncoming() {
  const call = app.incoming[0];
  el.incoming.hidden = !call;
  if (!call) {
    delete el.incoming.dataset.peerId;
    return;
  }
  el.incoming.dataset.peerId = call.peerId;
  // No focus move: someone typing in the chat would answer the call with their next Enter.
  el.incoming.querySelector(".caller").textContent = peerName(call.peerId);
}

function renderCallPanel() {
  const active = [...app.calls.values()].some((state) => state !== "incoming");
  el.callPanel.hidden = !active;
}

/** Plays a remote peer's audio; one <audio> per peer, replaced when its stream changes. */
function playRemote(peerId, stream) {
  let audio = el.remoteAudio.querySelector(`audio[data-peer-id="${CSS.escape(peerId)}"]`);
  if (!audio) {
    audio = document.createElement("audio");
    audio.autoplay = true;
    audio.dataset.peerId = peerId;
    el.remoteAudio.append(audio);
  }
  if (audio.srcObject !== stream) audio.srcObject = stream;
  // Autoplay with sound needs a user gesture; the click on Call/Accept usually counts, but not
  // always (a reconnect, a strict browser): then offer a button that is one.
  audio.play().catch(() => { el.enableAudio.hidden = false; });
}

function applyMute() {
  app.localStream?.getAudioTracks().forEach((track) => { track.enabled = !app.muted; });
  el.mute.setAttribute("aria-pressed", String(app.muted));
  el.mute.textContent = app.muted ? "Unmute" : "Mute";
}

// ---------------------------------------------------------------------------------------------
// Quality and meter
// ---------------------------------------------------------------------------------------------

function renderStats(sample) {
  let row = el.stats.querySelector(`tr[data-peer-id="${CSS.escape(sample.peerId)}"]`);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.peerId = sample.peerId;
    row.innerHTML = `<th scope="row" class="peer"></th><td class="state"></td><td class="num rtt"></td>
      <td class="num jitter"></td><td class="num loss"></td><td class="num bitrate"></td>`;
    row.querySelector(".peer").textContent = peerName(sample.peerId);
    el.stats.append(row);
  }
  row.querySelector(".state").textContent = app.calls.get(sample.peerId) ?? "";
  const cell = (cls, value, text) => {
    const td = row.querySelector(cls);
    td.dataset.value = value == null ? "" : String(value);
    td.textContent = value == null ? "–" : text(value);
  };
  cell(".rtt", sample.rtt_ms, (v) => `${Math.round(v)} ms`);
  cell(".jitter", sample.jitter_ms, (v) => `${v.toFixed(1)} ms`);
  cell(".loss", sample.packet_loss, (v) => `${(v * 100).toFixed(1)} %`);
  cell(".bitrate", sample.bitrate_kbps, (v) => `${Math.round(v)} kbit/s`);
}

function renderMeter(meter) {
  app.meter = meter;
  app.meterAt = Date.now();
  show(el.meter);
  drawMeter();
  // The server announces the meter every 15 s or so; count down locally in between so the
  // display moves every second. Each frame corrects the local estimate.
  clearInterval(app.meterTimer);
  app.meterTimer = meter.state === "ended" ? null : setInterval(drawMeter, 1000);
}

function drawMeter() {
  const meter = app.meter;
  if (!meter) return;
  // The meter only counts while someone else is in the room.
  const counting = meter.state !== "ended" && el.peers.children.length > 0;
  const drift = counting ? Math.floor((Date.now() - app.meterAt) / 1000) : 0;
  const elapsed = Math.min(meter.limit_s, meter.elapsed_s + drift);
  const remaining = Math.max(0, meter.remaining_s - drift);
  el.meter.dataset.state = meter.state;
  el.meter.dataset.elapsedS = String(elapsed);
  el.meter.dataset.remainingS = String(remaining);
  el.meter.dataset.limitS = String(meter.limit_s);
  el.meter.querySelector(".state").textContent = meter.state;
  el.meter.querySelector(".elapsed").textContent = clock(elapsed);
  el.meter.querySelector(".remaining").textContent = clock(remaining);
  el.meter.querySelector(".limit").textContent = clock(meter.limit_s);
  const bar = el.meter.querySelector("progress");
  bar.max = Math.max(1, meter.limit_s);
  bar.value = elapsed;
}

function clock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const mm = h ? String(m).padStart(2, "0") : String(m);
  return `${h ? `${h}:` : ""}${mm}:${String(s % 60).padStart(2, "0")}`;
}

// ---------------------------------------------------------------------------------------------
// Chat
// ---------------------------------------------------------------------------------------------

function ownId() {
  return app.client?.peerId ?? null;
}

function messageItem() {
  const li = document.createElement("li");
  li.innerHTML = `<span class="text"></span><span class="meta"></span>`;
  return li;
}

function fillMessage(li, message) {
  const own = message.from === ownId();
  li.dataset.seq = String(message.seq);
  li.dataset.from = message.from;
  li.dataset.own = String(own);
  delete li.dataset.pending;
  delete li.dataset.failed;
  const reactions = new Map();
  for (const { key, peers } of message.reactions ?? []) reactions.set(key, new Set(peers));
  app.state.set(message.seq, {
    from: message.from, text: message.text, replyTo: message.reply_to ?? null, deleted: Boolean(message.deleted),
    edited: typeof message.edited_ts === "number", reactions,
  });
  const time = new Date(message.ts).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  li.querySelector(".meta").textContent = own ? time : `${peerName(message.from)} · ${time}`;
  renderMessageBody(li, message.seq);
  if (own && !li.querySelector(".receipt")) {
    const receipt = document.createElement("span");
    receipt.className = "receipt";
    receipt.dataset.readBy = "";
    li.append(receipt);
  }
  li.querySelector(".retry")?.remove();
}

/**
 * Shows a committed message once, in seq order. Live frames, history pages, our own acks and
 * replays after a reconnect can all carry the same seq; the first one wins.
 */
function addMessage(message) {
  if (app.messages.has(message.seq)) return;
  const stickToBottom = atBottom();

  // Our own message, sent from this page and replayed (or fetched) before its ack arrived.
  let li = app.pending.get(message.client_id);
  if (li && message.from === ownId()) {
    app.pending.delete(message.client_id);
  } else {
    li = messageItem();
  }
  fillMessage(li, message);
  app.messages.set(message.seq, li);
  insertInOrder(li, message.seq);
  renderQuotesOf(message.seq);
  if (li.dataset.own === "true") renderReceipts();
  renderHistoryButton();

  if (stickToBottom) scrollToLatest();
  markVisibleRead();
}

/**
 * The parts of a message that edits, deletions and reactions change: text, the reply quote, the
 * "edited" mark, the tombstone, the reaction buttons and the actions.
 */
function renderMessageBody(li, seq) {
  const state = app.state.get(seq);
  if (!state) return;
  const own = state.from === ownId();
  li.querySelector(".text").textContent = state.deleted ? "message deleted" : state.text;
  if (state.deleted) li.dataset.deleted = "true"; else delete li.dataset.deleted;
  if (state.edited && !state.deleted) li.dataset.edited = "true"; else delete li.dataset.edited;

  li.querySelector(".reply-quote")?.remove();
  if (state.replyTo !== null) {
    const quote = document.createElement("span");
    quote.className = "reply-quote";
    quote.dataset.replyTo = String(state.replyTo);
    const target = app.state.get(state.replyTo);
    quote.textContent = target
      ? `↪ ${peerName(target.from)}: ${target.deleted ? "message deleted" : target.text}`
      : `↪ message #${state.replyTo}`;
    li.prepend(quote);
  }
  li.querySelector(".edited")?.remove();
  if (li.dataset.edited === "true") {
    const mark = document.createElement("span");
    mark.className = "edited";
    mark.textContent = "edited";
    li.querySelector(".meta").append(mark);
  }

  li.querySelector(".reactions")?.remove();
  li.querySelector(".actions")?.remove();
  if (state.deleted) return;
  const me = ownId();
  const reactions = document.createElement("span");
  reactions.className = "reactions";
  for (const [key, peers] of [...state.reactions].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (peers.size === 0) continue;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "reaction";
    button.dataset.key = key;
    button.dataset.count = String(peers.size);
    button.dataset.peers = [...peers].join(" ");
    button.setAttribute("aria-pressed", String(peers.has(me)));
    button.title = [...peers].map(peerName).join(", ");
    button.textContent = `${key} ${peers.size}`;
    button.addEventListener("click", () => toggleReaction(seq, key));
    reactions.append(button);
  }
  li.append(reactions);

  const actions = document.createElement("span");
  actions.className = "actions";
  const action = (cls, text, label, handler) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = cls;
    button.textContent = text;
    button.setAttribute("aria-label", label);
    button.addEventListener("click", handler);
    actions.append(button);
    return button;
  };
  action("reply", "Reply", "Reply to this message", () => setCompose({ mode: "reply", seq }));
  if (own) {
    action("edit", "Edit", "Edit this message", () => setCompose({ mode: "edit", seq }));
    action("delete", "Delete", "Delete this message", () => deleteMessage(seq));
  }
  for (const key of REACTION_KEYS) {
    action("react", key, `React with ${key}`, () => toggleReaction(seq, key)).dataset.key = key;
  }
  li.append(actions);
}

/** Re-renders every reply quote that names `seq` (its text changed or it was deleted). */
function renderQuotesOf(seq) {
  for (const [other, li] of app.messages) if (app.state.get(other)?.replyTo === seq) renderMessageBody(li, other);
}

function applyEdit(seq, text, deleted) {
  const state = app.state.get(seq);
  const li = app.messages.get(seq);
  // A message not loaded yet shows its current text when a history page brings it.
  if (!state || !li) return;
  if (deleted) state.deleted = true; else { state.text = text; state.edited = true; }
  keepBottom(() => { renderMessageBody(li, seq); renderQuotesOf(seq); });
}

function applyDelete(seq) {
  const state = app.state.get(seq);
  const li = app.messages.get(seq);
  if (!state || !li) return;
  state.deleted = true;
  state.text = "";
  state.reactions.clear();
  if (app.compose && app.compose.seq === seq) setCompose(null);
  keepBottom(() => { renderMessageBody(li, seq); renderQuotesOf(seq); });
}

function applyReaction(seq, from, key, added) {
  const state = app.state.get(seq);
  const li = app.messages.get(seq);
  if (!state || !li || state.deleted) return;
  const peers = state.reactions.get(key) ?? new Set();
  if (added) peers.add(from); else peers.delete(from);
  state.reactions.set(key, peers);
  keepBottom(() => renderMessageBody(li, seq));
}

/** Adds our reaction `key`, or takes it back when we have it; shown once the server acked it. */
async function toggleReaction(seq, key) {
  const state = app.state.get(seq);
  const me = ownId();
  if (!state || !app.client || !me) return;
  const has = state.reactions.get(key)?.has(me) ?? false;
  try {
    await (has ? app.client.unreact(seq, key) : app.client.react(seq, key));
    applyReaction(seq, me, key, !has);
  } catch (error) {
    notify(`Could not ${has ? "remove" : "add"} the reaction: ${error.message}`);
  }
}

async function deleteMessage(seq) {
  if (!app.client) return;
  try {
    await app.client.deleteChat(seq);
    applyDelete(seq);
  } catch (error) {
    notify(`Could not delete the message: ${error.message}`);
  }
}

/** Reply or edit mode of the compose form (null: a new message). */
function setCompose(compose) {
  app.compose = compose;
  el.composeContext.hidden = compose === null;
  if (compose === null) {
    delete el.composeContext.dataset.mode;
    delete el.composeContext.dataset.seq;
    el.chatSend.textContent = "Send";
    return;
  }
  const state = app.state.get(compose.seq);
  el.composeContext.dataset.mode = compose.mode;
  el.composeContext.dataset.seq = String(compose.seq);
  el.composeText.textContent = compose.mode === "edit"
    ? "Editing your message"
    : `Replying to ${peerName(state?.from ?? "")}: ${state?.text ?? ""}`;
  el.chatSend.textContent = compose.mode === "edit" ? "Save" : "Send";
  if (compose.mode === "edit") el.chatInput.value = state?.text ?? "";
  el.chatInput.focus();
}

async function saveEdit(seq, text) {
  try {
    await app.client.editChat(seq, text);
    applyEdit(seq, text, false);
  } catch (error) {
    notify(`Could not edit the message: ${error.message}`);
  }
}

/** Inserts a committed message before the first one with a higher seq, or before pending ones. */
function insertInOrder(li, seq) {
  for (const other of el.chatLog.children) {
    if (other === li) continue;
    const otherSeq = other.dataset.seq ? Number(other.dataset.seq) : Infinity;
    if (otherSeq > seq) {
      el.chatLog.insertBefore(li, other);
      return;
    }
  }
  el.chatLog.append(li);
}

/** Random id for `client_id` (crypto.randomUUID needs a secure context; phones on http have none). */
function newClientId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `demo-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function sendChat(text, clientId = newClientId(), li = null, replyTo = null) {
  if (!li) {
    li = messageItem();
    li.querySelector(".text").textContent = text;
    li.querySelector(".meta").textContent = "sending…";
    li.dataset.own = "true";
    li.dataset.from = ownId() ?? "";
    li.dataset.clientId = clientId;
    el.chatLog.append(li);
    scrollToLatest();
  }
  li.dataset.pending = "";
  delete li.dataset.failed;
  app.pending.set(clientId, li);
  try {
    // The SDK resends with the same client_id after timeouts and reconnects; the server dedupes.
    const ack = await app.client.sendChat(text, { clientId, replyTo });
    if (app.pending.get(clientId) !== li) return; // already shown through a replay
    if (app.messages.has(ack.seq)) {
      // Shown meanwhile from a history page (which has no way to find this pending item).
      app.pending.delete(clientId);
      li.remove();
    } else {
      addMessage({ seq: ack.seq, from: ownId(), client_id: clientId, text, meta: null, ts: ack.ts, reply_to: replyTo, deleted: false });
    }
  } catch (error) {
    if (app.pending.get(clientId) !== li) return; // delivered meanwhile through a replay
    li.dataset.failed = "";
    delete li.dataset.pending;
    li.querySelector(".meta").textContent = `not sent: ${error.message}`;
    if (error.retryable !== false && !li.querySelector(".retry")) {
      const retry = document.createElement("button");
      retry.type = "button";
      retry.className = "retry";
      retry.textContent = "Retry";
      retry.addEventListener("click", () => sendChat(text, clientId, li, replyTo));
      li.append(retry);
    }
  }
}

/**
 * "read by …" on own messages. Every own message carries the full reader list in data-read-by;
 * the visible text names each reader only once, at the newest own message it has read (the way
 * messengers show it), so a long conversation is not repeated "read by bob" on every line.
 */
function renderReceipts() {
  keepBottom(() => {
    const own = [...app.messages.entries()]
      .filter(([, li]) => li.dataset.own === "true")
      .sort(([a], [b]) => b - a);
    const named = new Set();
    for (const [seq, li] of own) {
      const receipt = li.querySelector(".receipt");
      if (!receipt) continue;
      const readers = [...app.readBy].filter(([, read]) => read >= seq).map(([peer]) => peer);
      receipt.dataset.readBy = readers.join(" ");
      const fresh = readers.filter((peer) => !named.has(peer));
      fresh.forEach((peer) => named.add(peer));
      receipt.textContent = fresh.length ? `read by ${fresh.map(peerName).join(", ")}` : "";
    }
  });
}

/** Runs a change to the log; if the newest message was in view before, it stays in view. */
function keepBottom(change) {
  const stick = atBottom();
  change();
  if (stick) scrollToLatest();
}

function renderTyping() {
  const names = [...app.typing].map(peerName);
  el.typing.dataset.peers = [...app.typing].join(" ");
  el.typing.textContent =
    names.length === 0 ? "" :
    names.length === 1 ? `${names[0]} is typing…` :
    `${names.slice(0, -1).join(", ")} and ${names.at(-1)} are typing…`;
}

function atBottom() {
  const s = el.chatScroll;
  return s.scrollHeight - s.scrollTop - s.clientHeight <= BOTTOM_SLACK_PX;
}

function scrollToLatest() {
  el.chatScroll.scrollTop = el.chatScroll.scrollHeight;
}

function highestSeq() {
  let max = 0;
  for (const seq of app.messages.keys()) if (seq > max) max = seq;
  return max;
}

/**
 * Messages count as read once the newest one can be seen: the log is scrolled to the bottom and
 * the tab is visible. Only forward moves are sent (the server ignores the rest anyway).
 */
function markVisibleRead() {
  const client = app.client;
  if (client && client.state === "connected" && !document.hidden && atBottom() && !el.room.hidden) {
    const top = highestSeq();
    if (top > app.readSeq) {
      app.readSeq = top;
      client.markRead(top);
    }
  }
  renderUnread();
}

function renderUnread() {
  let count = 0;
  for (const [seq, li] of app.messages) {
    if (seq > app.readSeq && li.dataset.own !== "true") count += 1;
  }
  el.unread.dataset.count = String(count);
  el.unread.hidden = count === 0;
  el.unread.textContent = `${count} new`;
  el.unread.setAttribute("aria-label", `${count} unread message${count === 1 ? "" : "s"}, show the latest`);
  document.title = count ? `(${count}) calling-server demo` : "calling-server demo";
}

function earliestSeq() {
  let min = Infinity;
  for (const seq of app.messages.keys()) if (seq < min) min = seq;
  return min;
}

function renderHistoryButton() {
  // Edits, deletions and reactions take seqs too, so the seqs of messages have gaps: the server's
  // has_more says whether anything is left before the earliest page.
  const lastSeq = app.client?.lastSeq ?? 0;
  const hasMore = app.historyHasMore ?? lastSeq > 0;
  el.loadHistory.dataset.hasMore = String(hasMore);
  el.loadHistory.disabled = !hasMore || app.historyLoading;
  el.loadHistory.textContent = hasMore ? "Load earlier messages" : "Beginning of the conversation";
}

/** The first page on joining: the newest HISTORY_PAGE messages up to `lastSeq`. */
async function loadLatest(lastSeq) {
  if (lastSeq <= 0) {
    app.historyHasMore = false;
    renderHistoryButton();
    return;
  }
  await loadBefore(lastSeq + 1);
  scrollToLatest();
  markVisibleRead();
}

/** "Load earlier": the HISTORY_PAGE messages before the earliest one shown. */
async function loadEarlier() {
  const lowest = earliestSeq();
  const top = lowest === Infinity ? (app.client?.lastSeq ?? 0) + 1 : lowest;
  if (top <= 1) return;
  // Keep the messages the reader is looking at in place while older ones appear above them.
  const before = el.chatScroll.scrollHeight;
  await loadBefore(top);
  el.chatScroll.scrollTop += el.chatScroll.scrollHeight - before;
}

/** One page backward (`beforeSeq`, newest first): the HISTORY_PAGE messages before `seq`. */
async function loadBefore(seq) {
  const client = app.client;
  if (!client || seq <= 1) return;
  app.historyLoading = true;
  renderHistoryButton();
  try {
    const page = await client.fetchMessages({ beforeSeq: seq, limit: HISTORY_PAGE });
    if (app.client !== client) return;
    const stick = atBottom();
    // Oldest first, so that a reply's quote finds a target on the same page.
    for (const message of [...page.messages].reverse()) addMessage(message);
    app.historyHasMore = page.has_more;
    if (stick) scrollToLatest();
  } catch (error) {
    notify(`Could not load messages: ${error.message}`);
  } finally {
    app.historyLoading = false;
    renderHistoryButton();
  }
}

// ---------------------------------------------------------------------------------------------
// DOM wiring
// ---------------------------------------------------------------------------------------------

el.accept.addEventListener("click", acceptIncoming);
el.reject.addEventListener("click", rejectIncoming);
el.hangup.addEventListener("click", hangupAll);
el.mute.addEventListener("click", () => {
  app.muted = !app.muted;
  applyMute();
});
el.enableAudio.addEventListener("click", () => {
  el.enableAudio.hidden = true;
  for (const audio of el.remoteAudio.querySelectorAll("audio")) audio.play().catch(() => {});
});

el.chatForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = el.chatInput.value;
  if (!text.trim() || !app.client) return;
  el.chatInput.value = "";
  app.client.setTyping(false);
  const compose = app.compose;
  setCompose(null);
  if (compose?.mode === "edit") saveEdit(compose.seq, text);
  else sendChat(text, undefined, null, compose?.mode === "reply" ? compose.seq : null);
});
el.composeCancel.addEventListener("click", () => {
  if (app.compose?.mode === "edit") el.chatInput.value = "";
  setCompose(null);
});
el.chatInput.addEventListener("input", () => {
  // The SDK sends only changes and turns typing off by itself after a pause.
  app.client?.setTyping(el.chatInput.value.trim() !== "");
});
el.chatInput.addEventListener("blur", () => app.client?.setTyping(false));
el.chatScroll.addEventListener("scroll", markVisibleRead, { passive: true });
document.addEventListener("visibilitychange", markVisibleRead);
el.unread.addEventListener("click", () => {
  scrollToLatest();
  markVisibleRead();
});
el.loadHistory.addEventListener("click", loadEarlier);

session.start();
