import CallingLogging
import CallingProtocol
import Foundation
import Synchronization

/// Receives everything the server sees. Every method runs on the service thread, which owns all
/// connection state, so implementations need no locks for state they only touch from here.
public protocol WebSocketServerDelegate: AnyObject {
    /// A WebSocket upgrade arrived; decide before any 101 is sent.
    func server(_ server: WebSocketServer, shouldUpgrade request: HTTPRequest) -> UpgradeDecision
    func server(_ server: WebSocketServer, didOpen connection: ConnectionID, context: any Sendable)
    func server(_ server: WebSocketServer, didReceive message: InboundMessage, on connection: ConnectionID)
    /// A text message that arrived whole in one read (nearly every one), lent from lws's buffer for
    /// this call only: a delegate that handles it without keeping its bytes (a relayed frame)
    /// saves copying it. The default hands it on as `didReceive(.text(_:))`, copied.
    func server(_ server: WebSocketServer, didReceiveText bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID)
    /// The connection is gone (either side closed it, or the network did).
    func server(_ server: WebSocketServer, didClose connection: ConnectionID)
    /// The same, saying how it ended; the default calls `server(_:didClose:)`.
    func server(_ server: WebSocketServer, didClose connection: ConnectionID, ending: SocketEnding)
    /// A plain HTTP request; answer through `responder`, now or later (on the service thread).
    func server(_ server: WebSocketServer, handle request: HTTPRequest, responder: HTTPResponder)
}

extension WebSocketServerDelegate {
    public func server(_ server: WebSocketServer, didClose connection: ConnectionID, ending: SocketEnding) {
        self.server(server, didClose: connection)
    }

    public func server(_ server: WebSocketServer, didReceiveText bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID) {
        self.server(server, didReceive: .text(Array(bytes)), on: connection)
    }
}

/// How a WebSocket ended, as the transport saw it.
public enum SocketEnding: Sendable, Equatable {
    /// The server closed it with this code (whether or not the client answered).
    case closedByServer(UInt16)
    /// The client sent a Close frame with this code (1005 when it carried none).
    case closedByClient(UInt16)
    /// No close handshake: a reset, a timeout, the network gone.
    case dropped

    /// Whether the peer is gone for good rather than likely to reconnect (docs/protocol.md,
    /// "Reconnect grace"): the client closed with 1000 or 1001 (RFC 6455 §7.4.1: a browser
    /// sends 1001 for a page navigated away from), or the server closed with a terminal code
    /// (4400–4999) or 1001, its own stop, after which nothing would run the grace. Anything else
    /// (no Close, a client's other code, a server's 4000–4399, 1011, or the 1002/1007 answering a malformed
    /// client Close) is a connection lost.
    public var isCleanLeave: Bool {
        switch self {
        case .closedByClient(let code): return code == CloseCode.normal.rawValue || code == CloseCode.goingAway.rawValue
        case .closedByServer(let code):
            return code == CloseCode.goingAway.rawValue || CloseCode(rawValue: code)?.isTerminal == true
        case .dropped: return false
        }
    }
}

public enum TransportError: Error, CustomStringConvertible {
    case listenFailed(host: String, port: Int)
    case alreadyStarted
    /// lws did not come up with the configured certificate; the server never serves plaintext instead.
    case tlsSetupFailed(String)
    /// The server is not running, or runs without TLS.
    case notServingTLS

    public var description: String {
        switch self {
        case .listenFailed(let host, let port): return "cannot listen on \(host):\(port) (in use, or not a local address)"
        case .alreadyStarted: return "server already started"
        case .tlsSetupFailed(let detail): return "TLS setup failed: \(detail)"
        case .notServingTLS: return "the server is not serving TLS"
        }
    }
}

/// Counters read by /metrics on the service thread.
public struct TransportCounters: Sendable {
    public var accepted = 0
    public var closedSlowConsumer = 0
    public var rejectedAtCapacity = 0
    public var oversizeMessages = 0
    public var framesOut = 0
    public var bytesOut = 0
    /// WebSocket writes made once a wake-up's callbacks were done (`flushDeferred`), and from a
    /// connection's WRITEABLE callback (closing, or lws still held part of an earlier write).
    public var writesFlushed = 0
    public var writesOnWriteable = 0
    /// Connections closed at accept because the socket budget was spent.
    public var socketsRefused = 0
    /// Sockets still waiting for their request or its body, dropped to make room under the budget.
    public var socketsEvicted = 0
    /// Requests answered with a 4xx/5xx and closed by the transport itself (malformed framing,
    /// oversized headers or URL, unknown methods, CONNECT, over budget, bodies too slow).
    public var requestsRejected = 0
    /// Of those, bodies answered 408 for arriving slower than `httpBodyMinBytesPerSecond`.
    public var requestsTimedOut = 0
    /// Connections on the TLS port that closed before their TLS handshake completed: certificates
    /// the client refused, protocol versions or ciphers we refused, plaintext sent to the TLS port.
    public var tlsHandshakeFailures = 0
    /// `notAfter` (Unix seconds) of the certificate being served, as told by `setTLSCertificateExpiry`.
    public var tlsCertificateNotAfter: Int64?
    /// Successful certificate reloads (SIGHUP).
    public var tlsCertificateReloads = 0
}

/// Answers one HTTP request. Call `respond` exactly once, on the service thread; a response for a
/// request whose client has gone is dropped.
public struct HTTPResponder: Sendable {
    let server: WebSocketServer
    let exchangeID: UInt64

    public func respond(_ response: HTTPResponse) {
        server.respond(exchangeID: exchangeID, response)
    }
}

/// A libwebsockets server: one port for HTTP and WebSocket, one service thread.
///
/// Threading: `start`, `stop`, `post` and `capacity` may be called from any thread. Everything
/// else (`send`, `close`, `counters`, the delegate) belongs to the service thread. Other threads
/// reach it only through `post`, which queues a closure and wakes the loop with
/// `lws_cancel_service`, the one lws call that is safe from another thread.
public final class WebSocketServer: @unchecked Sendable {
    // @unchecked: mutable state is split in two. `inbox`/`lifecycle` are lock-protected and
    // touched from any thread; `state` is only ever touched on the service thread.
    public let settings: TransportSettings
    /// Set before `start`: the loop calls the delegate it had when it started (`ServiceRun`).
    /// Read on the service thread, so unchecked for exclusivity (see `ServiceState`). Held
    /// strongly, and let go when the service loop ends (`stop`), so a delegate may hold the
    /// server: the cycle lasts as long as the loop.
    /// Not weak: every retain and release of an object that was ever weakly referenced goes through
    /// its side table, and the delegate is called for every inbound frame (a weak load and a slow
    /// release, ~130 instructions per relayed frame under callgrind).
    @exclusivity(unchecked) public var delegate: (any WebSocketServerDelegate)?
    private let logger: Logger

    // An NSLock (pthread mutex) rather than `Mutex`: ThreadSanitizer does not see the futex
    // `Synchronization.Mutex` uses on Linux and reported every post/drain pair as a race, which
    // kept `make test-tsan` from being clean.
    private let inboxLock = NSLock()
    nonisolated(unsafe) private var inbox: [@Sendable () -> Void] = []
    private let lifecycleLock = NSLock()
    private var lifecycleState = Lifecycle()
    private let state = ServiceState()
    /// Runs `flushDeferred` after the callbacks of a wake-up (see `requestWritable`).
    private lazy var flushCall = LWSDeferredCall { [unowned self] in flushDeferred() }
    private let loopProgress = Atomic<Int64>(0)
    /// A keep-alive tick is posted and has not run yet (`startKeepAliveTicker`).
    private let keepAliveTickQueued = Atomic<Bool>(false)
    private let loopCallbacks = Atomic<Int64>(0)
    private let serviceClock = Atomic<Int32>(-1)

    private struct Lifecycle {
        var context: OpaquePointer?
        var port = 0
        var running = false
        var thread: Thread?
    }

