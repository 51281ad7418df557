import CLibWebSockets

/// One encoded frame with `LWS_PRE` bytes of headroom in front, allocated once and shared by every
/// connection it is broadcast to. lws writes the WebSocket header into the headroom in place; that
/// is safe to share because every `lws_write` happens on the service thread, one at a time, and
/// lws copies any unsent remainder into its own buffer before returning.
public final class OutboundMessage: @unchecked Sendable {
    static let headroom = Int(cs_lws_pre())

    let storage: UnsafeMutableRawBufferPointer
    public let count: Int

    public init(_ payload: some Collection<UInt8>) {
        count = payload.count
        storage = .allocate(byteCount: Self.headroom + payload.count, alignment: 16)
        _ = UnsafeMutableRawBufferPointer(rebasing: storage[Self.headroom...]).initializeMemory(as: UInt8.self, from: payload)
    }

    /// Pointer to the payload, with `LWS_PRE` writable bytes before it.
    var payloadPointer: UnsafeMutablePointer<UInt8> {
        storage.baseAddress!.advanced(by: Self.headroom).assumingMemoryBound(to: UInt8.self)
    }

    deinit { storage.deallocate() }
}
