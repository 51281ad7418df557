import CLibWebSockets
import CallingCore
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
    /// 101. `status` is the HTTP status of that answer (401, 403, 503…) when there was one.
    case failed(status: Int?, message: String)

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

    /// Every client protocol buffer is this large so a 200 KB message arrives in one or two chunks;
    /// messages larger than this are still reassembled from fragments.
    static let rxBufferSize = 256 * 1024
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
        // lws's notices would otherwise land on an SDK user's stderr; keep warnings and errors.
        lws_set_log_level(LLL_ERR | LLL_WARN, nil)
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
    public func connect(host: String, port: Int, path: String, headers: [String: String] = [:],
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
                                    continuation: continuation, handler: onEvent)
        if !post(.connect(session)) {
            onEvent?(.failed(status: nil, message: "client loop is shut down"))
            continuation.yield(.failed(status: nil, message: "client loop is shut down"))
            continuation.finish()
        }
        return connection
    }

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
        return lws_create_context(&info)
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
            return
        }
        switch command {
        case .connect(let session):
            startConnection(session)

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
        info.ssl_connection = Int32(LCCSCF_HTTP_NO_FOLLOW_REDIRECT.rawValue)
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
    fileprivate func handle(_ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ input: UnsafeMutableRawPointer?,
                            _ length: Int) -> Int32
    {
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
            for (name, value) in session.headers {
                let nameBytes = Array((name + ":").utf8) + [0]
                let valueBytes = Array(value.utf8)
                let failed = nameBytes.withUnsafeBufferPointer { namePointer in
                    valueBytes.withUnsafeBufferPointer { valuePointer in
                        lws_add_http_header_by_name(wsi, namePointer.baseAddress, valuePointer.baseAddress,
                                                    Int32(valuePointer.count), cursor, end) != 0
                    }
                }
                if failed {
                    // Headers larger than lws's buffer: fail the connection rather than send a
                    // request without them (an Authorization header silently lost would mislead).
                    session.failureMessage = "request headers do not fit"
                    return -1
                }
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
            finish(session, .failed(status: status == 0 ? nil : status, message: message))
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

    /// Service thread: the wsi is gone without CONNECTION_ERROR.
    private func ended(_ session: ClientSession) {
        guard session.opened else {
            finish(session, .failed(status: nil, message: session.failureMessage
                                        ?? (session.abortRequested ? "aborted" : "closed before established")))
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
    return loop.handle(wsi, reason, input, length)
}

/// A value behind a pthread mutex (NSLock). Not `Synchronization.Mutex`: on Linux its contended
/// path locks inside the uninstrumented runtime, so ThreadSanitizer misses the ordering and
/// reports every contended `withLock` as a race (measured with Swift 6.3), which would bury real
/// reports in a component whose whole job is handing work between threads.
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
    let continuation: AsyncStream<WebSocketClientEvent>.Continuation
    let handler: (@Sendable (WebSocketClientEvent) -> Void)?
    var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Valid from connect until the terminal event; lws never clears it for us (lws-notes.md).
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
    var rx: [UInt8] = []
    var rxBinary = false

    init(id: UInt64, host: String, port: Int, path: String, headers: [(String, String)],
         continuation: AsyncStream<WebSocketClientEvent>.Continuation,
         handler: (@Sendable (WebSocketClientEvent) -> Void)?)
    {
        self.id = id
        self.host = host
        self.port = port
        self.path = path
        self.headers = headers
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
