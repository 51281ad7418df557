import XCTest

@testable import CallingBench

final class ScenariosTests: XCTestCase {
    func test_generator_cost_is_the_difference_of_two_snapshots_per_delivered_frame() {
        let start = GeneratorCost.Snapshot(time: 1_000_000_000, generatorCPU: 2.0, targetCPU: 5.0,
                                           syscalls: .init(sends: 10, receives: 20, waits: 30), delivered: 100)
        let end = GeneratorCost.Snapshot(time: 3_000_000_000, generatorCPU: 3.0, targetCPU: 5.5,
                                         syscalls: .init(sends: 1_010, receives: 520, waits: 280), delivered: 1_100)
        let cost = GeneratorCost(from: start, to: end)
        XCTAssertEqual(cost.frames, 1_000)
        XCTAssertEqual(cost.seconds, 2, accuracy: 1e-12)
        XCTAssertEqual(cost.generatorMicroseconds, 1_000, accuracy: 1e-9, "1 CPU second over 1,000 frames")
        XCTAssertEqual(cost.targetMicroseconds, 500, accuracy: 1e-9)
        XCTAssertEqual(cost.generatorBusy, 0.5, accuracy: 1e-12, "1 CPU second in 2 s of wall clock")
        XCTAssertEqual(cost.sendsPerFrame, 1, accuracy: 1e-12)
        XCTAssertEqual(cost.receivesPerFrame, 0.5, accuracy: 1e-12)
        XCTAssertEqual(cost.waitsPerFrame, 0.25, accuracy: 1e-12)
        XCTAssertEqual(cost.targetBusy, 0.25, accuracy: 1e-12, "0.5 CPU seconds in 2 s of wall clock")
        XCTAssertTrue(cost.text.hasPrefix("1000 frames in 2.00 s; CPU per frame: generator 1000.00 µs (50 % of its core), target 500.00 µs (25 % of its core);"), cost.text)
    }

    func test_a_phase_without_frames_reports_no_per_frame_figures() {
        let snapshot = GeneratorCost.Snapshot(time: 5, generatorCPU: 1, targetCPU: 1, syscalls: .init(), delivered: 7)
        let cost = GeneratorCost(from: snapshot, to: snapshot)
        XCTAssertEqual(cost.frames, 0)
        XCTAssertTrue(cost.generatorMicroseconds.isNaN)
        XCTAssertTrue(cost.sendsPerFrame.isNaN)
    }

    func test_a_paced_schedule_hands_each_side_a_run_of_consecutive_frames_in_turn() {
        let runs = PacedSchedule(start: 1_000, rate: 250_000, sides: 4, run: 3)
        XCTAssertEqual((0..<15).map(runs.side), [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0], "every side in turn, then the first again")
        XCTAssertEqual((0..<4).map(runs.due), [1_000, 5_000, 9_000, 13_000], "4 µs apart at 250,000 frames/s, runs or not")
        let roundRobin = PacedSchedule(start: 0, rate: 1_000, sides: 3, run: 1)
        XCTAssertEqual((0..<7).map(roundRobin.side), [0, 1, 2, 0, 1, 2, 0])
        XCTAssertEqual(roundRobin.due(3), 3_000_000)
        let longerThanThePhase = PacedSchedule(start: 0, rate: 1_000, sides: 2, run: 100)
        XCTAssertEqual(Set((0..<100).map(longerThanThePhase.side)), [0], "a run longer than the phase leaves one side sending")
        // Due times come from the frame's index, not by adding the interval up: six additions of
        // 333.33… ns come to 1,999.99… and would put frame 6 a nanosecond early.
        let fine = PacedSchedule(start: 0, rate: 3_000_000, sides: 20, run: 32)
        XCTAssertEqual(fine.due(6), 2_000)
        XCTAssertEqual(fine.due(3_000_000), 1_000_000_000)
    }
}
