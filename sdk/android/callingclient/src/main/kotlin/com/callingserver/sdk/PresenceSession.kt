package com.callingserver.sdk

import org.json.JSONArray
import org.json.JSONObject

/** An agent as the presence channel lists it (docs/protocol.md "Presence frames"). */
data class AgentPresence(val agentId: String, val status: String, val note: String?, val queues: List<String>, val updatedAt: Long) {
    companion object {
        fun from(json: JSONObject?): AgentPresence? {
            val id = json?.let { stringOrNull(it, "agent_id") } ?: return null
            return AgentPresence(id, json.optString("status", ""), stringOrNull(json, "note"),
                stringsOf(json.optJSONArray("queues")), json.optLong("updated_at", 0))
        }
    }
}

/** The `connected` frame: who we are, every agent (by id) and, for a dashboard, the ringing requests (JSON text). */
data class PresenceSnapshot(
    val peerId: String,
    val role: String,
    val agents: Map<String, AgentPresence>,
    val requests: Map<String, String>,
    val serverTime: Long
)

/** What a presence session reports, in the order the frames arrived. Payloads are JSON text. */
sealed class PresenceEvent {
    data class Connected(val snapshot: PresenceSnapshot) : PresenceEvent()
    data class StateChanged(val state: ConnectionState) : PresenceEvent()
    /** An agent's status changed (also our own, and the server's own changes such as `busy` on accept). */
    data class Status(val agent: AgentPresence) : PresenceEvent()
    /** A ringing request: an offer to an agent, the ack to a caller, the supervisor view to a dashboard. */
    data class Request(val requestId: String, val raw: String) : PresenceEvent()
    data class Accepted(val requestId: String, val raw: String) : PresenceEvent()
    data class Ended(val requestId: String, val reason: String, val raw: String) : PresenceEvent()
    data class Error(val error: CallingError, val requestId: String?) : PresenceEvent()
    data class Disconnected(val error: CallingError?) : PresenceEvent()
    data class Reconnecting(val attempt: Int) : PresenceEvent()
    object Pong : PresenceEvent()
}

/** What the presence session asks of its driver, in order. */
sealed class PresenceAction {
    data class OpenSocket(val id: Long, val path: String, val token: String) : PresenceAction()
    data class CloseSocket(val code: Int, val reason: String) : PresenceAction()
    /** Drop the current socket: close 4000 `abandoned`. */
    object AbortSocket : PresenceAction() { override fun toString() = "AbortSocket" }
    data class Send(val text: String) : PresenceAction()
    data class Arm(val timer: ConnectionLifecycle.Timer, val afterMs: Long) : PresenceAction()
    data class Cancel(val timer: ConnectionLifecycle.Timer) : PresenceAction()
    /** Complete the app's call [waiter] with [value] (a [PresenceSnapshot], Unit) or [error]. */
    data class Resolve(val waiter: Long, val value: Any?, val error: CallingError?) : PresenceAction()
    data class Emit(val event: PresenceEvent) : PresenceAction()
    data class RefreshToken(val attempt: Int) : PresenceAction()
}

/** The app's presence calls, socket events and timers. */
sealed class PresenceInput {
    data class Connect(val waiter: Long, val token: String? = null) : PresenceInput()
    data class Disconnect(val waiter: Long) : PresenceInput()
    /** [note] and [queues] null: left as the server has them. */
    data class SetStatus(val status: String, val note: String? = null, val queues: List<String>? = null) : PresenceInput()
    /** [metadata] is a JSON object's text. Exactly one of [agentId] and [queue]. */
    data class Request(val agentId: String?, val queue: String?, val metadata: String? = null) : PresenceInput()
    data class Accept(val requestId: String) : PresenceInput()
    data class Decline(val requestId: String) : PresenceInput()
    data class Cancel(val requestId: String) : PresenceInput()
    /**
     * Agent: accept ([accept]) or decline the request [requestId] named by a push notification,
     * connecting first when not connected; settles [waiter] with the [AcceptedCall] (null for a
     * decline) or the error that ended it.
     */
    data class AnswerRequest(val waiter: Long, val requestId: String, val accept: Boolean) : PresenceInput()
    object Ping : PresenceInput()
    data class SocketText(val socket: Long, val text: String) : PresenceInput()
    data class SocketClosed(val socket: Long, val code: Int?, val reason: String) : PresenceInput()
    data class SocketFailed(val socket: Long, val error: CallingError) : PresenceInput()
    data class TimerFired(val timer: ConnectionLifecycle.Timer) : PresenceInput()
    data class TokenRefreshed(val attempt: Int, val token: String?, val error: CallingError?) : PresenceInput()
}

