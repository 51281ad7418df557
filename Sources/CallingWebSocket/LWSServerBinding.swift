import CLibWebSockets
import Foundation

// The lws calls of the server part of the transport (CallingTransport's WebSocketServer), in Swift
// types: this module is the only one that imports libwebsockets, so the server part reaches lws
// only through what is here. Each function is one lws call (or one of shim.h's helpers) and keeps
// its semantics; the server keeps every decision (budgets, framing checks, routing). A wsi and a
// context stay `OpaquePointer`s, as lws hands them out. Package access: no app sees any of this.

/// Receives the callbacks of a server context made by `LWSServerContextResources.createContext`.
/// Runs on the context's service thread.
package protocol LWSServerHandler: AnyObject {
    /// lws's protocol callback; the return value goes back to lws unchanged (nonzero closes `wsi`).
    func handle(_ wsi: OpaquePointer, _ event: LWSServerEvent, _ user: UnsafeMutableRawPointer?,
                _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32
}

/// The `LWS_CALLBACK_*` reasons the server acts on; every other reason arrives as `other`.
package enum LWSServerEvent: Sendable, Equatable {
    case eventWaitCancelled, filterNetworkConnection, serverNewClientInstantiated, wsiDestroy
    case rawAdopt, rawRx, httpConfirmUpgrade, sslInfo
    case established, receive, receivePong, peerInitiatedClose, serverWriteable, closed
    case http, httpBody, httpBodyCompletion, httpWriteable, closedHTTP
    case other

    init(_ reason: lws_callback_reasons) {
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED: self = .eventWaitCancelled
        case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: self = .filterNetworkConnection
        case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: self = .serverNewClientInstantiated
        case LWS_CALLBACK_WSI_DESTROY: self = .wsiDestroy
        case LWS_CALLBACK_RAW_ADOPT: self = .rawAdopt
        case LWS_CALLBACK_RAW_RX: self = .rawRx
        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: self = .httpConfirmUpgrade
        case LWS_CALLBACK_SSL_INFO: self = .sslInfo
        case LWS_CALLBACK_ESTABLISHED: self = .established
        case LWS_CALLBACK_RECEIVE: self = .receive
        case LWS_CALLBACK_RECEIVE_PONG: self = .receivePong
        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: self = .peerInitiatedClose
        case LWS_CALLBACK_SERVER_WRITEABLE: self = .serverWriteable
        case LWS_CALLBACK_CLOSED: self = .closed
        case LWS_CALLBACK_HTTP: self = .http
        case LWS_CALLBACK_HTTP_BODY: self = .httpBody
        case LWS_CALLBACK_HTTP_BODY_COMPLETION: self = .httpBodyCompletion
        case LWS_CALLBACK_HTTP_WRITEABLE: self = .httpWriteable
        case LWS_CALLBACK_CLOSED_HTTP: self = .closedHTTP
        default: self = .other
        }
    }
}

/// The request header tokens the server reads (lws's `WSI_TOKEN_*`).
package enum LWSHeader: Sendable, CaseIterable {
    case getURI, postURI, patchURI, deleteURI, optionsURI, putURI, headURI
    case version, authorization, contentType, contentLength, ifMatch, accept, origin, transferEncoding
    case xForwardedFor, userAgent, host, ifNoneMatch

    var token: lws_token_indexes {
        switch self {
        case .getURI: WSI_TOKEN_GET_URI
        case .postURI: WSI_TOKEN_POST_URI
        case .patchURI: WSI_TOKEN_PATCH_URI
        case .deleteURI: WSI_TOKEN_DELETE_URI
        case .optionsURI: WSI_TOKEN_OPTIONS_URI
        case .putURI: WSI_TOKEN_PUT_URI
        case .headURI: WSI_TOKEN_HEAD_URI
        case .version: WSI_TOKEN_VERSION
        case .authorization: WSI_TOKEN_HTTP_AUTHORIZATION
        case .contentType: WSI_TOKEN_HTTP_CONTENT_TYPE
        case .contentLength: WSI_TOKEN_HTTP_CONTENT_LENGTH
        case .ifMatch: WSI_TOKEN_HTTP_IF_MATCH
        case .accept: WSI_TOKEN_HTTP_ACCEPT
        case .origin: WSI_TOKEN_ORIGIN
        case .transferEncoding: WSI_TOKEN_HTTP_TRANSFER_ENCODING
        case .xForwardedFor: WSI_TOKEN_X_FORWARDED_FOR
        case .userAgent: WSI_TOKEN_HTTP_USER_AGENT
        case .host: WSI_TOKEN_HOST
        case .ifNoneMatch: WSI_TOKEN_HTTP_IF_NONE_MATCH
        }
    }
}

