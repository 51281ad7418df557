import CallingCore

/// A chat message as received, before the store has given it a sequence number.
public struct ChatDraft: Sendable, Hashable {
    public var room: RoomID
    public var sender: PeerID
    /// Chosen by the sending client; a retry of the same message reuses it. Unique per (room, sender).
    public var clientID: String
    public var text: String
    /// Client metadata as already-serialized JSON, stored verbatim; validated by the caller.
    public var meta: String?
    /// Server receive time, unix milliseconds.
    public var timestampMs: Int64
    /// A message, or an operation on the message at `target`.
    public var kind: ChatRowKind
    /// An operation's target seq; 0 for a message.
    public var target: Int64
    /// A message's `reply_to`, checked to name a message of the room.
    public var replyTo: Int64?
    /// A reaction's key.
    public var key: String?
    /// The sender's token has the `moderator` claim (a delete of someone else's message).
    public var moderator: Bool
    /// The limits `ChatRules` applies to an operation.
    public var limits: ChatOperationLimits

    public init(room: RoomID, sender: PeerID, clientID: String, text: String, meta: String? = nil, timestampMs: Int64,
                kind: ChatRowKind = .message, target: Int64 = 0, replyTo: Int64? = nil, key: String? = nil,
                moderator: Bool = false, limits: ChatOperationLimits = ChatOperationLimits()) {
        self.room = room
        self.sender = sender
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestampMs = timestampMs
        self.kind = kind
        self.target = target
        self.replyTo = replyTo
        self.key = key
        self.moderator = moderator
        self.limits = limits
    }

    /// A message without `reply_to`: nothing to check against stored rows but its dedupe key, so
    /// it may go into a multi-row insert.
    public var isPlainMessage: Bool { kind == .message && replyTo == nil }
}

/// A committed chat message.
public struct ChatRecord: Sendable, Hashable {
    public var room: RoomID
    /// Position in the room's history: 1, 2, 3, … without gaps.
    public var seq: Int64
    public var sender: PeerID
    public var clientID: String
    public var text: String
    public var meta: String?
    /// Server time of the first (original) receipt, unix milliseconds.
    public var timestampMs: Int64
    /// A message, or an operation on the message at `target`.
    public var kind: ChatRowKind
    /// An operation's target seq; 0 for a message.
    public var target: Int64
    /// A message's `reply_to`.
    public var replyTo: Int64?
    /// A reaction's key.
    public var key: String?
    /// A message, or an edit, whose content a delete erased (`text` is "" and `meta` nil).
    public var deleted: Bool

    public init(
        room: RoomID, seq: Int64, sender: PeerID, clientID: String, text: String, meta: String?, timestampMs: Int64,
        kind: ChatRowKind = .message, target: Int64 = 0, replyTo: Int64? = nil, key: String? = nil, deleted: Bool = false
    ) {
        self.room = room
        self.seq = seq
        self.sender = sender
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestampMs = timestampMs
        self.kind = kind
        self.target = target
        self.replyTo = replyTo
        self.key = key
        self.deleted = deleted
    }

    /// The row `draft` becomes at `seq`.
    public init(_ draft: ChatDraft, seq: Int64) {
        self.init(room: draft.room, seq: seq, sender: draft.sender, clientID: draft.clientID, text: draft.text, meta: draft.meta,
                  timestampMs: draft.timestampMs, kind: draft.kind, target: draft.target, replyTo: draft.replyTo, key: draft.key)
    }
}

/// The outcome of `ChatStore.appendChat`.
public struct ChatAppendResult: Sendable, Hashable {
    /// The stored message. For a duplicate this is the original: its seq, timestamp, text and meta.
    public var message: ChatRecord
    /// `true` when (room, sender, client_id) was already stored: nothing was written, and the caller should
    /// ack with the original seq but not broadcast the message again.
    public var duplicate: Bool
    /// Set when `ChatRules` refused the operation (or a reply's `reply_to`): nothing was stored,
    /// `message` is the draft with seq 0, and the sender's `chat-ack` carries this error.
    public var refusal: WireError?

    public init(message: ChatRecord, duplicate: Bool, refusal: WireError? = nil) {
        self.message = message
        self.duplicate = duplicate
        self.refusal = refusal
    }
}

/// How far a peer has read in a room.
public struct ReadMarker: Sendable, Hashable {
    public var room: RoomID
    public var peer: PeerID
    /// The highest seq the peer has read; 0 when it has never marked anything.
    public var seq: Int64
    /// When the marker last moved, unix milliseconds; `nil` when it never has.
    public var updatedMs: Int64?

    public init(room: RoomID, peer: PeerID, seq: Int64, updatedMs: Int64?) {
        self.room = room
        self.peer = peer
        self.seq = seq
        self.updatedMs = updatedMs
    }
}

