package com.callingserver.sdk

import org.json.JSONObject

/** The session's timers; the driver arms, cancels and fires them. A cancelled timer must never fire. */
sealed class SessionTimer {
    data class Lifecycle(val timer: ConnectionLifecycle.Timer) : SessionTimer()
    data class ChatAck(val clientId: String) : SessionTimer()
    object Typing : SessionTimer() { override fun toString() = "Typing" }
    /** The keep-alive tick: sends a `ping`, or drops the socket when the last one is unanswered. */
    object Ping : SessionTimer() { override fun toString() = "Ping" }
    /** An RPC call waiting for its `rpc-ack`, by request id. */
    data class RpcAck(val id: String) : SessionTimer()
    /** An RPC call waiting for its `rpc-response`, by request id. */
    data class RpcResponse(val id: String) : SessionTimer()
}

/** What the session asks of its driver, in order. */
sealed class SessionAction {
    /** Open socket [id] on [path] (with `last_seq` when resuming) with [token]. */
    data class OpenSocket(val id: Long, val path: String, val token: String) : SessionAction()
    data class CloseSocket(val code: Int, val reason: String) : SessionAction()
    /** Drop the current socket without leaving: close 4000 `abandoned`. */
    object AbortSocket : SessionAction() { override fun toString() = "AbortSocket" }
    /** Send this frame text on the current socket. */
    data class Send(val text: String) : SessionAction()
    data class Arm(val timer: SessionTimer, val afterMs: Long) : SessionAction()
    data class Cancel(val timer: SessionTimer) : SessionAction()
    /** Complete the app's call [waiter] with [value] (a [Welcome], a [ChatAck], Unit) or [error]. */
    data class Resolve(val waiter: Long, val value: Any?, val error: CallingError?) : SessionAction()
    data class Emit(val event: CallingEvent) : SessionAction()
    data class RefreshToken(val attempt: Int) : SessionAction()
    /**
     * Fetch one history page after [sinceSeq] (the gap fill after a capped replay) and hand it
     * back as [SessionInput.GapPage] or [SessionInput.GapFailed] with the same [generation].
     */
    data class FetchGap(val sinceSeq: Long, val generation: Long) : SessionAction()
    /** Run the handler registered for [method] and hand its outcome back as [SessionInput.RpcHandled]. */
    data class InvokeRpc(val method: String, val data: RpcInvocationData) : SessionAction()
}

/** Everything that can happen to a session: the app's calls, socket events, timers. */
sealed class SessionInput {
    data class Connect(val waiter: Long, val token: String? = null) : SessionInput()
    data class Disconnect(val waiter: Long) : SessionInput()
    /** [meta] is a JSON object's text or null. */
    data class SendChat(val waiter: Long, val clientId: String, val text: String, val meta: String? = null, val replyTo: Long? = null) :
        SessionInput()
    /** `chat-edit` of message [target]; [meta] is a JSON object's text or null. */
    data class EditChat(val waiter: Long, val clientId: String, val target: Long, val text: String, val meta: String? = null) :
        SessionInput()
    data class DeleteChat(val waiter: Long, val clientId: String, val target: Long) : SessionInput()
    /** `chat-react`: add our reaction [key] on message [target], or take it back ([remove]). */
    data class React(val waiter: Long, val clientId: String, val target: Long, val key: String, val remove: Boolean) : SessionInput()
    /** `offer`, `answer` or `candidate` to [to]; [payload] is JSON text. */
    data class SendSignal(val type: String, val to: String, val payload: String) : SessionInput()
    data class SendData(val payload: String?, val to: String? = null) : SessionInput()
    data class SetTyping(val typing: Boolean) : SessionInput()
    data class MarkRead(val seq: Long) : SessionInput()
    object Ping : SessionInput()
    /** A `stats` sample for the server's call stats (never relayed); an empty sample is not sent. */
    data class SendStats(val sample: StatsSample) : SessionInput()
    data class SocketText(val socket: Long, val text: String) : SessionInput()
    data class SocketClosed(val socket: Long, val code: Int?, val reason: String) : SessionInput()
    data class SocketFailed(val socket: Long, val error: CallingError) : SessionInput()
    data class TimerFired(val timer: SessionTimer) : SessionInput()
    data class TokenRefreshed(val attempt: Int, val token: String?, val error: CallingError?) : SessionInput()
    /** A page of the gap fill numbered [generation] ([SessionAction.FetchGap]). */
    data class GapPage(val generation: Long, val page: MessagesPage) : SessionInput()
    data class GapFailed(val generation: Long, val error: CallingError) : SessionInput()
    /** `performRpc`; [id] is the request id the driver picked. The waiter gets the response's text or an [RpcError]. */
    data class PerformRpc(val waiter: Long, val id: String, val to: String, val method: String, val payload: String,
                          val timeoutMs: Long) : SessionInput()
    /** A handler of an [SessionAction.InvokeRpc] finished with [result] or [error]. */
    data class RpcHandled(val data: RpcInvocationData, val result: String?, val error: RpcError?) : SessionInput()
    data class RegisterRpcMethod(val method: String) : SessionInput()
    data class UnregisterRpcMethod(val method: String) : SessionInput()
}

