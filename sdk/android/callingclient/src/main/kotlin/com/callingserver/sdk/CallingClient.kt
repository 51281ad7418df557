package com.callingserver.sdk

import kotlinx.coroutines.launch
import okhttp3.OkHttpClient
import java.util.UUID
import java.util.concurrent.Executor

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
    /** A peer edited message `edit.target`; once per seq, live or replayed. */
    fun onChatEdited(edit: ChatEdit) {}
    /** Message `deletion.target` was deleted; once per seq. */
    fun onChatDeleted(deletion: ChatDeletion) {}
    /** A peer added or removed a reaction; once per seq. */
    fun onChatReaction(reaction: ChatReaction) {}
    fun onTyping(from: String, isTyping: Boolean) {}
    fun onRead(from: String, seq: Long) {}
    fun onMeter(state: String, raw: String) {}
    fun onPong() {}
    fun onError(error: CallingError) {}
    /** A peer calls (only with a `mediaEngine`): answer with `acceptCall` or `rejectCall`. */
    fun onIncomingCall(peerId: String) {}
    /** A call ended; [reason] is the browser SDK's (`local`, `remote`, `rejected`, `peer-left`, `cancelled`, `disconnected`, `failed`, `replaced`, `disconnect`: the session ended). */
    fun onHangup(peerId: String, reason: String) {}
    fun onIceRestart(peerId: String, attempt: Int) {}
    fun onMediaConnected(peerId: String) {}
    /** The sample just sent as a `stats` frame for the call with [peerId]. */
    fun onStats(peerId: String, sample: StatsSample) {}
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
    val tokenProvider: (suspend () -> String)? = null,
    /** What [iceServersForCall] uses when `/v1/ice` fails; empty: no servers (a call inside one network still connects). */
    val fallbackIceServers: List<IceServer> = IceServer.FALLBACK,
    /** The media layer (`WebRtcMediaEngine` on Android); null: signaling only, `call` and friends report `invalid_state`. */
    private val mediaEngine: MediaEngine? = null,
    callSettings: CallMachine.Settings = CallMachine.Settings()
) {
    /** The token of the last (re)connect, for REST calls. */
    @Volatile private var currentToken: String = token
    /** The room of the last `welcome`. */
    @Volatile var roomId: String? = null
        private set

    private val session = SignalingSession(token, settings.copy(
        lifecycle = settings.lifecycle.copy(hasTokenProvider = tokenProvider != null)))
    private val driver = SocketDriver("calling-client", http, baseUrl)
    private val calls = CallMachine(callSettings)
    private val socketInputs = object : SocketDriver.SocketInputs {
        override fun text(id: Long, text: String): Any = SessionInput.SocketText(id, text)
        override fun closed(id: Long, code: Int?, reason: String): Any = SessionInput.SocketClosed(id, code, reason)
        override fun failed(id: Long, error: CallingError): Any = SessionInput.SocketFailed(id, error)
    }

    @Volatile var state: ConnectionState = ConnectionState.IDLE
        private set

    /** The registered RPC handlers by method (the session knows only their names). */
    private val rpcHandlers = java.util.concurrent.ConcurrentHashMap<String, suspend (RpcInvocationData) -> String>()

    init {
        driver.start({ step(it) }, { if (it is CallTimer) CallInput.TimerFired(it) else SessionInput.TimerFired(it as SessionTimer) })
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
    suspend fun sendChat(text: String, meta: String? = null, clientId: String = UUID.randomUUID().toString(), replyTo: Long? = null): ChatAck =
        call { SessionInput.SendChat(it, clientId, text, meta, replyTo) } as ChatAck

    /**
     * Replaces the text (and [meta]) of our message [seq] (`chat-edit`); returns the edit's own
     * ack. Retried like [sendChat]; a failed ack throws (443 no such message, 444 not ours,
     * deleted or past the edit window).
     */
    suspend fun editChat(seq: Long, text: String, meta: String? = null, clientId: String = UUID.randomUUID().toString()): ChatAck =
        call { SessionInput.EditChat(it, clientId, seq, text, meta) } as ChatAck

    /** Deletes message [seq] (`chat-delete`): ours, or anyone's with a moderator token. Retried like [sendChat]. */
    suspend fun deleteChat(seq: Long, clientId: String = UUID.randomUUID().toString()): ChatAck =
        call { SessionInput.DeleteChat(it, clientId, seq) } as ChatAck

    /** Adds our reaction [key] to message [seq] (`chat-react`); 445 for a bad key or too many keys. */
    suspend fun react(seq: Long, key: String, clientId: String = UUID.randomUUID().toString()): ChatAck =
        call { SessionInput.React(it, clientId, seq, key, false) } as ChatAck

    /** Removes our reaction [key] from message [seq] (`chat-react` with `remove: true`). */
    suspend fun unreact(seq: Long, key: String, clientId: String = UUID.randomUUID().toString()): ChatAck =
        call { SessionInput.React(it, clientId, seq, key, true) } as ChatAck

    /** Relays `offer`, `answer` or `candidate` ([payload]: JSON object text) to [to]. */
    fun sendSignal(type: String, to: String, payload: String) { post(SessionInput.SendSignal(type, to, payload)) }
    /** Relays a `data` frame (JSON text) to [to], or to every other peer when null. */
    fun sendData(payload: String?, to: String? = null) { post(SessionInput.SendData(payload, to)) }
    fun setTyping(typing: Boolean) { post(SessionInput.SetTyping(typing)) }
    fun markRead(seq: Long) { post(SessionInput.MarkRead(seq)) }
    fun ping() { post(SessionInput.Ping) }
    /**
     * Sends a `stats` sample (docs/protocol.md "stats"), clamped to the server's ranges, with the
     * browser SDK's keys; a sample with every value null is not sent. The other SDKs send one per
     * call every 5 s from their peer connection's statistics; this SDK has no media layer yet, so
     * the app calls this from its own `PeerConnection.getStats`.
     */
    fun sendStats(sample: StatsSample) { post(SessionInput.SendStats(sample)) }

    /**
     * Asks [to] to run [method] with [payload] and returns its handler's result (docs/protocol.md
     * "RPC"). Throws [RpcError]: `RECIPIENT_NOT_FOUND`, `REQUEST_PAYLOAD_TOO_LARGE`,
     * `CONNECTION_TIMEOUT` (no ack within `rpcAckTimeoutMs`), `RESPONSE_TIMEOUT` (none within
     * [timeoutMs]), `RECIPIENT_DISCONNECTED` (the peer left), `SEND_FAILED` (not connected, or
     * refused), `UNSUPPORTED_METHOD`, or the handler's own error.
     */
    suspend fun performRpc(to: String, method: String, payload: String = "", timeoutMs: Long = 10_000): String {
        if (method.isEmpty() || timeoutMs <= 0) throw CallingError.invalidState("performRpc needs a method name and a positive timeout")
        val id = UUID.randomUUID().toString()
        return when (val outcome = call { SessionInput.PerformRpc(it, id, to, method, payload, timeoutMs) }) {
            is RpcError -> throw outcome
            else -> outcome as String
        }
    }

    /**
     * Answers `rpc-request`s for [method] with [handler]; registering a method again replaces its
     * handler. The request is acked at once; the handler's result is the response, a thrown
     * [RpcError] goes to the caller as it is, anything else as `APPLICATION_ERROR`.
     */
    fun registerRpcMethod(method: String, handler: suspend (RpcInvocationData) -> String) {
        rpcHandlers[method] = handler
        post(SessionInput.RegisterRpcMethod(method))
    }

    /** Stops answering [method]: later requests for it get `UNSUPPORTED_METHOD`. */
    fun unregisterRpcMethod(method: String) {
        rpcHandlers.remove(method)
        post(SessionInput.UnregisterRpcMethod(method))
    }

    /** Calls [peerId] through the `mediaEngine`: ICE servers for this call, a peer connection, the offer. A call already up with that peer is replaced. */
    fun call(peerId: String) { postCall(CallInput.Call(peerId)) }
    /** Answers the ringing call from [peerId] (`onIncomingCall`). */
    fun acceptCall(peerId: String) { postCall(CallInput.Accept(peerId)) }
    /** Declines the ringing call from [peerId]: the caller gets `data {kind:"hangup"}`. */
    fun rejectCall(peerId: String) { postCall(CallInput.Reject(peerId)) }
    /** Ends the call with [peerId] (`data {kind:"hangup"}` to the peer, the peer connection closed). */
    fun hangup(peerId: String) { postCall(CallInput.Hangup(peerId)) }

    private fun postCall(input: CallInput) {
        if (mediaEngine == null) deliver(CallingEvent.Error(CallingError.invalidState("no mediaEngine: calls need one")))
        else post(input)
    }

    /**
     * The STUN/TURN servers for a call: `GET /v1/ice` with this client's token (docs/protocol.md
     * "ICE servers"). An empty list means the server has none configured. Throws a [CallingError]
     * when refused or unreachable; [iceServersForCall] falls back instead.
     */
    suspend fun fetchIceServers(): List<IceServer> = IceServer.listFrom(Rest.getJson(http, baseUrl, "/v1/ice", currentToken))

    /**
     * What a call uses, fetched anew for every call (TURN credentials expire): [fetchIceServers],
     * or [fallbackIceServers] when that fails (the Swift SDK's `fallbackIceServers`; the browser
     * SDK goes on without servers and reports the error). The failure is reported with `onError`.
     */
    suspend fun iceServersForCall(): List<IceServer> = try {
        fetchIceServers()
    } catch (e: CallingError) {
        deliver(CallingEvent.Error(e))
        fallbackIceServers
    }

    /**
     * One page of the room's chat history after [sinceSeq] (`GET /v1/rooms/{id}/messages` with
     * this client's token, docs/protocol.md "History API"), or with [beforeSeq] the messages
     * before it, newest first. Each message is as it is now (edited text, tombstone, reactions);
     * [includeEdits] adds its edits. [roomId] defaults to the room of the last `welcome`, else the
     * token's `room_id` claim. Works before `connect()`. Throws a [CallingError] (`status`,
     * problem `code`) when refused.
     */
    suspend fun fetchMessages(roomId: String? = null, sinceSeq: Long = 0, limit: Int = 50, beforeSeq: Long? = null,
                              includeEdits: Boolean = false): MessagesPage {
        val token = currentToken
        val room = roomId ?: this.roomId ?: roomIdClaim(token)
            ?: throw CallingError("invalid_token", "the token has no room_id claim")
        val cursor = if (beforeSeq != null) "before_seq=$beforeSeq" else "since_seq=$sinceSeq"
        val edits = if (includeEdits) "&include=edits" else ""
        val path = "/v1/rooms/${encode(room)}/messages?$cursor&limit=$limit$edits"
        return MessagesPage.from(Rest.getJson(http, baseUrl, path, token), room, sinceSeq, limit)
    }

    /**
     * The rooms of the token's peer id, most recent activity first (`GET /v1/me/rooms`), each
     * with its last seq and message, our read marker and unread count. Needs a user token (scope
     * `user`, no room): make a client with it and call this without `connect()`.
     */
    suspend fun inbox(limit: Int? = null, cursor: String? = null): InboxPage {
        val query = listOfNotNull(limit?.let { "limit=$it" }, cursor?.let { "cursor=${encode(it)}" })
        val path = "/v1/me/rooms" + if (query.isEmpty()) "" else query.joinToString("&", prefix = "?")
        return InboxPage.from(Rest.getJson(http, baseUrl, path, currentToken))
    }

    private fun encode(value: String): String = java.net.URLEncoder.encode(value, "UTF-8").replace("+", "%20")

    /** Stops the frame coroutine; call after `disconnect()` when the client is no longer needed. */
    fun close() { driver.close() }

    private fun post(input: Any) { driver.post(input) }

    private suspend fun call(make: (Long) -> SessionInput): Any? = driver.call(make)

    private fun step(input: Any) {
        if (input is CallInput) { for (action in calls.handle(input)) performCall(action); return }
        val sessionInput = input as? SessionInput ?: return
        val actions = session.handle(sessionInput)
        // Before the actions, so a listener called for them already reads the new state.
        state = session.state
        roomId = session.roomId
        for (action in actions) perform(action)
    }

    private fun perform(action: SessionAction) {
        when (action) {
            is SessionAction.OpenSocket -> {
                currentToken = action.token
                driver.open(action.id, action.path, action.token, socketInputs)
            }
            is SessionAction.CloseSocket -> driver.closeSocket(action.code, action.reason)
            is SessionAction.AbortSocket -> driver.abortSocket()
            is SessionAction.Send -> driver.send(action.text)
            is SessionAction.FetchGap -> driver.scope.launch {
                try {
                    val page = fetchMessages(null, action.sinceSeq, SignalingSession.GAP_PAGE_LIMIT)
                    post(SessionInput.GapPage(action.generation, page))
                } catch (e: CallingError) {
                    post(SessionInput.GapFailed(action.generation, e))
                } catch (e: Exception) {
                    post(SessionInput.GapFailed(action.generation, CallingError("closed", "history page failed: ${e.message}", isRetryable = true)))
                }
            }
            is SessionAction.InvokeRpc -> {
                val handler = rpcHandlers[action.method]
                if (handler == null) {
                    post(SessionInput.RpcHandled(action.data, null, RpcError(RpcError.UNSUPPORTED_METHOD, "method '${action.method}' not supported")))
                } else {
                    driver.scope.launch {
                        val handled = try {
                            SessionInput.RpcHandled(action.data, handler(action.data), null)
                        } catch (e: RpcError) {
                            SessionInput.RpcHandled(action.data, null, e)
                        } catch (e: Exception) {
                            SessionInput.RpcHandled(action.data, null, RpcError(RpcError.APPLICATION_ERROR, e.message ?: e.toString()))
                        }
                        post(handled)
                    }
                }
            }
            is SessionAction.Arm -> driver.arm(action.timer, action.afterMs)
            is SessionAction.Cancel -> driver.cancel(action.timer)
            is SessionAction.Resolve -> driver.resolve(action.waiter, action.value, action.error)
            is SessionAction.Emit -> {
                deliver(action.event)
                if (mediaEngine != null) callInputOf(action.event)?.let { input -> calls.handle(input).forEach { performCall(it) } }
            }
            is SessionAction.RefreshToken -> {
                val provider = tokenProvider ?: return
                driver.refreshToken(provider) { token, error -> SessionInput.TokenRefreshed(action.attempt, token, error) }
            }
        }
    }

    /** The room events the call logic follows. */
    private fun callInputOf(event: CallingEvent): CallInput? = when (event) {
        is CallingEvent.Signal -> CallInput.Signal(event.type, event.from, event.payload)
        is CallingEvent.Data -> CallInput.Data(event.from, event.payload)
        is CallingEvent.PeerLeft -> CallInput.PeerLeft(event.peerId)
        is CallingEvent.PeerReconnecting -> CallInput.PeerReconnecting(event.peerId)
        is CallingEvent.PeerResumed -> CallInput.PeerResumed(event.peerId)
        is CallingEvent.Disconnected -> CallInput.SocketDown
        is CallingEvent.StateChanged ->
            if (event.state == ConnectionState.ENDED || event.state == ConnectionState.FAILED) CallInput.SessionEnded else null
        is CallingEvent.Connected -> CallInput.Welcomed(event.welcome.peers.map { it.peerId })
        else -> null
    }

    /**
     * Carries out the call logic's actions on the client's thread. Engine callbacks (org.webrtc's
     * signaling thread) only post inputs, so a peer connection is never closed or disposed inside
     * one of its own callbacks.
     */
    private fun performCall(action: CallAction) {
        val engine = mediaEngine ?: return
        when (action) {
            is CallAction.FetchIce -> driver.scope.launch {
                post(CallInput.IceServers(action.peer, action.generation, iceServersForCall()))
            }
            is CallAction.CreatePeerConnection -> {
                val peer = action.peer
                val generation = action.generation
                engine.createPeerConnection(peer, action.servers, object : MediaEngineEvents {
                    override fun onLocalCandidate(candidate: String?, sdpMid: String?, sdpMLineIndex: Int?) {
                        post(CallInput.LocalCandidate(peer, generation, candidate, sdpMid, sdpMLineIndex))
                    }
                    override fun onIceConnectionState(state: String) { post(CallInput.IceState(peer, generation, state)) }
                })
            }
            is CallAction.CreateOffer -> engine.createOffer(action.peer, action.iceRestart, action.servers) { sdp, error ->
                post(if (sdp != null) CallInput.LocalDescription(action.peer, action.generation, "offer", sdp)
                     else CallInput.EngineFailed(action.peer, action.generation, error ?: "createOffer failed"))
            }
            is CallAction.CreateAnswer -> engine.createAnswer(action.peer) { sdp, error ->
                post(if (sdp != null) CallInput.LocalDescription(action.peer, action.generation, "answer", sdp)
                     else CallInput.EngineFailed(action.peer, action.generation, error ?: "createAnswer failed"))
            }
            is CallAction.SetRemote -> engine.setRemoteDescription(action.peer, action.type, action.sdp) { error ->
                post(if (error == null) CallInput.RemoteDescriptionSet(action.peer, action.generation)
                     else CallInput.EngineFailed(action.peer, action.generation, error))
            }
            is CallAction.AddCandidate -> engine.addIceCandidate(action.peer, action.candidate, action.sdpMid, action.sdpMLineIndex)
            is CallAction.GetStats -> engine.getStats(action.peer) { post(CallInput.StatsSampled(action.peer, action.generation, it)) }
            is CallAction.Close -> engine.close(action.peer)
            is CallAction.SendSignal -> step(SessionInput.SendSignal(action.type, action.to, action.payload))
            is CallAction.SendData -> step(SessionInput.SendData(action.payload, action.to))
            is CallAction.SendStats -> step(SessionInput.SendStats(action.sample))
            is CallAction.Arm -> driver.arm(action.timer, action.afterMs)
            is CallAction.Cancel -> driver.cancel(action.timer)
            is CallAction.Emit -> callbackExecutor.execute {
                when (val event = action.event) {
                    is CallEvent.Incoming -> listener.onIncomingCall(event.peer)
                    is CallEvent.Hangup -> listener.onHangup(event.peer, event.reason)
                    is CallEvent.IceRestart -> listener.onIceRestart(event.peer, event.attempt)
                    is CallEvent.MediaConnected -> listener.onMediaConnected(event.peer)
                    is CallEvent.Stats -> listener.onStats(event.peer, event.sample)
                }
            }
        }
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
                is CallingEvent.ChatEdited -> listener.onChatEdited(event.edit)
                is CallingEvent.ChatDeleted -> listener.onChatDeleted(event.deletion)
                is CallingEvent.ChatReactionChanged -> listener.onChatReaction(event.reaction)
                is CallingEvent.Typing -> listener.onTyping(event.from, event.isTyping)
                is CallingEvent.Read -> listener.onRead(event.from, event.seq)
                is CallingEvent.Meter -> listener.onMeter(event.state, event.raw)
                is CallingEvent.Pong -> listener.onPong()
                is CallingEvent.Error -> listener.onError(event.error)
            }
        }
    }
}
