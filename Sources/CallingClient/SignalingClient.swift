import CallingEndpoints
import CallingProtocol
#if canImport(CallingWebSocket)
import CallingWebSocket
#endif
import Dispatch
import Foundation

/// Settings of a `SignalingClient`. Every field has the mobile SDKs' default (docs/sdk.md,
/// "Client SDK compatibility").
public struct SignalingOptions: Sendable {
    /// Waits before reconnect attempt 1, 2, 3…; the last entry repeats. Default 1 s, 2 s, 4 s.
    public var reconnectDelays: [TimeInterval] = [1, 2, 4]
    /// Reconnect attempts after a drop before the state becomes `failed`; 0 disables reconnecting.
    public var maxReconnectAttempts: Int = 5
    /// How long `connect()` (and each reconnect attempt) waits for `welcome`.
    public var connectTimeout: TimeInterval = 10
    /// How long `sendChat` waits for its `chat-ack` before resending the same `client_id`.
    public var chatAckTimeout: TimeInterval = 10
    /// Sends of one chat (first + retries after a timeout) before `sendChat` throws `timedOut`.
    /// Resends after a reconnect do not count.
    public var chatMaxAttempts: Int = 3
    /// `setTyping(true)` turns itself off after this long without another `setTyping(true)`.
    public var typingTimeout: TimeInterval = 3
    /// How often the `MediaEngine` is asked for stats (only with an engine).
    public var statsInterval: TimeInterval = 5
    /// A call whose peer connection is not `connected` this long after `call`/`accept` ends with
    /// `callFailed(timedOut)`; 0 disables.
    public var mediaConnectTimeout: TimeInterval = 15
    /// An HTTP session's call (its offer carried `session_id`) whose connection went
    /// `disconnected` ends with `callFailed(disconnected)` unless it is `connected` again within
    /// this long; its HTTP caller restarts ICE, not this client. Room calls use `iceRestartWindow`.
    public var mediaDisconnectGrace: TimeInterval = 5
    /// How long a room call may be without ICE connectivity (from its first `disconnected` or
    /// `failed`), restarting ICE meanwhile, before it ends with `callFailed(disconnected)` and
    /// `hangup` reason `disconnected` (docs/sdk.md "What survives a drop"). The browser SDK's
    /// `iceRestartWindowMs`.
    public var iceRestartWindow: TimeInterval = 15
    /// ICE `disconnected` this long before the first ICE restart (`failed` restarts at once).
    public var iceDisconnectedDebounce: TimeInterval = 2
    /// Wait between ICE restarts while the window is open.
    public var iceRestartRetry: TimeInterval = 5
    /// Frames held per peer while it is reconnecting (`peer-reconnecting`); one more is dropped
    /// with an `error` event.
    public var heldRelayLimit = 100
    /// How long `performRpc` waits for the callee's `rpc-ack` (or the call's timeout if shorter)
    /// before throwing `RpcError.connectionTimeout` (docs/protocol.md "RPC").
    public var rpcAckTimeout: TimeInterval = 7
    /// Largest RPC payload sent or answered, in UTF-8 bytes; keep it at or below the server's
    /// `rpc_max_payload_bytes`.
    public var rpcMaxPayloadBytes = 15_360
    /// Interval of app-level `ping` frames while connected; nil uses `welcome.ping_interval_ms`
    /// (25 s), 0 disables. A `ping` still unanswered at the next tick means the connection is
    /// dead (half-open TCP): it is dropped and the client reconnects.
    public var pingInterval: TimeInterval?
    /// Timeout of REST requests (`fetchMessages`).
    public var httpTimeout: TimeInterval = 10
    /// A PEM file of CA certificates trusted instead of the system trust store for `wss://` and
    /// `https://` (a private PKI). The server's host name is verified either way.
    public var tlsCAFile: String?
    /// DEVELOPMENT ONLY: accept any server certificate for any host name on `wss://` and
    /// `https://`. The traffic is encrypted but not authenticated, so anyone on the path can read
    /// and change it. Every connection made with it logs a warning.
    public var insecureSkipTLSVerification = false
    /// Consulted for a fresh token before each reconnect attempt (not before `connect()`).
    public var tokenProvider: (@Sendable () async throws -> String)?
    /// Media seam; nil for a signaling-only client.
    public var mediaEngine: (any MediaEngine)?
    /// STUN/TURN servers for every call; nil (the default) fetches them from `GET /v1/ice` right
    /// before each call, as the mobile SDKs do (TURN credentials expire: an agent running for days
    /// must not use hour-old ones).
    public var iceServers: [IceServer]?
    /// Used when that fetch fails (the mobile SDKs' fallback: public STUN). Empty: no servers
    /// (a call inside one network still connects).
    public var fallbackIceServers = [IceServer(urls: ["stun:stun.l.google.com:19302"])]
    /// The transport to connect through; nil uses the platform's shared one
    /// (`SignalingClient.defaultTransport`; tests pass their own).
    var transport: (any ClientTransport)?
    /// Where delegate methods are called. Default: a private serial queue (not main: servers and
    /// command-line tools have no main run loop).
    public var callbackQueue: DispatchQueue?
    /// Most events `events` holds for a consumer that lags; beyond it the oldest are dropped.
    /// Nothing is buffered until the app first reads `events`.
    public var eventBufferLimit = 1024

