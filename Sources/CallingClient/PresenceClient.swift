import CallingCore
import CallingTransport
import Dispatch
import Foundation

/// What a `PresenceClient` reports. Payloads are passed through as JSON, like the iOS and Android
/// SDKs (docs/sdk.md, "Client SDK compatibility"); the few fields apps always need are typed.
public enum PresenceEvent: Sendable, Equatable {
    /// The snapshot (`connected` frame): `{peer_id, role, agents, server_time}`.
    case connected(JSONValue)
    /// One agent's new status `{agent_id, status, note, queues, updated_at}`.
    case status(JSONValue)
    /// For an agent: an offer `{request_id, from, name, queue, metadata, expires_at}` to accept or
    /// decline. For a caller: the ack `{request_id, agent_id, state: "ringing", queue, expires_at}`.
    case request(JSONValue)
    /// The call exists: connect a `SignalingClient` with `token`.
    case accepted(PresenceAccepted)
    /// The request ended without a call; `reason` is `declined`, `cancelled`, `timeout`,
    /// `disconnected` or `failed`.
    case ended(requestId: String, reason: String)
    /// A refused frame; the connection stays open. `payload` names the frame type and request id.
    case error(CallingError, payload: JSONValue?)
    /// The server closed the socket with a close frame. 4400/4401 are terminal.
    case closed(code: UInt16, reason: String)
    /// The socket ended without a close frame from the server, or after `disconnect()`.
    case disconnected
}

/// The `accepted` frame: the room and this side's room token.
public struct PresenceAccepted: Sendable, Equatable {
    public var requestId: String
    public var callId: CallID
    public var roomId: RoomID
    public var agentId: PeerID
    public var callerId: PeerID
    /// A room token for `/v1/ws` with `sub` = our own id.
    public var token: String
    public var raw: JSONValue
}

/// A client of the presence channel (`/v1/presence`): agents publish a status and answer call
/// requests, callers request calls, dashboards watch. See docs/protocol.md "Presence channel".
///
/// No automatic reconnect (presence state is in server memory; an agent that reconnects within
/// the grace period keeps its status): on `closed` with a non-terminal code or `disconnected`,
/// call `connect()` again, with a fresh token if needed.
///
/// Threading: like `SignalingClient`, one private serial queue owns the state; methods may be
/// called from any thread; events are yielded from that queue in order.
public final class PresenceClient: @unchecked Sendable {
    // @unchecked: every `var` is touched only on `queue`; `let`s are immutable and Sendable.
    public let events: AsyncStream<PresenceEvent>
    public let url: URL

    private let queue = DispatchQueue(label: "calling-presence.state")
    private let queueKey = DispatchSpecificKey<UInt8>()
    private let continuation: AsyncStream<PresenceEvent>.Continuation
    private let loop: WebSocketClientLoop
    private let connectTimeout: TimeInterval
    private let tls: TLSClientOptions
    private var token: String
    private var queues: [String]?
    private var connection: WebSocketClientConnection?
    private var generation: UInt64 = 0
    private var connectWaiter: CheckedContinuation<JSONValue, any Error>?
    private var disconnectWaiters: [CheckedContinuation<Void, Never>] = []
    private var isConnectedStorage = false

    /// `url` is `ws://host:port` or `wss://host[:port]` (verified as `tls` says; other schemes make
    /// `connect()` throw `unsupportedURL`); `token` needs `scope` `presence` and `role` `agent`,
    /// `caller` or `dashboard`. `queues` (agents only) replaces the agent's queues at connect.
    public init(url: URL, token: String, queues: [String]? = nil, loop: WebSocketClientLoop? = nil,
                connectTimeout: TimeInterval = 10, tls: TLSClientOptions = TLSClientOptions())
    {
        self.url = url
        self.tls = tls
        self.token = token
        self.queues = queues
        self.loop = loop ?? SignalingClient.sharedLoop
        self.connectTimeout = connectTimeout
        (events, continuation) = AsyncStream.makeStream(of: PresenceEvent.self, bufferingPolicy: .unbounded)
        queue.setSpecific(key: queueKey, value: 1)
    }

    deinit {
        connection?.close(code: CloseCode.normal.rawValue, reason: "normal")
        continuation.finish()
    }

    public var isConnected: Bool { onQueue { isConnectedStorage } }

