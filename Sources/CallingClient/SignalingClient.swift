import CallingCore
import CallingTransport
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
    /// The lws client loop to connect through; nil uses one process-wide loop.
    public var loop: WebSocketClientLoop?
    /// Where delegate methods are called. Default: a private serial queue (not main: servers and
    /// command-line tools have no main run loop).
    public var callbackQueue: DispatchQueue?

    public init() {}

    /// The two TLS fields as the transport takes them.
    public var tls: TLSClientOptions {
        TLSClientOptions(caFile: tlsCAFile, insecureSkipVerification: insecureSkipTLSVerification)
    }
}

/// Receives the same events as `SignalingClient.events`, in the same order, on
/// `SignalingOptions.callbackQueue`.
public protocol SignalingClientDelegate: AnyObject, Sendable {
    func signalingClient(_ client: SignalingClient, didReceive event: CallingEvent)
}

/// A client of the room protocol (`/v1/ws`): signaling, chat, typing, read markers, stats, and
/// automatic reconnect with chat resume.
///
/// ## Threading
/// One private serial `DispatchQueue` owns every piece of mutable state. Public methods may be
/// called from any thread or task: synchronous ones (`sendData`, `setTyping`, the properties) run
/// on that queue with `sync` (inline when already on it, so delegate code on the queue cannot
/// deadlock), asynchronous ones suspend until the queue answers. Socket events arrive on the lws
/// service thread and are re-posted to the queue; `MediaEngine` calls run in tasks off the queue,
/// serialised per peer. Events are yielded to `events` from the queue in order, and delegate
/// methods are called on `callbackQueue` in the same order.
public final class SignalingClient: @unchecked Sendable {
    // @unchecked: every `var` below is read and written only on `queue` (see "Threading"); `let`
    // fields are immutable and Sendable.

    /// Every event, in order. One consumer; buffered without limit.
    public let events: AsyncStream<CallingEvent>
    public let url: URL
    public let options: SignalingOptions

    private let queue = DispatchQueue(label: "calling-client.state")
    private let queueKey = DispatchSpecificKey<UInt8>()
    private let callbackQueue: DispatchQueue
    private let continuation: AsyncStream<CallingEvent>.Continuation
    private let loop: WebSocketClientLoop
    /// Where `url` points, or why the SDK cannot serve it (`connect` throws that).
    private let endpoint: Result<ClientEndpoint, CallingError>
    private let wsPath: String

    private weak var delegateStorage: (any SignalingClientDelegate)?
    private var token: String
    private var stateStorage: CallState = .idle
    /// Bumped whenever the current socket or reconnect timer is abandoned; events and timers of
    /// older generations are ignored.
    private var generation: UInt64 = 0
    private var connection: WebSocketClientConnection?
    private var welcomed = false
    private var connectWaiter: CheckedContinuation<Welcome, any Error>?
    private var disconnectWaiters: [CheckedContinuation<Void, Never>] = []
    private var connectTimer: DispatchWorkItem?
    /// True once any connection got `welcome`: later connections resume with `last_seq`.
    private var resumable = false
    private var reconnectAttempt = 0
    private var userDisconnected = false

    private var peerIdStorage: PeerID?
    private var roomIdStorage: RoomID?
    private var callIdStorage: CallID?
    private var peersStorage: [PeerInfo] = []

    private var lastSeqStorage: Int64 = 0
    private var seenSeqs = Set<Int64>()
    /// Seqs at or below this were pruned from `seenSeqs` and count as seen.
    private var seenFloor: Int64 = 0
    private var pendingChats: [String: PendingChat] = [:]
    private var pendingOrder: [String] = []
    /// Replayed `chat` frames still expected after a resumed `welcome`.
    private var replayRemaining = 0
    /// The resumed `welcome` said `recovered: false`: page the rest over REST after the replay.
    private var gapFillPending = false
    /// Where the REST gap fill has got to (nil when no gap is open). Reconnects resume from here,
    /// not from `lastSeqStorage`, which live chats and acks move past the gap.
    private var gapCursor: Int64?
    /// Highest seq delivered by the current socket's resume replay.
    private var replayHigh: Int64 = 0
    private var typingOn = false
    private var typingTimer: DispatchWorkItem?

    private var activeCalls = Set<PeerID>()
    private var remoteDescriptionSet = Set<PeerID>()
    private var candidateQueue: [PeerID: [IceCandidate]] = [:]
    private var pendingOffers: [PeerID: SessionDescription] = [:]
    /// Peers whose latest offer came from an HTTP session (it carried `session_id`).
    private var sessionPeers = Set<PeerID>()
    /// The last media operation queued for each peer (see `enqueueMedia`), numbered so that it
    /// removes itself when it finishes last.
    private var mediaTasks: [PeerID: (number: UInt64, task: Task<Void, Never>)] = [:]
    private var mediaTaskCount: UInt64 = 0
    /// Which peer connection of each peer is current (`call`/`accept` each create a new one). A
    /// replaced or re-created connection can still report a state while the engine tears it down;
    /// only the current one's state may end the call.
    private var currentConnection: [PeerID: UInt64] = [:]
    private var connectionCount: UInt64 = 0
    private var statsTimer: (any DispatchSourceTimer)?
    private var pingTimer: (any DispatchSourceTimer)?
    /// A `ping` is out and its `pong` has not come back yet.
    private var awaitingPong = false

