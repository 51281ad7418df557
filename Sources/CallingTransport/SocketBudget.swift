import Foundation

/// The socket budget's decisions (docs/architecture.md, "Socket budget"): every accepted socket
/// counted, new ones refused at the limit, the oldest of those waiting for their request or its
/// body chosen for eviction to keep the `/healthz` headroom, and TLS handshakes counted per
/// socket. Pure: it performs no I/O and reads no clock; what lws must do (close a socket, shut it
/// down first) comes back as an `Eviction`, and the server's thin driver
/// (WebSocketServer+SocketBudget.swift) does it. Service thread only. Generic over the socket's
/// key so its unit tests (SocketBudgetTests) need no lws handle. Its stored properties are unchecked
/// for exclusivity for the reason given at `WebSocketConnections`: each accept, request and close
/// touches several, and the run-time check is a thread-local lookup per access.
package final class SocketBudget<Socket: Hashable> {
    /// A socket the budget dropped: lws must close it, shut down both ways first when it was in
    /// the middle of its body (`WebSocketServer.shutDownForClose`).
    package struct Eviction: Equatable {
        package let socket: Socket
        package let readingBody: Bool

        package init(socket: Socket, readingBody: Bool) {
            self.socket = socket
            self.readingBody = readingBody
        }
    }

    /// What `admit` decided for a socket just accepted.
    package enum Admission: Equatable {
        case accept
        /// Close it at once; the budget dropped `evicting` (if any) to make room for the next one.
        case refuse(evicting: Eviction?)
    }

    /// Accepted sockets of every kind this process allows at once; set at start.
    @exclusivity(unchecked) package var limit = 0
    /// What peers and ordinary requests may use: `limit` minus the `/healthz` headroom.
    @exclusivity(unchecked) package var capacity = 0

    /// Every socket lws accepted and has not destroyed yet, until it becomes a WebSocket.
    @exclusivity(unchecked) package private(set) var sockets: [Socket: AcceptedSocket] = [:]
    /// Established WebSockets lws has not destroyed yet: they left `sockets` (and the idle
    /// order) when they were established (`upgraded`), since an open WebSocket needs none of the HTTP
    /// bookkeeping.
    @exclusivity(unchecked) package private(set) var upgradedSockets = 0
    /// Sockets evicted whose close has not completed yet (still in `sockets`).
    @exclusivity(unchecked) package private(set) var evictedOpen = 0
    /// Sockets waiting for a request or a body, oldest first (entries go stale; see `evictOldestWaiting`).
    @exclusivity(unchecked) private var idleOrder = FIFO<(Socket, UInt64, AcceptedSocket)>()
    @exclusivity(unchecked) private var nextSocket: UInt64 = 0
    @exclusivity(unchecked) private var nextIdle: UInt64 = 0
    /// TLS connections: false while their handshake runs, true once it is done.
    @exclusivity(unchecked) private var tlsHandshakes: [Socket: Bool] = [:]
    /// What happened since the last "socket budget full" line.
    @exclusivity(unchecked) package private(set) var pressure = Pressure(lastLog: .distantPast)

    /// Connections closed at accept because the budget was spent.
    @exclusivity(unchecked) package private(set) var refusedCount = 0
    /// Sockets dropped to make room.
    @exclusivity(unchecked) package private(set) var evictedCount = 0
    /// TLS connections destroyed before their handshake completed.
    @exclusivity(unchecked) package private(set) var tlsHandshakeFailures = 0

    package init() {}

    /// The budget's count.
    package var openSockets: Int { sockets.count + upgradedSockets }
    /// Open sockets not on their way out: what the `/healthz` headroom is measured against.
    package var liveSockets: Int { openSockets - evictedOpen }

    /// The socket's bookkeeping while it is not a WebSocket.
    package func socket(_ key: Socket) -> AcceptedSocket? { sockets[key] }

    /// A socket was just accepted (lws's FILTER_NETWORK_CONNECTION). At the limit it is refused,
    /// and the oldest waiting socket goes so that the next one finds room.
    package func admit() -> Admission {
        guard openSockets >= limit else { return .accept }
        refusedCount += 1
        pressure.refused += 1
        return .refuse(evicting: evictOldestWaiting(except: nil))
    }

    /// Counts a socket lws has instantiated and, once the sockets eat into the headroom, evicts the
    /// oldest ones still waiting for their request or its body (never `key`) until the rest fit
    /// in `capacity` again. Sockets already evicted do not count: their close is under way, and
    /// counting them let a burst of accepts within one loop turn fill the headroom with sockets
    /// about to go, so that the next POST or join got 503. `now`: monotonic nanoseconds.
    package func adopt(_ key: Socket, now: UInt64) -> [Eviction] {
        nextSocket += 1
        let socket = AcceptedSocket(serial: nextSocket)
        sockets[key] = socket
        // A fresh socket's first request may already be in the kernel: it all counts.
        markIdle(key, socket, now: now, bytesReceived: 0)
        var evictions: [Eviction] = []
        while liveSockets > capacity, let eviction = evictOldestWaiting(except: key) { evictions.append(eviction) }
        return evictions
    }

    /// The socket waits for its next request from now on (`now`: monotonic ns; `bytesReceived`:
    /// the TCP bytes it has received so far, see `headerOverflowCulprit`).
    package func markIdle(_ key: Socket, _ socket: AcceptedSocket, now: UInt64, bytesReceived: UInt64) {
        socket.idle = true
        socket.idleSince = now
        socket.bytesAtIdle = bytesReceived
        markEvictable(key, socket)
    }

    /// Puts the socket at the end of the eviction order: it waits for its client (its request,
    /// or its request's body), and the budget may drop it to make room.
    package func markEvictable(_ key: Socket, _ socket: AcceptedSocket) {
        nextIdle += 1
        socket.idleSerial = nextIdle
        idleOrder.append((key, socket.idleSerial, socket))
        if idleOrder.count > 2 * sockets.count + 64 {
            // Stale entries (sockets that closed or became busy) pile up with keep-alive traffic.
            let live = sockets.filter { $0.value.evictable }.sorted { $0.value.idleSerial < $1.value.idleSerial }
            idleOrder.removeAll()
            for (key, value) in live { idleOrder.append((key, value.idleSerial, value)) }
        }
    }

    /// Evicts the socket that has waited longest for its request or its request's body (not
    /// `except`); nil if none may go.
    package func evictOldestWaiting(except: Socket?) -> Eviction? {
        while let (key, serial, socket) = idleOrder.peekFirst() {
            if key == except { return nil }
            _ = idleOrder.popFirst()
            guard !socket.closed, socket.evictable, socket.idleSerial == serial, !socket.evicted else { continue }
            let readingBody = socket.readingBody
            socket.evicted = true
            evictedOpen += 1
            socket.idle = false
            socket.readingBody = false
            evictedCount += 1
            pressure.evicted += 1
            return Eviction(socket: key, readingBody: readingBody)
        }
        return nil
    }

    /// The counts to log as "socket budget full", once per `interval` seconds at most, starting
    /// the next interval's; nil while the last line is more recent.
    package func pressureReport(now: Date, interval: TimeInterval) -> Pressure? {
        guard now.timeIntervalSince(pressure.lastLog) >= interval else { return nil }
        let report = pressure
        pressure = Pressure(lastLog: now)
        return report
    }

    /// lws destroyed the socket, whatever it was (`wasWebSocket`: it had been established, so it
    /// left `sockets` then); its slot of the budget is free. A TLS socket destroyed while its
    /// handshake was pending counts as a failed handshake.
    package func destroyed(_ key: Socket, wasWebSocket: Bool) {
        if let socket = sockets.removeValue(forKey: key) {
            socket.closed = true
            if socket.evicted { evictedOpen -= 1 }
        } else if wasWebSocket {
            upgradedSockets -= 1
        }
        if tlsHandshakes.removeValue(forKey: key) == false { tlsHandshakeFailures += 1 }
    }

    /// The socket became a WebSocket: it leaves the HTTP bookkeeping and keeps only its place in
    /// the count.
    package func upgraded(_ key: Socket) {
        if let socket = sockets.removeValue(forKey: key) {
            socket.closed = true
            if socket.evicted { evictedOpen -= 1 }
        }
        upgradedSockets += 1
    }

    /// A TLS handshake event (lws's SSL_INFO). A connection is pending from its handshake's start
    /// until it is done; one destroyed while pending failed its handshake. (TLS 1.3 reports a
    /// start/done pair again for the session tickets after the handshake; a done connection stays done.)
    package func tlsHandshake(_ key: Socket, started: Bool, done: Bool) {
        if done {
            tlsHandshakes[key] = true
        } else if started, tlsHandshakes[key] == nil {
            tlsHandshakes[key] = false
        }
    }

    /// The h1 parser ran out of header-table space on some socket (lws says so only in its log):
    /// the one waiting for a request that has received the most bytes since it last became idle,
    /// more than `maxHeaderBytes`, which no other socket waiting for its request can have without
    /// overflowing too. `bytesReceived`: a socket's TCP bytes received so far.
    package func headerOverflowCulprit(maxHeaderBytes: Int, bytesReceived: (Socket) -> UInt64) -> Socket? {
        var culprit: (Socket, UInt64)?
        for (key, socket) in sockets where socket.idle && !socket.answered {
            let received = bytesReceived(key) &- socket.bytesAtIdle
            if received > culprit?.1 ?? UInt64(maxHeaderBytes) { culprit = (key, received) }
        }
        return culprit?.0
    }

    /// The sockets whose client is late with its request head (`headLate`), or idle on a
    /// keep-alive socket for longer than `keepAliveTimeout` (ns; `now` monotonic ns). A keep-alive
    /// request that has begun arriving (`bytesReceived` moved since it became idle) gets its header
    /// time too, and counts as a late head.
    package func lateSockets(now: UInt64, headerTimeout: UInt64, keepAliveTimeout: UInt64,
                             bytesReceived: (Socket) -> UInt64) -> [(socket: Socket, record: AcceptedSocket, headLate: Bool)]
    {
        var late: [(socket: Socket, record: AcceptedSocket, headLate: Bool)] = []
        for (key, socket) in sockets where socket.idle && !socket.closed && !socket.evicted {
            let waited = now &- socket.idleSince
            if socket.served == 0 {
                if waited > headerTimeout { late.append((key, socket, true)) }
            } else if waited > keepAliveTimeout {
                let started = bytesReceived(key) != socket.bytesAtIdle
                if !started || waited > keepAliveTimeout + headerTimeout { late.append((key, socket, started)) }
            }
        }
        return late
    }
}

