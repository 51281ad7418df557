import CLibWebSockets
import CallingLogging
import CallingProtocol
import Foundation
import Synchronization  // Atomic

/// What a client connection reports, in order: `open`, then any number of `text`/`binary`
/// messages, then exactly one terminal event (`closed` or `failed`), after which the stream ends.
public enum WebSocketClientEvent: Sendable, Equatable {
    /// The server accepted the upgrade (101); messages queued before this are being flushed.
    case open
    /// A complete text message (fragments reassembled). Invalid UTF-8 is repaired with U+FFFD.
    case text(String)
    /// A complete binary message (fragments reassembled).
    case binary([UInt8])
    /// The WebSocket ended after it was open. `code` is the peer's close code, or ours when we
    /// closed first (lws does not report the peer's echo), or nil when no close frame was
    /// exchanged (the TCP connection dropped, `abort()`, or the loop shut down).
    case closed(code: UInt16?, reason: String)
    /// The connection never opened: refused, unreachable, or the upgrade was answered without a
    /// 101. `status` is the HTTP status of that answer (401, 403, 503…) when there was one, `code`
    /// its `problem-code` header (the server's problem code) when it had one; without a status,
    /// `code` is a `ClientFailureCode` when the client knows the cause (which certificate check
    /// failed, an unusable CA file).
    case failed(status: Int?, code: String? = nil, message: String)

    /// True for `closed` and `failed`, the events that end the stream.
    public var isTerminal: Bool {
        switch self {
        case .closed, .failed: return true
        case .open, .text, .binary: return false
        }
    }
}

/// One libwebsockets client context with its own service thread, shared by many connections.
///
/// Threading: `connect`, `shutdown` and every `WebSocketClientConnection` method may be called
/// from any thread. They queue a `Command` and wake the loop with `lws_cancel_service`, the one
/// lws call that is safe from another thread; the service thread performs every other lws call
/// when it drains the queue on `LWS_CALLBACK_EVENT_WAIT_CANCELLED`.
///
/// Lifetime: the service thread keeps the loop alive until `shutdown()`, which tests must call
/// (it is idempotent, blocks until the thread has exited, and is safe from `deinit`).
public final class WebSocketClientLoop: @unchecked Sendable {
    // @unchecked: the mutable state is split in two. `shared` (context pointer, inbox, flags) is
    // behind a lock and touched from any thread. `state` and `protocols` are only touched on the
    // service thread (and by `init` before the thread exists). `logger` and `stopped` are immutable
    // or thread-safe by themselves.
    private let logger: Logger
    private let shared = PthreadLocked(Shared())
    private let state = ClientServiceState()
    private let nextID = Atomic<UInt64>(0)
    /// Entered before the service thread starts; left once it has been joined (or never started).
    private let stopped = DispatchGroup()
    private var protocols: UnsafeMutablePointer<lws_protocols>?
    private var protocolName: UnsafeMutablePointer<CChar>?
    /// Strings lws keeps pointers to for the context's lifetime (vhost names). Service thread.
    private var vhostStrings: [UnsafeMutablePointer<CChar>] = []

    /// Every client protocol buffer is this large so a 200 KB message arrives in one or two chunks;
    /// messages larger than this are still reassembled from fragments.
    static let rxBufferSize = 256 * 1024
    /// The failure (`ClientFailureCode` and message) of a connection to `host` whose server
    /// certificate failed OpenSSL's check `error` (an X509_V_ERR_* value): which check, in the
    /// code and in words, with OpenSSL's own reason.
    static func certificateFailure(_ error: Int32, host: String) -> (code: String, message: String) {
        let reason = String(cString: cs_lws_x509_verify_error_text(error))
        let code: String
        let what: String
        switch cs_lws_x509_verify_error_check(error) {
        case 1: (code, what) = (ClientFailureCode.hostNameMismatch, "does not name the host \(host)")
        case 2: (code, what) = (ClientFailureCode.untrustedIssuer, "is not issued by a trusted CA")
        case 3: (code, what) = (ClientFailureCode.certificateExpired, "has expired")
        case 4: (code, what) = (ClientFailureCode.certificateNotYetValid, "is not valid yet")
        default: (code, what) = (ClientFailureCode.certificateInvalid, "failed verification")
        }
        return (code, "TLS: the server's certificate \(what) (OpenSSL: \(reason), X509_V_ERR \(error))")
    }

    /// Largest message reassembled; a larger one closes the connection with 1009.
    static let maxMessageBytes = 16 * 1024 * 1024

    private struct Shared {
        /// Non-nil while the loop runs; `lws_cancel_service` is only called on it under this lock,
        /// and the service thread clears it under the lock before destroying the context.
        var context: OpaquePointer?
        /// False once the service thread has taken its final look at the inbox.
        var accepting = true
        var stopRequested = false
        var inbox: [Command] = []
        /// The joinable service thread until the first `shutdown` takes it to join.
        var serviceThread: pthread_t?
    }

    /// Work for the service thread. Commands name connections by id, never by wsi: the wsi of a
    /// connection may already be gone when the command runs.
    private enum Command {
        case connect(ClientSession)
        case request(HTTPClientExchange)
        case cancelRequest(id: UInt64, reason: String)
        case send(id: UInt64, OutboundMessage, binary: Bool)
        case close(id: UInt64, code: UInt16, reason: String)
        case abort(id: UInt64)
        case readFlow(id: UInt64, paused: Bool)
        /// The last `WebSocketClientConnection` handle went away: close with 1001 if still open.
        case released(id: UInt64)
    }

