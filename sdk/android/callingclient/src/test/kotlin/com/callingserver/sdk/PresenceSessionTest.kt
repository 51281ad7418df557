package com.callingserver.sdk

import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Test

/** The pure presence session fed frames by hand; timers fire when the test says. */
class PresenceSessionTest {
    private val session = PresenceSession("tok", PresenceSession.Settings(queues = listOf("sales", "vip")))

    private fun sent(actions: List<PresenceAction>) = actions.filterIsInstance<PresenceAction.Send>().map { JSONObject(it.text).toString() }
    private fun events(actions: List<PresenceAction>) = actions.filterIsInstance<PresenceAction.Emit>().map { it.event }
    private fun frame(text: String) = session.handle(PresenceInput.SocketText(session.currentSocketForTest(), text))
    private fun snapshotFrame(status: String, note: String = "null") =
        """{"type":"connected","payload":{"peer_id":"ann","role":"agent","server_time":5,"agents":[{"agent_id":"ann","status":"$status","note":$note,"queues":["sales","vip"],"updated_at":1},{"agent_id":"bo","status":"busy","note":null,"queues":[],"updated_at":2}]}}"""

    private fun reconnect(): List<PresenceAction> {
        session.handle(PresenceInput.SocketClosed(session.currentSocketForTest(), 1001, "restart"))
        return session.handle(PresenceInput.TimerFired(ConnectionLifecycle.Timer.RECONNECT))
    }

    @Test fun connectOpensWithQueuesAndResolvesWithTheSnapshot() {
        val open = session.handle(PresenceInput.Connect(1))
        assertEquals("/v1/presence?queues=sales,vip", open.filterIsInstance<PresenceAction.OpenSocket>().single().path)
        val actions = frame(snapshotFrame("available"))
        val snapshot = actions.filterIsInstance<PresenceAction.Resolve>().single().value as PresenceSnapshot
        assertEquals("ann", snapshot.peerId)
        assertEquals(AgentPresence("bo", "busy", null, emptyList(), 2), snapshot.agents["bo"])
        assertEquals(ConnectionState.CONNECTED, session.state)
        assertTrue(sent(actions).isEmpty())
        val status = frame("""{"type":"status","payload":{"agent_id":"bo","status":"available","note":null,"queues":[],"updated_at":3}}""")
        assertEquals(listOf(PresenceEvent.Status(AgentPresence("bo", "available", null, emptyList(), 3))), events(status))
        assertEquals("available", session.snapshot!!.agents.getValue("bo").status)
    }

    @Test fun theAgentsStatusIsSetAgainAfterAReconnectToAServerThatLostIt() {
        session.handle(PresenceInput.Connect(1))
        frame(snapshotFrame("available"))
        assertEquals(listOf("""{"type":"status","payload":{"status":"away","note":"lunch"}}"""),
            sent(session.handle(PresenceInput.SetStatus("away", note = "lunch"))))
        reconnect()
        // A restarted server brings the agent back `available`: the remembered status goes out again.
        assertEquals(listOf("""{"type":"status","payload":{"status":"away","note":"lunch"}}"""), sent(frame(snapshotFrame("available"))))
        // A server that kept it (back within the grace): nothing to send.
        reconnect()
        assertTrue(sent(frame(snapshotFrame("away", "\"lunch\""))).isEmpty())
    }

    @Test fun theServersWordAboutTheAgentIsWhatIsRestoredAndDisconnectForgetsIt() {
        session.handle(PresenceInput.Connect(1))
        frame(snapshotFrame("available"))
        session.handle(PresenceInput.SetStatus("away"))
        // The server moved us to busy (an accepted request): busy is what a reconnect restores.
        frame("""{"type":"status","payload":{"agent_id":"ann","status":"busy","note":null,"queues":["sales","vip"],"updated_at":9}}""")
        reconnect()
        assertEquals(listOf("""{"type":"status","payload":{"status":"busy","note":null,"queues":["sales","vip"]}}"""),
            sent(frame(snapshotFrame("available"))))
        session.handle(PresenceInput.Disconnect(2))
        assertEquals(null, session.agentStatus)
    }

