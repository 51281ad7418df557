/// RFC 6455 §5.2 frame headers, and the server's Close frame whole: the one place in the
/// repository that writes them by hand. The server frames its text messages, its Close and its
/// keep-alive PING with it (lws frames only what goes through its own WebSocket write modes), and
/// the benchmark's raw clients frame their masked frames with it. Pure byte layout: no I/O, no allocation.
package enum WebSocketFraming {
    /// The opcodes this repository writes (RFC 6455 §5.2, §11.8).
    package enum Opcode: UInt8, Sendable {
        case text = 0x1
        case binary = 0x2
        case close = 0x8
        case ping = 0x9
        case pong = 0xA
    }

    /// The longest header: two bytes, an 8-byte extended length, a 4-byte mask.
    package static let maxHeaderBytes = 14

    // `@_alwaysEmitIntoClient`: each caller's module gets its own copy, which its optimizer then
    // inlines. `@inlinable` alone left these as calls from the transport's per-frame path (under
    // callgrind each relayed frame paid for the call and for a default argument's generator).

    /// The header's size for a payload of `length` bytes, unmasked (a server's frame).
    @_alwaysEmitIntoClient @inline(__always)
    package static func headerSize(length: Int) -> Int {
        length < 126 ? 2 : length <= 0xFFFF ? 4 : 10
    }

    /// Writes the header of one final, unmasked frame (FIN set; a server's, RFC 6455 §5.1) of
    /// `length` payload bytes with `opcode` into `pointer`, which has room for `maxHeaderBytes`;
    /// returns the header's size.
    @_alwaysEmitIntoClient @inline(__always)
    package static func writeHeader(_ opcode: Opcode, length: Int, into pointer: UnsafeMutableRawPointer) -> Int {
        let bytes = pointer.assumingMemoryBound(to: UInt8.self)
        bytes[0] = 0x80 | opcode.rawValue  // FIN + opcode
        if length < 126 {
            bytes[1] = UInt8(length)
            return 2
        }
        if length <= 0xFFFF {
            bytes[1] = 126
            bytes[2] = UInt8(length >> 8)
            bytes[3] = UInt8(length & 0xFF)
            return 4
        }
        bytes[1] = 127
        for index in 0..<8 { bytes[2 + index] = UInt8((UInt64(length) >> (56 - 8 * UInt64(index))) & 0xFF) }
        return 10
    }

    /// The longest unmasked Close frame: its header and the 125 payload bytes a control frame may
    /// carry at most (RFC 6455 §5.5).
    package static let maxCloseFrameBytes = 2 + 125

    /// Writes a whole, unmasked Close frame (RFC 6455 §5.5.1) into `pointer`, which has room for
    /// `maxCloseFrameBytes`: the status code, big-endian, then as much of `reason`'s UTF-8 as the
    /// control frame's payload holds. Returns the frame's size.
    @_alwaysEmitIntoClient
    package static func writeClose(code: UInt16, reason: String, into pointer: UnsafeMutableRawPointer) -> Int {
        let reasonBytes = reason.utf8.prefix(123)
        var length = writeHeader(.close, length: 2 + reasonBytes.count, into: pointer)
        pointer.storeBytes(of: code.bigEndian, toByteOffset: length, as: UInt16.self)
        length += 2
        for byte in reasonBytes {
            pointer.storeBytes(of: byte, toByteOffset: length, as: UInt8.self)
            length += 1
        }
        return length
    }

    /// The same header masked with `mask` (a client's frames must be, §5.1): the mask bit set
    /// and the key after the length. The payload is the caller's, and so is masking it.
    @_alwaysEmitIntoClient @inline(__always)
    package static func writeHeader(_ opcode: Opcode, length: Int, mask: (UInt8, UInt8, UInt8, UInt8),
                                    into pointer: UnsafeMutableRawPointer) -> Int
    {
        let size = writeHeader(opcode, length: length, into: pointer)
        let bytes = pointer.assumingMemoryBound(to: UInt8.self)
        bytes[1] |= 0x80
        bytes[size] = mask.0
        bytes[size + 1] = mask.1
        bytes[size + 2] = mask.2
        bytes[size + 3] = mask.3
        return size + 4
    }

    /// The masked `writeHeader` appended to `bytes` (the benchmark's clients queue their frames in
    /// arrays).
    @inlinable
    package static func appendHeader(_ opcode: Opcode, length: Int, mask: (UInt8, UInt8, UInt8, UInt8), to bytes: inout [UInt8]) {
        withUnsafeTemporaryAllocation(byteCount: maxHeaderBytes, alignment: 1) { header in
            let size = writeHeader(opcode, length: length, mask: mask, into: header.baseAddress!)
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: header[..<size]))
        }
    }
}
