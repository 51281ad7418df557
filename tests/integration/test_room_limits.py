"""Room limits seen by an independent client: `max_peers_per_room` and the `max_peers` of a call
refuse the next peer BEFORE the upgrade with 409 `room_full` problem+json (never a 101 and then
silence), a reconnect of a seated peer id is not a new seat, and the refusals are counted."""

from __future__ import annotations

import http.client
import json
import subprocess

from support import BINARY, HOST, Peer, raw_upgrade, run


def api_key(server, scope: str = "calls") -> str:
    result = subprocess.run([str(BINARY), "apikey", "create", "--name", f"it-{scope}", "--scope", scope,
                             "--data-dir", str(server.data_dir)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def post_json(server, path: str, key: str, body: dict):
    """POST a JSON body with an API key; returns (status, headers, parsed body)."""
    conn = http.client.HTTPConnection(HOST, server.port, timeout=5)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"X-API-Key": key, "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if raw else None
    finally:
        conn.close()


def assert_room_full(port: int, token: str, limit: int):
    status, headers, body = raw_upgrade(port, f"/v1/ws?token={token}")
    assert status == 409, (status, body)
    assert headers.get("content-type", "").startswith("application/problem+json"), headers
    problem = json.loads(body)
    assert problem["code"] == "room_full" and problem["max_peers"] == limit and problem["status"] == 409, problem


def test_max_peers_per_room_refuses_the_third_peer_with_409_but_a_reconnect_takes_its_seat(start_server):
    server = start_server(max_peers_per_room=2)

    async def scenario():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        bob = await Peer.connect(server, server.token("r1", "bob"), "bob")
        await alice.recv_type("peer-joined")
        assert_room_full(server.port, server.token("r1", "carol"), 2)
        await alice.assert_silent(0.3)  # the refused peer never appeared in the room
        bob_again = await Peer.connect(server, server.token("r1", "bob"), "bob-again")
        assert [p["peer_id"] for p in bob_again.welcome["payload"]["peers"]] == ["alice"]
        code, _ = await bob.wait_closed()
        assert code == 4400
        other_room = await Peer.connect(server, server.token("r2", "carol"), "carol-r2")
        await alice.ws.close()
        await bob_again.recv_type("peer-left")
        carol = await Peer.connect(server, server.token("r1", "carol"), "carol")
        for peer in (bob_again, other_room, carol):
            await peer.ws.close()

    run(scenario())
    metrics = server.metrics()
    assert metrics['calling_join_refusals_total{code="room_full"}'] == 1, metrics


def test_a_call_with_max_peers_2_is_a_one_to_one_room(start_server):
    server = start_server()
    key = api_key(server)
    status, _, call = post_json(server, "/v1/calls", key, {"room_id": "consult", "peer_id": "patient", "max_peers": 2})
    assert status == 201, call
    assert call["max_peers"] == 2
    assert call["expires_at"] == call["expires_at_seconds"] * 1000, call
    status, _, doctor = post_json(server, "/v1/tokens", key, {"call_id": call["call_id"], "peer_id": "doctor"})
    assert status == 201, doctor
    status, _, third = post_json(server, "/v1/tokens", key, {"call_id": call["call_id"], "peer_id": "intruder"})
    assert status == 201, third

    async def scenario():
        patient = await Peer.connect(server, call["access_token"], "patient")
        doctor_peer = await Peer.connect(server, doctor["token"], "doctor")
        await patient.recv_type("peer-joined")
        assert_room_full(server.port, third["token"], 2)
        await patient.ws.close()
        await doctor_peer.ws.close()

    run(scenario())
