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
}
