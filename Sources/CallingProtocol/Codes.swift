/// Stable numeric codes carried in `error` frames (`{"code":…, "message":…}`). The table in
/// docs/protocol.md is generated from the same facts; a code never changes meaning once shipped.
public enum ErrorCode: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// The text frame is not valid JSON.
    case badJSON = 400
    /// Valid JSON, but not a frame object: `type` missing or a field of the wrong type.
    case badFrame = 401
    /// `type` is not a frame a client may send.
    case unknownType = 402
    /// The token does not allow this action (for example presence frames with a room-only token).
    case forbidden = 403
    /// `to` names no peer in the room.
    case peerNotFound = 404
    /// `to` names a peer in its reconnect grace: hold the frame and send it again after
    /// `peer-resumed` (or drop it on `peer-left`).
    case peerReconnecting = 480
    /// The frame exceeds `max_frame_bytes`; it was dropped unread.
    case frameTooLarge = 413
    /// Binary frames carry nothing in this protocol.
    case binaryUnsupported = 415
    /// A text frame whose bytes are not UTF-8.
    case invalidUTF8 = 416
    /// The payload does not match the frame type (a missing `sdp`, a `to` where none may be, …).
    case invalidPayload = 422
    /// Chat text is empty or only whitespace.
    case chatEmpty = 440
    /// Chat text is longer than `chat.max_text_bytes`.
    case chatTooLong = 441
    /// Chat `meta` is not an object or is larger than `chat.max_meta_bytes`.
    case chatMetaInvalid = 442
    /// A chat operation's `target` (or a chat's `reply_to`) is not the seq of a message in this room.
    case chatTargetNotFound = 443
    /// A chat operation the rules refuse: not the author (edit; delete without the token's
    /// `moderator` claim), the message is deleted (edit, react), or the edit window has passed.
    case chatForbidden = 444
    /// A reaction key that is empty, too long or holds whitespace or control characters, or a
    /// message that already has `chat_max_reaction_keys` distinct keys.
    case chatReactionInvalid = 445
    /// More frames than `max_frames_per_second` allows; the frame was dropped.
    case rateLimited = 429
    /// The request conflicts with the current state (for example accepting an ended request).
    case conflict = 409
    /// The server failed; the same frame may succeed later.
    case internalError = 500
    /// A dependency (the store) is unavailable; retry later.
    case unavailable = 503
    /// An RPC frame's payload (or its error's message and data) is larger than
    /// `rpc_max_payload_bytes`; the frame was not relayed (docs/protocol.md, "RPC").
    case rpcPayloadTooLarge = 460

    /// Whether retrying the same frame later can succeed.
    public var isTemporary: Bool {
        switch self {
        case .rateLimited, .internalError, .unavailable, .peerNotFound, .peerReconnecting: return true
        default: return false
        }
    }

    /// Short stable name, used in logs and metrics labels.
    public var name: String {
        switch self {
        case .badJSON: return "bad_json"
        case .badFrame: return "bad_frame"
        case .unknownType: return "unknown_type"
        case .forbidden: return "forbidden"
        case .peerNotFound: return "peer_not_found"
        case .peerReconnecting: return "peer_reconnecting"
        case .frameTooLarge: return "frame_too_large"
        case .binaryUnsupported: return "binary_unsupported"
        case .invalidUTF8: return "invalid_utf8"
        case .invalidPayload: return "invalid_payload"
        case .chatEmpty: return "chat_empty"
        case .chatTooLong: return "chat_too_long"
        case .chatMetaInvalid: return "chat_meta_invalid"
        case .chatTargetNotFound: return "chat_target_not_found"
        case .chatForbidden: return "chat_forbidden"
        case .chatReactionInvalid: return "chat_reaction_invalid"
        case .rateLimited: return "rate_limited"
        case .conflict: return "conflict"
        case .internalError: return "internal_error"
        case .unavailable: return "unavailable"
        case .rpcPayloadTooLarge: return "rpc_payload_too_large"
        }
    }

    public var description: String { name }
}

