import CallingProtocol
import Foundation

/// The presence session's timers.
enum PresenceTimer: Hashable, Sendable {
    case connect
    case reconnect
    case closeGrace
}

/// What a resumed `PresenceClient` call returns.
enum PresenceOutcome: Sendable, Equatable {
    case snapshot(PresenceSnapshot)
    case done
}

/// What the presence session asks its driver to do.
enum PresenceAction: Sendable, Equatable {
    case openSocket(id: UInt64, path: String, token: String)
    case closeSocket(code: UInt16, reason: String)
    case abortSocket
    case send(Frame)
    case arm(PresenceTimer, after: TimeInterval)
    case cancel(PresenceTimer)
    case resume(Waiter, Result<PresenceOutcome, CallingError>)
    case emit(PresenceEvent)
    case refreshToken(attempt: Int)
}

enum PresenceInput: Sendable {
    case connect(token: String?, waiter: Waiter)
    case disconnect(waiter: Waiter)
    case socketText(UInt64, String)
    case socketClosed(UInt64, code: UInt16?, reason: String)
    case socketFailed(UInt64, status: Int?, code: String? = nil, message: String)
    case timerFired(PresenceTimer)
    case tokenRefreshed(attempt: Int, Result<String, CallingError>)
}

/// The status an agent last had: what the app set with `setStatus`, then what the server's
/// `status` frames about the agent said (which also covers the server's own changes, such as
/// `busy` on `accept`). A field that is nil was never known, and is left as the server has it.
struct AgentStatusMemory: Sendable, Equatable {
    var status: PresenceStatus
    /// `.some(nil)`: the note was cleared.
    var note: String??
    var queues: [String]?

    /// Whether the server's view of the agent already is this.
    func matches(_ agent: AgentPresence) -> Bool {
        guard agent.status == status else { return false }
        if let note, note != agent.note { return false }
        if let queues, queues.sorted() != agent.queues.sorted() { return false }
        return true
    }

    /// The `status` frame that sets it.
    var frame: Frame {
        var payload: [String: JSONValue] = ["status": .string(status.rawValue)]
        if let note { payload["note"] = note.map(JSONValue.string) ?? .null }
        if let queues { payload["queues"] = .array(queues.map { .string($0) }) }
        return Frame(type: "status", payload: .object(payload))
    }
}

/// The decision logic of `PresenceClient`, pure like `SignalingSession`: connect and its
/// timeout, automatic reconnect with backoff once a session got its snapshot, the agent's status
/// applied again after a reconnect (a restarted server has forgotten it; one that kept it within
/// `presence_grace_seconds` is left alone), token refresh on 4401, terminal closes, and the typed
/// events.
struct PresenceSession {
    struct Settings: Sendable {
        var path = "/v1/presence"
        var host = ""
        var port = 0
        var connectTimeout: TimeInterval = 10
        var reconnectDelays: [TimeInterval] = [1, 2, 4]
        var maxReconnectAttempts = 5
        var closeGrace: TimeInterval = 2
        var hasTokenProvider = false
    }

    let settings: Settings
    private(set) var token: String
    private(set) var state: CallState = .idle
    private(set) var socket: UInt64 = 0
    private(set) var snapshot: PresenceSnapshot?
    /// The agent's status to restore after a reconnect; forgotten on `disconnect()`.
    private(set) var agentStatus: AgentStatusMemory?
    private var socketActive = false
    private var welcomed = false
    private var connectWaiter: Waiter?
    private var disconnectWaiters: [Waiter] = []
    private var userDisconnected = false
    private var reconnectAttempt = 0
    private var refreshing: Int?
    private var out: [PresenceAction] = []

    init(token: String, settings: Settings) {
        self.token = token
        self.settings = settings
    }

    var isConnected: Bool { state == .connected }

    mutating func handle(_ input: PresenceInput) -> [PresenceAction] {
        out = []
        switch input {
        case .connect(let newToken, let waiter):
            switch state {
            case .idle, .ended, .failed: break
            default:
                out.append(.resume(waiter, .failure(CallingError(.invalidState("connect() while \(state)")))))
                return out
            }
            if let newToken { token = newToken }
            connectWaiter = waiter
            userDisconnected = false
            reconnectAttempt = 0
            setState(.connecting)
            openSocket()
        case .disconnect(let waiter):
            if state.isTerminal || state == .idle {
                out.append(.resume(waiter, .success(.done)))
                return out
            }
            userDisconnected = true
            disconnectWaiters.append(waiter)
            if socketActive {
                out.append(.closeSocket(code: CloseCode.normal.rawValue, reason: "normal"))
                out.append(.arm(.closeGrace, after: settings.closeGrace))
            } else {
                cancelReconnect()
                finish()
            }
        case .socketText(let id, let text):
            guard id == socket, let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { break }
            receive(type, json)
        case .socketClosed(let id, let code, let reason):
            guard id == socket else { break }
            socketActive = false
            if let code, !userDisconnected { emit(.closed(code: code, reason: reason)) }
            ended(CallingError(.closed(code: code, reason: reason)))
        case .socketFailed(let id, let status, let code, let message):
            guard id == socket else { break }
            socketActive = false
            ended(CallingError.socketFailed(status: status, message: message, host: settings.host, port: settings.port,
                                            code: code))
        case .timerFired(let timer):
            switch timer {
            case .connect:
                guard !welcomed, socketActive else { break }
                abandon()
                ended(CallingError(.timedOut("connected")))
            case .reconnect:
                guard case .reconnecting(let attempt) = state else { break }
                if settings.hasTokenProvider {
                    refreshing = attempt
                    out.append(.refreshToken(attempt: attempt))
                } else {
                    openSocket()
                }
            case .closeGrace:
                guard userDisconnected, !state.isTerminal else { break }
                abandon()
                finish()
            }
        case .tokenRefreshed(let attempt, let result):
            guard refreshing == attempt, case .reconnecting(attempt) = state else { break }
            refreshing = nil
            switch result {
            case .success(let fresh):
                token = fresh
                openSocket()
            case .failure(let error):
                if error.isRetryable { scheduleReconnect(error) } else { fail(error) }
            }
        }
        return out
    }

