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

/**
 * A committed chat message, live, replayed or from history (docs/protocol.md "chat (server -> client)").
 * [replyTo] is the seq of the message it answers; [deleted] marks a tombstone (`text` "", `meta`
 * null). History only: [editedTs] (the last edit's), [deletedTs], [reactions] (by key, sorted),
 * and with `includeEdits` [edits], oldest first.
 */
data class ChatMessage(
    val seq: Long,
    val from: String,
    val clientId: String,
    val text: String,
    val ts: Long,
    val meta: String?,
    val replyTo: Long? = null,
    val deleted: Boolean = false,
    val editedTs: Long? = null,
    val deletedTs: Long? = null,
    val reactions: List<ReactionCount> = emptyList(),
    val edits: List<ChatEditEntry>? = null
)

/** One reaction key on a message in history: how many peers, and who. */
data class ReactionCount(val key: String, val count: Int, val peers: List<String>)

/** One edit of a message (history with `includeEdits`); [meta] is JSON text or null. */
data class ChatEditEntry(val seq: Long, val ts: Long, val text: String, val meta: String?)

/**
 * A peer edited message [target] (`chat-edit`); [seq] is the edit's own. [deleted]: a replayed
 * edit of a message deleted since (`text` "", `meta` null).
 */
data class ChatEdit(val from: String, val seq: Long, val ts: Long, val clientId: String, val target: Long, val text: String,
                    val meta: String?, val deleted: Boolean)

/** Message [target] was deleted (`chat-delete`), by its author or a moderator. */
data class ChatDeletion(val from: String, val seq: Long, val ts: Long, val clientId: String, val target: Long)

/** A peer added (or, [removed], took back) its reaction [key] on message [target] (`chat-react`). */
data class ChatReaction(val from: String, val seq: Long, val ts: Long, val clientId: String, val target: Long, val key: String,
                        val removed: Boolean)

/** The preview of a room's newest message that is not deleted ([text] at most 140 characters). */
data class InboxMessage(val seq: Long, val from: String, val text: String, val ts: Long)

/** One room of [CallingClient.inbox]: its last seq and activity, our read marker, the unread count. */
data class InboxRoom(val roomId: String, val lastSeq: Long, val lastTs: Long, val lastMessage: InboxMessage?, val readSeq: Long,
                     val unread: Long)

/** One page of `GET /v1/me/rooms`, most recent activity first; pass [nextCursor] as `cursor` while [hasMore]. */
data class InboxPage(val rooms: List<InboxRoom>, val hasMore: Boolean, val nextCursor: String?) {
    companion object {
        /** Reads the endpoint's JSON body. */
        fun from(body: JSONObject): InboxPage {
            val array = body.optJSONArray("rooms")
            val rooms = if (array == null) emptyList() else (0 until array.length()).mapNotNull { index ->
                val raw = array.optJSONObject(index) ?: return@mapNotNull null
                val room = stringOrNull(raw, "room_id") ?: return@mapNotNull null
                val last = raw.optJSONObject("last_message")?.let { m ->
                    val from = stringOrNull(m, "from")
                    if (!m.has("seq") || from == null) null else InboxMessage(m.getLong("seq"), from, m.optString("text", ""), m.optLong("ts", 0))
                }
                InboxRoom(room, raw.optLong("last_seq", 0), raw.optLong("last_ts", 0), last, raw.optLong("read_seq", 0), raw.optLong("unread", 0))
            }
            return InboxPage(rooms, body.optBoolean("has_more", false), stringOrNull(body, "next_cursor"))
        }
    }
}

/**
 * One page of `GET /v1/rooms/{room_id}/messages` (docs/protocol.md "History API"): [messages]
 * after the asked `since_seq`, oldest first; ask again from [nextSinceSeq] while [hasMore]. A
 * backward page (`beforeSeq`) is newest first and goes on from [nextBeforeSeq].
 */
data class MessagesPage(
    val roomId: String,
    val messages: List<ChatMessage>,
    val nextSinceSeq: Long,
    val hasMore: Boolean,
    val lastSeq: Long,
    val limit: Int,
    val nextBeforeSeq: Long? = null
) {
    companion object {
        /** Reads the endpoint's JSON body; [sinceSeq] and [limit] stand in for absent fields. */
        fun from(body: JSONObject, roomId: String, sinceSeq: Long, limit: Int): MessagesPage {
            val array = body.optJSONArray("messages")
            val messages = if (array == null) emptyList() else (0 until array.length()).mapNotNull {
                val raw = array.optJSONObject(it)
                chatMessageOf(raw, raw?.let { json -> stringOrNull(json, "from") })
            }
            return MessagesPage(stringOrNull(body, "room_id") ?: roomId, messages, body.optLong("next_since_seq", sinceSeq),
                body.optBoolean("has_more", false), body.optLong("last_seq", 0), body.optInt("limit", limit),
                if (body.has("next_before_seq") && !body.isNull("next_before_seq")) body.getLong("next_before_seq") else null)
        }
    }
}

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
    data class ChatEdited(val edit: ChatEdit) : CallingEvent()
    data class ChatDeleted(val deletion: ChatDeletion) : CallingEvent()
    data class ChatReactionChanged(val reaction: ChatReaction) : CallingEvent()
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
    return jsonLikeJavaScript(frame.toString())
}