/**
 * The room session as a pure machine: `welcome` and the roster, relays (`offer`/`answer`/
 * `candidate`/`data`) with the reconnect-grace hold, chat with `client_id` acks, retries and seq
 * dedupe, resume with `last_seq`, typing with auto-off, read markers, `leave` on `disconnect()`,
 * and `error` frames. No sockets, threads or clock: [handle] returns [SessionAction]s, which
 * [CallingClient] performs. It mirrors the Swift SDK's `SignalingSession` with its `ChatLedger`
 * (Sources/CallingClient) and the browser SDK's `CallingClient` (sdk/js/calling-client.js), minus
 * media (docs/android.md says what else). The keep-alive `ping` and the REST gap fill after a
 * capped replay ([SessionAction.FetchGap]) are here; the driver does the HTTP.
 */
class SignalingSession(token: String, val settings: Settings = Settings()) {
    data class Settings(
        val path: String = "/v1/ws",
        val lifecycle: ConnectionLifecycle.Settings = ConnectionLifecycle.Settings(),
        val chatAckTimeoutMs: Long = 10_000,
        /** Sends of one chat before it fails with `timeout`; the resend after a reconnect is free. */
        val chatMaxSends: Int = 3,
        /** `setTyping(true)` turns itself off after this long without another. */
        val typingTimeoutMs: Long = 3_000,
        /**
         * Interval of keep-alive `ping` frames while connected; null uses `welcome.ping_interval_ms`
         * (25 s when absent), 0 disables. A `ping` still unanswered at the next tick means the
         * connection is dead (half-open TCP): the socket is dropped (close 4000) and reconnected.
         */
        val pingIntervalMs: Long? = null,
        /** How long `performRpc` waits for the callee's `rpc-ack` (or the call's timeout if shorter). */
        val rpcAckTimeoutMs: Long = 7_000,
        /** Largest RPC payload sent or answered, in UTF-8 bytes; keep it at or below the server's `rpc_max_payload_bytes`. */
        val rpcMaxPayloadBytes: Int = 15_360
    )

    companion object {
        /** Page size of the REST gap fill, as in the browser and Swift SDKs. */
        const val GAP_PAGE_LIMIT = 200
        /** Frame types of the acked chat operations: one ledger, one client_id namespace. */
        val CHAT_OPERATION_TYPES = setOf("chat", "chat-edit", "chat-delete", "chat-react")
    }

    private val lifecycle = ConnectionLifecycle(token, settings.lifecycle)
    /** Open RPC calls and the registered methods (Rpc.kt). */
    private val rpc = RpcLedger(settings.rpcAckTimeoutMs, settings.rpcMaxPayloadBytes)
    private var out = ArrayList<SessionAction>()

    var state: ConnectionState = ConnectionState.IDLE
        private set
    var peerId: String? = null
        private set
    var peers: List<PeerInfo> = emptyList()
        private set
    /** The highest chat seq seen; a reconnect resumes from here. */
    var lastSeq: Long = 0
        private set

    private var connectWaiter: Long? = null
    private val disconnectWaiters = ArrayList<Long>()
    private var typingOn = false

