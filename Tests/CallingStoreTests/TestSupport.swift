import CallingCore
import CallingStore
import CallingTesting
import Dispatch
import Foundation
import XCTest

// Helpers for this target only: SQLite files and codes. The blocking forms of the store calls, which
// the PostgreSQL tests use too, are in CallingTesting (StoreWaiting.swift).

/// SQLite result codes the tests assert on (the test target does not import the C module).
enum SQLiteCode {
    static let error: Int32 = 1
    static let busy: Int32 = 5
    static let cantOpen: Int32 = 14
    static let constraint: Int32 = 19
    static let misuse: Int32 = 21
    static let constraintUnique: Int32 = 2067
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