    /// Creates the lws context and starts its service thread; returns once the context exists.
    /// If lws cannot create a context, the loop still exists but every connection fails at once.
    public init(logger: Logger) {
        self.logger = logger
        // Warnings and errors only, through the hook that `routeLibraryLog` can redirect (lws's
        // notices would otherwise land on an SDK user's stderr).
        cs_lws_install_log_hook()
        let ready = DispatchSemaphore(value: 0)
        stopped.enter()
        // A joinable pthread rather than Foundation's Thread so `shutdown` can return only after
        // the OS thread is gone. The body holds `self` strongly until it returns: the C callback
        // reaches the loop through an unretained pointer in the context, which must not outlive it.
        let body = ServiceThreadBody { [self] in
            Thread.current.name = "lws-client"  // Foundation sets the OS thread name (Glibc hides pthread_setname_np)
            guard let context = createContext() else {
                logger.error("cannot create lws client context")
                shared.withLock { $0.accepting = false }
                ready.signal()
                return
            }
            state.context = context
            shared.withLock { $0.context = context }
            ready.signal()
            runLoop(context)
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setstacksize(&attributes, 1 << 20)
        var thread = pthread_t()
        // Unmanaged: one retain handed to the new thread, which takes it back on entry.
        let handOff = Unmanaged.passRetained(body)
        let started = pthread_create(&thread, &attributes, { argument in
            Unmanaged<ServiceThreadBody>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, handOff.toOpaque())
        pthread_attr_destroy(&attributes)
        if started != 0 {
            handOff.release()  // the thread never ran
            logger.error("cannot start lws client thread", ["errno": "\(started)"])
            shared.withLock { $0.accepting = false }
            stopped.leave()
            return
        }
        shared.withLock { $0.serviceThread = thread }
        ready.wait()
    }

    deinit {
        // Only reachable once the service thread has returned (it retains the loop until then).
        protocols?.deallocate()
        free(protocolName)
        for string in vhostStrings { free(string) }
    }

    /// Stops the loop: drops every connection without a close handshake (each gets its terminal
    /// event), destroys the context and joins the service thread, so no thread is left when this
    /// returns. Idempotent and safe from any thread; concurrent callers all wait. Called on the
    /// service thread itself it only requests the stop.
    public func shutdown() {
        let (joinable, onServiceThread) = shared.withLock { shared -> (pthread_t?, Bool) in
            shared.stopRequested = true
            if let context = shared.context { lws_cancel_service(context) }
            guard let thread = shared.serviceThread else { return (nil, false) }
            if pthread_equal(thread, pthread_self()) != 0 { return (nil, true) }
            // The first caller joins; later ones wait on `stopped`, which it leaves afterwards.
            shared.serviceThread = nil
            return (thread, false)
        }
        if onServiceThread { return }
        if let joinable {
            pthread_join(joinable, nil)
            stopped.leave()
        }
        stopped.wait()
    }

    /// Opens `ws://host:port/path` (path may carry `?query`). `headers` are added to the upgrade
    /// request, e.g. `["Authorization": "Bearer …"]`. Returns at once; watch `events` for `open`
    /// or `failed`. Messages sent before `open` are queued and flushed after it. Any thread.
    ///
    /// With `onEvent`, events are handed to it on the loop's service thread instead of `events`
    /// (which then stays empty): no task hop per message, for load generators and SDK internals
    /// that must keep up with the wire. The handler must not block.
    ///
    /// With `tls` the connection is `wss://`: the server's certificate is verified as
    /// `TLSClientOptions` says, and a refused certificate ends in `failed`.
    public func connect(host: String, port: Int, path: String, headers: [String: String] = [:],
                        tls: TLSClientOptions? = nil,
                        onEvent: (@Sendable (WebSocketClientEvent) -> Void)? = nil)
        -> WebSocketClientConnection
    {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let (events, continuation) = AsyncStream.makeStream(of: WebSocketClientEvent.self, bufferingPolicy: .unbounded)
        let connection = WebSocketClientConnection(id: id, loop: self, events: events)
        // CR or LF in a header would let a caller inject headers (or a second request).
        let injected = headers.contains { $0.key.contains(where: \.isNewline) || $0.value.contains(where: \.isNewline) }
        guard !injected else {
            continuation.yield(.failed(status: nil, message: "header names and values must not contain line breaks"))
            continuation.finish()
            return connection
        }
        let session = ClientSession(id: id, host: host, port: port, path: path.hasPrefix("/") ? path : "/" + path,
                                    headers: headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                                    tls: tls, continuation: continuation, handler: onEvent)
        if !post(.connect(session)) {
            onEvent?(.failed(status: nil, message: "client loop is shut down"))
            continuation.yield(.failed(status: nil, message: "client loop is shut down"))
            continuation.finish()
        }
        return connection
    }

    /// One HTTP/1.1 request (`https://` with `tls`), answered by the server's status, the headers of
    /// `HTTPClientResponse.capturedHeaders`, and the body. Redirects are returned, not followed.
    /// Throws `HTTPClientError` when no complete answer arrived: refused, a certificate that failed
    /// verification, a reset, or `timeout` passed (the connection is then dropped). Any thread.
    public func request(_ method: String, host: String, port: Int, path: String, headers: [String: String] = [:],
                        body: [UInt8] = [], tls: TLSClientOptions? = nil, timeout: TimeInterval = 10)
        async throws(HTTPClientError) -> HTTPClientResponse
    {
        let injected = ([method] + headers.keys + headers.values).contains { $0.contains(where: \.isNewline) }
        guard !injected, !method.isEmpty, !method.contains(" ") else {
            throw HTTPClientError(message: "method, header names and values must not contain line breaks")
        }
        let id = nextID.add(1, ordering: .relaxed).newValue
        let outcome: Result<HTTPClientResponse, HTTPClientError> = await withCheckedContinuation { continuation in
            let exchange = HTTPClientExchange(
                id: id, method: method, host: host, port: port, path: path.hasPrefix("/") ? path : "/" + path,
                headers: headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, body: body, tls: tls,
                completion: { continuation.resume(returning: $0) })
            guard post(.request(exchange)) else {
                exchange.complete(.failure(HTTPClientError(message: "client loop is shut down")))
                return
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [weak self] in
                self?.post(.cancelRequest(id: id, reason: "no complete answer within \(timeout) s"))
            }
        }
        return try outcome.get()
    }

    /// Sends libwebsockets' own log lines (warnings and errors, without lws's timestamp) to `sink`
    /// instead of stderr; nil restores stderr. Process-wide: lws has one log for every context,
    /// the server's included.
    public static func routeLibraryLog(_ sink: (@Sendable (_ isError: Bool, _ line: String) -> Void)?) {
        let routed = sink.map(LibrarySink.init)
        librarySink.withLock { $0 = routed }
        cs_lws_install_log_hook()
        cs_lws_set_sink(sink == nil ? nil : { level, line in
            WebSocketClientLoop.libraryLine(level: level, line)
        })
    }

    /// One lws log line, for the routed sink (lws's log hook calls it on whatever thread logs).
    static func libraryLine(level: Int32, _ line: UnsafePointer<CChar>) {
        var text = String(cString: line)
        // "[2026/12/01 14:40:47:4719] E: SSL error: …\n" → "SSL error: …"
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") { text = String(text[text.index(after: close)...]) }
        text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if text.count > 3, text.dropFirst().hasPrefix(": ") { text = String(text.dropFirst(3)) }
        let isError = level & LLL_ERR != 0
        librarySink.withLock { $0 }?.deliver(isError, text)
    }

    /// The routed sink, in a class so that the lock guards a reference. Kept as an optional closure
    /// in a `Locked` and read with `withLock { $0 }`, the closure went through the generic
    /// `inout` in its most general form and was written back wrapped in two more reabstraction
    /// thunks on every read: every log line called the sink through a longer chain and kept three
    /// more allocations.
    private final class LibrarySink: Sendable {
        let deliver: @Sendable (Bool, String) -> Void
        init(_ deliver: @escaping @Sendable (Bool, String) -> Void) { self.deliver = deliver }
    }

    private static let librarySink = Locked<LibrarySink?>(nil)

    /// Queues `command` for the service thread; false once the loop no longer accepts work.
    /// Any thread.
    @discardableResult
    private func post(_ command: Command) -> Bool {
        shared.withLock { shared in
            guard shared.accepting else { return false }
            shared.inbox.append(command)
            // A non-empty inbox means a wake-up is already pending (or the drain is running and
            // will see this command); only the first command needs to wake the loop.
            if shared.inbox.count == 1, let context = shared.context { lws_cancel_service(context) }
            return true
        }
    }

    fileprivate func send(_ message: OutboundMessage, binary: Bool, on id: UInt64) {
        post(.send(id: id, message, binary: binary))
    }

    fileprivate func close(_ id: UInt64, code: UInt16, reason: String) { post(.close(id: id, code: code, reason: reason)) }
    fileprivate func abort(_ id: UInt64) { post(.abort(id: id)) }
    fileprivate func setReadPaused(_ id: UInt64, _ paused: Bool) { post(.readFlow(id: id, paused: paused)) }
    fileprivate func release(_ id: UInt64) { post(.released(id: id)) }

    // MARK: service thread

    /// Service thread: creates the context. Client-only (no listening socket), default poll loop.
    private func createContext() -> OpaquePointer? {
        let name = strdup("calling-client")!
        protocolName = name
        let list = UnsafeMutablePointer<lws_protocols>.allocate(capacity: 2)
        list.initialize(repeating: lws_protocols(), count: 2)
        list[0].name = UnsafePointer(name)
        list[0].callback = clientCallback
        // No per-session memory: a connection's id travels in the wsi's opaque user data instead.
        list[0].per_session_data_size = 0
        list[0].rx_buffer_size = Self.rxBufferSize
        protocols = list

        var info = lws_context_creation_info()
        info.port = CONTEXT_PORT_NO_LISTEN
        info.protocols = UnsafePointer(list)
        info.gid = -1
        info.uid = -1
        // Unretained: the service thread holds the loop strongly for as long as the context lives.
        info.user = Unmanaged.passUnretained(self).toOpaque()
        info.max_http_header_data = 8192
        info.timeout_secs = 10
        // The default vhost's client SSL_CTX trusts the system store (lws calls
        // SSL_CTX_set_default_verify_paths); a custom CA file gets a vhost of its own (`vhost(trusting:)`).
        info.ssl_client_options_set = cs_lws_tls_client_options()
        return TLSContextFactory.createContext(info)
    }

    /// Service thread: the client vhost whose SSL_CTX trusts only the CAs in `caFile`, created on
    /// first use (the CA store belongs to an SSL_CTX, which lws keeps per vhost). Nil when the file
    /// cannot be read or lws refuses the vhost.
    private func vhost(trusting caFile: String) -> OpaquePointer? {
        if let existing = state.caVhosts[caFile] { return existing }
        guard let context = state.context, FileManager.default.isReadableFile(atPath: caFile) else { return nil }
        let name = strdup("ca-\(state.caVhosts.count + 1)")!
        let path = strdup(caFile)!
        vhostStrings += [name, path]
        var info = lws_context_creation_info()
        info.port = CONTEXT_PORT_NO_LISTEN
        info.protocols = UnsafePointer(protocols)
        info.vhost_name = UnsafePointer(name)
        info.gid = -1
        info.uid = -1
        info.options = cs_lws_option_do_ssl_global_init() | cs_lws_option_disable_os_ca_certs()
        info.client_ssl_ca_filepath = UnsafePointer(path)
        info.ssl_client_options_set = cs_lws_tls_client_options()
        guard let vhost = lws_create_vhost(context, &info) else { return nil }
        state.caVhosts[caFile] = vhost
        return vhost
    }

    /// Service thread: the lws `ssl_connection` flags and vhost for `tls`, or a reason it cannot be
    /// served. Logs the warning an insecure connection owes its operator.
    private func tlsSetup(_ tls: TLSClientOptions?, target: String) -> Result<(Int32, OpaquePointer?), HTTPClientError> {
        var flags = Int32(LCCSCF_HTTP_NO_FOLLOW_REDIRECT.rawValue)
        guard let tls else { return .success((flags, nil)) }
        flags |= Int32(LCCSCF_USE_SSL.rawValue)
        if tls.insecureSkipVerification {
            flags |= Int32(LCCSCF_ALLOW_SELFSIGNED.rawValue | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK.rawValue
                           | LCCSCF_ALLOW_EXPIRED.rawValue | LCCSCF_ALLOW_INSECURE.rawValue)
            logger.warning("TLS certificate verification is OFF for this connection (insecureSkipTLSVerification): "
                           + "anyone on the network path can impersonate the server", ["target": target])
        }
        guard let caFile = tls.caFile else { return .success((flags, nil)) }
        guard let vhost = vhost(trusting: caFile) else {
            return .failure(HTTPClientError(message: "cannot load the CA file \(caFile) (missing, unreadable, or no PEM certificate)",
                                            code: ClientFailureCode.caFileUnusable))
        }
        return .success((flags, vhost))
    }

    /// Service thread: runs until `shutdown`, then tears everything down in order.
    private func runLoop(_ context: OpaquePointer) {
        drain()  // commands queued before the context pointer was published
        while !shared.withLock({ $0.stopRequested }) {
            if lws_service(context, 0) < 0 { break }
        }
        // From here on commands are not executed, only answered: connects fail, the rest no-op.
        state.dead = true
        shared.withLock {
            $0.context = nil
            $0.stopRequested = true
        }
        // Closes every wsi, which delivers CLIENT_CLOSED / CONNECTION_ERROR for each.
        lws_context_destroy(context)
        let leftovers = shared.withLock { shared -> [Command] in
            shared.accepting = false
            defer { shared.inbox.removeAll() }
            return shared.inbox
        }
        for command in leftovers { execute(command) }
        for exchange in state.requests.values {
            completeRequest(exchange, .failure(HTTPClientError(message: "client loop shut down")))
        }
        // Anything lws did not report (it should have) still gets exactly one terminal event.
        for session in state.sessions.values.sorted(by: { $0.id < $1.id }) {
            finish(session, session.opened ? .closed(code: nil, reason: "client loop shut down")
                                           : .failed(status: nil, message: "client loop shut down"))
        }
    }

    /// Service thread: runs every queued command, oldest first.
    private func drain() {
        let commands = shared.withLock { shared -> [Command] in
            defer { shared.inbox.removeAll(keepingCapacity: true) }
            return shared.inbox
        }
        for command in commands { execute(command) }
    }

    /// Service thread. Never holds an access to `state.sessions` across an lws call: lws may call
    /// back into `handle` synchronously, and that mutates the dictionary.
    private func execute(_ command: Command) {
        if state.dead {
            if case .connect(let session) = command {
                session.emit(.failed(status: nil, message: "client loop is shut down"))
                session.continuation.finish()
            }
            if case .request(let exchange) = command {
                exchange.complete(.failure(HTTPClientError(message: "client loop is shut down")))
            }
            return
        }
        switch command {
        case .connect(let session):
            startConnection(session)

        case .request(let exchange):
            startRequest(exchange)

        case .cancelRequest(let id, let reason):
            guard let exchange = state.requests[id] else { return }
            exchange.failureMessage = reason
            if let wsi = exchange.wsi {
                lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC)
            } else {
                completeRequest(exchange, .failure(HTTPClientError(message: reason)))
            }

        case .send(let id, let message, let binary):
            guard let session = state.sessions[id], session.closeRequest == nil, !session.abortRequested else { return }
            session.outbox.append((message, binary))
            if session.opened, let wsi = session.wsi { lws_callback_on_writable(wsi) }

        case .close(let id, let code, let reason):
            requestClose(id, code: code, reason: reason)

        case .released(let id):
            guard let session = state.sessions[id] else { return }
            // Nobody can send on it any more. Unopened: nothing to say goodbye to, just drop it.
            if session.opened {
                requestClose(id, code: CloseCode.goingAway.rawValue, reason: "")
            } else {
                execute(.abort(id: id))
            }

        case .abort(let id):
            guard let session = state.sessions[id], !session.abortRequested else { return }
            session.abortRequested = true
            session.outbox.removeAll()
            // Closing with no close reason set makes lws drop the socket without a close frame
            // (rops_close_via_role_protocol_ws skips NOSTATUS). KILL_ASYNC is the documented way
            // to do that from outside the wsi's own callback; it fires on the next service pass.
            if let wsi = session.wsi { lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC) }

        case .readFlow(let id, let paused):
            guard let session = state.sessions[id], session.readPaused != paused else { return }
            session.readPaused = paused
            // Before `open` the flag is applied in CLIENT_ESTABLISHED.
            if session.opened, let wsi = session.wsi { _ = lws_rx_flow_control(wsi, paused ? 0 : 1) }
        }
    }
}

