/// RFC 6455 §5.2 framing for unmasked server-to-client text frames.
package enum WebSocketFraming {
    /// Writes the header for one final text frame of `length` bytes; returns the header size.
    @inlinable package static func writeTextHeader(length: Int, into pointer: UnsafeMutableRawPointer) -> Int {
        let bytes = pointer.assumingMemoryBound(to: UInt8.self)
        bytes[0] = 0x81  // FIN + text opcode
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
}
