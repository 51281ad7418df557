"""RFC 6455 §7.4 and §8.1 on a client's Close frame (issue 37): a status code that is not allowed
on the wire is answered with 1002, a reason that is not UTF-8 with 1007, never echoed; an allowed
code is echoed. And the id rule (docs/protocol.md, "Ids"): a room or peer id with '/' is refused
at token issue (`calling-server token`, `POST /v1/tokens`) and at the join."""

from __future__ import annotations

import http.client
import json
import struct
import subprocess

import pytest

from support import BINARY, RawWebSocket, jwt_payload, raw_upgrade, sign_jwt


def close_answer(server, payload: bytes):
    raw = RawWebSocket(server.port, server.token("r1", "alice"))
    try:
        assert raw.recv_json()["type"] == "welcome"
        raw.send_frame(0x8, payload)
        while True:
            opcode, answer = raw.recv_frame(timeout=3.0)
            if opcode == 0x8:
                break
        code = struct.unpack("!H", answer[:2])[0] if len(answer) >= 2 else None
        return code, answer[2:]
    finally:
        raw.close()


@pytest.mark.parametrize("code", [5000, 65535, 999, 1004, 1005, 1006, 1015, 1016, 2999])
def test_close_code_not_allowed_on_the_wire_gets_1002(start_server, code):
    server = start_server()
    answer, reason = close_answer(server, struct.pack("!H", code) + b"bye")
    assert answer == 1002, (code, answer, reason)
    reason.decode("utf-8")  # our own reason, valid UTF-8


def test_one_byte_close_payload_gets_1002(start_server):
    server = start_server()
    assert close_answer(server, b"\x03")[0] == 1002


def test_close_reason_not_utf8_gets_1007(start_server):
    server = start_server()
    answer, reason = close_answer(server, struct.pack("!H", 1000) + b"\xff\xfe")
    assert answer == 1007, (answer, reason)
    reason.decode("utf-8")


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1011, 3000, 4999])
def test_allowed_close_code_is_echoed(start_server, code):
    server = start_server()
    assert close_answer(server, struct.pack("!H", code) + "ok é".encode())[0] == code


def test_protocol_error_close_is_not_a_clean_leave(start_server):
    """A close we answer with 1002 is a connection lost, not a leave: with a reconnect grace, the
    other peer sees no peer-left at once (the same as a dropped socket)."""
    server = start_server(reconnect_grace_ms=3000)
    bob = RawWebSocket(server.port, server.token("r1", "bob"))
    try:
        assert bob.recv_json()["type"] == "welcome"
        assert close_answer(server, struct.pack("!H", 5000))[0] == 1002
        frames = []
        try:
            while True:
                frames.append(bob.recv_json(timeout=1.0)["type"])
        except (TimeoutError, OSError):
            pass
        assert "peer-left" not in frames, frames
    finally:
        bob.close()


# ids -------------------------------------------------------------------------------------------

def cli_token(server, *args):
    return subprocess.run([str(BINARY), "token", "--data-dir", str(server.data_dir), *args],
                          capture_output=True, text=True, timeout=10, env=server.env)


@pytest.mark.parametrize("flags", [["--room", "A/B", "--peer", "alice"], ["--room", "r1", "--peer", "a/b"],
                                   ["--room", "a b", "--peer", "alice"]])
def test_cli_refuses_ids_against_the_rule(start_server, flags):
    server = start_server()
    result = cli_token(server, *flags)
    assert result.returncode == 64, (result.returncode, result.stdout, result.stderr)
    assert "must not contain" in result.stderr, result.stderr


def test_cli_keeps_ordinary_ids(start_server):
    server = start_server()
    result = cli_token(server, "--room", "room-1.x_y~z", "--peer", "alice@example.com")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("claim,value,code", [("room_id", "A/B", "invalid_room_id"), ("room_id", "a\u0001b", "invalid_room_id"),
                                              ("sub", "a/b", "invalid_peer_id")])
def test_join_refuses_a_token_signed_elsewhere_with_a_bad_id(start_server, claim, value, code):
    server = start_server()
    claims = jwt_payload(server.token("r1", "alice"))
    claims[claim] = value
    token = sign_jwt(claims, server.secret())
    status, _, body = raw_upgrade(server.port, f"/v1/ws?token={token}")
    assert status == 400, (status, body)
    assert json.loads(body)["code"] == code, body


def test_post_tokens_refuses_a_room_id_with_a_slash(start_server):
    server = start_server()
    created = subprocess.run([str(BINARY), "apikey", "create", "--name", "t", "--scope", "calls",
                              "--data-dir", str(server.data_dir)], capture_output=True, text=True, timeout=10, env=server.env)
    assert created.returncode == 0, created.stderr
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/v1/tokens", body=json.dumps({"room_id": "A/B", "peer_id": "alice"}),
                 headers={"X-API-Key": created.stdout.strip(), "Content-Type": "application/json"})
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert response.status == 400, body
    assert body["invalid_params"][0]["name"] == "room_id", body
