import CallingStore
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
}
