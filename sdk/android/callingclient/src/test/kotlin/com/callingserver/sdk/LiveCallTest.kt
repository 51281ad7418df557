package com.callingserver.sdk

import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Before
import org.junit.Test
import java.util.Collections
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * The media layer's wiring: two [CallingClient]s with a test [MediaEngine] (no media: it makes up
 * SDP and candidates and reports ICE `connected`, answering on its own threads as org.webrtc
 * does) call each other through a real `calling-server` started with `stun_urls`.
 */
class LiveCallTest {
    private lateinit var server: ServerProcess
    private val callbacks = Executors.newSingleThreadExecutor()
    private val rooms = ArrayList<CallingClient>()

    /** Records what it was asked; results come from another thread, like org.webrtc's observers. */
    private class TestEngine(val name: String) : MediaEngine {
        val log: MutableList<String> = Collections.synchronizedList(ArrayList<String>())
        val servers = LinkedBlockingQueue<List<IceServer>>()
        private val events = HashMap<String, MediaEngineEvents>()
        private fun later(block: () -> Unit) { Thread(block, "engine-$name").start() }

        override fun createPeerConnection(peerId: String, iceServers: List<IceServer>, events: MediaEngineEvents) {
            servers.add(iceServers)
            synchronized(this.events) { this.events[peerId] = events }
        }
        override fun createOffer(peerId: String, iceRestart: Boolean, iceServers: List<IceServer>?, done: (String?, String?) -> Unit) =
            later { done("v=0 offer from $name", null) }
        override fun createAnswer(peerId: String, done: (String?, String?) -> Unit) = later { done("v=0 answer from $name", null) }
        override fun setRemoteDescription(peerId: String, type: String, sdp: String, done: (String?) -> Unit) {
            log.add("remote $type $sdp")
            val listener = synchronized(events) { events.getValue(peerId) }
            later {
                done(null)
                listener.onLocalCandidate("candidate:1 1 udp 1 10.0.0.1 9 typ host $name", "0", 0)
                listener.onIceConnectionState("connected")
            }
        }
        override fun addIceCandidate(peerId: String, candidate: String, sdpMid: String?, sdpMLineIndex: Int?) { log.add("candidate $candidate") }
        override fun getStats(peerId: String, done: (StatsSample?) -> Unit) = later { done(StatsSample(12.0, 1.5, 0.0, 300.0)) }
        override fun close(peerId: String) { log.add("close $peerId on ${Thread.currentThread().name}") }
    }

    @Before fun start() { server = ServerProcess(listOf("--stun_urls", "stun:stun.example.org:3478")).start() }

    @After fun stop() {
        rooms.forEach { it.close() }
        server.close()
        callbacks.shutdown()
    }

    private fun client(peer: String, engine: TestEngine, events: LinkedBlockingQueue<String>): CallingClient {
        val listener = object : Listener {
            override fun onIncomingCall(peerId: String) { events.add("incoming $peerId") }
            override fun onMediaConnected(peerId: String) { events.add("media $peerId") }
            override fun onHangup(peerId: String, reason: String) { events.add("hangup $peerId $reason") }
            override fun onStats(peerId: String, sample: StatsSample) { events.add("stats $peerId") }
            override fun onError(error: CallingError) { events.add("error ${error.code} ${error.message}") }
        }
        return CallingClient(server.wsBase, server.token("r", peer), listener, callbacks, mediaEngine = engine,
            callSettings = CallMachine.Settings(statsIntervalMs = 300)).also { rooms.add(it) }
    }

    private fun next(events: LinkedBlockingQueue<String>, what: String) = events.poll(5, TimeUnit.SECONDS) ?: throw AssertionError("no $what")

    @Test fun aCallIsSetUpThroughTheServerWithTheEngineAndHungUp() = runBlocking {
        withTimeout(20_000) {
            val aliceEngine = TestEngine("alice")
            val bobEngine = TestEngine("bob")
            val aliceEvents = LinkedBlockingQueue<String>()
            val bobEvents = LinkedBlockingQueue<String>()
            val alice = client("alice", aliceEngine, aliceEvents)
            val bob = client("bob", bobEngine, bobEvents)
            alice.connect()
            bob.connect()

            alice.call("bob")
            assertEquals("incoming alice", next(bobEvents, "the incoming call"))
            bob.acceptCall("alice")
            assertEquals("media alice", next(bobEvents, "bob's media"))
            assertEquals("media bob", next(aliceEvents, "alice's media"))
            val stun = listOf(IceServer(listOf("stun:stun.example.org:3478")))
            assertEquals(stun, aliceEngine.servers.poll(1, TimeUnit.SECONDS))
            assertEquals(stun, bobEngine.servers.poll(1, TimeUnit.SECONDS))
            assertTrue(bobEngine.log.toString(), "remote offer v=0 offer from alice" in bobEngine.log)
            assertTrue(aliceEngine.log.toString(), "remote answer v=0 answer from bob" in aliceEngine.log)
            assertEquals("stats bob", next(aliceEvents, "a stats sample"))
            assertEquals("stats alice", next(bobEvents, "a stats sample"))
            // Each side's candidate reached the other's engine (sent after its remote description was set).
            assertTrue(aliceEngine.log.toString(), aliceEngine.log.any { it.startsWith("candidate") && it.endsWith("bob") })
            assertTrue(bobEngine.log.toString(), bobEngine.log.any { it.startsWith("candidate") && it.endsWith("alice") })

            alice.hangup("bob")
            val aliceEnd = generateSequence { aliceEvents.poll(5, TimeUnit.SECONDS) }.first { !it.startsWith("stats") }
            assertEquals("hangup bob local", aliceEnd)
            val bobEnd = generateSequence { bobEvents.poll(5, TimeUnit.SECONDS) }.first { !it.startsWith("stats") }
            assertEquals("hangup alice remote", bobEnd)
            // Closed on the client's own thread, never inside an engine callback.
            assertTrue(aliceEngine.log.toString(), "close bob on calling-client" in aliceEngine.log)
            assertTrue(bobEngine.log.toString(), "close alice on calling-client" in bobEngine.log)
        }
    }
}