/// What the budget did since the last "socket budget full" line.
package struct Pressure: Equatable {
    package var lastLog: Date
    package var refused = 0
    package var evicted = 0
}

/// One accepted socket's bookkeeping until it becomes a WebSocket or goes: the budget's (idle,
/// evicted) and its HTTP exchanges' (served, answered).
package final class AcceptedSocket {
    package let serial: UInt64
    /// Between accept (or the end of a keep-alive response) and the next request.
    package var idle = false
    /// Its request's head is in and the route waits for the body.
    package var readingBody = false
    /// Waiting for its client, so the socket budget may drop it.
    package var evictable: Bool { idle || readingBody }
    var idleSerial: UInt64 = 0
    /// Requests answered on it so far (keep-alive).
    package var served = 0
    /// TCP bytes received when its last request went to its route (see `HTTPExchanges.beginHTTP`: pipelining).
    var bytesAtDispatch: UInt64 = 0
    /// TCP bytes received when it last became idle (see `SocketBudget.headerOverflowCulprit`).
    package var bytesAtIdle: UInt64 = 0
    package internal(set) var evicted = false
    /// When it last became idle (monotonic ns), for `SocketBudget.lateSockets`.
    package var idleSince: UInt64 = 0
    /// The transport answered it itself (`HTTPExchanges.rejectAndClose`); nothing more may be written.
    package var answered = false
    package internal(set) var closed = false

    init(serial: UInt64) { self.serial = serial }
}
