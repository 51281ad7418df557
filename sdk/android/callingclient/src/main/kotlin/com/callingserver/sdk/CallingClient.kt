package com.callingserver.sdk

import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.Response
import okhttp3.WebSocket
import okhttp3.WebSocketListener
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.Executor
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicLong

/**
 * What a [CallingClient] reports. Every method runs on the client's callback executor (on Android
 * the main thread: `ContextCompat.getMainExecutor(context)`), in the order the frames arrived.
 * All methods have empty defaults.
 */
interface Listener {
    fun onStateChanged(state: ConnectionState) {}
    fun onConnected(welcome: Welcome) {}
    /** The socket ended; [error] is null after `disconnect()`. A reconnect may follow. */
    fun onDisconnected(error: CallingError?) {}
    fun onReconnecting(attempt: Int) {}
    fun onPeerJoined(peer: PeerInfo) {}
    fun onPeerLeft(peerId: String) {}
    fun onPeerReconnecting(peerId: String) {}
    fun onPeerResumed(peerId: String) {}
    /** A relayed `offer`, `answer` or `candidate`; [payload] is the payload's JSON text. */
    fun onSignal(type: String, from: String, payload: String) {}
    fun onData(from: String, payload: String?) {}
    fun onChat(message: ChatMessage) {}
    fun onTyping(from: String, isTyping: Boolean) {}
    fun onRead(from: String, seq: Long) {}
    fun onMeter(state: String, raw: String) {}
    fun onPong() {}
    fun onError(error: CallingError) {}
}

/**
 * The room client: [SignalingSession] driven by an OkHttp WebSocket. One coroutine drains every
 * input (socket frames, timers, the app's calls) in arrival order, so the session is never touched
 * from two threads; listener calls go to [callbackExecutor].
 *
 * [baseUrl] is the server's `ws://` or `wss://` origin (`ws://10.0.2.2:8080`). [tokenProvider],
 * when given, is asked for a fresh token before each reconnect (so a 4401 close is retried).
 */
