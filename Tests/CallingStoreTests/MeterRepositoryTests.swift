import CallingCore
import CallingStore
import XCTest

/// Meter state survives closing and reopening the database, and never loses counted time.
final class MeterRepositoryTests: XCTestCase {
    func testAMeterSurvivesReopeningTheDatabase() throws {
        let path = try makeDatabasePath()
        let saved = MeterRecord(room: "r1", startedMs: 1_000, elapsedMs: 42_000, limitS: 600, warningS: 60, state: .running)
        let first = try ChatStore.open(path: path)
        try first.sync { try MeterRepository(db: $0).save(saved) }
        first.close()

        let reopened = try ChatStore.open(path: path)
        defer { reopened.close() }
        XCTAssertEqual(try reopened.sync { try MeterRepository(db: $0).find(room: "r1") }, saved)
        XCTAssertNil(try reopened.sync { try MeterRepository(db: $0).find(room: "r2") })
    }

    func testSavingAgainUpdatesStateButNeverMovesElapsedBackOrStartedForward() throws {
        let store = try makeStore()
        let read = try store.sync { db in
            let meters = MeterRepository(db: db)
            try meters.save(MeterRecord(room: "r1", startedMs: 1_000, elapsedMs: 50_000, limitS: 600, warningS: 60, state: .warning))
            try meters.save(MeterRecord(room: "r1", startedMs: 9_000, elapsedMs: 40_000, limitS: 600, warningS: 60, state: .ended))
            return try meters.find(room: "r1")
        }
        XCTAssertEqual(read, MeterRecord(room: "r1", startedMs: 1_000, elapsedMs: 50_000, limitS: 600, warningS: 60, state: .ended))
    }

    func testDeletingForgetsTheMeter() throws {
        let store = try makeStore()
        try store.sync { db in
            let meters = MeterRepository(db: db)
            try meters.save(MeterRecord(room: "r1", startedMs: 1, elapsedMs: 0, limitS: 10, warningS: 2, state: .running))
            XCTAssertTrue(try meters.delete(room: "r1"))
            XCTAssertFalse(try meters.delete(room: "r1"))
            XCTAssertNil(try meters.find(room: "r1"))
        }
    }
}