    // chat bookkeeping (the Swift SDK's ChatLedger)
    /**
     * An acked chat operation waiting for its `chat-ack`: frame [type] with payload
     * `{client_id, ...body}` ([body] in wire order). Chats, edits, deletes and reactions share the
     * server's client_id namespace, the ack and the resend rules, so one ledger holds them all.
     */
    private class PendingChat(val type: String, val body: JSONObject, val waiter: Long, var sends: Int = 0)
    private val pending = LinkedHashMap<String, PendingChat>()
    /** The pending operation of each frame type sent last: an `error` frame names no client_id. */
    private val lastSent = HashMap<String, String>()
    private val seenSeqs = HashSet<Long>()
    private var seenFloor = 0L
    private var resumable = false
    private var replayRemaining = 0
    /** The resumed welcome said `recovered: false`: fill the gap over REST once the replay is in. */
    private var gapFillPending = false
    /** Where the REST gap fill has got to (null: no gap open); reconnects resume from here. */
    private var gapCursor: Long? = null
    /** The socket whose gap fill runs; pages of another are stale. */
    private var gapGeneration: Long? = null
    /** Highest seq delivered by the current socket's resume replay. */
    private var replayHigh = 0L

    // keep-alive: the interval while connected (null: stopped) and whether a ping is unanswered
    private var pingEveryMs: Long? = null
    private var awaitingPong = false

    // relays to peers in their reconnect grace
    private val held = LinkedHashMap<String, MutableList<String>>()
    private class Sent(val to: String, val type: String, val text: String)
    /** Addressed frames sent lately: a 480 names only `payload.type`, so it is matched here. */
    private val recentAddressed = ArrayList<Sent>()

    fun handle(input: SessionInput): List<SessionAction> {
        out = ArrayList()
        when (input) {
            is SessionInput.Connect -> connect(input)
            is SessionInput.Disconnect -> disconnect(input.waiter)
            is SessionInput.SendChat -> sendChat(input)
            is SessionInput.EditChat -> {
                val body = JSONObject().put("target", input.target).put("text", input.text)
                if (input.meta != null) body.put("meta", JSONObject(input.meta))
                addPending(input.waiter, input.clientId, "chat-edit", body)
            }
            is SessionInput.DeleteChat -> addPending(input.waiter, input.clientId, "chat-delete", JSONObject().put("target", input.target))
            is SessionInput.React -> {
                val body = JSONObject().put("target", input.target).put("key", input.key)
                if (input.remove) body.put("remove", true)
                addPending(input.waiter, input.clientId, "chat-react", body)
            }
            is SessionInput.SendSignal -> if (requireConnected()) relay(input.type, input.to, JSONObject(input.payload))
            is SessionInput.SendData -> if (requireConnected()) {
                val payload = input.payload?.let { org.json.JSONTokener(it).nextValue() }
                if (input.to != null) relay("data", input.to, payload) else send(frameText("data", null, payload))
            }
            is SessionInput.SetTyping -> setTyping(input.typing)
            is SessionInput.MarkRead -> if (requireConnected()) send(frameText("read", null, JSONObject().put("seq", input.seq)))
            is SessionInput.Ping -> if (requireConnected()) send(frameText("ping"))
            is SessionInput.SendStats -> if (!input.sample.isEmpty && requireConnected()) send(frameText("stats", null, input.sample.payload()))
            is SessionInput.SocketText -> if (lifecycle.isCurrent(input.socket)) receive(input.text)
            is SessionInput.SocketClosed -> run(ConnectionLifecycle.Input.SocketClosed(input.socket, input.code, input.reason))
            is SessionInput.SocketFailed -> run(ConnectionLifecycle.Input.SocketFailed(input.socket, input.error))
            is SessionInput.TimerFired -> timerFired(input.timer)
            is SessionInput.TokenRefreshed -> run(ConnectionLifecycle.Input.TokenRefreshed(input.attempt, input.token, input.error))
            is SessionInput.GapPage -> gapPage(input.generation, input.page)
            is SessionInput.PerformRpc -> out.addAll(rpc.perform(input.id, input.to, input.method, input.payload, input.timeoutMs,
                input.waiter, state == ConnectionState.CONNECTED))
            // A response while the socket is down is lost: the caller's timeout covers it.
            is SessionInput.RpcHandled -> if (state == ConnectionState.CONNECTED) out.addAll(rpc.handled(input.data, input.result, input.error))
            is SessionInput.RegisterRpcMethod -> rpc.register(input.method)
            is SessionInput.UnregisterRpcMethod -> rpc.unregister(input.method)
            is SessionInput.GapFailed -> if (input.generation == gapGeneration) {
                // Reported once; a reconnect resumes from the gap's cursor.
                gapGeneration = null
                emit(CallingEvent.Error(input.error))
            }
        }
        return out
    }

    /** The room of the last `welcome` (null before the first). */
    var roomId: String? = null
        private set

