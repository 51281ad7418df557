import CallingLogging
import CallingProtocol
import Foundation

/// The socket budget (docs/architecture.md, "Socket budget"): every accepted socket counted,
/// new ones refused at the limit, the oldest waiting for their request or its body evicted to
/// keep the `/healthz` headroom, and TLS handshakes counted per socket.
extension WebSocketServer {
    // MARK: socket budget

    /// LWS_CALLBACK_FILTER_NETWORK_CONNECTION: a socket was just accepted. Nonzero makes lws
    /// close it at once: what keeps the process below its open-file limit (lws would otherwise
    /// meet EMFILE in accept() and retry it on every loop turn).
    func admit() -> Int32 {
        guard state.openSockets >= socketBudget else { return 0 }
        state.counters.socketsRefused += 1
        state.pressure.refused += 1
        _ = evictOldestIdle(except: nil)
        logPressure()
        return 1
    }

    /// LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: counts the socket and, once it eats into the
    /// `/healthz` headroom, drops the oldest sockets still waiting for their request or its body
    /// until the rest fit in `capacity` again. Sockets already evicted do not count: their close
    /// is under way, and counting them let a burst of accepts within one loop turn fill the
    /// headroom with sockets about to go, so that the next POST or join got 503.
    func adopted(_ wsi: OpaquePointer) -> Int32 {
        state.nextSocket += 1
        let socket = AcceptedSocket(serial: state.nextSocket)
        state.sockets[wsi] = socket
        markIdle(wsi, socket, fresh: true)
        var evicted = false
        while state.liveSockets > capacity, evictOldestIdle(except: wsi) { evicted = true }
        if evicted { logPressure() }
        return 0
    }

    /// The h1 parser ran out of header-table space on some socket of this thread (lws says so
    /// only in its log) and is about to close it without a word. The socket is the one waiting
    /// for a request that has received the most bytes since it last became idle: more than the
    /// table holds, which no other socket waiting for its request can have without overflowing too.
    func headerTableOverflowed() {
        var culprit: (OpaquePointer, AcceptedSocket, UInt64)?
        for (wsi, socket) in state.sockets where socket.idle && !socket.answered {
            let received = LWS.tcpBytesReceived(wsi) &- socket.bytesAtIdle
            if received > culprit?.2 ?? UInt64(settings.maxHeaderBytes) { culprit = (wsi, socket, received) }
        }
        guard let (wsi, _, _) = culprit else { return }
        _ = rejectAndClose(wsi, .problem(431, code: "headers_too_large",
                                         detail: "the request header section is larger than this server accepts"))
    }

    func markIdle(_ wsi: OpaquePointer, _ socket: AcceptedSocket, fresh: Bool = false) {
        socket.idle = true
        socket.idleSince = DispatchTime.now().uptimeNanoseconds
        // A fresh socket's first request may already be in the kernel: it all counts.
        socket.bytesAtIdle = fresh ? 0 : LWS.tcpBytesReceived(wsi)
        markEvictable(wsi, socket)
    }

    /// Puts the socket at the end of the eviction order: it waits for its client (its request,
    /// or its request's body), and the budget may drop it to make room.
    func markEvictable(_ wsi: OpaquePointer, _ socket: AcceptedSocket) {
        state.nextIdle += 1
        socket.idleSerial = state.nextIdle
        state.idleOrder.append((wsi, socket.idleSerial, socket))
        if state.idleOrder.count > 2 * state.sockets.count + 64 {
            // Stale entries (sockets that closed or became busy) pile up with keep-alive traffic.
            let live = state.sockets.filter { $0.value.evictable }.sorted { $0.value.idleSerial < $1.value.idleSerial }
            state.idleOrder.removeAll()
            for (key, value) in live { state.idleOrder.append((key, value.idleSerial, value)) }
        }
    }

    /// Drops the socket that has waited longest for its request or its request's body (not
    /// `except`). True if one went.
    func evictOldestIdle(except: OpaquePointer?) -> Bool {
        while let (wsi, serial, socket) = state.idleOrder.peekFirst() {
            if wsi == except { return false }
            _ = state.idleOrder.popFirst()
            guard !socket.closed, socket.evictable, socket.idleSerial == serial, !socket.evicted else { continue }
            let readingBody = socket.readingBody
            socket.evicted = true
            state.evictedOpen += 1
            socket.idle = false
            socket.readingBody = false
            state.counters.socketsEvicted += 1
            state.pressure.evicted += 1
            // A socket between requests closes at once; one in the middle of its body would hold
            // its descriptor until its client's FIN (`shutDownForClose`).
            if readingBody { shutDownForClose(wsi) }
            LWS.killAsync(wsi)
            return true
        }
        return false
    }

