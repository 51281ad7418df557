import CallingLogging
import CallingProtocol
import Foundation

/// WebSocket connections: opened from an accepted upgrade, inbound messages handed to the
/// delegate (lent when whole), the client's Close, and the end reported with how it ended.
extension WebSocketServer {
    // MARK: WebSocket events (service thread)

    /// LWS_CALLBACK_ESTABLISHED: the upgrade `confirmUpgrade` accepted is done; the connection gets
    /// its id and the delegate hears of it.
    func opened(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, delegate: (any WebSocketServerDelegate)?) -> Int32 {
        guard let user, let context = state.pendingUpgrades.removeValue(forKey: wsi) else { return -1 }
        // A join storm is a loop that keeps finding input too: upgrades, and the joins they
        // complete (`drainInbox`), each queueing a welcome and its room's peer-joined frames.
        // Waiting for a wake-up with nothing pending held thousands of them at once (0.58 KiB
        // more heap per idle peer at 19,000, kept after they were written), so both count
        // towards the flush as inbound frames do.
        countTowardsFlush()
        state.nextConnection += 1
        let id = ConnectionID(.socket, serial: state.nextConnection)
        let conn = WSConnection(wsi: wsi)
        // The connection's own state is reached from the callbacks' `user` memory from now on
        // (unretained; `connections` owns it, and `connectionClosed` clears the pointer before letting
        // go). Its socket no longer needs the HTTP bookkeeping: only the budget's count.
        LWSSession.store(user, id: id.rawValue, object: Unmanaged.passUnretained(conn).toOpaque())
        state.connections.insert(conn, for: id.rawValue)
        state.keepAlive?.opened(id.rawValue, at: Self.milliseconds())
        socketUpgraded(wsi)
        state.counters.accepted += 1
        delegate?.server(self, didOpen: id, context: context)
        return 0
    }

    /// LWS_CALLBACK_RECEIVE: a piece of an inbound message (nearly always all of it).
    @inline(__always)
    func received(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, input: UnsafeMutableRawPointer?, length: Int,
                  delegate: (any WebSocketServerDelegate)?)
    {
        guard let user, let object = LWSSession.object(user) else { return }
        // With the libev loop the deferred writes wait until no event is pending; a loop that
        // keeps finding input would hold them back, so after `flushAfterFrames` inbound frames
        // they go out from here.
        countTowardsFlush()
        // Borrowed for the call, not retained and released around it (one pair of atomic
        // operations per inbound frame): `connections` owns the connection until its CLOSED
        // callback, and lws runs no other callback of this wsi, CLOSED included, from inside
        // this one. Nothing the transport calls from here closes a wsi on the spot (`close`
        // and `killAsync` both wait for a later turn of the loop).
        Unmanaged<WSConnection>.fromOpaque(object)._withUnsafeGuaranteedRef { conn in
            receive(conn, id: ConnectionID(LWSSession.id(user)), wsi: wsi, input: input, length: length, delegate: delegate)
        }
    }

    func receive(_ conn: WSConnection, id: ConnectionID, wsi: OpaquePointer, input: UnsafeMutableRawPointer?,
                         length: Int, delegate: (any WebSocketServerDelegate)?)
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
                    delegate?.server(self, didReceive: .binary(byteCount: length), on: id)
                    return
                }
                let text = UnsafeBufferPointer(start: input?.assumingMemoryBound(to: UInt8.self), count: input == nil ? 0 : length)
                delegate?.server(self, didReceiveText: text, on: id)
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
            state.counters.oversizeMessages += 1
            message = .tooLarge(byteCount: conn.rxDiscarded)
        } else if conn.rxBinary {
            message = .binary(byteCount: conn.rx.count)
        } else {
            message = .text(conn.rx)
        }
        conn.rx.removeAll(keepingCapacity: conn.rx.capacity <= 65_536)
        conn.rxDiscarded = 0
        delegate?.server(self, didReceive: message, on: id)
    }

    /// LWS_CALLBACK_RECEIVE_PONG. Only a PONG confirms a socket (docs/protocol.md, "Keep-alive");
    /// lws answers PINGs itself.
    func pongReceived(_ user: UnsafeMutableRawPointer?) {
        guard let user else { return }
        let id = LWSSession.id(user)
        if id != 0 { state.keepAlive?.confirmed(id, at: Self.milliseconds()) }
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
            _ = sendCloseFrame(refusal.rawValue, conn, wsi: wsi)
            return 1
        }
        // Kept aside until CLOSED, not in the connection: every idle peer's object would grow for it.
        state.peerCloses[LWSSession.id(user)] = payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : 1005
        return 0
    }

    /// LWS_CALLBACK_CLOSED: the WebSocket is gone; the delegate hears how it ended.
    func connectionClosed(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?, delegate: (any WebSocketServerDelegate)?) {
        state.pendingUpgrades[wsi] = nil
        guard let user else { return }
        let id = ConnectionID(LWSSession.id(user))
        LWSSession.store(user, id: id.rawValue, object: nil)
        let peerClose = state.peerCloses.isEmpty ? nil : state.peerCloses.removeValue(forKey: id.rawValue)
        guard let conn = state.connections.removeValue(for: id.rawValue) else { return }
        state.keepAlive?.closed(id.rawValue)
        conn.closed = true
        let ending: SocketEnding = conn.closeCode.map(SocketEnding.closedByServer) ?? peerClose.map(SocketEnding.closedByClient) ?? .dropped
        delegate?.server(self, didClose: id, ending: ending)
        if state.shuttingDown, state.connections.isEmpty { state.onDrained?() }
    }

    /// The connection whose `user` memory this is, while it is open (see `opened`).
    @inline(__always)
    static func connection(_ user: UnsafeMutableRawPointer) -> WSConnection? {
        LWSSession.object(user).map { Unmanaged<WSConnection>.fromOpaque($0).takeUnretainedValue() }
    }
}
