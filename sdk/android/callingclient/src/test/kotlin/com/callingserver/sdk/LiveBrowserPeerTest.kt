package com.callingserver.sdk

import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.Response
import okhttp3.WebSocket
import okhttp3.WebSocketListener
import org.json.JSONObject
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Before
import org.junit.Test
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * Two Kotlin clients and a browser-protocol peer in one room on a real `calling-server` (started
 * with `stun_urls`): the third peer is a raw WebSocket that joins as the browser SDK does (token in
 * the query) and sends the browser SDK's frames, byte for byte those of
 * tests/vectors/client-frames.json. Also `/v1/ice` and the fallback when it cannot be reached.
 */
class LiveBrowserPeerTest {
    private lateinit var server: ServerProcess
    private val callbacks = Executors.newSingleThreadExecutor()
    private val rooms = ArrayList<CallingClient>()
    private val http = OkHttpClient()
    private var web: WebSocket? = null

    @Before fun start() { server = ServerProcess(listOf("--stun_urls", "stun:stun.example.org:3478")).start() }

    @After fun stop() {
        web?.cancel()
        rooms.forEach { it.close() }
        server.close()
        callbacks.shutdown()
    }

    private fun kotlinPeer(peer: String, events: LinkedBlockingQueue<String>): CallingClient {
        val listener = object : Listener {
            override fun onPeerJoined(peer: PeerInfo) { events.add("joined ${peer.peerId}") }
            override fun onSignal(type: String, from: String, payload: String) { events.add("$type $from $payload") }
            override fun onChat(message: ChatMessage) { events.add("chat ${message.from} ${message.text}") }
            override fun onError(error: CallingError) { events.add("error ${error.code}") }
        }
        return CallingClient(server.wsBase, server.token("r", peer), listener, callbacks).also { rooms.add(it) }
    }

    private fun next(events: LinkedBlockingQueue<String>, what: String): String =
        events.poll(5, TimeUnit.SECONDS) ?: throw AssertionError("no $what")

    @Test fun aBrowserProtocolPeerAndTwoKotlinClientsShareARoom() = runBlocking {
        withTimeout(20_000) {
            val aliceEvents = LinkedBlockingQueue<String>()
            val bobEvents = LinkedBlockingQueue<String>()
            val alice = kotlinPeer("alice", aliceEvents)
            val bob = kotlinPeer("bob", bobEvents)
            alice.connect()
            bob.connect()
            assertEquals("joined bob", next(aliceEvents, "bob's join"))

            val webFrames = LinkedBlockingQueue<JSONObject>()
            val request = Request.Builder().url("${server.wsBase}/v1/ws?token=${server.token("r", "web")}").build()
            web = http.newWebSocket(request, object : WebSocketListener() {
                override fun onMessage(webSocket: WebSocket, text: String) { webFrames.add(JSONObject(text)) }
                override fun onFailure(webSocket: WebSocket, t: Throwable, response: Response?) { webFrames.add(JSONObject().put("type", "failure")) }
            })
            val welcome = webFrames.poll(5, TimeUnit.SECONDS)!!
            assertEquals("welcome", welcome.getString("type"))
            assertEquals(listOf("alice", "bob"), (0 until welcome.getJSONObject("payload").getJSONArray("peers").length())
                .map { welcome.getJSONObject("payload").getJSONArray("peers").getJSONObject(it).getString("peer_id") }.sorted())
            assertEquals("joined web", next(aliceEvents, "web's join"))
            assertEquals("joined web", next(bobEvents, "web's join"))

            // The browser SDK's offer (tests/vectors/client-frames.json "offer", addressed to alice).
            web!!.send("{\"type\":\"offer\",\"to\":\"alice\",\"payload\":{\"type\":\"offer\",\"sdp\":\"v=0\\r\\no=- 1 2 IN IP4 127.0.0.1\\r\\n\"}}")
            val offer = next(aliceEvents, "the offer")
            assertEquals("offer web", offer.substringBefore(" {"))
            assertEquals("v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n", JSONObject(offer.substringAfter("offer web ")).getString("sdp"))

            alice.sendSignal("answer", "web", """{"type":"answer","sdp":"v=0\r\n"}""")
            alice.sendSignal("candidate", "web", candidatePayload("candidate:1 1 udp 2122260223 192.168.1.2 54321 typ host", "0", 0))
            val answer = webFrames.poll(5, TimeUnit.SECONDS)!!
            assertEquals(listOf("answer", "alice"), listOf(answer.getString("type"), answer.getString("from")))
            val candidate = webFrames.poll(5, TimeUnit.SECONDS)!!
            assertEquals("""{"candidate":"candidate:1 1 udp 2122260223 192.168.1.2 54321 typ host","sdpMid":"0","sdpMLineIndex":0}""",
                candidate.getJSONObject("payload").toString())

            // The browser SDK's chat frame reaches both Kotlin clients; theirs reaches the browser peer.
            web!!.send("{\"type\":\"chat\",\"payload\":{\"client_id\":\"w1\",\"text\":\"from the web\"}}")
            assertEquals("chat web from the web", next(aliceEvents, "web's chat"))
            assertEquals("chat web from the web", next(bobEvents, "web's chat"))
            bob.sendChat("from bob")
            val ackOrChat = generateSequence { webFrames.poll(5, TimeUnit.SECONDS) }.first { it.getString("type") == "chat" }
            assertEquals("from bob", ackOrChat.getJSONObject("payload").getString("text"))
            assertEquals("bob", ackOrChat.getString("from"))

            assertEquals(listOf(IceServer(listOf("stun:stun.example.org:3478"))), alice.fetchIceServers())
            assertEquals(listOf(IceServer(listOf("stun:stun.example.org:3478"))), alice.iceServersForCall())
        }
    }

    @Test fun aCallFallsBackToPublicStunWhenIceCannotBeFetched() = runBlocking {
        val errors = LinkedBlockingQueue<String>()
        val listener = object : Listener { override fun onError(error: CallingError) { errors.add(error.code) } }
        // Port 1 on loopback: nothing listens, the fetch fails at once.
        val client = CallingClient("ws://127.0.0.1:1", server.token("r", "zoe"), listener, callbacks).also { rooms.add(it) }
        assertEquals(IceServer.FALLBACK, client.iceServersForCall())
        assertEquals("closed", errors.poll(5, TimeUnit.SECONDS))
        val none = CallingClient("ws://127.0.0.1:1", server.token("r", "zed"), listener, callbacks, fallbackIceServers = emptyList())
        rooms.add(none)
        assertEquals(emptyList<IceServer>(), none.iceServersForCall())
    }
}
