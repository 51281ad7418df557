"""Replays tests/integration/corpus/http/*.http, raw and byte for byte, against the real server
and checks each answer against corpus/http/expected.json (see corpus/README.md)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parent / "corpus" / "http"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())


def exchange(port: int, raw: bytes, wait: float = 2.0):
    """Sends `raw`, then reads until the server closes or `wait` passes quietly after the first
    complete response. Returns (all bytes, closed_by_server)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        s.sendall(raw)
        data = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                length = 0
                for line in data[:head_end].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(data) >= head_end + 4 + length:
                    # Complete: anything more within a short quiet period is a second response.
                    deadline = min(deadline, time.monotonic() + 0.3)
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                return data, True
            if not chunk:
                return data, True
            data += chunk
        return data, False
    finally:
        s.close()


def parse(data: bytes):
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode()] = value.strip().decode()
    length = int(headers.get("content-length", "0"))
    return status, headers, rest[:length], rest[length:]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_case(server, name):
    expected = EXPECTED[name]
    raw = (CORPUS / f"{name}.http").read_bytes()
    started = time.monotonic()
    data, closed = exchange(server.port, raw)
    assert data.startswith(b"HTTP/1.1 "), f"{name}: no HTTP response (closed={closed}): {data[:200]!r}"
    status, headers, body, trailing = parse(data)
    assert status == expected["status"], f"{name}: {data[:400]!r}"
    if "code" in expected:
        assert headers.get("content-type", "").startswith("application/problem+json"), headers
        assert json.loads(body)["code"] == expected["code"]
    for header, value in expected.get("header", {}).items():
        assert headers.get(header) == value, headers
    assert trailing == b"", f"{name}: a second response followed: {trailing[:300]!r}"
    if b"GET /metrics" in raw.split(b"\r\n\r\n", 1)[-1]:
        assert b"calling_" not in data, f"{name}: the /metrics smuggled in the body was answered"
    if expected.get("closes") is True:
        assert closed and headers.get("connection") == "close", f"{name}: connection left open"
        assert time.monotonic() - started < 1.5, f"{name}: answered only after {time.monotonic() - started:.1f}s"
    elif expected.get("closes") is False:
        assert not closed, f"{name}: keep-alive connection was closed"
    # Whatever the case did, the server still serves.
    assert server.http("GET", "/healthz")[0] == 200


def test_pipelined_requests_with_bodies_do_not_freeze_the_server(server):
    """Found by the http fuzz target (fuzz/regressions/http): lws 4.1.6 looped forever on a request
    with a body pipelined behind another in one read, and the watchdog had to kill the process.
    The server closes such a connection after the first answer instead; sequential keep-alive
    requests with bodies are unaffected."""
    pipelined = (b"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
                 b"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    data, closed = exchange(server.port, pipelined)
    assert data.startswith(b"HTTP/1.1 401 "), data[:200]
    assert closed
    started = time.monotonic()
    assert server.http("GET", "/healthz", timeout=2)[0] == 200
    assert time.monotonic() - started < 1
    # Sequential requests with bodies on one connection still work.
    s = socket.create_connection(("127.0.0.1", server.port), timeout=3)
    try:
        for _ in range(3):
            s.sendall(b"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            data = b""
            while b"\r\n\r\n" not in data or len(parse(data)[2]) < int(parse(data)[1]["content-length"]):
                chunk = s.recv(65536)
                assert chunk, f"connection closed after {data[:200]!r}"
                data += chunk
            assert data.startswith(b"HTTP/1.1 401 "), data[:200]
    finally:
        s.close()