    /// Test hook: inbound frames for which this returns false are dropped (as if lost).
    private var inboundFilter: (@Sendable (String, JSONValue?) -> Bool)?

    private struct PendingChat {
        var text: String
        var meta: JSONValue?
        var continuation: CheckedContinuation<ChatAck, any Error>
        var sends = 0
        var timer: DispatchWorkItem?
    }

    /// `url` is `ws://host:port` or `wss://host[:port]` (a path other than `/` replaces `/v1/ws`);
    /// `token` is a peer JWT. `wss://` (and `https://`) verify the server's certificate as
    /// `options.tlsCAFile` and `options.insecureSkipTLSVerification` say; any other scheme makes
    /// `connect()` throw `unsupportedURL` rather than fall back to plaintext.
    public init(url: URL, token: String, options: SignalingOptions = SignalingOptions()) {
        self.url = url
        self.token = token
        self.options = options
        endpoint = Result { () throws(CallingError) in try REST.endpoint(for: url) }
        wsPath = (url.path.isEmpty || url.path == "/") ? "/v1/ws" : url.path
        loop = options.loop ?? SignalingClient.sharedLoop
        callbackQueue = options.callbackQueue ?? DispatchQueue(label: "calling-client.callbacks")
        (events, continuation) = AsyncStream.makeStream(of: CallingEvent.self, bufferingPolicy: .unbounded)
        queue.setSpecific(key: queueKey, value: 1)
    }

    deinit {
        connection?.close(code: CloseCode.normal.rawValue, reason: "normal")
        continuation.finish()
    }

    /// One lws client loop for every client that is not given its own; lives for the process.
    /// Its logger shows warnings: the one it writes is `insecureSkipTLSVerification`'s.
    static let sharedLoop = WebSocketClientLoop(logger: Logger(label: "calling-client", level: .warning))

    // MARK: public state

    /// Called on `callbackQueue` for every event. Held weakly.
    public var delegate: (any SignalingClientDelegate)? {
        get { onQueue { delegateStorage } }
        set { onQueue { delegateStorage = newValue } }
    }

    public var state: CallState { onQueue { stateStorage } }
    /// Our peer id (`welcome.peer_id`); nil before the first `welcome`.
    public var peerId: PeerID? { onQueue { peerIdStorage } }
    /// The room (`welcome.room_id`), or before `connect()` the token's `room_id` claim.
    public var roomId: RoomID? { onQueue { roomIdStorage ?? TokenClaims.roomId(of: token) } }
    public var callId: CallID? { onQueue { callIdStorage } }
    /// The other peers in the room, in join order.
    public var peers: [PeerInfo] { onQueue { peersStorage } }
    /// The highest chat seq seen: the room's seq at the first `welcome`, live and replayed chat,
    /// and our own acks. Sent as `last_seq` on reconnect.
    public var lastSeq: Int64 { onQueue { lastSeqStorage } }

    // MARK: connecting