    /// What the lws context points into (CallingWebSocket's binding); lives as long as the server.
    private let contextResources = LWSServerContextResources()

    /// Accepted sockets of every kind (HTTP, WebSocket, not yet known) this process allows at
    /// once: the open-file limit minus `reservedFileDescriptors`, at most `maxSockets`. Beyond it
    /// new connections are closed at accept, so lws never runs into EMFILE.
    public private(set) var socketBudget = 0

    /// The soft open-file limit set at start, which lws's descriptor table is sized to.
    private var openFileLimit = 1_024

    /// Peers (and ordinary requests) this process takes: the socket budget minus
    /// `healthReservedSockets`, which only `/healthz` may use.
    public private(set) var capacity = 0

    public init(settings: TransportSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
    }

    private func withLifecycle<T>(_ body: (inout Lifecycle) -> T) -> T {
        lifecycleLock.lock()
        defer { lifecycleLock.unlock() }
        return body(&lifecycleState)
    }

    /// The bound port (useful with port 0).
    public var port: Int { withLifecycle { $0.port } }

    // MARK: lifecycle

    /// Binds and starts the service thread; returns once the port is listening.
    public func start() throws {
        if withLifecycle({ $0.running }) { throw TransportError.alreadyStarted }
        // The limit is the process's, set by every start: servers started in one process (tests,
        // the in-process chat benchmark) share the last one's. Never below 1,024: the process has
        // files open already, and lws allocates a table that large in any case.
        let reserved = settings.reservedFileDescriptors
        let ceiling = settings.maxSockets > 0 ? max(1_024, min(settings.maxSockets, 1 << 40) + reserved) : nil
        if let limit = FileDescriptorLimit.set(ceiling: ceiling) {
            openFileLimit = limit
            if let ceiling, limit > ceiling {
                logger.warning("open-file limit not lowered to max_sockets", ["limit": "\(limit)", "wanted": "\(ceiling)"])
            }
        } else {
            openFileLimit = 1_024
            logger.warning("open-file limit unknown (getrlimit failed), assuming 1024")
        }
        let cap = settings.maxSockets > 0 ? settings.maxSockets : Int.max
        socketBudget = max(2, min(openFileLimit - reserved, cap))
        capacity = max(1, socketBudget - settings.healthReservedSockets)
        // lws's own notices go to stderr unformatted; keep only its warnings and errors, and turn
        // the few it reports only as log lines into state (shim.h).
        LWS.installLogHook()
        LWS.reserveSpareDescriptor()
        let ready = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<Int, TransportError>?>(nil)
        let thread = Thread { [self] in
            guard let context = createContext() else {
                // With TLS the files were validated before this, so a NULL context is still most
                // likely the port; lws's own log line on stderr says which.
                outcome.withLock { $0 = .failure(.listenFailed(host: settings.host, port: settings.port)) }
                ready.signal()
                return
            }
            if settings.tls != nil, LWS.servedCertificateExpiry(context) == nil {
                // lws starts a vhost whose certificate did not load (it only logs); never serve so.
                LWS.destroy(context)
                contextResources.contextDestroyed()
                outcome.withLock { $0 = .failure(.tlsSetupFailed("libwebsockets did not load the certificate")) }
                ready.signal()
                return
            }
            let port = LWS.listenPort(context) ?? settings.port
            withLifecycle {
                $0.context = context
                $0.port = port
                $0.running = true
            }
            outcome.withLock { $0 = .success(port) }
            ready.signal()
            runLoop(context)
        }
        thread.name = "lws-service"
        thread.stackSize = 1 << 20
        withLifecycle { $0.thread = thread }
        thread.start()
        ready.wait()
        if case .failure(let error)? = outcome.withLock({ $0 }) { throw error }
        logger.info("listening", ["host": settings.host, "port": "\(port)", "event_loop": settings.eventLoop.rawValue,
                                  "peer_capacity": "\(capacity)", "socket_budget": "\(socketBudget)",
                                  "tls": settings.tls == nil ? "off" : "on"])
    }

    /// Runs on the service thread until the context is destroyed.
    private func runLoop(_ context: OpaquePointer) {
        var clock = clockid_t()
        if pthread_getcpuclockid(pthread_self(), &clock) == 0 { serviceClock.store(clock, ordering: .relaxed) }
        LWS.setHeaderOverflowHook(context: Unmanaged.passUnretained(self).toOpaque()) { context in
            guard let context else { return }
            Unmanaged<WebSocketServer>.fromOpaque(context).takeUnretainedValue().headerTableOverflowed()
        }
        defer { LWS.setHeaderOverflowHook(context: nil, nil) }
        state.keepAlive = KeepAliveSchedule(pingAfter: Int64(settings.idlePingSeconds) * 1_000,
                                            hangUpAfter: Int64(settings.idleHangupSeconds) * 1_000,
                                            resolution: Self.keepAliveResolution, now: Self.milliseconds(),
                                            seed: UInt64.random(in: 0...UInt64.max))
        let keepAliveTicker = startKeepAliveTicker()
        defer { keepAliveTicker.cancel() }
        while withLifecycle({ $0.running }) {
            // With the libev loop lws_service only returns once the loop is stopped by the first
            // stage of lws_context_destroy; with poll() it returns after each wakeup.
            if LWS.service(context) < 0 { break }
        }
        withLifecycle { $0.context = nil }
        LWS.destroy(context)
        // Nothing calls them any more: the cycles they made with the server end here.
        contextResources.contextDestroyed()
        withLifecycle { $0.running = false }
        delegate = nil
    }

    /// Closes every WebSocket with 1001, waits up to `grace` for them to go, then stops the loop.
    /// Blocks the caller (a signal-handling thread, never the service thread).
    public func stop(grace: TimeInterval = 3) {
        guard withLifecycle({ $0.running }) else { return }
        let drained = DispatchSemaphore(value: 0)
        post { [self] in
            state.shuttingDown = true
            state.onDrained = { drained.signal() }
            if state.connections.isEmpty { drained.signal() }
            for id in state.connections.storedKeys.sorted() { close(ConnectionID(id), code: .goingAway) }
        }
        _ = drained.wait(timeout: .now() + grace)
        post { [self] in
            withLifecycle { $0.running = false }
            // First stage from inside the loop: closes every socket and stops the event loop,
            // which makes lws_service return; runLoop then performs the final destroy.
            if let context = withLifecycle({ $0.context }) { LWS.destroy(context) }
        }
        let thread = withLifecycle { $0.thread }
        let deadline = Date().addingTimeInterval(grace + 2)
        while thread?.isFinished == false, withLifecycle({ $0.context != nil }), Date() < deadline {
            usleep(10_000)
        }
    }

    /// Runs `work` on the service thread, after the work posted before it.
    public func post(_ work: @escaping @Sendable () -> Void) {
        inboxLock.lock()
        inbox.append(work)
        let wasEmpty = inbox.count == 1
        inboxLock.unlock()
        guard wasEmpty else { return }  // a wake-up is already pending
        withLifecycle { life in
            if let context = life.context { LWS.cancelService(context) }
        }
    }

    /// Makes lws read the certificate and key files again (same paths) for connections accepted from
    /// now on; live connections keep the session they negotiated and are not touched. The files
    /// must have been validated first: lws 4.1.6's `lws_tls_cert_updated` reports no failure, and
    /// loads a new certificate whose key does not match without complaint. Throws when lws serves
    /// no certificate afterwards. Blocks the caller (never call it on the service thread).
    public func reloadTLSCertificate() throws(TransportError) {
        guard let tls = settings.tls, withLifecycle({ $0.running }) else { throw .notServingTLS }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<Int64?>(nil)
        post { [self] in
            defer { done.signal() }
            guard let context = withLifecycle({ $0.context }) else { return }
            LWS.certificateUpdated(context, certificateChainFile: tls.certificateChainFile, privateKeyFile: tls.privateKeyFile)
            let expiry = LWS.servedCertificateExpiry(context)
            if expiry != nil { state.counters.tlsCertificateReloads += 1 }
            result.withLock { $0 = expiry }
        }
        guard done.wait(timeout: .now() + 10) == .success else { throw .tlsSetupFailed("the service loop did not answer") }
        guard result.withLock({ $0 }) != nil else { throw .tlsSetupFailed("libwebsockets serves no certificate") }
    }

