import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import XCTest

/// The libpq driver and the PostgreSQL migrations, on a real server (TestPostgres).
final class PostgresConnectionTests: XCTestCase {
    func testQueriesBindTextParametersAndReadNULL() throws {
        let db = try PostgresConnection(url: try SharedPostgres.database())
        let rows = try db.query("SELECT $1::text, $2::bigint + 1, NULL::text", ["it's \"quoted\" \\ {a,b}", "41"])
        XCTAssertEqual(rows.rows, [["it's \"quoted\" \\ {a,b}", "42", nil]])
        // The same SQL again runs the statement prepared the first time.
        XCTAssertEqual(try db.query("SELECT $1::text, $2::bigint + 1, NULL::text", ["x", "1"]).rows, [["x", "2", nil]])
    }

    func testAnErrorCarriesItsSQLStateAndTheConnectionStaysUsable() throws {
        let db = try PostgresConnection(url: try SharedPostgres.database())
        try db.execute("CREATE TABLE t (k text PRIMARY KEY)")
        try db.query("INSERT INTO t VALUES ($1)", ["a"])
        XCTAssertThrowsError(try db.query("INSERT INTO t VALUES ($1)", ["a"])) { error in
            let failure = error as? PostgresError
            XCTAssertEqual(failure?.sqlState, "23505", "unique_violation")
            XCTAssertEqual(failure?.connectionLost, false)
            XCTAssertEqual(failure?.isRetryable, false)
        }
        XCTAssertEqual(try db.query("SELECT count(*) FROM t").rows, [["1"]])
    }

    func testATransactionRollsBackWhenItsBodyThrows() throws {
        let db = try PostgresConnection(url: try SharedPostgres.database())
        try db.execute("CREATE TABLE t (k text)")
        struct Abort: Error {}
        XCTAssertThrowsError(try db.transaction {
            try db.query("INSERT INTO t VALUES ($1)", ["gone"])
            throw Abort()
        })
        XCTAssertEqual(try db.query("SELECT count(*) FROM t").rows, [["0"]])
    }

    func testAnUnreachableServerIsARetryableConnectionError() {
        XCTAssertThrowsError(try PostgresConnection(url: "postgresql://calling@127.0.0.1:1/none?connect_timeout=2")) { error in
            let failure = error as? PostgresError
            XCTAssertEqual(failure?.connectionLost, true)
            XCTAssertEqual(failure?.isRetryable, true)
            XCTAssertEqual(failure?.storeError.isRetryable, true)
        }
    }

    func testMigrateAppliesTheSharedSchemaOnceAndRecordsItsVersion() throws {
        let db = try PostgresConnection(url: try SharedPostgres.database())
        let migrator = try Migrator.bundled(.postgres)
        let all = ["001_chat", "002_access", "003_calls", "004_webhooks", "005_chat_operations"]
        XCTAssertEqual(migrator.migrations.map(\.name), all)
        XCTAssertEqual(try db.schemaVersion(), 0)
        XCTAssertEqual(try migrator.migrate(db), all)
        XCTAssertEqual(try db.schemaVersion(), 5)
        XCTAssertEqual(try migrator.migrate(db), [], "already current")
        let tables = try db.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename").rows.map { $0[0] }
        XCTAssertEqual(tables, ["api_keys", "call_stats", "calling_schema_version", "calls", "chat_messages", "chat_reactions",
                                "chat_room_peers", "meters", "read_markers", "rooms", "token_bans", "webhook_calls", "webhook_outbox",
                                "webhook_seats"])
    }

    func testServersMigratingAtOnceApplyEachMigrationExactlyOnce() throws {
        let url = try SharedPostgres.database()
        let applied = Collector<[String]>()
        let failures = Collector<String>()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            do {
                applied.append(try Migrator.bundled(.postgres).migrate(try PostgresConnection(url: url)))
            } catch {
                failures.append("\(error)")
            }
        }
        XCTAssertEqual(failures.all, [])
        XCTAssertEqual(applied.all.flatMap { $0 }.sorted(), ["001_chat", "002_access", "003_calls", "004_webhooks", "005_chat_operations"],
                       "each applied by one of the four, found applied by the others")
    }

    func testADatabaseMigratedByANewerBuildIsRefused() throws {
        let db = try PostgresConnection(url: try SharedPostgres.database())
        try Migrator.bundled(.postgres).migrate(db)
        try db.execute("UPDATE calling_schema_version SET version = 99")
        XCTAssertThrowsError(try Migrator.bundled(.postgres).migrate(db)) {
            XCTAssertEqual($0 as? MigrationError, .databaseNewer(databaseVersion: 99, latestKnown: 5))
        }
    }
}