// MARK: service thread: connections and callbacks

extension WebSocketClientLoop {
    /// Service thread: registers the session, then asks lws to connect. The session is in
    /// `state.sessions` first because lws may call back for the new wsi before returning.
    private func startConnection(_ session: ClientSession) {
        guard let context = state.context else { return }
        state.sessions[session.id] = session
        var info = lws_client_connect_info()
        info.context = context
        info.port = Int32(session.port)
        info.ietf_version_or_minus_one = -1
        // No Sec-WebSocket-Protocol: the server binds such connections to its default protocol
        // (an unknown subprotocol makes lws drop the connection). Bind ours locally by name.
        info.protocol = nil
        info.local_protocol_name = UnsafePointer(protocolName)
        // A redirect answer to an upgrade is a failure for a signalling client, not a detour.
        switch tlsSetup(session.tls, target: session.hostHeader) {
        case .success(let (flags, vhost)):
            info.ssl_connection = flags
            info.vhost = vhost
        case .failure(let problem):
            finish(session, .failed(status: nil, code: problem.code, message: problem.message))
            return
        }
        // The connection's id, as an integer in a pointer: never a retained object (lws keeps
        // this pointer after we lose interest, and it may outlive the session).
        info.opaque_user_data = UnsafeMutableRawPointer(bitPattern: UInt(session.id))
        // lws copies these strings into the wsi's stash before returning.
        let wsi = session.host.withCString { address in
            session.path.withCString { path in
                session.hostHeader.withCString { hostHeader -> OpaquePointer? in
                    info.address = address
                    info.path = path
                    info.host = hostHeader
                    return lws_client_connect_via_info(&info)
                }
            }
        }
        guard !session.finished else { return }
        if let wsi {
            session.wsi = wsi
        } else {
            // Failures inside lws_client_connect_via_info are reported only by its NULL return
            // (it suppresses CLIENT_CONNECTION_ERROR until it has returned a wsi).
            finish(session, .failed(status: nil, message: "cannot start connection to \(session.hostHeader)"))
        }
    }

