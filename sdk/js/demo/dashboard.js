// Presence dashboard of calling-server (served at `/dashboard`): a PresenceClient on
// /v1/presence that shows every agent's status live and the call requests around them.
//
// What it shows depends on the token's role (docs/protocol.md "Presence channel"):
//   dashboard  (a supervisor) every agent, and every request: ringing with a countdown, then its
//              outcome (accepted into room X / declined / timeout / cancelled / disconnected / failed)
//   agent      the same agent table, its own status form, and the requests ringing for it with
//              Accept / Decline; an accepted one links to the demo page with the minted room token
//   caller     the agent table with a Call button per available agent, its own request with Cancel,
//              and on acceptance the link into the room
//
// Stable selectors for browser tests (keep them when changing the markup):
//
//   #status                       data-state = idle | connecting | connected | reconnecting | closed
//   #token-input, #connect        paste a presence token and connect; or open /dashboard#token=<jwt>
//   #connect-error                last connect failure (data-code = CallingError.code)
//   #disconnect                   close the presence connection
//   #me                           data-peer-id, data-role once connected
//   #agents tr[data-agent-id=ID]  one row per agent, sorted by id; data-status = the status;
//                                 cells .agent .status .note .queues .updated (data-updated-at = ms);
//                                 the own row (agents) has class "me"; callers get button.request;
//                                 data-ringing="true" (and a .ringing badge) while a request rings for it
//   #agent-panel                  agents only: #my-status (select: available|busy|away|offline),
//                                 #my-note, #my-queues (comma-separated), #set-status (submit).
//                                 Changing #my-status submits at once.
//   #requests li[data-request-id=ID]  newest first; data-state = ringing | accepted | declined |
//                                 timeout | cancelled | disconnected | failed; cells .state .caller
//                                 .agent .queue .countdown (data-remaining-s while ringing) .outcome
//       button.accept, button.decline   agents, while ringing for them
//       button.cancel                   callers, while their request rings
//       a.open-call                     agent/caller after `accepted`: /#token=<room token>
//                                       (data-room-id, data-call-id on the li)
//   #ringing-count                number of ringing requests (hidden when 0)
//   window.dashboard.client       the PresenceClient (null before the first connect)

import { PresenceClient } from "/sdk/calling-client.js";
import { $, clientSession, connectElements, hide, renderStatus, show, socketURL } from "/sdk/demo/common.js";

/** Finished requests kept on screen; older ones are dropped so a long shift stays readable. */
const KEEP_FINISHED = 50;
const STATUSES = ["available", "busy", "away", "offline"];

const el = {
  ...connectElements(),
  board: $("#board"),
  me: $("#me"),
  notice: $("#notice"),
  agentPanel: $("#agent-panel"),
  statusForm: $("#my-status-form"),
  myStatus: $("#my-status"),
  myNote: $("#my-note"),
  myQueues: $("#my-queues"),
  requests: $("#requests"),
  requestsEmpty: $("#requests-empty"),
  ringingCount: $("#ringing-count"),
  agents: $("#agents tbody"),
  agentsEmpty: $("#agents-empty"),
  agentCount: $("#agent-count"),
};

const app = {
  /** @type {PresenceClient | null} */
  client: null,
  /** Our id and role, from the `connected` snapshot. */
  peerId: null,
  role: null,
  /** server clock − local clock, in ms, so countdowns to `expires_at` survive a skewed phone clock. */
  clockOffset: 0,
  /** request_id → {li, request, state}. */
  requests: new Map(),
  ticker: null,
};

window.dashboard = {
  get client() { return app.client; },
};

// ---------------------------------------------------------------------------------------------
// Connecting
// ---------------------------------------------------------------------------------------------

const session = clientSession({
  el,
  app,
  createClient: (token) => new PresenceClient({ url: socketURL("/v1/presence"), token }),
  subscribe,
  reset,
  setStatus,
  closeTexts: { 4400: "this agent connected somewhere else" },
  leaveText: "disconnected",
  missingToken: "Paste a presence token first.",
});

function reset() {
  app.peerId = null;
  app.role = null;
  app.requests.clear();
  clearInterval(app.ticker);
  app.ticker = null;
  el.requests.replaceChildren();
  el.agents.replaceChildren();
  el.notice.textContent = "";
  renderCounts();
  hide(el.board);
  hide(el.agentPanel);
  el.disconnect.hidden = true;
  show(el.connectPanel);
}