    public init() {}

    /// The two TLS fields as the transport takes them.
    var tls: TLSClientOptions {
        TLSClientOptions(caFile: tlsCAFile, insecureSkipVerification: insecureSkipTLSVerification)
    }
}

/// Receives every event of a `SignalingClient`, in order, on `SignalingOptions.callbackQueue`.
public protocol SignalingClientDelegate: AnyObject, Sendable {
    func signalingClient(_ client: SignalingClient, didReceive event: CallingEvent)
}

/// A client of the room protocol (`/v1/ws`): signaling, chat, typing, read markers, stats, and
/// automatic reconnect with chat resume.
///
/// ## Threading
/// The decisions are made by a pure state machine (`SignalingSession`) that a driver runs under
/// one lock: public methods may be called from any thread or task and only take that lock for a
/// moment (no call waits for another thread). Socket events arrive on the lws service thread,
/// timers on a global queue, `MediaEngine` results from tasks serialised per peer; each is one
/// input to the state machine. Events go to the delegate (on `callbackQueue`) and, once the app
/// has read `events`, to that stream, in order.
public final class SignalingClient: @unchecked Sendable {
    // @unchecked: the mutable I/O state below is touched only under the driver's lock (from
    // `perform`, or inside `driver.withLock`); `let`s are immutable and Sendable.

    /// The URL given to `init`.
    public let url: URL
    /// The settings given to `init`.
    public let options: SignalingOptions

    private let core: SessionClientCore<SignalingSession>
    private var driver: SessionDriver<SignalingSession, SessionAction, SessionTimer, WaiterOutcome> { core.driver }
    private var socket: SessionSocket { core.socket }
    private let callbackQueue: DispatchQueue
    private let transport: any ClientTransport
    /// Where `url` points, or why the SDK cannot serve it (`connect` throws that).
    private let endpoint: Result<ClientEndpoint, CallingError>

    private weak var delegateStorage: (any SignalingClientDelegate)?
    /// The last media operation queued for each peer (see `enqueueMedia`), numbered so that it
    /// removes itself when it finishes last.
    private var mediaTasks: [PeerID: (number: UInt64, task: Task<Void, Never>)] = [:]
    private var mediaTaskCount: UInt64 = 0
    private var mutedStorage = false
    /// The registered RPC handlers by method (the session knows only their names).
    private var rpcHandlers: [String: RpcHandler] = [:]

