import CallingCore
import XCTest

final class LatencyHistogramTests: XCTestCase {
    func test_observations_land_in_the_first_bucket_that_holds_them_and_render_cumulatively() {
        var histogram = LatencyHistogram(boundsMicros: [100, 1_000])
        histogram.record(micros: 100)  // on the bound: le="0.0001"
        histogram.record(micros: 101)
        histogram.record(nanoseconds: 2_000_000)  // 2 ms: +Inf
        XCTAssertEqual(histogram.counts, [1, 1, 1])
        XCTAssertEqual(histogram.prometheus(name: "x_seconds", help: "h"), """
            # HELP x_seconds h
            # TYPE x_seconds histogram
            x_seconds_bucket{le="0.0001"} 1
            x_seconds_bucket{le="0.001"} 2
            x_seconds_bucket{le="+Inf"} 3
            x_seconds_sum 0.002201
            x_seconds_count 3

            """)
    }

    func test_negative_durations_count_as_zero() {
        var histogram = LatencyHistogram(boundsMicros: [10])
        histogram.record(micros: -5)
        XCTAssertEqual(histogram.counts, [1, 0])
        XCTAssertEqual(histogram.sumMicros, 0)
    }
}
