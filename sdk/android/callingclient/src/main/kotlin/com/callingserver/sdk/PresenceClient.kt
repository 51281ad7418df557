package com.callingserver.sdk

import okhttp3.OkHttpClient
import java.util.concurrent.Executor

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
    private val driver = SocketDriver("presence-client", http, baseUrl)
    private val socketInputs = object : SocketDriver.SocketInputs {
        override fun text(id: Long, text: String): Any = PresenceInput.SocketText(id, text)
        override fun closed(id: Long, code: Int?, reason: String): Any = PresenceInput.SocketClosed(id, code, reason)
        override fun failed(id: Long, error: CallingError): Any = PresenceInput.SocketFailed(id, error)
    }

    @Volatile var state: ConnectionState = ConnectionState.IDLE
        private set
    /** The last snapshot, kept up to date by the frames that followed it. */
    @Volatile var snapshot: PresenceSnapshot? = null
        private set

    init {
        driver.start({ step(it) }, { PresenceInput.TimerFired(it as ConnectionLifecycle.Timer) })
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
    /**
     * Agent, from a push notification: connects when not connected (a cold start after the push),
     * accepts the request [requestId] (the push payload's, see [RingingRequest]) and returns the
     * call it became, whose [AcceptedCall.token] joins the room. Throws the [CallingError] that
     * stopped it: the request ended first (`request_ended`), was refused (`server`, 404/409) or
     * the channel could not connect.
     */
    suspend fun acceptRequest(requestId: String): AcceptedCall =
        call { PresenceInput.AnswerRequest(it, requestId, accept = true) } as AcceptedCall

    /** Agent, from a push notification: connects when needed and declines [requestId]; returns when the server ended it. */
    suspend fun declineRequest(requestId: String) { call { PresenceInput.AnswerRequest(it, requestId, accept = false) } }

    /** Caller: withdraws its request. */
    fun cancel(requestId: String) { post(PresenceInput.Cancel(requestId)) }
    fun ping() { post(PresenceInput.Ping) }

    /** Stops the frame coroutine; call after `disconnect()`. */
    fun close() { driver.close() }

    private fun post(input: Any) { driver.post(input) }

    private suspend fun call(make: (Long) -> PresenceInput): Any? = driver.call(make)

    private fun step(input: Any) {
        val presenceInput = input as? PresenceInput ?: return
        val actions = session.handle(presenceInput)
        // Before the actions, so a listener called for them already reads the new state.
        state = session.state
        snapshot = session.snapshot
        for (action in actions) perform(action)
    }

    private fun perform(action: PresenceAction) {
        when (action) {
            is PresenceAction.OpenSocket -> driver.open(action.id, action.path, action.token, socketInputs)
            is PresenceAction.CloseSocket -> driver.closeSocket(action.code, action.reason)
            is PresenceAction.AbortSocket -> driver.abortSocket()
            is PresenceAction.Send -> driver.send(action.text)
            is PresenceAction.Arm -> driver.arm(action.timer, action.afterMs)
            is PresenceAction.Cancel -> driver.cancel(action.timer)
            is PresenceAction.Resolve -> driver.resolve(action.waiter, action.value, action.error)
            is PresenceAction.Emit -> deliver(action.event)
            is PresenceAction.RefreshToken -> {
                val provider = tokenProvider ?: return
                driver.refreshToken(provider) { token, error -> PresenceInput.TokenRefreshed(action.attempt, token, error) }
            }
        }
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
