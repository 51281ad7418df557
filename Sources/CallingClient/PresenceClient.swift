import CallingEndpoints
import CallingProtocol
import Dispatch
import Foundation

/// Settings of a `PresenceClient`.
public struct PresenceOptions: Sendable {
    /// The queues an agent takes requests from, sent as `?queues=` on every connect (replacing the
    /// agent's queues); nil leaves them as they are.
    public var queues: [String]?
    /// How long `connect()` (and each reconnect attempt) waits for the `connected` snapshot.
    public var connectTimeout: TimeInterval = 10
    /// Waits before reconnect attempt 1, 2, 3…; the last entry repeats.
    public var reconnectDelays: [TimeInterval] = [1, 2, 4]
    /// Reconnect attempts after a drop before the state becomes `failed`; 0 disables reconnecting.
    public var maxReconnectAttempts = 5
    /// Asked for a fresh token before each reconnect attempt; with it, a 4401 `token expired`
    /// close reconnects instead of failing.
    public var tokenProvider: (@Sendable () async throws -> String)?
    /// How `wss://` verifies the server (see `SignalingOptions.tlsCAFile`).
    public var tlsCAFile: String?
    /// DEVELOPMENT ONLY: accept any server certificate (see `SignalingOptions.insecureSkipTLSVerification`).
    public var insecureSkipTLSVerification = false
    /// Most events `events` holds for a consumer that lags; nothing is buffered before the app
    /// first reads `events`.
    public var eventBufferLimit = 1024
    /// Receives every event on `callbackQueue`, in order. Held strongly; nil: stream only.
    public var onEvent: (@Sendable (PresenceEvent) -> Void)?
    /// Where `onEvent` runs; default a private serial queue.
    public var callbackQueue: DispatchQueue?
    /// The transport to connect through; nil uses `SignalingClient.defaultTransport` (tests pass their own).
    var transport: (any ClientTransport)?

    public init() {}
}

/// A client of the presence channel (`/v1/presence`): agents publish a status and answer call
/// requests, callers request calls, dashboards watch. See docs/protocol.md "Presence channel".
///
/// A session that got its snapshot reconnects on its own after a drop (with `reconnectDelays`),
/// like `SignalingClient`; an agent that is back within the server's `presence_grace_seconds`
/// keeps its status. Terminal closes (4400 replaced, 4401 without a `tokenProvider`) end in
/// `failed`.
///
/// Threading: a pure `PresenceSession` run under one lock, as in `SignalingClient`.
public final class PresenceClient: Sendable {
    public let url: URL
    /// The settings given to `init`.
    public let options: PresenceOptions

    private let core: SessionClientCore<PresenceSession>
    private var driver: SessionDriver<PresenceSession, PresenceAction, PresenceTimer, PresenceOutcome> { core.driver }
    private let endpoint: Result<ClientEndpoint, CallingError>

    /// `url` is `ws://host:port` or `wss://host[:port]` (a path other than `/` replaces
    /// `/v1/presence`; other schemes make `connect()` throw `unsupportedURL`); `token` needs
    /// `scope` `presence` and `role` `agent`, `caller` or `dashboard`.
    public init(url: URL, token: String, options: PresenceOptions = PresenceOptions()) {
        CallingLog.install()
        self.url = url
        self.options = options
        let transport = options.transport ?? SignalingClient.defaultTransport
        endpoint = Result { () throws(CallingError) in try REST.endpoint(for: url) }
        let socket = SessionSocket(transport: transport, endpoint: endpoint,
                                   tls: TLSClientOptions(caFile: options.tlsCAFile,
                                                         insecureSkipVerification: options.insecureSkipTLSVerification))
        let callbackQueue = options.callbackQueue ?? DispatchQueue(label: "calling-presence.callbacks")
        var settings = PresenceSession.Settings()
        var path = url.path.isEmpty || url.path == "/" ? "/v1/presence" : url.path
        if let queues = options.queues { path += "?queues=" + queryEncoded(queues.joined(separator: ",")) }
        settings.path = path
        if case .success(let endpoint) = endpoint {
            settings.host = endpoint.host
            settings.port = endpoint.port
        }
        settings.connectTimeout = options.connectTimeout
        settings.reconnectDelays = options.reconnectDelays
        settings.maxReconnectAttempts = options.maxReconnectAttempts
        settings.hasTokenProvider = options.tokenProvider != nil
        core = SessionClientCore(PresenceSession(token: token, settings: settings), socket: socket,
                                 eventBufferLimit: options.eventBufferLimit, tokenProvider: options.tokenProvider)
        let onEvent = options.onEvent
        core.start(callback: { event in if let onEvent { callbackQueue.async { onEvent(event) } } },
                   perform: { _ in })  // every presence action is a common one
    }

    deinit {
        core.shutdown()
    }

