// Shared by the demo page (demo.js) and the presence dashboard (dashboard.js): the connect form,
// #status, `#token=<jwt>` links and the connect/leave life cycle of the page's one SDK client.
// The selectors are listed at the top of each page's script.

export const $ = (selector) => document.querySelector(selector);

export function show(node) { node.hidden = false; }
export function hide(node) { node.hidden = true; }

/** The connect form and status elements both pages have. */
export function connectElements() {
  return {
    status: $("#status"),
    connectPanel: $("#connect-panel"),
    connectForm: $("#connect-form"),
    tokenInput: $("#token-input"),
    connectButton: $("#connect"),
    connectError: $("#connect-error"),
    disconnect: $("#disconnect"),
  };
}

/** The server's WebSocket URL for `path`, on the host that served this page. */
export function socketURL(path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

/** The token of a `#token=<jwt>` link (make serve prints these), or null. */
export function tokenFromHash() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  return token && token.trim() ? token.trim() : null;
}

/** #status: `data-state` and the text "state" or "state: detail". */
export function renderStatus(node, state, detail = "") {
  node.dataset.state = state;
  node.textContent = detail ? `${state}: ${detail}` : state;
}

/**
 * The connect/leave life cycle of a page around one SDK client (`app.client`). `page` gives:
 * - `el`: the elements of connectElements(); `app`: the page state, whose `client` this sets
 * - `createClient(token)`: a new, unconnected client
 * - `subscribe(on, client)`: the page's handlers, registered with `on(event, handler)` (removed
 *   again on leave)
 * - `beforeLeave(client)` (optional): last words while the socket is still there
 * - `reset()`: clears the page after the client is gone
 * - `setStatus(state, detail)`: the page's #status renderer
 * - `closeTexts`: close code → text, besides 1000 and 4401
 * - `leaveText`: the status detail after the user left; `missingToken`: the error for an empty form
 */
export function clientSession(page) {
  const { el, app } = page;
  let unsubscribe = [];
  const closeTexts = {
    1000: "disconnected",
    4401: "the token expired; paste a fresh one",
    ...page.closeTexts,
  };

  function describeClose(code, reason) {
    return closeTexts[code] ?? (reason ? `${reason} (${code})` : `connection closed (${code})`);
  }

  function showConnectError(error) {
    el.connectError.textContent = error?.message ?? String(error);
    el.connectError.dataset.code = String(error?.code ?? "");
    show(el.connectError);
  }

  /** The socket closed for good: say why and offer the connect form again. */
  function closed(code, reason) {
    const text = describeClose(code, reason);
    page.setStatus("closed", text);
    showConnectError({ code, message: text });
    show(el.connectPanel);
    el.disconnect.hidden = true;
  }

  function subscribe(client) {
    const on = (event, handler) => unsubscribe.push(client.on(event, handler));
    // `reconnecting` and `disconnected` carry details; a bare state change must not wipe them.
    on("state", ({ state }) => { if (el.status.dataset.state !== state) page.setStatus(state); });
    on("reconnecting", ({ attempt, delayMs }) =>
      page.setStatus("reconnecting", `attempt ${attempt} in ${Math.round(delayMs / 1000)} s`));
    page.subscribe(on, client);
  }

  async function connect(token) {
    leave();
    hide(el.connectError);
    el.connectButton.disabled = true;
    const client = page.createClient(token);
    app.client = client;
    subscribe(client);
    page.setStatus("connecting");
    try {
      await client.connect();
    } catch (error) {
      // The SDK reports refusals (expired token, wrong room, …) as CallingError with a stable code.
      if (app.client === client) {
        leave(error.message);
        showConnectError(error);
      }
    } finally {
      el.connectButton.disabled = false;
    }
  }

  /** Closes the current client (if any) and clears every trace of it from the page. */
  function leave(detail = page.leaveText) {
    const client = app.client;
    if (client) {
      page.beforeLeave?.(client);
      for (const off of unsubscribe) off();
      unsubscribe = [];
      client.disconnect();
    }
    app.client = null;
    page.reset();
    if (client) page.setStatus("closed", detail);
  }

  /** The connect form, #disconnect, `#token=` links: connects at once when the page has one. */
  function start() {
    el.connectForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = el.tokenInput.value.trim();
      if (!token) {
        showConnectError({ code: "token_missing", message: page.missingToken });
        el.tokenInput.focus();
        return;
      }
      connect(token);
    });
    el.disconnect.addEventListener("click", () => leave());
    window.addEventListener("hashchange", () => {
      const token = tokenFromHash();
      if (token) connect(token);
    });
    const initial = tokenFromHash();
    if (initial) connect(initial);
  }

  return { closed, start };
}
