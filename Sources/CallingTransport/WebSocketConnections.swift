import CallingLogging
import CallingProtocol
import Foundation

/// WebSocket connections: opened from an accepted upgrade, inbound messages handed to the
/// delegate (lent when whole), the client's Close, the keep-alive's schedule, and the end
/// reported with how it ended. Owns the table of open connections, the upgrades accepted and not
/// yet established, and the client Close codes until CLOSED. Service thread only.
///
/// `@exclusivity(unchecked)` on its stored properties: each access to a class's stored property is
/// otherwise checked at run time for overlapping access (`swift_beginAccess`/`swift_endAccess`, a
/// thread-local lookup each), several per fan-out delivery and per join. They are only touched on
/// the service thread, and no access to them is held across a call that could reach them again
/// (delegate calls happen after the lookup returns), so there is nothing for the check to find. The
/// same holds for `ConnectionWriter`, `SocketBudget`, `HTTPExchanges` and `WSConnection`.
final class WebSocketConnections {
    let settings: TransportSettings
    /// Where what a connection sends or answers is written.
    let writer: ConnectionWriter
    /// The socket budget, told when a socket becomes a WebSocket.
    let budget: SocketBudget<OpaquePointer>

    /// Open WebSockets by connection id (ids count up from 1 and are never reused).
    @exclusivity(unchecked) var table = IDTable<WSConnection>()
    /// Upgrades the delegate accepted, with its context, until ESTABLISHED (or the socket's end).
    @exclusivity(unchecked) var pendingUpgrades: [OpaquePointer: any Sendable] = [:]
    @exclusivity(unchecked) private var nextConnection: UInt64 = 0
    /// The code of each client Close frame received, until its connection's CLOSED.
    @exclusivity(unchecked) private var peerCloses: [UInt64: UInt16] = [:]
    /// `stop` has begun: no upgrade is accepted, and `onDrained` runs when the last connection goes.
    @exclusivity(unchecked) var shuttingDown = false
    @exclusivity(unchecked) var onDrained: (() -> Void)?
    /// Set when the loop starts (`WebSocketServer.runLoop`).
    @exclusivity(unchecked) var keepAlive: KeepAliveSchedule?
    @exclusivity(unchecked) private var keepAliveActions: [KeepAliveSchedule.Action] = []

    /// Its share of `TransportCounters`.
    @exclusivity(unchecked) private(set) var accepted = 0
    @exclusivity(unchecked) private(set) var oversizeMessages = 0

    init(settings: TransportSettings, writer: ConnectionWriter, budget: SocketBudget<OpaquePointer>) {
        self.settings = settings
        self.writer = writer
        self.budget = budget
    }

    /// Open WebSockets and upgrades accepted for them: what the peer capacity counts.
    var countWithUpgrades: Int { table.count + pendingUpgrades.count }

    // MARK: WebSocket events (service thread)

    /// LWS_CALLBACK_ESTABLISHED: the upgrade `HTTPExchanges.confirmUpgrade` accepted is done; the connection gets
    /// its id and the delegate hears of it.
    func opened(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, server: WebSocketServer,
                delegate: (any WebSocketServerDelegate)?) -> Int32
    {
        guard let user, let context = pendingUpgrades.removeValue(forKey: wsi) else { return -1 }
        // A join storm is a loop that keeps finding input too: upgrades, and the joins they
        // complete (`drainInbox`), each queueing a welcome and its room's peer-joined frames.
        // Waiting for a wake-up with nothing pending held thousands of them at once (0.58 KiB
        // more heap per idle peer at 19,000, kept after they were written), so both count
        // towards the flush as inbound frames do.
        writer.countTowardsFlush()
        nextConnection += 1
        let id = ConnectionID(.socket, serial: nextConnection)
        let conn = WSConnection(wsi: wsi)
        // The connection's own state is reached from the callbacks' `user` memory from now on
        // (unretained; `table` owns it, and `connectionClosed` clears the pointer before letting
        // go). Its socket no longer needs the HTTP bookkeeping: only the budget's count.
        LWSSession.store(user, id: id.rawValue, object: Unmanaged.passUnretained(conn).toOpaque())
        table.insert(conn, for: id.rawValue)
        keepAlive?.opened(id.rawValue, at: WebSocketServer.milliseconds())
        budget.upgraded(wsi)
        accepted += 1
        delegate?.server(server, didOpen: id, context: context)
        return 0
    }