    /// Records the served certificate's `notAfter` for /metrics. Any thread.
    public func setTLSCertificateExpiry(_ notAfter: Int64) {
        post { [self] in state.counters.tlsCertificateNotAfter = notAfter }
    }

    /// Wakes the loop without work: the watchdog's liveness probe.
    func probe() {
        withLifecycle { life in
            if let context = life.context { LWS.cancelService(context) }
        }
    }

    /// Increments each time the service thread drains its inbox; the watchdog reads it.
    public var progress: Int64 { loopProgress.load(ordering: .relaxed) }

    /// lws callbacks handled other than wake-ups: socket events that did work. A loop that burns a
    /// core while this stands still is spinning (the watchdog reads both).
    public var callbacks: Int64 { loopCallbacks.load(ordering: .relaxed) }

    /// CPU seconds the service thread has used, or nil before it runs. Any thread.
    public var serviceCPUSeconds: Double? {
        let clock = serviceClock.load(ordering: .relaxed)
        guard clock != -1 else { return nil }
        var time = timespec()
        guard clock_gettime(clock, &time) == 0 else { return nil }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func drainInbox() {
        loopProgress.add(1, ordering: .relaxed)
        inboxLock.lock()
        let work = inbox
        inbox.removeAll(keepingCapacity: true)
        inboxLock.unlock()
        for item in work {
            item()
            countTowardsFlush()
        }
    }

    /// One more event handled (an inbound frame, an upgrade, a posted piece of work) while the
    /// loop may keep finding more: after `flushAfterFrames` of them, what they queued is written.
    @inline(__always)
    private func countTowardsFlush() {
        state.framesSinceFlush += 1
        if state.framesSinceFlush > settings.flushAfterFrames, !state.flushList.isEmpty { flushDeferred() }
    }

    // MARK: keep-alive (docs/protocol.md, "Keep-alive")

    /// Milliseconds per keep-alive bucket: how late after its moment a PING or a hang-up may come.
    static let keepAliveResolution: Int64 = 100

    /// Monotonic milliseconds, the keep-alive schedule's clock.
    private static func milliseconds() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// Posts `keepAliveTick` every bucket from a timer off the service thread. Not an lws timer:
    /// a timer the service thread schedules from inside lws's own run of timers may wait for the
    /// libev loop's next timeout (see `LWSDeferredCall.due`), and one post per tick costs a wake-up.
    private func startKeepAliveTicker() -> any DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: .global(qos: .userInitiated))
        let interval = Int(Self.keepAliveResolution)
        timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval), leeway: .milliseconds(interval / 10))
        timer.setEventHandler { [unowned self] in
            // At most one tick waits in the inbox: a stalled loop catches up in one tick, not many.
            guard !keepAliveTickQueued.exchange(true, ordering: .relaxed) else { return }
            post { [unowned self] in
                keepAliveTickQueued.store(false, ordering: .relaxed)
                keepAliveTick()
            }
        }
        timer.resume()
        return timer
    }

    /// Sends the PINGs that are due (each as the connection's next write, ahead of what is queued
    /// for it: a control frame may come between messages, RFC 6455 §5.4) and drops the sockets that did not answer in time, without a close frame.
    private func keepAliveTick() {
        guard state.keepAlive != nil else { return }
        state.keepAliveActions.removeAll(keepingCapacity: true)
        state.keepAlive!.advance(to: Self.milliseconds(), into: &state.keepAliveActions)
        for action in state.keepAliveActions {
            switch action {
            case .ping(let id):
                guard let conn = state.connections[id], conn.closeCode == nil else { continue }
                conn.pingDue = true
                requestWritable(conn)
            case .hangUp(let id):
                guard let conn = state.connections[id], !conn.closed else { continue }
                // NOSTATUS from lws's timer processing: the same close lws's own idle policy made,
                // no close frame (the peer is presumed gone).
                LWS.killAsync(conn.wsi)
            }
        }
    }

    // MARK: service-thread API

    /// Counters for /metrics. Service thread only.
    public var counters: TransportCounters { state.counters }

    /// Open WebSocket connections. Service thread only.
    public var connectionCount: Int { state.connections.count }

    /// Queues `message` for `connection`. A connection whose queue passes `maxQueueBytes` is closed
    /// as a slow consumer from its own WRITEABLE callback (docs/architecture.md, "The lws #2889 guards").
    public func send(_ message: OutboundMessage, to connection: ConnectionID) {
        guard let conn = state.connections[connection.rawValue], conn.closeCode == nil else { return }
        conn.queue.append(message)
        conn.queuedBytes += message.count
        queued(conn, connection)
    }

    /// Queues one frame of `count` bytes for `connection` alone (an addressed relay), which `write`
    /// puts in place: framed straight into the connection's pending bytes, which its next write
    /// (`writeNext`) writes at once, so no message is allocated, queued and copied per frame. Same
    /// order, limits and slow-consumer close as `send(_:to:)`: the bytes are pending only while
    /// nothing is queued before them, and a frame that arrives behind queued messages (or would
    /// take the pending bytes past `maxCoalescedBytes`) is queued as a message instead.
    public func send(count: Int, to connection: ConnectionID, writing write: (UnsafeMutablePointer<UInt8>) -> Void) {
        // Borrowed from the table, not copied out of it (a retain and a release per relayed
        // frame): nothing below removes a connection from `connections`.
        guard let entry = state.connections.unretained(for: connection.rawValue) else { return }
        entry._withUnsafeGuaranteedRef { conn in
            guard conn.closeCode == nil else { return }
            let framed = count + WebSocketFraming.headerSize(length: count)
            guard conn.queue.isEmpty, conn.pendingUsed + framed <= settings.maxCoalescedBytes else {
                return send(OutboundMessage(count: count, writing: write), to: connection)
            }
            let start = conn.reservePending(framed)
            let header = WebSocketFraming.writeHeader(.text, length: count, into: start)
            write((start + header).assumingMemoryBound(to: UInt8.self))
            conn.notePending(framed: framed, payload: count)
            conn.queuedBytes += count
            queued(conn, connection)
        }
    }

    /// After a frame was queued: closes a connection whose queue passed `maxQueueBytes`, else has
    /// it written soon.
    @inline(__always)
    private func queued(_ conn: WSConnection, _ connection: ConnectionID) {
        if conn.queuedBytes > settings.maxQueueBytes {
            conn.queue.removeAll()
            conn.dropPending()
            conn.queuedBytes = 0
            conn.closeCode = CloseCode.slowConsumer.rawValue
            state.counters.closedSlowConsumer += 1
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
    private func requestWritable(_ conn: WSConnection) {
        if conn.writablePending || conn.flushListed { return }
        if conn.closeCode != nil { return requestWritableCallback(conn) }
        conn.flushListed = true
        state.flushList.append(conn)
        flushCall.schedule(on: conn.wsi)
    }

    /// Asks lws for a WRITEABLE callback unless one is already due. Each `lws_callback_on_writable`
    /// re-arms the socket's write watcher in the event loop (two `epoll_ctl`, set and cleared),
    /// even when POLLOUT is already set.
    private func requestWritableCallback(_ conn: WSConnection) {
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
    private func flushDeferred() {
        swap(&state.flushList, &state.flushing)
        state.framesSinceFlush = 0
        for conn in state.flushing {
            conn.flushListed = false
            guard !conn.closed, !conn.writablePending else { continue }
            if conn.closeCode != nil || LWS.hasBufferedOutput(conn.wsi) {
                requestWritableCallback(conn)
                continue
            }
            if conn.pendingUsed == 0, conn.queue.isEmpty, !conn.pingDue { continue }
            state.counters.writesFlushed += 1
            if writeNext(conn, wsi: conn.wsi) < 0 { LWS.killAsync(conn.wsi) }
        }
        state.flushing.removeAll(keepingCapacity: state.flushing.capacity <= 4_096)
    }

    /// Closes after the frames already queued have been written.
    public func close(_ connection: ConnectionID, code: CloseCode) {
        guard let conn = state.connections[connection.rawValue], conn.closeCode == nil else { return }
        conn.closeCode = code.rawValue
        armCloseDeadline(conn)
        requestWritable(conn)
    }

    /// The close normally happens in the connection's own WRITEABLE callback, but a peer that has
    /// stopped reading never becomes writeable again while lws holds part of a frame for it. So
    /// every close also arms an lws timeout: if WRITEABLE has not come by then, lws drops the
    /// socket from its own timer processing (no close frame can be sent to such a peer anyway).
    private func armCloseDeadline(_ conn: WSConnection, seconds: Int? = nil) {
        LWS.setUserTimeout(conn.wsi, seconds: seconds ?? settings.closeTimeoutSeconds)
    }

    func respond(exchangeID: UInt64, _ response: HTTPResponse) {
        guard let exchange = state.exchangesByID[exchangeID], exchange.response == nil else { return }
        exchange.response = response
        LWS.callbackOnWritable(exchange.wsi)
    }

    // MARK: context

    private func createContext() -> OpaquePointer? {
        let tls = settings.tls.map {
            LWSServerOptions.TLS(certificateChainFile: $0.certificateChainFile, privateKeyFile: $0.privateKeyFile,
                                 cipherList: $0.cipherList, tls13Only: $0.minimumVersion == .tls13)
        }
        // Each known header is cut at its limit + 1 instead of failing, so an oversized target
        // still reaches LWS_CALLBACK_HTTP and gets its 414 (framingProblem). fd_limit_per_thread is
        // the whole open-file limit, not our smaller socket budget (`admit` enforces that): below
        // the limit lws 4.1.6 flags its fd table as "unrelated to ulimit" and then finds the wsi of
        // every socket event by scanning the whole table (wsi_from_fd), a cost that grew with every
        // open connection (a third of the service thread with 8,000 idle peers).
        var options = LWSServerOptions(
            host: settings.host, port: settings.port, bufferBytes: settings.maxFrameBytes + 1024,
            headerTokenLimit: settings.maxHeaderBytes + 1, uriTokenLimit: effectiveURLLimit + 1,
            maxHeaderBytes: settings.maxHeaderBytes, httpTimeoutSeconds: settings.httpTimeoutSeconds,
            fdLimitPerThread: max(1024, openFileLimit),
            libev: settings.eventLoop == .libev, tls: tls)
        options.headerTimeoutSeconds = settings.httpHeaderTimeoutSeconds
        options.keepAliveTimeoutSeconds = settings.httpKeepAliveTimeoutSeconds
        return contextResources.createContext(options, handler: ServiceRun(server: self, delegate: delegate))
    }

    // MARK: callback (service thread)

    /// One lws callback. `delegate`: the run's (`ServiceRun`), borrowed for the call.
    fileprivate func handle(_ wsi: OpaquePointer, _ reason: LWSServerEvent, _ user: UnsafeMutableRawPointer?,
                            _ input: UnsafeMutableRawPointer?, _ length: Int, delegate: (any WebSocketServerDelegate)?) -> Int32
    {
        // A pattern, not `!=`: the enum's `==` is another module's synthesized conformance, called
        // through the Equatable witness (~20 instructions) on every callback. A load and a store,
        // not `add`: this thread is the counter's only writer, so a locked read-modify-write on
        // every callback (one per inbound frame) would buy nothing.
        if case .eventWaitCancelled = reason {} else {
            loopCallbacks.store(loopCallbacks.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        }
        switch reason {
        case .eventWaitCancelled:
            drainInbox()
            return 0

        case .filterNetworkConnection:
            return admit()

        case .serverNewClientInstantiated:
            return adopted(wsi)

        case .wsiDestroy:
            if let socket = state.sockets.removeValue(forKey: wsi) {
                socket.closed = true
                if socket.evicted { state.evictedOpen -= 1 }
            } else if let user, LWSSession.id(user) != 0 {
                // A WebSocket: its socket left `sockets` when it was established.
                state.upgradedSockets -= 1
            }
            LWS.reserveSpareDescriptor()
            if state.tlsHandshakes.removeValue(forKey: wsi) == false { state.counters.tlsHandshakeFailures += 1 }
            return 0

        case .rawAdopt:
            // Only requests lws cannot parse as HTTP get here (see cs_lws_option_fallback_to_raw):
            // an unknown method, or CONNECT, which lws would otherwise hold open as a raw tunnel.
            state.sockets[wsi]?.idle = false
            return 0

        case .rawRx:
            let head = input.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: min(length, 16)), as: UTF8.self) }
            if head?.hasPrefix("CONNECT ") == true {
                return rejectAndClose(wsi, .problem(405, code: "method_not_allowed", detail: "CONNECT is not supported",
                                                    headers: [("allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")]))
            }
            return rejectAndClose(wsi, .problem(501, code: "method_not_implemented",
                                                detail: "the request method is not one this server implements"))

        case .httpConfirmUpgrade:
            return confirmUpgrade(wsi, input: input)

        case .sslInfo:
            // A TLS connection is pending from its handshake's start until it is done; one
            // destroyed while pending failed its handshake. (TLS 1.3 reports a start/done pair
            // again for the session tickets after the handshake; a done connection stays done.)
            guard let input else { return 0 }
            let event = LWS.sslHandshakeEvent(input)
            if event.done {
                state.tlsHandshakes[wsi] = true
            } else if event.started, state.tlsHandshakes[wsi] == nil {
                state.tlsHandshakes[wsi] = false
            }
            return 0

        case .established:
            guard let user, let context = state.pendingUpgrades.removeValue(forKey: wsi) else { return -1 }
            // A join storm is a loop that keeps finding input too: upgrades, and the joins they
            // complete (`drainInbox`), each queueing a welcome and its room's peer-joined frames.
            // Waiting for a wake-up with nothing pending held thousands of them at once (0.58 KiB
            // more heap per idle peer at 19,000, kept after they were written), so both count
            // towards the flush as inbound frames do.
            countTowardsFlush()
            state.nextConnection += 1
            let id = ConnectionID(state.nextConnection)
            let conn = WSConnection(wsi: wsi)
            // The connection's own state is reached from the callbacks' `user` memory from now on
            // (unretained; `connections` owns it, and `.closed` clears the pointer before letting
            // go). Its socket no longer needs the HTTP bookkeeping: only the budget's count.
            LWSSession.store(user, id: id.rawValue, object: Unmanaged.passUnretained(conn).toOpaque())
            state.connections.insert(conn, for: id.rawValue)
            state.keepAlive?.opened(id.rawValue, at: Self.milliseconds())
            if let socket = state.sockets.removeValue(forKey: wsi) {
                socket.closed = true
                if socket.evicted { state.evictedOpen -= 1 }
            }
            state.upgradedSockets += 1
            state.counters.accepted += 1
            delegate?.server(self, didOpen: id, context: context)
            return 0

        case .receive:
            guard let user, let object = LWSSession.object(user) else { return 0 }
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
            return 0

        case .receivePong:
            // Only a PONG confirms a socket (docs/protocol.md, "Keep-alive"); lws answers PINGs itself.
            guard let user else { return 0 }
            let id = LWSSession.id(user)
            if id != 0 { state.keepAlive?.confirmed(id, at: Self.milliseconds()) }
            return 0

        case .peerInitiatedClose:
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

        case .serverWriteable:
            guard let user, let conn = Self.connection(user) else { return 0 }
            conn.writablePending = false
            if !conn.closeFrameSent, conn.closeCode != nil || conn.pendingUsed > 0 || !conn.queue.isEmpty || conn.pingDue {
                state.counters.writesOnWriteable += 1
            }
            return writeNext(conn, wsi: wsi)

        case .closed:
            state.pendingUpgrades[wsi] = nil
            guard let user else { return 0 }
            let id = ConnectionID(LWSSession.id(user))
            LWSSession.store(user, id: id.rawValue, object: nil)
            let peerClose = state.peerCloses.isEmpty ? nil : state.peerCloses.removeValue(forKey: id.rawValue)
            guard let conn = state.connections.removeValue(for: id.rawValue) else { return 0 }
            state.keepAlive?.closed(id.rawValue)
            conn.closed = true
            let ending: SocketEnding = conn.closeCode.map(SocketEnding.closedByServer) ?? peerClose.map(SocketEnding.closedByClient) ?? .dropped
            delegate?.server(self, didClose: id, ending: ending)
            if state.shuttingDown, state.connections.isEmpty { state.onDrained?() }
            return 0

        case .http:
            return beginHTTP(wsi, input: input, length: length)

        case .httpBody:
            // Evicted by the socket budget: lws re-arms its own body timer after every piece of
            // body, which would outlast the kill `evictOldestIdle` asked for.
            if let socket = state.sockets[wsi], socket.evicted { return -1 }
            // A request already dispatched has no body to read. lws 4.1.6 can still deliver one for
            // it when requests are pipelined behind a bodiless POST, from a buffer it has already
            // freed (AddressSanitizer, found by the http fuzz target): never touch `input` then.
            guard let exchange = state.exchanges[wsi], !exchange.dispatched, let input else { return 0 }
            if let rejection = bodyTooSlow(wsi, exchange, adding: length) {
                exchange.dispatched = true
                return rejectAndClose(wsi, rejection)
            }
            if exchange.request.body.count + length > settings.maxBodyBytes {
                exchange.bodyTooLarge = true
            } else {
                exchange.request.body.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
            }
            return 0

        case .httpBodyCompletion:
            guard let exchange = state.exchanges[wsi] else { return 0 }
            dispatchHTTP(exchange)
            return 0

        case .httpWriteable:
            guard let exchange = state.exchanges[wsi] else { return 0 }
            return writeHTTP(exchange, wsi: wsi)

        case .closedHTTP:
            state.pendingUpgrades[wsi] = nil
            if let exchange = state.exchanges.removeValue(forKey: wsi) {
                state.exchangesByID[exchange.id] = nil
            }
            return 0

        default:
            return 0
        }
    }

    private func confirmUpgrade(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?) -> Int32 {
        state.sockets[wsi]?.idle = false
        // `Upgrade: h2c` (what `curl --http2` offers over plain HTTP) may be ignored (RFC 9113
        // §3.2), and lws would switch the socket to HTTP/2 if we agreed. lws passes the header
        // value in place: blanking it makes lws carry on with an ordinary HTTP/1.1 request.
        if let input, String(cString: input.assumingMemoryBound(to: CChar.self)).lowercased() == "h2c" {
            input.storeBytes(of: UInt8(ascii: "-"), as: UInt8.self)
            return 0
        }
        let path = LWS.header(wsi, .getURI) ?? "/"
        if let rejection = framingProblem(wsi, path: path, upgrade: true) { return rejectAndClose(wsi, rejection) }
        guard var request = readRequest(wsi, method: .get) else { return -1 }
        request.path = path
        if LWS.header(wsi, .version) != "13" {
            // RFC 6455 §4.4: refuse other versions and name the one we speak.
            return writeImmediate(wsi, .problem(426, code: "unsupported_websocket_version",
                                                detail: "only WebSocket version 13 (RFC 6455) is supported",
                                                headers: [("sec-websocket-version", "13")]))
        }
        if state.shuttingDown {
            return writeImmediate(wsi, .problem(503, code: "shutting_down", detail: "the server is shutting down",
                                                headers: [("retry-after", "1")]))
        }
        if state.connections.count + state.pendingUpgrades.count >= capacity {
            state.counters.rejectedAtCapacity += 1
            logger.warning("refusing peer at capacity", ["capacity": "\(capacity)"])
            return writeImmediate(wsi, .problem(503, code: "at_capacity", detail: "the server holds as many peers as it can",
                                                headers: [("retry-after", "5")]))
        }
        guard let delegate else { return -1 }
        switch delegate.server(self, shouldUpgrade: request) {
        case .accept(let context):
            state.pendingUpgrades[wsi] = context
            return 0
        case .reject(let response):
            return writeImmediate(wsi, response)
        }
    }

    /// Writes a complete small response from inside a callback (upgrade refusal). The head is
    /// built by hand: at this point lws has not recorded the request's HTTP version, and its header
    /// helpers would answer "HTTP/1.0", which WebSocket clients reject as an invalid response.
    /// lws buffers whatever the socket does not take at once.
    private func writeImmediate(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Int32 {
        let message = OutboundMessage(Self.immediateBytes(response))
        if LWS.write(wsi, message.payloadPointer, message.count, .httpFinal) < 0 { return -1 }
        return 1
    }

    static func immediateBytes(_ response: HTTPResponse) -> [UInt8] {
        var head = "HTTP/1.1 \(response.status) \(HTTPResponse.reasonPhrase(response.status))\r\n"
        head += "server: calling-server\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "content-length: \(response.body.count)\r\nconnection: close\r\n\r\n"
        return Array(head.utf8) + response.body
    }

    /// Answers and closes: for requests whose framing cannot be trusted (RFC 9112 §6.3), so
    /// nothing after them on the connection may be read as another request. Returning -1 makes
    /// lws close the socket once what we wrote has gone out.
    private func rejectAndClose(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Int32 {
        state.counters.requestsRejected += 1
        if let socket = state.sockets[wsi] {
            socket.answered = true
            socket.idle = false
            socket.readingBody = false
        }
        // What the client already sent is unread; closing over it would send RST, and the client
        // might lose this answer. Bounded: a peer streaming forever is cut off anyway.
        LWS.drainSocket(wsi, limit: 1 << 20)
        let message = OutboundMessage(Self.immediateBytes(response))
        _ = LWS.write(wsi, message.payloadPointer, message.count, .httpFinal)
        return -1
    }

    // MARK: socket budget

    /// LWS_CALLBACK_FILTER_NETWORK_CONNECTION: a socket was just accepted. Nonzero makes lws
    /// close it at once: what keeps the process below its open-file limit (lws would otherwise
    /// meet EMFILE in accept() and retry it on every loop turn).
    private func admit() -> Int32 {
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
    private func adopted(_ wsi: OpaquePointer) -> Int32 {
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
    fileprivate func headerTableOverflowed() {
        var culprit: (OpaquePointer, AcceptedSocket, UInt64)?
        for (wsi, socket) in state.sockets where socket.idle && !socket.answered {
            let received = LWS.tcpBytesReceived(wsi) &- socket.bytesAtIdle
            if received > culprit?.2 ?? UInt64(settings.maxHeaderBytes) { culprit = (wsi, socket, received) }
        }
        guard let (wsi, _, _) = culprit else { return }
        _ = rejectAndClose(wsi, .problem(431, code: "headers_too_large",
                                         detail: "the request header section is larger than this server accepts"))
    }

    private func markIdle(_ wsi: OpaquePointer, _ socket: AcceptedSocket, fresh: Bool = false) {
        socket.idle = true
        socket.idleSince = DispatchTime.now().uptimeNanoseconds
        // A fresh socket's first request may already be in the kernel: it all counts.
        socket.bytesAtIdle = fresh ? 0 : LWS.tcpBytesReceived(wsi)
        markEvictable(wsi, socket)
    }

    /// Puts the socket at the end of the eviction order: it waits for its client (its request,
    /// or its request's body), and the budget may drop it to make room.
    private func markEvictable(_ wsi: OpaquePointer, _ socket: AcceptedSocket) {
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
    private func evictOldestIdle(except: OpaquePointer?) -> Bool {
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
    private func logPressure() {
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

    /// The target must fit in the header table with room for the rest of the head, or an
    /// oversized one would overflow the table (431) before it could be measured (414).
    private var effectiveURLLimit: Int { max(1, min(settings.maxURLBytes, settings.maxHeaderBytes - 512)) }

    /// Why a parsed request cannot be served as it stands, or nil. Checked before any route
    /// sees it; every answer here also closes the connection.
    private func framingProblem(_ wsi: OpaquePointer, path: String, upgrade: Bool) -> HTTPResponse? {
        let sizes = LWS.headerSizes(wsi)
        if sizes.uri > effectiveURLLimit {
            return .problem(414, code: "uri_too_long", detail: "request targets are limited to \(effectiveURLLimit) bytes")
        }
        if sizes.longest > settings.maxHeaderBytes || sizes.total > settings.maxHeaderBytes {
            return .problem(431, code: "headers_too_large",
                            detail: "the request head is limited to \(settings.maxHeaderBytes) bytes")
        }
        if state.liveSockets > capacity, !Self.headroomPaths.contains(path) {
            state.counters.rejectedAtCapacity += 1
            return .problem(503, code: "at_capacity", detail: "the server holds as many connections as it can",
                            headers: [("retry-after", "5")])
        }
        if upgrade { return nil }
        let lengths = LWS.fragmentCount(wsi, .contentLength)
        let transferEncoding = LWS.headerLength(wsi, .transferEncoding) > 0
        if lengths > 0 {
            if transferEncoding {
                return .problem(400, code: "conflicting_framing",
                                detail: "Content-Length and Transfer-Encoding must not both be present (RFC 9112 §6.3)")
            }
            guard lengths == 1, let value = LWS.header(wsi, .contentLength),
                  HTTPFraming.contentLength(value) != nil
            else {
                return .problem(400, code: "invalid_content_length",
                                detail: "Content-Length must be one decimal number (RFC 9110 §8.6)")
            }
        } else if transferEncoding {
            return .problem(411, code: "length_required",
                            detail: "request bodies need a Content-Length; Transfer-Encoding is not accepted")
        }
        return nil
    }

    private func receive(_ conn: WSConnection, id: ConnectionID, wsi: OpaquePointer, input: UnsafeMutableRawPointer?,
                         length: Int, delegate: (any WebSocketServerDelegate)?)
    {
        // After our Close only the client's Close matters (RFC 6455 §5.5.1).
        if conn.closeFrameSent { return }
        if LWS.isFirstFragment(wsi) {
            if length <= settings.maxFrameBytes, LWS.isMessageEnd(wsi) {
                // The whole message in one callback, as nearly every one arrives: lent from lws's
                // buffer for the delegate's call, which copies only what it keeps (a relayed frame
                // is written from it into its target's pending bytes; copying it into an array
                // first was ~150 of the instructions of a relayed frame).
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

    private func writeNext(_ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        if conn.closeFrameSent { return 0 }
        if let code = conn.closeCode, code == CloseCode.slowConsumer.rawValue || (conn.queue.isEmpty && conn.pendingUsed == 0) {
            return sendCloseFrame(code, conn, wsi: wsi)
        }
        if conn.pingDue { return sendPing(conn, wsi: wsi) }
        if conn.pendingUsed > 0 {
            // Older than anything queued (see `send(count:to:writing:)`): these go first, in one
            // write, as a coalesced batch would.
            let length = conn.pendingUsed
            let start = conn.pendingFramesStart.assumingMemoryBound(to: UInt8.self)
            guard LWS.write(wsi, start, length, .http) >= length else { return -1 }
            state.counters.framesOut += conn.pendingFrames
            state.counters.bytesOut += length
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
            state.counters.framesOut += 1
            state.counters.bytesOut += first.count
        } else {
            written = writeCoalesced(first, conn, wsi: wsi)
        }
        if written < 0 { return -1 }
        if !conn.queue.isEmpty || conn.closeCode != nil { requestWritable(conn) }
        return 0
    }

    /// The connection whose `user` memory this is, while it is open (see `.established`).
    @inline(__always)
    private static func connection(_ user: UnsafeMutableRawPointer) -> WSConnection? {
        LWSSession.object(user).map { Unmanaged<WSConnection>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Starts the closing handshake (RFC 6455 §7.1.1): our Close goes out, the socket stays open
    /// (inbound frames are discarded) until the client's Close arrives, then lws closes TCP. lws
    /// 4.1.6 as a server would drop TCP right after its own Close, so a client still sending gets
    /// a reset and reports 1006 instead of the code we meant (fatal for terminal codes such as
    /// 4400, which SDKs must see to stop reconnecting). The close deadline still bounds the wait.
    private func sendCloseFrame(_ code: UInt16, _ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        // A control frame's payload is at most 125 bytes (RFC 6455 §5.5): the code, then the reason.
        let reason = (CloseCode(rawValue: code)?.reason ?? "").utf8.prefix(123)
        conn.closeFrameSent = true
        conn.queue.removeAll()
        conn.dropPending()
        conn.queuedBytes = 0
        armCloseDeadline(conn, seconds: code == CloseCode.slowConsumer.rawValue ? 1 : nil)
        let buffer = state.writeBuffer(capacity: OutboundMessage.headroom + WebSocketFraming.maxHeaderBytes + 125)
        let start = buffer + OutboundMessage.headroom
        var length = WebSocketFraming.writeHeader(.close, length: 2 + reason.count, into: start)
        start.storeBytes(of: code.bigEndian, toByteOffset: length, as: UInt16.self)
        length += 2
        for byte in reason {
            start.storeBytes(of: byte, toByteOffset: length, as: UInt8.self)
            length += 1
        }
        return LWS.write(wsi, start.assumingMemoryBound(to: UInt8.self), length, .http) < length ? -1 : 0
    }

    /// The keep-alive's PING, in a write of its own; what is queued follows in the next. Its
    /// payload is the time it went out (8 bytes, big-endian milliseconds): lws 4.1.6 reports no
    /// PONG whose payload is empty (`lws_ws_rx_sm`), so a PING without one would get answers the
    /// server never sees.
    private func sendPing(_ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        conn.pingDue = false
        let buffer = state.writeBuffer(capacity: OutboundMessage.headroom + WebSocketFraming.maxHeaderBytes + 8)
        let start = buffer + OutboundMessage.headroom
        let header = WebSocketFraming.writeHeader(.ping, length: 8, into: start)  // RFC 6455 §5.5.2
        start.storeBytes(of: UInt64(Self.milliseconds()).bigEndian, toByteOffset: header, as: UInt64.self)
        let length = header + 8
        guard LWS.write(wsi, start.assumingMemoryBound(to: UInt8.self), length, .http) >= length else { return -1 }
        if conn.pendingUsed > 0 || !conn.queue.isEmpty || conn.closeCode != nil { requestWritable(conn) }
        return 0
    }

    /// Several queued frames in one write: the WebSocket headers are framed here and the batch
    /// goes out as raw bytes in a single `lws_write` (still one write per `writeNext`). Under load a
    /// peer often has many small frames queued (acks, broadcasts); one syscall for all of them is
    /// what keeps the service thread ahead. Server frames are unmasked, so framing is trivial.
    private func writeCoalesced(_ first: OutboundMessage, _ conn: WSConnection, wsi: OpaquePointer) -> Int32 {
        // Framed straight into the service thread's write buffer as the messages are taken off the
        // queue: no batch array and no buffer allocated per write (a fan-out writes once per
        // recipient per wake-up).
        let buffer = state.writeBuffer(capacity: OutboundMessage.headroom + max(settings.maxCoalescedBytes, first.count + 10))
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
        state.counters.framesOut += frames
        state.counters.bytesOut += length
        return 0
    }

    // MARK: HTTP

    private func beginHTTP(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?, length: Int) -> Int32 {
        state.sockets[wsi]?.idle = false
        let path = input.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: max(0, length)), as: UTF8.self) } ?? "/"
        if let rejection = framingProblem(wsi, path: path, upgrade: false) { return rejectAndClose(wsi, rejection) }
        guard let method = requestMethod(wsi), var request = readRequest(wsi, method: method) else { return -1 }
        if length > 0 { request.path = path }
        state.nextExchange += 1
        let exchange = HTTPExchange(id: state.nextExchange, wsi: wsi, request: request)
        if let previous = state.exchanges[wsi] { state.exchangesByID[previous.id] = nil }
        state.exchanges[wsi] = exchange
        state.exchangesByID[exchange.id] = exchange
        // framingProblem has vouched for it: one plain decimal number, no Transfer-Encoding.
        let declaredLength = request.headers["content-length"].flatMap(HTTPFraming.contentLength) ?? 0
        if declaredLength > 0, let socket = state.sockets[wsi], socket.served > 0,
           LWS.tcpBytesReceived(wsi) == socket.bytesAtDispatch
        {
            // Nothing arrived since the previous request was handed to its route, before its
            // answer went out: this one had been pipelined behind it. lws 4.1.6 loops forever on the body of such a request
            // (BODY_COMPLETION repeated every turn; found by the http fuzz target), so the
            // connection closes before it, which RFC 9112 §9.3.2 lets clients recover from.
            state.counters.requestsRejected += 1
            return -1
        }
        if declaredLength > settings.maxBodyBytes {
            exchange.bodyTooLarge = true
            dispatchHTTP(exchange)
        } else if declaredLength == 0 {
            dispatchHTTP(exchange)
        } else if let socket = state.sockets[wsi] {
            // The body arrives through HTTP_BODY and is dispatched on HTTP_BODY_COMPLETION. Until
            // then the socket holds a slot of the budget for a client that may never finish, so
            // it can be evicted like one that never sends its request (`evictOldestIdle`).
            exchange.bodyStartedAt = DispatchTime.now().uptimeNanoseconds
            markEvictable(wsi, socket)
            socket.readingBody = true
        }
        return 0
    }

    /// The 408 for a body that has fallen below `httpBodyMinBytesPerSecond` on average after
    /// `httpBodyGraceSeconds`, or nil. A body that stops altogether gets no callback to check it
    /// in: lws's own timer (`httpTimeoutSeconds`) drops that socket.
    private func bodyTooSlow(_ wsi: OpaquePointer, _ exchange: HTTPExchange, adding length: Int) -> HTTPResponse? {
        exchange.bodyBytesReceived += length
        let minimum = settings.httpBodyMinBytesPerSecond
        guard minimum > 0, exchange.bodyStartedAt > 0 else { return nil }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds &- exchange.bodyStartedAt) / 1e9
        guard elapsed > Double(settings.httpBodyGraceSeconds),
              Double(exchange.bodyBytesReceived) < Double(minimum) * elapsed
        else { return nil }
        state.counters.requestsTimedOut += 1
        return .problem(408, code: "body_too_slow",
                        detail: "request bodies must arrive at \(minimum) bytes per second or faster after \(settings.httpBodyGraceSeconds) s")
    }

    private func dispatchHTTP(_ exchange: HTTPExchange) {
        guard !exchange.dispatched else { return }
        exchange.dispatched = true
        state.sockets[exchange.wsi]?.readingBody = false
        state.sockets[exchange.wsi]?.bytesAtDispatch = LWS.tcpBytesReceived(exchange.wsi)
        if exchange.bodyTooLarge {
            respond(exchangeID: exchange.id, .problem(413, code: "body_too_large",
                                                      detail: "request bodies are limited to \(settings.maxBodyBytes) bytes"))
            return
        }
        guard let delegate else {
            respond(exchangeID: exchange.id, .problem(503, code: "unavailable", detail: "server is not ready"))
            return
        }
        delegate.server(self, handle: exchange.request, responder: HTTPResponder(server: self, exchangeID: exchange.id))
    }

    private func writeHTTP(_ exchange: HTTPExchange, wsi: OpaquePointer) -> Int32 {
        guard let response = exchange.response else { return 0 }
        if !exchange.headersSent {
            exchange.headersSent = true
            guard writeHeaders(wsi, response) else { return -1 }
            if response.body.isEmpty || exchange.request.method == .head { return completeHTTP(exchange, wsi: wsi) }
            LWS.callbackOnWritable(wsi)
            return 0
        }
        let chunkSize = 16_384
        let end = min(response.body.count, exchange.bodyOffset + chunkSize)
        let chunk = OutboundMessage(response.body[exchange.bodyOffset..<end])
        let final = end == response.body.count
        if LWS.write(wsi, chunk.payloadPointer, chunk.count, final ? .httpFinal : .http) < 0 { return -1 }
        exchange.bodyOffset = end
        if final { return completeHTTP(exchange, wsi: wsi) }
        LWS.callbackOnWritable(wsi)
        return 0
    }

    private func completeHTTP(_ exchange: HTTPExchange, wsi: OpaquePointer) -> Int32 {
        state.exchanges[wsi] = nil
        state.exchangesByID[exchange.id] = nil
        if let socket = state.sockets[wsi] {
            socket.served += 1
            markIdle(wsi, socket)
        }
        // Keep-alive: lws waits for the next request on this socket, or tells us to close it.
        return LWS.transactionCompleted(wsi) != 0 ? -1 : 0
    }

    /// Makes lws's close of `wsi` complete at once. lws closes a socket in the middle of a request
    /// by shutting down only its sending side and waiting, descriptor open, for the client's FIN
    /// (up to `httpTimeoutSeconds`), which a client trickling a body or a head never sends: the
    /// descriptor, and its slot of the socket budget, stayed taken. With both sides shut (what the
    /// client sent drained first, so that it sees FIN rather than RST), lws's next read of the
    /// socket ends and it closes.
    private func shutDownForClose(_ wsi: OpaquePointer) {
        LWS.drainSocket(wsi, limit: 1 << 20)
        LWS.shutdownBothWays(wsi)
    }

    /// Closes the sockets whose client is late with its request head, or idle on a keep-alive
    /// socket for longer than `httpKeepAliveTimeoutSeconds`. Service thread only; called on every
    /// tick. lws arms timers for both, but under its libev loop (lws 4.1.6) a timer armed while
    /// its loop timer waits for a later one fires only with that later one, seconds or minutes late.
    public func expireHTTPDeadlines() {
        let now = DispatchTime.now().uptimeNanoseconds
        let second: UInt64 = 1_000_000_000
        let header = UInt64(settings.httpHeaderTimeoutSeconds) * second
        let keepAlive = UInt64(settings.httpKeepAliveTimeoutSeconds) * second
        var expired: [(OpaquePointer, AcceptedSocket, Bool)] = []
        for (wsi, socket) in state.sockets where socket.idle && !socket.closed && !socket.evicted {
            let waited = now &- socket.idleSince
            if socket.served == 0 {
                if waited > header { expired.append((wsi, socket, true)) }
            } else if waited > keepAlive {
                // A keep-alive request that has begun arriving gets its header time too.
                let started = LWS.tcpBytesReceived(wsi) != socket.bytesAtIdle
                if !started || waited > keepAlive + header { expired.append((wsi, socket, started)) }
            }
        }
        for (wsi, socket, headLate) in expired where !socket.closed {
            if headLate { state.counters.requestsRejected += 1 }
            socket.answered = true
            socket.idle = false
            shutDownForClose(wsi)
            LWS.killNow(wsi)
        }
    }

    private func writeHeaders(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Bool {
        LWS.writeResponseHead(wsi, status: response.status, reason: HTTPResponse.reasonPhrase(response.status), headers: response.headers,
                              contentLength: response.body.count)
    }

    private func requestMethod(_ wsi: OpaquePointer) -> HTTPMethod? {
        let candidates: [(LWSHeader, HTTPMethod)] = [
            (.getURI, .get), (.postURI, .post), (.patchURI, .patch), (.deleteURI, .delete), (.optionsURI, .options),
            (.putURI, .put), (.headURI, .head),
        ]
        return candidates.first { LWS.headerLength(wsi, $0.0) > 0 }?.1
    }

    private static let copiedHeaders: [(LWSHeader, String)] = [
        (.authorization, "authorization"), (.contentType, "content-type"), (.contentLength, "content-length"),
        (.ifMatch, "if-match"), (.accept, "accept"), (.origin, "origin"), (.transferEncoding, "transfer-encoding"),
        (.xForwardedFor, "x-forwarded-for"), (.userAgent, "user-agent"), (.host, "host"), (.ifNoneMatch, "if-none-match"),
    ]

    private func readRequest(_ wsi: OpaquePointer, method: HTTPMethod) -> HTTPRequest? {
        var headers: [String: String] = [:]
        for (token, name) in Self.copiedHeaders {
            if let value = LWS.header(wsi, token) { headers[name] = value }
        }
        if let apiKey = LWS.customHeader(wsi, "x-api-key:") { headers["x-api-key"] = apiKey }
        // CORS preflights name the method they ask for; lws has no token for it.
        if let method = LWS.customHeader(wsi, "access-control-request-method:") { headers["access-control-request-method"] = method }
        var query: [String: String] = [:]
        if var raw = LWS.query(wsi) {
            // Split on the bytes: splitting the String went grapheme by grapheme over the whole
            // query, the peer token included (~90k instructions per join under callgrind), and the
            // generic `split` of an array still cost ~6k. URL query syntax is bytes; `=` is split on
            // even where a combining mark follows it. lws gives the pairs joined by 0x1F.
            raw.withUTF8 { bytes in
                var start = 0
                while start <= bytes.count {
                    var end = start
                    var equals = -1
                    while end < bytes.count, bytes[end] != 0x1F {
                        if equals < 0, bytes[end] == UInt8(ascii: "=") { equals = end }
                        end += 1
                    }
                    if end > start {
                        if equals >= 0 {
                            query[String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<equals]), as: UTF8.self)] =
                                String(decoding: UnsafeBufferPointer(rebasing: bytes[(equals + 1)..<end]), as: UTF8.self)
                        } else {
                            query[String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)] = ""
                        }
                    }
                    start = end + 1
                }
            }
        }
        let remote = LWS.peerAddress(wsi)
        return HTTPRequest(method: method, path: "/", query: query, headers: headers, remoteAddress: remote)
    }
}

/// What lws calls back while the loop runs: the server and the delegate it had when the loop
/// started, both constants of an object the callback borrows (`createContext`), so that reaching
/// them retains neither. Read from the server's `delegate` variable instead, the delegate was
/// retained and released around every call, one pair of atomic operations per inbound frame.
/// The binding holds the run until the context's final destroy stage.
private final class ServiceRun: LWSServerHandler {
    let server: WebSocketServer
    let delegate: (any WebSocketServerDelegate)?

    init(server: WebSocketServer, delegate: (any WebSocketServerDelegate)?) {
        self.server = server
        self.delegate = delegate
    }

    func handle(_ wsi: OpaquePointer, _ event: LWSServerEvent, _ user: UnsafeMutableRawPointer?,
                _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32
    {
        server.handle(wsi, event, user, input, length, delegate: delegate)
    }
}

/// Service-thread-only state. Not Sendable on purpose: nothing else may hold it.
///
/// `@exclusivity(unchecked)` on the properties touched once or more per delivered frame: each
/// access to a class's stored property is otherwise checked at run time for overlapping access
/// (`swift_beginAccess`/`swift_endAccess`, a thread-local lookup each), ~370 instructions per
/// fan-out delivery under callgrind. They are only touched on the service thread, and no access to
/// them is held across a call that could reach them again (delegate calls happen after the
/// lookup returns), so there is nothing for the check to find.
private final class ServiceState {
    /// Open WebSockets by connection id (ids count up from 1 and are never reused).
    @exclusivity(unchecked) var connections = IDTable<WSConnection>()
    var pendingUpgrades: [OpaquePointer: any Sendable] = [:]
    var exchanges: [OpaquePointer: HTTPExchange] = [:]
    var exchangesByID: [UInt64: HTTPExchange] = [:]
    var nextConnection: UInt64 = 0
    var nextExchange: UInt64 = 0
    @exclusivity(unchecked) var counters = TransportCounters()
    /// Connections with something to write once this wake-up's callbacks are done (each listed
    /// once: `WSConnection.flushListed`), and the list being written, swapped so that a write that
    /// lists its connection again lists it for the next flush.
    @exclusivity(unchecked) var flushList: [WSConnection] = []
    @exclusivity(unchecked) var flushing: [WSConnection] = []
    /// Inbound frames handled since the last flush.
    @exclusivity(unchecked) var framesSinceFlush = 0
    /// TLS connections by wsi: false while their handshake runs, true once it is done.
    var tlsHandshakes: [OpaquePointer: Bool] = [:]
    var shuttingDown = false
    /// The code of each client Close frame received, until its connection's CLOSED.
    var peerCloses: [UInt64: UInt16] = [:]
    var onDrained: (() -> Void)?
    /// Set when the loop starts (`runLoop`).
    var keepAlive: KeepAliveSchedule?
    var keepAliveActions: [KeepAliveSchedule.Action] = []
    /// Every socket lws accepted and has not destroyed yet, until it becomes a WebSocket.
    var sockets: [OpaquePointer: AcceptedSocket] = [:]
    /// Established WebSockets lws has not destroyed yet: they left `sockets` (and the idle
    /// order) at `.established`, since an open WebSocket needs none of the HTTP bookkeeping.
    var upgradedSockets = 0
    /// The socket budget's count.
    var openSockets: Int { sockets.count + upgradedSockets }
    /// Sockets the budget evicted whose close has not completed yet (still in `sockets`).
    var evictedOpen = 0
    /// Open sockets not on their way out: what the `/healthz` headroom is measured against.
    var liveSockets: Int { openSockets - evictedOpen }
    /// Sockets waiting for a request, oldest first (entries go stale; see `evictOldestIdle`).
    var idleOrder = FIFO<(OpaquePointer, UInt64, AcceptedSocket)>()
    var nextSocket: UInt64 = 0
    var nextIdle: UInt64 = 0
    var pressure = Pressure(lastLog: .distantPast)
    private var writeStorage: UnsafeMutableRawPointer?
    private var writeStorageCapacity = 0

    /// Scratch space for one coalesced write, at least `capacity` bytes; reused from write to write
    /// (lws copies whatever the socket does not take before `lws_write` returns).
    func writeBuffer(capacity: Int) -> UnsafeMutableRawPointer {
        if let writeStorage, writeStorageCapacity >= capacity { return writeStorage }
        writeStorage?.deallocate()
        let storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        writeStorage = storage
        writeStorageCapacity = capacity
        return storage
    }

    deinit { writeStorage?.deallocate() }
}

/// What the budget did since the last "socket budget full" line.
private struct Pressure {
    var lastLog: Date
    var refused = 0
    var evicted = 0
}

private final class AcceptedSocket {
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

/// One open WebSocket. Its properties are unchecked for exclusivity for the reason given at
/// `ServiceState`: service thread only, touched per frame.
private final class WSConnection {
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
    /// In `ServiceState.flushList`.
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

private final class HTTPExchange {
    let id: UInt64
    let wsi: OpaquePointer
    var request: HTTPRequest
    var bodyTooLarge = false
    var dispatched = false
    /// When the head was in and the body began (monotonic ns; 0 for a request without one), and
    /// the body bytes lws has delivered since, for the minimum body rate.
    var bodyStartedAt: UInt64 = 0
    var bodyBytesReceived = 0
    var response: HTTPResponse?
    var headersSent = false
    var bodyOffset = 0

    init(id: UInt64, wsi: OpaquePointer, request: HTTPRequest) {
        self.id = id
        self.wsi = wsi
        self.request = request
    }
}
