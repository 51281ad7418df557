package com.callingserver.sdk

import org.json.JSONArray
import org.json.JSONObject

/** A room member as `welcome.peers` and `peer-joined` describe it (docs/protocol.md "welcome"). */
data class PeerInfo(val peerId: String, val role: String, val name: String?, val reconnecting: Boolean = false) {
    companion object {
        fun from(json: JSONObject?): PeerInfo? {
            val id = json?.optString("peer_id", "") ?: return null
            if (id.isEmpty()) return null
            return PeerInfo(id, json.optString("role", "peer"), stringOrNull(json, "name"), json.optBoolean("reconnecting", false))
        }
    }
}

/**
 * The server's `welcome`. [resumed] is true when the socket asked for a replay (`last_seq`); then
 * [recovered] and [replayCount] are the server's answer (docs/protocol.md "Resume").
 */
data class Welcome(
    val peerId: String,
    val roomId: String,
    val callId: String?,
    val role: String,
    val name: String?,
    val peers: List<PeerInfo>,
    val lastSeq: Long,
    val readSeq: Long,
    val unread: Long,
    val resumed: Boolean,
    val recovered: Boolean,
    val replayCount: Int
)

/** A committed chat message, live or replayed (docs/protocol.md "chat (server -> client)"). */
data class ChatMessage(val seq: Long, val from: String, val clientId: String, val text: String, val ts: Long, val meta: String?)

/** The server's `chat-ack` for one of our messages: the same [seq] and [ts] for every retry of a `client_id`. */
data class ChatAck(val clientId: String, val seq: Long, val ts: Long)

/** Where the session is, as the browser SDK's `state` names it. */
enum class ConnectionState { IDLE, CONNECTING, CONNECTED, RECONNECTING, ENDED, FAILED }

/** What the session reports to the app, in the order the frames arrived. */
sealed class CallingEvent {
    data class StateChanged(val state: ConnectionState) : CallingEvent()
    data class Connected(val welcome: Welcome) : CallingEvent()
    /** The socket ended; [error] is null after `disconnect()`. */
    data class Disconnected(val error: CallingError?) : CallingEvent()
    data class Reconnecting(val attempt: Int) : CallingEvent()
    data class PeerJoined(val peer: PeerInfo) : CallingEvent()
    data class PeerLeft(val peerId: String) : CallingEvent()
    /** The peer's socket dropped without a leave; its seat is held (docs/protocol.md "Reconnect grace"). */
    data class PeerReconnecting(val peerId: String) : CallingEvent()
    data class PeerResumed(val peerId: String) : CallingEvent()
    /** A relayed `offer`, `answer` or `candidate`; [payload] is the payload's JSON text. */
    data class Signal(val type: String, val from: String, val payload: String) : CallingEvent()
    /** A relayed `data` frame; [payload] is JSON text, or null when absent. */
    data class Data(val from: String, val payload: String?) : CallingEvent()
    data class Chat(val message: ChatMessage) : CallingEvent()
    data class Typing(val from: String, val isTyping: Boolean) : CallingEvent()
    data class Read(val from: String, val seq: Long) : CallingEvent()
    /** The room's consultation meter; [raw] is the payload's JSON text. */
    data class Meter(val state: String, val raw: String) : CallingEvent()
    object Pong : CallingEvent()
    data class Error(val error: CallingError) : CallingEvent()
}

internal fun stringOrNull(json: JSONObject, key: String): String? =
    if (json.has(key) && !json.isNull(key)) json.optString(key) else null

/** Builds one frame's text: the envelope's keys in a fixed order (`type`, `to`, `payload`). */
internal fun frameText(type: String, to: String? = null, payload: Any? = null): String {
    val frame = JSONObject()
    frame.put("type", type)
    if (to != null) frame.put("to", to)
    if (payload != null) frame.put("payload", payload)
    return frame.toString()
}

internal fun peersOf(array: JSONArray?): List<PeerInfo> {
    if (array == null) return emptyList()
    return (0 until array.length()).mapNotNull { PeerInfo.from(array.optJSONObject(it)) }
}