    /// Service thread: `close()` — send what is queued, then the close frame.
    private func requestClose(_ id: UInt64, code: UInt16, reason: String) {
        guard let session = state.sessions[id], session.closeRequest == nil, !session.abortRequested else { return }
        // A close reason is at most 123 bytes (125 minus the code); cut on a character boundary.
        var reasonBytes = Array(reason.utf8)
        while reasonBytes.count > 123 { reasonBytes = Array(String(decoding: reasonBytes, as: UTF8.self).dropLast().utf8) }
        session.closeRequest = (code, reasonBytes)
        // Before `open` it is picked up by the writeable callback that CLIENT_ESTABLISHED requests.
        if session.opened, let wsi = session.wsi { lws_callback_on_writable(wsi) }
    }

    /// The session a wsi belongs to, from the id stored in its opaque user data.
    private func session(for wsi: OpaquePointer) -> ClientSession? {
        guard let raw = lws_get_opaque_user_data(wsi) else { return nil }
        return state.sessions[UInt64(UInt(bitPattern: raw))]
    }

    /// Service thread: every lws callback for this context. Returning -1 closes the wsi.
    fileprivate func handle(_ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
                            _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32
    {
        if let raw = lws_get_opaque_user_data(wsi), let exchange = state.requests[UInt64(UInt(bitPattern: raw))] {
            return handleHTTP(exchange, wsi: wsi, reason, user, input, length)
        }
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
            if !state.dead { drain() }
            return 0

        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            guard let session = session(for: wsi), let input else { return 0 }
            // `in` is the lws write cursor (char **), `len` the room left behind it.
            let cursor = input.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
            guard let start = cursor.pointee else { return -1 }
            let end = start + length
            guard Self.appendHeaders(session.headers, wsi: wsi, cursor: cursor, end: end) else {
                // Headers larger than lws's buffer: fail the connection rather than send a
                // request without them (an Authorization header silently lost would mislead).
                session.failureMessage = "request headers do not fit"
                return -1
            }
            return 0

        case LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION:
            // lws's verify callback hands us OpenSSL's verdict in `len` (preverify_ok) and the
            // X509_STORE_CTX in `user`; returning 0 keeps its decision. Its own failure text
            // ("connect SSL err 1: …") names no cause, so the failed check is read here. OpenSSL
            // stops at the first failure, which is the one kept.
            if length == 0, let user, let session = session(for: wsi), session.failureMessage == nil {
                let failure = Self.certificateFailure(cs_lws_x509_verify_error(user), host: session.host)
                (session.failureCode, session.failureMessage) = (failure.code, failure.message)
            }
            return 0

        case LWS_CALLBACK_CLIENT_ESTABLISHED:
            guard let session = session(for: wsi) else { return -1 }
            session.wsi = wsi
            session.opened = true
            session.emit(.open)
            if session.readPaused { _ = lws_rx_flow_control(wsi, 0) }
            if !session.outbox.isEmpty || session.closeRequest != nil { lws_callback_on_writable(wsi) }
            return 0

        case LWS_CALLBACK_CLIENT_RECEIVE:
            guard let session = session(for: wsi) else { return 0 }
            return receive(session, wsi: wsi, input: input, length: length)

        case LWS_CALLBACK_CLIENT_WRITEABLE:
            guard let session = session(for: wsi) else { return 0 }
            return writeNext(session, wsi: wsi)

        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
            // `in`: the close payload, a big-endian status code then a UTF-8 reason. Returning 0
            // lets lws echo the close frame; CLIENT_CLOSED follows.
            guard let session = session(for: wsi) else { return 0 }
            let payload = input.map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
            let code = payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : nil
            session.peerClose = (code, String(decoding: payload.dropFirst(2), as: UTF8.self))
            return 0

        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            // Mutually exclusive with CLIENT_CLOSED in lws. When the server answered the upgrade
            // with something other than 101 its header table is still attached here, so the status
            // is readable; `in` is lws's text ("HS: ws upgrade unauthorized", "Peer hung up", …).
            guard let session = session(for: wsi) else { return 0 }
            let status = Int(lws_http_client_http_response(wsi))
            var message = input.map { pointer -> String in
                let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
                return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            } ?? ""
            if let failure = session.failureMessage { message = failure }
            if session.abortRequested { message = "aborted" }
            if message.isEmpty { message = "connection failed" }
            let code = status != 0 ? Self.problemCode(wsi) : session.abortRequested ? nil : session.failureCode
            finish(session, .failed(status: status == 0 ? nil : status, code: code, message: message))
            return 0

        case LWS_CALLBACK_CLIENT_CLOSED, LWS_CALLBACK_CLOSED_CLIENT_HTTP, LWS_CALLBACK_WSI_DESTROY:
            // CLIENT_CLOSED is the normal end of an open connection. The other two are nets for
            // paths where lws reports neither CLIENT_CLOSED nor CONNECTION_ERROR.
            guard let session = session(for: wsi) else { return 0 }
            ended(session)
            return 0

        default:
            return 0
        }
    }

