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
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.Executor
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicLong

/** What a [PresenceClient] reports, on its callback executor, in arrival order. All methods have empty defaults. */
interface PresenceListener {
    fun onStateChanged(state: ConnectionState) {}
    /** The `connected` snapshot, after the first connect and after every reconnect. */
    fun onConnected(snapshot: PresenceSnapshot) {}
    fun onDisconnected(error: CallingError?) {}
    fun onReconnecting(attempt: Int) {}
    fun onStatus(agent: AgentPresence) {}
    /** [payload]: the `request` frame's payload as JSON text. */
    fun onRequest(requestId: String, payload: String) {}
    fun onAccepted(requestId: String, payload: String) {}
    fun onEnded(requestId: String, reason: String, payload: String) {}
    fun onPong() {}
    /** A refused frame (with the `request_id` it named, if any) or a call made while not connected. */
    fun onError(error: CallingError, requestId: String?) {}
}

/**
 * The presence channel (`/v1/presence`, docs/protocol.md "Presence channel"): agents publish a
 * status, dashboards watch every agent, callers ask for a call. [PresenceSession] driven by an
 * OkHttp WebSocket, one coroutine draining every input in order, as in [CallingClient]. The
 * agent's status is set again after a reconnect to a server that lost it. [token] needs the
 * `presence` scope and the role `agent`, `dashboard` or `caller`.
 */