/**
 * The status an agent last had: what the app set with `setStatus`, then what the server's `status`
 * frames about the agent said (also the server's own changes, such as `busy` on `accept`). A field
 * never known ([noteKnown] false, [queues] null) is left as the server has it. The Swift SDK's
 * `AgentStatusMemory` and the browser SDK's `_AgentStatusMemory`.
 */
data class AgentStatusMemory(val status: String, val note: String?, val noteKnown: Boolean, val queues: List<String>?) {
    /** Whether the server's view of the agent already is this. */
    fun matches(agent: AgentPresence?): Boolean {
        if (agent == null || agent.status != status) return false
        if (noteKnown && note != agent.note) return false
        if (queues != null && queues.sorted() != agent.queues.sorted()) return false
        return true
    }

    /** The `status` frame that sets it. */
    fun frame(): String {
        val payload = JSONObject().put("status", status)
        if (noteKnown) payload.put("note", note ?: JSONObject.NULL)
        if (queues != null) payload.put("queues", JSONArray(queues))
        return frameText("status", null, payload)
    }
}

/**
 * The presence client's decisions, pure like [SignalingSession]: the snapshot, the agent's status
 * applied again after a reconnect (a restarted server forgot it; one that kept it within
 * `presence_grace_seconds` is left alone), and the events. Connect and its timeout, reconnect with
 * backoff, token refresh on 4401, terminal closes and the close grace are [ConnectionLifecycle]'s.
 * It mirrors the Swift SDK's `PresenceSession` and the browser SDK's `PresenceClient`.
 */
class PresenceSession(token: String, val settings: Settings = Settings()) {
    data class Settings(
        val path: String = "/v1/presence",
        /** An agent's queues, sent as the `queues` query parameter; null: the token's. */
        val queues: List<String>? = null,
        val lifecycle: ConnectionLifecycle.Settings = ConnectionLifecycle.Settings()
    )

    private val lifecycle = ConnectionLifecycle(token, settings.lifecycle)
    private var out = ArrayList<PresenceAction>()
    private var connectWaiter: Long? = null
    private val disconnectWaiters = ArrayList<Long>()
    private class PendingAnswer(val waiter: Long, val accept: Boolean, var sent: Boolean = false)
    /** Answers by request id (a push's), sent once connected, settled by `accepted`, `ended` or `error`. */
    private val answers = LinkedHashMap<String, PendingAnswer>()

    var state: ConnectionState = ConnectionState.IDLE
        private set
    /** The last snapshot, kept up to date by `status`, `request`, `accepted` and `ended` frames. */
    var snapshot: PresenceSnapshot? = null
        private set
    /** The agent's remembered status; null until set or heard, and after `disconnect()`. */
    var agentStatus: AgentStatusMemory? = null
        private set

    /** The socket whose frames count now (tests feed frames on it). */
    internal fun currentSocketForTest(): Long = lifecycle.currentSocket ?: lifecycle.socket

