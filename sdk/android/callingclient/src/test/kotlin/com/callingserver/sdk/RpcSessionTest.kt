package com.callingserver.sdk

import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/**
 * RPC in the pure session (docs/protocol.md "RPC"), as RpcSessionTests does for the Swift SDK and
 * tests/js/rpc.test.mjs for the browser SDK: frames, ack and response timeouts, typed errors,
 * unknown methods, a callee that leaves, the server's refusals by request id.
 */
class RpcSessionTest {
    private var session = SignalingSession("tok", SignalingSession.Settings(rpcAckTimeoutMs = 1_000, rpcMaxPayloadBytes = 8))

    private fun sent(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Send>().map { JSONObject(it.text) }
    private fun frame(text: String) = session.handle(SessionInput.SocketText(session.currentSocketForTest(), text))
    private fun outcome(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Resolve>().single().value
    private fun code(actions: List<SessionAction>) = (outcome(actions) as RpcError).code

    private fun connected() {
        session.handle(SessionInput.Connect(1))
        frame("""{"type":"welcome","payload":{"peer_id":"agent","room_id":"r","peers":[{"peer_id":"page","role":"peer"}],"last_seq":0,"ping_interval_ms":0}}""")
        assertEquals(ConnectionState.CONNECTED, session.state)
    }

    @Test fun aCallSendsRpcRequestAndResolvesWithTheCalleesResponse() {
        connected()
        val actions = session.handle(SessionInput.PerformRpc(2, "r1", "page", "get-location", "{}", 5_000))
        val request = sent(actions).single()
        assertEquals("rpc-request", request.getString("type"))
        assertEquals("page", request.getString("to"))
        val body = request.getJSONObject("payload")
        assertEquals(listOf("r1", "get-location", "{}", "5000"),
            listOf(body.getString("id"), body.getString("method"), body.getString("payload"), body.get("timeout_ms").toString()))
        assertTrue(actions.contains(SessionAction.Arm(SessionTimer.RpcAck("r1"), 1_000)))
        assertTrue(actions.contains(SessionAction.Arm(SessionTimer.RpcResponse("r1"), 5_000)))
        assertEquals(listOf<SessionAction>(SessionAction.Cancel(SessionTimer.RpcAck("r1"))),
            frame("""{"type":"rpc-ack","from":"page","payload":{"id":"r1"}}"""))
        assertTrue("only the callee answers", frame("""{"type":"rpc-response","from":"mallory","payload":{"id":"r1","payload":"x"}}""").isEmpty())
        assertEquals("Lyon", outcome(frame("""{"type":"rpc-response","from":"page","payload":{"id":"r1","payload":"Lyon"}}""")))
        assertTrue("late", frame("""{"type":"rpc-response","from":"page","payload":{"id":"r1","payload":"again"}}""").isEmpty())
    }

    @Test fun timeoutsRefusalsAndPeerLeftFailTheCallWithTheirCodes() {
        connected()
        for (i in 1..6) session.handle(SessionInput.PerformRpc(10L + i, "r$i", "page", "m", "", 5_000))
        assertEquals(RpcError.CONNECTION_TIMEOUT, code(session.handle(SessionInput.TimerFired(SessionTimer.RpcAck("r1")))))
        assertEquals(RpcError.RESPONSE_TIMEOUT, code(session.handle(SessionInput.TimerFired(SessionTimer.RpcResponse("r2")))))
        assertEquals(RpcError.RECIPIENT_NOT_FOUND,
            code(frame("""{"type":"error","error":{"code":404,"message":"no peer"},"payload":{"type":"rpc-request","id":"r3"}}""")))
        val reconnecting = outcome(frame("""{"type":"error","error":{"code":480,"message":"later"},"payload":{"type":"rpc-request","id":"r4"}}""")) as RpcError
        assertEquals(RpcError.SEND_FAILED, reconnecting.code)
        assertEquals("peer_reconnecting", reconnecting.data)
        assertEquals(RpcError(2001, "no map", "d"),
            outcome(frame("""{"type":"rpc-response","from":"page","payload":{"id":"r5","error":{"code":2001,"message":"no map","data":"d"}}}""")))
        assertEquals(RpcError.RECIPIENT_DISCONNECTED, code(frame("""{"type":"peer-left","payload":{"peer_id":"page"}}""")))
        // Our answer to a caller who left: nothing for the app; a malformed one is the app's error.
        assertTrue(frame("""{"type":"error","error":{"code":404,"message":"no peer"},"payload":{"type":"rpc-response","id":"x1"}}""").isEmpty())
        val bad = frame("""{"type":"error","error":{"code":422,"message":"bad"},"payload":{"type":"rpc-response","id":"x2"}}""")
        assertEquals(422, ((bad.single() as SessionAction.Emit).event as CallingEvent.Error).error.serverCode)
    }

    @Test fun localRefusalsAndDisconnect() {
        assertEquals(RpcError.SEND_FAILED, code(session.handle(SessionInput.PerformRpc(2, "r0", "page", "m", "", 5_000))))
        connected()
        val big = session.handle(SessionInput.PerformRpc(3, "r1", "page", "m", "ééééé", 5_000))
        assertEquals(RpcError.REQUEST_PAYLOAD_TOO_LARGE, code(big))
        assertTrue(sent(big).isEmpty())
        session.handle(SessionInput.PerformRpc(4, "r2", "page", "m", "ok", 5_000))
        val closing = session.handle(SessionInput.Disconnect(5)) +
            session.handle(SessionInput.SocketClosed(session.currentSocketForTest(), 1000, ""))
        val failed = closing.filterIsInstance<SessionAction.Resolve>().single { it.waiter == 4L }
        assertEquals(RpcError.SEND_FAILED, (failed.value as RpcError).code)
    }

    @Test fun theCalleeAcksRunsRegisteredHandlersAndAnswersUnknownMethodsWith1400() {
        connected()
        session.handle(SessionInput.RegisterRpcMethod("echo"))
        val request = """{"type":"rpc-request","from":"page","payload":{"id":"r1","method":"echo","payload":"hi","timeout_ms":3000}}"""
        val actions = frame(request)
        assertEquals("rpc-ack", sent(actions).single().getString("type"))
        val data = RpcInvocationData("r1", "page", "hi", 3_000)
        assertEquals(SessionAction.InvokeRpc("echo", data), actions.last())
        val ok = sent(session.handle(SessionInput.RpcHandled(data, "HI", null))).single()
        assertEquals("""{"type":"rpc-response","to":"page","payload":{"id":"r1","payload":"HI"}}""", ok.toString())
        val thrown = sent(session.handle(SessionInput.RpcHandled(data, null, RpcError(2001, "nope", "why")))).single()
        assertEquals("""{"code":2001,"message":"nope","data":"why"}""", thrown.getJSONObject("payload").getJSONObject("error").toString())
        val big = sent(session.handle(SessionInput.RpcHandled(data, "123456789", null))).single()
        assertEquals(RpcError.RESPONSE_PAYLOAD_TOO_LARGE, big.getJSONObject("payload").getJSONObject("error").getInt("code"))
        assertNull(big.getJSONObject("payload").opt("payload"))

        val unknown = sent(frame("""{"type":"rpc-request","from":"page","payload":{"id":"r2","method":"nothing"}}"""))
        assertEquals(listOf("rpc-ack", "rpc-response"), unknown.map { it.getString("type") })
        assertEquals(RpcError.UNSUPPORTED_METHOD, unknown.last().getJSONObject("payload").getJSONObject("error").getInt("code"))
        session.handle(SessionInput.UnregisterRpcMethod("echo"))
        assertEquals(RpcError.UNSUPPORTED_METHOD, sent(frame(request)).last().getJSONObject("payload").getJSONObject("error").getInt("code"))
    }
}
