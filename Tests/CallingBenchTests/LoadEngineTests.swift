import Glibc
import XCTest

@testable import CallingBench

final class LoadEngineTests: XCTestCase {
    /// A connected TCP pair on 127.0.0.1: (client, accepted).
    private func loopbackPair() throws -> (Int32, Int32) {
        let listening = try XCTUnwrap(loopbackListener(backlog: 1))
        let listener = listening.fd
        defer { close(listener) }
        var address = listening.address
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
        }
        XCTAssertEqual(connected, 0)
        let accepted = accept(listener, nil, nil)
        XCTAssertGreaterThanOrEqual(accepted, 0)
        return (client, accepted)
    }

    private static func realtime() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// The relay's socket-wait figure rests on this stamp: the kernel's receive time, between the
    /// write and the read, with every byte read as by recv(2).
    func test_a_stamped_read_returns_the_bytes_and_the_kernels_receive_time() throws {
        let (client, server) = try loopbackPair()
        defer { close(client); close(server) }
        var one: Int32 = 1
        XCTAssertEqual(setsockopt(server, SOL_SOCKET, LoadEngine.soTimestampNS, &one, socklen_t(MemoryLayout<Int32>.size)), 0)
        // When no socket on the machine asked for stamps before, Linux turns them on from a work
        // queue (net_enable_timestamp), so the first segments after the option may carry none (a
        // stamp of 0, which the bench leaves out). Wait until one does.
        var warmUp = [UInt8](repeating: 0, count: 8)
        var stamped = false
        for _ in 0..<200 where !stamped {
            XCTAssertEqual(write(client, "w", 1), 1)
            usleep(5_000)
            let (_, stamp) = warmUp.withUnsafeMutableBytes { LoadEngine.receiveStamped(server, $0) }
            stamped = stamp > 0
        }
        XCTAssertTrue(stamped, "the kernel never stamped a receive")
        let before = Self.realtime()
        XCTAssertEqual(write(client, "hello", 5), 5)
        usleep(20_000)
        var buffer = [UInt8](repeating: 0, count: 64)
        let (n, stamp) = buffer.withUnsafeMutableBytes { LoadEngine.receiveStamped(server, $0) }
        let after = Self.realtime()
        XCTAssertEqual(n, 5)
        XCTAssertEqual(Array(buffer[0..<5]), Array("hello".utf8))
        XCTAssertGreaterThanOrEqual(stamp, before)
        XCTAssertLessThanOrEqual(stamp, after - 15_000_000, "stamped on arrival, not at the read 20 ms later")
    }

    func test_without_the_option_a_stamped_read_reports_no_stamp() throws {
        let (client, server) = try loopbackPair()
        defer { close(client); close(server) }
        XCTAssertEqual(write(client, "x", 1), 1)
        var buffer = [UInt8](repeating: 0, count: 8)
        var result = (0, Int64(-1))
        for _ in 0..<100 where result.0 <= 0 {
            result = buffer.withUnsafeMutableBytes { LoadEngine.receiveStamped(server, $0) }
        }
        XCTAssertEqual(result.0, 1)
        XCTAssertEqual(result.1, 0)
    }

    func test_the_realtime_offset_maps_a_realtime_stamp_onto_the_engines_clock() {
        let offset = LoadEngine.realtimeMinusMonotonic()
        let mapped = Self.realtime() - offset
        XCTAssertLessThan(abs(mapped - Int64(LoadEngine.now())), 5_000_000)
    }
}
