import CallingProtocol
import Foundation

/// A continuation the driver holds for an `async` API call; the session names it by number.
typealias Waiter = UInt64

/// What a resumed `async` API call returns.
enum WaiterOutcome: Sendable, Equatable {
    case welcome(Welcome)
    case chatAck(ChatAck)
    /// A `performRpc`: the response's payload, or why the call failed.
    case rpc(Result<String, RpcError>)
    case done
}

/// The session's timers. Arming a timer that is armed replaces it; the driver delivers a fire
/// only while the timer is still armed (a cancelled or replaced timer never fires).
enum SessionTimer: Hashable, Sendable {
    /// No `welcome` within `connectTimeout` of opening the socket.
    case connect
    /// The backoff before the next reconnect attempt.
    case reconnect
    /// A `sendChat` waiting for its `chat-ack` (or a 503 ack's retry delay).
    case chatAck(String)
    /// `setTyping(true)` turning itself off.
    case typing
    /// The keep-alive tick (repeats: re-armed on every fire).
    case ping
    /// The stats poll (repeats).
    case stats
    /// `disconnect()` waiting for the server's close echo.
    case closeGrace
    /// A call whose media has not connected yet.
    case mediaConnect(PeerID)
    /// An HTTP session's call whose connection went `disconnected`, waiting for it to recover.
    case mediaGrace(PeerID)
    /// A room call without ICE connectivity: it ends when this fires (`iceRestartWindow`).
    case iceWindow(PeerID)
    /// ICE `disconnected` for `iceDisconnectedDebounce`: the first restart.
    case iceDebounce(PeerID)
    /// The next ICE restart while the window is open (`iceRestartRetry`).
    case iceRetry(PeerID)
    /// An RPC call waiting for its `rpc-ack`, by request id.
    case rpcAck(String)
    /// An RPC call waiting for its `rpc-response`, by request id.
    case rpcResponse(String)

    init(_ timer: ConnectionLifecycle.Timer) {
        switch timer {
        case .connect: self = .connect
        case .reconnect: self = .reconnect
        case .closeGrace: self = .closeGrace
        }
    }
}

/// Work for the `MediaEngine`, which the driver runs serialised per peer.
enum MediaCommand: Sendable, Equatable {
    /// Create peer connection `connection` for `peer`, then an offer: `.mediaOfferCreated` or `.mediaCallFailed`.
    case startCall(PeerID, connection: UInt64, media: CallMedia, waiter: Waiter)
    /// Create peer connection `connection`, apply `offer` (`.mediaRemoteApplied`), then answer:
    /// `.mediaAnswerCreated` or `.mediaCallFailed`.
    case answerCall(PeerID, connection: UInt64, offer: SessionDescription, waiter: Waiter)
    /// Apply the peer's answer to our offer: `.mediaRemoteApplied` or `.mediaFailed`.
    case applyAnswer(PeerID, SessionDescription)
    case addCandidate(PeerID, IceCandidate)
    case close(PeerID, CallEndReason)
    /// Fetch fresh ICE servers and make an ICE-restart offer on `connection`: `.mediaRenewed` or
    /// `.mediaRenewFailed`.
    case restartIce(PeerID, connection: UInt64)
    /// Apply the peer's renewed offer (its ICE restart) on `connection` and answer it:
    /// `.mediaRemoteApplied`, then `.mediaRenewed` or `.mediaRenewFailed`.
    case renegotiate(PeerID, connection: UInt64, offer: SessionDescription)
}