/// The outcome of `ChatStore.markRead`.
public struct ReadMarkerResult: Sendable, Hashable {
    /// The marker as stored after the call.
    public var marker: ReadMarker
    /// `true` when the marker moved forward; `false` when the requested seq was not past the current
    /// marker (a stale or repeated receipt), so there is nothing to broadcast.
    public var moved: Bool

    public init(marker: ReadMarker, moved: Bool) {
        self.marker = marker
        self.moved = moved
    }
}

/// One page of `ChatStore.history`.
public struct HistoryPage: Sendable, Hashable {
    public var room: RoomID
    /// Messages with seq > sinceSeq, ascending.
    public var messages: [ChatRecord]
    /// More messages follow the last one returned.
    public var hasMore: Bool
    /// The `sinceSeq` for the next page: the seq of the last message returned, or the request's
    /// `sinceSeq` when the page is empty.
    public var nextSinceSeq: Int64
    /// The room's latest seq (0 for a room without messages) at the time of the read.
    public var lastSeq: Int64

    public init(room: RoomID, messages: [ChatRecord], hasMore: Bool, nextSinceSeq: Int64, lastSeq: Int64) {
        self.room = room
        self.messages = messages
        self.hasMore = hasMore
        self.nextSinceSeq = nextSinceSeq
        self.lastSeq = lastSeq
    }
}

/// What a peer needs to render a room badge.
public struct RoomSummary: Sendable, Hashable {
    public var room: RoomID
    public var peer: PeerID
    /// The room's latest seq; 0 for a room without messages.
    public var lastSeq: Int64
    /// The peer's read marker; 0 when none.
    public var readSeq: Int64
    /// Messages after the read marker that were sent by someone else (your own messages are never unread).
    public var unreadCount: Int

    public init(room: RoomID, peer: PeerID, lastSeq: Int64, readSeq: Int64, unreadCount: Int) {
        self.room = room
        self.peer = peer
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.unreadCount = unreadCount
    }
}

/// Counters for `/metrics`. Monotonic except `largestBatch`, which is a high-water mark.
public struct ChatStoreMetrics: Sendable, Hashable {
    /// Group-commit transactions committed (one per drain of the pending appends).
    public var batchesCommitted: Int = 0
    /// Batches rolled back; every append in them failed.
    public var batchesFailed: Int = 0
    /// New chat rows written.
    public var rowsInserted: Int = 0
    /// Appends answered with an existing row (retried client_id).
    public var duplicates: Int = 0
    /// The most appends committed in one transaction.
    public var largestBatch: Int = 0
    /// Time to write and COMMIT one group-commit batch (BEGIN IMMEDIATE … COMMIT), one observation per batch.
    public var commitLatency = LatencyHistogram()
    /// How long the chat that scheduled a drain waited for the store's queue to start it: the
    /// oldest chat of the drain, so the longest wait in it. One observation per drain. Long waits
    /// mean the queue was busy with something else (a history page, a checkpoint catch-up) or the
    /// store's thread did not get a CPU.
    public var queueWait = LatencyHistogram()
    /// The store's most recent failure came after its most recent successful write: on a full disk,
    /// a read-only or damaged file, every write fails while reads may still work. `/healthz` then
    /// says `degraded`. Cleared by the next write that commits.
    public var writesFailing = false

    public init() {}

    /// Counts one committed group-commit batch: what every chat store records after its COMMIT.
    public mutating func recordCommitted(_ results: [ChatAppendResult], nanoseconds: UInt64) {
        let duplicates = results.count { $0.duplicate }
        let refused = results.count { $0.refusal != nil }
        batchesCommitted += 1
        rowsInserted += results.count - duplicates - refused
        self.duplicates += duplicates
        largestBatch = max(largestBatch, results.count)
        commitLatency.record(nanoseconds: nanoseconds)
    }
}

/// Which messages `ChatPersistence.messages` reads.
public struct MessageQuery: Sendable, Hashable {
    /// Which way a page goes from its start.
    public enum Direction: Sendable, Hashable {
        /// Ascending, seq > the value (`since_seq`).
        case after(Int64)
        /// Newest first, seq < the value (`before_seq`).
        case before(Int64)
    }

    public var direction: Direction
    /// Messages per page (operations fold into them and do not count); clamped to 0…100 000.
    public var limit: Int
    /// Each message also lists its edits, oldest first.
    public var includeEdits: Bool

    public init(_ direction: Direction, limit: Int, includeEdits: Bool = false) {
        self.direction = direction
        self.limit = limit
        self.includeEdits = includeEdits
    }

    /// The seq the page starts from: its `next` when it is empty.
    public var start: Int64 {
        switch direction {
        case .after(let seq), .before(let seq): return seq
        }
    }
}

/// An edit of a message, in `MessageView.edits`.
public struct MessageEdit: Sendable, Hashable {
    public var seq: Int64
    public var timestampMs: Int64
    /// "" (and `meta` nil) once a delete erased it.
    public var text: String
    public var meta: String?

