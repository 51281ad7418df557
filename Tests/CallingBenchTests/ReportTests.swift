import XCTest

@testable import CallingBench

final class ReportTests: XCTestCase {
    private func round(server: Double, baseline: Double, verified: Int, error: String? = nil, stolen: [Double?] = [0, 0]) -> ScenarioResult {
        var result = ScenarioResult(name: "relay", parameters: "10 pairs")
        result.figures = [Figure(name: "saturated relay rate", unit: "frames/s", server: server, baseline: baseline, higherIsBetter: true),
                          Figure(name: "server only", unit: "µs", server: server / 1_000, baseline: nil, higherIsBetter: false)]
        result.verified = ["server frames relayed in order": verified]
        result.generatorShare = ["server": server / 1e6]
        result.notes = ["server saturated: \(Int(server))"]
        result.stolen = stolen
        result.error = error
        return result
    }

    func test_rounds_combine_into_medians_and_the_median_of_their_own_ratios() throws {
        // The host slows down over the rounds: the medians of the two columns (1.2M ÷ 2.0M = 0.6)
        // are not what any round measured, the median of the rounds' ratios (0.75) is.
        let rounds = [round(server: 1.5e6, baseline: 2.0e6, verified: 10, stolen: [0.01, 0.2]),
                      round(server: 1.2e6, baseline: 1.6e6, verified: 20),
                      round(server: 0.9e6, baseline: 2.1e6, verified: 30, stolen: [0.05, 0])]
        let combined = ScenarioResult.combining(rounds)
        let rate = try XCTUnwrap(combined.figures.first)
        XCTAssertEqual(rate.server, 1.2e6)
        XCTAssertEqual(rate.baseline, 2.0e6)
        XCTAssertEqual(rate.roundRatios, [0.75, 0.75, 0.9e6 / 2.1e6])
        XCTAssertEqual(try XCTUnwrap(rate.ratio), 0.75, accuracy: 1e-12)
        XCTAssertEqual(combined.figures[1].server, 1_200)
        XCTAssertNil(combined.figures[1].baseline)
        XCTAssertNil(combined.figures[1].ratio, "no baseline in any round: no ratio")
        XCTAssertEqual(combined.verified["server frames relayed in order"], 60)
        XCTAssertEqual(try XCTUnwrap(combined.generatorShare["server"]), 1.2, accuracy: 1e-12)
        XCTAssertEqual(combined.stolen, [0.05, 0.2], "the most any round saw")
        XCTAssertEqual(combined.notes, ["round 1: server saturated: 1500000", "round 2: server saturated: 1200000",
                                        "round 3: server saturated: 900000"])
        XCTAssertEqual(combined.parameters, "10 pairs; median of 3 of 3 rounds")
        XCTAssertTrue(combined.text.contains("ratio 0.75× (rounds 0.75, 0.75, 0.43)"), combined.text)
        let figures = try XCTUnwrap(combined.json["figures"] as? [[String: Any]])
        XCTAssertEqual(figures[0]["round_ratios"] as? [Double], [0.75, 0.75, 0.9e6 / 2.1e6])
    }

    func test_a_failed_round_is_named_and_left_out() throws {
        let rounds = [round(server: 1.0e6, baseline: 2.0e6, verified: 10),
                      round(server: 0, baseline: 0, verified: 0, error: "timed out"),
                      round(server: 1.2e6, baseline: 2.0e6, verified: 30)]
        let combined = ScenarioResult.combining(rounds)
        XCTAssertNil(combined.error)
        XCTAssertEqual(combined.figures[0].server, 1.1e6, "the mean of the two middle values of an even count")
        XCTAssertEqual(combined.figures[0].roundRatios, [0.5, 0.6])
        XCTAssertEqual(combined.verified["server frames relayed in order"], 40)
        XCTAssertEqual(combined.notes.first, "round 2 failed: timed out")
        XCTAssertEqual(combined.parameters, "10 pairs; median of 2 of 3 rounds")
    }

    func test_when_every_round_failed_the_result_failed_and_one_round_is_kept_as_it_is() {
        let failed = ScenarioResult.combining([round(server: 0, baseline: 0, verified: 0, error: "a"),
                                               round(server: 0, baseline: 0, verified: 0, error: "b")])
        XCTAssertEqual(failed.error, "a")
        XCTAssertTrue(failed.figures.isEmpty)
        XCTAssertEqual(failed.notes, ["round 1 failed: a", "round 2 failed: b"])
        let single = round(server: 1.0e6, baseline: 2.0e6, verified: 10)
        let kept = ScenarioResult.combining([single])
        XCTAssertEqual(kept.parameters, "10 pairs")
        XCTAssertTrue(kept.figures[0].roundRatios.isEmpty)
        XCTAssertEqual(kept.figures[0].ratio, 0.5)
    }

    func test_median() {
        XCTAssertTrue(Stats.median([]).isNaN)
        XCTAssertEqual(Stats.median([3]), 3)
        XCTAssertEqual(Stats.median([3, 1, 2]), 2)
        XCTAssertEqual(Stats.median([4, 1, 3, 2]), 2.5)
    }
}
