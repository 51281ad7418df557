import CallingLogging
import CallingProtocol
import Foundation

/// The connection writer: what the delegate sends is queued per connection, framed (through
/// `WebSocketFraming`, the one frame writer) and written once a wake-up's callbacks are done
/// or from the connection's WRITEABLE; slow consumers are closed; the closing handshake's Close and
/// the keep-alive's PING go out here. Owns the flush list, the write buffer and the write counters;
/// takes connections, never ids (the server looks them up in `WebSocketConnections`). Service
/// thread only.
///
/// `@exclusivity(unchecked)` on what a relayed frame touches, for the reason given at
/// `WebSocketConnections`.
final class ConnectionWriter {
    let settings: TransportSettings
    let logger: Logger
    /// Runs `flushDeferred` after the callbacks of a wake-up (see `requestWritable`). Lives as long
    /// as the server, which outlives its lws context.
    private(set) lazy var flushCall = LWSDeferredCall { [unowned self] in flushDeferred() }
    /// Connections with something to write once this wake-up's callbacks are done (each listed
    /// once: `WSConnection.flushListed`), and the list being written, swapped so that a write that
    /// lists its connection again lists it for the next flush.
    @exclusivity(unchecked) private var flushList: [WSConnection] = []
    @exclusivity(unchecked) private var flushing: [WSConnection] = []
    /// Events handled since the last flush (`countTowardsFlush`).
    @exclusivity(unchecked) private var framesSinceFlush = 0
    @exclusivity(unchecked) private var writeStorage: UnsafeMutableRawPointer?
    @exclusivity(unchecked) private var writeStorageCapacity = 0

    /// Its share of `TransportCounters`.
    @exclusivity(unchecked) private(set) var framesOut = 0
    @exclusivity(unchecked) private(set) var bytesOut = 0
    @exclusivity(unchecked) private(set) var writesFlushed = 0
    @exclusivity(unchecked) private(set) var writesOnWriteable = 0
    @exclusivity(unchecked) private(set) var closedSlowConsumer = 0

    init(settings: TransportSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
    }

    deinit { writeStorage?.deallocate() }

    /// Scratch space for one coalesced write, at least `capacity` bytes; reused from write to write
    /// (lws copies whatever the socket does not take before `lws_write` returns).
    private func writeBuffer(capacity: Int) -> UnsafeMutableRawPointer {
        if let writeStorage, writeStorageCapacity >= capacity { return writeStorage }
        writeStorage?.deallocate()
        let storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        writeStorage = storage
        writeStorageCapacity = capacity
        return storage
    }

    /// One more event handled (an inbound frame, an upgrade, a posted piece of work) while the
    /// loop may keep finding more: after `flushAfterFrames` of them, what they queued is written.
    @inline(__always)
    func countTowardsFlush() {
        framesSinceFlush += 1
        if framesSinceFlush > settings.flushAfterFrames, !flushList.isEmpty { flushDeferred() }
    }

    /// Queues `message` for `connection`. A connection whose queue passes `maxQueueBytes` is closed
    /// as a slow consumer from its own WRITEABLE callback (docs/architecture.md, "The lws #2889 guards").
    func send(_ message: OutboundMessage, to conn: WSConnection, _ connection: ConnectionID) {
        guard conn.closeCode == nil else { return }
        conn.queue.append(message)
        conn.queuedBytes += message.count
        queued(conn, connection)
    }

    /// Queues one frame of `count` bytes for `connection` alone (an addressed relay), which `write`
    /// puts in place: framed straight into the connection's pending bytes, which its next write
    /// (`writeNext`) writes at once, so no message is allocated, queued and copied per frame. Same
    /// order, limits and slow-consumer close as `send(_:to:_:)`: the bytes are pending only while
    /// nothing is queued before them, and a frame that arrives behind queued messages (or would
    /// take the pending bytes past `maxCoalescedBytes`) is queued as a message instead.
    @inline(__always)
    func send(count: Int, to conn: WSConnection, _ connection: ConnectionID, writing write: (UnsafeMutablePointer<UInt8>) -> Void) {
        guard conn.closeCode == nil else { return }
        let framed = count + WebSocketFraming.headerSize(length: count)
        guard conn.queue.isEmpty, conn.pendingUsed + framed <= settings.maxCoalescedBytes else {
            return send(OutboundMessage(count: count, writing: write), to: conn, connection)
        }
        let start = conn.reservePending(framed)
        let header = WebSocketFraming.writeHeader(.text, length: count, into: start)
        write((start + header).assumingMemoryBound(to: UInt8.self))
        conn.notePending(framed: framed, payload: count)
        conn.queuedBytes += count
        queued(conn, connection)
    }