    fun handle(input: PresenceInput): List<PresenceAction> {
        out = ArrayList()
        when (input) {
            is PresenceInput.Connect -> {
                if (state != ConnectionState.IDLE && state != ConnectionState.ENDED && state != ConnectionState.FAILED) {
                    out.add(PresenceAction.Resolve(input.waiter, null, CallingError.invalidState("connect() while $state")))
                } else {
                    connectWaiter = input.waiter
                    run(ConnectionLifecycle.Input.Connect(input.token))
                }
            }
            is PresenceInput.Disconnect -> {
                agentStatus = null
                if (state == ConnectionState.IDLE || state == ConnectionState.ENDED || state == ConnectionState.FAILED) {
                    out.add(PresenceAction.Resolve(input.waiter, Unit, null))
                } else {
                    disconnectWaiters.add(input.waiter)
                    run(ConnectionLifecycle.Input.Disconnect)
                }
            }
            is PresenceInput.SetStatus -> if (requireConnected()) {
                val before = agentStatus
                agentStatus = AgentStatusMemory(input.status,
                    if (input.note != null) input.note else before?.note,
                    input.note != null || before?.noteKnown == true,
                    input.queues ?: before?.queues)
                // The frame says only what the app said: a note or queues left out stay as they are.
                val payload = JSONObject().put("status", input.status)
                if (input.note != null) payload.put("note", input.note)
                if (input.queues != null) payload.put("queues", JSONArray(input.queues))
                send(frameText("status", null, payload))
            }
            is PresenceInput.Request -> if (requireConnected()) {
                if ((input.agentId == null) == (input.queue == null)) {
                    emit(PresenceEvent.Error(CallingError("invalid_argument", "request needs exactly one of agentId and queue"), null))
                } else {
                    val payload = if (input.agentId != null) JSONObject().put("agent_id", input.agentId) else JSONObject().put("queue", input.queue)
                    if (input.metadata != null) payload.put("metadata", JSONObject(input.metadata))
                    send(frameText("request", null, payload))
                }
            }
            is PresenceInput.Accept -> requestFrame("accept", input.requestId)
            is PresenceInput.Decline -> requestFrame("decline", input.requestId)
            is PresenceInput.Cancel -> requestFrame("cancel", input.requestId)
            is PresenceInput.AnswerRequest -> answer(input)
            is PresenceInput.Ping -> if (requireConnected()) send(frameText("ping"))
            is PresenceInput.SocketText -> if (lifecycle.isCurrent(input.socket)) receive(input.text)
            is PresenceInput.SocketClosed -> run(ConnectionLifecycle.Input.SocketClosed(input.socket, input.code, input.reason))
            is PresenceInput.SocketFailed -> run(ConnectionLifecycle.Input.SocketFailed(input.socket, input.error))
            is PresenceInput.TimerFired -> run(ConnectionLifecycle.Input.TimerFired(input.timer))
            is PresenceInput.TokenRefreshed -> run(ConnectionLifecycle.Input.TokenRefreshed(input.attempt, input.token, input.error))
        }
        return out
    }

    private fun answer(input: PresenceInput.AnswerRequest) {
        if (input.requestId.isEmpty()) {
            out.add(PresenceAction.Resolve(input.waiter, null, CallingError("invalid_argument", "requestId is required")))
            return
        }
        answers.remove(input.requestId)?.let {
            out.add(PresenceAction.Resolve(it.waiter, null, CallingError.invalidState("answered again")))
        }
        val pending = PendingAnswer(input.waiter, input.accept)
        answers[input.requestId] = pending
        when (state) {
            ConnectionState.CONNECTED -> sendAnswer(input.requestId, pending)
            // The agent's app was woken by the push: connect; the server offers the request again
            // on this connection (a takeover of a half-open one) and the answer follows `connected`.
            ConnectionState.IDLE, ConnectionState.ENDED, ConnectionState.FAILED -> run(ConnectionLifecycle.Input.Connect(null))
            else -> Unit // sent once connected
        }
    }

    private fun sendAnswer(requestId: String, pending: PendingAnswer) {
        pending.sent = true
        send(frameText(if (pending.accept) "accept" else "decline", null, JSONObject().put("request_id", requestId)))
    }

    /** Settles the answer to [requestId] on `accepted` ([value]), `ended` or a refusal ([error]). */
    private fun settleAnswer(requestId: String?, value: Any?, error: CallingError?) {
        val pending = answers[requestId ?: return] ?: return
        if (!pending.sent) return
        answers.remove(requestId)
        out.add(PresenceAction.Resolve(pending.waiter, value, error))
    }