    /// Connects and returns the `connected` snapshot. `token`, when given, replaces the token
    /// (for a reconnect after 4401). Throws `CallingError` on a refused upgrade or timeout.
    @discardableResult
    public func connect(token newToken: String? = nil) async throws -> JSONValue {
        try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<JSONValue, any Error>) in
            queue.async { [self] in
                guard connection == nil, connectWaiter == nil else {
                    return waiter.resume(throwing: CallingError(.invalidState("already connected")))
                }
                let endpoint: ClientEndpoint
                do {
                    endpoint = try REST.endpoint(for: url)
                } catch {
                    return waiter.resume(throwing: error)
                }
                if let newToken { token = newToken }
                connectWaiter = waiter
                generation += 1
                let generation = generation
                var path = url.path.isEmpty || url.path == "/" ? "/v1/presence" : url.path
                if let queues { path += "?queues=" + queryEncoded(queues.joined(separator: ",")) }
                connection = loop.connect(host: endpoint.host, port: endpoint.port, path: path,
                                          headers: ["Authorization": "Bearer \(token)"],
                                          tls: endpoint.usesTLS ? tls : nil) { [weak self] event in
                    // lws service thread: hop to the queue.
                    guard let self else { return }
                    self.queue.async { self.handle(event, generation: generation) }
                }
                queue.asyncAfter(deadline: .now() + connectTimeout) { [weak self] in
                    guard let self, self.generation == generation, let waiter = self.connectWaiter else { return }
                    self.connectWaiter = nil
                    self.generation += 1
                    self.connection?.abort()
                    self.connection = nil
                    waiter.resume(throwing: CallingError(.timedOut("connected")))
                    // A disconnect() issued meanwhile waits for a terminal event this abort's old
                    // generation will never deliver: release it here.
                    self.finishDisconnect()
                }
            }
        }
    }

    /// Agent: sets status (`available`, `busy`, `away`, `offline`), note and queues.
    public func setStatus(_ status: String, note: String? = nil, queues: [String]? = nil) throws {
        var payload: [String: JSONValue] = ["status": .string(status)]
        if let note { payload["note"] = .string(note) }
        if let queues { payload["queues"] = .array(queues.map { .string($0) }) }
        try send("status", .object(payload))
    }

    /// Caller: asks `agentId` for a call. The ack arrives as `request`, the outcome as
    /// `accepted` or `ended`.
    public func request(agentId: PeerID, metadata: JSONValue? = nil) throws {
        var payload: [String: JSONValue] = ["agent_id": .string(agentId.rawValue)]
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
    public func accept(_ requestId: String) throws { try send("accept", ["request_id": .string(requestId)]) }
    /// Agent: declines a ringing request.
    public func decline(_ requestId: String) throws { try send("decline", ["request_id": .string(requestId)]) }
    /// Caller: withdraws its request.
    public func cancel(_ requestId: String) throws { try send("cancel", ["request_id": .string(requestId)]) }
    /// Keep-alive; the server answers `pong`.
    public func ping() throws { try send("ping", nil) }

    /// Closes the socket (1000); `disconnected` follows. Returns once it is closed.
    public func disconnect() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            queue.async { [self] in
                guard let connection else { return done.resume() }
                disconnectWaiters.append(done)
                connection.close(code: CloseCode.normal.rawValue, reason: "normal")
                let generation = generation
                queue.asyncAfter(deadline: .now() + 2) { [self] in
                    if self.generation == generation { self.connection?.abort() }
                }
            }
        }
    }

    // MARK: internals (queue)

    private func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        if DispatchQueue.getSpecific(key: queueKey) != nil { return try body() }
        return try queue.sync(execute: body)
    }

    private func send(_ type: String, _ payload: JSONValue?) throws {
        try onQueue {
            guard isConnectedStorage, let connection else { throw CallingError.notConnected }
            connection.send(bytes: Frame(type: type, payload: payload).encoded(), binary: false)
        }
    }

    private func handle(_ event: WebSocketClientEvent, generation: UInt64) {
        guard generation == self.generation else { return }
        switch event {
        case .open, .binary:
            break
        case .text(let text):
            guard let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { return }
            handleFrame(type, json)
        case .closed(let code, let reason):
            ended(error: CallingError(.closed(code: code, reason: reason)))
            if let code, code != CloseCode.normal.rawValue || disconnectWaiters.isEmpty {
                continuation.yield(.closed(code: code, reason: reason))
            } else {
                continuation.yield(.disconnected)
            }
            finishDisconnect()
        case .failed(let status, let message):
            ended(error: CallingError(.connectFailed(status: status, message: message)))
            finishDisconnect()
        }
    }

    private func ended(error: CallingError) {
        connection = nil
        isConnectedStorage = false
        if let waiter = connectWaiter {
            connectWaiter = nil
            waiter.resume(throwing: error)
        }
    }

    private func finishDisconnect() {
        let waiters = disconnectWaiters
        disconnectWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    private func handleFrame(_ type: String, _ json: JSONValue) {
        let payload = json["payload"].flatMap(JSONValue.nonNull) ?? .null
        switch type {
        case "connected":
            isConnectedStorage = true
            continuation.yield(.connected(payload))
            if let waiter = connectWaiter {
                connectWaiter = nil
                waiter.resume(returning: payload)
            }
        case "status": continuation.yield(.status(payload))
        case "request": continuation.yield(.request(payload))
        case "accepted":
            guard let token = payload["token"]?.stringValue else { return }
            continuation.yield(.accepted(PresenceAccepted(
                requestId: payload["request_id"]?.stringValue ?? "", callId: CallID(payload["call_id"]?.stringValue ?? ""),
                roomId: RoomID(payload["room_id"]?.stringValue ?? ""), agentId: PeerID(payload["agent_id"]?.stringValue ?? ""),
                callerId: PeerID(payload["caller_id"]?.stringValue ?? ""), token: token, raw: payload)))
        case "ended":
            continuation.yield(.ended(requestId: payload["request_id"]?.stringValue ?? "",
                                      reason: payload["reason"]?.stringValue ?? ""))
        case "error":
            let error = CallingError(.server(code: Int(json["error"]?["code"]?.int64Value ?? 0),
                                             message: json["error"]?["message"]?.stringValue ?? ""))
            continuation.yield(.error(error, payload: payload == .null ? nil : payload))
        default:
            break  // pong, and types newer than this SDK
        }
    }
}
