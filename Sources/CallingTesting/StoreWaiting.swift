import CallingCore
import CallingStore
import Dispatch
import Foundation

// Blocking forms of the chat stores' completion-style calls, for tests of either store (SQLite's
// ChatStore and PostgresChatStore behind ChatPersistence).

/// A wait that ran out.
public struct TimedOut: Error, CustomStringConvertible {
    public var what: String
    public var description: String { "timed out waiting for \(what)" }

    public init(what: String) {
        self.what = what
    }
}

/// Thread-safe list the completions append to.
public final class Collector<Element: Sendable>: Sendable {
    private let items = Locked<[Element]>([])

    public init() {}

    public func append(_ item: Element) {
        items.withLock { $0.append(item) }
    }

    public var all: [Element] {
        items.withLock { $0 }
    }
}

/// Starts a completion-style store call and waits for its result.
public func awaitResult<Value: Sendable>(
    _ what: String = #function, timeout: TimeInterval = 10,
    _ start: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
) throws -> Value {
    let result = Collector<Result<Value, StoreError>>()
    let done = DispatchSemaphore(value: 0)
    start { outcome in
        result.append(outcome)
        done.signal()
    }
    guard done.wait(timeout: .now() + timeout) == .success, let outcome = result.all.first else {
        throw TimedOut(what: what)
    }
    return try outcome.get()
}

extension ChatPersistence {
    /// `appendChat`, waiting for the ack.
    public func appendAndWait(_ draft: ChatDraft) throws -> ChatAppendResult {
        try awaitResult { appendChat(draft, completion: $0) }
    }

    /// Appends `count` messages from `sender` to `room`, one after the other.
    @discardableResult
    public func appendMany(_ count: Int, room: RoomID, sender: PeerID, prefix: String = "m") throws -> [ChatAppendResult] {
        try (0..<count).map { index in
            try appendAndWait(ChatDraft(
                room: room, sender: sender, clientID: "\(prefix)-\(sender)-\(index)",
                text: "message \(index)", timestampMs: 1_000 + Int64(index)
            ))
        }
    }

    public func historyAndWait(room: RoomID, sinceSeq: Int64, limit: Int) throws -> HistoryPage {
        try awaitResult { history(room: room, sinceSeq: sinceSeq, limit: limit, completion: $0) }
    }

    public func markReadAndWait(room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64) throws -> ReadMarkerResult {
        try awaitResult { markRead(room: room, peer: peer, seq: seq, nowMs: nowMs, completion: $0) }
    }

    public func summaryAndWait(room: RoomID, peer: PeerID) throws -> RoomSummary {
        try awaitResult { roomSummary(room: room, peer: peer, completion: $0) }
    }

    public func messagesAndWait(room: RoomID, _ query: MessageQuery) throws -> MessagePage {
        try awaitResult { messages(room: room, query: query, completion: $0) }
    }

    public func inboxAndWait(peer: PeerID, _ query: InboxQuery) throws -> InboxPage {
        try awaitResult { inbox(peer: peer, query: query, completion: $0) }
    }
}