    @Test fun callsWhileNotConnectedReportNotConnectedAndRequestNeedsOneTarget() {
        val early = session.handle(PresenceInput.SetStatus("away"))
        assertEquals("not_connected", (events(early).single() as PresenceEvent.Error).error.code)
        assertTrue(sent(early).isEmpty())
        session.handle(PresenceInput.Connect(1))
        frame(snapshotFrame("available"))
        val both = session.handle(PresenceInput.Request("ann", "sales"))
        assertEquals("invalid_argument", (events(both).single() as PresenceEvent.Error).error.code)
        assertEquals(listOf("""{"type":"request","payload":{"queue":"sales"}}"""), sent(session.handle(PresenceInput.Request(null, "sales"))))
        assertEquals(listOf("""{"type":"accept","payload":{"request_id":"q1"}}"""), sent(session.handle(PresenceInput.Accept("q1"))))
        val refused = frame("""{"type":"error","payload":{"type":"accept","request_id":"q1"},"error":{"code":404,"message":"no such request"}}""")
        val error = events(refused).single() as PresenceEvent.Error
        assertEquals(404, error.error.serverCode)
        assertEquals("q1", error.requestId)
    }

    @Test fun aRefusalBeforeTheSnapshotFailsConnectWithoutRetry() {
        session.handle(PresenceInput.Connect(1))
        val actions = frame("""{"type":"error","error":{"code":403,"message":"forbidden"}}""")
        assertEquals(403, actions.filterIsInstance<PresenceAction.Resolve>().single().error?.serverCode)
        assertEquals(ConnectionState.FAILED, session.state)
    }

    @Test fun answeringAPushConnectsFirstThenAcceptsAndSettlesWithTheCall() {
        // Idle (the app was woken by the push): the answer connects and waits for `connected`.
        val open = session.handle(PresenceInput.AnswerRequest(7, "req_1", accept = true))
        assertEquals(1, open.filterIsInstance<PresenceAction.OpenSocket>().size)
        assertTrue(sent(open).isEmpty())
        val connected = frame(snapshotFrame("available"))
        assertEquals(listOf("""{"type":"accept","payload":{"request_id":"req_1"}}"""), sent(connected))
        assertTrue(connected.filterIsInstance<PresenceAction.Resolve>().isEmpty())
        // Another request's frames settle nothing.
        assertTrue(frame("""{"type":"ended","payload":{"request_id":"req_0","reason":"timeout"}}""").filterIsInstance<PresenceAction.Resolve>().isEmpty())
        val accepted = frame("""{"type":"accepted","payload":{"request_id":"req_1","call_id":"call_1","room_id":"room_1","agent_id":"ann","caller_id":"carl","token":"t.o.k"}}""")
        val call = accepted.filterIsInstance<PresenceAction.Resolve>().single()
        assertEquals(7L, call.waiter)
        val value = call.value as AcceptedCall
        assertEquals(listOf("req_1", "call_1", "room_1", "ann", "carl", "t.o.k"),
            listOf(value.requestId, value.callId, value.roomId, value.agentId, value.callerId, value.token))
    }

    @Test fun aPushAnswerIsSettledByARefusalAnEndOrADeclineAndFailsWithTheConnection() {
        session.handle(PresenceInput.Connect(1))
        frame(snapshotFrame("available"))
        assertEquals(listOf("""{"type":"decline","payload":{"request_id":"req_2"}}"""),
            sent(session.handle(PresenceInput.AnswerRequest(8, "req_2", accept = false))))
        val declined = frame("""{"type":"ended","payload":{"request_id":"req_2","reason":"declined"}}""")
        assertEquals(PresenceAction.Resolve(8, null, null), declined.filterIsInstance<PresenceAction.Resolve>().single())

        session.handle(PresenceInput.AnswerRequest(9, "req_3", accept = true))
        val refused = frame("""{"type":"error","error":{"code":409,"message":"ended"},"payload":{"type":"accept","request_id":"req_3"}}""")
        assertEquals(409, refused.filterIsInstance<PresenceAction.Resolve>().single().error?.serverCode)

        session.handle(PresenceInput.AnswerRequest(10, "req_4", accept = true))
        val timedOut = frame("""{"type":"ended","payload":{"request_id":"req_4","reason":"timeout"}}""")
        assertEquals("request_ended", timedOut.filterIsInstance<PresenceAction.Resolve>().single().error?.code)

        session.handle(PresenceInput.AnswerRequest(11, "req_5", accept = true))
        val resolves = session.handle(PresenceInput.SocketClosed(session.currentSocketForTest(), 4403, "kicked"))
            .filterIsInstance<PresenceAction.Resolve>()
        assertEquals(listOf(11L), resolves.map { it.waiter })
        assertEquals(4403, resolves.single().error?.closeCode)
    }
}