/// What the session asks its driver to do, in order.
enum SessionAction: Sendable, Equatable {
    /// Open the room socket `id` (any previous one is already closed or abandoned).
    case openSocket(id: UInt64, path: String, token: String)
    /// Close the current socket with a close frame; its `closed` event follows.
    case closeSocket(code: UInt16, reason: String)
    /// Drop the current socket without a close frame; the session ignores its later events.
    case abortSocket
    case send(Frame)
    case arm(SessionTimer, after: TimeInterval)
    case cancel(SessionTimer)
    case resume(Waiter, Result<WaiterOutcome, CallingError>)
    case emit(CallingEvent)
    /// Ask the token provider for a fresh token: `.tokenRefreshed(attempt:)`.
    case refreshToken(attempt: Int)
    /// Fetch one history page after `since` (gap fill): `.gapPage` or `.gapFailed` with `generation`.
    case fetchGap(since: Int64, generation: UInt64)
    /// Ask the engine for a stats sample: `.statsCollected`.
    case collectStats
    case media(MediaCommand)
    /// Run the handler registered for `method`: `.rpcHandled` with its outcome.
    case invokeRpc(method: String, RpcInvocationData)
}

/// What happens to the session: API calls, socket events, timer fires, and the results of work
/// it handed out (token refresh, history pages, media engine calls).
enum SessionInput: Sendable {
    case connect(token: String?, waiter: Waiter)
    case disconnect(waiter: Waiter)
    case sendChat(clientID: String, text: String, meta: JSONValue?, waiter: Waiter)
    /// Any acked chat operation (`sendChat` with `replyTo`, `editChat`, `deleteChat`, `react`, `unreact`).
    case chatOperation(clientID: String, ChatOutbound, waiter: Waiter)
    case call(PeerID, media: CallMedia = .standard, waiter: Waiter)
    case accept(PeerID, waiter: Waiter)

    case socketOpened(UInt64)
    case socketText(UInt64, String)
    case socketClosed(UInt64, code: UInt16?, reason: String)
    case socketFailed(UInt64, status: Int?, code: String? = nil, message: String)

    case timerFired(SessionTimer)
    case tokenRefreshed(attempt: Int, Result<String, CallingError>)
    case gapPage(generation: UInt64, MessagesPage)
    case gapFailed(generation: UInt64, CallingError)
    case statsCollected(StatsSample?)

    case mediaOfferCreated(PeerID, connection: UInt64, SessionDescription, waiter: Waiter)
    case mediaAnswerCreated(PeerID, connection: UInt64, SessionDescription, waiter: Waiter)
    case mediaCallFailed(PeerID, connection: UInt64, String, waiter: Waiter)
    case mediaRemoteApplied(PeerID)
    case mediaFailed(String)
    case localCandidate(PeerID, connection: UInt64, IceCandidate)
    case connectionState(PeerID, connection: UInt64, PeerConnectionState)
    case remoteTrack(PeerID, RemoteTrack)
    /// Our ICE-restart offer, or our answer to a renewed offer, on `connection`.
    case mediaRenewed(PeerID, connection: UInt64, SessionDescription)
    case mediaRenewFailed(PeerID, connection: UInt64, String)
    /// `performRpc`: `id` is the request id the driver picked.
    case performRpc(id: String, to: PeerID, method: String, payload: String, timeout: TimeInterval, waiter: Waiter)
    /// A handler of an `invokeRpc` finished.
    case rpcHandled(RpcInvocationData, Result<String, RpcError>)
}

/// Synchronous API calls; they throw instead of resuming a waiter.
enum SessionCommand: Sendable {
    case sendData(JSONValue?, to: PeerID?)
    case hangup(PeerID, notify: Bool)
    case reject(PeerID)
    case ping
    case relay(FrameType, to: PeerID, payload: JSONValue)
    case setTyping(Bool)
    case markRead(Int64)
    case registerRpcMethod(String)
    case unregisterRpcMethod(String)
}

