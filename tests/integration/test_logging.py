"""log_format = json: one JSON object per line; at the most verbose level no token and no SDP
reaches the log. And the latency histograms /metrics adds."""

from __future__ import annotations

import json

from support import Peer, run

SDP = "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"


def test_json_lines_and_no_token_or_sdp_even_at_trace(start_server):
    server = start_server(log_format="json", log_level="trace")
    alice_token = server.token("r1", "alice")
    bob_token = server.token("r1", "bob")

    async def body():
        alice = await Peer.connect(server, alice_token, "alice")
        bob = await Peer.connect(server, bob_token, "bob")
        await alice.recv_type("peer-joined")
        await alice.send({"type": "offer", "to": "bob", "payload": {"type": "offer", "sdp": SDP}})
        await bob.recv_type("offer")
        await alice.send({"type": "chat", "payload": {"client_id": "c1", "text": "hi"}})
        await alice.recv_type("chat-ack")
        # A refused upgrade with a (bad) token in the query and in a header.
        status, _, _ = server.http("GET", "/v1/ws?token=" + alice_token[:-4] + "AAAA",
                                   headers={"Authorization": "Bearer " + bob_token[:-4] + "BBBB"})
        assert status in (400, 401, 426)
        await alice.ws.close()
        await bob.ws.close()

    run(body())
    server.signal(15)
    assert server.wait(15) == 0
    text = server.stderr_path.read_text()
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
        else:
            # libwebsockets' own lines keep lws's format; everything of ours is JSON.
            assert "msg=" not in line, line
    messages = [r["msg"] for r in records]
    assert "listening" in messages and "stopped" in messages, messages
    for record in records:
        assert list(record)[:4] == ["ts", "level", "label", "msg"], record
        assert isinstance(record["ts"], float) and record["level"] in ("trace", "debug", "info", "notice", "warning", "error")
    listening = next(r for r in records if r["msg"] == "listening")
    assert listening["port"] == str(server.port) and listening["label"] == "transport"
    for secret in (alice_token, bob_token, alice_token.split(".")[2], bob_token.split(".")[2][:20]):
        assert secret not in text
    assert "4611731400430051336" not in text and "a=mid" not in text


def test_metrics_have_ack_and_commit_latency_histograms(server):
    async def body():
        alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
        for i in range(20):
            await alice.send({"type": "chat", "payload": {"client_id": f"c{i}", "text": "hi"}})
            await alice.recv_type("chat-ack")
        await alice.ws.close()

    run(body())
    metrics = server.metrics()
    assert metrics["calling_chat_ack_latency_seconds_count"] == 20
    assert metrics['calling_chat_ack_latency_seconds_bucket{le="+Inf"}'] == 20
    assert metrics["calling_chat_ack_latency_seconds_sum"] > 0
    buckets = [v for k, v in metrics.items() if k.startswith("calling_chat_ack_latency_seconds_bucket")]
    assert buckets == sorted(buckets), "buckets are cumulative"
    assert 1 <= metrics["calling_store_commit_latency_seconds_count"] <= 20
    # Where an ack's time went: one observation per drain of the store's queue, and per batch for
    # the hop back to the service thread (one drain may write several batches, never fewer).
    drains = metrics["calling_store_queue_wait_seconds_count"]
    batches = metrics["calling_chat_ack_dispatch_seconds_count"]
    assert 1 <= drains <= batches <= 20, (drains, batches)
    assert batches == metrics["calling_store_commit_latency_seconds_count"]
    assert metrics["calling_webhook_queue_depth"] == 0 and metrics["calling_webhook_deliveries_total"] == 0
