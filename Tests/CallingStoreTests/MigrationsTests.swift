import CallingStore
import CallingTesting
import Dispatch
import Foundation
import XCTest

final class MigrationsTests: XCTestCase {
    func testBundledMigrationsAreFoundAtRunTime() throws {
        let migrator = try Migrator.bundled()
        XCTAssertEqual(migrator.migrations.first?.name, "001_chat")
        XCTAssertEqual(migrator.latestVersion, migrator.migrations.count)
    }

    func testOpenAppliesEveryMigrationOnceAndRecordsUserVersion() throws {
        let path = try makeDatabasePath()
        let latest = try Migrator.bundled().latestVersion

        let first = try ChatStore.open(path: path)
        XCTAssertEqual(first.migrationsAppliedAtOpen.first, "001_chat")
        XCTAssertEqual(first.migrationsAppliedAtOpen.count, latest)
        XCTAssertEqual(try first.sync { try $0.userVersion() }, latest)
        XCTAssertEqual(try first.migrate(), [], "already current")
        first.close()

        let reopened = try ChatStore.open(path: path)
        defer { reopened.close() }
        XCTAssertEqual(reopened.migrationsAppliedAtOpen, [])
        XCTAssertEqual(try reopened.sync { try $0.userVersion() }, latest)
    }

    func testChatTablesAreStrict() throws {
        let store = try makeStore()
        let strict = try store.sync { db in
            try db.query("SELECT name, strict FROM pragma_table_list WHERE schema = 'main' AND name NOT LIKE 'sqlite_%'") {
                ($0.text(0), $0.int64(1))
            }
        }
        XCTAssertEqual(Set(strict.map(\.0)),
                       ["chat_messages", "rooms", "read_markers", "api_keys", "calls", "call_stats", "meters", "webhook_deliveries"])
        XCTAssertTrue(strict.allSatisfy { $0.1 == 1 }, "\(strict)")
        // STRICT really refuses a wrongly typed value.
        XCTAssertThrowsError(try store.sync { try $0.run("INSERT INTO rooms VALUES ('r', 'not a number')") })
    }

    func testMigrateWithoutMigrateOnOpenReportsWhatItApplied() throws {
        let store = try ChatStore.open(path: try makeDatabasePath(), options: .init(migrateOnOpen: false))
        defer { store.close() }
        XCTAssertEqual(store.migrationsAppliedAtOpen, [])
        XCTAssertEqual(try store.sync { try $0.userVersion() }, 0)
        XCTAssertEqual(try store.migrate().first, "001_chat")
        XCTAssertEqual(try store.migrate(), [])
    }

    func testAFailingMigrationIsRolledBackAndEarlierOnesStay() throws {
        let directory = try makeTemporaryDirectory()
        try "CREATE TABLE a (x INTEGER) STRICT;".write(to: directory.appendingPathComponent("001_a.sql"), atomically: true, encoding: .utf8)
        try "CREATE TABLE b (x INTEGER) STRICT; THIS IS NOT SQL;"
            .write(to: directory.appendingPathComponent("002_b.sql"), atomically: true, encoding: .utf8)
        try "not a migration".write(to: directory.appendingPathComponent("README"), atomically: true, encoding: .utf8)
        let db = try SQLiteConnection(path: try makeDatabasePath())
        let migrator = try Migrator(directory: directory)
        XCTAssertEqual(migrator.migrations.map(\.name), ["001_a", "002_b"])

        XCTAssertThrowsError(try migrator.migrate(db)) { error in
            guard case .failed(let name, _)? = error as? MigrationError else { return XCTFail("\(error)") }
            XCTAssertEqual(name, "002_b")
        }
        XCTAssertEqual(try db.userVersion(), 1)
        XCTAssertEqual(try db.count("SELECT count(*) FROM sqlite_schema WHERE name = 'a'"), 1)
        XCTAssertEqual(try db.count("SELECT count(*) FROM sqlite_schema WHERE name = 'b'"), 0, "half of 002 was not left behind")
    }

    func testBadSetsOfMigrationsAreRefused() {
        func migration(_ version: Int) -> Migration { Migration(version: version, name: "\(version)", sql: "") }
        XCTAssertThrowsError(try Migrator(migrations: [migration(1), migration(3)])) {
            XCTAssertEqual($0 as? MigrationError, .missingVersion(2))
        }
        XCTAssertThrowsError(try Migrator(migrations: [migration(2)])) {
            XCTAssertEqual($0 as? MigrationError, .missingVersion(1))
        }
        XCTAssertThrowsError(try Migrator(migrations: [migration(1), migration(1)])) {
            XCTAssertEqual($0 as? MigrationError, .duplicateVersion(1))
        }
        XCTAssertNoThrow(try Migrator(migrations: [migration(2), migration(1)]), "order of the input does not matter")
    }

    func testBadFileNamesAreRefused() throws {
        for bad in ["1_short.sql", "001.sql", "001_.sql", "abc_name.sql", "001-name.sql"] {
            let directory = try makeTemporaryDirectory()
            try "".write(to: directory.appendingPathComponent(bad), atomically: true, encoding: .utf8)
            XCTAssertThrowsError(try Migrator(directory: directory), bad) {
                XCTAssertEqual($0 as? MigrationError, .invalidFileName(bad))
            }
        }
    }

    func testADatabaseFromANewerBuildIsRefused() throws {
        let path = try makeDatabasePath()
        let db = try SQLiteConnection(path: path)
        try db.setUserVersion(999)
        XCTAssertThrowsError(try ChatStore.open(path: path)) { error in
            guard case .databaseNewer(999, _)? = error as? MigrationError else { return XCTFail("\(error)") }
        }
    }

    func testTwoProcessesMigratingAtOnceApplyEachMigrationOnce() throws {
        let path = try makeDatabasePath()
        let migrator = try Migrator.bundled()
        let applied = Collector<[String]>()
        let failures = Collector<String>()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            do {
                let db = try SQLiteConnection(path: path)
                applied.append(try migrator.migrate(db))
            } catch {
                failures.append("\(error)")
            }
        }
        XCTAssertEqual(failures.all, [])
        XCTAssertEqual(applied.all.flatMap { $0 }.sorted(), migrator.migrations.map(\.name))
    }
}
