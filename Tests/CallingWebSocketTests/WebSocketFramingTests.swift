import XCTest

@testable import CallingWebSocket

final class WebSocketFramingTests: XCTestCase {
    private func header(_ length: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 10)
        let size = bytes.withUnsafeMutableBytes { WebSocketFraming.writeTextHeader(length: length, into: $0.baseAddress!) }
        return Array(bytes.prefix(size))
    }

    func test_short_frames_carry_the_length_in_the_second_byte() {
        XCTAssertEqual(header(0), [0x81, 0])
        XCTAssertEqual(header(125), [0x81, 125])
    }

    func test_medium_frames_use_a_16_bit_length() {
        XCTAssertEqual(header(126), [0x81, 126, 0, 126])
        XCTAssertEqual(header(65_535), [0x81, 126, 0xFF, 0xFF])
    }

    func test_large_frames_use_a_64_bit_length() {
        XCTAssertEqual(header(65_536), [0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0])
        XCTAssertEqual(header(16_777_216), [0x81, 127, 0, 0, 0, 0, 1, 0, 0, 0])
    }
}
