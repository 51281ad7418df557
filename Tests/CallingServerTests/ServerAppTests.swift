import CallingCore
import CallingTesting
import Foundation
import Glibc
import Synchronization
import XCTest

@testable import CallingServer

/// Process-level behaviour of the wired server: the watchdog and the peer capacity.
final class ServerAppTests: XCTestCase {
    func test_watchdog_reports_a_stalled_service_loop() async throws {
        let stalls = Mutex<[TimeInterval]>([])
        let server = try ServerHarness(configure: {
            $0.watchdogSeconds = 1
            $0.tickMs = 50
        }, onStall: { seconds in stalls.withLock { $0.append(seconds) } })
        defer { server.shutdown() }
        // Healthy: nothing reported while the loop drains its inbox.
        try await Task.sleep(nanoseconds: 1_500_000_000)
        XCTAssertEqual(stalls.withLock { $0.count }, 0)
        // Block the service thread itself, as the lws #2889 spin would.
        server.app.transport.post { Thread.sleep(forTimeInterval: 2.5) }
        try await Task.sleep(nanoseconds: 3_000_000_000)
        let reported = stalls.withLock { $0 }
        XCTAssertFalse(reported.isEmpty, "a loop blocked for 2.5 s with watchdog_seconds 1 must be reported")
        XCTAssertGreaterThan(reported.first ?? 0, 1)
    }

    func test_peers_beyond_capacity_are_refused_with_503() async throws {
        var limit = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit), 0)
        let hard = limit.rlim_max == rlim_t.max ? 1 << 20 : Int(limit.rlim_max)
        // Capacity is the open-file limit minus the reserve and the /healthz headroom: leave room
        // for exactly two peers (and one more socket, which /metrics may use below).
        let server = try ServerHarness {
            $0.reservedFileDescriptors = hard - 3
            $0.healthReservedSockets = 1
        }
        defer { server.shutdown() }
        XCTAssertEqual(server.app.transport.capacity, 2)
        // Held: dropping a TestPeer closes its connection.
        let one = try await server.join("one")
        let two = try await server.join("two")
        defer { _ = (one, two) }
        do {
            _ = try await server.join("three")
            XCTFail("the third peer must be refused")
        } catch TestPeerError.connectFailed(let status, _) {
            XCTAssertEqual(status, 503)
        }
        let (status, body) = try await server.http("GET", "/metrics")
        XCTAssertEqual(status, 200)
        XCTAssertTrue(String(decoding: body, as: UTF8.self).contains("calling_capacity_rejections_total 1"))
    }
}