    /// Service thread: starts one HTTP request; like `startConnection`, registered before lws sees it.
    private func startRequest(_ exchange: HTTPClientExchange) {
        guard let context = state.context else { return }
        state.requests[exchange.id] = exchange
        var info = lws_client_connect_info()
        info.context = context
        info.port = Int32(exchange.port)
        info.local_protocol_name = UnsafePointer(protocolName)
        info.opaque_user_data = UnsafeMutableRawPointer(bitPattern: UInt(exchange.id))
        switch tlsSetup(exchange.tls, target: exchange.hostHeader) {
        case .success(let (flags, vhost)):
            info.ssl_connection = flags
            info.vhost = vhost
        case .failure(let problem):
            completeRequest(exchange, .failure(problem))
            return
        }
        let wsi = exchange.host.withCString { address in
            exchange.path.withCString { path in
                exchange.hostHeader.withCString { hostHeader in
                    exchange.method.withCString { method -> OpaquePointer? in
                        info.address = address
                        info.path = path
                        info.host = hostHeader
                        info.method = method
                        return lws_client_connect_via_info(&info)
                    }
                }
            }
        }
        guard !exchange.finished else { return }
        if let wsi {
            exchange.wsi = wsi
        } else {
            completeRequest(exchange, .failure(HTTPClientError(message: "cannot start a request to \(exchange.hostHeader)")))
        }
    }