    private fun failAnswers(error: CallingError) {
        for (pending in answers.values) out.add(PresenceAction.Resolve(pending.waiter, null, error))
        answers.clear()
    }

    private fun requestFrame(type: String, requestId: String) {
        if (!requireConnected()) return
        if (requestId.isEmpty()) {
            emit(PresenceEvent.Error(CallingError("invalid_argument", "requestId is required"), null))
            return
        }
        send(frameText(type, null, JSONObject().put("request_id", requestId)))
    }

    private fun requireConnected(): Boolean {
        if (state == ConnectionState.CONNECTED) return true
        emit(PresenceEvent.Error(CallingError.notConnected(), null))
        return false
    }

    private fun emit(event: PresenceEvent) { out.add(PresenceAction.Emit(event)) }
    private fun send(text: String) { out.add(PresenceAction.Send(text)) }

    private fun setState(new: ConnectionState) {
        if (new == state) return
        state = new
        emit(PresenceEvent.StateChanged(new))
    }

    private fun run(input: ConnectionLifecycle.Input) {
        for (action in lifecycle.handle(input)) {
            when (action) {
                is ConnectionLifecycle.Action.OpenSocket -> {
                    val queues = settings.queues
                    val path = if (queues == null) settings.path
                        else settings.path + "?queues=" + queues.joinToString(",") { java.net.URLEncoder.encode(it, "UTF-8") }
                    out.add(PresenceAction.OpenSocket(action.id, path, action.token))
                }
                is ConnectionLifecycle.Action.CloseSocket -> out.add(PresenceAction.CloseSocket(action.code, action.reason))
                is ConnectionLifecycle.Action.AbortSocket -> out.add(PresenceAction.AbortSocket)
                is ConnectionLifecycle.Action.Arm -> out.add(PresenceAction.Arm(action.timer, action.afterMs))
                is ConnectionLifecycle.Action.Cancel -> out.add(PresenceAction.Cancel(action.timer))
                is ConnectionLifecycle.Action.RefreshToken -> out.add(PresenceAction.RefreshToken(action.attempt))
                is ConnectionLifecycle.Action.Notify -> notice(action.notice)
            }
        }
    }

    private fun notice(notice: ConnectionLifecycle.Notice) {
        when (notice) {
            is ConnectionLifecycle.Notice.Connecting -> setState(ConnectionState.CONNECTING)
            is ConnectionLifecycle.Notice.SocketDown -> Unit
            is ConnectionLifecycle.Notice.Lost -> emit(PresenceEvent.Disconnected(notice.error))
            is ConnectionLifecycle.Notice.Retrying -> {
                setState(ConnectionState.RECONNECTING)
                emit(PresenceEvent.Reconnecting(notice.attempt))
            }
            is ConnectionLifecycle.Notice.Failed -> {
                setState(ConnectionState.FAILED)
                connectWaiter?.let { out.add(PresenceAction.Resolve(it, null, notice.error)) }
                connectWaiter = null
                failAnswers(notice.error)
            }
            is ConnectionLifecycle.Notice.Closed -> {
                connectWaiter?.let { out.add(PresenceAction.Resolve(it, null, CallingError.notConnected())) }
                connectWaiter = null
                failAnswers(CallingError.notConnected())
                emit(PresenceEvent.Disconnected(null))
                setState(ConnectionState.ENDED)
                for (waiter in disconnectWaiters) out.add(PresenceAction.Resolve(waiter, Unit, null))
                disconnectWaiters.clear()
            }
        }
    }

