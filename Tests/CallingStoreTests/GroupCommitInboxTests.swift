import CallingLogging
import CallingStore
import XCTest

final class GroupCommitInboxTests: XCTestCase {
    func testOnlyTheFirstItemAfterADrainSchedulesOne() {
        let inbox = GroupCommitInbox<Int>()
        XCTAssertEqual(inbox.admit(1), .queuedAndSchedule)
        XCTAssertEqual(inbox.admit(2), .queued)
        XCTAssertEqual(inbox.admit(3), .queued)
        XCTAssertEqual(inbox.takeForDrain().items, [1, 2, 3])
        XCTAssertEqual(inbox.admit(4), .queuedAndSchedule, "the drain took its batch: the next item needs a new one")
        XCTAssertEqual(inbox.takeForDrain().items, [4])
        XCTAssertEqual(inbox.takeForDrain().items, [], "a second drain block finds nothing left")
    }

    func testCloseRefusesLaterItemsAndKeepsThePendingOnes() {
        let inbox = GroupCommitInbox<Int>()
        XCTAssertEqual(inbox.admit(1), .queuedAndSchedule)
        XCTAssertFalse(inbox.isClosed)
        inbox.close()
        XCTAssertTrue(inbox.isClosed)
        XCTAssertEqual(inbox.admit(2), .refused)
        XCTAssertEqual(inbox.takeRemaining(), [1])
        XCTAssertEqual(inbox.takeForDrain().items, [], "the drain still queued at close finds nothing")
    }

    func testConcurrentAdmissionsScheduleOnceAndLoseNothing() {
        let inbox = GroupCommitInbox<Int>()
        let schedules = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 1_000) { index in
            if inbox.admit(index) == .queuedAndSchedule { schedules.withLock { $0 += 1 } }
        }
        XCTAssertEqual(schedules.withLock { $0 }, 1)
        XCTAssertEqual(inbox.takeForDrain().items.sorted(), Array(0..<1_000))
    }
}