    /// LWS_CALLBACK_RECEIVE: a piece of an inbound message (nearly always all of it).
    @inline(__always)
    func received(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, input: UnsafeMutableRawPointer?, length: Int,
                  server: WebSocketServer, delegate: (any WebSocketServerDelegate)?)
    {
        guard let user, let object = LWSSession.object(user) else { return }
        // With the libev loop the deferred writes wait until no event is pending; a loop that
        // keeps finding input would hold them back, so after `flushAfterFrames` inbound frames
        // they go out from here.
        writer.countTowardsFlush()
        // Borrowed for the call, not retained and released around it (one pair of atomic
        // operations per inbound frame): `table` owns the connection until its CLOSED
        // callback, and lws runs no other callback of this wsi, CLOSED included, from inside
        // this one. Nothing the transport calls from here closes a wsi on the spot (`close`
        // and `killAsync` both wait for a later turn of the loop).
        Unmanaged<WSConnection>.fromOpaque(object)._withUnsafeGuaranteedRef { conn in
            receive(conn, id: ConnectionID(LWSSession.id(user)), wsi: wsi, input: input, length: length, server: server,
                    delegate: delegate)
        }
    }

    func receive(_ conn: WSConnection, id: ConnectionID, wsi: OpaquePointer, input: UnsafeMutableRawPointer?,
                 length: Int, server: WebSocketServer, delegate: (any WebSocketServerDelegate)?)
    {
        // After our Close only the client's Close matters (RFC 6455 §5.5.1).
        if conn.closeFrameSent { return }
        if LWS.isFirstFragment(wsi) {
            if length <= settings.maxFrameBytes, LWS.isMessageEnd(wsi) {
                // The whole message in one callback, as nearly every one arrives: lent from lws's
                // buffer for the delegate's call, which copies only what it keeps (a relayed frame
                // is written from it into its target's pending bytes; copying it into an array
                // first was a large share of a relayed frame's cost).
                if !conn.rx.isEmpty { conn.rx.removeAll(keepingCapacity: conn.rx.capacity <= 65_536) }
                conn.rxDiscarded = 0
                if LWS.isBinaryFrame(wsi) {
                    delegate?.server(server, didReceive: .binary(byteCount: length), on: id)
                    return
                }
                let text = UnsafeBufferPointer(start: input?.assumingMemoryBound(to: UInt8.self), count: input == nil ? 0 : length)
                delegate?.server(server, didReceiveText: text, on: id)
                return
            }
            conn.rx.removeAll(keepingCapacity: conn.rx.capacity <= 65_536)
            conn.rxDiscarded = 0
            conn.rxBinary = LWS.isBinaryFrame(wsi)
        }
        if conn.rxDiscarded > 0 || conn.rx.count + length > settings.maxFrameBytes {
            // Too large: stop buffering, count the rest, and answer once the message ends.
            conn.rxDiscarded += conn.rx.count + length
            conn.rx.removeAll()
        } else if let input, length > 0 {
            conn.rx.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
        }
        guard LWS.isMessageEnd(wsi) else { return }
        let message: InboundMessage
        if conn.rxDiscarded > 0 {
            oversizeMessages += 1
            message = .tooLarge(byteCount: conn.rxDiscarded)
        } else if conn.rxBinary {
            message = .binary(byteCount: conn.rx.count)
        } else {
            message = .text(conn.rx)
        }
        conn.rx.removeAll(keepingCapacity: conn.rx.capacity <= 65_536)
        conn.rxDiscarded = 0
        delegate?.server(server, didReceive: message, on: id)
    }