/// The decision logic of `SignalingClient`, with no sockets, threads or clocks (like
/// `CallingCore.Hub`): each input returns the actions to perform, in order. Time enters only as
/// timer fires. See docs/sdk.md "Reconnect" and "Chat" for the behaviour.
struct SignalingSession {
    struct Settings: Sendable {
        var path = "/v1/ws"
        /// Where the socket goes, for errors that name it.
        var host = ""
        var port = 0
        var reconnectDelays: [TimeInterval] = [1, 2, 4]
        var maxReconnectAttempts = 5
        var connectTimeout: TimeInterval = 10
        var chatAckTimeout: TimeInterval = 10
        var chatMaxAttempts = 3
        var typingTimeout: TimeInterval = 3
        var statsInterval: TimeInterval = 5
        var pingInterval: TimeInterval?
        var closeGrace: TimeInterval = 2
        var mediaConnectTimeout: TimeInterval = 15
        var mediaDisconnectGrace: TimeInterval = 5
        var iceRestartWindow: TimeInterval = 15
        var iceDisconnectedDebounce: TimeInterval = 2
        var iceRestartRetry: TimeInterval = 5
        var heldRelayLimit = 100
        var rpcAckTimeout: TimeInterval = 7
        var rpcMaxPayloadBytes = 15_360
        var hasMediaEngine = false
        var hasTokenProvider = false
    }

    let settings: Settings
    /// Connect, timeout, backoff, token refresh, close grace and socket numbers.
    private(set) var lifecycle: ConnectionLifecycle
    var token: String { lifecycle.token }
    /// What the app sees; moved by the lifecycle's notices and `welcome`.
    private(set) var state: CallState = .idle
    private(set) var peerID: PeerID?
    private(set) var roomID: RoomID?
    private(set) var callID: CallID?
    private(set) var peers: [PeerInfo] = []
    /// Pending sends, seen seqs, resume point and gap fill.
    private var chat: ChatLedger
    /// The highest chat seq seen (`ChatLedger.lastSeq`).
    var lastSeq: Int64 { chat.lastSeq }

    /// The newest socket number (`ConnectionLifecycle.socket`); the gap fill is numbered by it.
    var socket: UInt64 { lifecycle.socket }
    private var connectWaiter: Waiter?
    private var disconnectWaiters: [Waiter] = []
    private var typingOn = false

    /// Offers, candidates, peer connections and media timers of the calls.
    private var calls: CallTable
    /// Relays to peers in their reconnect grace.
    private var relays: RelayHold
    /// Open RPC calls and the registered methods (Rpc.swift).
    private var rpc: RpcLedger
    private var statsRunning = false
    /// The keep-alive while it runs (from `welcome` to the socket's end).
    private var keepAlive: KeepAlive?

    private struct KeepAlive {
        let every: TimeInterval
        /// A `ping` is out and its `pong` has not come back yet.
        var awaitingPong = false
    }

    /// Test hook: inbound frames for which this returns false are dropped (as if lost).
    var inboundFilter: (@Sendable (String, JSONValue?) -> Bool)?

    /// Actions produced by the input being handled.
    private var out: [SessionAction] = []

    init(token: String, settings: Settings) {
        self.settings = settings
        chat = ChatLedger(ackTimeout: settings.chatAckTimeout, maxSends: settings.chatMaxAttempts)
        calls = CallTable(hasMediaEngine: settings.hasMediaEngine, connectTimeout: settings.mediaConnectTimeout,
                          disconnectGrace: settings.mediaDisconnectGrace,
                          ice: CallTable.IceTiming(window: settings.iceRestartWindow, debounce: settings.iceDisconnectedDebounce,
                                                   retry: settings.iceRestartRetry))
        relays = RelayHold(limit: settings.heldRelayLimit)
        rpc = RpcLedger(ackTimeout: settings.rpcAckTimeout, maxPayloadBytes: settings.rpcMaxPayloadBytes)
        lifecycle = ConnectionLifecycle(token: token, settings: ConnectionLifecycle.Settings(
            host: settings.host, port: settings.port, connectTimeout: settings.connectTimeout,
            reconnectDelays: settings.reconnectDelays, maxReconnectAttempts: settings.maxReconnectAttempts,
            closeGrace: settings.closeGrace, hasTokenProvider: settings.hasTokenProvider, establishedBy: "welcome"))
    }

    var isConnected: Bool { state == .connected }

    // MARK: entry points

