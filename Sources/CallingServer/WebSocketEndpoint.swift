import CallingAuth
import CallingCore
import CallingTransport

/// A WebSocket protocol served at its own path: the room protocol (`/v1/ws`, `RoomEndpoint`) and
/// the presence channel (`/v1/presence`, `PresenceEndpoint`), each a WebSocket row of the route
/// table. The token is verified and held to the row's scope before `shouldUpgrade`; every method runs on the service thread, in order, so implementations keep
/// their state without locks.
protocol WebSocketEndpoint: AnyObject {
    /// Decide on an upgrade whose token already verified and carries the row's scope. Return
    /// `.accept(context:)` with what `didOpen` needs, or `.reject` with an HTTP problem.
    /// The endpoint counts its own outcome in `calling_upgrades_total`.
    func shouldUpgrade(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision
    func didOpen(_ connection: ConnectionID, context: any Sendable)
    func didReceive(_ message: InboundMessage, on connection: ConnectionID)
    /// A whole text message lent for the call (`WebSocketServerDelegate`'s
    /// `server(_:didReceiveText:on:)`); by default handed on to `didReceive` as `.text`, copied.
    func didReceiveText(_ bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID)
    func didClose(_ connection: ConnectionID)
    /// The same, saying how the socket ended; the default calls `didClose(_:)`.
    func didClose(_ connection: ConnectionID, ending: SocketEnding)
    /// Every `tick_ms`, for timers (grace periods, request TTLs, token expiry).
    func tick(now: Millis)
}

extension WebSocketEndpoint {
    func didClose(_ connection: ConnectionID, ending: SocketEnding) { didClose(connection) }

    func didReceiveText(_ bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID) {
        didReceive(.text(Array(bytes)), on: connection)
    }
}

/// Carries an endpoint's accept context through the transport, tagged with its path.
struct EndpointTicket: Sendable {
    var path: String
    var context: any Sendable
}

/// The front door shared by every WebSocket endpoint: the per-connection rate limit, the
/// transport-level refusals (binary, too large) and `error` frames. Service thread.
///
/// A class, though it holds only constants: as a struct held by each endpoint, `admit` was called
/// on a copy of it, and it carries the whole `ServerConfig` (copied whole per inbound
/// frame).
final class FrameGate {
    let config: ServerConfig
    let metrics: Metrics
    let router: any FrameDelivery
    /// The limiter's clock: any monotonic milliseconds (`ServiceContext.floodClock` in the server).
    let now: @Sendable () -> Millis

    init(config: ServerConfig, metrics: Metrics, router: any FrameDelivery, now: @escaping @Sendable () -> Millis) {
        self.config = config
        self.metrics = metrics
        self.router = router
        self.now = now
    }

    /// Returns the text to decode, or nil when the message was answered (or dropped) here.
    func admit(_ message: InboundMessage, on connection: ConnectionID, limiter: inout RateLimiter) -> [UInt8]? {
        guard admits(message, on: connection, limiter: &limiter), case .text(let bytes) = message else { return nil }
        return bytes
    }

    /// Whether `message` is text to decode; false when it was answered (or dropped) here. The
    /// caller reads the text from the message it holds: returning the array would retain it.
    func admits(_ message: InboundMessage, on connection: ConnectionID, limiter: inout RateLimiter) -> Bool {
        guard admitsFrame(on: connection, limiter: &limiter) else { return false }
        switch message {
        case .text:
            return true
        case .binary:
            sendError(FrameError(.binaryUnsupported, "binary frames are not part of this protocol; send JSON text"), to: connection)
        case .tooLarge(let count):
            sendError(FrameError(.frameTooLarge, "frame of \(count) bytes exceeds max_frame_bytes \(config.maxFrameBytes)"),
                      to: connection)
        }
        return false
    }

    /// Whether the rate limit lets one more frame from `connection` through (a whole text message
    /// lent by the transport, or the start of `admits`); false when it was answered (or dropped).
    func admitsFrame(on connection: ConnectionID, limiter: inout RateLimiter) -> Bool {
        guard limiter.admit(now: now()) else {
            let drops = limiter.consecutiveDrops
            if drops == config.floodCloseAfter {
                // Counted once: frames still arriving before the close completes are dropped silently.
                metrics.closes[CloseCode.flood.reason, default: 0] += 1
                router.close(connection, code: .flood)
            } else if drops < config.floodCloseAfter && (drops == 1 || drops % 50 == 0) {
                // One error per burst, not one per dropped frame: answering every frame would let a
                // flooding client double its own traffic.
                sendError(FrameError(.rateLimited, "more than \(Int(config.maxFramesPerSecond)) frames per second; frames are being dropped"),
                          to: connection)
            }
            return false
        }
        return true
    }