    /// One warning per `pressureLogInterval` at most, with what happened since the last one.
    func logPressure() {
        let now = Date()
        guard now.timeIntervalSince(state.pressure.lastLog) >= Self.pressureLogInterval else { return }
        logger.warning("socket budget full", ["sockets": "\(state.openSockets)", "budget": "\(socketBudget)",
                                              "refused": "\(state.pressure.refused)", "evicted": "\(state.pressure.evicted)",
                                              "interval_seconds": "\(Int(Self.pressureLogInterval))"])
        state.pressure = Pressure(lastLog: now)
    }

    static let pressureLogInterval: TimeInterval = 10

    /// What the `/healthz` headroom serves: the probes a supervisor and a scraper need most
    /// when the server is full.
    static let headroomPaths: Set<String> = ["/healthz", "/metrics"]

    /// LWS_CALLBACK_WSI_DESTROY: the socket is gone, whatever it was; its slot of the budget is free.
    func socketDestroyed(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?) {
        if let socket = state.sockets.removeValue(forKey: wsi) {
            socket.closed = true
            if socket.evicted { state.evictedOpen -= 1 }
        } else if let user, LWSSession.id(user) != 0 {
            // A WebSocket: its socket left `sockets` when it was established.
            state.upgradedSockets -= 1
        }
        LWS.reserveSpareDescriptor()
        tlsSocketDestroyed(wsi)
    }

    /// The socket became a WebSocket (`opened`): it leaves the HTTP bookkeeping and keeps only its
    /// place in the budget's count.
    func socketUpgraded(_ wsi: OpaquePointer) {
        if let socket = state.sockets.removeValue(forKey: wsi) {
            socket.closed = true
            if socket.evicted { state.evictedOpen -= 1 }
        }
        state.upgradedSockets += 1
    }

    // MARK: TLS handshakes

    /// LWS_CALLBACK_SSL_INFO. A TLS connection is pending from its handshake's start until it is
    /// done; one destroyed while pending failed its handshake. (TLS 1.3 reports a start/done pair
    /// again for the session tickets after the handshake; a done connection stays done.)
    func tlsHandshakeProgressed(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?) {
        guard let input else { return }
        let event = LWS.sslHandshakeEvent(input)
        if event.done {
            state.tlsHandshakes[wsi] = true
        } else if event.started, state.tlsHandshakes[wsi] == nil {
            state.tlsHandshakes[wsi] = false
        }
    }

    /// A socket destroyed while its handshake was pending counts as a failed handshake.
    func tlsSocketDestroyed(_ wsi: OpaquePointer) {
        if state.tlsHandshakes.removeValue(forKey: wsi) == false { state.counters.tlsHandshakeFailures += 1 }
    }

    /// Makes lws's close of `wsi` complete at once. lws closes a socket in the middle of a request
    /// by shutting down only its sending side and waiting, descriptor open, for the client's FIN
    /// (up to `httpTimeoutSeconds`), which a client trickling a body or a head never sends: the
    /// descriptor, and its slot of the socket budget, stayed taken. With both sides shut (what the
    /// client sent drained first, so that it sees FIN rather than RST), lws's next read of the
    /// socket ends and it closes.
    func shutDownForClose(_ wsi: OpaquePointer) {
        LWS.drainSocket(wsi, limit: 1 << 20)
        LWS.shutdownBothWays(wsi)
    }
}

/// What the budget did since the last "socket budget full" line.
struct Pressure {
    var lastLog: Date
    var refused = 0
    var evicted = 0
}

final class AcceptedSocket {
    let serial: UInt64
    /// Between accept (or the end of a keep-alive response) and the next request.
    var idle = false
    /// Its request's head is in and the route waits for the body.
    var readingBody = false
    /// Waiting for its client, so the socket budget may drop it.
    var evictable: Bool { idle || readingBody }
    var idleSerial: UInt64 = 0
    /// Requests answered on it so far (keep-alive).
    var served = 0
    /// TCP bytes received when its last request went to its route (see beginHTTP: pipelining).
    var bytesAtDispatch: UInt64 = 0
    /// TCP bytes received when it last became idle (see `headerTableOverflowed`).
    var bytesAtIdle: UInt64 = 0
    var evicted = false
    /// When it last became idle (monotonic ns), for `expireHTTPDeadlines`.
    var idleSince: UInt64 = 0
    /// The transport answered it itself (rejectAndClose); nothing more may be written.
    var answered = false
    var closed = false

    init(serial: UInt64) { self.serial = serial }
}
