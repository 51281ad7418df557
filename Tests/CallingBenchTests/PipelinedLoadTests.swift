import XCTest

@testable import CallingBench

final class PipelinedLoadTests: XCTestCase {
    func test_the_target_cpu_of_a_phase_is_per_acked_chat_and_a_share_of_one_core() {
        let cost = PipelinedLoad.TargetCPU(cpuSeconds: 0.75, seconds: 5, chats: 25_000)
        XCTAssertEqual(cost.microsecondsPerChat, 30, accuracy: 1e-9, "0.75 CPU seconds over 25,000 chats")
        XCTAssertEqual(cost.busy, 0.15, accuracy: 1e-12, "0.75 CPU seconds in 5 s of wall clock")
        XCTAssertEqual(cost.text, "30.0 µs CPU per acked chat, 15 % of a core")
    }

    func test_a_phase_without_chats_or_time_reports_no_figures() {
        XCTAssertTrue(PipelinedLoad.TargetCPU(cpuSeconds: 0.1, seconds: 1, chats: 0).microsecondsPerChat.isNaN)
        XCTAssertTrue(PipelinedLoad.TargetCPU(cpuSeconds: 0.1, seconds: 0, chats: 10).busy.isNaN)
    }
}