function subscribe(on) {
  on("connected", onSnapshot);
  // `closed` (a close frame) is always followed by `disconnected` with the same details.
  on("disconnected", ({ code, reason, willReconnect }) => {
    if (!willReconnect) session.closed(code, reason);
  });
  on("error", (error) => {
    notify(`Refused: ${error.message} (${error.code})`);
    // An accept/decline/cancel the server refused leaves its request as it was: allow another try.
    for (const entry of app.requests.values()) {
      if (entry.state === "ringing") entry.li.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    }
  });

  on("status", (agent) => upsertAgent(agent));
  on("request", (request) => upsertRequest(request));
  on("accepted", (accepted) => finishRequest(accepted.request_id, "accepted", accepted));
  on("ended", (ended) => finishRequest(ended.request_id, ended.reason, ended));
}

/** Every `connected` frame: the first and each one after a reconnect carries the full picture. */
function onSnapshot(snapshot) {
  app.peerId = snapshot.peer_id;
  app.role = snapshot.role;
  app.clockOffset = snapshot.server_time - Date.now();

  setStatus("connected");
  hide(el.connectPanel);
  show(el.board);
  el.disconnect.hidden = false;
  el.me.dataset.peerId = snapshot.peer_id;
  el.me.dataset.role = snapshot.role;
  el.me.querySelector(".peer-id").textContent = snapshot.peer_id;
  el.me.querySelector(".role").textContent = snapshot.role;
  el.agentPanel.hidden = snapshot.role !== "agent";

  el.agents.replaceChildren();
  for (const agent of snapshot.agents) upsertAgent(agent);

  // Requests that rang while we were away have ended without us hearing it; the snapshot lists
  // the ones still ringing, so anything else still marked ringing is stale.
  const ringing = new Set((snapshot.requests ?? []).map((r) => r.request_id));
  for (const [id, entry] of app.requests) {
    if (entry.state === "ringing" && !ringing.has(id) && app.role === "dashboard") {
      finishRequest(id, "ended", {});
    }
  }
  for (const request of snapshot.requests ?? []) upsertRequest(request);

  if (!app.ticker) app.ticker = setInterval(tick, 1000);
  renderCounts();
}

function setStatus(state, detail = "") {
  renderStatus(el.status, state, detail);
}

function notify(text) {
  el.notice.textContent = text;
}

// ---------------------------------------------------------------------------------------------
// Agents
// ---------------------------------------------------------------------------------------------

function agentRow(agentId) {
  return el.agents.querySelector(`tr[data-agent-id="${CSS.escape(agentId)}"]`);
}

function upsertAgent(agent) {
  let row = agentRow(agent.agent_id);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.agentId = agent.agent_id;
    row.innerHTML = `<th scope="row" class="agent"></th><td class="status"></td><td class="note"></td>
      <td class="queues"></td><td class="updated"></td>`;
    row.querySelector(".agent").textContent = agent.agent_id;
    insertSorted(row, agent.agent_id);
  }
  row.dataset.status = agent.status;
  row.classList.toggle("me", app.role === "agent" && agent.agent_id === app.peerId);
  row.querySelector(".status").textContent = agent.status;
  row.querySelector(".note").textContent = agent.note ?? "";
  row.querySelector(".queues").textContent = agent.queues.join(", ");
  const updated = row.querySelector(".updated");
  updated.dataset.updatedAt = String(agent.updated_at);
  updated.title = new Date(agent.updated_at).toLocaleString();
  renderUpdated(updated);

  renderRinging(row);
  if (app.role === "caller") renderRequestButton(row, agent);
  if (app.role === "agent" && agent.agent_id === app.peerId) syncStatusForm(agent);
  renderCounts();
}

/**
 * Marks an agent that a request is ringing for: its status stays "available" on the wire until
 * it answers, but a supervisor wants to see that it is being called.
 */
function renderRinging(row) {
  const agentId = row.dataset.agentId;
  const entry = [...app.requests.values()].find((e) => e.state === "ringing" && requestAgent(e.request) === agentId);
  row.dataset.ringing = String(Boolean(entry));
  let badge = row.querySelector(".agent .ringing");
  if (!entry) {
    badge?.remove();
    return;
  }
  if (!badge) {
    badge = document.createElement("span");
    badge.className = "badge ringing";
    row.querySelector(".agent").append(" ", badge);
  }
  badge.textContent = `ringing: ${requestCaller(entry.request) ?? "a caller"}`;
}

