import Glibc
import XCTest

@testable import CallingBench

final class PollerTests: XCTestCase {
    /// The generators must reach 19,000 connections; select() failed past descriptor 1024.
    func test_descriptors_above_FD_SETSIZE_are_reported_readable_with_their_token() throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        try XCTSkipIf(limit.rlim_max < 1_200, "hard open-file limit \(limit.rlim_max) is below 1,200")
        if limit.rlim_cur < 1_200 {
            limit.rlim_cur = limit.rlim_max
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        var pairs: [(Int32, Int32)] = []
        defer { for (a, b) in pairs { close(a); close(b) } }
        while pairs.last.map({ $0.1 }) ?? 0 < 1_100 {
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
            pairs.append((fds[0], fds[1]))
        }
        let poller = try Poller()
        for (index, pair) in pairs.enumerated() { try poller.add(pair.1, token: index, writable: false) }
        XCTAssertEqual(try poller.wait(timeoutNanoseconds: 1_000_000), 0, "nothing written yet")

        let last = pairs.count - 1
        XCTAssertGreaterThan(pairs[last].1, 1_024)
        XCTAssertEqual(write(pairs[last].0, "x", 1), 1)
        let ready = try poller.wait(timeoutNanoseconds: 1_000_000_000)
        XCTAssertEqual(ready, 1)
        XCTAssertEqual(poller.tokens[0], UInt64(last))
        XCTAssertEqual(poller.events[0] & 1, 1, "readable")
        XCTAssertEqual(poller.events[0] & 2, 0, "writability was not asked for")
    }
}
