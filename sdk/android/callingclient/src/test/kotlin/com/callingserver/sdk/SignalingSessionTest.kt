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

    // --- keep-alive ---------------------------------------------------------------------------

    @Test fun keepAlivePingsAtTheWelcomeIntervalAndAPongKeepsTheSocket() {
        session.handle(SessionInput.Connect(1))
        val welcome = frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"last_seq":0,"ping_interval_ms":5000}}""")
        assertTrue(welcome.contains(SessionAction.Arm(SessionTimer.Ping, 5000)))
        val tick = session.handle(SessionInput.TimerFired(SessionTimer.Ping))
        assertEquals("""{"type":"ping"}""", sent(tick).single().toString())
        assertTrue(tick.contains(SessionAction.Arm(SessionTimer.Ping, 5000)))
        frame("""{"type":"pong"}""")
        val next = session.handle(SessionInput.TimerFired(SessionTimer.Ping))
        assertEquals(1, sent(next).size)
        assertTrue(next.none { it is SessionAction.AbortSocket })
        assertEquals(ConnectionState.CONNECTED, session.state)
    }

    @Test fun anUnansweredPingAbandonsTheSocketAndReconnects() {
        connected(lastSeq = 4)
        session.handle(SessionInput.TimerFired(SessionTimer.Ping))
        val dead = session.handle(SessionInput.TimerFired(SessionTimer.Ping))
        // Dropped with 4000 (AbortSocket), never the clean 1000 of CloseSocket; no second ping.
        assertTrue(dead.contains(SessionAction.AbortSocket))
        assertTrue(dead.none { it is SessionAction.CloseSocket })
        assertTrue(sent(dead).isEmpty())
        assertTrue(dead.contains(SessionAction.Cancel(SessionTimer.Ping)))
        assertTrue(events(dead).contains(CallingEvent.Reconnecting(1)))
        assertEquals(ConnectionState.RECONNECTING, session.state)
        val open = session.handle(SessionInput.TimerFired(SessionTimer.Lifecycle(ConnectionLifecycle.Timer.RECONNECT)))
        assertEquals("/v1/ws?last_seq=4", open.filterIsInstance<SessionAction.OpenSocket>().single().path)
        // A late tick of the dead socket does nothing.
        assertTrue(session.handle(SessionInput.TimerFired(SessionTimer.Ping)).isEmpty())
    }

    @Test fun theDefaultIntervalIs25sAndASettingOverridesOrDisablesIt() {
        assertTrue(connected().contains(SessionAction.Arm(SessionTimer.Ping, 25_000)))
        for ((setting, armed) in listOf(700L to true, 0L to false)) {
            val other = SignalingSession("tok", SignalingSession.Settings(pingIntervalMs = setting))
            other.handle(SessionInput.Connect(1))
            val actions = other.handle(SessionInput.SocketText(other.currentSocketForTest(),
                """{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"ping_interval_ms":5000}}"""))
            assertEquals(armed, actions.contains(SessionAction.Arm(SessionTimer.Ping, 700)))
            assertTrue(actions.none { it is SessionAction.Arm && it.timer == SessionTimer.Ping && it.afterMs != 700L })
        }
    }

    // --- REST gap fill ------------------------------------------------------------------------

    private fun chat(seq: Long, from: String = "bob") = ChatMessage(seq, from, "c$seq", "m$seq", seq, null)

    private fun resumed(recovered: Boolean, replayCount: Int): List<SessionAction> {
        session.handle(SessionInput.SocketClosed(session.currentSocketForTest(), 1001, "restart"))
        session.handle(SessionInput.TimerFired(SessionTimer.Lifecycle(ConnectionLifecycle.Timer.RECONNECT)))
        return frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"last_seq":20,"recovered":$recovered,"replay_count":$replayCount}}""")
    }

    @Test fun aCappedReplayIsFollowedByRestPagesEachMessageOnce() {
        connected(lastSeq = 3)
        assertTrue(resumed(recovered = false, replayCount = 2).none { it is SessionAction.FetchGap })
        frame("""{"type":"chat","from":"bob","payload":{"seq":4,"client_id":"c4","text":"m4","ts":4}}""")
        val last = frame("""{"type":"chat","from":"bob","payload":{"seq":5,"client_id":"c5","text":"m5","ts":5}}""")
        val socket = session.currentSocketForTest()
        assertEquals(SessionAction.FetchGap(5, socket), last.filterIsInstance<SessionAction.FetchGap>().single())
        // A live message overtakes the gap: reported now, and not again from the page.
        frame("""{"type":"chat","from":"bob","payload":{"seq":9,"client_id":"c9","text":"m9","ts":9}}""")
        val page1 = session.handle(SessionInput.GapPage(socket, MessagesPage("r", listOf(chat(6), chat(7)), 7, true, 9, 200)))
        assertEquals(listOf(6L, 7L), events(page1).map { (it as CallingEvent.Chat).message.seq })
        assertEquals(SessionAction.FetchGap(7, socket), page1.filterIsInstance<SessionAction.FetchGap>().single())
        val page2 = session.handle(SessionInput.GapPage(socket, MessagesPage("r", listOf(chat(8), chat(9)), 9, false, 9, 200)))
        assertEquals(listOf(8L), events(page2).map { (it as CallingEvent.Chat).message.seq })
        assertTrue(page2.none { it is SessionAction.FetchGap })
        assertEquals(9L, session.lastSeq)
        // A stale page (an older socket's) is ignored.
        assertTrue(session.handle(SessionInput.GapPage(socket - 1, MessagesPage("r", listOf(chat(10)), 10, false, 10, 200))).isEmpty())
    }

    @Test fun anEmptyCappedReplayStartsTheGapFillAtWelcomeAndAFailureResumesFromTheCursor() {
        connected(lastSeq = 3)
        val welcome = resumed(recovered = false, replayCount = 0)
        val socket = session.currentSocketForTest()
        assertEquals(SessionAction.FetchGap(3, socket), welcome.filterIsInstance<SessionAction.FetchGap>().single())
        val failure = CallingError("http_error", "HTTP 500", status = 500, isRetryable = true)
        assertEquals(listOf(CallingEvent.Error(failure)), events(session.handle(SessionInput.GapFailed(socket, failure))))
        frame("""{"type":"chat","from":"bob","payload":{"seq":30,"client_id":"c30","text":"live","ts":30}}""")
        // The next socket resumes from the gap's cursor, not from the live message past it.
        session.handle(SessionInput.SocketClosed(socket, 1001, "restart"))
        val open = session.handle(SessionInput.TimerFired(SessionTimer.Lifecycle(ConnectionLifecycle.Timer.RECONNECT)))
        assertEquals("/v1/ws?last_seq=3", open.filterIsInstance<SessionAction.OpenSocket>().single().path)
        // Recovered this time: no REST fill.
        assertTrue(frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"last_seq":30,"recovered":true,"replay_count":0}}""")
            .none { it is SessionAction.FetchGap })
    }

    @Test fun aRecoveredResumeFetchesNothing() {
        connected(lastSeq = 3)
        assertTrue(resumed(recovered = true, replayCount = 0).none { it is SessionAction.FetchGap })
    }
}