    /// `url` is `ws://host:port` or `wss://host[:port]` (a path other than `/` replaces `/v1/ws`);
    /// `token` is a peer JWT. `wss://` (and `https://`) verify the server's certificate as
    /// `options.tlsCAFile` and `options.insecureSkipTLSVerification` say; any other scheme makes
    /// `connect()` throw `unsupportedURL` rather than fall back to plaintext.
    public init(url: URL, token: String, options: SignalingOptions = SignalingOptions()) {
        CallingLog.install()
        self.url = url
        self.options = options
        endpoint = Result { () throws(CallingError) in try REST.endpoint(for: url) }
        transport = options.transport ?? SignalingClient.defaultTransport
        callbackQueue = options.callbackQueue ?? DispatchQueue(label: "calling-client.callbacks")
        let socket = SessionSocket(transport: transport, endpoint: endpoint, tls: options.tls)
        var settings = SignalingSession.Settings()
        settings.path = (url.path.isEmpty || url.path == "/") ? "/v1/ws" : url.path
        if case .success(let endpoint) = endpoint {
            settings.host = endpoint.host
            settings.port = endpoint.port
        }
        settings.reconnectDelays = options.reconnectDelays
        settings.maxReconnectAttempts = options.maxReconnectAttempts
        settings.connectTimeout = options.connectTimeout
        settings.chatAckTimeout = options.chatAckTimeout
        settings.chatMaxAttempts = options.chatMaxAttempts
        settings.typingTimeout = options.typingTimeout
        settings.statsInterval = options.statsInterval
        settings.mediaConnectTimeout = options.mediaConnectTimeout
        settings.mediaDisconnectGrace = options.mediaDisconnectGrace
        settings.iceRestartWindow = options.iceRestartWindow
        settings.iceDisconnectedDebounce = options.iceDisconnectedDebounce
        settings.iceRestartRetry = options.iceRestartRetry
        settings.heldRelayLimit = options.heldRelayLimit
        settings.rpcAckTimeout = options.rpcAckTimeout
        settings.rpcMaxPayloadBytes = options.rpcMaxPayloadBytes
        settings.pingInterval = options.pingInterval
        settings.hasMediaEngine = options.mediaEngine != nil
        settings.hasTokenProvider = options.tokenProvider != nil
        core = SessionClientCore(SignalingSession(token: token, settings: settings), socket: socket,
                                 eventBufferLimit: options.eventBufferLimit, tokenProvider: options.tokenProvider)
        core.start(callback: { [weak self] event in self?.deliver(event) },
                   perform: { [weak self] action in self?.perform(action) })
        options.mediaEngine?.observeTracks { [weak self] peer, track in self?.submit(.remoteTrack(peer, track)) }
    }

    deinit {
        core.shutdown()
    }

    #if canImport(CallingWebSocket)
    /// One lws client loop for every client that is not given its own; lives for the process.
    /// It logs through `CallingLog` (the warning it writes is `insecureSkipTLSVerification`'s).
    static let sharedLoop: WebSocketClientLoop = {
        CallingLog.install()
        return WebSocketClientLoop(logger: CallingLog.logger)
    }()

    /// The transport of every client not given its own: on Linux the shared lws loop.
    static var defaultTransport: any ClientTransport { sharedLoop }
    #else
    /// The transport of every client not given its own: without libwebsockets (Apple
    /// platforms), URLSession.
    static var defaultTransport: any ClientTransport { URLSessionWebSocketTransport.shared }
    #endif

    // MARK: public state

    /// Every event, in order, for one consumer. Created on first use: read it before `connect()`
    /// to see every event. Holds at most `options.eventBufferLimit` undelivered events.
    public var events: AsyncStream<CallingEvent> { core.events }

    /// Called on `callbackQueue` for every event. Held weakly.
    public var delegate: (any SignalingClientDelegate)? {
        get { driver.withLock { delegateStorage } }
        set { driver.withLock { delegateStorage = newValue } }
    }

    /// Where the session is: `idle → connecting → connected ⇄ reconnecting → ended | failed`.
    public var state: CallState { driver.read(\.state) }
    /// Our peer id (`welcome.peer_id`); nil before the first `welcome`.
    public var peerID: PeerID? { driver.read(\.peerID) }
    /// The room (`welcome.room_id`), or before `connect()` the token's `room_id` claim.
    public var roomID: RoomID? { driver.read { $0.roomID ?? TokenClaims.roomID(of: $0.token) } }
    /// The call the room belongs to (`welcome.call_id`), nil for rooms without one.
    public var callID: CallID? { driver.read(\.callID) }
    /// The other peers in the room, in join order.
    public var peers: [PeerInfo] { driver.read(\.peers) }
    /// The highest chat seq seen: the room's seq at the first `welcome`, live and replayed chat,
    /// and our own acks. Sent as `last_seq` on reconnect.
    public var lastSeq: Int64 { driver.read(\.lastSeq) }

    // MARK: connecting