function renderAllRinging() {
  for (const row of el.agents.children) renderRinging(row);
}

/** Rows stay sorted by agent id, as in the server's snapshot, so a new agent does not jump around. */
function insertSorted(row, agentId) {
  for (const other of el.agents.children) {
    if (other.dataset.agentId > agentId) {
      el.agents.insertBefore(row, other);
      return;
    }
  }
  el.agents.append(row);
}

function renderUpdated(cell) {
  const at = Number(cell.dataset.updatedAt);
  const seconds = Math.max(0, Math.round((Date.now() + app.clockOffset - at) / 1000));
  const time = new Date(at).toLocaleTimeString();
  cell.textContent = `${time} (${ago(seconds)})`;
}

function ago(seconds) {
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

/** Keeps the agent's own form equal to what the server holds, unless the agent is editing it. */
function syncStatusForm(agent) {
  if (el.statusForm.contains(document.activeElement) && document.activeElement !== el.myStatus) return;
  el.myStatus.value = STATUSES.includes(agent.status) ? agent.status : "available";
  el.myNote.value = agent.note ?? "";
  el.myQueues.value = agent.queues.join(", ");
}

function submitStatus() {
  if (!app.client) return;
  const note = el.myNote.value.trim();
  const queues = el.myQueues.value.split(",").map((q) => q.trim()).filter(Boolean);
  // No ack: the server answers with the `status` broadcast (or an `error` frame) like for anyone.
  app.client.setStatus(el.myStatus.value, { note: note || null, queues });
}

function renderRequestButton(row, agent) {
  let cell = row.querySelector("td.action");
  if (!cell) {
    cell = document.createElement("td");
    cell.className = "action";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "request";
    button.textContent = "Call";
    button.setAttribute("aria-label", `Ask ${agent.agent_id} for a call`);
    button.addEventListener("click", () => app.client?.request({ agentId: agent.agent_id }));
    cell.append(button);
    row.append(cell);
  }
  cell.querySelector("button").disabled = agent.status !== "available";
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/**
 * A `request` frame in any of its three shapes: the offer to an agent (`from`, `name`), the ack to
 * a caller (`agent_id`, `state`), or what a dashboard sees (`agent_id`, `caller_id`, `state`).
 */
function upsertRequest(request) {
  const id = request.request_id;
  let entry = app.requests.get(id);
  if (!entry) {
    const li = document.createElement("li");
    li.dataset.requestId = id;
    li.innerHTML = `
      <span class="who">
        <span class="caller"></span> → <span class="agent"></span>
        <small><span class="queue"></span> <span class="outcome"></span></small>
      </span>
      <span class="badge countdown" aria-label="time left"></span>
      <span class="badge state"></span>`;
    entry = { li, request: {}, state: "ringing" };
    app.requests.set(id, entry);
    el.requests.prepend(li);
  }
  entry.request = { ...entry.request, ...request };
  const r = entry.request;
  const caller = requestCaller(r);
  const agent = requestAgent(r);
  entry.li.querySelector(".caller").textContent =
    r.name && r.name !== caller ? `${r.name} (${caller})` : caller ?? "someone";
  entry.li.querySelector(".agent").textContent = agent ?? (r.queue ? `queue ${r.queue}` : "an agent");
  entry.li.querySelector(".queue").textContent = r.queue ? `queue ${r.queue}` : "";
  setRequestState(entry, "ringing");
  renderCounts();
}

/** The caller of a request in any of its shapes (an agent's offer names it `from`). */
function requestCaller(r) {
  return r.caller_id ?? r.from ?? (app.role === "caller" ? app.peerId : null);
}

/** The agent of a request (an agent's own offer does not name it). */
function requestAgent(r) {
  return r.agent_id ?? (app.role === "agent" ? app.peerId : null);
}

function setRequestState(entry, state) {
  entry.state = state;
  const li = entry.li;
  li.dataset.state = state;
  li.querySelector(".state").textContent = state;
  const countdown = li.querySelector(".countdown");
  countdown.hidden = state !== "ringing";
  if (state === "ringing") renderCountdown(entry); else delete countdown.dataset.remainingS;
  renderActions(entry);
  renderAllRinging();
}

function renderActions(entry) {
  const li = entry.li;
  li.querySelectorAll("button.accept, button.decline, button.cancel").forEach((b) => b.remove());
  if (entry.state !== "ringing") return;
  const id = entry.request.request_id;
  const add = (cls, text, action) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = cls;
    button.textContent = text;
    button.addEventListener("click", () => {
      // Disable until the server answers (accepted/ended or an error) so a double tap sends once.
      li.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      action(id);
    });
    li.append(button);
  };
  if (app.role === "agent") {
    add("accept", "Accept", (rid) => app.client?.accept(rid));
    add("decline", "Decline", (rid) => app.client?.decline(rid));
  } else if (app.role === "caller") {
    add("cancel", "Cancel", (rid) => app.client?.cancel(rid));
  }
}

/** `accepted` or `ended`: the request leaves the ringing state with its outcome. */
function finishRequest(id, state, payload) {
  let entry = app.requests.get(id);
  if (!entry) {
    // A dashboard that joined after the request rang, or a caller whose ack we missed.
    upsertRequest({ request_id: id, agent_id: payload.agent_id, caller_id: payload.caller_id });
    entry = app.requests.get(id);
  }
  if (payload.agent_id || payload.caller_id) {
    entry.request = { ...entry.request, agent_id: payload.agent_id ?? entry.request.agent_id,
      caller_id: payload.caller_id ?? entry.request.caller_id };
  }
  setRequestState(entry, state);
  const outcome = entry.li.querySelector(".outcome");
  if (state === "accepted") {
    entry.li.dataset.roomId = payload.room_id ?? "";
    entry.li.dataset.callId = payload.call_id ?? "";
    outcome.textContent = `into room ${payload.room_id} (call ${payload.call_id})`;
    if (payload.token) addRoomLink(entry.li, payload.token);
  } else {
    outcome.textContent = outcomeText(state);
  }
  pruneFinished();
  renderCounts();
}

/** The minted room token goes only into the link's hash, which browsers never send to a server. */
function addRoomLink(li, token) {
  const link = document.createElement("a");
  link.className = "open-call";
  link.href = `/#token=${encodeURIComponent(token)}`;
  link.target = "_blank";
  link.rel = "noopener noreferrer";
  link.textContent = "Open the call";
  li.append(link);
  notify("Call accepted: open it from the request list.");
}

function outcomeText(reason) {
  switch (reason) {
    case "declined": return "by the agent";
    case "cancelled": return "by the caller";
    case "timeout": return "nobody answered in time";
    case "disconnected": return "a side disconnected while it rang";
    case "failed": return "the call could not be created";
    default: return reason;
  }
}

function pruneFinished() {
  const finished = [...app.requests].filter(([, e]) => e.state !== "ringing");
  // Map order is insertion order, so the oldest finished requests come first.
  for (const [id, entry] of finished.slice(0, Math.max(0, finished.length - KEEP_FINISHED))) {
    entry.li.remove();
    app.requests.delete(id);
  }
}

function renderCountdown(entry) {
  const countdown = entry.li.querySelector(".countdown");
  const left = Math.max(0, Math.ceil((entry.request.expires_at - (Date.now() + app.clockOffset)) / 1000));
  countdown.dataset.remainingS = String(left);
  countdown.textContent = Number.isFinite(left) ? `${left} s` : "";
}

/** Once a second: countdowns of ringing requests and the "updated … ago" column. */
function tick() {
  for (const entry of app.requests.values()) {
    if (entry.state === "ringing") renderCountdown(entry);
  }
  for (const cell of el.agents.querySelectorAll(".updated")) renderUpdated(cell);
}

function renderCounts() {
  const agents = el.agents.children.length;
  el.agentCount.textContent = String(agents);
  el.agentsEmpty.hidden = agents > 0;
  el.requestsEmpty.hidden = app.requests.size > 0;
  const ringing = [...app.requests.values()].filter((e) => e.state === "ringing").length;
  el.ringingCount.textContent = String(ringing);
  el.ringingCount.hidden = ringing === 0;
  document.title = ringing ? `(${ringing}) calling-server dashboard` : "calling-server dashboard";
}

// ---------------------------------------------------------------------------------------------
// DOM wiring
// ---------------------------------------------------------------------------------------------

el.statusForm.addEventListener("submit", (event) => {
  event.preventDefault();
  submitStatus();
});
el.myStatus.addEventListener("change", submitStatus);

session.start();
