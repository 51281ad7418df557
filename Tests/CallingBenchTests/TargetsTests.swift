import XCTest

@testable import CallingBench

final class MachineTests: XCTestCase {
    func test_each_cpu_line_of_proc_stat_gives_its_stolen_and_total_ticks() {
        let procStat = """
            cpu  300 0 100 1000 10 0 20 50 0 0
            cpu0 100 0 50 600 5 0 10 10 0 0
            cpu1 200 0 50 400 5 0 10 40 0 0
            intr 12345 0 0
            ctxt 999
            """
        XCTAssertEqual(Machine.cpuTicks(procStat: procStat), [
            Machine.CPUTicks(stolen: 10, total: 775), Machine.CPUTicks(stolen: 40, total: 705),
        ], "the cpu summary line and the other counters are not CPUs")
    }

    func test_the_stolen_share_is_per_cpu_between_two_readings() {
        let start = [Machine.CPUTicks(stolen: 10, total: 1_000), Machine.CPUTicks(stolen: 0, total: 1_000)]
        let end = [Machine.CPUTicks(stolen: 30, total: 1_200), Machine.CPUTicks(stolen: 0, total: 1_000)]
        let shares = Machine.stolenShares(from: start, to: end)
        XCTAssertEqual(shares.count, 2)
        XCTAssertEqual(shares[0] ?? .nan, 0.1, accuracy: 1e-12, "20 of 200 ticks")
        XCTAssertNil(shares[1], "a clock that did not move says nothing")
        var result = ScenarioResult(name: "relay", parameters: "")
        result.stolen = [0.1, nil]
        XCTAssertEqual(result.stolenText, "CPU stolen by the host: 0 10 %")
        XCTAssertEqual((result.json["cpu_stolen"] as? [Any])?.count, 2)
    }
}