    /// Service thread: delivers the one outcome of a request and forgets it.
    private func completeRequest(_ exchange: HTTPClientExchange, _ outcome: Result<HTTPClientResponse, HTTPClientError>) {
        guard !exchange.finished else { return }
        exchange.finished = true
        exchange.wsi = nil
        state.requests[exchange.id] = nil
        exchange.complete(outcome)
    }

    /// Service thread: the callbacks of an HTTP request's wsi.
    private func handleHTTP(_ exchange: HTTPClientExchange, wsi: OpaquePointer, _ reason: lws_callback_reasons,
                            _ user: UnsafeMutableRawPointer?, _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32
    {
        switch reason {
        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            guard let input else { return -1 }
            let cursor = input.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
            guard let start = cursor.pointee else { return -1 }
            let end = start + length
            guard Self.appendHeaders(exchange.headers, wsi: wsi, cursor: cursor, end: end) else {
                exchange.failureMessage = "request headers do not fit"
                return -1
            }
            if !exchange.body.isEmpty {
                guard lws_add_http_header_content_length(wsi, UInt64(exchange.body.count), cursor, end) == 0 else { return -1 }
                // lws then asks for CLIENT_HTTP_WRITEABLE, where the body goes out.
                lws_client_http_body_pending(wsi, 1)
            }
            return 0

        case LWS_CALLBACK_CLIENT_HTTP_WRITEABLE:
            guard !exchange.bodySent, !exchange.body.isEmpty else { return 0 }
            exchange.bodySent = true
            let message = OutboundMessage(exchange.body)
            // lws buffers what the socket does not take at once and sends it before reading the answer.
            guard lws_write(wsi, message.payloadPointer, message.count, LWS_WRITE_HTTP_FINAL) >= 0 else { return -1 }
            lws_client_http_body_pending(wsi, 0)
            lws_callback_on_writable(wsi)
            return 0

        case LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION:
            if length == 0, let user, exchange.failureMessage == nil {
                let failure = Self.certificateFailure(cs_lws_x509_verify_error(user), host: exchange.host)
                (exchange.failureCode, exchange.failureMessage) = (failure.code, failure.message)
            }
            return 0

        case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP:
            exchange.status = Int(lws_http_client_http_response(wsi))
            for (token, name) in HTTPClientResponse.capturedTokens {
                let size = Int(lws_hdr_total_length(wsi, token))
                guard size > 0 else { continue }
                var buffer = [CChar](repeating: 0, count: size + 1)
                let copied = buffer.withUnsafeMutableBufferPointer { lws_hdr_copy(wsi, $0.baseAddress, Int32($0.count), token) }
                if copied >= 0 {
                    exchange.responseHeaders[name] = String(decoding: buffer.prefix(Int(copied)).map { UInt8(bitPattern: $0) },
                                                            as: UTF8.self)
                }
            }
            return 0

        case LWS_CALLBACK_RECEIVE_CLIENT_HTTP:
            // lws wants the body pulled through lws_http_client_read, which delivers it as
            // RECEIVE_CLIENT_HTTP_READ chunks.
            let capacity = 4096
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(cs_lws_pre()) + capacity)
            defer { buffer.deallocate() }
            var cursor: UnsafeMutablePointer<CChar>? = buffer + Int(cs_lws_pre())
            var room = Int32(capacity)
            return lws_http_client_read(wsi, &cursor, &room) < 0 ? -1 : 0

        case LWS_CALLBACK_RECEIVE_CLIENT_HTTP_READ:
            guard let input, length > 0 else { return 0 }
            guard exchange.responseBody.count + length <= Self.maxMessageBytes else {
                exchange.failureMessage = "response body larger than \(Self.maxMessageBytes) bytes"
                return -1
            }
            exchange.responseBody.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
            return 0

        case LWS_CALLBACK_COMPLETED_CLIENT_HTTP:
            completeRequest(exchange, .success(HTTPClientResponse(status: exchange.status, headers: exchange.responseHeaders,
                                                                  body: exchange.responseBody)))
            // Nonzero closes the connection: requests are not pooled, lws sent `connection: close`.
            return -1

        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            // A refused certificate arrives here as lws's text ("server's cert didn't look good, …").
            var message = input.map { pointer -> String in
                String(decoding: UnsafeRawBufferPointer(start: pointer, count: length).prefix { $0 != 0 }, as: UTF8.self)
            } ?? ""
            if let failure = exchange.failureMessage { message = failure }
            completeRequest(exchange, .failure(HTTPClientError(message: message.isEmpty ? "connection failed" : message,
                                                               code: exchange.failureCode)))
            return 0

        case LWS_CALLBACK_CLOSED_CLIENT_HTTP, LWS_CALLBACK_WSI_DESTROY:
            completeRequest(exchange, .failure(HTTPClientError(
                message: exchange.failureMessage ?? "the connection closed before the response was complete",
                code: exchange.failureCode)))
            return 0

        default:
            return 0
        }
    }

    /// Adds `headers` at the lws write cursor; false when they do not fit. Service thread.
    fileprivate static func appendHeaders(_ headers: [(String, String)], wsi: OpaquePointer,
                                          cursor: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>,
                                          end: UnsafeMutablePointer<UInt8>) -> Bool
    {
        for (name, value) in headers {
            let nameBytes = Array((name + ":").utf8) + [0]
            let valueBytes = Array(value.utf8)
            let failed = nameBytes.withUnsafeBufferPointer { namePointer in
                valueBytes.withUnsafeBufferPointer { valuePointer in
                    lws_add_http_header_by_name(wsi, namePointer.baseAddress, valuePointer.baseAddress,
                                                Int32(valuePointer.count), cursor, end) != 0
                }
            }
            if failed { return false }
        }
        return true
    }