    /** The socket whose frames count now (tests feed frames on it). */
    internal fun currentSocketForTest(): Long = lifecycle.currentSocket ?: lifecycle.socket

    private fun requireConnected(): Boolean {
        if (state == ConnectionState.CONNECTED) return true
        emit(CallingEvent.Error(CallingError.notConnected()))
        return false
    }

    private fun emit(event: CallingEvent) { out.add(SessionAction.Emit(event)) }
    private fun send(text: String) { out.add(SessionAction.Send(text)) }

    private fun setState(new: ConnectionState) {
        if (new == state) return
        state = new
        emit(CallingEvent.StateChanged(new))
    }

    // --- connecting -------------------------------------------------------------------------

    private fun connect(input: SessionInput.Connect) {
        if (state != ConnectionState.IDLE && state != ConnectionState.ENDED && state != ConnectionState.FAILED) {
            out.add(SessionAction.Resolve(input.waiter, null, CallingError.invalidState("connect() while $state")))
            return
        }
        connectWaiter = input.waiter
        run(ConnectionLifecycle.Input.Connect(input.token))
    }

    private fun disconnect(waiter: Long) {
        if (state == ConnectionState.IDLE || state == ConnectionState.ENDED || state == ConnectionState.FAILED) {
            out.add(SessionAction.Resolve(waiter, Unit, null))
            return
        }
        disconnectWaiters.add(waiter)
        // Without `leave` the server would hold the seat for its reconnect grace and tell the room
        // we are reconnecting (docs/protocol.md "leave").
        if (state == ConnectionState.CONNECTED) send(frameText("leave"))
        run(ConnectionLifecycle.Input.Disconnect)
    }

    private fun run(input: ConnectionLifecycle.Input) {
        for (action in lifecycle.handle(input)) {
            when (action) {
                is ConnectionLifecycle.Action.OpenSocket -> {
                    replayHigh = 0
                    val from = minOf(lastSeq, gapCursor ?: Long.MAX_VALUE)
                    val path = if (resumable) "${settings.path}?last_seq=$from" else settings.path
                    out.add(SessionAction.OpenSocket(action.id, path, action.token))
                }
                is ConnectionLifecycle.Action.CloseSocket -> out.add(SessionAction.CloseSocket(action.code, action.reason))
                is ConnectionLifecycle.Action.AbortSocket -> out.add(SessionAction.AbortSocket)
                is ConnectionLifecycle.Action.Arm -> out.add(SessionAction.Arm(SessionTimer.Lifecycle(action.timer), action.afterMs))
                is ConnectionLifecycle.Action.Cancel -> out.add(SessionAction.Cancel(SessionTimer.Lifecycle(action.timer)))
                is ConnectionLifecycle.Action.RefreshToken -> out.add(SessionAction.RefreshToken(action.attempt))
                is ConnectionLifecycle.Action.Notify -> notice(action.notice)
            }
        }
    }

    private fun notice(notice: ConnectionLifecycle.Notice) {
        when (notice) {
            is ConnectionLifecycle.Notice.Connecting -> setState(ConnectionState.CONNECTING)
            is ConnectionLifecycle.Notice.SocketDown -> {
                replayRemaining = 0
                stopKeepAlive()
                recentAddressed.clear()
                if (typingOn) out.add(SessionAction.Cancel(SessionTimer.Typing))
                typingOn = false
            }
            is ConnectionLifecycle.Notice.Lost -> emit(CallingEvent.Disconnected(notice.error))
            is ConnectionLifecycle.Notice.Retrying -> {
                setState(ConnectionState.RECONNECTING)
                emit(CallingEvent.Reconnecting(notice.attempt))
            }
            is ConnectionLifecycle.Notice.Failed -> {
                endSession(notice.error)
                setState(ConnectionState.FAILED)
                connectWaiter?.let { out.add(SessionAction.Resolve(it, null, notice.error)) }
                connectWaiter = null
            }
            is ConnectionLifecycle.Notice.Closed -> {
                endSession(CallingError.notConnected())
                connectWaiter?.let { out.add(SessionAction.Resolve(it, null, CallingError.notConnected())) }
                connectWaiter = null
                emit(CallingEvent.Disconnected(null))
                setState(ConnectionState.ENDED)
                for (waiter in disconnectWaiters) out.add(SessionAction.Resolve(waiter, Unit, null))
                disconnectWaiters.clear()
            }
        }
    }