    mutating func handle(_ input: SessionInput) -> [SessionAction] {
        out = []
        switch input {
        case .connect(let token, let waiter): connect(token: token, waiter: waiter)
        case .disconnect(let waiter): disconnect(waiter)
        case .sendChat(let id, let text, let meta, let waiter): sendChat(id, .message(text: text, meta: meta), waiter)
        case .chatOperation(let id, let operation, let waiter): sendChat(id, operation, waiter)
        case .call(let peer, let media, let waiter): out += calls.call(peer, media, waiter, connected: state == .connected)
        case .accept(let peer, let waiter): out += calls.accept(peer, waiter, connected: state == .connected)
        case .socketOpened:
            break  // frames sent before `open` are queued by the transport; `welcome` is what counts
        case .socketText(let id, let text):
            guard lifecycle.isCurrent(id), let json = try? JSONParser.parse(text), let type = json["type"]?.stringValue else { break }
            receive(type: type, json: json)
        case .socketClosed(let id, let code, let reason):
            run(.socketClosed(id, code: code, reason: reason))
        case .socketFailed(let id, let status, let code, let message):
            run(.socketFailed(id, status: status, code: code, message: message))
        case .timerFired(let timer): timerFired(timer)
        case .tokenRefreshed(let attempt, let result): run(.tokenRefreshed(attempt: attempt, result))
        case .gapPage(let generation, let page): out += chat.gapPage(generation, page, own: peerID, socket: socket)
        case .gapFailed(let generation, let error): out += chat.gapFailed(generation, error)
        case .statsCollected(let sample):
            if let sample, state == .connected {
                emit(.stats(sample))
                send(Frame(.stats, payload: sample.json))
            }
        case .mediaOfferCreated(let peer, let connection, let offer, let waiter):
            out += calls.descriptionCreated(.offer, peer, connection: connection, offer, waiter: waiter,
                                            connected: state == .connected, own: peerID)
        case .mediaAnswerCreated(let peer, let connection, let answer, let waiter):
            out += calls.descriptionCreated(.answer, peer, connection: connection, answer, waiter: waiter,
                                            connected: state == .connected, own: peerID)
        case .mediaCallFailed(let peer, let connection, let message, let waiter):
            out += calls.callFailed(peer, connection: connection, message, waiter: waiter)
        case .mediaRemoteApplied(let peer): out += calls.remoteDescriptionApplied(peer)
        case .mediaFailed(let message): emit(.error(CallingError(.media(message))))
        case .localCandidate(let peer, let connection, let candidate):
            out += calls.localCandidate(peer, connection: connection, candidate, connected: state == .connected)
        case .remoteTrack(let peer, let track): out += calls.remoteTrack(peer, track)
        case .connectionState(let peer, let connection, let connectionState):
            out += calls.connectionState(peer, connection: connection, connectionState, connected: state == .connected)
        case .mediaRenewed(let peer, let connection, let description):
            out += calls.renewed(peer, connection: connection, description, connected: state == .connected, own: peerID)
        case .mediaRenewFailed(_, _, let message):
            // The restart is asked again while the window is open; the window ends the call.
            emit(.error(CallingError(.media(message))))
        case .performRpc(let id, let to, let method, let payload, let timeout, let waiter):
            out += rpc.perform(id: id, to: to, method: method, payload: payload, timeout: timeout, waiter: waiter,
                               connected: state == .connected)
        case .rpcHandled(let invocation, let result):
            // A response while the socket is down is lost: the caller's timeout covers it.
            if state == .connected { out += rpc.handled(invocation, result) }
        }
        return routed(out)
    }

