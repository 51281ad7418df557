package com.callingserver.sdk

import org.json.JSONObject

/**
 * Why an RPC call failed (docs/protocol.md "RPC"): one of the codes below, LiveKit's numbers, or
 * one a callee's handler threw. [CallingClient.performRpc] throws it; a handler throws one to send
 * its own code, message and [data] to the caller.
 */
class RpcError(val code: Int, message: String, val data: String? = null) : Exception(message) {
    override fun toString(): String = "RpcError($code: $message${if (data != null) " ($data)" else ""})"
    override fun equals(other: Any?): Boolean = other is RpcError && other.code == code && other.message == message && other.data == data
    override fun hashCode(): Int = code

    companion object {
        const val UNSUPPORTED_METHOD = 1400
        const val RECIPIENT_NOT_FOUND = 1401
        const val REQUEST_PAYLOAD_TOO_LARGE = 1402
        const val APPLICATION_ERROR = 1500
        const val CONNECTION_TIMEOUT = 1501
        const val RESPONSE_TIMEOUT = 1502
        const val RECIPIENT_DISCONNECTED = 1503
        const val RESPONSE_PAYLOAD_TOO_LARGE = 1504
        const val SEND_FAILED = 1505
    }
}

/** What a registered RPC handler is given. */
data class RpcInvocationData(
    val requestId: String,
    val callerId: String,
    /** The request's payload ("" when it had none). */
    val payload: String,
    /** How long the caller waits for the response. */
    val responseTimeoutMs: Long
)

/**
 * The RPC calls of one session, as caller and callee, with no clock or socket: each input returns
 * the session's actions. The server keeps nothing per call, so timeouts, matching a response to its
 * request and to the peer it went to, and failing the calls to a peer that left are all here. The
 * same rules as the Swift SDK's `RpcLedger` and the browser SDK's `_RpcCalls`. A call's waiter is
 * resolved with the response's text or with an [RpcError] as its value.
 */
internal class RpcLedger(private val ackTimeoutMs: Long, private val maxPayloadBytes: Int) {
    private class Pending(val to: String, val waiter: Long, var acked: Boolean = false)
    private val pending = LinkedHashMap<String, Pending>()
    private val methods = HashSet<String>()

    val openCalls: Int get() = pending.size

    fun register(method: String) { methods.add(method) }
    fun unregister(method: String) { methods.remove(method) }

    fun perform(id: String, to: String, method: String, payload: String, timeoutMs: Long, waiter: Long, connected: Boolean): List<SessionAction> {
        if (payload.toByteArray(Charsets.UTF_8).size > maxPayloadBytes) {
            return listOf(fail(waiter, RpcError(RpcError.REQUEST_PAYLOAD_TOO_LARGE, "request payload too large")))
        }
        if (!connected) return listOf(fail(waiter, RpcError(RpcError.SEND_FAILED, "not connected")))
        pending[id] = Pending(to, waiter)
        val body = JSONObject().put("id", id).put("method", method).put("payload", payload).put("timeout_ms", timeoutMs)
        return listOf(
            SessionAction.Send(frameText("rpc-request", to, body)),
            SessionAction.Arm(SessionTimer.RpcAck(id), minOf(ackTimeoutMs, timeoutMs)),
            SessionAction.Arm(SessionTimer.RpcResponse(id), timeoutMs))
    }

    fun ack(from: String?, id: String): List<SessionAction> {
        val call = pending[id] ?: return emptyList()
        if (call.to != from || call.acked) return emptyList()
        call.acked = true
        return listOf(SessionAction.Cancel(SessionTimer.RpcAck(id)))
    }

    /** An `rpc-response`: late, duplicated or not from the callee, it is dropped. */
    fun response(from: String?, payload: JSONObject): List<SessionAction> {
        val id = stringOrNull(payload, "id") ?: return emptyList()
        val call = pending[id] ?: return emptyList()
        if (call.to != from) return emptyList()
        val error = payload.optJSONObject("error")
        if (error != null) {
            return finish(id, RpcError(error.optInt("code", RpcError.APPLICATION_ERROR), error.optString("message", ""),
                stringOrNull(error, "data")))
        }
        return finish(id, stringOrNull(payload, "payload") ?: "")
    }

    fun timedOut(timer: SessionTimer): List<SessionAction> = when (timer) {
        is SessionTimer.RpcAck -> finish(timer.id, RpcError(RpcError.CONNECTION_TIMEOUT, "no ack from the peer"))
        is SessionTimer.RpcResponse -> finish(timer.id, RpcError(RpcError.RESPONSE_TIMEOUT, "no response from the peer"))
        else -> emptyList()
    }

