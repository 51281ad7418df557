import CallingProtocol
import Foundation

/// One open WebSocket. Its properties are unchecked for exclusivity for the reason given at
/// `WebSocketConnections`: service thread only, touched per frame.
final class WSConnection {
    let wsi: OpaquePointer
    @exclusivity(unchecked) var queue = FIFO<OutboundMessage>()
    @exclusivity(unchecked) var queuedBytes = 0
    @exclusivity(unchecked) var rx: [UInt8] = []
    @exclusivity(unchecked) var rxDiscarded = 0
    @exclusivity(unchecked) var rxBinary = false
    /// Set once: the close code to send after the queue drains (slow consumers close at once).
    @exclusivity(unchecked) var closeCode: UInt16?
    /// Our Close frame is out; waiting for the client's.
    @exclusivity(unchecked) var closeFrameSent = false
    /// A WRITEABLE callback has been asked for and has not come yet.
    @exclusivity(unchecked) var writablePending = false
    /// In `ConnectionWriter.flushList`.
    @exclusivity(unchecked) var flushListed = false
    /// The keep-alive's PING goes out with the next write (`sendPing`).
    @exclusivity(unchecked) var pingDue = false
    /// lws has closed it (a flush may still hold it).
    @exclusivity(unchecked) var closed = false
    /// The size the next `pending` buffer starts at, as a power of two: what the last one
    /// needed (1 KiB to 64 KiB). A relay burst then allocates its batch's buffer once instead of
    /// growing it from 1 KiB with `realloc` every time (~2.7 reallocations per batch, ~55 of the
    /// instructions of a relayed frame under `calling-bench relay`); a quieter connection's next
    /// buffer is as small as its last batch. One byte, declared among the flags so that it takes
    /// their padding before `pending`'s pointer: an idle connection's object grows by nothing.
    @exclusivity(unchecked) private var pendingShift: UInt8 = WSConnection.minPendingShift
    /// Frames for this connection alone, already framed, written before `queue` by the next
    /// write (`WebSocketServer.send(count:to:writing:)`). Allocated when the first arrives and
    /// freed once written, so an idle connection keeps none; its counts live in the buffer's first
    /// 16 bytes (four `Int32`s: `max_coalesced_bytes` is at most 16 MiB), so the connection's
    /// object, which every idle peer has, grows by the pointer alone. Then `OutboundMessage.headroom`
    /// bytes, then `pendingUsed` bytes of frames.
    @exclusivity(unchecked) private(set) var pending: UnsafeMutableRawPointer?
    private static let countsBytes = 16
    private static let minPendingShift: UInt8 = 10
    private static let maxPendingShift: UInt8 = 16

    @inline(__always)
    private func count(_ index: Int) -> Int {
        guard let pending else { return 0 }
        return Int(pending.load(fromByteOffset: 4 * index, as: Int32.self))
    }

    @inline(__always)
    private func setCount(_ index: Int, _ value: Int) {
        pending!.storeBytes(of: Int32(value), toByteOffset: 4 * index, as: Int32.self)
    }

    private var pendingCapacity: Int { count(0) }
    // Read-only: `notePending` moves all three, `dropPending` lets them go with the buffer.
    var pendingUsed: Int { count(1) }
    var pendingFrames: Int { count(2) }
    var pendingPayloadBytes: Int { count(3) }

    /// One more frame of `framed` bytes, `payload` of them its payload, written where
    /// `reservePending` said: its three counts moved in one pass over the buffer's head (through
    /// the properties, each count's read and write looked at `pending` again).
    @inline(__always)
    func notePending(framed: Int, payload: Int) {
        guard let pending else { return }
        func add(_ amount: Int, at index: Int) {
            let offset = 4 * index
            pending.storeBytes(of: pending.load(fromByteOffset: offset, as: Int32.self) &+ Int32(amount), toByteOffset: offset, as: Int32.self)
        }
        add(framed, at: 1)
        add(1, at: 2)
        add(payload, at: 3)
    }

    /// Where the pending frames start (the headroom before them is lws's).
    var pendingFramesStart: UnsafeMutableRawPointer { pending! + Self.countsBytes + OutboundMessage.headroom }

    init(wsi: OpaquePointer) { self.wsi = wsi }

    /// Room for `count` more pending bytes; where they go.
    @inline(__always)
    func reservePending(_ count: Int) -> UnsafeMutableRawPointer {
        let used = pendingUsed
        let needed = Self.countsBytes + OutboundMessage.headroom + used + count
        if needed > pendingCapacity {
            // Doubling from the last batch's size: a burst of relays grows it rarely, not once per frame.
            var capacity = max(pendingCapacity, 1 << Int(pendingShift))
            while capacity < needed { capacity *= 2 }
            let fresh = pending == nil
            guard let grown = realloc(pending, capacity) else { fatalError("out of memory for \(capacity) pending bytes") }
            pending = grown
            if fresh { grown.initializeMemory(as: Int32.self, repeating: 0, count: 4) }
            setCount(0, capacity)
        }
        return pendingFramesStart + used
    }

    func dropPending() {
        guard let pending else { return }
        let needed = Self.countsBytes + OutboundMessage.headroom + pendingUsed
        let shift = Int.bitWidth - (needed - 1).leadingZeroBitCount
        pendingShift = UInt8(min(max(shift, Int(Self.minPendingShift)), Int(Self.maxPendingShift)))
        free(pending)
        self.pending = nil
    }

    deinit { free(pending) }
}