    mutating func command(_ command: SessionCommand) throws(CallingError) -> [SessionAction] {
        out = []
        switch command {
        case .sendData(let payload, let to):
            try requireConnected()
            send(Frame(.data, to: to?.rawValue, payload: payload))
        case .hangup(let peer, let notify):
            out += calls.hangup(peer, notify: notify, connected: state == .connected)
        case .reject(let peer):
            try requireConnected()
            out += calls.reject(peer)
        case .ping:
            try requireConnected()
            send(Frame(.ping))
        case .relay(let type, let peer, let payload):
            try requireConnected()
            send(Frame(type, to: peer.rawValue, payload: payload))
        case .setTyping(let typing):
            setTyping(typing)
        case .markRead(let seq):
            try requireConnected()
            send(Frame(.read, payload: ["seq": .int(seq)]))
        case .registerRpcMethod(let method): rpc.register(method)
        case .unregisterRpcMethod(let method): rpc.unregister(method)
        }
        return routed(out)
    }

    /// Relays to a peer in its reconnect grace go into the hold instead of the socket; the others
    /// are logged, in case the server refuses them with 480.
    private mutating func routed(_ actions: [SessionAction]) -> [SessionAction] {
        var result: [SessionAction] = []
        result.reserveCapacity(actions.count)
        for action in actions {
            guard case .send(let frame) = action, let to = frame.to, RelayHold.types.contains(frame.type) else {
                result.append(action)
                continue
            }
            let peer = PeerID(to)
            if relays.isHeld(peer) {
                if !relays.push(peer, frame) {
                    result.append(.emit(.error(CallingError(.relayOverflow(peer: peer, frameType: frame.type,
                                                                           limit: relays.limit)))))
                }
                continue
            }
            relays.sent(peer, frame)
            result.append(action)
        }
        return result
    }

    private func requireConnected() throws(CallingError) {
        guard state == .connected else { throw CallingError.notConnected }
    }

    // MARK: helpers

    private mutating func emit(_ event: CallingEvent) { out.append(.emit(event)) }
    private mutating func send(_ frame: Frame) { out.append(.send(frame)) }

    private mutating func setState(_ new: CallState) {
        guard new != state else { return }
        state = new
        emit(.stateChanged(new))
    }

    // MARK: connecting

    private mutating func connect(token newToken: String?, waiter: Waiter) {
        switch state {
        case .idle, .ended, .failed: break
        default:
            out.append(.resume(waiter, .failure(CallingError(.invalidState("connect() while \(state)")))))
            return
        }
        connectWaiter = waiter
        run(.connect(token: newToken))
    }

    private mutating func disconnect(_ waiter: Waiter) {
        if state.isTerminal || state == .idle {
            out.append(.resume(waiter, .success(.done)))
            return
        }
        disconnectWaiters.append(waiter)
        out += calls.endAll(notify: false)
        relays.clear()
        // A clean leave: the server ends our seat at once instead of holding it for a reconnect.
        if lifecycle.isEstablished { send(Frame(.leave)) }
        run(.disconnect)
    }