    /** The session is over: pending chats throw [error], held relays are dropped. */
    private fun endSession(error: CallingError) {
        out.addAll(rpc.failAll(error.message ?: "disconnected"))
        for ((id, chat) in pending) {
            out.add(SessionAction.Cancel(SessionTimer.ChatAck(id)))
            out.add(SessionAction.Resolve(chat.waiter, null, error))
        }
        pending.clear()
        lastSent.clear()
        held.clear()
    }

    private fun timerFired(timer: SessionTimer) {
        when (timer) {
            is SessionTimer.Lifecycle -> run(ConnectionLifecycle.Input.TimerFired(timer.timer))
            is SessionTimer.RpcAck, is SessionTimer.RpcResponse -> out.addAll(rpc.timedOut(timer))
            is SessionTimer.ChatAck -> {
                val chat = pending[timer.clientId] ?: return
                if (chat.sends >= settings.chatMaxSends) {
                    resolveChat(timer.clientId, null, CallingError.timeout("chat-ack for ${timer.clientId} after ${chat.sends} sends"))
                } else if (state == ConnectionState.CONNECTED) {
                    transmit(timer.clientId, true)
                }
                // Not connected: the next welcome resends it.
            }
            is SessionTimer.Typing -> if (typingOn) {
                typingOn = false
                if (state == ConnectionState.CONNECTED) send(frameText("typing", null, JSONObject().put("typing", false)))
            }
            is SessionTimer.Ping -> {
                val every = pingEveryMs ?: return
                if (state != ConnectionState.CONNECTED) return
                if (awaitingPong) {
                    // The previous ping was never answered (half-open TCP): drop the socket (4000)
                    // and reconnect as after any drop.
                    run(ConnectionLifecycle.Input.Dropped(CallingError.closed(null, "no pong within $every ms")))
                    return
                }
                awaitingPong = true
                send(frameText("ping"))
                out.add(SessionAction.Arm(SessionTimer.Ping, every))
            }
        }
    }

    // --- inbound frames -----------------------------------------------------------------------

    private fun receive(text: String) {
        val json = try { JSONObject(text) } catch (e: Exception) { return }
        val type = json.optString("type", "")
        val payload = json.optJSONObject("payload")
        val from = stringOrNull(json, "from")
        when (type) {
            "welcome" -> welcome(payload ?: JSONObject())
            "error" -> error(json, payload)
            "chat-ack" -> chatAck(json, payload)
            "chat" -> {
                val message = chatMessage(payload, from) ?: return
                receiveSocketSeq(message.seq) { receiveChat(message) }
            }
            "chat-edit", "chat-delete", "chat-react" -> {
                // Operations have seqs of their own: the same dedupe, and the replay counts them.
                val event = chatOperationOf(type, payload, from) ?: return
                receiveSocketSeq(payload!!.getLong("seq")) { receiveOperation(event, payload) }
            }
            "typing" -> if (from != null && payload != null && payload.has("typing")) emit(CallingEvent.Typing(from, payload.optBoolean("typing")))
            "read" -> if (from != null && payload != null && payload.has("seq")) emit(CallingEvent.Read(from, payload.optLong("seq")))
            "peer-joined" -> {
                val info = PeerInfo.from(payload) ?: return
                peers = peers.filter { it.peerId != info.peerId } + info
                emit(CallingEvent.PeerJoined(info))
            }
            "peer-left" -> {
                val id = payload?.let { stringOrNull(it, "peer_id") } ?: from ?: return
                peers = peers.filter { it.peerId != id }
                held.remove(id)
                out.addAll(rpc.peerLeft(id))
                emit(CallingEvent.PeerLeft(id))
            }
            "peer-reconnecting" -> {
                val id = payload?.let { stringOrNull(it, "peer_id") } ?: from ?: return
                if (!held.containsKey(id)) held[id] = ArrayList()
                peers = peers.map { if (it.peerId == id) it.copy(reconnecting = true) else it }
                emit(CallingEvent.PeerReconnecting(id))
            }
            "peer-resumed" -> {
                val id = payload?.let { stringOrNull(it, "peer_id") } ?: from ?: return
                peers = peers.map { if (it.peerId == id) it.copy(reconnecting = false) else it }
                emit(CallingEvent.PeerResumed(id))
                release(id)
            }
            "offer", "answer", "candidate" -> if (from != null && payload != null) emit(CallingEvent.Signal(type, from, payload.toString()))
            "data" -> if (from != null) {
                val raw = if (json.has("payload") && !json.isNull("payload")) json.get("payload").toString() else null
                emit(CallingEvent.Data(from, raw))
            }
            "rpc-request" -> if (payload != null) out.addAll(rpc.request(from, payload))
            "rpc-ack" -> payload?.let { stringOrNull(it, "id") }?.let { out.addAll(rpc.ack(from, it)) }
            "rpc-response" -> if (payload != null) out.addAll(rpc.response(from, payload))
            "meter" -> emit(CallingEvent.Meter(payload?.optString("state", "") ?: "", payload?.toString() ?: "null"))
            "pong" -> {
                awaitingPong = false
                emit(CallingEvent.Pong)
            }
            else -> Unit // newer than this SDK
        }
    }

