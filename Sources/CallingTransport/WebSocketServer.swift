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
///
/// Cut by concern (docs/architecture.md, "The transport"), each a type with its own state that
/// the server owns: the inbox other threads post to (`ServiceInbox`), the socket budget's
/// decisions (`SocketBudget`), HTTP exchanges (`HTTPExchanges`), WebSocket connections
/// (`WebSocketConnections`) and their writer (`ConnectionWriter`). The lws callback switch
/// (`handle`) hands each event to one of them; the server itself keeps the loop's lifecycle
/// (WebSocketServer+ServiceLoop.swift) and the budget's driver (+SocketBudget).
public final class WebSocketServer: @unchecked Sendable {
    // @unchecked: `inbox` is the part other threads touch (locked inside); every other concern,
    // and the variables below, are only ever touched on the service thread (or set before it starts).
    public let settings: TransportSettings
    /// Set before `start`: the loop calls the delegate it had when it started (`ServiceRun`).
    /// Read on the service thread, so unchecked for exclusivity (see `WebSocketConnections`).
    /// Held strongly, and let go when the service loop ends (`stop`), so a delegate may hold the
    /// server: the cycle lasts as long as the loop.
    /// Not weak: every retain and release of an object that was ever weakly referenced goes through
    /// its side table, and the delegate is called for every inbound frame (a weak load and a slow
    /// release on every relayed frame).
    @exclusivity(unchecked) public var delegate: (any WebSocketServerDelegate)?
    let logger: Logger

    /// The service loop's inbox and lifecycle: the part of the server other threads touch.
    let inbox = ServiceInbox()
    /// The socket budget's bookkeeping and decisions.
    let budget = SocketBudget<OpaquePointer>()
    /// What is queued for each connection, and its writes.
    let writer: ConnectionWriter
    /// Open WebSockets, their inbound messages, the keep-alive, their end.
    let connections: WebSocketConnections
    /// HTTP requests and their answers, the upgrade's checks.
    let http: HTTPExchanges

    /// What the service thread took from the inbox last, kept for its storage (`drainInbox`).
    @exclusivity(unchecked) var drained: [@Sendable () -> Void] = []
    /// A keep-alive tick is posted and has not run yet (`startKeepAliveTicker`).
    let keepAliveTickQueued = Atomic<Bool>(false)
    let loopCallbacks = Atomic<Int64>(0)
    let serviceClock = Atomic<Int32>(-1)
    /// The served certificate's `notAfter` and its reloads, for `counters`. Service thread.
    var certificateNotAfter: Int64?
    var certificateReloads = 0

    /// What the lws context points into (CallingWebSocket's binding); lives as long as the server.
    let contextResources = LWSServerContextResources()

    /// Accepted sockets of every kind (HTTP, WebSocket, not yet known) this process allows at
    /// once: the open-file limit minus `reservedFileDescriptors`, at most `maxSockets`. Beyond it
    /// new connections are closed at accept, so lws never runs into EMFILE.
    public var socketBudget: Int { budget.limit }

    /// The soft open-file limit set at start, which lws's descriptor table is sized to.
    var openFileLimit = 1_024

    /// Peers (and ordinary requests) this process takes: the socket budget minus
    /// `healthReservedSockets`, which only `/healthz` may use.
    public var capacity: Int { budget.capacity }

    public init(settings: TransportSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        writer = ConnectionWriter(settings: settings, logger: logger)
        connections = WebSocketConnections(settings: settings, writer: writer, budget: budget)
        http = HTTPExchanges(settings: settings, logger: logger, budget: budget, connections: connections)
    }

    /// The bound port (useful with port 0).
    public var port: Int { inbox.withLifecycle { $0.port } }

    // MARK: service-thread API

    /// Counters for /metrics. Service thread only.
    public var counters: TransportCounters {
        var counters = TransportCounters()
        counters.accepted = connections.accepted
        counters.oversizeMessages = connections.oversizeMessages
        counters.closedSlowConsumer = writer.closedSlowConsumer
        counters.framesOut = writer.framesOut
        counters.bytesOut = writer.bytesOut
        counters.writesFlushed = writer.writesFlushed
        counters.writesOnWriteable = writer.writesOnWriteable
        counters.socketsRefused = budget.refusedCount
        counters.socketsEvicted = budget.evictedCount
        counters.tlsHandshakeFailures = budget.tlsHandshakeFailures
        counters.rejectedAtCapacity = http.rejectedAtCapacity
        counters.requestsRejected = http.requestsRejected
        counters.requestsTimedOut = http.requestsTimedOut
        counters.tlsCertificateNotAfter = certificateNotAfter
        counters.tlsCertificateReloads = certificateReloads
        return counters
    }

    /// Open WebSocket connections. Service thread only.
    public var connectionCount: Int { connections.table.count }

