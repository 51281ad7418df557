"""deploy/nginx.conf in front of a real calling-server: TLS terminated by a real nginx on loopback
(certificate made here with the openssl CLI), a WebSocket join and chat, REST calls with an API key
and a peer token, the HTTP→HTTPS redirect, and a `room_full` refusal that reaches the client as a
409 through the proxy. Only the ports and certificate paths of the file are swapped.

Needs the Debian package `nginx-light` (`deploy/install-deps.sh --test`).
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from support import BINARY, HOST, REPO, kill_and_reap, run

NGINX = shutil.which("nginx") or (Path("/usr/sbin/nginx") if Path("/usr/sbin/nginx").exists() else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (deploy/install-deps.sh --test)")
DEPLOY_CONF = REPO / "deploy" / "nginx.conf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=30)
    return cert, key


def site_config(upstream_port: int, https_port: int, http_port: int, cert: Path, key: Path) -> str:
    """deploy/nginx.conf with only its deployment values replaced."""
    text = DEPLOY_CONF.read_text()
    replacements = [
        (r"server 127\.0\.0\.1:8080;", f"server 127.0.0.1:{upstream_port};"),
        (r"listen 443 ssl;", f"listen {HOST}:{https_port} ssl;"),
        (r"listen \[::\]:443 ssl;\n", ""),
        (r"listen 80;", f"listen {HOST}:{http_port};"),
        (r"listen \[::\]:80;\n", ""),
        (r"ssl_certificate     \S+;", f"ssl_certificate {cert};"),
        (r"ssl_certificate_key \S+;", f"ssl_certificate_key {key};"),
    ]
    for pattern, value in replacements:
        text, count = re.subn(pattern, value, text)
        assert count == 1, f"deploy/nginx.conf no longer has exactly one {pattern!r}"
    return text


@pytest.fixture
def nginx_front(start_server, tmp_path):
    server = start_server(max_peers_per_room=2)
    cert, key = self_signed(tmp_path)
    https_port, http_port = free_port(), free_port()
    (tmp_path / "site.conf").write_text(site_config(server.port, https_port, http_port, cert, key))
    temp = tmp_path / "nginx-temp"
    temp.mkdir()
    temp.chmod(0o777)
    main = tmp_path / "nginx.conf"
    main.write_text(f"""
daemon off;
worker_processes 1;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {tmp_path}/site.conf;
}}
""")
    checked = subprocess.run([str(NGINX), "-t", "-p", str(tmp_path), "-c", str(main)], capture_output=True, text=True,
                             timeout=10)
    assert checked.returncode == 0, checked.stderr
    proc = subprocess.Popen([str(NGINX), "-p", str(tmp_path), "-c", str(main)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    context = ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection((HOST, https_port), timeout=0.5):
                break
        except OSError:
            assert proc.poll() is None, (tmp_path / "nginx-error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not listen"
            time.sleep(0.05)
    try:
        yield server, https_port, http_port, context
    finally:
        kill_and_reap(proc, group=True)


def https(port: int, context, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    conn = http.client.HTTPSConnection(HOST, port, context=context, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_nginx_timeouts_outlast_the_servers_idle_hangup():
    text = DEPLOY_CONF.read_text()
    websocket_block = text[text.index("location ~ ^/v1/(ws|presence)$"):]
    websocket_block = websocket_block[:websocket_block.index("}")]
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", websocket_block).group(1))
    config = subprocess.run([str(BINARY), "config"], capture_output=True, text=True, timeout=10).stdout
    idle_hangup = int(re.search(r"^idle_hangup_seconds = (\d+)$", config, re.M).group(1))
    assert read_timeout > idle_hangup, "nginx would cut idle-but-live WebSockets before the server does"
    assert "proxy_set_header Upgrade $http_upgrade;" in websocket_block
    assert "X-Forwarded-For $proxy_add_x_forwarded_for" in text


def test_websocket_and_rest_work_through_nginx_with_tls(nginx_front):
    server, port, http_port, context = nginx_front

    # REST with an API key: create a call (through nginx, over TLS).
    created = subprocess.run([str(BINARY), "apikey", "create", "--name", "nginx", "--data-dir", str(server.data_dir)],
                             capture_output=True, text=True, timeout=10)
    key = created.stdout.strip()
    status, _, body = https(port, context, "POST", "/v1/calls", {"X-API-Key": key, "Content-Type": "application/json"},
                            json.dumps({"room_id": "via-nginx", "peer_id": "patient"}).encode())
    assert status == 201, body
    call = json.loads(body)
    status, _, body = https(port, context, "GET", "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, _, body = https(port, context, "GET", "/v1/ice", {"Authorization": f"Bearer {call['access_token']}"})
    assert status == 200 and "ice_servers" in json.loads(body), body

    # Plain HTTP is redirected to HTTPS.
    conn = http.client.HTTPConnection(HOST, http_port, timeout=5)
    conn.request("GET", "/v1/calls")
    redirect = conn.getresponse()
    assert redirect.status == 301 and redirect.getheader("location", "").startswith("https://"), redirect.status
    conn.close()

    async def scenario():
        url = f"wss://{HOST}:{port}/v1/ws?token="
        options = dict(ssl=context, proxy=None, compression=None, open_timeout=5, ping_interval=None)
        async with ws_connect(url + call["access_token"], **options) as patient, \
                ws_connect(url + server.token("via-nginx", "doctor"), **options) as doctor:
            welcome = json.loads(await patient.recv())
            assert welcome["type"] == "welcome" and welcome["payload"]["room_id"] == "via-nginx", welcome
            assert json.loads(await doctor.recv())["payload"]["peers"][0]["peer_id"] == "patient"
            assert json.loads(await patient.recv())["type"] == "peer-joined"
            await patient.send(json.dumps({"type": "chat", "payload": {"client_id": "c1", "text": "through nginx"}}))
            ack = json.loads(await patient.recv())
            assert ack["type"] == "chat-ack" and ack["payload"]["seq"] == 1, ack
            chat = json.loads(await doctor.recv())
            assert chat["type"] == "chat" and chat["from"] == "patient" and chat["payload"]["text"] == "through nginx"
            # The room is full (max_peers_per_room=2): the refusal crosses nginx as a 409, not a hang.
            with pytest.raises(InvalidStatus) as refused:
                async with ws_connect(url + server.token("via-nginx", "third"), **options):
                    pass
            assert refused.value.response.status_code == 409
            assert json.loads(refused.value.response.body)["code"] == "room_full"

    run(scenario())
