import CallingLogging
import CallingProtocol
import Foundation

/// The socket budget's driver: lws's events handed to `SocketBudget`, which decides, and its
/// decisions carried out (a socket closed, shut down first when it was reading a body; the
/// "socket budget full" line).
extension WebSocketServer {
    /// LWS_CALLBACK_FILTER_NETWORK_CONNECTION: a socket was just accepted. Nonzero makes lws
    /// close it at once: what keeps the process below its open-file limit (lws would otherwise
    /// meet EMFILE in accept() and retry it on every loop turn).
    func admit() -> Int32 {
        guard case .refuse(let eviction) = budget.admit() else { return 0 }
        if let eviction { evict(eviction) }
        logPressure()
        return 1
    }

    /// LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: the socket counts from now on.
    func adopted(_ wsi: OpaquePointer) -> Int32 {
        let evictions = budget.adopt(wsi, now: DispatchTime.now().uptimeNanoseconds)
        for eviction in evictions { evict(eviction) }
        if !evictions.isEmpty { logPressure() }
        return 0
    }

    /// A socket waiting for its client dropped: one between requests closes at once; one in the
    /// middle of its body would hold its descriptor until its client's FIN (`shutDownForClose`).
    func evict(_ eviction: SocketBudget<OpaquePointer>.Eviction) {
        if eviction.readingBody { Self.shutDownForClose(eviction.socket) }
        LWS.killAsync(eviction.socket)
    }

    /// The h1 parser ran out of header-table space on some socket of this thread (lws says so
    /// only in its log) and is about to close it without a word: the budget names the socket, and
    /// it gets its 431.
    func headerTableOverflowed() {
        guard let wsi = budget.headerOverflowCulprit(maxHeaderBytes: settings.maxHeaderBytes, bytesReceived: LWS.tcpBytesReceived)
        else { return }
        _ = http.rejectAndClose(wsi, .problem(431, code: "headers_too_large",
                                              detail: "the request header section is larger than this server accepts"))
    }

    /// One warning per `pressureLogInterval` at most, with what happened since the last one.
    func logPressure() {
        guard let report = budget.pressureReport(now: Date(), interval: Self.pressureLogInterval) else { return }
        logger.warning("socket budget full", ["sockets": "\(budget.openSockets)", "budget": "\(budget.limit)",
                                              "refused": "\(report.refused)", "evicted": "\(report.evicted)",
                                              "interval_seconds": "\(Int(Self.pressureLogInterval))"])
    }

    static let pressureLogInterval: TimeInterval = 10

    /// What the `/healthz` headroom serves: the probes a supervisor and a scraper need most
    /// when the server is full.
    static let headroomPaths: Set<String> = ["/healthz", "/metrics"]

    /// LWS_CALLBACK_WSI_DESTROY: the socket is gone, whatever it was; its slot of the budget is free.
    func socketDestroyed(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?) {
        // A WebSocket's socket left the budget's `sockets` when it was established (its `user`
        // memory is read only then, as before the budget was a type of its own).
        let wasWebSocket = budget.socket(wsi) == nil && user.map { LWSSession.id($0) != 0 } == true
        budget.destroyed(wsi, wasWebSocket: wasWebSocket)
        LWS.reserveSpareDescriptor()
    }

    /// LWS_CALLBACK_SSL_INFO: a TLS handshake started or completed.
    func tlsHandshakeProgressed(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?) {
        guard let input else { return }
        let event = LWS.sslHandshakeEvent(input)
        budget.tlsHandshake(wsi, started: event.started, done: event.done)
    }

    /// Makes lws's close of `wsi` complete at once. lws closes a socket in the middle of a request
    /// by shutting down only its sending side and waiting, descriptor open, for the client's FIN
    /// (up to `httpTimeoutSeconds`), which a client trickling a body or a head never sends: the
    /// descriptor, and its slot of the socket budget, stayed taken. With both sides shut (what the
    /// client sent drained first, so that it sees FIN rather than RST), lws's next read of the
    /// socket ends and it closes.
    static func shutDownForClose(_ wsi: OpaquePointer) {
        LWS.drainSocket(wsi, limit: 1 << 20)
        LWS.shutdownBothWays(wsi)
    }
}
