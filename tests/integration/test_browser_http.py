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
    # TypeScript tools that import by URL find the typings through this header.
    assert headers["x-typescript-types"] == "./calling-client.d.ts"
    status, headers, _ = web_server.http("GET", "/sdk/calling-client.d.ts")
    assert status == 200 and headers["content-type"] == "application/typescript; charset=utf-8"
    assert "x-typescript-types" not in headers
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
    # The refusal is readable by the refused page (else a browser shows it as a network error).
    assert headers["access-control-allow-origin"] == "https://evil.example" and headers["vary"] == "Origin"
    status, _, body = server.http("OPTIONS", "/v1/ice", {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    # No Origin: curl, the Swift SDK, a backend. Never refused, and no CORS headers.
    status, headers, _ = server.http("GET", "/v1/ice", auth)
    assert status == 200 and "access-control-allow-origin" not in headers
    # A page of this very server is same-origin whatever the list says.
    status, headers, _ = server.http("GET", "/v1/ice", {**auth, "Origin": f"http://{HOST}:{server.port}"})
    assert status == 200


def test_the_sdk_files_speak_cors_for_any_origin_by_default(server):
    """A page of another origin imports /sdk/calling-client.js as a module, always a CORS request."""
    origin = "http://127.0.0.1:9999"
    for path in ("/sdk/calling-client.js", "/sdk/calling-client.d.ts", "/sdk/package.json"):
        status, headers, _ = server.http("GET", path, {"Origin": origin})
        assert status == 200, path
        assert headers["access-control-allow-origin"] == "*", path
        assert "access-control-allow-credentials" not in headers
    # The same headers without Origin, so a cached copy serves any page.
    status, headers, _ = server.http("GET", "/sdk/calling-client.js")
    assert status == 200 and headers["access-control-allow-origin"] == "*" and "vary" not in headers
    etag = headers["etag"]
    status, headers, _ = server.http("GET", "/sdk/calling-client.js", {"Origin": origin, "If-None-Match": etag})
    assert status == 304 and headers["access-control-allow-origin"] == "*"
    status, headers, _ = server.http("OPTIONS", "/sdk/calling-client.js", {"Origin": origin, "Access-Control-Request-Method": "GET"})
    assert status == 204
    assert headers["access-control-allow-origin"] == "*"
    assert headers["access-control-allow-methods"] == "GET, HEAD, OPTIONS"
    # Not a preflight: still a method the files do not take.
    assert server.http("OPTIONS", "/sdk/calling-client.js", {"Origin": origin})[0] == 405
    assert server.http("GET", "/sdk/missing.js", {"Origin": origin})[1]["access-control-allow-origin"] == "*"
    # The pages themselves are not for other origins to embed: no CORS there.
    assert "access-control-allow-origin" not in server.http("GET", "/", {"Origin": origin})[1]


def test_the_sdk_files_follow_an_allowed_origins_list(start_server):
    server = start_server(allowed_origins="http://127.0.0.1:9999")
    status, headers, _ = server.http("GET", "/sdk/calling-client.js", {"Origin": "http://127.0.0.1:9999"})
    assert status == 200
    assert headers["access-control-allow-origin"] == "http://127.0.0.1:9999" and headers["vary"] == "Origin"
    status, headers, _ = server.http("OPTIONS", "/sdk/calling-client.js",
                                     {"Origin": "http://127.0.0.1:9999", "Access-Control-Request-Method": "GET"})
    assert status == 204 and headers["access-control-allow-origin"] == "http://127.0.0.1:9999"
    status, headers, body = server.http("GET", "/sdk/calling-client.js", {"Origin": "http://127.0.0.1:9998"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    status, _, body = server.http("OPTIONS", "/sdk/calling-client.js",
                                  {"Origin": "http://127.0.0.1:9998", "Access-Control-Request-Method": "GET"})
    assert status == 403 and json.loads(body)["code"] == "origin_not_allowed"
    # Without Origin (curl, a bundler fetching the file): served, and caches told it varies.
    status, headers, _ = server.http("GET", "/sdk/calling-client.js")
    assert status == 200 and "access-control-allow-origin" not in headers and headers["vary"] == "Origin"
    # The server's own pages import it whatever the list says.
    status, headers, _ = server.http("GET", "/sdk/calling-client.js", {"Origin": f"http://{HOST}:{server.port}"})
    assert status == 200 and headers["access-control-allow-origin"] == f"http://{HOST}:{server.port}"


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
    links = dict(line.strip().split(": ", 1) for line in text.splitlines() if "#token=" in line)
    assert list(links) == ["demo, alice", "demo, bob", "dashboard, supervisor", "dashboard, agent ann",
                           "dashboard, caller carl"], text
    demo = links["demo, alice"]
    assert demo.startswith(f"http://{HOST}:{server.port}/#token=")
    token = demo.split("#token=", 1)[1]
    assert raw_upgrade(server.port, f"/v1/ws?token={token}")[0] == 101
    for label in ("dashboard, supervisor", "dashboard, agent ann", "dashboard, caller carl"):
        assert links[label].split("#")[0] == f"http://{HOST}:{server.port}/dashboard", label
    roles = {label: support.jwt_payload(link.split("#token=", 1)[1])["role"] for label, link in links.items()}
    assert roles["dashboard, caller carl"] == "caller" and roles["dashboard, agent ann"] == "agent"
    # Never in the log.
    assert token not in server.stderr_text()


def test_the_printed_agent_and_caller_links_run_a_request_to_accept(start_server):
    """What the dashboard pages of the printed links do: carl (the caller link) asks for ann (the
    agent link), ann accepts, and both get a room token for the same room."""
    from support import Peer, run
    from websockets.asyncio.client import connect as ws_connect

    server = start_server(print_demo_links="true", web_root=str(WEB_ROOT))
    links = dict(line.strip().split(": ", 1) for line in server.stdout_path.read_text().splitlines() if "#token=" in line)
    agent_token = links["dashboard, agent ann"].split("#token=", 1)[1]
    caller_token = links["dashboard, caller carl"].split("#token=", 1)[1]

    async def presence(token, label):
        ws = await ws_connect(f"ws://{HOST}:{server.port}/v1/presence?token={token}", proxy=None, compression=None,
                              open_timeout=5, ping_interval=None)
        peer = Peer(ws, label)
        peer.welcome = await peer.recv_type("connected", skip=("status",))
        return peer

    async def body():
        agent = await presence(agent_token, "ann")
        caller = await presence(caller_token, "carl")
        assert caller.welcome["payload"]["role"] == "caller"
        assert [entry["agent_id"] for entry in caller.welcome["payload"]["agents"]] == ["ann"]
        await caller.send({"type": "request", "payload": {"agent_id": "ann"}})
        offer = await agent.recv_type("request", skip=("status",))
        assert offer["from"] == "carl"
        await agent.send({"type": "accept", "payload": {"request_id": offer["payload"]["request_id"]}})
        accepted = (await caller.recv_type("accepted", skip=("status", "request")))["payload"]
        mine = (await agent.recv_type("accepted", skip=("status",)))["payload"]
        assert accepted["room_id"] == mine["room_id"] and accepted["token"] and mine["token"]
        room = await Peer.connect(server, accepted["token"], "carl-in-room")
        await room.close()
        await caller.close()
        await agent.close()

    run(body(), timeout=20)


def page_hint_commands(server, path: str) -> list[str]:
    """The full `calling-server token …` commands in a page's #token-hint."""
    import html
    import re

    status, _, body = server.http("GET", path)
    assert status == 200
    hint = re.search(r'<p id="token-hint"[^>]*>(.*?)</p>', body.decode(), re.S).group(1)
    return [html.unescape(code) for code in re.findall(r"<code>(calling-server token [^<]*)</code>", hint)]


@pytest.mark.parametrize("path", ["/", "/dashboard"])
def test_the_pages_token_hint_mints_a_token_the_server_accepts_as_written(start_server, tmp_path, path):
    """The hint's command, run as written from the folder `make serve` runs in (data dir ./data),
    mints a token that this server accepts: the secret is read from the server's --data-dir."""
    import subprocess

    from support import BINARY

    work = tmp_path / "checkout"
    (work / "data").mkdir(parents=True)
    server = start_server(data_dir=work / "data", web_root=str(WEB_ROOT))
    commands = page_hint_commands(server, path)
    assert commands, f"no calling-server token command in the hint of {path}"
    for command in commands:
        assert "--data-dir ./data" in command, command
        argv = [str(BINARY), *command.split()[1:]]
        minted = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=10, env=server.env)
        assert minted.returncode == 0, (command, minted.stderr)
        token = minted.stdout.strip().splitlines()[-1]
        endpoint = "/v1/presence" if "--scope presence" in command else "/v1/ws"
        assert raw_upgrade(server.port, f"{endpoint}?token={token}")[0] == 101, command
