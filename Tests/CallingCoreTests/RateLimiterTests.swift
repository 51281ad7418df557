import CallingCore
import XCTest

/// A connection's frame budget: `burst` at once, then `perSecond`. Time is passed by hand.
final class RateLimiterTests: XCTestCase {
    private let start: Millis = 1_700_000_000_000

    private func admitted(_ limiter: inout RateLimiter, count: Int, at now: Millis) -> Int {
        (0..<count).filter { _ in limiter.admit(now: now) }.count
    }

    func test_a_burst_passes_then_frames_are_refused() {
        var limiter = RateLimiter(perSecond: 10, burst: 5)
        XCTAssertEqual(admitted(&limiter, count: 5, at: start), 5)
        XCTAssertFalse(limiter.admit(now: start))
        XCTAssertFalse(limiter.admit(now: start))
    }

    func test_the_budget_refills_at_the_configured_rate() {
        var limiter = RateLimiter(perSecond: 10, burst: 5)
        XCTAssertEqual(admitted(&limiter, count: 5, at: start), 5)
        XCTAssertFalse(limiter.admit(now: start + 99), "0.99 of a frame is not a frame")
        XCTAssertTrue(limiter.admit(now: start + 100), "one frame per 100 ms at 10/s")
        XCTAssertFalse(limiter.admit(now: start + 100))
        XCTAssertEqual(admitted(&limiter, count: 10, at: start + 400), 3, "three more 100 ms slices")
    }

    func test_refused_attempts_do_not_waste_accrued_time() {
        var limiter = RateLimiter(perSecond: 10, burst: 1)
        XCTAssertTrue(limiter.admit(now: start))
        XCTAssertFalse(limiter.admit(now: start + 50))
        XCTAssertTrue(limiter.admit(now: start + 100), "the half frame earned by +50 ms still counts")
    }

    func test_refill_is_capped_at_the_burst() {
        var limiter = RateLimiter(perSecond: 10, burst: 5)
        XCTAssertEqual(admitted(&limiter, count: 5, at: start), 5)
        XCTAssertEqual(admitted(&limiter, count: 100, at: start + 3_600_000), 5, "an idle hour does not bank 36 000 frames")
    }

    func test_a_clock_that_steps_back_mints_no_frames() {
        var limiter = RateLimiter(perSecond: 10, burst: 2)
        XCTAssertEqual(admitted(&limiter, count: 2, at: start + 1_000), 2)
        XCTAssertFalse(limiter.admit(now: start))
        XCTAssertFalse(limiter.admit(now: start + 1_000), "stepping back and forward again is not elapsed time")
        XCTAssertTrue(limiter.admit(now: start + 1_100))
    }

    func test_consecutive_drops_are_counted_and_reset_by_an_admitted_frame() {
        var limiter = RateLimiter(perSecond: 1, burst: 1)
        XCTAssertTrue(limiter.admit(now: start))
        XCTAssertEqual(limiter.consecutiveDrops, 0)
        for expected in 1...3 {
            XCTAssertFalse(limiter.admit(now: start))
            XCTAssertEqual(limiter.consecutiveDrops, expected)
        }
        XCTAssertTrue(limiter.admit(now: start + 1_000))
        XCTAssertEqual(limiter.consecutiveDrops, 0, "a flood must be uninterrupted to close the connection")
        XCTAssertFalse(limiter.admit(now: start + 1_000))
        XCTAssertEqual(limiter.consecutiveDrops, 1)
    }

    func test_a_burst_below_one_still_admits_one_frame() {
        var limiter = RateLimiter(perSecond: 5, burst: 0)
        XCTAssertEqual(limiter.burst, 1)
        XCTAssertTrue(limiter.admit(now: start))
        XCTAssertFalse(limiter.admit(now: start))
    }

    func test_limiters_are_independent_values() {
        var first = RateLimiter(perSecond: 1, burst: 1)
        var second = first
        XCTAssertTrue(first.admit(now: start))
        XCTAssertTrue(second.admit(now: start), "each connection has its own budget")
    }
}
