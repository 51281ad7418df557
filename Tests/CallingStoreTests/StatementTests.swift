import CallingStore
import XCTest

final class StatementTests: XCTestCase {
    private func makeTable() throws -> SQLiteConnection {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT NULL, b BLOB NULL) STRICT")
        return db
    }

    func testTextRoundTripsExactlyIncludingEmptyEmojiAndNUL() throws {
        let db = try makeTable()
        let samples = ["", "plain", "héllo 👋🏽 مرحبا", "a\u{0}b", String(repeating: "x", count: 100_000)]
        for (id, text) in samples.enumerated() {
            try db.run("INSERT INTO t (id, s) VALUES (?1, ?2)", [.integer(Int64(id)), .text(text)])
        }
        XCTAssertEqual(try db.query("SELECT s FROM t ORDER BY id") { $0.text(0) }, samples)
        // The empty string is stored as text, not as NULL.
        XCTAssertEqual(try db.queryFirst("SELECT typeof(s) FROM t WHERE id = 0") { $0.text(0) }, "text")
    }

    func testTextBoundInPlaceRoundTripsAndIsClearedAfterwards() throws {
        let db = try makeTable()
        let insert = try db.prepare("INSERT INTO t (id, s) VALUES (?1, ?2)")
        let samples = ["", "short", "héllo 👋🏽 مرحبا", "a\u{0}b", String(repeating: "x", count: 100_000)]
        for (id, text) in samples.enumerated() {
            // `withText` leaves the statement reset, ready for the next row's binds.
            try insert.bind(.integer(Int64(id)), at: 1)
            try insert.withText(text, at: 2) { () throws(SQLiteError) in
                while try insert.step() {}
            }
        }
        XCTAssertEqual(try db.query("SELECT s FROM t ORDER BY id") { $0.text(0) }, samples)
        XCTAssertEqual(try db.queryFirst("SELECT typeof(s) FROM t WHERE id = 0") { $0.text(0) }, "text")
        // Outside `withText` the parameter is NULL again: the statement keeps no pointer to the string.
        try insert.bind(.integer(99), at: 1)
        while try insert.step() {}
        XCTAssertEqual(try db.queryFirst("SELECT s IS NULL FROM t WHERE id = 99") { $0.int64(0) }, 1)
        // A failing step inside the body is reported as thrown.
        insert.reset()
        try insert.bind(.integer(0), at: 1)
        XCTAssertThrowsError(try insert.withText("again", at: 2) { () throws(SQLiteError) in
            while try insert.step() {}
        }, "duplicate primary key")
    }

    func testTextBoundInPlaceFromABufferRoundTrips() throws {
        let db = try makeTable()
        let insert = try db.prepare("INSERT INTO t (id, s) VALUES (?1, ?2), (?3, ?4)")
        let bytes = Array("héllo👋".utf8) + Array("".utf8)
        try bytes.withUnsafeBufferPointer { buffer in
            defer { insert.reset() }
            try insert.bind(.integer(1), at: 1)
            try insert.bindTextInPlace(UnsafeBufferPointer(rebasing: buffer[0..<bytes.count]), at: 2)
            try insert.bind(.integer(2), at: 3)
            try insert.bindTextInPlace(UnsafeBufferPointer(rebasing: buffer[bytes.count..<bytes.count]), at: 4)
            while try insert.step() {}
        }
        XCTAssertEqual(try db.query("SELECT s FROM t ORDER BY id") { $0.optionalText(0) }, ["héllo👋", ""])
    }

    func testNilBindsNullAndReadsBackAsNil() throws {
        let db = try makeTable()
        try db.run("INSERT INTO t (id, s) VALUES (1, ?1)", [SQLiteValue(nil)])
        try db.run("INSERT INTO t (id, s) VALUES (2, ?1)", [SQLiteValue("{}")])
        XCTAssertEqual(try db.query("SELECT s FROM t ORDER BY id") { $0.optionalText(0) }, [nil, "{}"])
        XCTAssertEqual(try db.query("SELECT s FROM t ORDER BY id") { $0.isNull(0) }, [true, false])
    }

    func testBlobsRoundTripIncludingEmpty() throws {
        let db = try makeTable()
        try db.run("INSERT INTO t (id, b) VALUES (1, ?1)", [.blob([0, 1, 2, 255])])
        try db.run("INSERT INTO t (id, b) VALUES (2, ?1)", [.blob([])])
        XCTAssertEqual(try db.query("SELECT b FROM t ORDER BY id") { $0.blob(0) }, [[0, 1, 2, 255], []])
        XCTAssertEqual(try db.queryFirst("SELECT typeof(b) FROM t WHERE id = 2") { $0.text(0) }, "blob")
    }

    func testIntegersAndReals() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        XCTAssertEqual(try db.queryFirst("SELECT ?1", [.integer(Int64.max)]) { $0.int64(0) }, Int64.max)
        XCTAssertEqual(try db.queryFirst("SELECT ?1", [.real(1.5)]) { $0.double(0) }, 1.5)
        XCTAssertNil(try db.queryFirst("SELECT NULL") { $0.optionalInt64(0) } ?? nil)
    }

    func testAMissingOrExtraBindingIsRefusedInsteadOfBecomingNull() throws {
        let db = try makeTable()
        XCTAssertThrowsError(try db.run("INSERT INTO t (id, s) VALUES (?1, ?2)", [.integer(1)])) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.misuse)
        }
        XCTAssertThrowsError(try db.run("INSERT INTO t (id) VALUES (?1)", [.integer(1), .integer(2)]))
        XCTAssertEqual(try db.count("SELECT count(*) FROM t"), 0)
    }

    func testTwoStatementsInOnePrepareAreRefused() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        XCTAssertThrowsError(try db.prepare("SELECT 1; SELECT 2")) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.misuse)
        }
        XCTAssertNoThrow(try db.prepare("SELECT 1;  "))
    }

    func testAStatementOutlivingItsConnectionFailsCleanly() throws {
        let db = try SQLiteConnection(path: try makeDatabasePath())
        let statement = try db.cachedStatement("SELECT 1")
        db.close()
        XCTAssertThrowsError(try statement.step()) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteCode.misuse)
        }
    }
}
