import CallingCore
import CallingStore
import CallingTesting
import Foundation
import XCTest

final class SQLiteConnectionTests: XCTestCase {
    func testOpenUsesWALNormalSyncForeignKeysAndTheBusyTimeout() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath(), options: .init(busyTimeoutMs: 1_234))
        XCTAssertEqual(try db.queryFirst("PRAGMA journal_mode") { $0.text(0) }, "wal")
        XCTAssertEqual(try db.count("PRAGMA synchronous"), 1, "1 is NORMAL")
        XCTAssertEqual(try db.count("PRAGMA foreign_keys"), 1)
        XCTAssertEqual(try db.count("PRAGMA busy_timeout"), 1_234)
    }

    func testTheWALHookSeesEveryCommitAndReplacesTheAutomaticCheckpoint() throws {
        let path = try makeDatabasePath()
        let db = try SQLiteConnection(path: path)
        var reported: [Int] = []
        try db.onCommitToWAL { reported.append($0) }
        try db.execute("CREATE TABLE t (x BLOB NOT NULL) STRICT")
        // 1500 commits of a page-sized row each: far past SQLite's 1000-page automatic checkpoint.
        for _ in 0..<1_500 { try db.run("INSERT INTO t VALUES (?1)", [.blob([UInt8](repeating: 7, count: 4_000))]) }
        XCTAssertEqual(reported.count, 1_501, "one report per commit")
        XCTAssertEqual(reported, reported.sorted(), "nothing checkpointed and restarted the WAL")
        XCTAssertGreaterThan(reported.last ?? 0, 1_500)

        // A passive checkpoint from a second connection lets the next commit start the WAL over.
        let checkpointer = try SQLiteConnection(path: path)
        try checkpointer.checkpointPassive()
        try db.run("INSERT INTO t VALUES (?1)", [.blob([1])])
        XCTAssertLessThan(reported.last ?? .max, 10)
        XCTAssertEqual(try checkpointer.count("SELECT count(*) FROM t"), 1_501)
    }

    func testForeignKeysAreEnforced() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        try db.execute("""
            CREATE TABLE parent (id TEXT NOT NULL PRIMARY KEY) STRICT;
            CREATE TABLE child (parent_id TEXT NOT NULL REFERENCES parent (id)) STRICT;
            """)
        XCTAssertThrowsError(try db.run("INSERT INTO child VALUES ('nobody')")) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.constraint)
        }
    }

    func testAFailedCallCarriesTheCodeAndSQLitesMessage() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        XCTAssertThrowsError(try db.prepare("SELEC 1")) { error in
            let error = error as? SQLiteError
            XCTAssertEqual(error?.code, SQLiteCode.error)
            XCTAssertTrue(error?.message.contains("syntax error") == true, "\(String(describing: error))")
            XCTAssertEqual(error?.sql, "SELEC 1")
        }
        try db.execute("CREATE TABLE t (x TEXT NOT NULL UNIQUE) STRICT")
        try db.run("INSERT INTO t VALUES (?1)", [.text("a")])
        XCTAssertThrowsError(try db.run("INSERT INTO t VALUES (?1)", [.text("a")])) { error in
            let error = error as? SQLiteError
            XCTAssertEqual(error?.code, SQLiteCode.constraint)
            XCTAssertEqual(error?.extendedCode, SQLiteCode.constraintUnique)
            XCTAssertTrue(error?.message.contains("UNIQUE") == true, "\(String(describing: error))")
        }
        // A failed statement is reset: the cached statement works again with other values.
        try db.run("INSERT INTO t VALUES (?1)", [.text("b")])
        XCTAssertEqual(try db.count("SELECT count(*) FROM t"), 2)
    }

    func testOpeningAnImpossiblePathFailsWithAMessage() throws {
        let path = try makeTemporaryDirectory().appendingPathComponent("missing/dir/db.sqlite").path
        XCTAssertThrowsError(try SQLiteConnection(path: path)) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.cantOpen)
            XCTAssertFalse((error as? SQLiteError)?.message.isEmpty ?? true)
        }
    }

    func testStatementsAreCachedPerSQLText() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        let before = db.cachedStatementCount
        for value in 0..<5 { _ = try db.queryFirst("SELECT ?1 + 1", [.integer(Int64(value))]) { $0.int64(0) } }
        XCTAssertEqual(db.cachedStatementCount, before + 1)
        XCTAssertEqual(try db.queryFirst("SELECT ?1 + 1", [.integer(41)]) { $0.int64(0) }, 42)
        XCTAssertTrue(try db.cachedStatement("SELECT ?1 + 1") === db.cachedStatement("SELECT ?1 + 1"))
        _ = try db.queryFirst("SELECT 2") { $0.int64(0) }
        XCTAssertEqual(db.cachedStatementCount, before + 2)
    }

    func testStatementsAreCachedPerKeyIdentity() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        let plus = SQLiteStatementKey("SELECT ?1 + 1")
        let same = SQLiteStatementKey("SELECT ?1 + 1")
        XCTAssertTrue(try db.cachedStatement(plus) === db.cachedStatement(plus))
        XCTAssertFalse(try db.cachedStatement(plus) === db.cachedStatement(same), "by identity, not by text")
        for value in Int64(0)..<3 {
            let statement = try db.cachedStatement(plus)
            try statement.bind([.integer(value)])
            XCTAssertTrue(try statement.step())
            XCTAssertEqual(statement.int64(0), value + 1)
        }
        db.close()
        XCTAssertThrowsError(try db.cachedStatement(plus), "closed")
    }

    func testTransactionCommitsOnReturnAndRollsBackOnThrow() throws {
        struct Boom: Error {}
        let db = try SQLiteConnection(path: try makeDatabasePath())
        try db.execute("CREATE TABLE t (x INTEGER NOT NULL) STRICT")
        try db.transaction(.immediate) { try db.run("INSERT INTO t VALUES (1)") }
        XCTAssertThrowsError(try db.transaction(.immediate) {
            try db.run("INSERT INTO t VALUES (2)")
            throw Boom()
        })
        XCTAssertFalse(db.isInTransaction)
        XCTAssertEqual(try db.query("SELECT x FROM t") { $0.int64(0) }, [1])
    }

    func testAWriterBlockedPastTheBusyTimeoutGetsARetryableBusyError() throws {
        let path = try makeDatabasePath()
        let holder = try SQLiteConnection(path: path)
        let waiter = try SQLiteConnection(path: path, options: .init(busyTimeoutMs: 100))
        try holder.execute("BEGIN IMMEDIATE")
        let started = Date()
        XCTAssertThrowsError(try waiter.execute("BEGIN IMMEDIATE")) { error in
            guard let error = error as? SQLiteError else { return XCTFail("\(error)") }
            XCTAssertEqual(error.code, SQLiteCode.busy)
            XCTAssertTrue(error.isBusy)
            XCTAssertTrue(StoreError.sqlite(error).isRetryable)
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.09, "waited for the busy timeout first")
        try holder.execute("ROLLBACK")
        try waiter.execute("BEGIN IMMEDIATE; ROLLBACK;")
    }

    func testCloseIsIdempotentAndLaterUseIsAnError() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        _ = try db.queryFirst("SELECT 1") { $0.int64(0) }
        db.close()
        db.close()
        XCTAssertFalse(db.isOpen)
        XCTAssertThrowsError(try db.run("SELECT 1")) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.misuse)
        }
    }

    func testUserVersionRoundTrips() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        XCTAssertEqual(try db.userVersion(), 0)
        try db.setUserVersion(7)
        XCTAssertEqual(try db.userVersion(), 7)
    }

    // MARK: online backup

    /// Chats keep being committed by the store's own connection while a second connection (as the
    /// `backup` command does) copies the file: the copy is whole, and each room's rows are exactly
    /// seq 1...n with rooms.last_seq = n, i.e. one commit's state, never a torn one.
    func testBackupWhileChatsAreWrittenIsAConsistentGapFreeSnapshot() throws {
        let directory = try makeTemporaryDirectory()
        let path = directory.appendingPathComponent("live.sqlite").path
        let store = try ChatStore.open(path: path)
        defer { store.close() }
        let stop = Collector<Bool>()
        let committed = Collector<Int64>()
        let writer = Thread {
            var n = 0
            while stop.all.isEmpty {
                n += 1
                let done = DispatchSemaphore(value: 0)
                for room in ["r1", "r2", "r3"] {
                    store.appendChat(ChatDraft(room: RoomID(room), sender: "alice", clientID: "c\(n)", text: String(repeating: "x", count: 200),
                                               timestampMs: Int64(n))) { result in
                        if case .success(let stored) = result { committed.append(stored.message.seq) }
                        if room == "r3" { done.signal() }
                    }
                }
                done.wait()
            }
        }
        writer.start()
        while committed.all.count < 300 { usleep(5_000) }

        let copies = (1...3).map { directory.appendingPathComponent("backup-\($0).sqlite").path }
        let source = try SQLiteConnection(path: path)
        defer { source.close() }
        for copy in copies {
            XCTAssertGreaterThan(try source.backup(to: copy), 0)
            usleep(20_000)
        }
        stop.append(true)
        while !writer.isFinished { usleep(1_000) }

        var sizes: [Int64] = []
        for copy in copies {
            XCTAssertFalse(FileManager.default.fileExists(atPath: copy + ".partial"))
            let backup = try SQLiteConnection(path: copy, options: .init(readOnly: true))
            defer { backup.close() }
            XCTAssertEqual(try backup.query("PRAGMA integrity_check") { $0.text(0) }, ["ok"])
            XCTAssertEqual(try backup.userVersion(), try source.userVersion())
            let rooms = try backup.query("SELECT room_id, last_seq FROM rooms ORDER BY room_id") { ($0.text(0), $0.int64(1)) }
            XCTAssertFalse(rooms.isEmpty)
            for (room, lastSeq) in rooms {
                let seqs = try backup.query("SELECT seq FROM chat_messages WHERE room_id = ?1 ORDER BY seq", [.text(room)]) { $0.int64(0) }
                XCTAssertEqual(seqs, Array((0..<Int64(seqs.count)).map { $0 + 1 }), "room \(room): gap-free from 1")
                XCTAssertEqual(Int64(seqs.count), lastSeq, "room \(room): every seq handed out is in the copy")
            }
            sizes.append(try backup.queryFirst("SELECT count(*) FROM chat_messages") { $0.int64(0) } ?? 0)
        }
        XCTAssertEqual(sizes, sizes.sorted(), "later copies hold more")
        XCTAssertLessThan(sizes.first ?? 0, Int64(committed.all.count), "the copies were taken while writes went on")
    }

    func testBackupToAnUnwritablePlaceFailsAndLeavesNothing() throws {
        let source = try SQLiteConnection(path: try makeDatabasePath())
        defer { source.close() }
        try source.execute("CREATE TABLE t (x INTEGER) STRICT; INSERT INTO t VALUES (1);")
        XCTAssertThrowsError(try source.backup(to: "/nonexistent-dir/backup.sqlite"))
    }
}