    /// Opens the socket and returns once `welcome` has arrived. Throws `CallingError` when the
    /// upgrade is refused (`httpStatus`), an `error` frame precedes `welcome`, the socket closes
    /// first, or `connectTimeout` passes. Allowed from `idle`, `ended` and `failed`; after a
    /// previous session the connection resumes chat from `lastSeq`. `token`, when given, replaces
    /// the token first (connect again after 4401 `token expired`).
    @discardableResult
    public func connect(token newToken: String? = nil) async throws -> Welcome {
        try CallingError.checkTLSFiles(options.tls, for: endpoint.get())
        guard case .welcome(let welcome) = try await driver.wait({ $0.handle(.connect(token: newToken, waiter: $1)) }) else {
            throw CallingError(.invalidState("connect() resumed without a welcome"))
        }
        return welcome
    }

    /// Closes the socket (1000) and ends the session: state `ended`, pending `sendChat`s throw
    /// `notConnected`, peer connections close. Returns once the socket is closed.
    public func disconnect() async {
        _ = try? await driver.wait { $0.handle(.disconnect(waiter: $1)) }
    }

    // MARK: sending

    /// Sends `data` to `to`, or to every other peer when nil. Throws `notConnected`.
    public func sendData(_ payload: JSONValue?, to: PeerID? = nil) throws {
        try command(.sendData(payload, to: to))
    }

    /// Ends the call with `peerID`: closes its peer connection and, when `notify`, sends
    /// `data {kind:"hangup"}` to it.
    public func hangup(_ peerID: PeerID, notify: Bool = true) {
        try? command(.hangup(peerID, notify: notify))
    }

    /// Declines an incoming offer from `peerID` with `data {kind:"reject"}`.
    public func reject(_ peerID: PeerID) throws {
        try command(.reject(peerID))
    }

    /// App-level keep-alive; the server answers `pong`.
    public func ping() throws {
        try command(.ping)
    }

    /// Relays an SDP offer produced outside a `MediaEngine`.
    public func sendOffer(_ sdp: String, to peer: PeerID) throws {
        try command(.relay(.offer, to: peer, payload: SessionDescription(kind: .offer, sdp: sdp).json))
    }

    /// Relays an SDP answer produced outside a `MediaEngine`.
    public func sendAnswer(_ sdp: String, to peer: PeerID) throws {
        try command(.relay(.answer, to: peer, payload: SessionDescription(kind: .answer, sdp: sdp).json))
    }

    /// Relays an ICE candidate produced outside a `MediaEngine`.
    public func sendCandidate(_ candidate: IceCandidate, to peer: PeerID) throws {
        try command(.relay(.candidate, to: peer, payload: candidate.json))
    }

    // MARK: media

    /// Calls `peer`: creates its peer connection in the `MediaEngine` and sends the offer.
    /// `media` chooses what the call sends (audio both ways, receive only, data only).
    public func call(_ peer: PeerID, media: CallMedia = .standard) async throws {
        _ = try await driver.wait { $0.handle(.call(peer, media: media, waiter: $1)) }
    }

    /// Accepts the offer of an `incoming` call: sets it as remote description, flushes queued
    /// candidates and sends the answer.
    public func accept(_ peer: PeerID) async throws {
        _ = try await driver.wait { $0.handle(.accept(peer, waiter: $1)) }
    }

    /// Sends silence instead of the microphone (the engine's input) on every call, present and
    /// later ones; the calls go on.
    public func setMuted(_ muted: Bool) {
        driver.withLock { mutedStorage = muted }
        options.mediaEngine?.setMuted(muted)
    }

    /// True after `setMuted(true)` until `setMuted(false)`.
    public var isMuted: Bool { driver.withLock { mutedStorage } }

    // MARK: RPC

    /// Asks `peer` to run `method` with `payload` and returns its handler's result
    /// (docs/protocol.md "RPC"). Throws `RpcError`: `recipientNotFound`, `requestPayloadTooLarge`,
    /// `connectionTimeout` (no ack within `rpcAckTimeout`), `responseTimeout` (none within
    /// `timeout`), `recipientDisconnected` (the peer left), `sendFailed` (not connected, or
    /// refused), `unsupportedMethod`, or the handler's own error.
    public func performRpc(to peer: PeerID, method: String, payload: String = "", timeout: TimeInterval = 10) async throws -> String {
        guard !method.isEmpty, timeout > 0 else { throw CallingError(.invalidState("performRpc needs a method name and a positive timeout")) }
        let id = UUID().uuidString.lowercased()
        guard case .rpc(let result) = try await driver.wait({
            $0.handle(.performRpc(id: id, to: peer, method: method, payload: payload, timeout: timeout, waiter: $1))
        }) else {
            throw CallingError(.invalidState("performRpc resumed without a response"))
        }
        return try result.get()
    }