    /// Hands `input` to the lifecycle and translates what it asks for.
    private mutating func run(_ input: ConnectionLifecycle.Input) {
        for action in lifecycle.handle(input) {
            switch action {
            case .openSocket(let id, let token):
                var path = settings.path
                if let resumeFrom = chat.socketOpening() { path += "?last_seq=\(resumeFrom)" }
                out.append(.openSocket(id: id, path: path, token: token))
            case .closeSocket(let code, let reason): out.append(.closeSocket(code: code, reason: reason))
            case .abortSocket: out.append(.abortSocket)
            case .arm(let timer, let delay): out.append(.arm(SessionTimer(timer), after: delay))
            case .cancel(let timer): out.append(.cancel(SessionTimer(timer)))
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
            stopTimers()
            typingOn = false
            out.append(.cancel(.typing))
        case .lost(let error):
            emit(.disconnected(error))
        case .retrying(let attempt):
            setState(.reconnecting(attempt: attempt))
        case .failed(let error):
            // Pending chats throw `error`; the first connect's caller gets it too.
            stopTimers()
            out += calls.endAll(notify: false)
            relays.clear()
            out += chat.rejectAll(error)
            out += rpc.failAll(error.description)
            setState(.failed(error))
            if let waiter = connectWaiter {
                connectWaiter = nil
                out.append(.resume(waiter, .failure(error)))
            }
        case .closed:
            // The app's `disconnect()` completed (or raced the socket's end).
            stopTimers()
            out += chat.rejectAll(CallingError.notConnected)
            out += rpc.failAll("disconnected")
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

    private mutating func timerFired(_ timer: SessionTimer) {
        switch timer {
        case .connect: run(.timerFired(.connect))
        case .reconnect: run(.timerFired(.reconnect))
        case .closeGrace: run(.timerFired(.closeGrace))
        case .chatAck(let id):
            out += chat.ackTimedOut(id, connected: state == .connected)
        case .typing:
            guard typingOn else { return }
            typingOn = false
            if state == .connected { send(Frame(.typing, payload: ["typing": false])) }
        case .ping:
            guard var keepAlive, state == .connected else { return }
            if keepAlive.awaitingPong {
                // The previous ping was never answered (half-open TCP): drop the socket and
                // reconnect as after any drop.
                run(.dropped(CallingError(.closed(code: nil, reason: "no pong within \(keepAlive.every) s"))))
                return
            }
            keepAlive.awaitingPong = true
            self.keepAlive = keepAlive
            send(Frame(.ping))
            out.append(.arm(.ping, after: keepAlive.every))
        case .stats:
            guard statsRunning, state == .connected else { return }
            out.append(.collectStats)
            out.append(.arm(.stats, after: settings.statsInterval))
        case .mediaConnect(let peer):
            out += calls.mediaConnectTimedOut(peer, connected: state == .connected)
        case .mediaGrace(let peer):
            out += calls.mediaGraceEnded(peer, connected: state == .connected)
        case .iceWindow, .iceDebounce, .iceRetry:
            out += calls.iceTimerFired(timer, connected: state == .connected)
        case .rpcAck, .rpcResponse:
            out += rpc.timedOut(timer)
        }
    }

    // MARK: inbound frames

    private mutating func receive(type: String, json: JSONValue) {
        let payload = json["payload"].flatMap(JSONValue.nonNull)
        if let filter = inboundFilter, !filter(type, payload) { return }
        let from = json["from"]?.stringValue.map { PeerID($0) }
        switch type {
        case "welcome": handleWelcome(payload ?? [:])
        case "error": handleError(json, payload: payload)
        case "chat-ack": out += chat.ack(json, payload: payload)
        case "chat", "chat-edit", "chat-delete", "chat-react":
            guard let item = ChatInbound(type: type, payload: payload, from: json["from"]?.stringValue) else { return }
            out += chat.received(item, own: peerID, socket: socket)
        case "typing":
            guard let from, let typing = payload?["typing"]?.boolValue else { return }
            emit(.typing(from: from, isTyping: typing))
        case "read":
            guard let from, let seq = payload?["seq"]?.int64Value else { return }
            emit(.read(from: from, seq: seq))
        case "peer-joined":
            guard let info = PeerInfo(payload) else { return }
            peers.removeAll { $0.peerID == info.peerID }
            peers.append(info)
            emit(.peerJoined(info))
        case "peer-left":
            guard let id = (payload?["peer_id"]?.stringValue).map({ PeerID($0) }) ?? from else { return }
            peers.removeAll { $0.peerID == id }
            relays.drop(id)
            out += calls.peerGone(id)
            out += rpc.peerLeft(id)
            emit(.peerLeft(id))
        case "peer-reconnecting":
            // The peer's socket dropped and the server holds its seat: its call stays up (media
            // is peer to peer), relays to it wait in the hold until `peer-resumed`.
            guard let id = (payload?["peer_id"]?.stringValue).map({ PeerID($0) }) ?? from else { return }
            relays.hold(id)
            calls.peerReconnecting(id)
            for index in peers.indices where peers[index].peerID == id { peers[index].reconnecting = true }
            emit(.peerReconnecting(id))
        case "peer-resumed":
            guard let id = (payload?["peer_id"]?.stringValue).map({ PeerID($0) }) ?? from else { return }
            for frame in relays.release(id) { send(frame) }
            calls.peerResumed(id)
            for index in peers.indices where peers[index].peerID == id { peers[index].reconnecting = false }
            emit(.peerResumed(id))
            out += calls.signalingResumed(id, connected: state == .connected)
        case "offer":
            guard let from else { return }
            out += calls.offer(from: from, payload)
        case "answer":
            guard let from else { return }
            out += calls.answer(from: from, payload)
        case "candidate":
            guard let from else { return }
            out += calls.candidate(from: from, payload)
        case "data":
            guard let from else { return }
            out += calls.data(from: from, payload)
        case "meter":
            let meter = MeterUpdate(state: payload?["state"]?.stringValue ?? "", elapsedSeconds: payload?["elapsed_s"]?.int64Value,
                                    limitSeconds: payload?["limit_s"]?.int64Value,
                                    remainingSeconds: payload?["remaining_s"]?.int64Value, raw: payload ?? .null)
            emit(.meter(meter))
            if meter.state == "ended" { emit(.consultationEnded(meter)) }
        case "rpc-request":
            if let payload { out += rpc.request(from: from, payload) }
        case "rpc-ack":
            if let id = payload?["id"]?.stringValue { out += rpc.ack(from: from, id: id) }
        case "rpc-response":
            if let payload { out += rpc.response(from: from, payload) }
        case "pong":
            keepAlive?.awaitingPong = false
        default:
            break  // anything newer than this SDK
        }
    }

    private mutating func handleWelcome(_ payload: JSONValue) {
        run(.established)
        let resumed = payload["recovered"] != nil
        let welcome = Welcome(
            peerID: PeerID(payload["peer_id"]?.stringValue ?? ""), roomID: RoomID(payload["room_id"]?.stringValue ?? ""),
            callID: payload["call_id"]?.stringValue.map { CallID($0) }, role: payload["role"]?.stringValue ?? "peer",
            name: payload["name"]?.stringValue, peers: (payload["peers"]?.arrayValue ?? []).compactMap { PeerInfo($0) },
            lastSeq: payload["last_seq"]?.int64Value ?? 0, readSeq: payload["read_seq"]?.int64Value ?? 0,
            unread: payload["unread"]?.int64Value ?? 0, resumed: resumed,
            recovered: payload["recovered"]?.boolValue ?? true, replayCount: Int(payload["replay_count"]?.int64Value ?? 0),
            raw: payload)
        peerID = welcome.peerID
        roomID = welcome.roomID
        callID = welcome.callID
        chat.welcomed(resumed: resumed, recovered: welcome.recovered, replayCount: welcome.replayCount,
                      roomLastSeq: welcome.lastSeq)
        // A peer listed `reconnecting: true` is in its grace: hold relays to it (its
        // `peer-reconnecting` may have gone to our old socket). A held peer listed without it came
        // back while we were away: no `peer-resumed` will come, send what was held now.
        for peer in welcome.peers {
            if peer.reconnecting {
                relays.hold(peer.peerID)
                calls.peerReconnecting(peer.peerID)
            } else {
                for frame in relays.release(peer.peerID) { send(frame) }
                calls.peerResumed(peer.peerID)
            }
        }
        var kept: [PeerID] = []
        if resumed {
            // The roster may have changed while we were away: report the difference, end (with a
            // hangup event, never silently) the calls and ringing offers whose peer is gone, and
            // keep the rest: their media is peer to peer.
            let before = Set(peers.map(\.peerID))
            let after = Set(welcome.peers.map(\.peerID))
            for gone in calls.peersInCalls.union(before).sorted(by: { $0.rawValue < $1.rawValue }) where !after.contains(gone) {
                out += calls.peerGone(gone)
                out += rpc.peerLeft(gone)
                if before.contains(gone) { emit(.peerLeft(gone)) }
            }
            for held in relays.heldPeers where !after.contains(held) { relays.drop(held) }
            kept = calls.callPeers.sorted { $0.rawValue < $1.rawValue }
            peers = welcome.peers
            for joined in welcome.peers where !before.contains(joined.peerID) { emit(.peerJoined(joined)) }
        } else {
            peers = welcome.peers
        }
        setState(.connected)
        emit(.connected(welcome))
        if let waiter = connectWaiter {
            connectWaiter = nil
            out.append(.resume(waiter, .success(.welcome(welcome))))
        }
        // A kept call whose ICE is not connected restarts now that signaling is back.
        for peer in kept { out += calls.signalingResumed(peer, connected: true) }
        let (resend, gapFill) = chat.resume(socket: socket)
        out += resend
        startTimers(serverInterval: Double(payload["ping_interval_ms"]?.int64Value ?? 25_000) / 1000)
        out += gapFill
    }

    private mutating func handleError(_ json: JSONValue, payload: JSONValue?) {
        let error = CallingError(.server(code: Int(json["error"]?["code"]?.int64Value ?? 0),
                                         message: json["error"]?["message"]?.stringValue ?? ""))
        if !lifecycle.isEstablished, connectWaiter != nil {
            // The first connect refused: `connect()` throws it, nothing is retried.
            emit(.error(error))
            run(.refused(error))
            return
        }
        // A refused `rpc-request` of ours fails its call (the error names the request id).
        if let code = error.serverCode, let failed = rpc.refused(code: code, message: json["error"]?["message"]?.stringValue ?? "",
                                                                payload: payload) {
            out += failed
            return
        }
        if error.serverCode == ErrorCode.peerReconnecting.rawValue, let type = payload?["type"]?.stringValue,
           RelayHold.types.contains(type), relays.refused(type) != nil
        {
            // Sent again on `peer-resumed`, dropped on `peer-left`: nothing for the app to do.
            return
        }
        emit(.error(error))
        // A refused `chat` frame (not a refused chat, which comes as a `chat-ack` with an error)
        // would otherwise wait out every ack timeout. A temporary refusal (429) is retried by
        // the ack timer like a lost ack.
        if let type = payload?["type"]?.stringValue, ChatOutbound.frameTypes.contains(type), !error.isRetryable {
            out += chat.chatFrameRefused(type, error)
        }
    }

    // MARK: chat

    private mutating func sendChat(_ id: String, _ operation: ChatOutbound, _ waiter: Waiter) {
        switch state {
        case .connected, .connecting, .reconnecting: break
        default: return out.append(.resume(waiter, .failure(CallingError.notConnected)))
        }
        out += chat.send(id, operation, waiter: waiter, connected: state == .connected)
    }

    private mutating func setTyping(_ typing: Bool) {
        out.append(.cancel(.typing))
        guard state == .connected else { return }
        if typing {
            if !typingOn { send(Frame(.typing, payload: ["typing": true])) }
            typingOn = true
            out.append(.arm(.typing, after: settings.typingTimeout))
        } else if typingOn {
            typingOn = false
            send(Frame(.typing, payload: ["typing": false]))
        }
    }

    // MARK: periodic timers

    private mutating func startTimers(serverInterval: TimeInterval) {
        if settings.hasMediaEngine, !statsRunning, settings.statsInterval > 0 {
            statsRunning = true
            out.append(.arm(.stats, after: settings.statsInterval))
        }
        // Keep-alive and dead-connection detection, see `SignalingOptions.pingInterval`.
        let interval = settings.pingInterval ?? serverInterval
        if interval > 0, keepAlive == nil {
            keepAlive = KeepAlive(every: interval)
            out.append(.arm(.ping, after: interval))
        }
    }

    private mutating func stopTimers() {
        if statsRunning { out.append(.cancel(.stats)) }
        if keepAlive != nil { out.append(.cancel(.ping)) }
        statsRunning = false
        keepAlive = nil
    }
}
