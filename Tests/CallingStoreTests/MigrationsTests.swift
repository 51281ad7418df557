import CallingCore
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
                       ["chat_messages", "rooms", "read_markers", "api_keys", "calls", "call_stats", "meters", "webhook_deliveries", "seats", "token_bans",
                        "chat_reactions", "chat_room_peers"])
        XCTAssertTrue(strict.allSatisfy { $0.1 == 1 }, "\(strict)")
        // STRICT really refuses a wrongly typed value.
        XCTAssertThrowsError(try store.sync { try $0.run("INSERT INTO rooms (room_id, last_seq) VALUES ('r', 'not a number')") })
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

    /// Rows as the server wrote them before 005: two rooms of three messages and a read marker.
    private func writeRowsOfVersion4(_ db: SQLiteConnection) throws {
        try db.transaction(.immediate) {
            for room in ["a", "b"] {
                try db.run("INSERT INTO rooms (room_id, last_seq) VALUES (?1, 3)", [.text(room)])
                for seq in 1...3 {
                    try db.run(
                        "INSERT INTO chat_messages (room_id, seq, sender, client_id, text, meta, ts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        [.text(room), .integer(Int64(seq)), .text("alice"), .text("c\(seq)"), .text("hi \(room) \(seq)"),
                         seq == 2 ? .text(#"{"k":1}"#) : .null, .integer(1_700_000_000_000 + Int64(seq))])
                }
            }
            try db.run("INSERT INTO read_markers (room_id, peer_id, seq, updated_ms) VALUES ('a', 'bob', 2, 5)")
        }
    }

    private static let allChatRows = "SELECT room_id, seq, sender, client_id, text, meta, ts FROM chat_messages ORDER BY room_id, seq"

    private func chatRows(_ db: SQLiteConnection) throws -> [String] {
        try db.query(Self.allChatRows) { row in
            (0..<7).map { row.isNull($0) ? "NULL" : row.text($0) }.joined(separator: "|")
        }
    }

    /// 005 rebuilds chat_messages as a WITHOUT ROWID table: rows written under the old schema must
    /// come through unchanged, and every constraint of 001 must still hold on the new table.
    func testChatMessagesRebuiltWithoutRowidKeepRowsAndConstraints() throws {
        let path = try makeDatabasePath()
        let bundled = try Migrator.bundled()
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        try Migrator(migrations: bundled.migrations.filter { $0.version < 5 }).migrate(db)
        XCTAssertEqual(try db.userVersion(), 4)
        try writeRowsOfVersion4(db)
        let before = try chatRows(db)
        XCTAssertEqual(before.count, 6)
        XCTAssertEqual(try db.count("SELECT wr FROM pragma_table_list WHERE name = 'chat_messages'"), 0)

        XCTAssertEqual(try Migrator(migrations: bundled.migrations.filter { $0.version <= 5 }).migrate(db),
                       ["005_chat_without_rowid"])
        XCTAssertEqual(try chatRows(db), before, "every row and column kept")
        XCTAssertEqual(try db.count("SELECT wr FROM pragma_table_list WHERE name = 'chat_messages'"), 1, "WITHOUT ROWID")
        XCTAssertEqual(try db.count("SELECT strict FROM pragma_table_list WHERE name = 'chat_messages'"), 1, "STRICT")
        XCTAssertEqual(try db.count("SELECT count(*) FROM sqlite_schema WHERE name = 'chat_messages_clustered'"), 0)
        XCTAssertEqual(try db.queryFirst("PRAGMA integrity_check") { $0.text(0) }, "ok")
        XCTAssertEqual(try db.count("SELECT count(*) FROM pragma_foreign_key_check"), 0)
        XCTAssertEqual(try db.count("SELECT count(*) FROM read_markers"), 1, "other tables untouched")
        // The history query reads the clustered key, not a second index.
        let plan = try db.query("EXPLAIN QUERY PLAN SELECT seq FROM chat_messages WHERE room_id = 'a' AND seq > 1 ORDER BY seq") {
            $0.text(3)
        }
        XCTAssertEqual(plan, ["SEARCH chat_messages USING PRIMARY KEY (room_id=? AND seq>?)"])

        func insert(_ room: String, _ seq: Int64, _ sender: String, _ clientID: String) throws {
            try db.run("INSERT INTO chat_messages (room_id, seq, sender, client_id, text, ts) VALUES (?1, ?2, ?3, ?4, 'x', 1)",
                       [.text(room), .integer(seq), .text(sender), .text(clientID)])
        }
        XCTAssertThrowsError(try insert("nowhere", 1, "alice", "new"), "foreign key to rooms")
        XCTAssertThrowsError(try insert("a", 3, "alice", "new"), "primary key (room_id, seq)")
        XCTAssertThrowsError(try insert("a", 4, "alice", "c1"), "unique (room_id, sender, client_id)")
        XCTAssertThrowsError(try insert("a", 0, "alice", "new"), "CHECK (seq > 0)")
        XCTAssertThrowsError(try db.run("INSERT INTO chat_messages (room_id, seq, sender, client_id, text, ts) VALUES ('a', 4, 'alice', 'n', 'x', 'soon')"),
                             "STRICT")
        XCTAssertThrowsError(try db.run("INSERT INTO chat_messages (room_id, seq, sender, client_id, ts) VALUES ('a', 4, 'alice', 'n', 1)"),
                             "text NOT NULL")
        try insert("a", 4, "alice", "new")
        XCTAssertEqual(try db.count("SELECT count(*) FROM chat_messages"), 7, "a valid row still goes in")
    }

    /// 006 numbers the rooms and keys chat_messages by (room_no, seq) and (room_no, sender,
    /// client_id): rows written before must come through unchanged with their room's number, every
    /// constraint but the foreign key must hold, and the store must carry on from them.
    func testChatMessagesKeyedByRoomNumberKeepRowsAndConstraints() throws {
        let path = try makeDatabasePath()
        let bundled = try Migrator.bundled()
        let old = try SQLiteConnection(path: path)
        try Migrator(migrations: bundled.migrations.filter { $0.version < 5 }).migrate(old)
        try writeRowsOfVersion4(old)
        XCTAssertEqual(try Migrator(migrations: bundled.migrations.filter { $0.version <= 5 }).migrate(old),
                       ["005_chat_without_rowid"])
        let before = try chatRows(old)
        XCTAssertEqual(before.count, 6)
        old.close()

        let store = try ChatStore.open(path: path)
        defer { store.close() }
        XCTAssertEqual(store.migrationsAppliedAtOpen, ["006_chat_room_numbers", "007_calls_by_room_newest", "008_seats", "009_token_bans",
                                                         "010_webhook_claims", "011_chat_operations"])
        try store.sync { db in
            XCTAssertEqual(try chatRows(db), before, "every row and column kept")
            XCTAssertEqual(try db.query("SELECT room_id, room_no FROM rooms ORDER BY room_id") { "\($0.text(0))=\($0.int64(1))" },
                           ["a=1", "b=2"], "numbered in the order the rooms were created")
            XCTAssertEqual(try db.count("SELECT count(*) FROM chat_messages AS m JOIN rooms AS r USING (room_no) WHERE m.room_id <> r.room_id"),
                           0, "each row carries its room's number")
            XCTAssertEqual(try db.count("SELECT wr FROM pragma_table_list WHERE name = 'chat_messages'"), 1, "WITHOUT ROWID")
            XCTAssertEqual(try db.count("SELECT strict FROM pragma_table_list WHERE name = 'chat_messages'"), 1, "STRICT")
            XCTAssertEqual(try db.count("SELECT count(*) FROM sqlite_schema WHERE name = 'chat_messages_numbered'"), 0)
            XCTAssertEqual(try db.queryFirst("PRAGMA integrity_check") { $0.text(0) }, "ok")
            XCTAssertEqual(try db.count("SELECT count(*) FROM pragma_foreign_key_check"), 0)
            XCTAssertEqual(try db.count("SELECT count(*) FROM read_markers"), 1, "other tables untouched")
            // The history query reads the clustered key, not a second index.
            let plan = try db.query("EXPLAIN QUERY PLAN SELECT seq FROM chat_messages WHERE room_no = 1 AND seq > 1 ORDER BY seq") {
                $0.text(3)
            }
            XCTAssertEqual(plan, ["SEARCH chat_messages USING PRIMARY KEY (room_no=? AND seq>?)"])

            func insert(_ roomNo: Int64, _ seq: Int64, _ sender: String, _ clientID: String) throws {
                try db.run("INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, ts) VALUES (?1, ?2, 'a', ?3, ?4, 'x', 1)",
                           [.integer(roomNo), .integer(seq), .text(sender), .text(clientID)])
            }
            XCTAssertThrowsError(try insert(1, 3, "alice", "new"), "primary key (room_no, seq)")
            XCTAssertThrowsError(try insert(1, 4, "alice", "c1"), "unique (room_no, client_id, sender)")
            XCTAssertThrowsError(try insert(1, 0, "alice", "new"), "CHECK (seq > 0)")
            XCTAssertThrowsError(try db.run("INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, ts) VALUES (1, 4, 'a', 'alice', 'n', 'x', 'soon')"),
                                 "STRICT")
            XCTAssertThrowsError(try db.run("INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, ts) VALUES (1, 4, 'a', 'alice', 'n', 1)"),
                                 "text NOT NULL")
            XCTAssertThrowsError(try db.run("INSERT INTO chat_messages (seq, room_id, sender, client_id, text, ts) VALUES (4, 'a', 'alice', 'n', 'x', 1)"),
                                 "room_no NOT NULL")
            XCTAssertThrowsError(try db.run("UPDATE rooms SET room_no = 1 WHERE room_id = 'b'"), "unique room_no")
            XCTAssertThrowsError(try db.run("UPDATE rooms SET room_no = 0 WHERE room_id = 'b'"), "CHECK (room_no > 0)")
        }

        // The store carries on from the migrated rows: the next seq, a retry of an old client_id,
        // and a new room numbered after the migrated ones.
        let appended = Collector<Result<ChatAppendResult, StoreError>>()
        let done = DispatchGroup()
        for (room, clientID) in [("a", "c9"), ("a", "c1"), ("c", "c1")] {
            done.enter()
            store.appendChat(ChatDraft(room: RoomID(room), sender: PeerID("alice"), clientID: clientID, text: "after",
                                       meta: nil, timestampMs: 9)) {
                appended.append($0)
                done.leave()
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let results = try appended.all.map { try $0.get() }
        XCTAssertEqual(results.map(\.message.seq), [4, 1, 1])
        XCTAssertEqual(results.map(\.duplicate), [false, true, false])
        XCTAssertEqual(results[1].message.text, "hi a 1")
        XCTAssertEqual(try store.sync { try $0.count("SELECT room_no FROM rooms WHERE room_id = 'c'") }, 3)
    }
}
