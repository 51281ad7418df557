import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import Foundation

/// One PostgreSQL server for this test target's run (stopped at exit by TestPostgres).
enum SharedPostgres {
    static let server: Result<TestPostgres, any Error> = Result { try TestPostgres() }

    /// A fresh database's URL.
    static func database() throws -> String { try server.get().createDatabase() }
}

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
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

extension PostgresChatStore {
    func appendAndWait(_ draft: ChatDraft) throws -> ChatAppendResult {
        try awaitResult { appendChat(draft, completion: $0) }
    }

    func historyAndWait(room: RoomID, sinceSeq: Int64, limit: Int) throws -> HistoryPage {
        try awaitResult { history(room: room, sinceSeq: sinceSeq, limit: limit, completion: $0) }
    }
}
