import CallingStore
import CallingTesting
import Foundation
import XCTest

final class AfterAppendCompletionsTests: XCTestCase {
    func testRunCallsTheBodyAtTheSameStackDepthEveryTime() {
        // Kept as a closure in `Locked` and read with `withLock { $0 }`, the body came back wrapped in
        // two more reabstraction thunks on every read: one more pair of frames per run.
        let hook = AfterAppendCompletions()
        let depths = Collector<Int>()
        hook.set { depths.append(Thread.callStackReturnAddresses.count) }
        for _ in 0..<30 { hook.run() }
        XCTAssertEqual(depths.all.count, 30)
        XCTAssertEqual(Set(depths.all).count, 1, "depths \(depths.all)")
    }

    func testRunWithoutABodyDoesNothingAndSetReplacesTheBody() {
        let hook = AfterAppendCompletions()
        hook.run()
        let log = Collector<String>()
        hook.set { log.append("first") }
        hook.run()
        hook.set { log.append("second") }
        hook.run()
        XCTAssertEqual(log.all, ["first", "second"])
    }
}
