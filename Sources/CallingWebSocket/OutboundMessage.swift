import CLibWebSockets
#if canImport(Glibc)
import Glibc
#endif

/// One encoded frame with `LWS_PRE` bytes of headroom in front, allocated once and shared by every
/// connection it is broadcast to. lws writes the WebSocket header into the headroom in place; that
/// is safe to share because every `lws_write` happens on the service thread, one at a time, and
/// lws copies any unsent remainder into its own buffer before returning.
public final class OutboundMessage: @unchecked Sendable {
    /// `LWS_PRE`, computed rather than stored: the shim returns the header's constant inline, so
    /// this folds to a number where a `static let` was read through its lazy initializer's check
    /// on every relayed frame (which reserves pending bytes with it).
    @inlinable package static var headroom: Int { Int(cs_lws_pre()) }

    @usableFromInline let storage: UnsafeMutableRawBufferPointer
    public let count: Int

    /// Copies `payload` with one memcpy (a generic element-wise copy showed up in profiles).
    public init(_ payload: ArraySlice<UInt8>) {
        count = payload.count
        let storage = Self.allocate(Self.headroom + payload.count)
        payload.withUnsafeBytes { source in
            if let base = source.baseAddress, source.count > 0 {
                (storage.baseAddress! + Self.headroom).copyMemory(from: base, byteCount: source.count)
            }
        }
        self.storage = storage
    }

    /// `count` bytes that `write` puts in place (all of them): a frame encoded straight into the
    /// message, without a buffer to copy it from.
    public init(count: Int, writing write: (UnsafeMutablePointer<UInt8>) -> Void) {
        self.count = count
        let storage = Self.allocate(Self.headroom + count)
        write((storage.baseAddress! + Self.headroom).bindMemory(to: UInt8.self, capacity: count))
        self.storage = storage
    }

    public convenience init(_ payload: [UInt8]) {
        self.init(payload[...])
    }

    /// Pointer to the payload, with `LWS_PRE` writable bytes before it.
    @inlinable package var payloadPointer: UnsafeMutablePointer<UInt8> {
        storage.baseAddress!.advanced(by: Self.headroom).assumingMemoryBound(to: UInt8.self)
    }

    /// `malloc`, not `UnsafeMutableRawBufferPointer.allocate`: on Linux the Swift runtime serves
    /// every raw allocation through `posix_memalign` (its "default alignment" path), slower per
    /// message than malloc, whose 16-byte alignment is all lws needs.
    private static func allocate(_ byteCount: Int) -> UnsafeMutableRawBufferPointer {
        guard let base = malloc(byteCount) else { fatalError("out of memory for a \(byteCount)-byte frame") }
        return UnsafeMutableRawBufferPointer(start: base, count: byteCount)
    }

    deinit { free(storage.baseAddress) }
}
