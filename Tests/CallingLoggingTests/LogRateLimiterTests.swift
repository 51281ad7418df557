import CallingLogging
import Foundation
import XCTest

final class LogRateLimiterTests: XCTestCase {
    func test_first_event_of_a_kind_is_logged_and_the_rest_of_its_interval_counted() {
        var limiter = LogRateLimiter(interval: 10)
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 100), .log(suppressed: 0))
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 100), .suppress)
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 105), .suppress)
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 109.999), .suppress)
        // The interval is over: logged, with the three held back.
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 110), .log(suppressed: 3))
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 111), .suppress)
        // A quiet spell: the count starts over after each line.
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 500), .log(suppressed: 1))
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 600), .log(suppressed: 0))
    }

    func test_kinds_are_limited_separately() {
        var limiter = LogRateLimiter(interval: 10)
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 0), .log(suppressed: 0))
        XCTAssertEqual(limiter.admit(kind: "io_error", now: 1), .log(suppressed: 0))
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 2), .suppress)
        XCTAssertEqual(limiter.admit(kind: "io_error", now: 3), .suppress)
        XCTAssertEqual(limiter.admit(kind: "io_error", now: 4), .suppress)
        XCTAssertEqual(limiter.admit(kind: "disk_full", now: 10), .log(suppressed: 1))
        XCTAssertEqual(limiter.admit(kind: "io_error", now: 11), .log(suppressed: 2))
    }

    func test_an_interval_of_zero_logs_every_event() {
        var limiter = LogRateLimiter(interval: 0)
        for _ in 0..<3 { XCTAssertEqual(limiter.admit(kind: "busy", now: 7), .log(suppressed: 0)) }
    }

    func test_rate_limited_logger_adds_the_suppressed_count_with_a_manual_clock() {
        let handler = MemoryLogHandler()
        let clock = ManualClock()
        let logger = RateLimitedLogger(logger: Logger(label: "store", handler: handler), interval: 10, clock: { clock.now })
        for _ in 0..<5 { logger.log(.error, kind: "disk_full", "store operation failed", ["path": "/d/calling.sqlite"]) }
        XCTAssertEqual(handler.all.count, 1)
        XCTAssertEqual(handler.all[0].metadata, ["path": "/d/calling.sqlite", "suppressed": "0"])
        clock.now = 10
        logger.log(.error, kind: "disk_full", "store operation failed", ["path": "/d/calling.sqlite"])
        XCTAssertEqual(handler.all.count, 2)
        XCTAssertEqual(handler.all[1].metadata["suppressed"], "4")
        XCTAssertEqual(handler.all.map(\.level), [.error, .error])
    }
}

private final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0.0
    var now: Double {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}