    /// Answers `rpc-request`s for `method` with `handler`; registering a method again replaces its
    /// handler. The request is acked at once; the handler's result is the response, a thrown
    /// `RpcError` goes to the caller as it is, anything else as `applicationError`.
    public func registerRpcMethod(_ method: String, handler: @escaping RpcHandler) {
        driver.withLock { rpcHandlers[method] = handler }
        try? command(.registerRpcMethod(method))
    }

    /// Stops answering `method`: later requests for it get `unsupportedMethod`.
    public func unregisterRpcMethod(_ method: String) {
        driver.withLock { rpcHandlers[method] = nil }
        try? command(.unregisterRpcMethod(method))
    }

    /// Runs the handler of an `invokeRpc` in a task; its outcome goes back to the session. Under
    /// the driver's lock.
    private func runRpcHandler(_ method: String, _ invocation: RpcInvocationData) {
        guard let handler = rpcHandlers[method] else {
            submit(.rpcHandled(invocation, .failure(RpcError(code: RpcError.unsupportedMethod, message: "method '\(method)' not supported"))))
            return
        }
        Task { [weak self] in
            let result: Result<String, RpcError>
            do {
                result = .success(try await handler(invocation))
            } catch let error as RpcError {
                result = .failure(error)
            } catch {
                result = .failure(RpcError(code: RpcError.applicationError, message: "\(error)"))
            }
            self?.submit(.rpcHandled(invocation, result))
        }
    }

    // MARK: chat

    /// Sends a chat message and returns its ack (the committed `seq`). Without an ack within
    /// `chatAckTimeout` the same `client_id` is sent again (the server answers a retry with the
    /// original ack and stores nothing twice), up to `chatMaxAttempts` sends; after a reconnect
    /// every pending message is sent again. A `chat-ack` with an error, or an `error` frame
    /// refusing the `chat` frame, throws `CallingError` at once (`serverCode` 440/441/442…); 503
    /// is retried. While reconnecting the message waits.
    public func sendChat(_ text: String, meta: JSONValue? = nil, replyTo: Int64? = nil, clientID: String? = nil) async throws
        -> ChatAck
    {
        try await submit(.message(text: text, meta: meta, replyTo: replyTo), clientID: clientID)
    }

    /// Replaces the text and meta of our message `seq` (`chat-edit`) and returns the edit's own
    /// ack (it has a seq of its own). The same `client_id` retries as `sendChat`; a failed ack
    /// throws (443 no such message, 444 not ours, deleted or past the edit window, 440–442).
    public func editChat(_ seq: Int64, text: String, meta: JSONValue? = nil, clientID: String? = nil) async throws -> ChatAck {
        try await submit(.edit(target: seq, text: text, meta: meta), clientID: clientID)
    }

    /// Deletes message `seq` (`chat-delete`): ours, or anyone's with a moderator token. The server
    /// erases its content; deleting it again is acked and changes nothing.
    public func deleteChat(_ seq: Int64, clientID: String? = nil) async throws -> ChatAck {
        try await submit(.delete(target: seq), clientID: clientID)
    }

    /// Adds our reaction `key` (an emoji or a short word) to message `seq` (`chat-react`); adding
    /// one we have is acked and changes nothing. 445 for a bad key or too many keys on the message.
    public func react(_ seq: Int64, key: String, clientID: String? = nil) async throws -> ChatAck {
        try await submit(.react(target: seq, key: key, remove: false), clientID: clientID)
    }

    /// Removes our reaction `key` from message `seq` (`chat-react` with `remove: true`).
    public func unreact(_ seq: Int64, key: String, clientID: String? = nil) async throws -> ChatAck {
        try await submit(.react(target: seq, key: key, remove: true), clientID: clientID)
    }

    private func submit(_ operation: ChatOutbound, clientID: String?) async throws -> ChatAck {
        let id = clientID ?? UUID().uuidString.lowercased()
        guard case .chatAck(let ack) = try await driver.wait({
            $0.handle(.chatOperation(clientID: id, operation, waiter: $1))
        }) else {
            throw CallingError(.invalidState("\(operation.frameType) resumed without an ack"))
        }
        return ack
    }