/// WebSocket close codes. 4000–4399 mean "reconnect is fine (with backoff)"; 4400–4999 are terminal:
/// an SDK must not reconnect on its own (the reason would still hold, or the user must act).
public enum CloseCode: UInt16, Sendable, CaseIterable {
    /// Normal closure, initiated by the client.
    case normal = 1000
    /// The server is shutting down or restarting. Reconnect.
    case goingAway = 1001
    /// The client's Close frame broke RFC 6455 (a status code not allowed on the wire, §7.4, or a
    /// one-byte payload, §5.5.1): the server answers it with this instead of echoing it.
    case protocolError = 1002
    /// The client's Close reason was not valid UTF-8 (RFC 6455 §5.5.1, §8.1).
    case invalidPayload = 1007
    /// The server failed unexpectedly. Reconnect.
    case internalError = 1011
    /// The connection's outbound queue exceeded `max_queue_bytes`: the client reads too slowly.
    case slowConsumer = 4000
    /// Too many frames dropped for exceeding the rate limit in a row (`flood_close_after`).
    case flood = 4001
    /// No frame (not even a ping) within the idle timeout.
    case idleTimeout = 4002
    /// Another connection with the same peer id joined the room and took over. Terminal.
    case replaced = 4400
    /// The token expired while connected; reconnect only with a fresh token. Terminal.
    case tokenExpired = 4401
    /// The consultation meter reached its limit and the room was closed. Terminal.
    case consultationEnded = 4410
    /// An operator removed this peer through the admin API; its token is refused until it expires. Terminal.
    case kicked = 4403
    /// The room was closed by the admin API (`end`); every token seated in it is refused until it expires. Terminal.
    case roomClosed = 4404
    /// The room was full across the cluster's nodes: the upgrade passed this node's check, but the
    /// shared seat count gave the last seat to another joiner first. Sent before any `welcome`;
    /// the same meaning as the upgrade's 409 `room_full`. Terminal.
    case roomFull = 4409

    public var isTerminal: Bool { rawValue >= 4400 && rawValue < 5000 }

    /// Whether a peer may send `code` in a Close frame (RFC 6455 §7.4.1, §7.4.2 and the IANA
    /// registry): 1000–1003, 1007–1014, and 3000–4999 (libraries and applications). Below 1000,
    /// 1004 (reserved), 1005/1006/1015 (only for reporting, never on the wire), 1016–2999 (not
    /// assigned) and 5000 and above are protocol errors.
    public static func isAllowedOnWire(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }

    /// What a client's Close payload calls for: `nil` if it is well-formed (empty, or an allowed
    /// code and a UTF-8 reason), so the server echoes its code; otherwise the code to answer with
    /// instead (`protocolError` for a one-byte payload or a code not allowed on the wire,
    /// `invalidPayload` for a reason that is not UTF-8). The code is checked first.
    public static func refusal(ofPeerClose payload: UnsafeRawBufferPointer) -> CloseCode? {
        if payload.isEmpty { return nil }
        guard payload.count >= 2 else { return .protocolError }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        guard isAllowedOnWire(code) else { return .protocolError }
        let reason = UnsafeBufferPointer(rebasing: payload.assumingMemoryBound(to: UInt8.self)[2...])
        return UTF8Check.isValid(reason) ? nil : .invalidPayload
    }

    public var reason: String {
        switch self {
        case .normal: return "normal"
        case .goingAway: return "server shutting down"
        case .protocolError: return "protocol error"
        case .invalidPayload: return "invalid close reason"
        case .internalError: return "internal error"
        case .slowConsumer: return "slow consumer"
        case .flood: return "flood"
        case .idleTimeout: return "idle timeout"
        case .replaced: return "replaced"
        case .tokenExpired: return "token expired"
        case .consultationEnded: return "consultation ended"
        case .kicked: return "kicked"
        case .roomClosed: return "room closed"
        case .roomFull: return "room full"
        }
    }
}
