package com.callingserver.sdk

import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.json.JSONObject
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Before
import org.junit.Test
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/** Two Kotlin clients against a real `calling-server` this test starts on loopback. */
class LiveServerTest {
    private lateinit var server: ServerProcess
    private val clients = ArrayList<CallingClient>()
    private val callbacks = Executors.newSingleThreadExecutor()

    /** Records every listener call as text, in order, from the callback executor. */
    private class Recorder : Listener {
        val events = LinkedBlockingQueue<Any>()
        override fun onConnected(welcome: Welcome) { events.add(welcome) }
        override fun onDisconnected(error: CallingError?) { events.add("disconnected ${error?.closeCode}") }
        override fun onReconnecting(attempt: Int) { events.add("reconnecting $attempt") }
        override fun onPeerJoined(peer: PeerInfo) { events.add("joined ${peer.peerId}") }
        override fun onSignal(type: String, from: String, payload: String) { events.add("$type $from ${JSONObject(payload).getString("sdp")}") }
        override fun onData(from: String, payload: String?) { events.add("data $from $payload") }
        override fun onChat(message: ChatMessage) { events.add(message) }
        override fun onStateChanged(state: ConnectionState) { events.add(state) }

        /** Waits for the first event [match] accepts, skipping others. */
        fun <T> await(what: String, seconds: Long = 10, match: (Any) -> T?): T {
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds)
            while (true) {
                val left = deadline - System.nanoTime()
                val event = events.poll(maxOf(left, 0), TimeUnit.NANOSECONDS) ?: throw AssertionError("no $what within $seconds s")
                match(event)?.let { return it }
            }
        }
    }

    private fun client(peer: String, recorder: Recorder, delaysMs: List<Long> = listOf(1_000, 2_000, 4_000)): CallingClient {
        val settings = SignalingSession.Settings(lifecycle = ConnectionLifecycle.Settings(reconnectDelaysMs = delaysMs, maxReconnectAttempts = 20))
        val client = CallingClient(server.wsBase, server.token("r", peer), recorder, callbacks, settings)
        clients.add(client)
        return client
    }

    @Before fun startServer() { server = ServerProcess().start() }

    @After fun stopAll() {
        runBlocking { for (client in clients) try { withTimeout(3_000) { client.disconnect() } } catch (e: Exception) {} }
        clients.forEach { it.close() }
        callbacks.shutdown()
        server.close()
    }

    @Test fun welcomeRelayBothWaysAndChatAckWithRetry() = runBlocking<Unit> {
        val aliceEvents = Recorder()
        val bobEvents = Recorder()
        val alice = client("alice", aliceEvents)
        val bob = client("bob", bobEvents)
        val welcome = alice.connect()
        assertEquals("alice", welcome.peerId)
        assertEquals("r", welcome.roomId)
        assertEquals(listOf(PeerInfo("alice", "peer", null)), bob.connect().peers)
        aliceEvents.await("peer-joined") { if (it == "joined bob") it else null }

        alice.sendSignal("offer", "bob", """{"type":"offer","sdp":"v=0 from-alice"}""")
        bobEvents.await("offer") { if (it == "offer alice v=0 from-alice") it else null }
        bob.sendData("""{"n":1}""", "alice")
        aliceEvents.await("data") { if (it == """data bob {"n":1}""") it else null }

        val ack = alice.sendChat("hello", clientId = "c-1")
        assertTrue(ack.seq >= 1)
        val seen = bobEvents.await("chat") { it as? ChatMessage }
        assertEquals(ChatMessage(ack.seq, "alice", "c-1", "hello", ack.ts, null), seen)
        // The same client_id again: the server answers with the original ack and stores nothing.
        assertEquals(ack, alice.sendChat("hello again", clientId = "c-1"))
        assertEquals(ack.seq + 1, bob.sendChat("next").seq)
    }

    @Test fun resumeAfterTheServerIsKilledReplaysWhatWasMissed() = runBlocking<Unit> {
        val aliceEvents = Recorder()
        val alice = client("alice", aliceEvents, delaysMs = listOf(3_000))
        alice.connect()
        val first = alice.sendChat("before")
        server.stop(kill = true)
        aliceEvents.await("reconnecting") { if (it == "reconnecting 1") it else null }
        server.start()
        // While alice waits out her backoff, bob writes into the room (persisted in SQLite).
        val bob = client("bob", Recorder())
        bob.connect()
        val missed = bob.sendChat("while you were away")
        assertEquals(first.seq + 1, missed.seq)
        val resumed = aliceEvents.await("resumed welcome", 15) { (it as? Welcome)?.takeIf { w -> w.resumed } }
        assertEquals(1, resumed.replayCount)
        assertEquals("while you were away", aliceEvents.await("replayed chat") { it as? ChatMessage }.text)
        assertEquals(ConnectionState.CONNECTED, alice.state)
        assertEquals(missed.seq + 1, alice.sendChat("after").seq)
    }

    @Test fun resumeAfterAGracefulRestartKeepsAPendingChat() = runBlocking<Unit> {
        val aliceEvents = Recorder()
        val alice = client("alice", aliceEvents, delaysMs = listOf(500))
        alice.connect()
        server.stop(kill = false)
        aliceEvents.await("close 1001") { if (it == "disconnected 1001") it else null }
        // Sent while the socket is down: held, then sent after the resumed welcome.
        val pending = async { alice.sendChat("queued", clientId = "q-1") }
        server.start()
        val ack = withTimeout(15_000) { pending.await() }
        assertEquals("q-1", ack.clientId)
        assertTrue(ack.seq >= 1)
    }

    @Test fun aSecondConnectionOfTheSamePeerReplacesTheFirstForGood() = runBlocking<Unit> {
        val firstEvents = Recorder()
        val first = client("alice", firstEvents, delaysMs = listOf(200))
        first.connect()
        val second = client("alice", Recorder())
        second.connect()
        firstEvents.await("4400") { if (it == "disconnected 4400") it else null }
        firstEvents.await("failed") { if (it == ConnectionState.FAILED) it else null }
        // Terminal: no reconnect attempt within several backoff delays, and the second keeps its seat.
        Thread.sleep(1_000)
        assertTrue(firstEvents.events.none { it is String && it.startsWith("reconnecting") })
        assertEquals(ConnectionState.FAILED, first.state)
        assertEquals(ConnectionState.CONNECTED, second.state)
    }
}
