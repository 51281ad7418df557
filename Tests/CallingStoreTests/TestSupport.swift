import CallingCore
import CallingStore
import Dispatch
import Foundation
import XCTest

// Helpers for this target only. They live here rather than in CallingTesting because they are about
// SQLite files and completion handlers, which no other target's tests need.

/// SQLite result codes the tests assert on (the test target does not import the C module).
enum SQLiteCode {
    static let error: Int32 = 1
    static let busy: Int32 = 5
    static let cantOpen: Int32 = 14
    static let constraint: Int32 = 19
    static let misuse: Int32 = 21
    static let constraintUnique: Int32 = 2067
}

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
}

extension XCTestCase {
    /// A fresh directory for this test's database files, deleted (with the WAL and shm files) after it.
    func makeTemporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("calling-store-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    /// A path for a database file that does not exist yet.
    func makeDatabasePath(_ name: String = "chat.sqlite") throws -> String {
        try makeTemporaryDirectory().appendingPathComponent(name).path
    }

    /// A store on a fresh file, closed after the test.
    func makeStore(options: ChatStore.Options = .init()) throws -> ChatStore {
        let store = try ChatStore.open(path: try makeDatabasePath(), options: options)
        addTeardownBlock { store.close() }
        return store
    }
}

/// Thread-safe list the completions append to.
final class Collector<Element: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `items` is only touched while `lock` is held.
    private let lock = NSLock()
    private var items: [Element] = []

    func append(_ item: Element) {
        lock.lock()
        items.append(item)
        lock.unlock()
    }

    var all: [Element] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}

/// Starts a completion-style store call and waits for its result.
func awaitResult<Value: Sendable>(
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
    func appendAndWait(_ draft: ChatDraft) throws -> ChatAppendResult {
        try awaitResult { appendChat(draft, completion: $0) }
    }

    /// Appends `count` messages from `sender` to `room`, one after the other.
    @discardableResult
    func appendMany(_ count: Int, room: RoomID, sender: PeerID, prefix: String = "m") throws -> [ChatAppendResult] {
        try (0..<count).map { index in
            try appendAndWait(ChatDraft(
                room: room, sender: sender, clientID: "\(prefix)-\(sender)-\(index)",
                text: "message \(index)", timestampMs: 1_000 + Int64(index)
            ))
        }
    }

    func historyAndWait(room: RoomID, sinceSeq: Int64, limit: Int) throws -> HistoryPage {
        try awaitResult { history(room: room, sinceSeq: sinceSeq, limit: limit, completion: $0) }
    }

    func markReadAndWait(room: RoomID, peer: PeerID, seq: Int64, nowMs: Int64) throws -> ReadMarkerResult {
        try awaitResult { markRead(room: room, peer: peer, seq: seq, nowMs: nowMs, completion: $0) }
    }

    func summaryAndWait(room: RoomID, peer: PeerID) throws -> RoomSummary {
        try awaitResult { roomSummary(room: room, peer: peer, completion: $0) }
    }

}

extension ChatStore {
    /// Holds the store queue until `release` is signalled, and returns once the queue is held. Lets a
    /// test pile up work deterministically behind a busy writer.
    func holdQueue(until release: DispatchSemaphore) throws {
        let held = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            self.sync { _ in
                held.signal()
                release.wait()
            }
        }
        guard held.wait(timeout: .now() + 10) == .success else { throw TimedOut(what: "store queue") }
    }
}

extension SQLiteConnection {
    /// Number of rows a COUNT query returns, for assertions.
    func count(_ sql: String, _ values: [SQLiteValue] = []) throws -> Int64 {
        try queryFirst(sql, values) { $0.int64(0) } ?? -1
    }
}