    /// Turns the typing indicator on (it turns itself off after `typingTimeout` unless renewed)
    /// or off. Only changes are sent. Ignored while not connected.
    public func setTyping(_ typing: Bool) {
        try? command(.setTyping(typing))
    }

    /// Moves our read marker to `seq` (the server ignores markers that do not move forward).
    public func markRead(_ seq: Int64) throws {
        try command(.markRead(seq))
    }

    /// One page of history over REST (`GET /v1/rooms/{room}/messages`), with this client's token,
    /// oldest first after `sinceSeq`. Each message is as it is now (edited text, tombstone,
    /// reactions); `includeEdits` adds each one's `edits`. The room is `welcome.room_id`, or before
    /// `connect()` the token's `room_id` claim. Does not change `lastSeq` and emits no events.
    public func fetchMessages(sinceSeq: Int64 = 0, limit: Int? = nil, includeEdits: Bool = false) async throws -> MessagesPage {
        try await messages(cursor: URLQueryItem(name: "since_seq", value: String(sinceSeq)), limit: limit,
                           includeEdits: includeEdits, sinceSeq: sinceSeq)
    }

    /// One page of history backward: the messages before `beforeSeq`, newest first; go on with
    /// `page.nextBeforeSeq` while `page.hasMore`. Otherwise as `fetchMessages(sinceSeq:)`.
    public func fetchMessages(beforeSeq: Int64, limit: Int? = nil, includeEdits: Bool = false) async throws -> MessagesPage {
        try await messages(cursor: URLQueryItem(name: "before_seq", value: String(beforeSeq)), limit: limit,
                           includeEdits: includeEdits, sinceSeq: 0)
    }

    private func messages(cursor: URLQueryItem, limit: Int?, includeEdits: Bool, sinceSeq: Int64) async throws -> MessagesPage {
        let (bearer, room) = driver.read { ($0.token, $0.roomID ?? TokenClaims.roomID(of: $0.token)) }
        guard let room else { throw CallingError(.invalidToken("no room_id claim")) }
        let endpoint = try endpoint.get()
        var query = [cursor]
        if let limit { query.append(URLQueryItem(name: "limit", value: String(limit))) }
        if includeEdits { query.append(URLQueryItem(name: "include", value: "edits")) }
        let body = try await REST.get(transport: transport, endpoint: endpoint, tls: options.tls,
                                      path: "/v1/rooms/\(queryEncoded(room.rawValue))/messages", query: query,
                                      token: bearer, timeout: options.httpTimeout)
        return MessagesPage(json: body, room: room, sinceSeq: sinceSeq)
    }

    /// The rooms of the token's peer id, most recent activity first (`GET /v1/me/rooms`): each
    /// with its last seq and message, our read marker and the unread count. Needs a user token
    /// (scope `user`, no room): make a client with it and call this without `connect()`.
    public func inbox(limit: Int? = nil, cursor: String? = nil) async throws -> InboxPage {
        let bearer = driver.read(\.token)
        var query: [URLQueryItem] = []
        if let limit { query.append(URLQueryItem(name: "limit", value: String(limit))) }
        if let cursor { query.append(URLQueryItem(name: "cursor", value: cursor)) }
        let body = try await REST.get(transport: transport, endpoint: try endpoint.get(), tls: options.tls, path: "/v1/me/rooms",
                                      query: query, token: bearer, timeout: options.httpTimeout)
        return InboxPage(json: body)
    }

    /// STUN/TURN servers for the peer connection (`GET /v1/ice` with this client's token), as
    /// the iOS and Android SDKs fetch them before creating a peer connection (docs/sdk.md,
    /// "Client SDK compatibility"). Works before `connect()`.
    public func fetchIceServers() async throws -> IceServers {
        let bearer = driver.read(\.token)
        let body = try await REST.get(transport: transport, endpoint: try endpoint.get(), tls: options.tls, path: "/v1/ice", query: [],
                                      token: bearer, timeout: options.httpTimeout)
        let servers = (body["ice_servers"]?.arrayValue ?? []).map { entry -> IceServer in
            let urls = entry["urls"]?.arrayValue?.compactMap(\.stringValue) ?? entry["urls"]?.stringValue.map { [$0] } ?? []
            return IceServer(urls: urls, username: entry["username"]?.stringValue, credential: entry["credential"]?.stringValue)
        }
        return IceServers(servers: servers, ttl: body["ttl"]?.int64Value ?? 0, expiresAt: body["expires_at"]?.int64Value ?? 0)
    }

