"""Upgrade authentication: every bad token is refused with the right HTTP status and an
application/problem+json body BEFORE any 101, and the server keeps serving afterwards."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

from support import Peer, RawWebSocket, b64url, b64url_decode, claims, jwt_payload, raw_upgrade, run, sign_jwt

PROBLEM_FIELDS = {"type", "title", "status", "code", "detail"}


def assert_problem(status, headers, body, expected_status, expected_code=None):
    assert status == expected_status, (status, body)
    assert headers.get("content-type", "").startswith("application/problem+json"), headers
    problem = json.loads(body)
    assert PROBLEM_FIELDS <= set(problem), problem
    assert problem["status"] == expected_status, problem
    assert isinstance(problem["type"], str) and problem["type"], problem
    assert isinstance(problem["title"], str) and problem["title"], problem
    assert isinstance(problem["detail"], str) and problem["detail"], problem
    if expected_code is not None:
        codes = {expected_code} if isinstance(expected_code, str) else set(expected_code)
        assert problem["code"] in codes, problem
    if expected_status == 401:
        assert headers.get("www-authenticate", "").lower().startswith("bearer"), headers
    return problem


def assert_still_serving(server, token):
    status, _, body = server.http("GET", "/healthz", timeout=1)
    assert status == 200, body
    status, _, _ = raw_upgrade(server.port, f"/v1/ws?token={token}")
    assert status == 101
    assert server.alive()


def tamper_payload(token: str) -> str:
    header, payload, signature = token.split(".")
    body = json.loads(b64url_decode(payload))
    body["room_id"] = body["room_id"] + "-other"
    return ".".join([header, b64url(json.dumps(body, separators=(",", ":")).encode()), signature])


def tamper_signature(token: str) -> str:
    header, payload, signature = token.split(".")
    middle = len(signature) // 2
    flipped = "A" if signature[middle] != "A" else "B"
    return ".".join([header, payload, signature[:middle] + flipped + signature[middle + 1:]])


def test_bad_tokens_are_refused_before_upgrade(server):
    good = server.token("r1", "alice")
    secret = server.secret()
    assert jwt_payload(good)["aud"] == "calling-server"

    header_none = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    unsigned_body = b64url(json.dumps(claims()).encode())

    cases = [
        ("missing token", "/v1/ws", 401, "token_missing"),
        ("empty token", "/v1/ws?token=", 401, "token_missing"),
        ("garbage", "/v1/ws?token=garbage", 401, "token_malformed"),
        ("garbage with dots", "/v1/ws?token=abc.def.ghi", 401, "token_malformed"),
        ("tampered payload", f"/v1/ws?token={tamper_payload(good)}", 401, "token_bad_signature"),
        ("tampered signature", f"/v1/ws?token={tamper_signature(good)}", 401, "token_bad_signature"),
        # alg none, RFC 7519 style: empty signature segment.
        ("alg none, empty signature", f"/v1/ws?token={header_none}.{unsigned_body}.", 401,
         ("token_malformed", "token_unsupported_algorithm")),
        # alg none with something in the signature slot, so the refusal must come from `alg`.
        ("alg none, junk signature", f"/v1/ws?token={header_none}.{unsigned_body}.AAAA", 401,
         "token_unsupported_algorithm"),
        ("HS512 with the right secret", f"/v1/ws?token={sign_jwt(claims(), secret, alg='HS512')}", 401,
         "token_unsupported_algorithm"),
        ("HS256 with a wrong secret", f"/v1/ws?token={sign_jwt(claims(), b'x' * 40)}", 401, "token_bad_signature"),
        ("wrong audience", f"/v1/ws?token={sign_jwt(claims(aud='some-other-service'), secret)}", 403,
         "token_wrong_audience"),
        ("no audience", f"/v1/ws?token={sign_jwt(claims(aud=None), secret)}", 403, "token_wrong_audience"),
        ("no room_id", f"/v1/ws?token={sign_jwt(claims(room=None), secret)}", 403, "token_no_room"),
        ("scope without room", f"/v1/ws?token={server.token('r1', 'alice', scope='presence')}", 403,
         "token_wrong_scope"),
        ("expired long ago", f"/v1/ws?token={sign_jwt(claims(ttl=-3600), secret)}", 401, "token_expired"),
        ("bad last_seq", f"/v1/ws?token={good}&last_seq=-1", 400, "bad_last_seq"),
        ("unknown path", f"/v1/other?token={good}", 404, "not_found"),
    ]
    for label, path, status, code in cases:
        got_status, headers, body = raw_upgrade(server.port, path)
        try:
            assert_problem(got_status, headers, body, status, code)
        except AssertionError as error:
            raise AssertionError(f"{label}: {error}") from None
        # The refusal is a complete HTTP response, never a 101 followed by a close.
        assert got_status != 101
        status_h, _, _ = server.http("GET", "/healthz", timeout=1)
        assert status_h == 200, f"server stopped answering after: {label}"

    # A self-signed HS256 token with the right secret and claims is accepted: the refusals above
    # come from the tampering, not from the hand-built encoding.
    assert raw_upgrade(server.port, f"/v1/ws?token={sign_jwt(claims(), secret)}")[0] == 101
    assert_still_serving(server, good)

    refused = {k: v for k, v in server.metrics().items() if k.startswith("calling_upgrades_total")}
    assert refused.get('calling_upgrades_total{result="refused_401"}', 0) >= 11, refused
    assert refused.get('calling_upgrades_total{result="refused_403"}', 0) >= 3, refused


def sign_raw(header_json: str, payload_json: str, secret: bytes) -> str:
    """An HS256 token over JSON text exactly as given (json.dumps cannot repeat a member name)."""
    signing_input = b64url(header_json.encode()) + "." + b64url(payload_json.encode())
    return signing_input + "." + b64url(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())


def test_token_json_rules_are_held_by_the_server(server):
    """docs/protocol.md, Tokens: repeated member names are malformed whatever the MAC; NumericDates
    beyond year 9999 are invalid claims; integers beyond 64 bits make the token malformed."""
    secret = server.secret()
    exp = int(time.time()) + 600
    base = f'"room_id":"r1","aud":"calling-server","exp":{exp}'
    header = '{"alg":"HS256","typ":"JWT"}'
    cases = [
        ("repeated sub", header, f'{{"sub":"alice","sub":"mallory",{base}}}', 401, "token_malformed"),
        ("repeated alg", '{"alg":"HS256","alg":"HS256"}', f'{{"sub":"alice",{base}}}', 401, "token_malformed"),
        ("integer beyond 64 bits", header, f'{{"sub":"alice",{base},"n":18446744073709551616}}', 401, "token_malformed"),
        ("exp beyond year 9999", header,
         '{"sub":"alice","room_id":"r1","aud":"calling-server","exp":253402300800}', 401, "token_invalid_claim"),
        ("exp 1e300", header, '{"sub":"alice","room_id":"r1","aud":"calling-server","exp":1e300}', 401,
         "token_invalid_claim"),
    ]
    for label, header_json, payload_json, status, code in cases:
        got_status, headers, body = raw_upgrade(server.port, f"/v1/ws?token={sign_raw(header_json, payload_json, secret)}")
        try:
            assert_problem(got_status, headers, body, status, code)
        except AssertionError as error:
            raise AssertionError(f"{label}: {error}") from None
    # The same hand-written JSON without the fault is accepted, so the refusals are the rules'.
    fine = sign_raw(header, '{"sub":"alice",' + base + "}", secret)
    assert raw_upgrade(server.port, f"/v1/ws?token={fine}")[0] == 101
    assert_still_serving(server, server.token("r1", "alice"))


def test_expired_token_without_leeway(start_server):
    server = start_server(jwt_leeway_seconds=0)
    short = server.token("r1", "alice", ttl=1)
    exp = jwt_payload(short)["exp"]
    # exp has one-second resolution: wait until it is safely in the past.
    time.sleep(max(0.0, exp - time.time()) + 1.2)
    status, headers, body = raw_upgrade(server.port, f"/v1/ws?token={short}")
    assert_problem(status, headers, body, 401, "token_expired")
    assert_still_serving(server, server.token("r1", "alice"))


def test_leeway_accepts_recently_expired_token(server):
    # Default leeway is 30 s: a token that expired 5 s ago is still good.
    token = sign_jwt(claims(ttl=-5), server.secret())
    assert raw_upgrade(server.port, f"/v1/ws?token={token}")[0] == 101


def test_token_expiry_while_connected_closes_4401(start_server):
    server = start_server(jwt_leeway_seconds=0)

    async def body():
        token = server.token("r1", "alice", ttl=2)
        exp = jwt_payload(token)["exp"]
        peer = await Peer.connect(server, token, "alice")
        code, reason = await peer.wait_closed(timeout=max(0.0, exp - time.time()) + 4)
        closed_at = time.time()
        assert code == 4401, (code, reason)
        assert closed_at >= exp - 0.05, "closed before the token expired"

    run(body(), timeout=10)


def test_authorization_header_is_accepted(server):
    token = server.token("r1", "alice", name="Alice")
    status, _, _ = raw_upgrade(server.port, "/v1/ws", {"Authorization": f"Bearer {token}"})
    assert status == 101

    async def body():
        peer = await Peer.connect(server, None, "alice", headers={"Authorization": f"Bearer {token}"})
        assert peer.welcome["payload"]["peer_id"] == "alice"
        assert peer.welcome["payload"]["room_id"] == "r1"
        await peer.ping()
        await peer.close()

    run(body())

    # A bad bearer token is refused like a bad query token.
    status, headers, body_bytes = raw_upgrade(server.port, "/v1/ws", {"Authorization": "Bearer nope"})
    assert_problem(status, headers, body_bytes, 401, "token_malformed")


def test_empty_query_pairs_do_not_hide_the_token_or_what_follows(server):
    """lws makes an empty fragment of `&&` and of a leading or trailing `&`; the pairs after one
    used to be dropped, so `?&token=…` was refused and `last_seq` after `&&` went unread."""
    token = server.token("r1", "alice")
    for path in (f"/v1/ws?&token={token}", f"/v1/ws?&&token={token}&", f"/v1/ws?x&&token={token}"):
        status, _, body = raw_upgrade(server.port, path)
        assert status == 101, (path, status, body)
    # last_seq after an empty pair still asks for a replay: the welcome says whether it recovered.
    ws = RawWebSocket(server.port, server.token("r1", "bob"), query="&&last_seq=0&")
    try:
        welcome = ws.recv_json()
        assert welcome["type"] == "welcome", welcome
        assert welcome["payload"]["recovered"] is True and welcome["payload"]["replay_count"] == 0, welcome
    finally:
        ws.close()


def test_plain_http_on_the_websocket_endpoint(server):
    token = server.token("r1", "alice")
    status, headers, body = server.http("GET", f"/v1/ws?token={token}")
    assert_problem(status, headers, body, 426, "upgrade_required")


@pytest.mark.parametrize("path", ["/", "/v1", "/v2/ws", "/v1/ws/extra", "/healthz/x", "/dashboard/x"])
def test_unknown_paths(server, path):
    token = server.token("r1", "alice")
    status, headers, body = raw_upgrade(server.port, f"{path}?token={token}")
    assert_problem(status, headers, body, 404, "not_found")
    status, headers, body = server.http("GET", path)
    if path == "/":
        # A plain GET / is the demo page (docs/protocol.md "Static files"); it upgrades to nothing.
        assert status == 200 and headers["content-type"].startswith("text/html")
    else:
        assert_problem(status, headers, body, 404, "not_found")
    assert server.http("GET", "/healthz")[0] == 200