    private fun welcome(payload: JSONObject) {
        run(ConnectionLifecycle.Input.Established)
        val resumed = payload.has("recovered")
        val welcome = Welcome(
            peerId = payload.optString("peer_id", ""), roomId = payload.optString("room_id", ""),
            callId = stringOrNull(payload, "call_id"), role = payload.optString("role", "peer"),
            name = stringOrNull(payload, "name"), peers = peersOf(payload.optJSONArray("peers")),
            lastSeq = payload.optLong("last_seq", 0), readSeq = payload.optLong("read_seq", 0),
            unread = payload.optLong("unread", 0), resumed = resumed,
            recovered = payload.optBoolean("recovered", true), replayCount = payload.optInt("replay_count", 0))
        peerId = welcome.peerId
        roomId = welcome.roomId
        replayRemaining = if (resumed) welcome.replayCount else 0
        gapFillPending = resumed && !welcome.recovered
        if (!resumed) {
            // A fresh join: the room's messages so far are history, not live events.
            if (welcome.lastSeq > lastSeq) lastSeq = welcome.lastSeq
            seenFloor = maxOf(seenFloor, welcome.lastSeq)
        }
        resumable = true
        if (resumed) {
            // The roster may have changed while we were away: report the difference.
            val after = welcome.peers.map { it.peerId }.toSet()
            val before = peers.map { it.peerId }.toSet()
            for (gone in peers) if (gone.peerId !in after) {
                held.remove(gone.peerId)
                out.addAll(rpc.peerLeft(gone.peerId))
                emit(CallingEvent.PeerLeft(gone.peerId))
            }
            for (joined in welcome.peers) if (joined.peerId !in before) emit(CallingEvent.PeerJoined(joined))
        }
        peers = welcome.peers
        setState(ConnectionState.CONNECTED)
        emit(CallingEvent.Connected(welcome))
        connectWaiter?.let { out.add(SessionAction.Resolve(it, welcome, null)) }
        connectWaiter = null
        // A held peer listed without `reconnecting` came back while we were away: no
        // peer-resumed will come, send its frames now; one listed with it stays held.
        for (peer in welcome.peers) {
            if (peer.reconnecting) { if (!held.containsKey(peer.peerId)) held[peer.peerId] = ArrayList() } else release(peer.peerId)
        }
        // Everything not acked yet, oldest first, with the same client_ids (free resends).
        for (id in pending.keys.toList()) transmit(id, false)
        startKeepAlive(if (payload.has("ping_interval_ms")) payload.optLong("ping_interval_ms", 25_000) else 25_000)
        // A capped replay with nothing replayed: the gap fill starts now, else after the replay.
        if (gapFillPending && replayRemaining == 0) startGapFill()
    }

    // --- keep-alive ---------------------------------------------------------------------------

    private fun startKeepAlive(serverIntervalMs: Long) {
        val every = settings.pingIntervalMs ?: serverIntervalMs
        if (every > 0 && pingEveryMs == null) {
            pingEveryMs = every
            awaitingPong = false
            out.add(SessionAction.Arm(SessionTimer.Ping, every))
        }
    }

    private fun stopKeepAlive() {
        if (pingEveryMs != null) out.add(SessionAction.Cancel(SessionTimer.Ping))
        pingEveryMs = null
        awaitingPong = false
    }

    // --- REST gap fill ------------------------------------------------------------------------

    /**
     * Pages the history after the replay over REST, each message through the same seq dedupe as
     * live frames (a live message may come before older gap messages; each seq is reported once).
     */
    private fun startGapFill() {
        val generation = lifecycle.currentSocket ?: return
        gapFillPending = false
        // After a reconnect in the middle of a gap, the replay covered gapCursor...replayHigh.
        val since = gapCursor?.let { maxOf(it, replayHigh) } ?: lastSeq
        gapCursor = since
        gapGeneration = generation
        out.add(SessionAction.FetchGap(since, generation))
    }