/**
 * Android's org.json writes `/` as `\/`; JavaScript's `JSON.stringify` (the browser SDK) writes it
 * plain. Same JSON, different bytes: undo that one escape so frames are byte for byte the browser
 * SDK's (tests/vectors/client-frames.json). A `\\` pair is an escaped backslash and stays.
 */
internal fun jsonLikeJavaScript(text: String): String {
    if (text.indexOf("\\/") < 0) return text
    val out = StringBuilder(text.length)
    var i = 0
    while (i < text.length) {
        val c = text[i]
        if (c == '\\' && i + 1 < text.length) {
            val next = text[i + 1]
            if (next == '/') out.append('/') else out.append(c).append(next)
            i += 2
        } else {
            out.append(c)
            i += 1
        }
    }
    return out.toString()
}

/**
 * One `stats` sample (docs/protocol.md "stats"): the browser SDK's keys `rtt_ms`, `jitter_ms`,
 * `packet_loss` (0–1), `bitrate_kbps`, null when unknown. [payload] clamps to the ranges the
 * server accepts, as the browser SDK's `clampStats`.
 */
data class StatsSample(val rttMs: Double?, val jitterMs: Double?, val packetLoss: Double?, val bitrateKbps: Double?) {
    /** True when every value is unknown: such a sample is not sent. */
    val isEmpty: Boolean get() = rttMs == null && jitterMs == null && packetLoss == null && bitrateKbps == null

    internal fun payload(): JSONObject {
        fun clamp(v: Double?, hi: Double): Any = if (v == null) JSONObject.NULL else Math.min(Math.max(v, 0.0), hi)
        return JSONObject()
            .put("rtt_ms", clamp(rttMs, 60000.0))
            .put("jitter_ms", clamp(jitterMs, 60000.0))
            .put("packet_loss", clamp(packetLoss, 1.0))
            .put("bitrate_kbps", clamp(bitrateKbps, 1000000.0))
    }
}

/** One RTCIceServer of `GET /v1/ice` (docs/protocol.md "ICE servers"). */
data class IceServer(val urls: List<String>, val username: String? = null, val credential: String? = null) {
    companion object {
        /** The mobile SDKs' fallback when `/v1/ice` cannot be fetched: public STUN. */
        val FALLBACK: List<IceServer> = listOf(IceServer(listOf("stun:stun.l.google.com:19302")))

        internal fun listFrom(body: JSONObject): List<IceServer> {
            val array = body.optJSONArray("ice_servers") ?: return emptyList()
            return (0 until array.length()).mapNotNull { i ->
                val o = array.optJSONObject(i) ?: return@mapNotNull null
                val urls = o.optJSONArray("urls")?.let { stringsOf(it) } ?: stringOrNull(o, "urls")?.let { listOf(it) } ?: emptyList()
                if (urls.isEmpty()) null else IceServer(urls, stringOrNull(o, "username"), stringOrNull(o, "credential"))
            }
        }
    }
}

internal fun peersOf(array: JSONArray?): List<PeerInfo> {
    if (array == null) return emptyList()
    return (0 until array.length()).mapNotNull { PeerInfo.from(array.optJSONObject(it)) }
}

/** A `chat` frame's payload or a history entry; null without `seq` or sender. */
internal fun chatMessageOf(payload: JSONObject?, from: String?): ChatMessage? {
    if (payload == null || from == null || !payload.has("seq")) return null
    val reactions = payload.optJSONArray("reactions")?.let { array ->
        (0 until array.length()).mapNotNull { index ->
            val raw = array.optJSONObject(index) ?: return@mapNotNull null
            val key = stringOrNull(raw, "key") ?: return@mapNotNull null
            val peers = raw.optJSONArray("peers")
            ReactionCount(key, raw.optInt("count", 0), if (peers == null) emptyList() else (0 until peers.length()).map { peers.optString(it) })
        }
    } ?: emptyList()
    val edits = payload.optJSONArray("edits")?.let { array ->
        (0 until array.length()).mapNotNull { index ->
            val raw = array.optJSONObject(index) ?: return@mapNotNull null
            if (!raw.has("seq")) null else ChatEditEntry(raw.getLong("seq"), raw.optLong("ts", 0), raw.optString("text", ""), metaText(raw))
        }
    }
    return ChatMessage(payload.getLong("seq"), from, payload.optString("client_id", ""), payload.optString("text", ""),
        payload.optLong("ts", 0), metaText(payload), longOrNull(payload, "reply_to"), payload.optBoolean("deleted", false),
        longOrNull(payload, "edited_ts"), longOrNull(payload, "deleted_ts"), reactions, edits)
}