    public init(seq: Int64, timestampMs: Int64, text: String, meta: String?) {
        self.seq = seq
        self.timestampMs = timestampMs
        self.text = text
        self.meta = meta
    }
}

/// The peers that reacted to a message with one key, in the order they did.
public struct MessageReaction: Sendable, Hashable {
    public var key: String
    public var peers: [PeerID]

    public init(key: String, peers: [PeerID]) {
        self.key = key
        self.peers = peers
    }
}

/// A message as it is now: its latest edit's text and meta, its tombstone, its reactions.
public struct MessageView: Sendable, Hashable {
    public var seq: Int64
    public var sender: PeerID
    public var clientID: String
    /// The latest edit's text (or the original); "" for a tombstone.
    public var text: String
    public var meta: String?
    public var timestampMs: Int64
    public var replyTo: Int64?
    /// The latest edit's ts, nil when never edited.
    public var editedTs: Int64?
    /// When a delete made it a tombstone.
    public var deletedTs: Int64?
    /// By key (ascending), each key's peers in the order they reacted.
    public var reactions: [MessageReaction]
    /// Its edits, oldest first, when the query asked for them; nil otherwise.
    public var edits: [MessageEdit]?

    public init(seq: Int64, sender: PeerID, clientID: String, text: String, meta: String?, timestampMs: Int64,
                replyTo: Int64? = nil, editedTs: Int64? = nil, deletedTs: Int64? = nil, reactions: [MessageReaction] = [],
                edits: [MessageEdit]? = nil) {
        self.seq = seq
        self.sender = sender
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestampMs = timestampMs
        self.replyTo = replyTo
        self.editedTs = editedTs
        self.deletedTs = deletedTs
        self.reactions = reactions
        self.edits = edits
    }

    public var deleted: Bool { deletedTs != nil }
}

/// One page of `ChatPersistence.messages`.
public struct MessagePage: Sendable, Hashable {
    public var room: RoomID
    /// In the query's direction.
    public var messages: [MessageView]
    /// More messages follow in that direction.
    public var hasMore: Bool
    /// The next page's start: the last message's seq (the highest for `after`, the lowest for
    /// `before`), or the query's start when the page is empty.
    public var next: Int64
    /// The room's latest seq, operations included.
    public var lastSeq: Int64

    public init(room: RoomID, messages: [MessageView], hasMore: Bool, next: Int64, lastSeq: Int64) {
        self.room = room
        self.messages = messages
        self.hasMore = hasMore
        self.next = next
        self.lastSeq = lastSeq
    }
}

/// Where an inbox page continues: after the room with this activity time and id.
public struct InboxCursor: Sendable, Hashable {
    public var lastTs: Int64
    public var room: RoomID

    public init(lastTs: Int64, room: RoomID) {
        self.lastTs = lastTs
        self.room = room
    }
}

/// Which rooms `ChatPersistence.inbox` reads.
public struct InboxQuery: Sendable, Hashable {
    public var limit: Int
    /// Continue after this room; nil for the first page.
    public var after: InboxCursor?

    public init(limit: Int, after: InboxCursor? = nil) {
        self.limit = limit
        self.after = after
    }
}

/// A room's newest message, for the inbox.
public struct InboxMessage: Sendable, Hashable {
    public var seq: Int64
    public var sender: PeerID
    /// Its latest edit's text.
    public var text: String
    public var timestampMs: Int64

    public init(seq: Int64, sender: PeerID, text: String, timestampMs: Int64) {
        self.seq = seq
        self.sender = sender
        self.text = text
        self.timestampMs = timestampMs
    }
}

/// One room of a peer's inbox.
public struct InboxRoom: Sendable, Hashable {
    public var room: RoomID
    /// The room's highest seq, operations included.
    public var lastSeq: Int64
    /// The ts of its latest row.
    public var lastTs: Int64
    /// Its newest message that is not deleted.
    public var lastMessage: InboxMessage?
    public var readSeq: Int64
    /// Messages (not operations) from others past `readSeq` that are not deleted.
    public var unread: Int64

    public init(room: RoomID, lastSeq: Int64, lastTs: Int64, lastMessage: InboxMessage?, readSeq: Int64, unread: Int64) {
        self.room = room
        self.lastSeq = lastSeq
        self.lastTs = lastTs
        self.lastMessage = lastMessage
        self.readSeq = readSeq
        self.unread = unread
    }
}

/// One page of `ChatPersistence.inbox`.
public struct InboxPage: Sendable, Hashable {
    public var rooms: [InboxRoom]
    public var hasMore: Bool
    /// Where the next page starts; nil on the last page.
    public var next: InboxCursor?

    public init(rooms: [InboxRoom], hasMore: Bool, next: InboxCursor?) {
        self.rooms = rooms
        self.hasMore = hasMore
        self.next = next
    }
}
