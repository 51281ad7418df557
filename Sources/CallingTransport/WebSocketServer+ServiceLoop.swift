import CallingLogging
import CallingProtocol
import Foundation
import Synchronization

/// The service loop: start and stop, the one thread that owns every connection's state, the work
/// other threads post to it (through `ServiceInbox`), and the keep-alive's ticker.
extension WebSocketServer {
    // MARK: lifecycle

    /// Binds and starts the service thread; returns once the port is listening.
    public func start() throws {
        if inbox.withLifecycle({ $0.running }) { throw TransportError.alreadyStarted }
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
        budget.limit = max(2, min(openFileLimit - reserved, cap))
        budget.capacity = max(1, budget.limit - settings.healthReservedSockets)
        // lws's own notices go to stderr unformatted; keep only its warnings and errors, and turn
        // the few it reports only as log lines into state (shim.h).
        LWS.installLogHook()
        LWS.reserveSpareDescriptor()
        let ready = DispatchSemaphore(value: 0)
        let outcome = Locked<Result<Int, TransportError>?>(nil)
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
            inbox.withLifecycle {
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
        inbox.withLifecycle { $0.thread = thread }
        thread.start()
        ready.wait()
        if case .failure(let error)? = outcome.withLock({ $0 }) { throw error }
        logger.info("listening", ["host": settings.host, "port": "\(port)", "event_loop": settings.eventLoop.rawValue,
                                  "peer_capacity": "\(capacity)", "socket_budget": "\(socketBudget)",
                                  "tls": settings.tls == nil ? "off" : "on"])
    }

    /// Runs on the service thread until the context is destroyed.
    func runLoop(_ context: OpaquePointer) {
        var clock = clockid_t()
        if pthread_getcpuclockid(pthread_self(), &clock) == 0 { serviceClock.store(clock, ordering: .relaxed) }
        LWS.setHeaderOverflowHook(context: Unmanaged.passUnretained(self).toOpaque()) { context in
            guard let context else { return }
            Unmanaged<WebSocketServer>.fromOpaque(context).takeUnretainedValue().headerTableOverflowed()
        }
        defer { LWS.setHeaderOverflowHook(context: nil, nil) }
        connections.keepAlive = KeepAliveSchedule(pingAfter: Int64(settings.idlePingSeconds) * 1_000,
                                            hangUpAfter: Int64(settings.idleHangupSeconds) * 1_000,
                                            resolution: Self.keepAliveResolution, now: Self.milliseconds(),
                                            seed: UInt64.random(in: 0...UInt64.max))
        let keepAliveTicker = startKeepAliveTicker()
        defer { keepAliveTicker.cancel() }
        while inbox.withLifecycle({ $0.running }) {
            // With the libev loop lws_service only returns once the loop is stopped by the first
            // stage of lws_context_destroy; with poll() it returns after each wakeup.
            if LWS.service(context) < 0 { break }
        }
        inbox.withLifecycle { $0.context = nil }
        LWS.destroy(context)
        // Nothing calls them any more: the cycles they made with the server end here.
        contextResources.contextDestroyed()
        inbox.withLifecycle { $0.running = false }
        delegate = nil
    }

    /// Closes every WebSocket with 1001, waits up to `grace` for them to go, then stops the loop.
    /// Blocks the caller (a signal-handling thread, never the service thread).
    public func stop(grace: TimeInterval = 3) {
        guard inbox.withLifecycle({ $0.running }) else { return }
        let drained = DispatchSemaphore(value: 0)
        post { [self] in connections.closeAll { drained.signal() } }
        _ = drained.wait(timeout: .now() + grace)
        post { [self] in
            inbox.withLifecycle { $0.running = false }
            // First stage from inside the loop: closes every socket and stops the event loop,
            // which makes lws_service return; runLoop then performs the final destroy.
            if let context = inbox.withLifecycle({ $0.context }) { LWS.destroy(context) }
        }
        let thread = inbox.withLifecycle { $0.thread }
        let deadline = Date().addingTimeInterval(grace + 2)
        while thread?.isFinished == false, inbox.withLifecycle({ $0.context != nil }), Date() < deadline {
            usleep(10_000)
        }
    }

    /// Runs `work` on the service thread, after the work posted before it.
    public func post(_ work: @escaping @Sendable () -> Void) { inbox.post(work) }

    /// Makes lws read the certificate and key files again (same paths) for connections accepted from
    /// now on; live connections keep the session they negotiated and are not touched. The files
    /// must have been validated first: lws 4.1.6's `lws_tls_cert_updated` reports no failure, and
    /// loads a new certificate whose key does not match without complaint. Throws when lws serves
    /// no certificate afterwards. Blocks the caller (never call it on the service thread).
    public func reloadTLSCertificate() throws(TransportError) {
        guard let tls = settings.tls, inbox.withLifecycle({ $0.running }) else { throw .notServingTLS }
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Int64?>(nil)
        post { [self] in
            defer { done.signal() }
            guard let context = inbox.withLifecycle({ $0.context }) else { return }
            LWS.certificateUpdated(context, certificateChainFile: tls.certificateChainFile, privateKeyFile: tls.privateKeyFile)
            let expiry = LWS.servedCertificateExpiry(context)
            if expiry != nil { certificateReloads += 1 }
            result.withLock { $0 = expiry }
        }
        guard done.wait(timeout: .now() + 10) == .success else { throw .tlsSetupFailed("the service loop did not answer") }
        guard result.withLock({ $0 }) != nil else { throw .tlsSetupFailed("libwebsockets serves no certificate") }
    }

    /// Records the served certificate's `notAfter` for /metrics. Any thread.
    public func setTLSCertificateExpiry(_ notAfter: Int64) {
        post { [self] in certificateNotAfter = notAfter }
    }

    /// Wakes the loop without work: the watchdog's liveness probe.
    func probe() { inbox.wake() }

    /// Increments each time the service thread drains its inbox; the watchdog reads it.
    public var progress: Int64 { inbox.progress.load(ordering: .relaxed) }

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

    /// LWS_CALLBACK_EVENT_WAIT_CANCELLED: runs what was posted, each piece counting towards the
    /// flush as an inbound frame does.
    func drainInbox() {
        var items = drained
        drained = []
        inbox.take(into: &items)
        for item in items {
            item()
            writer.countTowardsFlush()
        }
        items.removeAll(keepingCapacity: true)
        drained = items
    }

    // MARK: keep-alive (docs/protocol.md, "Keep-alive")

    /// Milliseconds per keep-alive bucket: how late after its moment a PING or a hang-up may come.
    static let keepAliveResolution: Int64 = 100

    /// Monotonic milliseconds, the keep-alive schedule's clock.
    static func milliseconds() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// Posts `keepAliveTick` every bucket from a timer off the service thread. Not an lws timer:
    /// a timer the service thread schedules from inside lws's own run of timers may wait for the
    /// libev loop's next timeout (see `LWSDeferredCall.due`), and one post per tick costs a wake-up.
    func startKeepAliveTicker() -> any DispatchSourceTimer {
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

    /// The keep-alive's PINGs and hang-ups that are due (`WebSocketConnections.keepAliveTick`).
    func keepAliveTick() { connections.keepAliveTick(now: Self.milliseconds()) }

    // MARK: context

    func createContext() -> OpaquePointer? {
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
            headerTokenLimit: settings.maxHeaderBytes + 1, uriTokenLimit: http.effectiveURLLimit + 1,
            maxHeaderBytes: settings.maxHeaderBytes, httpTimeoutSeconds: settings.httpTimeoutSeconds,
            fdLimitPerThread: max(1024, openFileLimit),
            libev: settings.eventLoop == .libev, tls: tls)
        options.headerTimeoutSeconds = settings.httpHeaderTimeoutSeconds
        options.keepAliveTimeoutSeconds = settings.httpKeepAliveTimeoutSeconds
        return contextResources.createContext(options, handler: ServiceRun(server: self, delegate: delegate))
    }
}