    /// Every event, in order, for one consumer; created on first use (read it before `connect()`).
    public var events: AsyncStream<PresenceEvent> { core.events }

    /// `idle`, `connecting`, `connected`, `reconnecting(attempt:)`, `ended` or `failed`.
    public var state: CallState { driver.read(\.state) }
    /// True while the socket is up and the snapshot has arrived.
    public var isConnected: Bool { driver.read(\.isConnected) }
    /// The latest `connected` snapshot.
    public var snapshot: PresenceSnapshot? { driver.read(\.snapshot) }

    /// Connects and returns the `connected` snapshot. `token`, when given, replaces the token
    /// (after 4401). Throws `CallingError` on a refused upgrade or timeout; never retried on its own.
    @discardableResult
    public func connect(token newToken: String? = nil) async throws -> PresenceSnapshot {
        try CallingError.checkTLSFiles(TLSClientOptions(caFile: options.tlsCAFile), for: endpoint.get())
        guard case .snapshot(let snapshot) = try await driver.wait({ $0.handle(.connect(token: newToken, waiter: $1)) }) else {
            throw CallingError(.invalidState("connect() resumed without a snapshot"))
        }
        return snapshot
    }

    /// Agent: sets the status, and optionally the note (nil leaves it; "" is sent as is) and queues.
    /// The client remembers the agent's status (this call, then the server's `status` frames about
    /// the agent) until `disconnect()`, and sets it again after a reconnect whose snapshot shows
    /// something else (a restarted server brings every agent back `available`).
    public func setStatus(_ status: PresenceStatus, note: String? = nil, queues: [String]? = nil) throws {
        try driver.run { session throws(CallingError) in ((), try session.setStatus(status, note: note, queues: queues)) }
    }

    /// Caller: asks `agentID` for a call. The ack arrives as `request`, the outcome as
    /// `accepted` or `ended`.
    public func request(agentID: PeerID, metadata: JSONValue? = nil) throws {
        var payload: [String: JSONValue] = ["agent_id": .string(agentID.rawValue)]
        if let metadata { payload["metadata"] = metadata }
        try send("request", .object(payload))
    }

    /// Caller: asks the longest-available agent of `queue` for a call.
    public func request(queue name: String, metadata: JSONValue? = nil) throws {
        var payload: [String: JSONValue] = ["queue": .string(name)]
        if let metadata { payload["metadata"] = metadata }
        try send("request", .object(payload))
    }

    /// Agent: accepts a ringing request; both sides then get `accepted` with their room token.
    public func accept(_ requestID: String) throws { try send("accept", ["request_id": .string(requestID)]) }
    /// Agent: declines a ringing request.
    public func decline(_ requestID: String) throws { try send("decline", ["request_id": .string(requestID)]) }
    /// Caller: withdraws its request.
    public func cancel(_ requestID: String) throws { try send("cancel", ["request_id": .string(requestID)]) }
    /// Keep-alive; the server answers `pong`.
    public func ping() throws { try send("ping", nil) }

    /// Closes the socket (1000) and ends the session (`ended`); returns once it is closed.
    public func disconnect() async {
        _ = try? await driver.wait { $0.handle(.disconnect(waiter: $1)) }
    }

    // MARK: driver

    private func send(_ type: String, _ payload: JSONValue?) throws(CallingError) {
        try driver.run { session throws(CallingError) in ((), try session.send(type, payload)) }
    }
}

extension PresenceSession: ClientSession {
    typealias Event = PresenceEvent

    static func timerFired(_ timer: PresenceTimer) -> PresenceInput { .timerFired(timer) }

    static func tokenRefreshed(attempt: Int, _ result: Result<String, CallingError>) -> PresenceInput {
        .tokenRefreshed(attempt: attempt, result)
    }

    static func socketInput(_ event: TransportEvent, socket: UInt64) -> PresenceInput? {
        switch event {
        case .open: nil
        case .text(let text): .socketText(socket, text)
        case .closed(let code, let reason): .socketClosed(socket, code: code, reason: reason)
        case .failed(let status, let code, let message): .socketFailed(socket, status: status, code: code, message: message)
        }
    }

    static func common(_ action: PresenceAction) -> CommonSessionAction<PresenceTimer, PresenceOutcome, PresenceEvent>? {
        switch action {
        case .openSocket(let id, let path, let token): .openSocket(id: id, path: path, token: token)
        case .closeSocket(let code, let reason): .closeSocket(code: code, reason: reason)
        case .abortSocket: .abortSocket
        case .send(let frame): .send(frame)
        case .arm(let timer, let delay): .arm(timer, after: delay)
        case .cancel(let timer): .cancel(timer)
        case .resume(let waiter, let result): .resume(waiter, result)
        case .emit(let event): .emit(event)
        case .refreshToken(let attempt): .refreshToken(attempt: attempt)
        }
    }
}