    /// Answers a refused frame with an `error` frame and counts it.
    func sendError(_ error: FrameError, to connection: ConnectionID) {
        metrics.errors[error.code.name, default: 0] += 1
        router.deliver(error.frame, to: [connection])
    }
}

/// The transport's delegate: checks Origin and the token of every upgrade (the auth of its row in
/// the route table: a peer token with the row's scope), hands it to the endpoint of the table's
/// WebSocket row at its path, routes each connection's frames and close to that endpoint, and
/// plain HTTP to `HTTPRoutes`. Built last by `ServerApp`, from parts that never point back.
final class WebSocketEndpoints: WebSocketServerDelegate {
    private let context: ServiceContext
    /// The WebSocket rows of the route table by path, with the scope each row's token must carry.
    private let endpoints: [String: (endpoint: any WebSocketEndpoint, scope: TokenScope?)]
    private let routes: HTTPRoutes
    /// `allowed_origins`, applied to every WebSocket upgrade.
    private let cors: CORSPolicy
    /// The endpoint at `primaryPath`, which nearly every connection uses (the room protocol): its
    /// connections are not recorded in `byConnection`, which saves an entry per peer and a lookup
    /// per frame. It is also what an unknown connection's frames and close go to, which an endpoint
    /// ignores for a connection it never opened.
    private let primary: any WebSocketEndpoint
    private let primaryPath: String
    /// The connections of every other endpoint.
    /// Read per inbound frame while it is not empty; unchecked for exclusivity for the reason
    /// given at `RoomEndpoint.sessions`.
    @exclusivity(unchecked) private var byConnection: [ConnectionID: any WebSocketEndpoint] = [:]

    /// `routes.table` must have a WebSocket row at `primaryPath`; every WebSocket row's auth is a
    /// peer token (an upgrade carries no API key).
    init(context: ServiceContext, primaryPath: String, routes: HTTPRoutes) {
        var endpoints: [String: (endpoint: any WebSocketEndpoint, scope: TokenScope?)] = [:]
        for route in routes.table.routes {
            guard case .webSocket(let endpoint) = route.handler else { continue }
            guard case .peerToken(let scope, nil) = route.auth else { preconditionFailure("\(route.pattern): a WebSocket row takes a peer token") }
            endpoints[route.pattern.description] = (endpoint, scope)
        }
        self.context = context
        self.endpoints = endpoints
        self.primaryPath = primaryPath
        self.primary = endpoints[primaryPath]!.endpoint
        self.routes = routes
        self.cors = CORSPolicy(allowedOrigins: context.config.allowedOrigins)
        self.metrics = context.metrics
    }

    private let metrics: Metrics

    func server(_ server: WebSocketServer, shouldUpgrade request: HTTPRequest) -> UpgradeDecision {
        // Browsers always send Origin on a WebSocket handshake and never enforce CORS on it, so the
        // server must (RFC 6455 §10.2). Checked before the token: a refused page learns nothing more.
        if case .refused = cors.check(request) {
            metrics.upgrades["refused_origin", default: 0] += 1
            return .reject(CORSPolicy.refusal)
        }
        guard let (endpoint, scope) = endpoints[request.path] else {
            metrics.upgrades["not_found", default: 0] += 1
            return .reject(Problem.noWebSocketEndpoint(request))
        }
        switch HTTPRoutes.checkPeerToken(context.authenticate(request), scope: scope, binding: nil, parameters: [:]) {
        case .failure(let response):
            metrics.upgrades["refused_\(response.status)", default: 0] += 1
            return .reject(response)
        case .success(let claims):
            let decision = endpoint.shouldUpgrade(request, claims: claims)
            if case .accept(let ticket) = decision {
                return .accept(context: EndpointTicket(path: request.path, context: ticket))
            }
            return decision
        }
    }

    func server(_ server: WebSocketServer, didOpen connection: ConnectionID, context ticket: any Sendable) {
        guard let ticket = ticket as? EndpointTicket, let endpoint = endpoints[ticket.path]?.endpoint else {
            server.close(connection, code: .internalError)
            return
        }
        if ticket.path != primaryPath { byConnection[connection] = endpoint }
        endpoint.didOpen(connection, context: ticket.context)
    }

    private func endpoint(of connection: ConnectionID) -> any WebSocketEndpoint {
        if byConnection.isEmpty { return primary }
        return byConnection[connection] ?? primary
    }

    func server(_ server: WebSocketServer, didReceive message: InboundMessage, on connection: ConnectionID) {
        // The primary endpoint is called through the stored constant: the reference that
        // `endpoint(of:)` returns is retained and released around the call, once per inbound frame.
        if !byConnection.isEmpty, let other = byConnection[connection] { return other.didReceive(message, on: connection) }
        primary.didReceive(message, on: connection)
    }

    func server(_ server: WebSocketServer, didReceiveText bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID) {
        if !byConnection.isEmpty, let other = byConnection[connection] { return other.didReceiveText(bytes, on: connection) }
        primary.didReceiveText(bytes, on: connection)
    }

    func server(_ server: WebSocketServer, didClose connection: ConnectionID) {
        (byConnection.removeValue(forKey: connection) ?? primary).didClose(connection)
    }

    func server(_ server: WebSocketServer, didClose connection: ConnectionID, ending: SocketEnding) {
        (byConnection.removeValue(forKey: connection) ?? primary).didClose(connection, ending: ending)
    }

    func server(_ server: WebSocketServer, handle request: HTTPRequest, responder: HTTPResponder) {
        routes.handle(request) { [context] response in
            context.metrics.httpRequests[String(response.status), default: 0] += 1
            responder.respond(response)
        }
    }
}