    private fun gapPage(generation: Long, page: MessagesPage) {
        val cursor = gapCursor ?: return
        if (generation != gapGeneration || generation != lifecycle.currentSocket) return
        for (message in page.messages) receiveChat(message)
        if (page.hasMore && page.nextSinceSeq > cursor) {
            gapCursor = page.nextSinceSeq
            out.add(SessionAction.FetchGap(page.nextSinceSeq, generation))
        } else {
            gapCursor = null
            gapGeneration = null
        }
    }

    private fun error(json: JSONObject, payload: JSONObject?) {
        val wire = json.optJSONObject("error")
        val frameType = payload?.let { stringOrNull(it, "type") }
        val error = CallingError.server(wire?.optInt("code", 0) ?: 0, wire?.optString("message", "") ?: "", frameType)
        if (!lifecycle.isEstablished && connectWaiter != null) {
            // The first connect refused before welcome: connect() throws it, nothing is retried.
            emit(CallingEvent.Error(error))
            run(ConnectionLifecycle.Input.Refused(error))
            return
        }
        // A refused `rpc-request` of ours fails its call (the error names the request id).
        rpc.refused(error.serverCode ?: 0, wire?.optString("message", "") ?: "", payload)?.let { out.addAll(it); return }
        if (error.serverCode == 480 && frameType != null) {
            val index = recentAddressed.indexOfFirst { it.type == frameType && held.containsKey(it.to) }
            if (index >= 0) {
                // Sent just before the peer's grace began: sent again on peer-resumed, dropped on peer-left.
                val sent = recentAddressed.removeAt(index)
                held.getValue(sent.to).add(sent.text)
                return
            }
        }
        emit(CallingEvent.Error(error))
        // A refused chat frame (not a refused chat, which comes as a failed chat-ack) would
        // otherwise wait out every ack timeout; a temporary refusal (429) is retried by the timer.
        if (frameType in CHAT_OPERATION_TYPES && !error.isRetryable) lastSent[frameType]?.let { resolveChat(it, null, error) }
    }

    // --- relays -------------------------------------------------------------------------------

    private fun relay(type: String, to: String, payload: Any?) {
        val text = frameText(type, to, payload)
        val queue = held[to]
        if (queue != null) { queue.add(text); return }
        send(text)
        recentAddressed.add(Sent(to, type, text))
        if (recentAddressed.size > 64) recentAddressed.removeAt(0)
    }

    private fun release(peer: String) {
        val queue = held.remove(peer) ?: return
        if (state != ConnectionState.CONNECTED) return
        for (text in queue) send(text)
    }

    // --- chat ---------------------------------------------------------------------------------

    private fun sendChat(input: SessionInput.SendChat) {
        val body = JSONObject().put("text", input.text)
        if (input.meta != null) body.put("meta", JSONObject(input.meta))
        if (input.replyTo != null) body.put("reply_to", input.replyTo)
        addPending(input.waiter, input.clientId, "chat", body)
    }

    /** A seq'd frame from the socket: counts against a resume's replay, then the gap fill may start. */
    private inline fun receiveSocketSeq(seq: Long, deliver: () -> Unit) {
        val replayed = replayRemaining > 0
        if (replayed) replayHigh = maxOf(replayHigh, seq)
        deliver()
        if (replayed) {
            replayRemaining -= 1
            if (replayRemaining == 0 && gapFillPending) startGapFill()
        }
    }

    private fun receiveOperation(event: CallingEvent, payload: JSONObject) {
        val seq = payload.getLong("seq")
        if (seq <= seenFloor || seq in seenSeqs) return // replay overlapping live frames
        markSeen(seq)
        val from = when (event) {
            is CallingEvent.ChatEdited -> event.edit.from
            is CallingEvent.ChatDeleted -> event.deletion.from
            is CallingEvent.ChatReactionChanged -> event.reaction.from
            else -> null
        }
        val clientId = payload.optString("client_id", "")
        if (from == peerId && pending.containsKey(clientId)) {
            // Our own operation in a resume replay: committed, its ack was lost with the socket.
            resolveChat(clientId, ChatAck(clientId, seq, payload.optLong("ts", 0)), null)
            return
        }
        emit(event)
    }

