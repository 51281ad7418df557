import CallingProtocol
@testable import CallingServer
import XCTest

final class MetricsTests: XCTestCase {
    /// Counts by name stay right when names alternate, share a length, or differ only in length.
    func test_frame_counts_by_name_add_up_however_the_names_alternate() {
        var counts = FrameCounts()
        let names = ["chat-ack", "chat", "chat-ack", "ping", "pong", "chat", "pong", "chat-ack", "x", "chat"]
        var expected: [String: Int] = [:]
        for (index, name) in names.enumerated() {
            counts.count(named: name, by: index + 1)
            expected[name, default: 0] += index + 1
        }
        counts.count(.chat)
        expected["chat", default: 0] += 1
        XCTAssertEqual(counts.byName, expected)
        XCTAssertEqual(counts["pong"], 5 + 7)
        XCTAssertNil(counts["welcome"])
    }

    /// Each frame type is counted in its own place, its place in `FrameType.allCases`.
    func test_every_frame_type_is_counted_under_its_own_name() {
        for (index, type) in FrameType.allCases.enumerated() {
            XCTAssertEqual(FrameCounts.slot(type), index, type.rawValue)
        }
        var counts = FrameCounts()
        for (index, type) in FrameType.allCases.enumerated() {
            for _ in 0...index { counts.count(type) }
        }
        XCTAssertEqual(counts.byName, Dictionary(uniqueKeysWithValues: FrameType.allCases.enumerated().map { ($1.rawValue, $0 + 1) }))
    }
}