    /// Queues `message` for `connection`. A connection whose queue passes `maxQueueBytes` is closed
    /// as a slow consumer from its own WRITEABLE callback (docs/architecture.md, "The lws #2889 guards").
    public func send(_ message: OutboundMessage, to connection: ConnectionID) {
        guard let conn = connections.table[connection.rawValue] else { return }
        writer.send(message, to: conn, connection)
    }

    /// Queues one frame of `count` bytes for `connection` alone (an addressed relay), which `write`
    /// puts in place: framed straight into the connection's pending bytes, so no message is
    /// allocated, queued and copied per frame (`ConnectionWriter.send(count:to:_:writing:)`).
    public func send(count: Int, to connection: ConnectionID, writing write: (UnsafeMutablePointer<UInt8>) -> Void) {
        // Borrowed from the table, not copied out of it (a retain and a release per relayed
        // frame): nothing below removes a connection from the table.
        guard let entry = connections.table.unretained(for: connection.rawValue) else { return }
        entry._withUnsafeGuaranteedRef { conn in
            writer.send(count: count, to: conn, connection, writing: write)
        }
    }

    /// Closes after the frames already queued have been written.
    public func close(_ connection: ConnectionID, code: CloseCode) {
        guard let conn = connections.table[connection.rawValue] else { return }
        writer.close(conn, code: code)
    }

    /// Closes the sockets whose client is late with its request head, or idle on a keep-alive
    /// socket for longer than `httpKeepAliveTimeoutSeconds`. Service thread only; called on every
    /// tick. lws arms timers for both, but under its libev loop (lws 4.1.6) a timer armed while
    /// its loop timer waits for a later one fires only with that later one, seconds or minutes late.
    public func expireHTTPDeadlines() { http.expireDeadlines() }

    func respond(exchangeID: UInt64, _ response: HTTPResponse) { http.respond(exchangeID: exchangeID, response) }

    // MARK: callback (service thread)

    /// One lws callback, handed to the concern it belongs to: the service loop and its inbox
    /// (WebSocketServer+ServiceLoop.swift), the socket budget (`SocketBudget`, driven from
    /// +SocketBudget), HTTP exchanges (`HTTPExchanges`), WebSocket connections
    /// (`WebSocketConnections`) and their writer (`ConnectionWriter`). `delegate`: the run's
    /// (`ServiceRun`), borrowed for the call.
    func handle(_ wsi: OpaquePointer, _ reason: LWSServerEvent, _ user: UnsafeMutableRawPointer?,
                _ input: UnsafeMutableRawPointer?, _ length: Int, delegate: (any WebSocketServerDelegate)?) -> Int32
    {
        // A pattern, not `!=`: the enum's `==` is another module's synthesized conformance, called
        // through the Equatable witness on every callback. A load and a store,
        // not `add`: this thread is the counter's only writer, so a locked read-modify-write on
        // every callback (one per inbound frame) would buy nothing.
        if case .eventWaitCancelled = reason {} else {
            loopCallbacks.store(loopCallbacks.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        }
        switch reason {
        case .eventWaitCancelled:
            drainInbox()
            return 0

        // The socket budget, and TLS handshakes counted per socket.
        case .filterNetworkConnection: return admit()
        case .serverNewClientInstantiated: return adopted(wsi)
        case .wsiDestroy:
            socketDestroyed(wsi, user: user)
            return 0
        case .sslInfo:
            tlsHandshakeProgressed(wsi, input: input)
            return 0

        // HTTP exchanges, the WebSocket upgrade's included.
        case .rawAdopt:
            http.rawAdopted(wsi)
            return 0
        case .rawRx: return http.rawReceived(wsi, input: input, length: length)
        case .httpConfirmUpgrade: return http.confirmUpgrade(wsi, input: input, server: self)
        case .http: return http.beginHTTP(wsi, input: input, length: length, server: self)
        case .httpBody: return http.receiveBody(wsi, input: input, length: length)
        case .httpBodyCompletion:
            http.bodyCompleted(wsi, server: self)
            return 0
        case .httpWriteable: return http.httpWriteable(wsi)
        case .closedHTTP:
            http.httpClosed(wsi)
            return 0

        // WebSocket connections and their writer.
        case .established: return connections.opened(wsi, user: user, server: self, delegate: delegate)
        case .receive:
            connections.received(wsi, user: user, input: input, length: length, server: self, delegate: delegate)
            return 0
        case .receivePong:
            connections.pongReceived(user)
            return 0
        case .peerInitiatedClose: return connections.peerClosing(wsi, user: user, input: input, length: length)
        case .serverWriteable: return writer.writeable(wsi, user: user)
        case .closed:
            connections.connectionClosed(wsi, user: user, server: self, delegate: delegate)
            return 0

        default:
            return 0
        }
    }
}

/// What lws calls back while the loop runs: the server and the delegate it had when the loop
/// started, both constants of an object the callback borrows (`createContext`), so that reaching
/// them retains neither. Read from the server's `delegate` variable instead, the delegate was
/// retained and released around every call, one pair of atomic operations per inbound frame.
/// The binding holds the run until the context's final destroy stage.
final class ServiceRun: LWSServerHandler {
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
