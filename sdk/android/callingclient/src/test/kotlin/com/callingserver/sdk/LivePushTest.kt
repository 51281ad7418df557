package com.callingserver.sdk

import com.sun.net.httpserver.HttpServer
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.json.JSONObject
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Before
import org.junit.Test
import java.net.InetSocketAddress
import java.util.Base64
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

/**
 * Against a real `calling-server` with webhooks to a receiver in this test (docs/operations.md
 * "Webhooks") and no JWT leeway: a push-ready incoming call (the `presence_request_ringing`
 * webhook's request id accepted by a freshly started agent client, both sides then in one room),
 * and a 4401 `token expired` close answered with a fresh token from the `tokenProvider`.
 */
class LivePushTest {
    private val key = ByteArray(32) { (it + 1).toByte() }
    private val secret = "whsec_" + Base64.getEncoder().encodeToString(key)
    private lateinit var receiver: HttpServer
    /** Verified webhook bodies; a bad signature is a test failure recorded as a String. */
    private val hooks = LinkedBlockingQueue<Any>()
    private lateinit var server: ServerProcess
    private val callbacks = Executors.newSingleThreadExecutor()
    private val rooms = ArrayList<CallingClient>()
    private val presences = ArrayList<PresenceClient>()

    @Before fun start() {
        receiver = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0)
        receiver.createContext("/hooks") { exchange ->
            val body = exchange.requestBody.readBytes()
            val id = exchange.requestHeaders.getFirst("webhook-id")
            val ts = exchange.requestHeaders.getFirst("webhook-timestamp")
            val mac = Mac.getInstance("HmacSHA256").apply { init(SecretKeySpec(key, "HmacSHA256")) }
            val expected = "v1," + Base64.getEncoder().encodeToString(mac.doFinal("$id.$ts.".toByteArray() + body))
            val signatures = exchange.requestHeaders.getFirst("webhook-signature")?.split(" ") ?: emptyList()
            hooks.add(if (expected in signatures) JSONObject(String(body, Charsets.UTF_8)) else "bad signature on $id")
            exchange.sendResponseHeaders(204, -1)
            exchange.close()
        }
        receiver.start()
        server = ServerProcess(listOf("--jwt_leeway_seconds", "0",
            "--webhook_urls", "http://127.0.0.1:${receiver.address.port}/hooks",
            "--webhook_events", "presence_request_ringing"), env = mapOf("CALLING_WEBHOOK_SECRET" to secret)).start()
    }

    @After fun stop() {
        rooms.forEach { it.close() }
        presences.forEach { it.close() }
        server.close()
        receiver.stop(0)
        callbacks.shutdown()
    }

    private fun presence(peer: String, role: String, accepted: LinkedBlockingQueue<String>? = null): PresenceClient {
        val listener = object : PresenceListener {
            override fun onAccepted(requestId: String, payload: String) { accepted?.add(payload) }
        }
        return PresenceClient(server.wsBase, server.presenceToken(peer, role), listener, callbacks).also { presences.add(it) }
    }

    private fun room(token: String, welcomes: LinkedBlockingQueue<Welcome>, settings: SignalingSession.Settings = SignalingSession.Settings(),
                     reconnecting: LinkedBlockingQueue<Int>? = null, tokenProvider: (suspend () -> String)? = null): CallingClient {
        val listener = object : Listener {
            override fun onConnected(welcome: Welcome) { welcomes.add(welcome) }
            override fun onReconnecting(attempt: Int) { reconnecting?.add(attempt) }
        }
        return CallingClient(server.wsBase, token, listener, callbacks, settings, tokenProvider = tokenProvider).also { rooms.add(it) }
    }

    @Test fun theRingingWebhooksRequestIdAcceptedFromAPushPutsBothInOneRoom() = runBlocking {
        withTimeout(20_000) {
            // The agent's app is connected, then goes to the background (its socket looks alive to the server).
            val sleeping = presence("ann", "agent")
            sleeping.connect()
            val callerAccepted = LinkedBlockingQueue<String>()
            val caller = presence("carl", "caller", callerAccepted)
            caller.connect()
            caller.request(agentId = "ann", metadata = """{"topic":"billing"}""")

            // The backend's webhook: what it would put in the FCM/APNs push.
            val hook = hooks.poll(10, TimeUnit.SECONDS) ?: throw AssertionError("no webhook")
            check(hook is JSONObject) { hook }
            assertEquals("presence_request_ringing", hook.getString("type"))
            val push = RingingRequest.parse(hook.getJSONObject("data").toString())!!
            assertEquals(listOf("carl", "ann"), listOf(push.callerId, push.agentId))
            assertTrue(push.expiresAt > System.currentTimeMillis())

            // The push wakes the app: a new client, never connected, answers by the push's id.
            val woken = presence("ann", "agent")
            val call = woken.acceptRequest(push.requestId)
            assertEquals(push.requestId, call.requestId)
            val callerSide = JSONObject(callerAccepted.poll(10, TimeUnit.SECONDS) ?: throw AssertionError("caller: no accepted"))
            assertEquals(call.roomId, callerSide.getString("room_id"))

            val agentWelcomes = LinkedBlockingQueue<Welcome>()
            val callerWelcomes = LinkedBlockingQueue<Welcome>()
            room(call.token, agentWelcomes).connect()
            room(callerSide.getString("token"), callerWelcomes).connect()
            val agentWelcome = agentWelcomes.poll(5, TimeUnit.SECONDS)!!
            val callerWelcome = callerWelcomes.poll(5, TimeUnit.SECONDS)!!
            assertEquals(call.roomId, agentWelcome.roomId)
            assertEquals(call.roomId, callerWelcome.roomId)
            assertEquals(listOf("ann"), callerWelcome.peers.map { it.peerId })
            assertEquals("one ringing webhook per request", null, hooks.poll(500, TimeUnit.MILLISECONDS))
        }
    }

    @Test fun aTokenExpiredCloseIsAnsweredWithAFreshTokenFromTheProvider() = runBlocking {
        withTimeout(20_000) {
            val asked = AtomicInteger(0)
            val welcomes = LinkedBlockingQueue<Welcome>()
            val reconnecting = LinkedBlockingQueue<Int>()
            val settings = SignalingSession.Settings(pingIntervalMs = 0)
            val client = room(server.shortToken("r", "alice", 2), welcomes, settings, reconnecting) {
                asked.incrementAndGet()
                server.token("r", "alice")
            }
            client.connect()
            welcomes.poll(5, TimeUnit.SECONDS)!!
            // The server closes with 4401 once exp passes (no leeway), checked about once a second.
            assertEquals(1, reconnecting.poll(8, TimeUnit.SECONDS))
            val again = welcomes.poll(8, TimeUnit.SECONDS) ?: throw AssertionError("no welcome after the refresh")
            assertEquals("alice", again.peerId)
            assertEquals(1, asked.get())
            assertEquals(ConnectionState.CONNECTED, client.state)
            assertTrue("the refreshed connection works", client.sendChat("after the refresh").seq > 0)
        }
    }
}
