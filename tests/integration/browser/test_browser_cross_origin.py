"""docs/browser.md's Quick start in real Chromium: a page served from another origin (the same
address, another port: a plain `python -m http.server`) imports `/sdk/calling-client.js` from
calling-server and connects, with the default `allowed_origins` and with a list naming the page's
origin. With a list that does not name it, the import is refused, and the same app with its own
copy of the SDK gets `origin_not_allowed` (403, not retryable) and opens no second socket.

The page (app.html, written below) reads what to do from its URL fragment and leaves its outcome
in `window.result`.
"""

from __future__ import annotations

import shutil
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

APP_HTML = """<!doctype html>
<meta charset="utf-8"><title>another origin</title>
<script type="module">
const params = new URLSearchParams(location.hash.slice(1));
let sockets = 0;
class CountingWebSocket extends WebSocket {
  constructor(...args) { super(...args); sockets += 1; }
}
window.sockets = () => sockets;
(async () => {
  const out = { imported: false };
  let sdk = null;
  try {
    sdk = await import(params.get("sdk"));
    out.imported = true;
  } catch (error) {
    out.importError = String(error);
    // An app that bundles the SDK instead: its own copy, from its own origin.
    if (params.get("fallback")) sdk = await import(params.get("fallback"));
  }
  if (sdk) {
    const client = new sdk.CallingClient({ url: params.get("ws"), token: params.get("token"), WebSocket: CountingWebSocket,
                                           backoff: { initialMs: 100, maxMs: 200, jitter: 0 } });
    window.client = client;
    try {
      await client.connect();
      out.connected = true;
      out.peerId = client.peerId;
      // A CORS route with a preflight (Authorization) from this origin as well.
      out.history = (await client.fetchMessages()).messages.length;
    } catch (error) {
      out.error = { code: error.code, status: error.status ?? null, retryable: error.retryable };
    }
    out.state = client.state;
  }
  window.result = out;
})();
</script>
"""


@pytest.fixture
def page_origin(blab, tmp_path):
    """A static file server on the server host's address on Chromium's link, another port: the
    origin of "your own page". Serves app.html and a copy of the SDK (for the bundled case)."""
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "app.html").write_text(APP_HTML)
    shutil.copy(REPO / "sdk" / "js" / "calling-client.js", pages / "calling-client.js")
    address = blab.server.lab.a.gateway
    proc = blab.lab.spawn(blab.server.host, [sys.executable, "-u", "-m", "http.server", "0", "--bind", address,
                                             "--directory", str(pages)], "page-server")
    port = int(proc.wait_for_output(r"port (\d+)", 10).group(1))
    return f"http://{address}:{port}"


def open_app(browser, page_origin: str, server, token: str, fallback: bool = False) -> dict:
    base = server.base_url_for(server.lab.a)
    fragment = {"sdk": f"{base}/sdk/calling-client.js", "ws": f"ws://{server.lab.a.gateway}:{server.port}/v1/ws",
                "token": token}
    if fallback:
        fragment["fallback"] = f"{page_origin}/calling-client.js"
    # A query of its own per load: a URL that differs only in its fragment would not reload the page.
    browser.driver.get(f"{page_origin}/app.html?peer={urllib.parse.quote(token[-12:])}#{urllib.parse.urlencode(fragment)}")
    return browser.wait_js("window.result", 15, "the app's outcome")


def test_a_page_of_another_origin_imports_the_sdk_and_connects(blab, page_origin):
    server = blab.server
    browser = blab.browser("app")

    result = open_app(browser, page_origin, server, server.token("xo", "alice"))
    assert result == {"imported": True, "connected": True, "peerId": "alice", "history": 0, "state": "connected"}, result

    # A list that names the page's origin: the same.
    server.flags["allowed_origins"] = f"https://app.example,{page_origin}"
    server.restart()
    result = open_app(browser, page_origin, server, server.token("xo", "bob"))
    assert result == {"imported": True, "connected": True, "peerId": "bob", "history": 0, "state": "connected"}, result


def test_a_refused_origin_cannot_import_and_gets_origin_not_allowed_without_retrying(blab, page_origin):
    server = blab.server
    server.flags["allowed_origins"] = "https://app.example"
    server.restart()
    browser = blab.browser("app")

    result = open_app(browser, page_origin, server, server.token("xo", "alice"), fallback=True)
    assert result["imported"] is False, result
    assert result["error"] == {"code": "origin_not_allowed", "status": 403, "retryable": False}, result
    assert result["state"] == "closed", result
    # No reconnect: one socket, and still one after several backoff periods.
    time.sleep(1.5)
    assert browser.js("return window.sockets();") == 1
    assert browser.js("return window.client.state;") == "closed"
    assert server.metrics().get('calling_upgrades_total{result="refused_origin"}') == 1
