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
    /// release on every relayed frame).
    @exclusivity(unchecked) public var delegate: (any WebSocketServerDelegate)?
    let logger: Logger

    // An NSLock (pthread mutex) rather than `Mutex`: ThreadSanitizer does not see the futex
    // `Synchronization.Mutex` uses on Linux and reported every post/drain pair as a race, which
    // kept `make test-tsan` from being clean.
    let inboxLock = NSLock()
    nonisolated(unsafe) var inbox: [@Sendable () -> Void] = []
    let lifecycleLock = NSLock()
    var lifecycleState = Lifecycle()
    let state = ServiceState()
    /// Runs `flushDeferred` after the callbacks of a wake-up (see `requestWritable`).
    lazy var flushCall = LWSDeferredCall { [unowned self] in flushDeferred() }
    let loopProgress = Atomic<Int64>(0)
    /// A keep-alive tick is posted and has not run yet (`startKeepAliveTicker`).
    let keepAliveTickQueued = Atomic<Bool>(false)
    let loopCallbacks = Atomic<Int64>(0)
    let serviceClock = Atomic<Int32>(-1)

    struct Lifecycle {
        var context: OpaquePointer?
        var port = 0
        var running = false
        var thread: Thread?
    }

    /// What the lws context points into (CallingWebSocket's binding); lives as long as the server.
    let contextResources = LWSServerContextResources()

    /// Accepted sockets of every kind (HTTP, WebSocket, not yet known) this process allows at
    /// once: the open-file limit minus `reservedFileDescriptors`, at most `maxSockets`. Beyond it
    /// new connections are closed at accept, so lws never runs into EMFILE.
    public internal(set) var socketBudget = 0

    /// The soft open-file limit set at start, which lws's descriptor table is sized to.
    var openFileLimit = 1_024

    /// Peers (and ordinary requests) this process takes: the socket budget minus
    /// `healthReservedSockets`, which only `/healthz` may use.
    public internal(set) var capacity = 0

    public init(settings: TransportSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
    }

    func withLifecycle<T>(_ body: (inout Lifecycle) -> T) -> T {
        lifecycleLock.lock()
        defer { lifecycleLock.unlock() }
        return body(&lifecycleState)
    }

    /// The bound port (useful with port 0).
    public var port: Int { withLifecycle { $0.port } }

    // MARK: service-thread API

    /// Counters for /metrics. Service thread only.
    public var counters: TransportCounters { state.counters }

    /// Open WebSocket connections. Service thread only.
    public var connectionCount: Int { state.connections.count }

    // MARK: callback (service thread)

    /// One lws callback, handed to the concern it belongs to: the service loop
    /// (WebSocketServer+ServiceLoop.swift), the socket budget (+SocketBudget), HTTP exchanges
    /// (+HTTP), WebSocket connections (+Connections) and their writer (+Writer). `delegate`: the
    /// run's (`ServiceRun`), borrowed for the call.
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
            rawAdopted(wsi)
            return 0
        case .rawRx: return rawReceived(wsi, input: input, length: length)
        case .httpConfirmUpgrade: return confirmUpgrade(wsi, input: input)
        case .http: return beginHTTP(wsi, input: input, length: length)
        case .httpBody: return receiveBody(wsi, input: input, length: length)
        case .httpBodyCompletion:
            bodyCompleted(wsi)
            return 0
        case .httpWriteable: return httpWriteable(wsi)
        case .closedHTTP:
            httpClosed(wsi)
            return 0

        // WebSocket connections and their writer.
        case .established: return opened(wsi, user: user, delegate: delegate)
        case .receive:
            received(wsi, user: user, input: input, length: length, delegate: delegate)
            return 0
        case .receivePong:
            pongReceived(user)
            return 0
        case .peerInitiatedClose: return peerClosing(wsi, user: user, input: input, length: length)
        case .serverWriteable: return writeable(wsi, user: user)
        case .closed:
            connectionClosed(wsi, user: user, delegate: delegate)
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

/// Service-thread-only state. Not Sendable on purpose: nothing else may hold it.
///
/// `@exclusivity(unchecked)` on the properties touched once or more per delivered frame: each
/// access to a class's stored property is otherwise checked at run time for overlapping access
/// (`swift_beginAccess`/`swift_endAccess`, a thread-local lookup each), several per fan-out
/// delivery. They are only touched on the service thread, and no access to
/// them is held across a call that could reach them again (delegate calls happen after the
/// lookup returns), so there is nothing for the check to find.
final class ServiceState {
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
    /// order) when it was established (`socketUpgraded`), since an open WebSocket needs none of the HTTP bookkeeping.
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