/// How `LWS.write` frames its bytes (`LWS_WRITE_*`).
package enum LWSWriteMode: Sendable {
    /// One WebSocket text frame.
    case text
    /// Raw bytes: HTTP body, or WebSocket frames framed by the caller.
    case http
    /// The last HTTP body bytes of a response.
    case httpFinal

    @usableFromInline var protocolValue: lws_write_protocol {
        switch self {
        case .text: LWS_WRITE_TEXT
        case .http: LWS_WRITE_HTTP
        case .httpFinal: LWS_WRITE_HTTP_FINAL
        }
    }
}

/// What the server's lws context is made of: one protocol on one port, optionally TLS.
package struct LWSServerOptions {
    package var host: String
    package var port: Int
    /// The protocol's rx buffer and tx packet size: at least the largest frame (docs/architecture.md, "The lws #2889 guards").
    package var bufferBytes: Int
    /// Per-header limit and request-target limit of the header table (`cs_lws_fill_token_limits`).
    package var headerTokenLimit: Int
    package var uriTokenLimit: Int
    package var maxHeaderBytes: Int
    package var httpTimeoutSeconds: Int
    /// lws's header-table timer (`timeout_secs_ah_idle`) and keep-alive idle timer (`keepalive_timeout`).
    package var headerTimeoutSeconds = 10
    package var keepAliveTimeoutSeconds = 5
    package var fdLimitPerThread: Int
    package var libev: Bool
    package var tls: TLS?

    package struct TLS {
        package var certificateChainFile: String
        package var privateKeyFile: String
        package var cipherList: String
        package var tls13Only: Bool

        package init(certificateChainFile: String, privateKeyFile: String, cipherList: String, tls13Only: Bool) {
            self.certificateChainFile = certificateChainFile
            self.privateKeyFile = privateKeyFile
            self.cipherList = cipherList
            self.tls13Only = tls13Only
        }
    }

    package init(host: String, port: Int, bufferBytes: Int,
                 headerTokenLimit: Int, uriTokenLimit: Int, maxHeaderBytes: Int, httpTimeoutSeconds: Int,
                 fdLimitPerThread: Int, libev: Bool, tls: TLS?)
    {
        self.host = host
        self.port = port
        self.bufferBytes = bufferBytes
        self.headerTokenLimit = headerTokenLimit
        self.uriTokenLimit = uriTokenLimit
        self.maxHeaderBytes = maxHeaderBytes
        self.httpTimeoutSeconds = httpTimeoutSeconds
        self.fdLimitPerThread = fdLimitPerThread
        self.libev = libev
        self.tls = tls
    }
}