    // MARK: test hooks

    /// Drops inbound frames for which `filter` returns false, as if lost on the wire (tests).
    func setInboundFilterForTesting(_ filter: (@Sendable (String, JSONValue?) -> Bool)?) {
        driver.run { session in
            session.inboundFilter = filter
            return []
        }
    }

    /// Handles `text` as if the server had sent it on the current socket (tests).
    func receiveForTesting(_ text: String) {
        driver.run { $0.handle(.socketText($0.socket, text)) }
    }

    /// Stops reading the socket (tests: make acks late without losing them).
    func pauseReadingForTesting() { driver.withLock { socket.connection?.pauseReading() } }
    func resumeReadingForTesting() { driver.withLock { socket.connection?.resumeReading() } }
    /// Drops the TCP connection without a close frame (tests: a network drop).
    func dropConnectionForTesting() { driver.withLock { socket.connection?.abort() } }

    // MARK: driver

    private func command(_ command: SessionCommand) throws(CallingError) {
        try driver.run { session throws(CallingError) in ((), try session.command(command)) }
    }

    /// Any thread or task.
    private func submit(_ input: SessionInput) {
        core.submit(input)
    }

    /// Under the driver's lock: an event's delegate call, besides the stream.
    private func deliver(_ event: CallingEvent) {
        if let delegate = delegateStorage {
            callbackQueue.async { [self] in delegate.signalingClient(self, didReceive: event) }
        }
    }

    /// The session's own actions (the common ones are `core`'s). Under the driver's lock; never blocks.
    private func perform(_ action: SessionAction) {
        switch action {
        case .openSocket, .closeSocket, .abortSocket, .send, .arm, .cancel, .resume, .emit, .refreshToken:
            break  // SignalingSession.common
        case .fetchGap(let since, let generation):
            Task { [weak self] in
                guard let self else { return }
                do {
                    let page = try await fetchMessages(sinceSeq: since, limit: 200)
                    submit(.gapPage(generation: generation, page))
                } catch {
                    let failure = error as? CallingError ?? CallingError(.http(status: 0, code: nil, detail: "\(error)"))
                    submit(.gapFailed(generation: generation, failure))
                }
            }
        case .collectStats:
            guard let engine = options.mediaEngine else { return }
            Task { [weak self] in
                let sample = await engine.stats()
                self?.submit(.statsCollected(sample))
            }
        case .media(let command):
            if let engine = options.mediaEngine { runMedia(command, engine) }
        case .invokeRpc(let method, let invocation):
            runRpcHandler(method, invocation)
        }
    }

    // MARK: media engine (tasks)

