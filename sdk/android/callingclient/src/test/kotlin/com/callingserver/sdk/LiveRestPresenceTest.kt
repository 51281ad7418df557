package com.callingserver.sdk

import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.json.JSONObject
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Before
import org.junit.Test
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * REST history, the gap fill after a capped replay, and presence, against a real `calling-server`
 * started with `replay_cap` 2 (docs/configuration.md), so a resume after five missed messages
 * gets two in the replay and `recovered: false`.
 */
class LiveRestPresenceTest {
    private lateinit var server: ServerProcess
    private val rooms = ArrayList<CallingClient>()
    private val presences = ArrayList<PresenceClient>()
    private val callbacks = Executors.newSingleThreadExecutor()

    private class Events {
        val queue = LinkedBlockingQueue<Any>()
        fun <T> await(what: String, seconds: Long = 10, match: (Any) -> T?): T {
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds)
            while (true) {
                val left = deadline - System.nanoTime()
                val event = queue.poll(maxOf(left, 0), TimeUnit.NANOSECONDS) ?: throw AssertionError("no $what within $seconds s")
                match(event)?.let { return it }
            }
        }
    }

    private fun room(peer: String, events: Events, delaysMs: List<Long> = listOf(1_000)): CallingClient {
        val listener = object : Listener {
            override fun onConnected(welcome: Welcome) { events.queue.add(welcome) }
            override fun onReconnecting(attempt: Int) { events.queue.add("reconnecting $attempt") }
            override fun onChat(message: ChatMessage) { events.queue.add(message) }
            override fun onError(error: CallingError) { events.queue.add(error) }
        }
        val settings = SignalingSession.Settings(lifecycle = ConnectionLifecycle.Settings(reconnectDelaysMs = delaysMs, maxReconnectAttempts = 20))
        return CallingClient(server.wsBase, server.token("r", peer), listener, callbacks, settings).also { rooms.add(it) }
    }

    private fun presence(peer: String, role: String, events: Events): PresenceClient {
        val listener = object : PresenceListener {
            override fun onStatus(agent: AgentPresence) { events.queue.add(agent) }
            override fun onError(error: CallingError, requestId: String?) { events.queue.add(error) }
            override fun onRequest(requestId: String, payload: String) { events.queue.add("request $requestId") }
            override fun onAccepted(requestId: String, payload: String) { events.queue.add("accepted $requestId ${JSONObject(payload).optString("room_id")}") }
        }
        return PresenceClient(server.wsBase, server.presenceToken(peer, role), listener, callbacks).also { presences.add(it) }
    }

    @Before fun startServer() { server = ServerProcess(listOf("--replay_cap", "2")).start() }

    @After fun stopAll() {
        runBlocking {
            for (client in rooms) try { withTimeout(3_000) { client.disconnect() } } catch (e: Exception) {}
            for (client in presences) try { withTimeout(3_000) { client.disconnect() } } catch (e: Exception) {}
        }
        rooms.forEach { it.close() }
        presences.forEach { it.close() }
        callbacks.shutdown()
        server.close()
    }

    @Test fun fetchMessagesPagesTheHistoryWithTheClientsToken() = runBlocking<Unit> {
        val alice = room("alice", Events())
        // Before connect(): the room comes from the token's room_id claim.
        assertEquals(MessagesPage("r", emptyList(), 0, false, 0, 50), alice.fetchMessages())
        alice.connect()
        val acks = (1..3).map { alice.sendChat("m$it") }
        val first = alice.fetchMessages(sinceSeq = 0, limit = 2)
        assertEquals(listOf("m1", "m2"), first.messages.map { it.text })
        assertEquals("alice", first.messages[0].from)
        assertTrue(first.hasMore)
        assertEquals(acks[1].seq, first.nextSinceSeq)
        val rest = alice.fetchMessages(sinceSeq = first.nextSinceSeq, limit = 2)
        assertEquals(listOf(acks[2].seq), rest.messages.map { it.seq })
        assertFalse(rest.hasMore)
        // Another room than the token's: refused with the server's problem code.
        try {
            alice.fetchMessages(roomId = "elsewhere")
            fail("fetchMessages of another room succeeded")
        } catch (e: CallingError) {
            assertEquals(403, e.status)
            assertEquals("wrong_room", e.code)
            assertFalse(e.isRetryable)
        }
    }

    @Test fun aResumePastTheReplayCapFillsTheGapOverRestEachMessageOnce() = runBlocking<Unit> {
        val aliceEvents = Events()
        val alice = room("alice", aliceEvents, delaysMs = listOf(3_000))
        alice.connect()
        alice.sendChat("before")
        server.stop(kill = true)
        aliceEvents.await("reconnecting") { if (it == "reconnecting 1") it else null }
        server.start()
        val bob = room("bob", Events())
        bob.connect()
        for (n in 1..5) bob.sendChat("missed $n")
        val welcome = aliceEvents.await("resumed welcome", 15) { (it as? Welcome)?.takeIf { w -> w.resumed } }
        assertFalse(welcome.recovered)
        assertEquals(2, welcome.replayCount)
        val seen = (1..5).map { aliceEvents.await("chat $it") { e -> e as? ChatMessage }.text }
        assertEquals((1..5).map { "missed $it" }, seen)
        // Nothing twice, and no error from the gap fill.
        Thread.sleep(500)
        assertTrue(aliceEvents.queue.none { it is ChatMessage || it is CallingError })
    }

    @Test fun anAgentSetsAwayAndADashboardSeesIt() = runBlocking<Unit> {
        val dashboardEvents = Events()
        val dashboard = presence("sup", "dashboard", dashboardEvents)
        val agent = presence("ann", "agent", Events())
        dashboard.connect()
        val snapshot = agent.connect()
        assertEquals("ann", snapshot.peerId)
        dashboardEvents.await("ann available") { (it as? AgentPresence)?.takeIf { a -> a.agentId == "ann" && a.status == "available" } }
        agent.setStatus("away", note = "lunch")
        val away = dashboardEvents.await("ann away") { (it as? AgentPresence)?.takeIf { a -> a.agentId == "ann" && a.status == "away" } }
        assertEquals("lunch", away.note)
        // A dashboard that connects now gets it in its snapshot.
        val late = presence("sup2", "dashboard", Events())
        assertEquals("away", late.connect().agents.getValue("ann").status)
    }

    @Test fun aCallerRequestsAnAgentWhoAcceptsAndBothGetTheCall() = runBlocking<Unit> {
        val agentEvents = Events()
        val callerEvents = Events()
        val agent = presence("ann", "agent", agentEvents)
        val caller = presence("cust", "caller", callerEvents)
        agent.connect()
        caller.connect()
        caller.request(agentId = "ann")
        val offered = agentEvents.await("request") { (it as? String)?.takeIf { e -> e.startsWith("request ") } }
        val requestId = offered.removePrefix("request ")
        callerEvents.await("ringing ack") { if (it == "request $requestId") it else null }
        agent.accept(requestId)
        val forAgent = agentEvents.await("accepted") { (it as? String)?.takeIf { e -> e.startsWith("accepted $requestId ") } }
        val forCaller = callerEvents.await("accepted") { (it as? String)?.takeIf { e -> e.startsWith("accepted $requestId ") } }
        assertEquals(forAgent, forCaller)
        assertTrue(forAgent.length > "accepted $requestId ".length)
        // The server set the agent busy; the agent's memory learnt it from the status frame.
        agentEvents.await("ann busy") { (it as? AgentPresence)?.takeIf { a -> a.agentId == "ann" && a.status == "busy" } }
    }
}
