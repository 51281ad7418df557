import CallingCore
import XCTest

final class LoopWatchdogTests: XCTestCase {
    private func sample(_ time: Double, progress: Int64, callbacks: Int64, cpu: Double?) -> LoopWatchdog.Sample {
        .init(time: time, progress: progress, callbacks: callbacks, cpuSeconds: cpu)
    }

    func test_an_idle_loop_is_healthy() {
        var watchdog = LoopWatchdog(windowSeconds: 2)
        for step in 0..<40 {
            let t = Double(step) * 0.25
            XCTAssertEqual(watchdog.observe(sample(t, progress: Int64(step), callbacks: 0, cpu: t * 0.01)), .healthy)
        }
    }

    func test_a_busy_loop_doing_real_work_is_healthy() {
        var watchdog = LoopWatchdog(windowSeconds: 2)
        for step in 0..<40 {
            let t = Double(step) * 0.25
            XCTAssertEqual(watchdog.observe(sample(t, progress: Int64(step), callbacks: Int64(step) * 5_000, cpu: t)), .healthy)
        }
    }

    func test_a_loop_that_stops_draining_is_stalled_once_per_window() {
        var watchdog = LoopWatchdog(windowSeconds: 2)
        var verdicts: [LoopWatchdog.Verdict] = []
        for step in 0..<20 {
            verdicts.append(watchdog.observe(sample(Double(step) * 0.25, progress: 1, callbacks: 0, cpu: nil)))
        }
        let stalls = verdicts.filter { if case .stalled = $0 { return true } else { return false } }
        XCTAssertEqual(stalls.count, 2, "\(verdicts)")
        if case .stalled(let seconds)? = stalls.first { XCTAssertGreaterThan(seconds, 2) }
    }

    func test_a_loop_burning_a_core_without_socket_events_is_spinning() {
        var watchdog = LoopWatchdog(windowSeconds: 2)
        var verdict = LoopWatchdog.Verdict.healthy
        for step in 0...8 where verdict == .healthy {
            let t = Double(step) * 0.25
            // The inbox still drains (ticks), 98 % of a core, 10 callbacks a second.
            verdict = watchdog.observe(sample(t, progress: Int64(step), callbacks: Int64(t * 10), cpu: t * 0.98))
        }
        guard case .spinning(let seconds, let share, let rate) = verdict else { return XCTFail("\(verdict)") }
        XCTAssertGreaterThanOrEqual(seconds, 2)
        XCTAssertEqual(share, 0.98, accuracy: 0.01)
        XCTAssertLessThan(rate, 50)
    }

    func test_without_a_cpu_clock_only_stalls_are_judged() {
        var watchdog = LoopWatchdog(windowSeconds: 1)
        for step in 0..<20 {
            XCTAssertEqual(watchdog.observe(sample(Double(step) * 0.25, progress: Int64(step), callbacks: 0, cpu: nil)), .healthy)
        }
    }
}
