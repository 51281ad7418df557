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

    public init(room: RoomID, sender: PeerID, clientID: String, text: String, meta: String? = nil, timestampMs: Int64) {
        self.room = room
        self.sender = sender
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestampMs = timestampMs
    }
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

    public init(
        room: RoomID, seq: Int64, sender: PeerID, clientID: String, text: String, meta: String?, timestampMs: Int64
    ) {
        self.room = room
        self.seq = seq
        self.sender = sender
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestampMs = timestampMs
    }
}

/// The outcome of `ChatStore.appendChat`.
public struct ChatAppendResult: Sendable, Hashable {
    /// The stored message. For a duplicate this is the original: its seq, timestamp, text and meta.
    public var message: ChatRecord
    /// `true` when (room, sender, client_id) was already stored: nothing was written, and the caller should
    /// ack with the original seq but not broadcast the message again.
    public var duplicate: Bool

    public init(message: ChatRecord, duplicate: Bool) {
        self.message = message
        self.duplicate = duplicate
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
        batchesCommitted += 1
        rowsInserted += results.count - duplicates
        self.duplicates += duplicates
        largestBatch = max(largestBatch, results.count)
        commitLatency.record(nanoseconds: nanoseconds)
    }
}