    /// Opens the socket and returns once `welcome` has arrived. Throws `CallingError` when the
    /// upgrade is refused (`httpStatus`), an `error` frame precedes `welcome`, the socket closes
    /// first, or `connectTimeout` passes. Allowed from `idle`, `ended` and `failed`; after a
    /// previous session the connection resumes chat from `lastSeq`. `token`, when given, replaces
    /// the token first (connect again after 4401 `token expired`).
    @discardableResult
    public func connect(token newToken: String? = nil) async throws -> Welcome {
        try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Welcome, any Error>) in
            queue.async { [self] in
                switch stateStorage {
                case .idle, .ended, .failed: break
                default:
                    waiter.resume(throwing: CallingError(.invalidState("connect() while \(stateStorage)")))
                    return
                }
                if case .failure(let error) = endpoint {
                    waiter.resume(throwing: error)
                    return
                }
                if let newToken { token = newToken }
                connectWaiter = waiter
                userDisconnected = false
                reconnectAttempt = 0
                setState(.connecting)
                openSocket()
            }
        }
    }

    /// Closes the socket (1000) and ends the session: state `ended`, pending `sendChat`s throw
    /// `notConnected`, peer connections close. Returns once the socket is closed.
    public func disconnect() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            queue.async { [self] in
                if stateStorage.isTerminal || stateStorage == .idle {
                    done.resume()
                    return
                }
                userDisconnected = true
                disconnectWaiters.append(done)
                endAllCalls(notify: false)
                if let connection {
                    connection.close(code: CloseCode.normal.rawValue, reason: "normal")
                    let generation = generation
                    // A server that never echoes the close must not hold us up.
                    queue.asyncAfter(deadline: .now() + 2) { [self] in
                        if self.generation == generation, let connection = self.connection { connection.abort() }
                    }
                } else {
                    generation += 1  // voids a pending reconnect timer
                    finishSession(error: nil)
                }
            }
        }
    }

    // MARK: sending

    /// Sends `data` to `to`, or to every other peer when nil. Throws `notConnected`.
    public func sendData(_ payload: JSONValue?, to: PeerID? = nil) throws {
        try onQueue {
            try requireConnected()
            send(Frame(.data, to: to?.rawValue, payload: payload))
        }
    }

    /// Ends the call with `peerId`: closes its peer connection and, when `notify`, sends
    /// `data {kind:"hangup"}` to it.
    public func hangup(_ peerId: PeerID, notify: Bool = true) {
        onQueue {
            endCall(peerId)
            if notify, stateStorage == .connected { send(Frame(.data, to: peerId.rawValue, payload: ["kind": "hangup"])) }
        }
    }

    /// Declines an incoming offer from `peerId` with `data {kind:"reject"}`.
    public func reject(_ peerId: PeerID) throws {
        try onQueue {
            try requireConnected()
            endCall(peerId)
            send(Frame(.data, to: peerId.rawValue, payload: ["kind": "reject"]))
        }
    }

    /// App-level keep-alive; the server answers `pong`.
    public func ping() throws {
        try onQueue {
            try requireConnected()
            send(Frame(.ping))
        }
    }

    /// Relays an SDP offer produced outside a `MediaEngine`.
    public func sendOffer(_ sdp: String, to peer: PeerID) throws {
        try onQueue {
            try requireConnected()
            send(Frame(.offer, to: peer.rawValue, payload: SessionDescription(kind: .offer, sdp: sdp).json))
        }
    }

    /// Relays an SDP answer produced outside a `MediaEngine`.
    public func sendAnswer(_ sdp: String, to peer: PeerID) throws {
        try onQueue {
            try requireConnected()
            send(Frame(.answer, to: peer.rawValue, payload: SessionDescription(kind: .answer, sdp: sdp).json))
        }
    }

    /// Relays an ICE candidate produced outside a `MediaEngine`.
    public func sendCandidate(_ candidate: IceCandidate, to peer: PeerID) throws {
        try onQueue {
            try requireConnected()
            send(Frame(.candidate, to: peer.rawValue, payload: candidate.json))
        }
    }

    // MARK: media

    /// Calls `peer`: creates its peer connection in the `MediaEngine` and sends the offer.
    public func call(_ peer: PeerID) async throws {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            queue.async { [self] in
                guard let engine = options.mediaEngine else {
                    return done.resume(throwing: CallingError(.media("no MediaEngine")))
                }
                guard stateStorage == .connected else { return done.resume(throwing: CallingError.notConnected) }
                activeCalls.insert(peer)
                let connection = newConnection(peer)
                enqueueMedia(peer) { [self] in
                    do {
                        try await createPeerConnection(engine, peer, connection)
                        let offer = try await engine.createOffer(for: peer)
                        queue.async { [self] in
                            if currentConnection[peer] == connection { send(Frame(.offer, to: peer.rawValue, payload: offer.json)) }
                            done.resume()
                        }
                    } catch {
                        queue.async { [self] in
                            endCall(peer)
                            done.resume(throwing: CallingError(.media("\(error)")))
                        }
                    }
                }
            }
        }
    }

    /// Accepts the offer of an `incoming` call: sets it as remote description, flushes queued
    /// candidates and sends the answer.
    public func accept(_ peer: PeerID) async throws {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            queue.async { [self] in
                guard let engine = options.mediaEngine else {
                    return done.resume(throwing: CallingError(.media("no MediaEngine")))
                }
                guard let offer = pendingOffers.removeValue(forKey: peer) else {
                    return done.resume(throwing: CallingError(.invalidState("no incoming call from \(peer)")))
                }
                activeCalls.insert(peer)
                let connection = newConnection(peer)
                enqueueMedia(peer) { [self] in
                    do {
                        try await createPeerConnection(engine, peer, connection)
                        try await engine.setRemoteDescription(offer, for: peer)
                        queue.async { [self] in remoteDescriptionApplied(peer) }
                        let created = try await engine.createAnswer(for: peer)
                        let answer = SessionDescription(kind: .answer, sdp: created.sdp, sessionID: offer.sessionID)
                        queue.async { [self] in
                            // Not after the call ended: a peer that left and offered again must
                            // not get this connection's answer to its new offer.
                            if currentConnection[peer] == connection { send(Frame(.answer, to: peer.rawValue, payload: answer.json)) }
                            done.resume()
                        }
                    } catch {
                        queue.async { [self] in
                            endCall(peer)
                            done.resume(throwing: CallingError(.media("\(error)")))
                        }
                    }
                }
            }
        }
    }

    // MARK: chat

    /// Sends a chat message and returns its ack (the committed `seq`). Without an ack within
    /// `chatAckTimeout` the same `client_id` is sent again (the server answers a retry with the
    /// original ack and stores nothing twice), up to `chatMaxAttempts` sends; after a reconnect
    /// every pending message is sent again. A `chat-ack` with an error throws `CallingError`
    /// (`serverCode` 440/441/442); 503 is retried. While reconnecting the message waits.
    public func sendChat(_ text: String, meta: JSONValue? = nil, clientId: String? = nil) async throws -> ChatAck {
        let id = clientId ?? UUID().uuidString.lowercased()
        return try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<ChatAck, any Error>) in
            queue.async { [self] in
                switch stateStorage {
                case .connected, .connecting, .reconnecting: break
                default: return waiter.resume(throwing: CallingError.notConnected)
                }
                guard pendingChats[id] == nil else {
                    return waiter.resume(throwing: CallingError(.invalidState("client_id \(id) is already pending")))
                }
                pendingChats[id] = PendingChat(text: text, meta: meta, continuation: waiter)
                pendingOrder.append(id)
                if stateStorage == .connected { transmitChat(id) }
            }
        }
    }

    /// Turns the typing indicator on (it turns itself off after `typingTimeout` unless renewed)
    /// or off. Only changes are sent. Ignored while not connected.
    public func setTyping(_ typing: Bool) {
        onQueue {
            typingTimer?.cancel()
            typingTimer = nil
            guard stateStorage == .connected else { return }
            if typing {
                if !typingOn { send(Frame(.typing, payload: ["typing": true])) }
                typingOn = true
                let timer = DispatchWorkItem { [weak self] in self?.typingExpired() }
                typingTimer = timer
                queue.asyncAfter(deadline: .now() + options.typingTimeout, execute: timer)
            } else if typingOn {
                typingOn = false
                send(Frame(.typing, payload: ["typing": false]))
            }
        }
    }

    /// Moves our read marker to `seq` (the server ignores markers that do not move forward).
    public func markRead(_ seq: Int64) throws {
        try onQueue {
            try requireConnected()
            send(Frame(.read, payload: ["seq": .int(seq)]))
        }
    }

    /// One page of history over REST (`GET /v1/rooms/{room}/messages`), with this client's token.
    /// The room is `welcome.room_id`, or before `connect()` the token's `room_id` claim.
    /// Does not change `lastSeq` and emits no events.
    public func fetchMessages(sinceSeq: Int64 = 0, limit: Int? = nil) async throws -> MessagesPage {
        let (bearer, room) = onQueue { (self.token, roomIdStorage ?? TokenClaims.roomId(of: self.token)) }
        guard let room else { throw CallingError(.invalidToken("no room_id claim")) }
        let endpoint = try endpoint.get()
        var query = [URLQueryItem(name: "since_seq", value: String(sinceSeq))]
        if let limit { query.append(URLQueryItem(name: "limit", value: String(limit))) }
        let body = try await REST.get(loop: loop, endpoint: endpoint, tls: options.tls,
                                      path: "/v1/rooms/\(queryEncoded(room.rawValue))/messages", query: query,
                                      token: bearer, timeout: options.httpTimeout)
        let messages = (body["messages"]?.arrayValue ?? []).compactMap { ChatMessage($0, from: $0["from"]?.stringValue) }
        return MessagesPage(roomId: RoomID(body["room_id"]?.stringValue ?? room.rawValue), messages: messages,
                            nextSinceSeq: body["next_since_seq"]?.int64Value ?? sinceSeq,
                            hasMore: body["has_more"]?.boolValue ?? false, lastSeq: body["last_seq"]?.int64Value ?? 0)
    }

    /// STUN/TURN servers for the peer connection (`GET /v1/ice` with this client's token), as
    /// the iOS and Android SDKs fetch them before creating a peer connection (docs/sdk.md,
    /// "Client SDK compatibility"). Works before `connect()`.
    public func fetchIceServers() async throws -> IceServers {
        let bearer = onQueue { self.token }
        let body = try await REST.get(loop: loop, endpoint: try endpoint.get(), tls: options.tls, path: "/v1/ice", query: [],
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
        onQueue { inboundFilter = filter }
    }

    /// Handles `text` as if the server had sent it on the current socket (tests).
    func receiveForTesting(_ text: String) {
        onQueue {
            guard let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { return }
            handleFrame(type: type, json: json)
        }
    }

    /// Stops reading the socket (tests: make acks late without losing them).
    func pauseReadingForTesting() { onQueue { connection?.pauseReading() } }
    func resumeReadingForTesting() { onQueue { connection?.resumeReading() } }
    /// Drops the TCP connection without a close frame (tests: a network drop).
    func dropConnectionForTesting() { onQueue { connection?.abort() } }

    // MARK: queue helpers

    private func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        if DispatchQueue.getSpecific(key: queueKey) != nil { return try body() }
        return try queue.sync(execute: body)
    }

    private func requireConnected() throws {
        guard stateStorage == .connected else { throw CallingError.notConnected }
    }

    /// Queue.
    private func emit(_ event: CallingEvent) {
        continuation.yield(event)
        if let delegate = delegateStorage {
            callbackQueue.async { [self] in delegate.signalingClient(self, didReceive: event) }
        }
    }

    /// Queue.
    private func setState(_ new: CallState) {
        guard new != stateStorage else { return }
        stateStorage = new
        emit(.stateChanged(new))
    }

    /// Queue.
    private func send(_ frame: Frame) {
        connection?.send(bytes: frame.encoded(), binary: false)
    }

    // MARK: socket lifecycle (queue)

    private func openSocket() {
        generation += 1
        let generation = generation
        welcomed = false
        replayHigh = 0
        var path = wsPath
        if resumable { path += "?last_seq=\(min(lastSeqStorage, gapCursor ?? .max))" }
        guard case .success(let endpoint) = endpoint else { return }  // connect() refused it already
        connection = loop.connect(host: endpoint.host, port: endpoint.port, path: path,
                                  headers: ["Authorization": "Bearer \(token)"], tls: endpoint.usesTLS ? options.tls : nil) {
            [weak self] event in
            // lws service thread: hop to the state queue, nothing else.
            guard let self else { return }
            self.queue.async { self.handleSocket(event, generation: generation) }
        }
        connectTimer?.cancel()
        let timer = DispatchWorkItem { [weak self] in
            guard let self, self.generation == generation, !self.welcomed else { return }
            self.abandonSocket()
            self.socketEnded(CallingError(.timedOut("welcome")))
        }
        connectTimer = timer
        queue.asyncAfter(deadline: .now() + options.connectTimeout, execute: timer)
    }

    /// Forgets the current socket (its later events are ignored) and drops it.
    private func abandonSocket() {
        generation += 1
        connection?.abort()
        connection = nil
    }

    private func handleSocket(_ event: WebSocketClientEvent, generation: UInt64) {
        guard generation == self.generation else { return }
        switch event {
        case .open, .binary:
            break
        case .text(let text):
            guard let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { return }
            handleFrame(type: type, json: json)
        case .closed(let code, let reason):
            connection = nil
            socketEnded(CallingError(.closed(code: code, reason: reason)))
        case .failed(let status, let message):
            connection = nil
            socketEnded(CallingError(.connectFailed(status: status, message: message)))
        }
    }

    /// The socket is gone (closed, failed, timed out). Decides between ended, failed and a
    /// reconnect.
    private func socketEnded(_ error: CallingError) {
        connectTimer?.cancel()
        connectTimer = nil
        stopStats()
        welcomed = false
        typingOn = false
        typingTimer?.cancel()
        typingTimer = nil
        if userDisconnected {
            finishSession(error: nil)
            return
        }
        emit(.disconnected(error))
        if let waiter = connectWaiter {
            // The first connect never got `welcome`: no automatic retry, the app decides.
            connectWaiter = nil
            fail(error)
            waiter.resume(throwing: error)
            return
        }
        if error.isRetryable { scheduleReconnect(after: error) } else { fail(error) }
    }

    private func scheduleReconnect(after error: CallingError) {
        reconnectAttempt += 1
        guard reconnectAttempt <= options.maxReconnectAttempts else { return fail(error) }
        setState(.reconnecting(attempt: reconnectAttempt))
        let delays = options.reconnectDelays
        let delay = delays.isEmpty ? 0 : delays[min(reconnectAttempt - 1, delays.count - 1)]
        generation += 1
        let generation = generation
        queue.asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self, self.generation == generation else { return }
            guard let provider = self.options.tokenProvider else { return self.openSocket() }
            Task {
                do {
                    let fresh = try await provider()
                    self.queue.async {
                        guard self.generation == generation else { return }
                        self.token = fresh
                        self.openSocket()
                    }
                } catch {
                    let failure = error as? CallingError ?? CallingError(.connectFailed(status: nil, message: "token provider: \(error)"))
                    self.queue.async {
                        guard self.generation == generation else { return }
                        if failure.isRetryable { self.scheduleReconnect(after: failure) } else { self.fail(failure) }
                    }
                }
            }
        }
    }

    /// Terminal failure: no reconnect. Pending chats throw `error`.
    private func fail(_ error: CallingError) {
        generation += 1
        connection?.abort()
        connection = nil
        stopStats()
        endAllCalls(notify: false)
        rejectPendingChats(error)
        setState(.failed(error))
    }

    /// The app's `disconnect()` completed (or a disconnect raced the socket's end).
    private func finishSession(error: CallingError?) {
        connection = nil
        connectTimer?.cancel()
        stopStats()
        rejectPendingChats(CallingError.notConnected)
        if let waiter = connectWaiter {
            connectWaiter = nil
            waiter.resume(throwing: CallingError.notConnected)
        }
        emit(.disconnected(error))
        setState(.ended)
        let waiters = disconnectWaiters
        disconnectWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    // MARK: inbound frames (queue)

    private func handleFrame(type: String, json: JSONValue) {
        let payload = json["payload"].flatMap(JSONValue.nonNull)
        if let filter = inboundFilter, !filter(type, payload) { return }
        let from = json["from"]?.stringValue.map { PeerID($0) }
        switch type {
        case "welcome": handleWelcome(payload ?? [:])
        case "error": handleError(json, payload: payload)
        case "chat-ack": handleChatAck(json, payload: payload)
        case "chat":
            guard let message = ChatMessage(payload, from: json["from"]?.stringValue) else { return }
            handleChat(message, replayed: replayRemaining > 0)
        case "typing":
            guard let from, let typing = payload?["typing"]?.boolValue else { return }
            emit(.typing(from: from, isTyping: typing))
        case "read":
            guard let from, let seq = payload?["seq"]?.int64Value else { return }
            emit(.read(from: from, seq: seq))
        case "peer-joined":
            guard let info = PeerInfo(payload) else { return }
            peersStorage.removeAll { $0.peerId == info.peerId }
            peersStorage.append(info)
            emit(.peerJoined(info))
        case "peer-left":
            guard let id = (payload?["peer_id"]?.stringValue).map({ PeerID($0) }) ?? from else { return }
            peersStorage.removeAll { $0.peerId == id }
            peerGone(id)
            emit(.peerLeft(id))
        case "offer":
            guard let from, let sdp = payload?["sdp"]?.stringValue else { return }
            let offer = SessionDescription(kind: .offer, sdp: sdp, sessionID: payload?["session_id"]?.stringValue)
            if offer.sessionID != nil { sessionPeers.insert(from) } else { sessionPeers.remove(from) }
            pendingOffers[from] = offer
            emit(.incoming(IncomingCall(from: from, offer: offer)))
        case "answer":
            guard let from else { return }
            if let engine = options.mediaEngine, activeCalls.contains(from), let sdp = payload?["sdp"]?.stringValue {
                enqueueMedia(from) { [self] in
                    do {
                        try await engine.setRemoteDescription(SessionDescription(kind: .answer, sdp: sdp), for: from)
                        queue.async { [self] in remoteDescriptionApplied(from) }
                    } catch {
                        queue.async { [self] in emit(.error(CallingError(.media("\(error)")))) }
                    }
                }
            } else {
                emit(.signal(type: type, from: from, payload: payload))
            }
        case "candidate":
            guard let from else { return }
            if let engine = options.mediaEngine, activeCalls.contains(from) || pendingOffers[from] != nil,
               let candidate = IceCandidate(payload)
            {
                if remoteDescriptionSet.contains(from) {
                    addCandidate(engine, candidate, from)
                } else {
                    candidateQueue[from, default: []].append(candidate)
                }
            } else {
                emit(.signal(type: type, from: from, payload: payload))
            }
        case "data":
            guard let from else { return }
            switch payload?["kind"]?.stringValue {
            case "hangup":
                endCall(from)
                emit(.hangup(from))
            case "reject":
                endCall(from)
                emit(.rejected(from))
            case "replaced":
                // An HTTP session's caller posted again: its next offer is a new peer connection
                // from the same peer id, so the old one ends now (docs/protocol.md "HTTP sessions").
                endCall(from, reason: .replaced)
                emit(.data(from: from, payload: payload))
            default:
                emit(.data(from: from, payload: payload))
            }
        case "meter":
            let meter = MeterUpdate(state: payload?["state"]?.stringValue ?? "", elapsedSeconds: payload?["elapsed_s"]?.int64Value,
                                    limitSeconds: payload?["limit_s"]?.int64Value,
                                    remainingSeconds: payload?["remaining_s"]?.int64Value, raw: payload ?? .null)
            emit(.meter(meter))
            if meter.state == "ended" { emit(.consultationEnded(meter)) }
        case "pong":
            awaitingPong = false
        default:
            break  // anything newer than this SDK
        }
    }

    private func handleWelcome(_ payload: JSONValue) {
        connectTimer?.cancel()
        connectTimer = nil
        welcomed = true
        let resumed = payload["recovered"] != nil
        let welcome = Welcome(
            peerId: PeerID(payload["peer_id"]?.stringValue ?? ""), roomId: RoomID(payload["room_id"]?.stringValue ?? ""),
            callId: payload["call_id"]?.stringValue.map { CallID($0) }, role: payload["role"]?.stringValue ?? "peer",
            name: payload["name"]?.stringValue, peers: (payload["peers"]?.arrayValue ?? []).compactMap { PeerInfo($0) },
            lastSeq: payload["last_seq"]?.int64Value ?? 0, readSeq: payload["read_seq"]?.int64Value ?? 0,
            unread: payload["unread"]?.int64Value ?? 0, resumed: resumed,
            recovered: payload["recovered"]?.boolValue ?? true, replayCount: Int(payload["replay_count"]?.int64Value ?? 0),
            raw: payload)
        peerIdStorage = welcome.peerId
        roomIdStorage = welcome.roomId
        callIdStorage = welcome.callId
        replayRemaining = resumed ? welcome.replayCount : 0
        gapFillPending = resumed && !welcome.recovered
        if resumed {
            // The roster may have changed while we were away: report the difference.
            let before = Set(peersStorage.map(\.peerId))
            let after = Set(welcome.peers.map(\.peerId))
            for gone in peersStorage where !after.contains(gone.peerId) {
                peerGone(gone.peerId)
                emit(.peerLeft(gone.peerId))
            }
            peersStorage = welcome.peers
            for joined in welcome.peers where !before.contains(joined.peerId) { emit(.peerJoined(joined)) }
        } else {
            peersStorage = welcome.peers
            // Messages before this session are history (fetchMessages), not live events.
            if welcome.lastSeq > lastSeqStorage { lastSeqStorage = welcome.lastSeq }
            seenFloor = max(seenFloor, welcome.lastSeq)
        }
        resumable = true
        reconnectAttempt = 0
        setState(.connected)
        emit(.connected(welcome))
        if let waiter = connectWaiter {
            connectWaiter = nil
            waiter.resume(returning: welcome)
        }
        // Retry everything not acked yet, oldest first, with the same client_ids. Frames sent now
        // reach the server after the join, so the replay (which may already contain some of them)
        // is ahead of the answers.
        for id in pendingOrder { transmitChat(id, counts: false) }
        startStats()
        startPing(serverInterval: Double(payload["ping_interval_ms"]?.int64Value ?? 25_000) / 1000)
        if gapFillPending, replayRemaining == 0 { startGapFill() }
    }

    /// The replay was capped (`recovered: false`): fetch everything after it over REST and feed it
    /// through the same seq dedupe as live frames. Live messages may arrive before older gap
    /// messages meanwhile; each seq is still reported exactly once.
    private func startGapFill() {
        gapFillPending = false
        // After a reconnect in the middle of a gap, the replay covered gapCursor…replayHigh.
        let since = gapCursor.map { max($0, replayHigh) } ?? lastSeqStorage
        gapCursor = since
        let generation = generation
        Task { [weak self] in await self?.fillGap(since: since, generation: generation) }
    }

    private func handleError(_ json: JSONValue, payload: JSONValue?) {
        let error = CallingError(.server(code: Int(json["error"]?["code"]?.int64Value ?? 0),
                                         message: json["error"]?["message"]?.stringValue ?? ""))
        if !welcomed, let waiter = connectWaiter {
            connectWaiter = nil
            abandonSocket()
            emit(.error(error))
            emit(.disconnected(error))
            fail(error)
            waiter.resume(throwing: error)
            return
        }
        emit(.error(error))
    }

    private func handleChatAck(_ json: JSONValue, payload: JSONValue?) {
        guard let id = payload?["client_id"]?.stringValue else { return }
        if let wire = json["error"].flatMap(JSONValue.nonNull) {
            let code = Int(wire["code"]?.int64Value ?? 0)
            let error = CallingError(.server(code: code, message: wire["message"]?.stringValue ?? ""))
            emit(.error(error))
            guard let pending = pendingChats[id] else { return }
            if error.isRetryable {
                // 503: not stored; the timer resends the same client_id a little later.
                pending.timer?.cancel()
                armChatTimer(id, after: min(1, options.chatAckTimeout))
            } else {
                resolveChat(id, .failure(error))
            }
            return
        }
        guard let seq = payload?["seq"]?.int64Value else { return }
        markSeen(seq)
        resolveChat(id, .success(ChatAck(clientId: id, seq: seq, ts: payload?["ts"]?.int64Value ?? 0)))
    }

    /// Off the queue: pages history after `since` into `handleChat` until `has_more` is false.
    private func fillGap(since: Int64, generation: UInt64) async {
        var cursor = since
        do {
            while true {
                let page = try await fetchMessages(sinceSeq: cursor, limit: 200)
                let current = onQueue { () -> Bool in
                    guard self.generation == generation else { return false }
                    for message in page.messages { handleChat(message) }
                    gapCursor = page.hasMore && page.nextSinceSeq > cursor ? page.nextSinceSeq : nil
                    return true
                }
                guard current, page.hasMore, page.nextSinceSeq > cursor else { return }
                cursor = page.nextSinceSeq
            }
        } catch {
            let failure = error as? CallingError ?? CallingError(.http(status: 0, code: nil, detail: "\(error)"))
            queue.async { [self] in emit(.error(failure)) }
        }
    }

    private func handleChat(_ message: ChatMessage, replayed: Bool = false) {
        defer {
            if replayed, replayRemaining > 0 {
                replayRemaining -= 1
                if replayRemaining == 0, gapFillPending { startGapFill() }
            }
        }
        if replayed { replayHigh = max(replayHigh, message.seq) }
        guard message.seq > seenFloor, !seenSeqs.contains(message.seq) else { return }  // replay overlap
        markSeen(message.seq)
        if message.from == peerIdStorage, pendingChats[message.clientId] != nil {
            // Our own message in a resume replay: committed, its ack was lost with the socket.
            resolveChat(message.clientId, .success(ChatAck(clientId: message.clientId, seq: message.seq, ts: message.ts)))
            return
        }
        emit(.chat(message))
    }

    private func markSeen(_ seq: Int64) {
        seenSeqs.insert(seq)
        if seq > lastSeqStorage { lastSeqStorage = seq }
        if seenSeqs.count > 4096 {
            // Never above an open gap: its messages are still to come.
            let floor = min(lastSeqStorage - 1024, gapCursor ?? .max)
            seenSeqs = seenSeqs.filter { $0 > floor }
            seenFloor = max(seenFloor, floor)
        }
    }

    // MARK: chat internals (queue)

    /// `counts`: false for the resend after a reconnect, which is free (SignalingOptions, sdk.md).
    private func transmitChat(_ id: String, counts: Bool = true) {
        guard var pending = pendingChats[id] else { return }
        if counts { pending.sends += 1 }
        pending.timer?.cancel()
        pendingChats[id] = pending
        var body: [String: JSONValue] = ["client_id": .string(id), "text": .string(pending.text)]
        if let meta = pending.meta { body["meta"] = meta }
        send(Frame(.chat, payload: .object(body)))
        armChatTimer(id, after: options.chatAckTimeout)
    }

    private func armChatTimer(_ id: String, after delay: TimeInterval) {
        guard var pending = pendingChats[id] else { return }
        let timer = DispatchWorkItem { [weak self] in self?.chatTimedOut(id) }
        pending.timer = timer
        pendingChats[id] = pending
        queue.asyncAfter(deadline: .now() + delay, execute: timer)
    }

    private func chatTimedOut(_ id: String) {
        guard let pending = pendingChats[id] else { return }
        if pending.sends >= options.chatMaxAttempts {
            resolveChat(id, .failure(CallingError(.timedOut("chat-ack"))))
        } else if stateStorage == .connected {
            transmitChat(id)
        }
        // Not connected: the next `welcome` resends it.
    }

    private func resolveChat(_ id: String, _ result: Result<ChatAck, CallingError>) {
        guard let pending = pendingChats.removeValue(forKey: id) else { return }
        pendingOrder.removeAll { $0 == id }
        pending.timer?.cancel()
        pending.continuation.resume(with: result.mapError { $0 as any Error })
    }

    private func rejectPendingChats(_ error: CallingError) {
        for id in pendingOrder { resolveChat(id, .failure(error)) }
    }

    private func typingExpired() {
        typingTimer = nil
        guard typingOn else { return }
        typingOn = false
        if stateStorage == .connected { send(Frame(.typing, payload: ["typing": false])) }
    }

    // MARK: media internals (queue unless noted)

    /// Runs `operation` after every earlier operation for `peer`: engine calls for one peer never
    /// overlap and happen in the order signaling asked for them.
    /// Entries are never dropped while a task runs (a call after the peer left and came back
    /// would overlap the old call's close, which closes by peer id); the last one removes itself.
    private func enqueueMedia(_ peer: PeerID, _ operation: @escaping @Sendable () async -> Void) {
        let previous = mediaTasks[peer]?.task
        mediaTaskCount += 1
        let number = mediaTaskCount
        mediaTasks[peer] = (number, Task { [weak self] in
            await previous?.value
            await operation()
            self?.queue.async { [weak self] in
                if let self, self.mediaTasks[peer]?.number == number { self.mediaTasks[peer] = nil }
            }
        })
    }

    /// Queue: numbers the peer connection about to be created for `peer` and makes it current.
    private func newConnection(_ peer: PeerID) -> UInt64 {
        connectionCount += 1
        currentConnection[peer] = connectionCount
        return connectionCount
    }

    /// Off the queue (inside a media task). `connection` is from `newConnection(peer)`.
    private func createPeerConnection(_ engine: any MediaEngine, _ peer: PeerID, _ connection: UInt64) async throws {
        try await engine.createPeerConnection(for: peer, onCandidate: { [weak self] candidate in
            guard let self else { return }
            self.queue.async {
                // A replaced connection's late candidates would reach the peer's new one.
                guard self.activeCalls.contains(peer), self.currentConnection[peer] == connection,
                      self.stateStorage == .connected else { return }
                self.send(Frame(.candidate, to: peer.rawValue, payload: candidate.json))
            }
        }, onStateChange: { [weak self] state in
            guard let self, state.endsCall else { return }
            self.queue.async {
                guard self.activeCalls.contains(peer), self.currentConnection[peer] == connection else { return }
                // An HTTP session is ended by the server only when told: without this, a caller
                // that hung up over its control channel would keep its seat until the token expires.
                if self.sessionPeers.contains(peer), self.stateStorage == .connected {
                    self.send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"]))
                }
                self.endCall(peer)
                self.emit(.hangup(peer))
            }
        })
    }

    private func remoteDescriptionApplied(_ peer: PeerID) {
        guard activeCalls.contains(peer), let engine = options.mediaEngine else { return }
        remoteDescriptionSet.insert(peer)
        for candidate in candidateQueue.removeValue(forKey: peer) ?? [] { addCandidate(engine, candidate, peer) }
    }

    private func addCandidate(_ engine: any MediaEngine, _ candidate: IceCandidate, _ peer: PeerID) {
        enqueueMedia(peer) { [self] in
            do {
                try await engine.addCandidate(candidate, for: peer)
            } catch {
                queue.async { [self] in emit(.error(CallingError(.media("\(error)")))) }
            }
        }
    }

    private func endCall(_ peer: PeerID, reason: CallEndReason = .ended) {
        pendingOffers[peer] = nil
        candidateQueue[peer] = nil
        remoteDescriptionSet.remove(peer)
        guard activeCalls.remove(peer) != nil, let engine = options.mediaEngine else { return }
        enqueueMedia(peer) { engine.close(peer: peer, reason: reason) }
    }

    /// The peer left the room: its call (if any) ends with a `hangup` event.
    private func peerGone(_ peer: PeerID) {
        sessionPeers.remove(peer)
        currentConnection[peer] = nil
        let hadCall = activeCalls.contains(peer)
        endCall(peer)
        if hadCall { emit(.hangup(peer)) }
    }

    private func endAllCalls(notify: Bool) {
        for peer in activeCalls {
            endCall(peer)
            if notify { send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"])) }
        }
        pendingOffers.removeAll()
        candidateQueue.removeAll()
    }

    private func startStats() {
        guard let engine = options.mediaEngine, statsTimer == nil, options.statsInterval > 0 else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + options.statsInterval, repeating: options.statsInterval)
        timer.setEventHandler { [weak self] in
            guard let self, self.stateStorage == .connected else { return }
            let generation = self.generation
            Task {
                guard let sample = await engine.stats() else { return }
                self.queue.async {
                    guard self.generation == generation, self.stateStorage == .connected else { return }
                    self.emit(.stats(sample))
                    self.send(Frame(.stats, payload: sample.json))
                }
            }
        }
        statsTimer = timer
        timer.resume()
    }

    private func stopStats() {
        statsTimer?.cancel()
        statsTimer = nil
        pingTimer?.cancel()
        pingTimer = nil
        awaitingPong = false
    }

    /// Keep-alive and dead-connection detection, see `SignalingOptions.pingInterval`.
    private func startPing(serverInterval: TimeInterval) {
        let interval = options.pingInterval ?? serverInterval
        guard interval > 0, pingTimer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in
            guard let self, self.stateStorage == .connected, let connection = self.connection else { return }
            if self.awaitingPong {
                // The previous ping was never answered: drop the socket; its close event (no
                // close frame) starts a reconnect.
                self.pingTimer?.cancel()
                self.pingTimer = nil
                connection.abort()
                return
            }
            self.awaitingPong = true
            self.send(Frame(.ping))
        }
        pingTimer = timer
        timer.resume()
    }
}