    /** Any acked chat operation: checked, queued, and sent now when connected (else after the next welcome). */
    private fun addPending(waiter: Long, clientId: String, type: String, body: JSONObject) {
        if (state != ConnectionState.CONNECTED && state != ConnectionState.CONNECTING && state != ConnectionState.RECONNECTING) {
            out.add(SessionAction.Resolve(waiter, null, CallingError.notConnected()))
            return
        }
        if (clientId.isEmpty() || clientId.toByteArray(Charsets.UTF_8).size > 128) {
            out.add(SessionAction.Resolve(waiter, null, CallingError.server(422, "client_id must be 1-128 bytes")))
            return
        }
        if (pending.containsKey(clientId)) {
            out.add(SessionAction.Resolve(waiter, null, CallingError.invalidState("client_id $clientId is already pending")))
            return
        }
        pending[clientId] = PendingChat(type, body, waiter)
        if (state == ConnectionState.CONNECTED) transmit(clientId, true)
    }

    private fun transmit(id: String, counts: Boolean) {
        val chat = pending[id] ?: return
        if (counts) chat.sends += 1
        val payload = JSONObject().put("client_id", id)
        for (key in chat.body.keys()) payload.put(key, chat.body.get(key))
        send(frameText(chat.type, null, payload))
        lastSent[chat.type] = id
        out.add(SessionAction.Arm(SessionTimer.ChatAck(id), settings.chatAckTimeoutMs))
    }

    private fun chatAck(json: JSONObject, payload: JSONObject?) {
        val id = payload?.let { stringOrNull(it, "client_id") } ?: return
        val wire = json.optJSONObject("error")
        if (wire != null) {
            val error = CallingError.server(wire.optInt("code", 0), wire.optString("message", ""), pending[id]?.type ?: "chat")
            emit(CallingEvent.Error(error))
            if (!pending.containsKey(id)) return
            // 503: not stored; the ack timer resends the same client_id a little later.
            if (error.isRetryable) out.add(SessionAction.Arm(SessionTimer.ChatAck(id), minOf(1_000L, settings.chatAckTimeoutMs)))
            else resolveChat(id, null, error)
            return
        }
        if (!payload.has("seq")) return
        val seq = payload.getLong("seq")
        markSeen(seq)
        resolveChat(id, ChatAck(id, seq, payload.optLong("ts", 0)), null)
    }

    private fun receiveChat(message: ChatMessage) {
        if (message.seq <= seenFloor || message.seq in seenSeqs) return // replay overlapping live frames
        markSeen(message.seq)
        if (message.from == peerId && pending.containsKey(message.clientId)) {
            // Our own message in a resume replay: committed, its ack was lost with the socket.
            resolveChat(message.clientId, ChatAck(message.clientId, message.seq, message.ts), null)
            return
        }
        emit(CallingEvent.Chat(message))
    }

    private fun markSeen(seq: Long) {
        seenSeqs.add(seq)
        if (seq > lastSeq) lastSeq = seq
        if (seenSeqs.size > 4096) {
            // Never above an open gap: its messages are still to come.
            val floor = minOf(lastSeq - 1024, gapCursor ?: Long.MAX_VALUE)
            seenSeqs.removeAll { it <= floor }
            seenFloor = maxOf(seenFloor, floor)
        }
    }

    private fun resolveChat(id: String, ack: ChatAck?, error: CallingError?) {
        val chat = pending.remove(id) ?: return
        if (lastSent[chat.type] == id) lastSent.remove(chat.type)
        out.add(SessionAction.Cancel(SessionTimer.ChatAck(id)))
        out.add(SessionAction.Resolve(chat.waiter, ack, error))
    }

    private fun chatMessage(payload: JSONObject?, from: String?): ChatMessage? = chatMessageOf(payload, from)

    // --- typing -------------------------------------------------------------------------------

    private fun setTyping(typing: Boolean) {
        out.add(SessionAction.Cancel(SessionTimer.Typing))
        if (state != ConnectionState.CONNECTED) return
        if (typing) {
            if (!typingOn) send(frameText("typing", null, JSONObject().put("typing", true)))
            typingOn = true
            out.add(SessionAction.Arm(SessionTimer.Typing, settings.typingTimeoutMs))
        } else if (typingOn) {
            typingOn = false
            send(frameText("typing", null, JSONObject().put("typing", false)))
        }
    }
}