    /// After a frame was queued: closes a connection whose queue passed `maxQueueBytes`, else has
    /// it written soon.
    @inline(__always)
    func queued(_ conn: WSConnection, _ connection: ConnectionID) {
        if conn.queuedBytes > settings.maxQueueBytes {
            conn.queue.removeAll()
            conn.dropPending()
            conn.queuedBytes = 0
            conn.closeCode = CloseCode.slowConsumer.rawValue
            closedSlowConsumer += 1
            logger.warning("closing slow consumer", ["conn": "\(connection)", "max_queue_bytes": "\(settings.maxQueueBytes)"])
            // It has already shown it does not read: no point waiting long for a Close answer.
            armCloseDeadline(conn, seconds: 1)
        }
        requestWritable(conn)
    }

    /// Has what is queued for `conn` written soon: by `flushDeferred` once this wake-up's callbacks
    /// are done, or, for a closing connection, from its own WRITEABLE (the close frame and the
    /// slow-consumer close need that callback: docs/architecture.md, "The lws #2889 guards"). A fan-out or a relay
    /// burst queues several frames per recipient between two writes, so each is asked for once.
    @inline(__always)
    func requestWritable(_ conn: WSConnection) {
        if conn.writablePending || conn.flushListed { return }
        if conn.closeCode != nil { return requestWritableCallback(conn) }
        conn.flushListed = true
        flushList.append(conn)
        flushCall.schedule(on: conn.wsi)
    }

    /// Asks lws for a WRITEABLE callback unless one is already due. Each `lws_callback_on_writable`
    /// re-arms the socket's write watcher in the event loop (two `epoll_ctl`, set and cleared),
    /// even when POLLOUT is already set.
    func requestWritableCallback(_ conn: WSConnection) {
        if conn.writablePending { return }
        conn.writablePending = true
        LWS.callbackOnWritable(conn.wsi)
    }

    /// Writes what the callbacks of this wake-up queued, straight from the service loop instead of
    /// from each connection's WRITEABLE: a write needs no POLLOUT armed and reported first, which
    /// was two `epoll_ctl` and another trip through the event loop per write, and most of the
    /// service thread's syscalls when frames come one at a time. The bytes go out exactly as a
    /// WRITEABLE would write them (`writeNext`: pending bytes first, then one coalesced batch).
    /// lws still decides when a socket is full: while it holds part of an earlier write, or once a
    /// connection is closing, the connection waits for its WRITEABLE instead.
    func flushDeferred() {
        swap(&flushList, &flushing)
        framesSinceFlush = 0
        for conn in flushing {
            conn.flushListed = false
            guard !conn.closed, !conn.writablePending else { continue }
            if conn.closeCode != nil || LWS.hasBufferedOutput(conn.wsi) {
                requestWritableCallback(conn)
                continue
            }
            if conn.pendingUsed == 0, conn.queue.isEmpty, !conn.pingDue { continue }
            writesFlushed += 1
            if writeNext(conn, wsi: conn.wsi) < 0 { LWS.killAsync(conn.wsi) }
        }
        flushing.removeAll(keepingCapacity: flushing.capacity <= 4_096)
    }

    /// Closes after the frames already queued have been written.
    func close(_ conn: WSConnection, code: CloseCode) {
        guard conn.closeCode == nil else { return }
        conn.closeCode = code.rawValue
        armCloseDeadline(conn)
        requestWritable(conn)
    }

    /// The close normally happens in the connection's own WRITEABLE callback, but a peer that has
    /// stopped reading never becomes writeable again while lws holds part of a frame for it. So
    /// every close also arms an lws timeout: if WRITEABLE has not come by then, lws drops the
    /// socket from its own timer processing (no close frame can be sent to such a peer anyway).
    func armCloseDeadline(_ conn: WSConnection, seconds: Int? = nil) {
        LWS.setUserTimeout(conn.wsi, seconds: seconds ?? settings.closeTimeoutSeconds)
    }

    /// LWS_CALLBACK_SERVER_WRITEABLE: the connection's own turn to write (closing, or lws held part
    /// of an earlier write).
    @inline(__always)
    func writeable(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?) -> Int32 {
        guard let user, let conn = WebSocketConnections.connection(user) else { return 0 }
        conn.writablePending = false
        if !conn.closeFrameSent, conn.closeCode != nil || conn.pendingUsed > 0 || !conn.queue.isEmpty || conn.pingDue {
            writesOnWriteable += 1
        }
        return writeNext(conn, wsi: wsi)
    }