class CallingClient(
    private val baseUrl: String,
    token: String,
    private val listener: Listener,
    private val callbackExecutor: Executor,
    settings: SignalingSession.Settings = SignalingSession.Settings(),
    private val http: OkHttpClient = OkHttpClient(),
    /** Asked for a fresh token before each reconnect (so a 4401 close is retried); null: none. */
    val tokenProvider: (suspend () -> String)? = null
) {
    /** The token of the last (re)connect, for REST calls. */
    @Volatile private var currentToken: String = token
    /** The room of the last `welcome`. */
    @Volatile var roomId: String? = null
        private set

    private val session = SignalingSession(token, settings.copy(
        lifecycle = settings.lifecycle.copy(hasTokenProvider = tokenProvider != null)))
    private val loopExecutor = Executors.newSingleThreadExecutor { r -> Thread(r, "calling-client").apply { isDaemon = true } }
    private val job = SupervisorJob()
    private val scope = CoroutineScope(job + loopExecutor.asCoroutineDispatcher())
    private val inputs = Channel<Any>(Channel.UNLIMITED)
    private val waiters = ConcurrentHashMap<Long, CompletableDeferred<Any?>>()
    private val nextWaiter = AtomicLong(0)

    private class TimerFire(val timer: SessionTimer, val generation: Long)
    private class Armed(val generation: Long, val job: Job)
    private val timers = HashMap<SessionTimer, Armed>()
    private var timerGeneration = 0L
    private var socket: WebSocket? = null

    @Volatile var state: ConnectionState = ConnectionState.IDLE
        private set

    init {
        scope.launch {
            for (input in inputs) step(input)
        }
    }

    /** Opens the room; returns its `welcome`, or throws the [CallingError] that refused it. */
    suspend fun connect(token: String? = null): Welcome = call { SessionInput.Connect(it, token) } as Welcome

    /** Sends `leave`, closes with 1000 and waits for the close (at most the close grace). */
    suspend fun disconnect() { call { SessionInput.Disconnect(it) } }

    /**
     * Sends a chat message and returns its ack. Retried with the same [clientId] after an ack
     * timeout and after a reconnect; the server answers every retry with the original ack.
     * [meta] is a JSON object's text.
     */
    suspend fun sendChat(text: String, meta: String? = null, clientId: String = UUID.randomUUID().toString()): ChatAck =
        call { SessionInput.SendChat(it, clientId, text, meta) } as ChatAck

    /** Relays `offer`, `answer` or `candidate` ([payload]: JSON object text) to [to]. */
    fun sendSignal(type: String, to: String, payload: String) { post(SessionInput.SendSignal(type, to, payload)) }
    /** Relays a `data` frame (JSON text) to [to], or to every other peer when null. */
    fun sendData(payload: String?, to: String? = null) { post(SessionInput.SendData(payload, to)) }
    fun setTyping(typing: Boolean) { post(SessionInput.SetTyping(typing)) }
    fun markRead(seq: Long) { post(SessionInput.MarkRead(seq)) }
    fun ping() { post(SessionInput.Ping) }

    /**
     * One page of the room's chat history after [sinceSeq] (`GET /v1/rooms/{id}/messages` with
     * this client's token, docs/protocol.md "History API"). [roomId] defaults to the room of the
     * last `welcome`, else the token's `room_id` claim. Works before `connect()`. Throws a
     * [CallingError] (`status`, problem `code`) when refused.
     */
    suspend fun fetchMessages(roomId: String? = null, sinceSeq: Long = 0, limit: Int = 50): MessagesPage {
        val token = currentToken
        val room = roomId ?: this.roomId ?: roomIdClaim(token)
            ?: throw CallingError("invalid_token", "the token has no room_id claim")
        val path = "/v1/rooms/${java.net.URLEncoder.encode(room, "UTF-8").replace("+", "%20")}/messages?since_seq=$sinceSeq&limit=$limit"
        return MessagesPage.from(Rest.getJson(http, baseUrl, path, token), room, sinceSeq, limit)
    }

    /** Stops the frame coroutine; call after `disconnect()` when the client is no longer needed. */
    fun close() {
        socket?.cancel()
        job.cancel()
        loopExecutor.shutdown()
    }

    private fun post(input: Any) { inputs.offer(input) }

    private suspend fun call(make: (Long) -> SessionInput): Any? {
        val id = nextWaiter.incrementAndGet()
        val deferred = CompletableDeferred<Any?>()
        waiters[id] = deferred
        post(make(id))
        return deferred.await()
    }

    private fun step(input: Any) {
        val sessionInput = when (input) {
            is TimerFire -> {
                val armed = timers[input.timer]
                if (armed == null || armed.generation != input.generation) return // cancelled or replaced
                timers.remove(input.timer)
                SessionInput.TimerFired(input.timer)
            }
            is SessionInput -> input
            else -> return
        }
        for (action in session.handle(sessionInput)) perform(action)
        state = session.state
        roomId = session.roomId
    }

    private fun perform(action: SessionAction) {
        when (action) {
            is SessionAction.OpenSocket -> open(action)
            is SessionAction.CloseSocket -> socket?.close(action.code, action.reason)
            is SessionAction.AbortSocket -> {
                // 4000, not 1000: the server keeps our seat for its reconnect grace.
                socket?.let { if (!it.close(4000, "abandoned")) it.cancel() }
                socket = null
            }
            is SessionAction.Send -> socket?.send(action.text)
            is SessionAction.FetchGap -> scope.launch {
                try {
                    val page = fetchMessages(null, action.sinceSeq, SignalingSession.GAP_PAGE_LIMIT)
                    post(SessionInput.GapPage(action.generation, page))
                } catch (e: CallingError) {
                    post(SessionInput.GapFailed(action.generation, e))
                } catch (e: Exception) {
                    post(SessionInput.GapFailed(action.generation, CallingError("closed", "history page failed: ${e.message}", isRetryable = true)))
                }
            }
            is SessionAction.Arm -> {
                timers.remove(action.timer)?.job?.cancel()
                val generation = ++timerGeneration
                val job = scope.launch {
                    delay(action.afterMs)
                    post(TimerFire(action.timer, generation))
                }
                timers[action.timer] = Armed(generation, job)
            }
            is SessionAction.Cancel -> timers.remove(action.timer)?.job?.cancel()
            is SessionAction.Resolve -> {
                val waiter = waiters.remove(action.waiter) ?: return
                if (action.error != null) waiter.completeExceptionally(action.error) else waiter.complete(action.value)
            }
            is SessionAction.Emit -> deliver(action.event)
            is SessionAction.RefreshToken -> {
                val provider = tokenProvider ?: return
                scope.launch {
                    try {
                        post(SessionInput.TokenRefreshed(action.attempt, provider(), null))
                    } catch (e: CallingError) {
                        post(SessionInput.TokenRefreshed(action.attempt, null, e))
                    } catch (e: Exception) {
                        post(SessionInput.TokenRefreshed(action.attempt, null,
                            CallingError("refresh_failed", "token provider failed: ${e.message}", isRetryable = true)))
                    }
                }
            }
        }
    }

    private fun open(action: SessionAction.OpenSocket) {
        val id = action.id
        currentToken = action.token
        val request = Request.Builder()
            .url(baseUrl.trimEnd('/') + action.path)
            .header("Authorization", "Bearer ${action.token}")
            .build()
        socket = http.newWebSocket(request, object : WebSocketListener() {
            override fun onMessage(webSocket: WebSocket, text: String) { post(SessionInput.SocketText(id, text)) }

            override fun onClosing(webSocket: WebSocket, code: Int, reason: String) {
                // Answer the server's close at once so it reports this code, not 1006.
                webSocket.close(code.takeIf { it in 1000..4999 && it != 1005 } ?: 1000, null)
                post(SessionInput.SocketClosed(id, code, reason))
            }

            override fun onClosed(webSocket: WebSocket, code: Int, reason: String) {
                post(SessionInput.SocketClosed(id, code, reason)) // stale after onClosing: ignored
            }

            override fun onFailure(webSocket: WebSocket, t: Throwable, response: Response?) {
                val error = if (response != null) {
                    val status = OkHttpCompat.statusOf(response)
                    val code = OkHttpCompat.headerOf(response, "problem-code")
                    CallingError.connectFailed(status, code, "upgrade refused: $status${code?.let { " $it" } ?: ""}")
                } else {
                    // No HTTP answer, or the socket dropped without a close frame.
                    CallingError("closed", "socket failed: ${t.message}", isRetryable = true)
                }
                post(SessionInput.SocketFailed(id, error))
            }
        })
    }

    private fun deliver(event: CallingEvent) {
        callbackExecutor.execute {
            when (event) {
                is CallingEvent.StateChanged -> listener.onStateChanged(event.state)
                is CallingEvent.Connected -> listener.onConnected(event.welcome)
                is CallingEvent.Disconnected -> listener.onDisconnected(event.error)
                is CallingEvent.Reconnecting -> listener.onReconnecting(event.attempt)
                is CallingEvent.PeerJoined -> listener.onPeerJoined(event.peer)
                is CallingEvent.PeerLeft -> listener.onPeerLeft(event.peerId)
                is CallingEvent.PeerReconnecting -> listener.onPeerReconnecting(event.peerId)
                is CallingEvent.PeerResumed -> listener.onPeerResumed(event.peerId)
                is CallingEvent.Signal -> listener.onSignal(event.type, event.from, event.payload)
                is CallingEvent.Data -> listener.onData(event.from, event.payload)
                is CallingEvent.Chat -> listener.onChat(event.message)
                is CallingEvent.Typing -> listener.onTyping(event.from, event.isTyping)
                is CallingEvent.Read -> listener.onRead(event.from, event.seq)
                is CallingEvent.Meter -> listener.onMeter(event.state, event.raw)
                is CallingEvent.Pong -> listener.onPong()
                is CallingEvent.Error -> listener.onError(event.error)
            }
        }
    }
}
