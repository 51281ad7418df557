package com.callingserver.sdk

import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/** The pure room session fed frames by hand; timers fire when the test says. */
class SignalingSessionTest {
    private val session = SignalingSession("tok")

    private fun sent(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Send>().map { JSONObject(it.text) }
    private fun events(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Emit>().map { it.event }
    private fun frame(text: String) = session.handle(SessionInput.SocketText(session.currentSocketForTest(), text))

    private fun connected(peers: String = "[]", lastSeq: Long = 0): List<SessionAction> {
        session.handle(SessionInput.Connect(1))
        return frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","call_id":null,"role":"peer","name":null,"peers":$peers,"last_seq":$lastSeq,"read_seq":0,"unread":0}}""")
    }

    @Test fun welcomeResolvesConnectWithTheRoster() {
        val actions = connected("""[{"peer_id":"bob","role":"peer","name":"Bob"}]""", lastSeq = 7)
        val resolve = actions.filterIsInstance<SessionAction.Resolve>().single()
        val welcome = resolve.value as Welcome
        assertEquals(listOf(PeerInfo("bob", "peer", "Bob")), welcome.peers)
        assertEquals(7L, session.lastSeq)
        assertEquals(ConnectionState.CONNECTED, session.state)
    }

    @Test fun chatIsAckedAndRetriedWithTheSameClientIdUntilMaxSends() {
        connected()
        val first = sent(session.handle(SessionInput.SendChat(2, "c1", "hi")))
        assertEquals("""{"type":"chat","payload":{"client_id":"c1","text":"hi"}}""", first.single().toString())
        val retry = sent(session.handle(SessionInput.TimerFired(SessionTimer.ChatAck("c1"))))
        assertEquals("c1", retry.single().getJSONObject("payload").getString("client_id"))
        session.handle(SessionInput.TimerFired(SessionTimer.ChatAck("c1")))
        val failed = session.handle(SessionInput.TimerFired(SessionTimer.ChatAck("c1")))
        assertEquals("timeout", failed.filterIsInstance<SessionAction.Resolve>().single().error?.code)

        session.handle(SessionInput.SendChat(3, "c2", "again"))
        val acked = frame("""{"type":"chat-ack","payload":{"client_id":"c2","seq":12,"ts":99}}""")
        assertEquals(ChatAck("c2", 12, 99), acked.filterIsInstance<SessionAction.Resolve>().single().value)
        assertEquals(12L, session.lastSeq)
    }

    @Test fun reconnectResumesWithLastSeqResendsPendingAndDedupesReplay() {
        connected(lastSeq = 3)
        session.handle(SessionInput.SendChat(2, "c1", "lost ack"))
        val down = session.handle(SessionInput.SocketClosed(1, 1001, "server shutting down"))
        assertTrue(events(down).contains(CallingEvent.Reconnecting(1)))
        val open = session.handle(SessionInput.TimerFired(SessionTimer.Lifecycle(ConnectionLifecycle.Timer.RECONNECT)))
        assertEquals("/v1/ws?last_seq=3", open.filterIsInstance<SessionAction.OpenSocket>().single().path)
        val welcome = frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"last_seq":5,"recovered":true,"replay_count":2}}""")
        assertEquals("c1", sent(welcome).single().getJSONObject("payload").getString("client_id"))
        // Our own message in the replay settles the pending send; another's is reported once.
        val own = frame("""{"type":"chat","from":"me","payload":{"seq":4,"client_id":"c1","text":"lost ack","ts":1}}""")
        assertEquals(ChatAck("c1", 4, 1), own.filterIsInstance<SessionAction.Resolve>().single().value)
        assertEquals(1, events(frame("""{"type":"chat","from":"bob","payload":{"seq":5,"client_id":"b","text":"x","ts":2}}""")).size)
        assertTrue(events(frame("""{"type":"chat","from":"bob","payload":{"seq":5,"client_id":"b","text":"x","ts":2}}""")).isEmpty())
    }

    @Test fun relaysToAPeerInItsGraceAreHeldAndA480IsCountedAgainstThem() {
        connected("""[{"peer_id":"bob","role":"peer"}]""")
        assertEquals(1, sent(session.handle(SessionInput.SendSignal("offer", "bob", """{"sdp":"v=0"}"""))).size)
        assertEquals(listOf<CallingEvent>(CallingEvent.PeerReconnecting("bob")), events(frame("""{"type":"peer-reconnecting","payload":{"peer_id":"bob"}}""")))
        // The offer sent just before the grace comes back as a 480: held, not an app error.
        assertTrue(events(frame("""{"type":"error","error":{"code":480,"message":"peer reconnecting"},"payload":{"type":"offer"}}""")).isEmpty())
        assertTrue(sent(session.handle(SessionInput.SendSignal("candidate", "bob", """{"candidate":"c"}"""))).isEmpty())
        val resumed = frame("""{"type":"peer-resumed","payload":{"peer_id":"bob"}}""")
        assertEquals(listOf("offer", "candidate"), sent(resumed).map { it.getString("type") })
        assertEquals(CallingEvent.PeerResumed("bob"), events(resumed).single())
    }

    @Test fun errorFramesKeepTheirStableCodes() {
        connected()
        val error = (events(frame("""{"type":"error","error":{"code":404,"message":"peer not found"},"payload":{"type":"data"}}""")).single() as CallingEvent.Error).error
        assertEquals(404, error.serverCode)
        assertEquals("data", error.frameType)
        assertTrue(error.isRetryable)
        session.handle(SessionInput.SendChat(2, "c1", "x"))
        val refused = frame("""{"type":"error","error":{"code":422,"message":"invalid payload"},"payload":{"type":"chat"}}""")
        assertEquals(422, refused.filterIsInstance<SessionAction.Resolve>().single().error?.serverCode)
    }

    @Test fun disconnectSendsLeaveThenCloses1000() {
        connected()
        val actions = session.handle(SessionInput.Disconnect(9))
        assertEquals("leave", sent(actions).single().getString("type"))
        assertEquals(SessionAction.CloseSocket(1000, "normal"), actions.filterIsInstance<SessionAction.CloseSocket>().single())
        val done = session.handle(SessionInput.SocketClosed(1, 1000, "normal"))
        assertEquals(9L, done.filterIsInstance<SessionAction.Resolve>().single().waiter)
        assertEquals(ConnectionState.ENDED, session.state)
    }

    @Test fun typingTurnsItselfOffAndReadMarkersAreSent() {
        connected()
        assertEquals(1, sent(session.handle(SessionInput.SetTyping(true))).size)
        assertTrue(sent(session.handle(SessionInput.SetTyping(true))).isEmpty()) // renewal, not a second "on"
        val off = sent(session.handle(SessionInput.TimerFired(SessionTimer.Typing)))
        assertEquals(false, off.single().getJSONObject("payload").getBoolean("typing"))
        assertEquals(5L, sent(session.handle(SessionInput.MarkRead(5))).single().getJSONObject("payload").getLong("seq"))
        val read = events(frame("""{"type":"read","from":"bob","payload":{"seq":9007199254740993}}""")).single()
        assertEquals(CallingEvent.Read("bob", 9007199254740993L), read)
    }

    @Test fun replacedCloseEndsTheSessionForGood() {
        connected()
        session.handle(SessionInput.SendChat(2, "c1", "x"))
        val actions = session.handle(SessionInput.SocketClosed(1, 4400, "replaced"))
        assertEquals(ConnectionState.FAILED, session.state)
        assertTrue(actions.none { it is SessionAction.Arm || it is SessionAction.OpenSocket })
        assertEquals(4400, actions.filterIsInstance<SessionAction.Resolve>().single().error?.closeCode)
        assertNull(actions.filterIsInstance<SessionAction.Resolve>().single().value)
    }
}