/// The C structures a server context points into; they must outlive the context, so the server
/// keeps this object for its own lifetime.
package final class LWSServerContextResources {
    private var protocols: UnsafeMutablePointer<lws_protocols>?
    private var retryPolicy: UnsafeMutablePointer<lws_retry_bo_t>?
    private var tokenLimits: UnsafeMutablePointer<lws_token_limits>?
    private var cStrings: [UnsafeMutablePointer<CChar>] = []
    private var owner: HandlerBox?

    package init() {}

    deinit {
        protocols?.deallocate()
        retryPolicy?.deallocate()
        tokenLimits?.deallocate()
        for string in cStrings { free(string) }
    }

    /// Creates the context and its default vhost (listening at once); nil when lws refuses. Call on
    /// the thread that will service it. `handler` is held from here until `contextDestroyed()`:
    /// a handler that keeps these resources is in a cycle with them until then.
    package func createContext(_ options: LWSServerOptions, handler: any LWSServerHandler) -> OpaquePointer? {
        let owner = HandlerBox(handler)
        self.owner = owner
        let context = makeContext(options, owner: owner)
        if context == nil { self.owner = nil }
        return context
    }

    /// Lets the handler go: the context that called it has been destroyed (its final stage), so
    /// no callback can reach it any more.
    package func contextDestroyed() {
        owner = nil
    }

    private func makeContext(_ options: LWSServerOptions, owner: HandlerBox) -> OpaquePointer? {
        let name = strdup("calling")!
        cStrings.append(name)
        let protocolList = UnsafeMutablePointer<lws_protocols>.allocate(capacity: 2)
        protocolList.initialize(repeating: lws_protocols(), count: 2)
        protocolList[0].name = UnsafePointer(name)
        protocolList[0].callback = serverCallback
        // Per connection: its id and the server's state for it (unretained), so a callback finds
        // that state without a lookup (LWSSession).
        protocolList[0].per_session_data_size = LWSSession.size
        // Both at least the largest frame: docs/architecture.md, "The lws #2889 guards".
        protocolList[0].rx_buffer_size = options.bufferBytes
        protocolList[0].tx_packet_size = options.bufferBytes
        protocols = protocolList

        // lws's keep-alive off: the server keeps its own (CallingTransport's KeepAliveSchedule),
        // since lws 4.1.6 re-sorts a socket's timer into one list of every timer on each PONG, a
        // walk over all sockets (docs/benchmarks.md, "Keep-alive"). A policy is still needed: with
        // none the vhost takes the context's default, a PING at 300 s (lib/core/context.c), and
        // only a zero `secs_since_valid_hangup` makes lws skip the timer (_lws_validity_confirmed_role).
        let policy = UnsafeMutablePointer<lws_retry_bo_t>.allocate(capacity: 1)
        policy.initialize(to: lws_retry_bo_t())
        policy.pointee.secs_since_valid_ping = 0
        policy.pointee.secs_since_valid_hangup = 0
        retryPolicy = policy

        var info = lws_context_creation_info()
        info.port = Int32(options.port)
        let iface = strdup(options.host)!
        cStrings.append(iface)
        info.iface = UnsafePointer(iface)
        info.protocols = UnsafePointer(protocolList)
        info.gid = -1
        info.uid = -1
        info.user = Unmanaged.passUnretained(owner).toOpaque()
        // The header table holds the whole request head as lws keeps it: the target, every header
        // value, and the names of fields lws does not know. Each known field is cut at its limit
        // instead of failing, so an oversized target still reaches LWS_CALLBACK_HTTP and gets its
        // 414. A head larger than the table fails the parse, and lws then closes without a
        // callback; the log hook catches that moment (`setHeaderOverflowHook`) to answer 431.
        let limits = UnsafeMutablePointer<lws_token_limits>.allocate(capacity: 1)
        limits.initialize(to: lws_token_limits())
        cs_lws_fill_token_limits(limits, UInt16(clamping: options.headerTokenLimit), UInt16(clamping: options.uriTokenLimit))
        tokenLimits = limits
        info.token_limits = UnsafePointer(limits)
        info.max_http_header_data = UInt16(clamping: options.maxHeaderBytes)
        info.pt_serv_buf_size = 16_384
        info.timeout_secs = UInt32(options.httpTimeoutSeconds)
        info.timeout_secs_ah_idle = UInt32(options.headerTimeoutSeconds)
        info.keepalive_timeout = Int32(options.keepAliveTimeoutSeconds)
        info.retry_and_idle_policy = UnsafePointer(policy)
        info.fd_limit_per_thread = UInt32(clamping: options.fdLimitPerThread)
        let server = strdup("calling-server")!
        cStrings.append(server)
        info.server_string = UnsafePointer(server)
        if options.libev { info.options |= cs_lws_option_libev() }
        if !options.host.contains(":") { info.options |= cs_lws_option_disable_ipv6() }
        info.options |= cs_lws_option_fallback_to_raw()
        if let tls = options.tls {
            // Without ALLOW_NON_SSL_ON_SSL_PORT a plaintext client is refused, never served.
            for text in [tls.certificateChainFile, tls.privateKeyFile, tls.cipherList] { cStrings.append(strdup(text)!) }
            let count = cStrings.count
            info.ssl_cert_filepath = UnsafePointer(cStrings[count - 3])
            info.ssl_private_key_filepath = UnsafePointer(cStrings[count - 2])
            info.ssl_cipher_list = UnsafePointer(cStrings[count - 1])
            info.ssl_options_set = cs_lws_tls_server_options(tls.tls13Only ? 1 : 0)
            // Handshake start/done arrive as LWS_CALLBACK_SSL_INFO: how failures are counted.
            info.ssl_info_event_mask = cs_lws_ssl_cb_handshake_start() | cs_lws_ssl_cb_handshake_done()
            // Adds DO_SSL_GLOBAL_INIT where lws 4.1.6 needs it (see the factory's comment).
            return TLSContextFactory.createContext(info)
        }
        return lws_create_context(&info)
    }
}

