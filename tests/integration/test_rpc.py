"""docs/protocol.md, "RPC": rpc-request / rpc-ack / rpc-response between raw WebSocket peers
through the real server: relayed like an addressed data with `from` stamped, every refusal naming
the request id, the payload limit configurable, and no state kept by the server per request."""

from __future__ import annotations

from support import Peer, run


def test_a_request_its_ack_and_its_response_are_relayed_between_the_two_peers(start_server):
    server = start_server()

    async def body():
        agent = await Peer.connect(server, server.token("r1", "agent"), "agent")
        page = await Peer.connect(server, server.token("r1", "page"), "page")
        await agent.recv_type("peer-joined")
        request = {"id": "r1", "method": "get-location", "payload": '{"precise":true}', "timeout_ms": 5000}
        await agent.send({"type": "rpc-request", "to": "page", "payload": request})
        assert await page.recv_type("rpc-request") == {"from": "agent", "payload": request, "to": "page", "type": "rpc-request"}
        await page.send({"type": "rpc-ack", "to": "agent", "payload": {"id": "r1"}})
        assert (await agent.recv_type("rpc-ack"))["payload"] == {"id": "r1"}
        await page.send({"type": "rpc-response", "to": "agent", "payload": {"id": "r1", "payload": '{"city":"Lyon"}'}})
        response = await agent.recv_type("rpc-response")
        assert response == {"from": "page", "payload": {"id": "r1", "payload": '{"city":"Lyon"}'}, "to": "agent",
                            "type": "rpc-response"}
        error = {"id": "r2", "error": {"code": 2001, "message": "no map", "data": "x"}}
        await page.send({"type": "rpc-response", "to": "agent", "payload": error})
        assert (await agent.recv_type("rpc-response"))["payload"] == error
        await page.assert_silent(0.2)

    run(body())


def test_refusals_name_the_request_and_reach_only_the_caller(start_server):
    server = start_server(rpc_max_payload_bytes=32, reconnect_grace_ms=5000)

    async def body():
        agent = await Peer.connect(server, server.token("r1", "agent"), "agent")
        page = await Peer.connect(server, server.token("r1", "page"), "page")
        await agent.recv_type("peer-joined")

        await agent.send({"type": "rpc-request", "to": "nobody", "payload": {"id": "r1", "method": "m"}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 404 and error["payload"] == {"id": "r1", "type": "rpc-request"}, error

        await agent.send({"type": "rpc-request", "to": "page", "payload": {"id": "r2", "method": "m", "payload": "x" * 33}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 460 and error["payload"] == {"id": "r2", "type": "rpc-request"}, error
        await agent.send({"type": "rpc-request", "to": "page", "payload": {"id": "r3", "method": "m", "payload": "x" * 32}})
        assert (await page.recv_type("rpc-request"))["payload"]["id"] == "r3"

        await agent.send({"type": "rpc-request", "to": "page", "payload": {"id": "r4"}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 422 and error["payload"] == {"id": "r4", "type": "rpc-request"}, error
        await agent.send({"type": "rpc-ack", "payload": {"id": "r5"}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 422 and error["payload"] == {"type": "rpc-ack"}, error

        # The callee's socket drops: it is in its reconnect grace, and gets what data gets (480).
        page.ws.transport.abort()
        await agent.recv_type("peer-reconnecting")
        await agent.send({"type": "rpc-request", "to": "page", "payload": {"id": "r6", "method": "m"}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 480 and error["payload"] == {"id": "r6", "type": "rpc-request"}, error
        metrics = server.metrics()
        assert metrics.get('calling_frames_in_total{type="rpc-request"}', 0) >= 5, metrics

    run(body())


def test_rpc_frames_count_against_the_frame_rate_limit_like_data(start_server):
    server = start_server(max_frames_per_second=5, frame_burst=5, flood_close_after=20)

    async def body():
        agent = await Peer.connect(server, server.token("r1", "agent"), "agent")
        page = await Peer.connect(server, server.token("r1", "page"), "page")
        await agent.recv_type("peer-joined")
        for i in range(7):
            await agent.send({"type": "rpc-request", "to": "page", "payload": {"id": f"r{i}", "method": "m"}})
        error = await agent.recv_type("error")
        assert error["error"]["code"] == 429, error
        ids = [(await page.recv_type("rpc-request"))["payload"]["id"] for _ in range(5)]
        assert ids == ["r0", "r1", "r2", "r3", "r4"], ids
        await page.assert_silent(0.3)  # r5 and r6 were dropped; the caller's SDK times them out

    run(body())