    /// Service thread: one CLIENT_RECEIVE chunk. Reassembles fragments (and chunks of frames
    /// larger than the rx buffer) into whole messages.
    private func receive(_ session: ClientSession, wsi: OpaquePointer, input: UnsafeMutableRawPointer?, length: Int)
        -> Int32
    {
        if lws_is_first_fragment(wsi) != 0 {
            session.rx.removeAll(keepingCapacity: session.rx.capacity <= Self.rxBufferSize)
            session.rxBinary = lws_frame_is_binary(wsi) != 0
        }
        if let input, length > 0 {
            guard session.rx.count + length <= Self.maxMessageBytes else {
                // Protect the process, not the protocol: close as the RFC says for oversize data.
                let reason = Array("message too big".utf8)
                reason.withUnsafeBufferPointer {
                    lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, UnsafeMutablePointer(mutating: $0.baseAddress),
                                     $0.count)
                }
                session.sentClose = (1009, "message too big")
                return -1
            }
            session.rx.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
        }
        guard lws_is_final_fragment(wsi) != 0, lws_remaining_packet_payload(wsi) == 0 else { return 0 }
        let event: WebSocketClientEvent = session.rxBinary ? .binary(session.rx)
                                                           : .text(String(decoding: session.rx, as: UTF8.self))
        session.rx.removeAll(keepingCapacity: session.rx.capacity <= Self.rxBufferSize)
        session.emit(event)
        return 0
    }

    /// Service thread: one lws_write per CLIENT_WRITEABLE (lws allows no more), then the close.
    private func writeNext(_ session: ClientSession, wsi: OpaquePointer) -> Int32 {
        // Returning -1 with no close reason set drops the socket without a close frame.
        if session.abortRequested { return -1 }
        if let (message, binary) = session.outbox.popFirst() {
            let written = lws_write(wsi, message.payloadPointer, message.count, binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT)
            // lws buffers what the socket does not take and sends it before the next WRITEABLE.
            if written < message.count { return -1 }
            if !session.outbox.isEmpty || session.closeRequest != nil { lws_callback_on_writable(wsi) }
            return 0
        }
        guard let (code, reason) = session.closeRequest else { return 0 }
        reason.withUnsafeBufferPointer { buffer in
            lws_close_reason(wsi, lws_close_status(rawValue: UInt32(code)), UnsafeMutablePointer(mutating: buffer.baseAddress),
                             buffer.count)
        }
        session.sentClose = (code, String(decoding: reason, as: UTF8.self))
        // With a close reason set, -1 makes lws send the close frame and await the echo.
        return -1
    }

    /// Service thread: the `problem-code` header of a refused upgrade's answer.
    private static func problemCode(_ wsi: OpaquePointer) -> String? {
        let name = "problem-code:"
        let size = Int(lws_hdr_custom_length(wsi, name, Int32(name.utf8.count)))
        guard size > 0, size < 256 else { return nil }
        var buffer = [CChar](repeating: 0, count: size + 1)
        let copied = buffer.withUnsafeMutableBufferPointer {
            lws_hdr_custom_copy(wsi, $0.baseAddress, Int32($0.count), name, Int32(name.utf8.count))
        }
        guard copied > 0 else { return nil }
        return String(decoding: buffer.prefix(Int(copied)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Service thread: the wsi is gone without CONNECTION_ERROR.
    private func ended(_ session: ClientSession) {
        guard session.opened else {
            finish(session, .failed(status: nil, code: session.abortRequested ? nil : session.failureCode,
                                    message: session.abortRequested ? "aborted"
                                        : session.failureMessage ?? "closed before established"))
            return
        }
        if let (code, reason) = session.peerClose {
            finish(session, .closed(code: code, reason: reason))
        } else if let (code, reason) = session.sentClose {
            finish(session, .closed(code: code, reason: reason))
        } else {
            let reason = session.abortRequested ? "aborted" : state.dead ? "client loop shut down" : "connection lost"
            finish(session, .closed(code: nil, reason: reason))
        }
    }

    /// Service thread: delivers the one terminal event and forgets the session.
    private func finish(_ session: ClientSession, _ event: WebSocketClientEvent) {
        guard !session.finished else { return }
        session.finished = true
        session.wsi = nil
        session.outbox.removeAll()
        state.sessions[session.id] = nil
        session.emit(event)
        session.continuation.finish()
    }
}

/// The C entry point for every client callback. lws calls it on the service thread; the loop is
/// recovered from the context's user pointer, an unretained reference that the service thread
/// keeps alive for as long as the context exists.
private func clientCallback(
    _ wsi: OpaquePointer?, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
    guard let wsi, let context = lws_get_context(wsi), let owner = lws_context_user(context) else { return 0 }
    let loop = Unmanaged<WebSocketClientLoop>.fromOpaque(owner).takeUnretainedValue()
    return loop.handle(wsi, reason, user, input, length)
}

/// A value behind a pthread mutex (NSLock): the project's `Locked` (CallingLogging) without its
/// `Value: Sendable` bound, which this loop cannot meet. What it guards is not Sendable (the lws
/// context pointer, the service thread's `pthread_t`, commands holding connection state) and is
/// used under the lock only, or only on the service thread; `Locked` would have to be unchecked
/// for every caller to admit it. Not `Synchronization.Mutex`, for the reason `Locked` gives: on
/// Linux ThreadSanitizer does not see its contended path and reports every contended `withLock`
/// as a race, which would bury real reports in a component whose whole job is handing work
/// between threads.
private final class PthreadLocked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only read or written inside `withLock`, under `lock`. Values that are
    // not Sendable (the context pointer) are used under the lock only, or only on the service thread.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

/// The closure a service thread runs, boxed so it can cross `pthread_create`'s void pointer.
private final class ServiceThreadBody {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Service-thread-only state. Not Sendable on purpose: nothing else may hold it.
private final class ClientServiceState {
    var context: OpaquePointer?
    var sessions: [UInt64: ClientSession] = [:]
    /// HTTP requests in flight, by id (the same id space as `sessions`).
    var requests: [UInt64: HTTPClientExchange] = [:]
    /// Client vhosts by the CA file their SSL_CTX trusts.
    var caVhosts: [String: OpaquePointer] = [:]
    /// Set when the loop has stopped servicing: commands are answered, not executed.
    var dead = false
}

/// One connection as the service thread sees it.
private final class ClientSession: @unchecked Sendable {
    // @unchecked: built completely on the caller's thread, handed to the service thread once
    // through the inbox lock (which orders the two), and only touched there afterwards. `let`
    // fields are immutable; `continuation` is Sendable.
    let id: UInt64
    let host: String
    let port: Int
    let path: String
    let headers: [(String, String)]
    let tls: TLSClientOptions?
    let continuation: AsyncStream<WebSocketClientEvent>.Continuation
    let handler: (@Sendable (WebSocketClientEvent) -> Void)?
    var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Valid from connect until the terminal event; lws 4.1.6 never clears it for us and it dangles after an error.
    var wsi: OpaquePointer?
    var opened = false
    var finished = false
    var outbox = FIFO<(OutboundMessage, Bool)>()
    var closeRequest: (UInt16, [UInt8])?
    var sentClose: (UInt16, String)?
    var peerClose: (UInt16?, String)?
    var abortRequested = false
    var readPaused = false
    var failureMessage: String?
    /// The `ClientFailureCode` that goes with `failureMessage`, when there is one.
    var failureCode: String?
    var rx: [UInt8] = []
    var rxBinary = false

    init(id: UInt64, host: String, port: Int, path: String, headers: [(String, String)], tls: TLSClientOptions?,
         continuation: AsyncStream<WebSocketClientEvent>.Continuation,
         handler: (@Sendable (WebSocketClientEvent) -> Void)?)
    {
        self.id = id
        self.host = host
        self.port = port
        self.path = path
        self.headers = headers
        self.tls = tls
        self.continuation = continuation
        self.handler = handler
    }

    /// Delivers to the handler when one was given, else to the stream. Service thread.
    func emit(_ event: WebSocketClientEvent) {
        if let handler { handler(event) } else { continuation.yield(event) }
    }
}

/// A client WebSocket. Every method may be called from any thread: each queues a command for
/// the loop's service thread and returns at once. Dropping the last reference closes the
/// connection with 1001 (going away), or drops it if it never opened.
public final class WebSocketClientConnection: Sendable {
    // Checked Sendable: every stored property is immutable and Sendable.
    /// Everything the connection reports; exactly one terminal event, then the stream finishes.
    public let events: AsyncStream<WebSocketClientEvent>
    /// Unique within its loop; also what lws carries for this connection.
    public let id: UInt64
    private let loop: WebSocketClientLoop

    fileprivate init(id: UInt64, loop: WebSocketClientLoop, events: AsyncStream<WebSocketClientEvent>) {
        self.id = id
        self.loop = loop
        self.events = events
    }

    deinit { loop.release(id) }

    // Each send allocates its own OutboundMessage: a client lws_write XORs the mask into the
    // payload in place, so unlike on the server a buffer must never be shared or reused.

    /// Sends a text message (queued until `open`).
    public func send(text: String) {
        loop.send(OutboundMessage(Array(text.utf8)), binary: false, on: id)
    }

    /// Sends `bytes` as one binary message, or as one TEXT message when `binary` is false —
    /// without any UTF-8 check, so tests can put invalid UTF-8 on the wire.
    public func send(bytes: [UInt8], binary: Bool) {
        loop.send(OutboundMessage(bytes), binary: binary, on: id)
    }

    /// Starts the closing handshake after the messages already queued have been written. The
    /// terminal event is `.closed(code:reason:)` with this code (or the server's, if it closed
    /// first). Later sends are dropped.
    public func close(code: UInt16 = 1000, reason: String = "") {
        loop.close(id, code: code, reason: reason)
    }

    /// Stops reading from the socket (lws_rx_flow_control): the server's writes back up into
    /// its own queue. Messages already received are still delivered.
    public func pauseReading() { loop.setReadPaused(id, true) }

    /// Resumes reading after `pauseReading`.
    public func resumeReading() { loop.setReadPaused(id, false) }

    /// Drops the TCP connection without a closing handshake, discarding queued messages. The
    /// terminal event is `.closed(code: nil, reason: "aborted")` (or `.failed` if never opened).
    public func abort() { loop.abort(id) }
}

/// The headers an lws client response keeps (lws 4.1.6 reads them by known token only).
extension HTTPClientResponse {
    static let capturedTokens: [(lws_token_indexes, String)] = [
        (WSI_TOKEN_HTTP_CONTENT_TYPE, "content-type"), (WSI_TOKEN_HTTP_RETRY_AFTER, "retry-after"),
        (WSI_TOKEN_HTTP_LOCATION, "location"), (WSI_TOKEN_HTTP_WWW_AUTHENTICATE, "www-authenticate"),
        (WSI_TOKEN_HTTP_ETAG, "etag"),
    ]
}

/// One HTTP request as the service thread sees it.
private final class HTTPClientExchange: @unchecked Sendable {
    // @unchecked: built on the caller's thread, handed over once through the inbox lock, then only
    // touched on the service thread (`complete` may also run on the caller's thread when the loop
    // refused the command, before the service thread ever saw it).
    let id: UInt64
    let method: String
    let host: String
    let port: Int
    let path: String
    let headers: [(String, String)]
    let body: [UInt8]
    let tls: TLSClientOptions?
    private let completion: @Sendable (Result<HTTPClientResponse, HTTPClientError>) -> Void
    var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    var wsi: OpaquePointer?
    var finished = false
    var bodySent = false
    var failureMessage: String?
    /// The `ClientFailureCode` that goes with `failureMessage`, when there is one.
    var failureCode: String?
    var status = 0
    var responseHeaders: [String: String] = [:]
    var responseBody: [UInt8] = []

    init(id: UInt64, method: String, host: String, port: Int, path: String, headers: [(String, String)], body: [UInt8],
         tls: TLSClientOptions?, completion: @escaping @Sendable (Result<HTTPClientResponse, HTTPClientError>) -> Void)
    {
        self.id = id
        self.method = method
        self.host = host
        self.port = port
        self.path = path
        self.headers = headers
        self.body = body
        self.tls = tls
        self.completion = completion
    }

    func complete(_ outcome: Result<HTTPClientResponse, HTTPClientError>) { completion(outcome) }
}