    private fun receive(text: String) {
        val json = try { JSONObject(text) } catch (e: Exception) { return }
        val payload = json.optJSONObject("payload")
        when (json.optString("type", "")) {
            "connected" -> connected(payload ?: JSONObject())
            "status" -> {
                val agent = AgentPresence.from(payload) ?: return
                snapshot = snapshot?.let { it.copy(agents = it.agents + (agent.agentId to agent)) }
                // The server's word about us (also its own changes, like busy on accept) is what to restore.
                if (agent.agentId == snapshot?.peerId) agentStatus = AgentStatusMemory(agent.status, agent.note, true, agent.queues)
                emit(PresenceEvent.Status(agent))
            }
            "request" -> {
                val id = payload?.let { stringOrNull(it, "request_id") } ?: return
                snapshot = snapshot?.let { it.copy(requests = it.requests + (id to payload.toString())) }
                emit(PresenceEvent.Request(id, payload.toString()))
            }
            "accepted" -> {
                val id = payload?.let { stringOrNull(it, "request_id") } ?: return
                snapshot = snapshot?.let { it.copy(requests = it.requests - id) }
                emit(PresenceEvent.Accepted(id, payload.toString()))
                val pending = answers[id]
                if (pending != null && pending.accept) settleAnswer(id, AcceptedCall.from(payload), null)
            }
            "ended" -> {
                val id = payload?.let { stringOrNull(it, "request_id") } ?: return
                snapshot = snapshot?.let { it.copy(requests = it.requests - id) }
                val reason = payload.optString("reason", "")
                emit(PresenceEvent.Ended(id, reason, payload.toString()))
                val pending = answers[id]
                if (pending != null) {
                    if (!pending.accept && reason == "declined") settleAnswer(id, null, null)
                    else settleAnswer(id, null, CallingError("request_ended", "request $id ended: $reason"))
                }
            }
            "error" -> {
                val wire = json.optJSONObject("error")
                val error = CallingError.server(wire?.optInt("code", 0) ?: 0, wire?.optString("message", "") ?: "",
                    payload?.let { stringOrNull(it, "type") })
                if (!lifecycle.isEstablished && connectWaiter != null) {
                    emit(PresenceEvent.Error(error, null))
                    run(ConnectionLifecycle.Input.Refused(error))
                    return
                }
                val requestId = payload?.let { stringOrNull(it, "request_id") }
                emit(PresenceEvent.Error(error, requestId))
                settleAnswer(requestId, null, error)
            }
            "pong" -> emit(PresenceEvent.Pong)
            else -> Unit // newer than this SDK
        }
    }

    private fun connected(payload: JSONObject) {
        run(ConnectionLifecycle.Input.Established)
        val agents = LinkedHashMap<String, AgentPresence>()
        payload.optJSONArray("agents")?.let { array ->
            for (i in 0 until array.length()) AgentPresence.from(array.optJSONObject(i))?.let { agents[it.agentId] = it }
        }
        val requests = LinkedHashMap<String, String>()
        payload.optJSONArray("requests")?.let { array ->
            for (i in 0 until array.length()) {
                val request = array.optJSONObject(i) ?: continue
                stringOrNull(request, "request_id")?.let { requests[it] = request.toString() }
            }
        }
        val snapshot = PresenceSnapshot(payload.optString("peer_id", ""), payload.optString("role", ""), agents, requests,
            payload.optLong("server_time", 0))
        this.snapshot = snapshot
        setState(ConnectionState.CONNECTED)
        emit(PresenceEvent.Connected(snapshot))
        // A restarted server brings the agent back `available` with the URL's queues: set what the
        // agent had again. Back within presence_grace_seconds the server kept it: nothing to send.
        val memory = agentStatus
        if (memory != null && !memory.matches(agents[snapshot.peerId])) send(memory.frame())
        connectWaiter?.let { out.add(PresenceAction.Resolve(it, snapshot, null)) }
        connectWaiter = null
        // Also an answer sent on a socket that dropped: its `accepted` may be lost; a second accept
        // of a request already accepted is refused with its request_id, which settles it.
        for ((id, pending) in answers) sendAnswer(id, pending)
    }
}

internal fun stringsOf(array: JSONArray?): List<String> {
    if (array == null) return emptyList()
    return (0 until array.length()).mapNotNull { array.opt(it) as? String }
}
