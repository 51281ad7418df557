import CallingCore
import XCTest

@testable import CallingStore

/// The call lifecycle in SQL: registered → ongoing on a join inside the window, registered → ended
/// when nobody joined in time.
final class CallRepositoryTests: XCTestCase {
    private func call(_ id: String, room: String = "r1", createdMs: Int64 = 1_000) -> CallRecord {
        CallRecord(call: CallID(id), room: RoomID(room), agentID: "agent-7", metadata: #"{"order":42}"#,
                   dynamicVariables: #"{"customer_name":"Ada"}"#, meterLimitS: 600, meterWarningS: 60,
                   createdMs: createdMs, expiresMs: createdMs + 3_600_000)
    }

    func testACallReadsBackAsStored() throws {
        let store = try makeStore()
        let stored = call("c1")
        let read = try store.sync { db in
            try CallRepository(db: db).insert(stored)
            return try CallRepository(db: db).find("c1")
        }
        XCTAssertEqual(read, stored)
        XCTAssertNil(try store.sync { try CallRepository(db: $0).find("nope") })
    }

    func testAJoinInsideTheWindowMakesTheRoomsRegisteredCallsOngoing() throws {
        let store = try makeStore()
        try store.sync { db in
            let calls = CallRepository(db: db)
            try calls.insert(call("c1", room: "r1", createdMs: 1_000))
            try calls.insert(call("c2", room: "r2", createdMs: 1_000))
            XCTAssertEqual(try calls.markJoined(room: "r1", nowMs: 5_000, createdAfterMs: 500), ["c1"])
            let joined = try XCTUnwrap(calls.find("c1"))
            XCTAssertEqual(joined.state, .ongoing)
            XCTAssertEqual(joined.joinedMs, 5_000)
            XCTAssertEqual(try calls.find("c2")?.state, .registered, "another room's call is untouched")
            XCTAssertEqual(try calls.markJoined(room: "r1", nowMs: 6_000, createdAfterMs: 500), [], "a second join changes nothing")
            XCTAssertEqual(try calls.find("c1")?.joinedMs, 5_000, "joined_ms is the first join")
        }
    }

    func testAnEmptiedRoomEndsItsOngoingCallsOnly() throws {
        let store = try makeStore()
        try store.sync { db in
            let calls = CallRepository(db: db)
            try calls.insert(call("live", room: "r1", createdMs: 1_000))
            try calls.insert(call("other", room: "r2", createdMs: 1_000))
            XCTAssertEqual(try calls.markJoined(room: "r1", nowMs: 2_000, createdAfterMs: 0), ["live"])
            XCTAssertEqual(try calls.markJoined(room: "r2", nowMs: 2_000, createdAfterMs: 0), ["other"])
            try calls.insert(call("later", room: "r1", createdMs: 3_000))
            XCTAssertEqual(try calls.endOngoing(room: "r1", nowMs: 4_000, reason: "last_peer_left"), ["live"])
            let ended = try XCTUnwrap(calls.find("live"))
            XCTAssertEqual(ended.state, .ended)
            XCTAssertEqual(ended.endReason, "last_peer_left")
            XCTAssertEqual(ended.endedMs, 4_000)
            XCTAssertEqual(try calls.find("later")?.state, .registered, "a registered call keeps its join window")
            XCTAssertEqual(try calls.find("other")?.state, .ongoing, "another room's call is untouched")
            XCTAssertEqual(try calls.endOngoing(room: "r1", nowMs: 5_000, reason: "x"), [], "an ended call stays as it ended")
        }
    }

    func testNobodyJoiningInTimeEndsTheCallAndALateJoinCannotReviveIt() throws {
        let store = try makeStore()
        try store.sync { db in
            let calls = CallRepository(db: db)
            try calls.insert(call("old", createdMs: 1_000))
            try calls.insert(call("fresh", createdMs: 9_000))
            // Window 5 s, now 8 s: `old` is past its deadline, `fresh` is not.
            XCTAssertEqual(try calls.markJoined(room: "r1", nowMs: 8_000, createdAfterMs: 3_000), ["fresh"],
                           "a call past its window is left for the sweep, not revived")
            let ended = try calls.expireUnjoined(createdAtOrBeforeMs: 3_000, nowMs: 8_000, reason: "error_user_not_joined")
            XCTAssertEqual(ended.map(\.call), ["old"])
            XCTAssertEqual(ended.first?.state, .ended)
            XCTAssertEqual(ended.first?.endReason, "error_user_not_joined")
            XCTAssertEqual(ended.first?.endedMs, 8_000)
            XCTAssertEqual(try calls.find("fresh")?.state, .ongoing, "an ongoing call never expires")
            XCTAssertEqual(try calls.expireUnjoined(createdAtOrBeforeMs: 20_000, nowMs: 20_000, reason: "x"), [])
        }
    }

    func testTheLiveCallOfARoomIsItsNewestNotEndedOne() throws {
        let store = try makeStore()
        try store.sync { db in
            let calls = CallRepository(db: db)
            try calls.insert(call("first", createdMs: 1_000))
            try calls.insert(call("second", createdMs: 2_000))
            XCTAssertEqual(try calls.live(room: "r1")?.call, "second")
            XCTAssertEqual(try calls.endLive(room: "r1", nowMs: 3_000, reason: "consultation_ended"), ["first", "second"])
            XCTAssertNil(try calls.live(room: "r1"))
            XCTAssertEqual(try calls.find("second")?.endReason, "consultation_ended")
            XCTAssertNil(try calls.live(room: "elsewhere"))
        }
    }

    /// Every join asks for its room's live call: the lookup walks the room's index backwards and
    /// stops at the first row, the tie-break on `call_id` included, with no temporary B-tree to
    /// sort it (migration 007), and a same-millisecond tie goes to the larger call id.
    func testTheLiveCallLookupReadsTheRoomIndexInOrder() throws {
        let store = try makeStore()
        try store.sync { db in
            let plan = try db.query("EXPLAIN QUERY PLAN \(CallRepository.liveSQL)", [.text("r1")]) { $0.text(3) }
            XCTAssertEqual(plan, ["SEARCH calls USING INDEX calls_by_room_newest (room_id=?)"])
            let calls = CallRepository(db: db)
            try calls.insert(call("b", createdMs: 2_000))
            try calls.insert(call("c", createdMs: 2_000))
            try calls.insert(call("a", createdMs: 2_000))
            XCTAssertEqual(try calls.live(room: "r1")?.call, "c")
        }
    }

    func testADuplicateCallIDIsRefused() throws {
        let store = try makeStore()
        try store.sync { db in
            try CallRepository(db: db).insert(call("c1"))
            XCTAssertThrowsError(try CallRepository(db: db).insert(call("c1")))
        }
    }
}