/** A `chat-edit`, `chat-delete` or `chat-react` frame as the event it raises; null when malformed. */
internal fun chatOperationOf(type: String, payload: JSONObject?, from: String?): CallingEvent? {
    if (payload == null || from == null || !payload.has("seq") || !payload.has("target")) return null
    val seq = payload.getLong("seq")
    val ts = payload.optLong("ts", 0)
    val clientId = payload.optString("client_id", "")
    val target = payload.getLong("target")
    return when (type) {
        "chat-edit" -> CallingEvent.ChatEdited(ChatEdit(from, seq, ts, clientId, target, payload.optString("text", ""), metaText(payload),
            payload.optBoolean("deleted", false)))
        "chat-delete" -> CallingEvent.ChatDeleted(ChatDeletion(from, seq, ts, clientId, target))
        "chat-react" -> {
            val key = stringOrNull(payload, "key") ?: return null
            CallingEvent.ChatReactionChanged(ChatReaction(from, seq, ts, clientId, target, key, payload.optBoolean("remove", false)))
        }
        else -> null
    }
}

private fun metaText(json: JSONObject): String? = if (json.has("meta") && !json.isNull("meta")) json.get("meta").toString() else null

private fun longOrNull(json: JSONObject, key: String): Long? = if (json.has(key) && !json.isNull(key)) json.getLong(key) else null

/** The `room_id` claim of a JWT, read without verifying it (the server verifies); null if absent. */
internal fun roomIdClaim(token: String): String? {
    val parts = token.split('.')
    if (parts.size != 3) return null
    return try {
        val json = String(java.util.Base64.getUrlDecoder().decode(parts[1].trimEnd('=')), Charsets.UTF_8)
        stringOrNull(JSONObject(json), "room_id")
    } catch (e: Exception) {
        null
    }
}

/**
 * The presence `accepted` frame (docs/protocol.md "Presence channel"): the call a request became.
 * [token] is this side's room token for [roomId]; join with `CallingClient(baseUrl, token, ...)`.
 */
data class AcceptedCall(
    val requestId: String,
    val callId: String,
    val roomId: String,
    val agentId: String,
    val callerId: String,
    val token: String,
    /** The frame's payload as JSON text. */
    val raw: String
) {
    companion object {
        internal fun from(payload: JSONObject): AcceptedCall = AcceptedCall(
            payload.optString("request_id", ""), payload.optString("call_id", ""), payload.optString("room_id", ""),
            payload.optString("agent_id", ""), payload.optString("caller_id", ""), payload.optString("token", ""),
            payload.toString())
    }
}

/**
 * The push payload a backend builds from the `presence_request_ringing` webhook (docs/operations.md
 * "Webhooks") and sends over FCM/APNs. [parse] reads the webhook's `data` object, or a push's
 * data map written as JSON with at least `request_id`.
 */
data class RingingRequest(
    val requestId: String,
    val callerId: String?,
    val callerName: String?,
    val agentId: String?,
    val queue: String?,
    /** Unix ms when the request times out; 0 when unknown. */
    val expiresAt: Long
) {
    companion object {
        /** Null when [json] is not a JSON object with a non-empty `request_id`. */
        fun parse(json: String): RingingRequest? {
            val o = try { JSONObject(json) } catch (e: Exception) { return null }
            val id = stringOrNull(o, "request_id")?.takeIf { it.isNotEmpty() } ?: return null
            return RingingRequest(id, stringOrNull(o, "caller_id"), stringOrNull(o, "caller_name"), stringOrNull(o, "agent_id"),
                stringOrNull(o, "queue"), o.optLong("expires_at", 0))
        }
    }
}

/**
 * The `candidate` relay payload `{candidate, sdpMid, sdpMLineIndex}` as JSON text, as the browser
 * SDK writes it (docs/sdk.md "Wire conventions"); [candidate] null (end of gathering) becomes `""`.
 * With org.webrtc: `candidatePayload(c.sdp, c.sdpMid, c.sdpMLineIndex)` for `sendSignal("candidate", ...)`.
 */
fun candidatePayload(candidate: String?, sdpMid: String?, sdpMLineIndex: Int?): String {
    val payload = JSONObject()
    payload.put("candidate", candidate ?: "")
    payload.put("sdpMid", if (candidate == null || sdpMid == null) JSONObject.NULL else sdpMid)
    payload.put("sdpMLineIndex", if (candidate == null || sdpMLineIndex == null) JSONObject.NULL else sdpMLineIndex)
    return jsonLikeJavaScript(payload.toString())
}
