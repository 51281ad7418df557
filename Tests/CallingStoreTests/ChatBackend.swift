import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import Foundation
import Testing

/// The two store implementations (`ChatPersistence`, `AccessPersistence`), for the contract suites' arguments.
enum ChatBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    /// One PostgreSQL server for the whole test run, started on first use; stopped when the process
    /// exits (TestPostgres registers that).
    static let postgresServer: Result<TestPostgres, any Error> = Result { try TestPostgres() }

    /// A fresh, empty store: a new SQLite file, or a new PostgreSQL database.
    func open(maxBatchSize: Int = 1_000) throws -> StoreUnderTest {
        switch self {
        case .sqlite:
            let folder = try TemporaryFolder()
            return try StoreUnderTest(sqlitePath: folder.path + "/chat.sqlite", folder: folder, maxBatchSize: maxBatchSize)
        case .postgres:
            let server = try Self.postgresServer.get()
            return try StoreUnderTest(postgresURL: try server.createDatabase(), maxBatchSize: maxBatchSize)
        }
    }
}

/// A folder for one test's SQLite files, removed when the last store using it is gone.
final class TemporaryFolder: Sendable {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("calling-contract-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A store under test, with what the contract reads behind its back (row counts, the seq column).
final class StoreUnderTest: Sendable {
    enum Location: Sendable {
        /// `folder` is kept alive by every store on the same file (a reopened one too).
        case sqlite(path: String, ChatStore, folder: TemporaryFolder)
        case postgres(url: String, PostgresChatStore)
    }

    let location: Location
    let maxBatchSize: Int

    init(sqlitePath: String, folder: TemporaryFolder, maxBatchSize: Int) throws {
        location = .sqlite(path: sqlitePath, try ChatStore.open(path: sqlitePath, options: .init(maxBatchSize: maxBatchSize)),
                           folder: folder)
        self.maxBatchSize = maxBatchSize
    }

    init(postgresURL: String, maxBatchSize: Int) throws {
        location = .postgres(url: postgresURL, try PostgresChatStore.open(url: postgresURL, options: .init(maxBatchSize: maxBatchSize)))
        self.maxBatchSize = maxBatchSize
    }

    var store: any ChatPersistence {
        switch location {
        case .sqlite(_, let store, _): store
        case .postgres(_, let store): store
        }
    }

    /// The same store as `AccessPersistence` (API keys and kicked tokens).
    var access: any AccessPersistence {
        switch location {
        case .sqlite(_, let store, _): store
        case .postgres(_, let store): store
        }
    }

    /// The same store as `CallPersistence` (calls, stats, meters).
    var calls: any CallPersistence {
        switch location {
        case .sqlite(_, let store, _): store
        case .postgres(_, let store): store
        }
    }

    /// The same store as `WebhookOutbox` (the webhook deliveries still to be sent).
    var outbox: any WebhookOutbox {
        switch location {
        case .sqlite(_, let store, _): store
        case .postgres(_, let store): store
        }
    }

    /// The same database opened again by a new store (the old one should be closed).
    func reopen() throws -> StoreUnderTest {
        switch location {
        case .sqlite(let path, _, let folder): try StoreUnderTest(sqlitePath: path, folder: folder, maxBatchSize: maxBatchSize)
        case .postgres(let url, _): try StoreUnderTest(postgresURL: url, maxBatchSize: maxBatchSize)
        }
    }

    func close() { store.close() }

    /// Rows in `table`.
    func count(_ table: String) throws -> Int64 {
        switch location {
        case .sqlite(_, let store, _):
            return try store.sync { try $0.count("SELECT count(*) FROM \(table)") }
        case .postgres(_, let store):
            return try store.sync { Int64(try $0.query("SELECT count(*) FROM \(table)")[0][0] ?? "") ?? -1 }
        }
    }

    /// The seq column of `room`'s messages, ascending.
    func storedSeqs(_ room: RoomID) throws -> [Int64] {
        switch location {
        case .sqlite(_, let store, _):
            return try store.sync { db in
                try db.query("SELECT seq FROM chat_messages WHERE room_id = ?1 ORDER BY seq", [.text(room.rawValue)]) { $0.int64(0) }
            }
        case .postgres(_, let store):
            return try store.sync { db in
                try db.query("SELECT seq FROM chat_messages WHERE room_id = $1 ORDER BY seq", [room.rawValue]).rows
                    .map { Int64($0[0] ?? "") ?? -1 }
            }
        }
    }

    /// `rooms.last_seq` of `room`; -1 when it has no row.
    func lastSeq(_ room: RoomID) throws -> Int64 {
        switch location {
        case .sqlite(_, let store, _):
            return try store.sync { try $0.count("SELECT last_seq FROM rooms WHERE room_id = ?1", [.text(room.rawValue)]) }
        case .postgres(_, let store):
            return try store.sync { db in
                let rows = try db.query("SELECT last_seq FROM rooms WHERE room_id = $1", [room.rawValue])
                return rows.isEmpty ? -1 : Int64(rows[0][0] ?? "") ?? -1
            }
        }
    }

    /// Holds the store queue until `release` is signalled, and returns once it is held.
    func holdQueue(until release: DispatchSemaphore) throws {
        let held = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            switch self.location {
            case .sqlite(_, let store, _): store.sync { _ in held.signal(); release.wait() }
            case .postgres(_, let store): store.sync { _ in held.signal(); release.wait() }
            }
        }
        guard held.wait(timeout: .now() + 10) == .success else { throw TimedOut(what: "store queue") }
    }
}