    private func runMedia(_ command: MediaCommand, _ engine: any MediaEngine) {
        switch command {
        case .startCall(let peer, let connection, let media, let waiter):
            enqueueMedia(peer) { [self] in
                do {
                    engine.useIceServers(await iceServersForCall(), for: peer)
                    engine.useMedia(media, for: peer)
                    try await createPeerConnection(engine, peer, connection)
                    let offer = try await engine.createOffer(for: peer)
                    submit(.mediaOfferCreated(peer, connection: connection, offer, waiter: waiter))
                } catch {
                    submit(.mediaCallFailed(peer, connection: connection, "\(error)", waiter: waiter))
                }
            }
        case .answerCall(let peer, let connection, let offer, let waiter):
            enqueueMedia(peer) { [self] in
                do {
                    engine.useIceServers(await iceServersForCall(), for: peer)
                    try await createPeerConnection(engine, peer, connection)
                    try await engine.setRemoteDescription(offer, for: peer)
                    submit(.mediaRemoteApplied(peer))
                    let created = try await engine.createAnswer(for: peer)
                    let answer = SessionDescription(kind: .answer, sdp: created.sdp, sessionID: offer.sessionID)
                    submit(.mediaAnswerCreated(peer, connection: connection, answer, waiter: waiter))
                } catch {
                    submit(.mediaCallFailed(peer, connection: connection, "\(error)", waiter: waiter))
                }
            }
        case .applyAnswer(let peer, let answer):
            enqueueMedia(peer) { [self] in
                do {
                    try await engine.setRemoteDescription(answer, for: peer)
                    submit(.mediaRemoteApplied(peer))
                } catch {
                    submit(.mediaFailed("\(error)"))
                }
            }
        case .addCandidate(let peer, let candidate):
            enqueueMedia(peer) { [self] in
                do {
                    try await engine.addCandidate(candidate, for: peer)
                } catch {
                    submit(.mediaFailed("\(error)"))
                }
            }
        case .close(let peer, let reason):
            enqueueMedia(peer) { engine.close(peer: peer, reason: reason) }
        case .restartIce(let peer, let connection):
            enqueueMedia(peer) { [self] in
                do {
                    let offer = try await engine.createIceRestartOffer(for: peer, iceServers: await iceServersForCall())
                    submit(.mediaRenewed(peer, connection: connection, offer))
                } catch {
                    submit(.mediaRenewFailed(peer, connection: connection, "ICE restart: \(error)"))
                }
            }
        case .renegotiate(let peer, let connection, let offer):
            enqueueMedia(peer) { [self] in
                do {
                    try await engine.setRemoteDescription(offer, for: peer)
                    submit(.mediaRemoteApplied(peer))
                    let created = try await engine.createAnswer(for: peer)
                    // An HTTP session's renegotiation is answered for that session, as its first offer.
                    let answer = SessionDescription(kind: .answer, sdp: created.sdp, sessionID: offer.sessionID)
                    submit(.mediaRenewed(peer, connection: connection, answer))
                } catch {
                    submit(.mediaRenewFailed(peer, connection: connection, "renewed offer: \(error)"))
                }
            }
        }
    }

    /// Runs `operation` after every earlier operation for `peer`: engine calls for one peer never
    /// overlap and happen in the order signaling asked for them.
    /// Entries are never dropped while a task runs (a call after the peer left and came back
    /// would overlap the old call's close, which closes by peer id); the last one removes itself.
    /// Under the driver's lock.
    private func enqueueMedia(_ peer: PeerID, _ operation: @escaping @Sendable () async -> Void) {
        let previous = mediaTasks[peer]?.task
        mediaTaskCount += 1
        let number = mediaTaskCount
        mediaTasks[peer] = (number, Task { [weak self] in
            await previous?.value
            await operation()
            self?.driver.withLock {
                if self?.mediaTasks[peer]?.number == number { self?.mediaTasks[peer] = nil }
            }
        })
    }

    /// In a media task: `options.iceServers`, else a fresh `GET /v1/ice`, else the fallback.
    private func iceServersForCall() async -> [IceServer] {
        if let fixed = options.iceServers { return fixed }
        do {
            return try await fetchIceServers().servers
        } catch {
            CallingLog.write(.warning, "GET /v1/ice failed (\(error)); the call uses the fallback ICE servers",
                             fromLibrary: false)
            return options.fallbackIceServers
        }
    }

    /// In a media task. `connection` numbers the peer connection, so late reports of a replaced
    /// one are ignored.
    private func createPeerConnection(_ engine: any MediaEngine, _ peer: PeerID, _ connection: UInt64) async throws {
        try await engine.createPeerConnection(for: peer, onCandidate: { [weak self] candidate in
            self?.submit(.localCandidate(peer, connection: connection, candidate))
        }, onStateChange: { [weak self] state in
            self?.submit(.connectionState(peer, connection: connection, state))
        })
    }
}

extension SignalingSession: ClientSession {
    typealias Event = CallingEvent

    static func timerFired(_ timer: SessionTimer) -> SessionInput { .timerFired(timer) }

    static func tokenRefreshed(attempt: Int, _ result: Result<String, CallingError>) -> SessionInput {
        .tokenRefreshed(attempt: attempt, result)
    }

    static func socketInput(_ event: TransportEvent, socket: UInt64) -> SessionInput? {
        switch event {
        case .open: .socketOpened(socket)
        case .text(let text): .socketText(socket, text)
        case .closed(let code, let reason): .socketClosed(socket, code: code, reason: reason)
        case .failed(let status, let code, let message): .socketFailed(socket, status: status, code: code, message: message)
        }
    }

    static func common(_ action: SessionAction) -> CommonSessionAction<SessionTimer, WaiterOutcome, CallingEvent>? {
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
        case .fetchGap, .collectStats, .media, .invokeRpc: nil
        }
    }
}
