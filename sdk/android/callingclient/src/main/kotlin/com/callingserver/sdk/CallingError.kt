package com.callingserver.sdk

/**
 * An SDK error: a stable [code], whether trying again unchanged can help ([isRetryable]), and the
 * server's own numbers where it gave them. The codes are the browser SDK's (`CallingError` in
 * sdk/js/calling-client.js): "closed", "connect_failed", "timeout", "not_connected",
 * "invalid_state", "refresh_failed", "server" (an `error` frame or failed `chat-ack`, number in
 * [serverCode], docs/protocol.md "Error codes").
 */
class CallingError(
    val code: String,
    message: String,
    /** The server's close code, for `closed`. Null when the socket dropped without a close frame. */
    val closeCode: Int? = null,
    /** The HTTP status of a refused upgrade, for `connect_failed`. */
    val status: Int? = null,
    /** The problem code of a refused upgrade (`token_expired`, `room_full`...). */
    val problemCode: String? = null,
    /** The numeric code of an `error` frame or a failed `chat-ack` (`server`). */
    val serverCode: Int? = null,
    /** The frame type an `error` frame names in its payload (`payload.type`). */
    val frameType: String? = null,
    val isRetryable: Boolean = false
) : Exception(message) {
    override fun toString(): String = "CallingError($code: $message)"

    companion object {
        /** Close codes 4400-4999 are terminal: an SDK must not reconnect on its own (docs/protocol.md "Close codes"). */
        fun isTerminalClose(code: Int?): Boolean = code != null && code in 4400..4999

        /** The temporary server codes (`ErrorCode.isTemporary`): the same frame may succeed later. */
        fun isTemporaryServerCode(code: Int): Boolean = code == 404 || code == 480 || code == 429 || code == 500 || code == 503

        fun notConnected() = CallingError("not_connected", "not connected", isRetryable = true)
        fun invalidState(message: String) = CallingError("invalid_state", message)
        fun timeout(what: String) = CallingError("timeout", "no $what in time", isRetryable = true)

        fun closed(code: Int?, reason: String) = CallingError(
            "closed", "socket closed (${code ?: "no close frame"}${if (reason.isEmpty()) "" else " $reason"})",
            closeCode = code, isRetryable = !isTerminalClose(code))

        /** A refused upgrade: 429 and 5xx are worth a retry, 401/403/409 are not. */
        fun connectFailed(status: Int?, problemCode: String?, message: String) = CallingError(
            "connect_failed", message, status = status, problemCode = problemCode,
            isRetryable = status == null || status == 429 || status >= 500)

        fun server(code: Int, message: String, frameType: String? = null) = CallingError(
            "server", "server error $code: $message", serverCode = code, frameType = frameType,
            isRetryable = isTemporaryServerCode(code))
    }
}