/// One call lws makes on its service thread once it has handled what the event loop reported
/// ready, without a timer or a socket of its own: a no-delay `lws_sul_schedule`. lws runs ripe
/// scheduled calls from the libev loop's idle watcher, which runs once no event is pending, and
/// with its own poll() loop at the start of the next service, before it waits: in both, after the
/// callbacks of one wake-up, before the next wait (lws 4.1.6, `lib/event-libs/libev/libev.c`,
/// `lib/plat/unix/unix-service.c`). Service thread only.
package final class LWSDeferredCall {
    /// lws's list node, then this object's address (unretained), so the C callback finds it.
    private let node: UnsafeMutableRawPointer
    private let body: () -> Void
    /// Scheduled and not yet run.
    package private(set) var isScheduled = false

    private static let ownerOffset = (MemoryLayout<lws_sorted_usec_list_t>.size + 15) & ~15
    /// When the call is due, from now (µs): in the past, so it is ripe at once even when it is
    /// scheduled from inside lws's own run of ripe calls (an lws timeout that closes a connection,
    /// or this call's own body). lws runs the calls due before the moment its run began in that
    /// same run; a call due a moment later would wait for libev's timer, which lws re-arms without
    /// stopping it first (`ev_timer_set` on an active watcher), so it could wait until lws's next
    /// timeout, seconds later. Not -1: that value cancels (`LWS_SET_TIMER_USEC_CANCEL`).
    private static let due: lws_usec_t = -10_000_000

    /// `body` runs once per `schedule`; it must not outlive what it refers to, so pass an
    /// unowned reference to the owner.
    package init(_ body: @escaping () -> Void) {
        self.body = body
        node = UnsafeMutableRawPointer.allocate(byteCount: Self.ownerOffset + MemoryLayout<UnsafeRawPointer>.size, alignment: 16)
        // lws links and unlinks the node itself; it must start out zeroed (unlinked).
        node.initializeMemory(as: UInt8.self, repeating: 0, count: Self.ownerOffset)
        node.storeBytes(of: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()), toByteOffset: Self.ownerOffset,
                        as: UnsafeRawPointer.self)
    }

    /// Free only after the context that may hold the node is destroyed.
    deinit { node.deallocate() }

    /// Runs the body after this wake-up's callbacks, unless it is scheduled already. `wsi` is any
    /// connection of the context (the call belongs to its service thread).
    @inline(__always)
    package func schedule(on wsi: OpaquePointer) {
        if isScheduled { return }
        guard let context = lws_get_context(wsi) else { return }
        isScheduled = true
        lws_sul_schedule(context, 0, node.assumingMemoryBound(to: lws_sorted_usec_list_t.self), deferredCallback, Self.due)
    }

    fileprivate static func fire(_ sul: UnsafeMutablePointer<lws_sorted_usec_list_t>) {
        let owner = UnsafeMutableRawPointer(sul).load(fromByteOffset: ownerOffset, as: UnsafeRawPointer.self)
        let call = Unmanaged<LWSDeferredCall>.fromOpaque(owner).takeUnretainedValue()
        call.isScheduled = false
        call.body()
    }
}

