import XCTest

@testable import CallingProtocol

final class WebSocketFramingTests: XCTestCase {
    private func header(_ length: Int, _ opcode: WebSocketFraming.Opcode = .text,
                        mask: (UInt8, UInt8, UInt8, UInt8)? = nil) -> [UInt8]
    {
        var bytes = [UInt8](repeating: 0, count: WebSocketFraming.maxHeaderBytes)
        let size = bytes.withUnsafeMutableBytes { buffer in
            if let mask { return WebSocketFraming.writeHeader(opcode, length: length, mask: mask, into: buffer.baseAddress!) }
            return WebSocketFraming.writeHeader(opcode, length: length, into: buffer.baseAddress!)
        }
        XCTAssertEqual(size, WebSocketFraming.headerSize(length: length) + (mask == nil ? 0 : 4))
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

    func test_control_frames_carry_their_opcode() {
        XCTAssertEqual(header(2, .close), [0x88, 2])
        XCTAssertEqual(header(8, .ping), [0x89, 8])
        XCTAssertEqual(header(0, .pong), [0x8A, 0])
        XCTAssertEqual(header(3, .binary), [0x82, 3])
    }

    func test_masked_frames_set_the_mask_bit_and_carry_the_key_after_the_length() {
        let key: (UInt8, UInt8, UInt8, UInt8) = (1, 2, 3, 4)
        XCTAssertEqual(header(5, mask: key), [0x81, 0x85, 1, 2, 3, 4])
        XCTAssertEqual(header(300, .text, mask: key), [0x81, 0x80 | 126, 0x01, 0x2C, 1, 2, 3, 4])
        XCTAssertEqual(header(2, .close, mask: key), [0x88, 0x82, 1, 2, 3, 4])
        var appended: [UInt8] = [0xEE]
        WebSocketFraming.appendHeader(.pong, length: 1, mask: key, to: &appended)
        XCTAssertEqual(appended, [0xEE, 0x8A, 0x81, 1, 2, 3, 4])
    }

    private func close(_ code: UInt16, _ reason: String) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: WebSocketFraming.maxCloseFrameBytes)
        let size = bytes.withUnsafeMutableBytes { WebSocketFraming.writeClose(code: code, reason: reason, into: $0.baseAddress!) }
        return Array(bytes.prefix(size))
    }

    func test_a_close_frame_carries_its_code_big_endian_then_its_reason() {
        XCTAssertEqual(close(4400, "gone"), [0x88, 6, 0x11, 0x30] + Array("gone".utf8))
        XCTAssertEqual(close(1000, ""), [0x88, 2, 0x03, 0xE8])
    }

    func test_a_close_frames_reason_is_cut_to_the_125_bytes_a_control_frame_holds() {
        let frame = close(1011, String(repeating: "x", count: 200))
        XCTAssertEqual(frame.count, WebSocketFraming.maxCloseFrameBytes)
        XCTAssertEqual(Array(frame.prefix(4)), [0x88, 125, 0x03, 0xF3])
    }
}