    /// LWS_CALLBACK_RECEIVE_PONG. Only a PONG confirms a socket (docs/protocol.md, "Keep-alive");
    /// lws answers PINGs itself.
    func pongReceived(_ user: UnsafeMutableRawPointer?) {
        guard let user else { return }
        let id = LWSSession.id(user)
        if id != 0 { keepAlive?.confirmed(id, at: WebSocketServer.milliseconds()) }
    }

    /// LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: the client's Close arrived.
    func peerClosing(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, input: UnsafeMutableRawPointer?, length: Int) -> Int32 {
        // Our Close already went out: this is the client's answer, so close without an echo.
        guard let user, let conn = Self.connection(user) else { return 0 }
        if conn.closeFrameSent { return 1 }
        // `in`: the close payload, a big-endian status code then a reason.
        let payload = UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length)
        if let refusal = CloseCode.refusal(ofPeerClose: payload) {
            // lws 4.1.6 would echo this payload, turning only codes below 3000 into 1002 and
            // never checking the reason (RFC 6455 §7.4.2, §8.1 want 1002/1007): our own Close
            // goes out instead, and returning nonzero makes lws close without its echo. lws
            // calls this only with nothing of ours buffered, so the frame is written whole.
            // A server-side code: not a clean leave, the peer keeps its reconnect grace.
            conn.closeCode = refusal.rawValue
            _ = writer.sendCloseFrame(refusal.rawValue, conn, wsi: wsi)
            return 1
        }
        // Kept aside until CLOSED, not in the connection: every idle peer's object would grow for it.
        peerCloses[LWSSession.id(user)] = payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : 1005
        return 0
    }

    /// LWS_CALLBACK_CLOSED: the WebSocket is gone; the delegate hears how it ended.
    func connectionClosed(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, server: WebSocketServer,
                          delegate: (any WebSocketServerDelegate)?)
    {
        pendingUpgrades[wsi] = nil
        guard let user else { return }
        let id = ConnectionID(LWSSession.id(user))
        LWSSession.store(user, id: id.rawValue, object: nil)
        let peerClose = peerCloses.isEmpty ? nil : peerCloses.removeValue(forKey: id.rawValue)
        guard let conn = table.removeValue(for: id.rawValue) else { return }
        keepAlive?.closed(id.rawValue)
        conn.closed = true
        let ending: SocketEnding = conn.closeCode.map(SocketEnding.closedByServer) ?? peerClose.map(SocketEnding.closedByClient) ?? .dropped
        delegate?.server(server, didClose: id, ending: ending)
        if shuttingDown, table.isEmpty { onDrained?() }
    }

    /// Sends the PINGs that are due (each as the connection's next write, ahead of what is queued
    /// for it: a control frame may come between messages, RFC 6455 §5.4) and drops the sockets
    /// that did not answer in time, without a close frame.
    func keepAliveTick(now: Int64) {
        guard keepAlive != nil else { return }
        keepAliveActions.removeAll(keepingCapacity: true)
        keepAlive!.advance(to: now, into: &keepAliveActions)
        for action in keepAliveActions {
            switch action {
            case .ping(let id):
                guard let conn = table[id], conn.closeCode == nil else { continue }
                conn.pingDue = true
                writer.requestWritable(conn)
            case .hangUp(let id):
                guard let conn = table[id], !conn.closed else { continue }
                // NOSTATUS from lws's timer processing: the same close lws's own idle policy made,
                // no close frame (the peer is presumed gone).
                LWS.killAsync(conn.wsi)
            }
        }
    }

    /// Closes every connection with 1001 and runs `drained` once none is left (`stop`).
    func closeAll(then drained: @escaping () -> Void) {
        shuttingDown = true
        onDrained = drained
        if table.isEmpty { drained() }
        for id in table.storedKeys.sorted() {
            if let conn = table[id] { writer.close(conn, code: .goingAway) }
        }
    }

    /// The connection whose `user` memory this is, while it is open (see `opened`).
    @inline(__always)
    static func connection(_ user: UnsafeMutableRawPointer) -> WSConnection? {
        LWSSession.object(user).map { Unmanaged<WSConnection>.fromOpaque($0).takeUnretainedValue() }
    }
}