private func deferredCallback(_ sul: UnsafeMutablePointer<lws_sorted_usec_list_t>?) {
    guard let sul else { return }
    LWSDeferredCall.fire(sul)
}

/// What the server keeps in lws's per-session memory of a WebSocket connection (the `user` pointer
/// of its callbacks, zeroed by lws when the connection is made): the connection's id and one
/// unretained object reference, which the server clears before it lets the object go.
package enum LWSSession {
    package static let size = 2 * MemoryLayout<UInt64>.size

    @inlinable package static func id(_ user: UnsafeMutableRawPointer) -> UInt64 { user.load(as: UInt64.self) }

    @inlinable package static func object(_ user: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer? {
        user.load(fromByteOffset: MemoryLayout<UInt64>.size, as: UnsafeMutableRawPointer?.self)
    }

    @inlinable package static func store(_ user: UnsafeMutableRawPointer, id: UInt64, object: UnsafeMutableRawPointer?) {
        user.storeBytes(of: id, as: UInt64.self)
        user.storeBytes(of: object, toByteOffset: MemoryLayout<UInt64>.size, as: UnsafeMutableRawPointer?.self)
    }
}

/// The context's user pointer: holds the handler until `contextDestroyed()`.
private final class HandlerBox {
    /// Strong, and a constant: a call through a constant of an object the caller borrows needs no
    /// retain of its own. Through `unowned(unsafe)` every lws callback retained and released the
    /// handler, a pair of atomic operations per inbound frame.
    let handler: any LWSServerHandler
    init(_ handler: any LWSServerHandler) { self.handler = handler }
}

/// The C entry point. lws calls it on the service thread; the handler is recovered from the
/// context's user pointer, which `createContext` set.
private func serverCallback(
    _ wsi: OpaquePointer?, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
    guard let wsi, let context = lws_get_context(wsi), let owner = lws_context_user(context) else { return 0 }
    // The box is borrowed for the call, not retained and released around it: this runs for
    // every lws callback, one or more per inbound frame. The binding that made the context holds
    // the box (`owner`) for as long as the context can call back.
    return Unmanaged<HandlerBox>.fromOpaque(owner)._withUnsafeGuaranteedRef { box in
        box.handler.handle(wsi, LWSServerEvent(reason), user, input, length)
    }
}

/// The lws calls the server part makes, one each.
package enum LWS {
    // MARK: context (service thread unless noted)

    /// `lws_service`: one turn of the loop (with libev: until the loop stops).
    package static func service(_ context: OpaquePointer) -> Int32 { lws_service(context, 0) }

    /// `lws_context_destroy` (first stage from inside the loop, final stage after it).
    package static func destroy(_ context: OpaquePointer) { lws_context_destroy(context) }

    /// `lws_cancel_service`: wakes the loop; the one lws call that is safe from any thread.
    @inlinable package static func cancelService(_ context: OpaquePointer) { lws_cancel_service(context) }

    /// The default vhost's listening port, or nil without a default vhost.
    package static func listenPort(_ context: OpaquePointer) -> Int? {
        lws_get_vhost_by_name(context, "default").map { Int(lws_get_vhost_listen_port($0)) }
    }

    /// The `notAfter` lws reports for the certificate the default vhost serves, or nil when it has
    /// none; only good as "a certificate is loaded": lws 4.1.6's ASN.1 time parser is a day early
    /// and reads the time as local (lws_tls_openssl_asn1time_to_unix).
    package static func servedCertificateExpiry(_ context: OpaquePointer) -> Int64? {
        guard let vhost = lws_get_vhost_by_name(context, "default") else { return nil }
        var info = lws_tls_cert_info_results()
        guard lws_tls_vhost_cert_info(vhost, LWS_TLS_CERT_INFO_VALIDITY_TO, &info, 0) == 0 else { return nil }
        return Int64(info.time)
    }

    /// `lws_tls_cert_updated`: vhosts created with these paths read the files again. lws matches
    /// vhosts by the path strings they were created with, so pass the same ones.
    package static func certificateUpdated(_ context: OpaquePointer, certificateChainFile: String, privateKeyFile: String) {
        _ = lws_tls_cert_updated(context, certificateChainFile, privateKeyFile, nil, 0, nil, 0)
    }

    // MARK: process-wide helpers (shim.h)

    /// Routes lws's log through shim.h's hook, warnings and errors only (idempotent). Any thread.
    package static func installLogHook() { cs_lws_install_log_hook() }

    /// (Re)opens the spare descriptor the log hook releases when accept() runs out. Any thread.
    package static func reserveSpareDescriptor() { cs_lws_reserve_spare_fd() }

    /// Sets (or with nil clears) this thread's header-overflow hook: called with `context` when the
    /// h1 parser runs out of header-table space, just before lws closes that socket.
    package static func setHeaderOverflowHook(context: UnsafeMutableRawPointer?,
                                              _ handler: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?)
    {
        let hook = cs_lws_thread_hook()
        if handler != nil { hook.pointee.context = context }
        hook.pointee.on_header_overflow = handler
    }

    /// Bytes the kernel has received on `wsi`'s TCP socket so far (TCP_INFO), or 0.
    package static func tcpBytesReceived(_ wsi: OpaquePointer) -> UInt64 { cs_tcp_bytes_received(lws_get_socket_fd(wsi)) }

    /// Reads and discards up to `limit` bytes the peer already sent, without blocking.
    package static func drainSocket(_ wsi: OpaquePointer, limit: Int) { cs_drain_socket(lws_get_socket_fd(wsi), limit) }

    // MARK: connections (service thread)

    /// `shutdown(SHUT_RDWR)` on `wsi`'s socket: the client sees FIN, and reads of it end at once.
    package static func shutdownBothWays(_ wsi: OpaquePointer) { _ = shutdown(lws_get_socket_fd(wsi), Int32(SHUT_RDWR)) }

    /// `lws_callback_on_writable`.
    @inlinable package static func callbackOnWritable(_ wsi: OpaquePointer) { _ = lws_callback_on_writable(wsi) }

    /// `lws_partial_buffered`: lws still holds bytes of an earlier write for `wsi` (it writes them
    /// itself before the next WRITEABLE).
    @inlinable package static func hasBufferedOutput(_ wsi: OpaquePointer) -> Bool { lws_partial_buffered(wsi) != 0 }

    /// `lws_write`; `bytes` must have `OutboundMessage.headroom` writable bytes in front.
    @inlinable package static func write(_ wsi: OpaquePointer, _ bytes: UnsafeMutablePointer<UInt8>, _ count: Int, _ mode: LWSWriteMode) -> Int32 {
        lws_write(wsi, bytes, count, mode.protocolValue)
    }

    /// `lws_set_timeout` with the first user reason: lws drops the socket after `seconds`.
    @inlinable package static func setUserTimeout(_ wsi: OpaquePointer, seconds: Int) {
        lws_set_timeout(wsi, pending_timeout(rawValue: PENDING_TIMEOUT_USER_REASON_BASE.rawValue + 1), Int32(seconds))
    }

    /// `lws_set_timeout(…, LWS_TO_KILL_ASYNC)`: closes the socket from lws's timer processing.
    package static func killAsync(_ wsi: OpaquePointer) {
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_ASYNC)
    }

    /// `lws_set_timeout(…, LWS_TO_KILL_SYNC)`: closes the socket now. Never from a callback of `wsi` itself.
    package static func killNow(_ wsi: OpaquePointer) {
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_SYNC)
    }

    /// `lws_http_transaction_completed`: nonzero means close the socket.
    package static func transactionCompleted(_ wsi: OpaquePointer) -> Int32 { lws_http_transaction_completed(wsi) }

    /// Of an `sslInfo` callback's input: whether it reports a handshake's start and its end.
    package static func sslHandshakeEvent(_ input: UnsafeMutableRawPointer) -> (started: Bool, done: Bool) {
        let where_ = input.load(as: lws_ssl_info.self).where
        return (where_ & cs_lws_ssl_cb_handshake_start() != 0, where_ & cs_lws_ssl_cb_handshake_done() != 0)
    }

    // MARK: WebSocket receive (service thread, in a `receive` callback)

    @inlinable package static func isFirstFragment(_ wsi: OpaquePointer) -> Bool { lws_is_first_fragment(wsi) != 0 }
    @inlinable package static func isBinaryFrame(_ wsi: OpaquePointer) -> Bool { lws_frame_is_binary(wsi) != 0 }
    /// The message is complete: final fragment and no payload left of it.
    @inlinable package static func isMessageEnd(_ wsi: OpaquePointer) -> Bool {
        lws_is_final_fragment(wsi) != 0 && lws_remaining_packet_payload(wsi) == 0
    }

    // MARK: request head (service thread, while the header table is bound)

    /// The header's total length, 0 when absent.
    package static func headerLength(_ wsi: OpaquePointer, _ header: LWSHeader) -> Int { Int(lws_hdr_total_length(wsi, header.token)) }

    /// Repeated fields of `header`: two Content-Length headers give 2.
    package static func fragmentCount(_ wsi: OpaquePointer, _ header: LWSHeader) -> Int { Int(cs_lws_fragment_count(wsi, header.token)) }

    /// The request target's size, the longest other header and the sum of the others.
    package static func headerSizes(_ wsi: OpaquePointer) -> (uri: Int, longest: Int, total: Int) {
        let sizes = cs_lws_header_sizes(wsi)
        return (Int(sizes.uri), Int(sizes.longest), Int(sizes.total))
    }

    /// The header's value, or nil when absent or unreadable.
    package static func header(_ wsi: OpaquePointer, _ header: LWSHeader) -> String? {
        let token = header.token
        let length = Int(lws_hdr_total_length(wsi, token))
        guard length > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: length + 1)
        let copied = buffer.withUnsafeMutableBufferPointer { lws_hdr_copy(wsi, $0.baseAddress, Int32($0.count), token) }
        guard copied >= 0 else { return nil }
        return String(decoding: buffer.prefix(Int(copied)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A header lws has no token for; `name` is lowercase with its colon ("x-api-key:").
    package static func customHeader(_ wsi: OpaquePointer, _ name: String) -> String? {
        let nameBytes = Array(name.utf8CString)
        let length = nameBytes.withUnsafeBufferPointer { lws_hdr_custom_length(wsi, $0.baseAddress, Int32(name.utf8.count)) }
        guard length > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(length) + 1)
        let copied = buffer.withUnsafeMutableBufferPointer { out in
            nameBytes.withUnsafeBufferPointer {
                lws_hdr_custom_copy(wsi, out.baseAddress, Int32(out.count), $0.baseAddress, Int32(name.utf8.count))
            }
        }
        guard copied >= 0 else { return nil }
        return String(decoding: buffer.prefix(Int(copied)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The url-decoded query arguments ("a=1", "b=2") joined by U+001F, or nil when there are
    /// none or they do not fit in `capacity` bytes (`cs_lws_copy_query`).
    package static func query(_ wsi: OpaquePointer, capacity: Int = 8192) -> String? {
        let queryBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: capacity)
        defer { queryBuffer.deallocate() }
        let queryLength = cs_lws_copy_query(wsi, queryBuffer, Int32(capacity))
        guard queryLength > 0 else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: queryBuffer, count: Int(queryLength)), as: UTF8.self)
    }

    /// The peer's address as text, or "".
    package static func peerAddress(_ wsi: OpaquePointer) -> String {
        var peer = [CChar](repeating: 0, count: 64)
        return peer.withUnsafeMutableBufferPointer { buffer -> String in
            guard let address = lws_get_peer_simple(wsi, buffer.baseAddress, buffer.count) else { return "" }
            return String(cString: address)
        }
    }

    // MARK: response head (service thread, in an `httpWriteable` callback)

    /// Writes the status line and headers through lws's header helpers (which add the server's
    /// own fields) with `Content-Length: contentLength`. False when lws refuses. lws knows the
    /// reason phrases of 200, 3xx, 4xx and 5xx only and leaves others empty (`HTTP/1.1 201 `);
    /// `reason` fills an empty one in.
    package static func writeResponseHead(_ wsi: OpaquePointer, status: Int, reason: String = "", headers: [(String, String)],
                                          contentLength: Int) -> Bool {
        var headerBytes = 512
        for (name, value) in headers { headerBytes += name.utf8.count + value.utf8.count + 8 }
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: OutboundMessage.headroom + headerBytes)
        defer { buffer.deallocate() }
        let start = buffer + OutboundMessage.headroom
        var cursor: UnsafeMutablePointer<UInt8>? = start
        let end = start + headerBytes
        if lws_add_http_header_status(wsi, UInt32(status), &cursor, end) != 0 { return false }
        if !reason.isEmpty, let written = cursor { cursor = fillReasonPhrase(reason, from: start, to: written, end: end) }
        for (name, value) in headers {
            let headerName = Array((name.lowercased() + ":").utf8) + [0]
            let headerValue = Array(value.utf8)
            let failed = headerName.withUnsafeBufferPointer { namePointer in
                headerValue.withUnsafeBufferPointer { valuePointer in
                    lws_add_http_header_by_name(wsi, namePointer.baseAddress, valuePointer.baseAddress,
                                                Int32(valuePointer.count), &cursor, end) != 0
                }
            }
            if failed { return false }
        }
        if lws_add_http_header_content_length(wsi, UInt64(contentLength), &cursor, end) != 0 { return false }
        if lws_finalize_http_header(wsi, &cursor, end) != 0 { return false }
        guard let cursor else { return false }
        return lws_write(wsi, start, cursor - start, LWS_WRITE_HTTP_HEADERS) >= 0
    }

    /// Inserts `reason` into an HTTP/1 status line lws wrote at `start` with an empty reason phrase
    /// (whatever lws wrote after it moves along); returns the new end of the head. An HTTP/2
    /// head (a `:status` pseudo-header, no phrase), a phrase lws did write, or no room: unchanged.
    static func fillReasonPhrase(_ reason: String, from start: UnsafeMutablePointer<UInt8>, to written: UnsafeMutablePointer<UInt8>,
                                 end: UnsafeMutablePointer<UInt8>) -> UnsafeMutablePointer<UInt8> {
        let head = UnsafeBufferPointer(start: start, count: written - start)
        guard head.starts(with: "HTTP/1.".utf8),
              let lineEnd = head.indices.first(where: { head[$0] == UInt8(ascii: "\r") }),
              lineEnd > 0, head[lineEnd - 1] == UInt8(ascii: " ")
        else { return written }
        let phrase = Array(reason.utf8)
        guard written + phrase.count <= end else { return written }
        let gap = start + lineEnd
        memmove(gap + phrase.count, gap, written - gap)
        gap.update(from: phrase, count: phrase.count)
        return written + phrase.count
    }
}
