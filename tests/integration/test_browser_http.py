"""The server's side of browser support, against the real binary: the SDK and pages served from
web_root (types, ETag/304, nothing outside the folder, pages switch), CORS on the peer-token
routes for allowed, refused and absent origins, none on API-key routes, and the Origin check on
WebSocket upgrades."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

import support
from support import HOST, raw_upgrade, read_http_response

REPO = Path(__file__).resolve().parents[2]
WEB_ROOT = REPO / "sdk" / "js"


def raw_get(port: int, target: bytes, headers: dict | None = None):
    """GET with the request target sent byte for byte (http.client would normalise it)."""
    lines = [b"GET " + target + b" HTTP/1.1", f"Host: {HOST}:{port}".encode(), b"Connection: close"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}".encode())
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        try:
            status, hdrs, body, _ = read_http_response(sock)
        except ConnectionError:
            return None, {}, b""
        return status, hdrs, body


@pytest.fixture
def web_server(start_server, tmp_path):
    """A server on a copy of sdk/js plus a secret file beside it and a symlink pointing at it."""
    root = tmp_path / "web"
    (root / "demo").mkdir(parents=True)
    for name in ("calling-client.js", "calling-client.d.ts"):
        (root / name).write_bytes((WEB_ROOT / name).read_bytes())
    (root / "demo" / "index.html").write_text("<!doctype html><title>demo</title>")
    (root / "demo" / "dashboard.html").write_text("<!doctype html><title>dashboard</title>")
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    os.symlink(tmp_path / "secret.txt", root / "leak.js")
    os.symlink(tmp_path, root / "up")
    return start_server(web_root=str(root))


def test_the_sdk_is_served_as_javascript_with_a_validator(web_server):
    status, headers, body = web_server.http("GET", "/sdk/calling-client.js")
    assert status == 200
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    assert body == (WEB_ROOT / "calling-client.js").read_bytes()
    etag = headers["etag"]
    status, headers, body = web_server.http("GET", "/sdk/calling-client.js", {"If-None-Match": etag})
    assert (status, body) == (304, b"")
    status, headers, _ = web_server.http("GET", "/sdk/calling-client.d.ts")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    status, headers, body = web_server.http("HEAD", "/sdk/calling-client.js")
    assert status == 200 and body == b""


def test_the_demo_and_dashboard_pages_are_served_at_their_paths(web_server):
    status, headers, body = web_server.http("GET", "/")
    assert status == 200 and b"<title>demo</title>" in body
    assert headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in headers["content-security-policy"]
    status, _, body = web_server.http("GET", "/dashboard")
    assert status == 200 and b"<title>dashboard</title>" in body


@pytest.mark.parametrize("target", [
    b"/sdk/../secret.txt", b"/sdk/%2e%2e/secret.txt", b"/sdk/%2E%2E%2Fsecret.txt", b"/sdk/%252e%252e/secret.txt",
    b"/sdk/..%2fsecret.txt", b"/sdk/leak.js", b"/sdk/up/secret.txt", b"/sdk/calling-client.js%00.html",
    b"/sdk/%00", b"/sdk/.%2e/.%2e/secret.txt", b"/sdk/demo/..%5c..%5csecret.txt",
])
def test_nothing_outside_the_folder_is_ever_served(web_server, target):
    status, _, body = raw_get(web_server.port, target)
    assert b"TOP-SECRET" not in body
    assert status in (404, 400, 403, None), (target, status, body)
    # Paths that reach the router at all get a 404, never a file.
    if status is not None and status != 400:
        assert status == 404, (target, status)


def test_pages_can_be_turned_off_while_the_sdk_stays(start_server):
    server = start_server(web_root=str(WEB_ROOT), serve_pages="false")
    assert server.http("GET", "/")[0] == 404
    assert server.http("GET", "/dashboard")[0] == 404
    assert server.http("GET", "/sdk/demo/demo.js")[0] == 404
    assert server.http("GET", "/sdk/calling-client.js")[0] == 200


def test_an_unreadable_web_root_stops_the_start(tmp_path):
    server = support.Server(tmp_path / "data", flags={"web_root": str(tmp_path / "missing")})
    with pytest.raises(RuntimeError, match="web_root"):
        server.start()


# --- CORS -------------------------------------------------------------------------------------


def test_preflight_and_cors_headers_for_any_origin_by_default(server):
    token = server.token("r1", "alice")
    origin = "https://app.example"
    status, headers, _ = server.http("OPTIONS", "/v1/ice", {"Origin": origin, "Access-Control-Request-Method": "GET",
                                                            "Access-Control-Request-Headers": "authorization"})
    assert status == 204
    assert headers["access-control-allow-origin"] == "*"
    assert "authorization" in headers["access-control-allow-headers"].lower()
    assert "GET" in headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in headers
    status, headers, body = server.http("GET", "/v1/ice", {"Origin": origin, "Authorization": f"Bearer {token}"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"
    status, headers, body = server.http("GET", "/v1/rooms/r1/messages", {"Origin": origin, "Authorization": f"Bearer {token}"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"
    status, headers, _ = server.http("OPTIONS", "/webrtc-proxy/c1/v1/webrtc/sessions/s1",
                                     {"Origin": origin, "Access-Control-Request-Method": "PATCH"})
    assert status == 204 and "PATCH" in headers["access-control-allow-methods"]


def test_a_configured_list_echoes_allowed_origins_and_refuses_others(start_server):
    server = start_server(allowed_origins="https://app.example,http://localhost:5173")
    token = server.token("r1", "alice")
    auth = {"Authorization": f"Bearer {token}"}
    status, headers, _ = server.http("GET", "/v1/ice", {**auth, "Origin": "https://app.example"})
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example"
    assert headers["vary"] == "Origin"
    status, headers, body = server.http("GET", "/v1/ice", {**auth, "Origin": "https://evil.example"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in headers
    status, _, body = server.http("OPTIONS", "/v1/ice", {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    # No Origin: curl, the Swift SDK, a backend. Never refused, and no CORS headers.
    status, headers, _ = server.http("GET", "/v1/ice", auth)
    assert status == 200 and "access-control-allow-origin" not in headers
    # A page of this very server is same-origin whatever the list says.
    status, headers, _ = server.http("GET", "/v1/ice", {**auth, "Origin": f"http://{HOST}:{server.port}"})
    assert status == 200


def test_api_key_routes_send_no_cors_headers(server):
    status, headers, _ = server.http("OPTIONS", "/v1/calls", {"Origin": "https://app.example",
                                                             "Access-Control-Request-Method": "POST"})
    assert status == 405
    assert not any(name.startswith("access-control-") for name in headers)
    status, headers, _ = server.http("POST", "/v1/tokens", {"Origin": "https://app.example"})
    assert not any(name.startswith("access-control-") for name in headers)


def test_websocket_upgrades_check_origin_against_the_same_list(start_server):
    server = start_server(allowed_origins="https://app.example")
    token = server.token("r1", "alice")
    status, _, body = raw_upgrade(server.port, f"/v1/ws?token={token}", {"Origin": "https://evil.example"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    presence = server.token(None, "dash", role="dashboard", scope="presence")
    status, _, body = raw_upgrade(server.port, f"/v1/presence?token={presence}", {"Origin": "https://evil.example"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    assert raw_upgrade(server.port, f"/v1/ws?token={token}", {"Origin": "https://app.example"})[0] == 101
    assert raw_upgrade(server.port, f"/v1/ws?token={token}")[0] == 101
    # Same origin: raw_upgrade sends `Host: 127.0.0.1`, so this is a page of this server.
    assert raw_upgrade(server.port, f"/v1/ws?token={token}", {"Origin": f"http://{HOST}"})[0] == 101
    assert server.metrics().get('calling_upgrades_total{result="refused_origin"}') == 2


def test_dev_links_carry_tokens_the_server_accepts(start_server):
    server = start_server(print_demo_links="true", web_root=str(WEB_ROOT))
    text = server.stdout_path.read_text()
    links = [line.split(": ", 1)[1] for line in text.splitlines() if "#token=" in line]
    assert len(links) == 4, text
    demo = links[0]
    assert demo.startswith(f"http://{HOST}:{server.port}/#token=")
    token = demo.split("#token=", 1)[1]
    assert raw_upgrade(server.port, f"/v1/ws?token={token}")[0] == 101
    assert links[2].split("#")[0].endswith("/dashboard")
    # Never in the log.
    assert token not in server.stderr_text()
