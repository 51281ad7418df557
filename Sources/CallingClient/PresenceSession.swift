import CallingProtocol
import Foundation

/// The presence session's timers.
enum PresenceTimer: Hashable, Sendable {
    case connect
    case reconnect
    case closeGrace

    init(_ timer: ConnectionLifecycle.Timer) {
        switch timer {
        case .connect: self = .connect
        case .reconnect: self = .reconnect
        case .closeGrace: self = .closeGrace
        }
    }

    var lifecycle: ConnectionLifecycle.Timer {
        switch self {
        case .connect: .connect
        case .reconnect: .reconnect
        case .closeGrace: .closeGrace
        }
    }
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

/// The decision logic of `PresenceClient`, pure like `SignalingSession`: the snapshot, the
/// agent's status applied again after a reconnect (a restarted server has forgotten it; one that
/// kept it within `presence_grace_seconds` is left alone), and the typed events. Connect and its
/// timeout, reconnect with backoff once a session got its snapshot, token refresh on 4401,
/// terminal closes and the close grace are the nested `ConnectionLifecycle`'s.
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
    private(set) var lifecycle: ConnectionLifecycle
    var token: String { lifecycle.token }
    /// What the app sees; moved by the lifecycle's notices and the `connected` snapshot.
    private(set) var state: CallState = .idle
    /// The newest socket number (`ConnectionLifecycle.socket`).
    var socket: UInt64 { lifecycle.socket }
    private(set) var snapshot: PresenceSnapshot?
    /// The agent's status to restore after a reconnect; forgotten on `disconnect()`.
    private(set) var agentStatus: AgentStatusMemory?
    private var connectWaiter: Waiter?
    private var disconnectWaiters: [Waiter] = []
    private var out: [PresenceAction] = []

    init(token: String, settings: Settings) {
        self.settings = settings
        lifecycle = ConnectionLifecycle(token: token, settings: ConnectionLifecycle.Settings(
            host: settings.host, port: settings.port, connectTimeout: settings.connectTimeout,
            reconnectDelays: settings.reconnectDelays, maxReconnectAttempts: settings.maxReconnectAttempts,
            closeGrace: settings.closeGrace, hasTokenProvider: settings.hasTokenProvider, establishedBy: "connected"))
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
            connectWaiter = waiter
            run(.connect(token: newToken))
        case .disconnect(let waiter):
            if state.isTerminal || state == .idle {
                out.append(.resume(waiter, .success(.done)))
                return out
            }
            disconnectWaiters.append(waiter)
            run(.disconnect)
        case .socketText(let id, let text):
            guard lifecycle.isCurrent(id), let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { break }
            receive(type, json)
        case .socketClosed(let id, let code, let reason):
            guard lifecycle.isCurrent(id) else { break }
            if let code, !lifecycle.isClosing { emit(.closed(code: code, reason: reason)) }
            run(.socketClosed(id, code: code, reason: reason))
        case .socketFailed(let id, let status, let code, let message):
            run(.socketFailed(id, status: status, code: code, message: message))
        case .timerFired(let timer):
            run(.timerFired(timer.lifecycle))
        case .tokenRefreshed(let attempt, let result):
            run(.tokenRefreshed(attempt: attempt, result))
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

    /// Hands `input` to the lifecycle and translates what it asks for.
    private mutating func run(_ input: ConnectionLifecycle.Input) {
        for action in lifecycle.handle(input) {
            switch action {
            case .openSocket(let id, let token): out.append(.openSocket(id: id, path: settings.path, token: token))
            case .closeSocket(let code, let reason): out.append(.closeSocket(code: code, reason: reason))
            case .abortSocket: out.append(.abortSocket)
            case .arm(let timer, let delay): out.append(.arm(PresenceTimer(timer), after: delay))
            case .cancel(let timer): out.append(.cancel(PresenceTimer(timer)))
            case .refreshToken(let attempt): out.append(.refreshToken(attempt: attempt))
            case .notify(let notice): lifecycleNotice(notice)
            }
        }
    }

    private mutating func lifecycleNotice(_ notice: ConnectionLifecycle.Notice) {
        switch notice {
        case .connecting:
            setState(.connecting)
        case .socketDown:
            break
        case .lost(let error):
            emit(.disconnected(error))
        case .retrying(let attempt):
            setState(.reconnecting(attempt: attempt))
        case .failed(let error):
            setState(.failed(error))
            if let waiter = connectWaiter {
                // The first connect is never retried on its own: the app decides.
                connectWaiter = nil
                out.append(.resume(waiter, .failure(error)))
            }
        case .closed:
            // The app ended the session: a later connect() starts from what the server has.
            agentStatus = nil
            if let waiter = connectWaiter {
                connectWaiter = nil
                out.append(.resume(waiter, .failure(CallingError.notConnected)))
            }
            emit(.disconnected(nil))
            setState(.ended)
            for waiter in disconnectWaiters { out.append(.resume(waiter, .success(.done))) }
            disconnectWaiters.removeAll()
        }
    }

    private mutating func receive(_ type: String, _ json: JSONValue) {
        let payload = json["payload"].flatMap(JSONValue.nonNull)
        let from = json["from"]?.stringValue
        switch type {
        case "connected":
            run(.established)
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