    /// A client frame; only while connected.
    mutating func send(_ type: String, _ payload: JSONValue?) throws(CallingError) -> [PresenceAction] {
        guard state == .connected else { throw CallingError.notConnected }
        return [.send(Frame(type: type, payload: payload))]
    }

    /// Agent: sets the status (nil `note`/`queues`: unchanged) and remembers it for reconnects.
    mutating func setStatus(_ status: PresenceStatus, note: String?, queues: [String]?) throws(CallingError)
        -> [PresenceAction]
    {
        guard state == .connected else { throw CallingError.notConnected }
        var memory = agentStatus ?? AgentStatusMemory(status: status)
        memory.status = status
        if let note { memory.note = .some(note) }
        if let queues { memory.queues = queues }
        agentStatus = memory
        // The frame says only what the app said: a note or queues it left out stay as they are.
        return [.send(AgentStatusMemory(status: status, note: note.map { .some($0) }, queues: queues).frame)]
    }

    private mutating func emit(_ event: PresenceEvent) { out.append(.emit(event)) }

    private mutating func setState(_ new: CallState) {
        guard new != state else { return }
        state = new
        emit(.stateChanged(new))
    }

    private mutating func openSocket() {
        socket += 1
        socketActive = true
        welcomed = false
        out.append(.openSocket(id: socket, path: settings.path, token: token))
        out.append(.arm(.connect, after: settings.connectTimeout))
    }

    private mutating func abandon() {
        out.append(.abortSocket)
        socket += 1
        socketActive = false
    }

    private mutating func cancelReconnect() {
        out.append(.cancel(.reconnect))
        refreshing = nil
    }

    /// The socket ended: finished, failed, or reconnect.
    private mutating func ended(_ error: CallingError) {
        out.append(.cancel(.connect))
        out.append(.cancel(.closeGrace))
        welcomed = false
        if userDisconnected { return finish() }
        emit(.disconnected(error))
        if let waiter = connectWaiter {
            // The first connect is never retried on its own: the app decides.
            connectWaiter = nil
            fail(error)
            out.append(.resume(waiter, .failure(error)))
            return
        }
        let refreshable = settings.hasTokenProvider && error.closeCode == CloseCode.tokenExpired.rawValue
        if refreshable || error.isRetryable { scheduleReconnect(error) } else { fail(error) }
    }

    private mutating func scheduleReconnect(_ error: CallingError) {
        reconnectAttempt += 1
        guard reconnectAttempt <= settings.maxReconnectAttempts else { return fail(error) }
        setState(.reconnecting(attempt: reconnectAttempt))
        let delays = settings.reconnectDelays
        out.append(.arm(.reconnect, after: delays.isEmpty ? 0 : delays[min(reconnectAttempt - 1, delays.count - 1)]))
    }

    private mutating func fail(_ error: CallingError) {
        if socketActive { abandon() }
        cancelReconnect()
        setState(.failed(error))
    }

    private mutating func finish() {
        // The app ended the session: a later connect() starts from what the server has.
        agentStatus = nil
        socket += 1
        socketActive = false
        out.append(.cancel(.connect))
        out.append(.cancel(.closeGrace))
        if let waiter = connectWaiter {
            connectWaiter = nil
            out.append(.resume(waiter, .failure(CallingError.notConnected)))
        }
        emit(.disconnected(nil))
        setState(.ended)
        for waiter in disconnectWaiters { out.append(.resume(waiter, .success(.done))) }
        disconnectWaiters.removeAll()
    }

    private mutating func receive(_ type: String, _ json: JSONValue) {
        let payload = json["payload"].flatMap(JSONValue.nonNull)
        let from = json["from"]?.stringValue
        switch type {
        case "connected":
            out.append(.cancel(.connect))
            welcomed = true
            reconnectAttempt = 0
            let snapshot = PresenceSnapshot(payload ?? [:])
            self.snapshot = snapshot
            setState(.connected)
            emit(.connected(snapshot))
            // A restarted server brings the agent back `available` with the URL's queues: set
            // what the agent had again. Within the grace period the server kept it: nothing to do.
            if let memory = agentStatus, !(snapshot.agents.first { $0.agentID == snapshot.peerID }.map(memory.matches) ?? false) {
                out.append(.send(memory.frame))
            }
            if let waiter = connectWaiter {
                connectWaiter = nil
                out.append(.resume(waiter, .success(.snapshot(snapshot))))
            }
        case "status":
            guard let agent = AgentPresence(payload) else { break }
            if agent.agentID == snapshot?.peerID {
                agentStatus = AgentStatusMemory(status: agent.status, note: .some(agent.note), queues: agent.queues)
            }
            emit(.status(agent))
        case "request":
            if let request = PresenceRequest(payload, from: from) { emit(.request(request)) }
        case "accepted":
            if let accepted = PresenceAccepted(payload) { emit(.accepted(accepted)) }
        case "ended":
            if let ended = PresenceEnded(payload) { emit(.ended(ended)) }
        case "error":
            let error = CallingError(.server(code: Int(json["error"]?["code"]?.int64Value ?? 0),
                                             message: json["error"]?["message"]?.stringValue ?? ""))
            emit(.error(error, requestID: payload?["request_id"]?.stringValue, frameType: payload?["type"]?.stringValue))
        default:
            break  // pong, and types newer than this SDK
        }
    }
}