    /**
     * A server `error` naming an `rpc-request` of ours (`payload.id`), or our ack or response to a
     * caller who left (404) or is reconnecting (480), which that caller's SDK settles itself: the
     * actions (none for the latter); null when the error is for the app.
     */
    fun refused(code: Int, message: String, payload: JSONObject?): List<SessionAction>? {
        if (payload == null) return null
        val type = stringOrNull(payload, "type") ?: return null
        val id = stringOrNull(payload, "id") ?: return null
        if (type != "rpc-request") {
            return if ((code == 404 || code == 480) && (type == "rpc-ack" || type == "rpc-response")) emptyList() else null
        }
        if (!pending.containsKey(id)) return null
        val error = when (code) {
            404 -> RpcError(RpcError.RECIPIENT_NOT_FOUND, message)
            460 -> RpcError(RpcError.REQUEST_PAYLOAD_TOO_LARGE, message)
            else -> RpcError(RpcError.SEND_FAILED, message, SERVER_NAMES[code] ?: code.toString())
        }
        return finish(id, error)
    }

    /** `peer-left`: the calls to that peer cannot be answered any more. */
    fun peerLeft(peer: String): List<SessionAction> =
        pending.filter { it.value.to == peer }.keys.toList().flatMap { finish(it, RpcError(RpcError.RECIPIENT_DISCONNECTED, "peer '$peer' left")) }

    /** The client is closed or failed: every open call fails. */
    fun failAll(message: String): List<SessionAction> =
        pending.keys.toList().flatMap { finish(it, RpcError(RpcError.SEND_FAILED, message)) }

    /** [outcome]: the response's text or an [RpcError]. */
    private fun finish(id: String, outcome: Any): List<SessionAction> {
        val call = pending.remove(id) ?: return emptyList()
        return listOf(SessionAction.Cancel(SessionTimer.RpcAck(id)), SessionAction.Cancel(SessionTimer.RpcResponse(id)),
            SessionAction.Resolve(call.waiter, outcome, null))
    }

    private fun fail(waiter: Long, error: RpcError): SessionAction = SessionAction.Resolve(waiter, error, null)

    /** An `rpc-request`: acked at once; then the handler runs ([SessionAction.InvokeRpc]), or 1400 when none is registered. */
    fun request(from: String?, payload: JSONObject): List<SessionAction> {
        if (from == null) return emptyList()
        val id = stringOrNull(payload, "id") ?: return emptyList()
        val method = stringOrNull(payload, "method") ?: return emptyList()
        val actions = arrayListOf<SessionAction>(SessionAction.Send(frameText("rpc-ack", from, JSONObject().put("id", id))))
        if (method !in methods) {
            actions.add(response(id, from, null, RpcError(RpcError.UNSUPPORTED_METHOD, "method '$method' not supported")))
            return actions
        }
        val timeout = if (payload.has("timeout_ms") && !payload.isNull("timeout_ms")) payload.optLong("timeout_ms", 10_000) else 10_000
        actions.add(SessionAction.InvokeRpc(method, RpcInvocationData(id, from, stringOrNull(payload, "payload") ?: "", timeout)))
        return actions
    }

    /** The handler's outcome ([result] or [error]), as the response to send. */
    fun handled(data: RpcInvocationData, result: String?, error: RpcError?): List<SessionAction> {
        if (error == null && result != null && result.toByteArray(Charsets.UTF_8).size > maxPayloadBytes) {
            return listOf(response(data.requestId, data.callerId, null, RpcError(RpcError.RESPONSE_PAYLOAD_TOO_LARGE, "response payload too large")))
        }
        return listOf(response(data.requestId, data.callerId, result ?: "", error))
    }

    private fun response(id: String, to: String, result: String?, error: RpcError?): SessionAction {
        val body = JSONObject().put("id", id)
        if (error != null) {
            val wire = JSONObject().put("code", error.code).put("message", error.message ?: "")
            if (error.data != null) wire.put("data", error.data)
            body.put("error", wire)
        } else {
            body.put("payload", result ?: "")
        }
        return SessionAction.Send(frameText("rpc-response", to, body))
    }

    private companion object {
        val SERVER_NAMES = mapOf(480 to "peer_reconnecting", 429 to "rate_limited", 422 to "invalid_payload")
    }
}
