/// What a row of a room's chat log is: a message, or an operation on one (docs/protocol.md,
/// "Chat operations"). Stored as its raw value, so the numbers never change.
public enum ChatRowKind: Int, Sendable, Hashable {
    case message = 0
    case edit = 1
    case delete = 2
    case react = 3
    case unreact = 4

    /// The frame type a row of this kind is broadcast and replayed as.
    public var frameType: FrameType {
        switch self {
        case .message: return .chat
        case .edit: return .chatEdit
        case .delete: return .chatDelete
        case .react, .unreact: return .chatReact
        }
    }
}

/// The configurable limits of chat operations (`chat_edit_window_ms`, `chat_max_reaction_keys`,
/// `chat_reaction_key_max_bytes`).
public struct ChatOperationLimits: Sendable, Hashable {
    /// How long after a message's `ts` its author may edit it; 0 = no window (always).
    public var editWindowMs: Int64
    /// Distinct reaction keys one message may carry.
    public var maxReactionKeys: Int
    /// Longest reaction key, in UTF-8 bytes.
    public var reactionKeyMaxBytes: Int

    public init(editWindowMs: Int64 = 86_400_000, maxReactionKeys: Int = 20, reactionKeyMaxBytes: Int = 32) {
        self.editWindowMs = editWindowMs
        self.maxReactionKeys = maxReactionKeys
        self.reactionKeyMaxBytes = reactionKeyMaxBytes
    }
}

/// A stored message as the rules see it when an operation names it.
public struct ChatTargetState: Sendable, Equatable {
    /// The message's author.
    public var author: PeerID
    /// When it was stored, unix milliseconds.
    public var timestamp: Millis
    /// Whether it is a tombstone.
    public var deleted: Bool
    /// Distinct reaction keys it carries now.
    public var reactionKeys: Int
    /// Whether it carries the key the operation names (from anyone).
    public var hasKey: Bool
    /// Whether it carries that key from the operation's sender.
    public var hasSendersReaction: Bool

    public init(author: PeerID, timestamp: Millis, deleted: Bool = false, reactionKeys: Int = 0, hasKey: Bool = false,
                hasSendersReaction: Bool = false) {
        self.author = author
        self.timestamp = timestamp
        self.deleted = deleted
        self.reactionKeys = reactionKeys
        self.hasKey = hasKey
        self.hasSendersReaction = hasSendersReaction
    }
}

/// What the rules make of an operation: store it (changing its target or not), or refuse it.
public enum ChatOperationDecision: Sendable, Equatable {
    /// Store the row and apply it to its target.
    case apply
    /// Store the row (it is acked with its own seq) but leave the target as it is: a reaction
    /// added twice or removed when absent, a delete of a tombstone.
    case storeOnly
    /// Refuse with this `chat-ack` error; nothing is stored.
    case refuse(WireError)
}

/// Who may do what to a stored message: pure, so the stores (which read the target inside the
/// transaction that writes the operation) and the tests share one set of rules.
public enum ChatRules {
    /// Whether `key` is a reaction key: 1–`maxBytes` UTF-8 bytes, no whitespace or control character.
    public static func reactionKeyError(_ key: String, maxBytes: Int) -> WireError? {
        let bytes = key.utf8.count
        if bytes == 0 || bytes > maxBytes {
            return WireError(.chatReactionInvalid, "reaction key must be 1–\(maxBytes) UTF-8 bytes")
        }
        for scalar in key.unicodeScalars where scalar.properties.isWhitespace || scalar.properties.generalCategory == .control {
            return WireError(.chatReactionInvalid, "reaction key must not contain whitespace or control characters")
        }
        return nil
    }

    /// The decision for an operation of `kind` by `sender` (`moderator`: its token says so) on
    /// `target` (nil when the seq names no message of the room) at `now`.
    public static func decide(_ kind: ChatRowKind, sender: PeerID, moderator: Bool, target: ChatTargetState?, now: Millis,
                              limits: ChatOperationLimits) -> ChatOperationDecision {
        guard let target else { return .refuse(WireError(.chatTargetNotFound, "target is not the seq of a message in this room")) }
        switch kind {
        case .message:
            // A reply: its target only has to be a message of the room.
            return .apply
        case .edit:
            if target.author != sender { return .refuse(WireError(.chatForbidden, "only the author may edit a message")) }
            if target.deleted { return .refuse(WireError(.chatForbidden, "the message is deleted")) }
            if limits.editWindowMs > 0, now - target.timestamp > limits.editWindowMs {
                return .refuse(WireError(.chatForbidden, "the edit window of \(limits.editWindowMs) ms has passed"))
            }
            return .apply
        case .delete:
            if target.author != sender && !moderator {
                return .refuse(WireError(.chatForbidden, "only the author or a moderator may delete a message"))
            }
            return target.deleted ? .storeOnly : .apply
        case .react:
            if target.deleted { return .refuse(WireError(.chatForbidden, "the message is deleted")) }
            if target.hasSendersReaction { return .storeOnly }
            if !target.hasKey, target.reactionKeys >= limits.maxReactionKeys {
                return .refuse(WireError(.chatReactionInvalid, "the message already has \(limits.maxReactionKeys) reaction keys"))
            }
            return .apply
        case .unreact:
            if target.deleted { return .refuse(WireError(.chatForbidden, "the message is deleted")) }
            return target.hasSendersReaction ? .apply : .storeOnly
        }
    }
}