    func writeNext(_ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        if conn.closeFrameSent { return 0 }
        if let code = conn.closeCode, code == CloseCode.slowConsumer.rawValue || (conn.queue.isEmpty && conn.pendingUsed == 0) {
            return sendCloseFrame(code, conn, wsi: wsi)
        }
        if conn.pingDue { return sendPing(conn, wsi: wsi) }
        if conn.pendingUsed > 0 {
            // Older than anything queued (see `send(count:to:_:writing:)`): these go first, in one
            // write, as a coalesced batch would.
            let length = conn.pendingUsed
            let start = conn.pendingFramesStart.assumingMemoryBound(to: UInt8.self)
            guard LWS.write(wsi, start, length, .http) >= length else { return -1 }
            framesOut += conn.pendingFrames
            bytesOut += length
            conn.queuedBytes -= conn.pendingPayloadBytes
            conn.dropPending()
            if !conn.queue.isEmpty || conn.closeCode != nil { requestWritable(conn) }
            return 0
        }
        guard let first = conn.queue.popFirst() else { return 0 }
        conn.queuedBytes -= first.count
        let written: Int32
        if conn.queue.isEmpty {
            written = LWS.write(wsi, first.payloadPointer, first.count, .text) < first.count ? -1 : 0
            framesOut += 1
            bytesOut += first.count
        } else {
            written = writeCoalesced(first, conn, wsi: wsi)
        }
        if written < 0 { return -1 }
        if !conn.queue.isEmpty || conn.closeCode != nil { requestWritable(conn) }
        return 0
    }

    /// Starts the closing handshake (RFC 6455 §7.1.1): our Close goes out, the socket stays open
    /// (inbound frames are discarded) until the client's Close arrives, then lws closes TCP. lws
    /// 4.1.6 as a server would drop TCP right after its own Close, so a client still sending gets
    /// a reset and reports 1006 instead of the code we meant (fatal for terminal codes such as
    /// 4400, which SDKs must see to stop reconnecting). The close deadline still bounds the wait.
    func sendCloseFrame(_ code: UInt16, _ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        conn.closeFrameSent = true
        conn.queue.removeAll()
        conn.dropPending()
        conn.queuedBytes = 0
        armCloseDeadline(conn, seconds: code == CloseCode.slowConsumer.rawValue ? 1 : nil)
        let buffer = writeBuffer(capacity: OutboundMessage.headroom + WebSocketFraming.maxCloseFrameBytes)
        let start = buffer + OutboundMessage.headroom
        let length = WebSocketFraming.writeClose(code: code, reason: CloseCode(rawValue: code)?.reason ?? "", into: start)
        return LWS.write(wsi, start.assumingMemoryBound(to: UInt8.self), length, .http) < length ? -1 : 0
    }

    /// The keep-alive's PING, in a write of its own; what is queued follows in the next. Its
    /// payload is the time it went out (8 bytes, big-endian milliseconds): lws 4.1.6 reports no
    /// PONG whose payload is empty (`lws_ws_rx_sm`), so a PING without one would get answers the
    /// server never sees.
    func sendPing(_ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        conn.pingDue = false
        let buffer = writeBuffer(capacity: OutboundMessage.headroom + WebSocketFraming.maxHeaderBytes + 8)
        let start = buffer + OutboundMessage.headroom
        let header = WebSocketFraming.writeHeader(.ping, length: 8, into: start)  // RFC 6455 §5.5.2
        start.storeBytes(of: UInt64(WebSocketServer.milliseconds()).bigEndian, toByteOffset: header, as: UInt64.self)
        let length = header + 8
        guard LWS.write(wsi, start.assumingMemoryBound(to: UInt8.self), length, .http) >= length else { return -1 }
        if conn.pendingUsed > 0 || !conn.queue.isEmpty || conn.closeCode != nil { requestWritable(conn) }
        return 0
    }

    /// Several queued frames in one write: the WebSocket headers are framed here and the batch
    /// goes out as raw bytes in a single `lws_write` (still one write per `writeNext`). Under load a
    /// peer often has many small frames queued (acks, broadcasts); one syscall for all of them is
    /// what keeps the service thread ahead. Server frames are unmasked, so framing is trivial.
    func writeCoalesced(_ first: OutboundMessage, _ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        // Framed straight into the service thread's write buffer as the messages are taken off the
        // queue: no batch array and no buffer allocated per write (a fan-out writes once per
        // recipient per wake-up).
        let buffer = writeBuffer(capacity: OutboundMessage.headroom + max(settings.maxCoalescedBytes, first.count + 10))
        var offset = OutboundMessage.headroom
        var frames = 0
        var next: OutboundMessage? = first
        while let message = next {
            offset += WebSocketFraming.writeHeader(.text, length: message.count, into: buffer + offset)
            (buffer + offset).copyMemory(from: message.payloadPointer, byteCount: message.count)
            offset += message.count
            frames += 1
            let used = offset - OutboundMessage.headroom
            let limit = settings.maxCoalescedBytes
            guard let candidate = conn.queue.popFirst(if: { used + $0.count + 10 <= limit }) else { break }
            conn.queuedBytes -= candidate.count
            next = candidate
        }
        let length = offset - OutboundMessage.headroom
        let start = (buffer + OutboundMessage.headroom).assumingMemoryBound(to: UInt8.self)
        guard LWS.write(wsi, start, length, .http) >= length else { return -1 }
        framesOut += frames
        bytesOut += length
        return 0
    }
}