class PresenceClient(
    private val baseUrl: String,
    token: String,
    private val listener: PresenceListener,
    private val callbackExecutor: Executor,
    settings: PresenceSession.Settings = PresenceSession.Settings(),
    private val http: OkHttpClient = OkHttpClient(),
    /** Asked for a fresh token before each reconnect (so a 4401 close is retried); null: none. */
    val tokenProvider: (suspend () -> String)? = null
) {
    private val session = PresenceSession(token, settings.copy(
        lifecycle = settings.lifecycle.copy(hasTokenProvider = tokenProvider != null)))
    private val loopExecutor = Executors.newSingleThreadExecutor { r -> Thread(r, "presence-client").apply { isDaemon = true } }
    private val job = SupervisorJob()
    private val scope = CoroutineScope(job + loopExecutor.asCoroutineDispatcher())
    private val inputs = Channel<Any>(Channel.UNLIMITED)
    private val waiters = ConcurrentHashMap<Long, CompletableDeferred<Any?>>()
    private val nextWaiter = AtomicLong(0)

    private class TimerFire(val timer: ConnectionLifecycle.Timer, val generation: Long)
    private class Armed(val generation: Long, val job: Job)
    private val timers = HashMap<ConnectionLifecycle.Timer, Armed>()
    private var timerGeneration = 0L
    private var socket: WebSocket? = null

    @Volatile var state: ConnectionState = ConnectionState.IDLE
        private set
    /** The last snapshot, kept up to date by the frames that followed it. */
    @Volatile var snapshot: PresenceSnapshot? = null
        private set

    init {
        scope.launch { for (input in inputs) step(input) }
    }

    /** Opens the channel; returns the `connected` snapshot, or throws the [CallingError] that refused it. */
    suspend fun connect(token: String? = null): PresenceSnapshot = call { PresenceInput.Connect(it, token) } as PresenceSnapshot

    /** Closes with 1000, no reconnect; the agent's remembered status is forgotten. */
    suspend fun disconnect() { call { PresenceInput.Disconnect(it) } }

    /** Agent: `available`, `busy`, `away` or `offline`; [note] and [queues] null leave them as they are. */
    fun setStatus(status: String, note: String? = null, queues: List<String>? = null) { post(PresenceInput.SetStatus(status, note, queues)) }
    /** Caller: asks one agent ([agentId]) or a [queue] for a call; [metadata] is a JSON object's text. */
    fun request(agentId: String? = null, queue: String? = null, metadata: String? = null) { post(PresenceInput.Request(agentId, queue, metadata)) }
    /** Agent: accepts a ringing request. */
    fun accept(requestId: String) { post(PresenceInput.Accept(requestId)) }
    /** Agent: declines a ringing request. */
    fun decline(requestId: String) { post(PresenceInput.Decline(requestId)) }
    /** Caller: withdraws its request. */
    fun cancel(requestId: String) { post(PresenceInput.Cancel(requestId)) }
    fun ping() { post(PresenceInput.Ping) }

    /** Stops the frame coroutine; call after `disconnect()`. */
    fun close() {
        socket?.cancel()
        job.cancel()
        loopExecutor.shutdown()
    }

    private fun post(input: Any) { inputs.offer(input) }

    private suspend fun call(make: (Long) -> PresenceInput): Any? {
        val id = nextWaiter.incrementAndGet()
        val deferred = CompletableDeferred<Any?>()
        waiters[id] = deferred
        post(make(id))
        return deferred.await()
    }

    private fun step(input: Any) {
        val presenceInput = when (input) {
            is TimerFire -> {
                val armed = timers[input.timer]
                if (armed == null || armed.generation != input.generation) return
                timers.remove(input.timer)
                PresenceInput.TimerFired(input.timer)
            }
            is PresenceInput -> input
            else -> return
        }
        for (action in session.handle(presenceInput)) perform(action)
        state = session.state
        snapshot = session.snapshot
    }

    private fun perform(action: PresenceAction) {
        when (action) {
            is PresenceAction.OpenSocket -> open(action)
            is PresenceAction.CloseSocket -> socket?.close(action.code, action.reason)
            is PresenceAction.AbortSocket -> {
                socket?.let { if (!it.close(4000, "abandoned")) it.cancel() }
                socket = null
            }
            is PresenceAction.Send -> socket?.send(action.text)
            is PresenceAction.Arm -> {
                timers.remove(action.timer)?.job?.cancel()
                val generation = ++timerGeneration
                timers[action.timer] = Armed(generation, scope.launch {
                    delay(action.afterMs)
                    post(TimerFire(action.timer, generation))
                })
            }
            is PresenceAction.Cancel -> timers.remove(action.timer)?.job?.cancel()
            is PresenceAction.Resolve -> {
                val waiter = waiters.remove(action.waiter) ?: return
                if (action.error != null) waiter.completeExceptionally(action.error) else waiter.complete(action.value)
            }
            is PresenceAction.Emit -> deliver(action.event)
            is PresenceAction.RefreshToken -> {
                val provider = tokenProvider ?: return
                scope.launch {
                    try {
                        post(PresenceInput.TokenRefreshed(action.attempt, provider(), null))
                    } catch (e: CallingError) {
                        post(PresenceInput.TokenRefreshed(action.attempt, null, e))
                    } catch (e: Exception) {
                        post(PresenceInput.TokenRefreshed(action.attempt, null,
                            CallingError("refresh_failed", "token provider failed: ${e.message}", isRetryable = true)))
                    }
                }
            }
        }
    }

    private fun open(action: PresenceAction.OpenSocket) {
        val id = action.id
        val request = Request.Builder()
            .url(baseUrl.trimEnd('/') + action.path)
            .header("Authorization", "Bearer ${action.token}")
            .build()
        socket = http.newWebSocket(request, object : WebSocketListener() {
            override fun onMessage(webSocket: WebSocket, text: String) { post(PresenceInput.SocketText(id, text)) }

            override fun onClosing(webSocket: WebSocket, code: Int, reason: String) {
                webSocket.close(code.takeIf { it in 1000..4999 && it != 1005 } ?: 1000, null)
                post(PresenceInput.SocketClosed(id, code, reason))
            }

            override fun onClosed(webSocket: WebSocket, code: Int, reason: String) { post(PresenceInput.SocketClosed(id, code, reason)) }

            override fun onFailure(webSocket: WebSocket, t: Throwable, response: Response?) {
                val error = if (response != null) {
                    val status = OkHttpCompat.statusOf(response)
                    val code = OkHttpCompat.headerOf(response, "problem-code")
                    CallingError.connectFailed(status, code, "upgrade refused: $status${code?.let { " $it" } ?: ""}")
                } else {
                    CallingError("closed", "socket failed: ${t.message}", isRetryable = true)
                }
                post(PresenceInput.SocketFailed(id, error))
            }
        })
    }

    private fun deliver(event: PresenceEvent) {
        callbackExecutor.execute {
            when (event) {
                is PresenceEvent.Connected -> listener.onConnected(event.snapshot)
                is PresenceEvent.StateChanged -> listener.onStateChanged(event.state)
                is PresenceEvent.Status -> listener.onStatus(event.agent)
                is PresenceEvent.Request -> listener.onRequest(event.requestId, event.raw)
                is PresenceEvent.Accepted -> listener.onAccepted(event.requestId, event.raw)
                is PresenceEvent.Ended -> listener.onEnded(event.requestId, event.reason, event.raw)
                is PresenceEvent.Error -> listener.onError(event.error, event.requestId)
                is PresenceEvent.Disconnected -> listener.onDisconnected(event.error)
                is PresenceEvent.Reconnecting -> listener.onReconnecting(event.attempt)
                is PresenceEvent.Pong -> listener.onPong()
            }
        }
    }
}
