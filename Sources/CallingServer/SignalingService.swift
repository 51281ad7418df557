import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// What a connection proved at upgrade time, handed from `shouldUpgrade` to `didOpen`.
struct JoinTicket: Sendable {
    var identity: PeerIdentity
    var expiresAt: Date
    /// `last_seq` from the query: the client wants the messages after it replayed.
    var resumeAfter: Int64?
}

/// The room protocol on top of the transport: authenticates upgrades, decodes frames, runs the hub
/// and carries out its effects. Lives on the service thread (every delegate call arrives there),
/// so its state needs no locks; store completions come back through `transport.post`.
// @unchecked Sendable: every stored property is touched only on the service thread. Store completions
// run elsewhere and capture `self` solely to hop back through `transport.post`.
final class SignalingService: WebSocketServerDelegate, @unchecked Sendable {
    struct Session {
        var ticket: JoinTicket
        var limiter: RateLimiter
        var joined = false
        /// Set once the expiry close is under way, so it is counted and sent once.
        var expired = false
        /// Frames that arrived before the join finished loading chat state, in order.
        var early: [ClientMessage] = []
    }

    let config: ServerConfig
    let verifier: TokenVerifier
    /// Signs tokens the server hands out itself (calls, presence `accepted`).
    let issuer: TokenIssuer
    /// The SQLite store: calls, API keys, meters, stats and webhooks (through `perform`).
    let store: ChatStore
    /// Chat history: `store` itself, or PostgreSQL when `database_url` is set.
    let chat: any ChatPersistence
    let logger: Logger
    let metrics = Metrics()
    let now: @Sendable () -> Millis
    /// `allowed_origins`, applied to every WebSocket upgrade.
    let cors: CORSPolicy
    unowned(unsafe) var transport: WebSocketServer!
    var routes: HTTPRoutes!
    /// The webhook sender (Webhooks.swift), installed by `ServerApp`; `emit` is all this thread calls.
    var webhooks: Webhooks!

    private var hub: Hub
    /// WebSocket endpoints other than the room protocol, by path (e.g. `/v1/presence`).
    private var endpoints: [String: any WebSocketEndpoint] = [:]
    private var endpointConnections: [ConnectionID: any WebSocketEndpoint] = [:]
    private var sessions: [ConnectionID: Session] = [:]
    private var lastExpiryCheck: Millis = 0
    /// Rooms' live calls for `call_started`/`call_ended` (only fed while webhooks are on).
    private var lifecycle = CallLifecycle()
    /// Why the server closed a connection, for the `call_ended` reason when it was the room's last peer.
    private var closeReasons: [ConnectionID: String] = [:]
    /// `/v1/calls`, `/v1/tokens` and the call lifecycle (CallsAPI.swift).
    private(set) lazy var calls = CallsAPI(service: self, store: store, config: config, logger: logger.labeled("calls"))
    /// `/webrtc-proxy/…` and `/whip/…`: HTTP sessions joined to rooms as virtual connections (HTTPSessions.swift).
    private(set) lazy var httpSessions = HTTPSessions(service: self, config: config, logger: logger.labeled("sessions"))
    /// `/v1/admin/…` (AdminAPI.swift).
    private(set) lazy var admin = AdminAPI(service: self, logger: logger.labeled("admin"))

    init(config: ServerConfig, verifier: TokenVerifier, issuer: TokenIssuer, store: ChatStore, chat: (any ChatPersistence)? = nil,
         logger: Logger,
         now: @escaping @Sendable () -> Millis = { Millis(Date().timeIntervalSince1970 * 1000) })
    {
        self.config = config
        self.verifier = verifier
        self.issuer = issuer
        self.store = store
        self.chat = chat ?? store
        self.logger = logger
        self.now = now
        self.cors = CORSPolicy(allowedOrigins: config.allowedOrigins)
        self.hub = Hub(settings: config.hub)
    }

    var hubSnapshot: Hub { hub }

    /// Feeds the hub an input that did not come from a connection (a meter loaded from the store, an
    /// HTTP session's join or leave, an admin action). Service thread.
    func handle(_ input: HubInput) {
        switch input {
        case .join, .disconnect, .kick, .endRoom: membership(input)
        default: apply(hub.handle(input, now: now()))
        }
    }

    /// A join, a leave, a kick or a closed room: the hub's effects, and the webhook events the change
    /// means. The events are emitted before the effects run, since an effect (a close) can lead to the
    /// next leave.
    private func membership(_ input: HubInput) {
        let current = now()
        guard webhooks.isEnabled else { return apply(hub.handle(input, now: current)) }
        var events: [CallLifecycle.Event] = []
        let effects: [HubEffect]
        switch input {
        case .join(let connection, let identity, _):
            let takeover = hub.members(of: identity.room).contains(identity.peer)
            effects = hub.handle(input, now: current)
            // A join the hub refused (no seat) seats nobody.
            if hub.identity(of: connection) != nil {
                events = lifecycle.joined(identity, takeover: takeover, now: current)
            }
        case .disconnect(let connection):
            // Nil for a connection whose seat was taken over: its leave changes nothing.
            let identity = hub.identity(of: connection)
            effects = hub.handle(input, now: current)
            let reason = closeReasons.removeValue(forKey: connection)
                ?? (webhooks.isStopping ? "server_shutdown" : "last_peer_left")
            if let identity { events = lifecycle.left(identity, reason: reason, now: current) }
        case .kick(let room, let peer):
            // The hub seats the kicked peer out at once; its socket's disconnect then finds nothing.
            let identity = hub.identities(in: room).first { $0.peer == peer }
            effects = hub.handle(input, now: current)
            if let identity { events = lifecycle.left(identity, reason: "kicked", now: current) }
        case .endRoom(let room):
            let seated = hub.identities(in: room)
            effects = hub.handle(input, now: current)
            for identity in seated { events += lifecycle.left(identity, reason: "room_closed", now: current) }
        default:
            effects = hub.handle(input, now: current)
        }
        for event in events { emit(event, connection: input) }
        apply(effects)
    }

    private func emit(_ event: CallLifecycle.Event, connection input: HubInput) {
        func base(_ call: CallLifecycle.Call) -> [String: JSONValue] {
            ["room_id": .string(call.room.rawValue), "call_id": call.call.map { .string($0.rawValue) } ?? .null,
             "started_at": .int(call.startedAt)]
        }
        func peer(_ identity: PeerIdentity, _ call: CallLifecycle.Call) -> [String: JSONValue] {
            var data = base(call)
            data["peer_id"] = .string(identity.peer.rawValue)
            data["role"] = .string(identity.role)
            data["name"] = identity.name.map(JSONValue.string) ?? .null
            var transport = "websocket"
            if case .join(let connection, _, _) = input, HTTPSessions.isVirtual(connection) { transport = "http" }
            if case .disconnect(let connection) = input, HTTPSessions.isVirtual(connection) { transport = "http" }
            data["transport"] = .string(transport)
            return data
        }
        switch event {
        case .callStarted(let call):
            webhooks.emit(.callStarted, key: call.room.rawValue, base(call))
        case .peerJoined(let identity, let call):
            webhooks.emit(.peerJoined, key: call.room.rawValue, peer(identity, call))
        case .peerLeft(let identity, let call):
            webhooks.emit(.peerLeft, key: call.room.rawValue, peer(identity, call))
        case .callEnded(let call, let endedAt, let reason):
            var data = base(call)
            data["ended_at"] = .int(endedAt)
            data["duration_ms"] = .int(endedAt - call.startedAt)
            data["reason"] = .string(reason)
            webhooks.emit(.callEnded, key: call.room.rawValue, data)
        }
    }

    /// Adds a WebSocket endpoint at `path`; call before the server starts.
    func register(_ endpoint: any WebSocketEndpoint, at path: String) {
        endpoints[path] = endpoint
    }

    /// Encodes once and queues `frame` for each target. Service thread.
    func send(_ frame: Frame, to targets: [ConnectionID]) {
        deliver(frame, to: targets)
    }

    // MARK: upgrade

    func server(_ server: WebSocketServer, shouldUpgrade request: HTTPRequest) -> UpgradeDecision {
        // Browsers always send Origin on a WebSocket handshake and never enforce CORS on it, so the
        // server must (RFC 6455 §10.2). Checked before the token: a refused page learns nothing more.
        if case .refused = cors.check(request) {
            metrics.upgrades["refused_origin", default: 0] += 1
            return .reject(CORSPolicy.refusal)
        }
        if let endpoint = endpoints[request.path] {
            switch authenticate(request) {
            case .failure(let response):
                metrics.upgrades["refused_\(response.status)", default: 0] += 1
                return .reject(response)
            case .success(let claims):
                let decision = endpoint.shouldUpgrade(request, claims: claims)
                if case .accept(let context) = decision {
                    metrics.upgrades["accepted", default: 0] += 1
                    return .accept(context: EndpointTicket(path: request.path, context: context))
                }
                metrics.upgrades["refused", default: 0] += 1
                return decision
            }
        }
        guard request.path == "/v1/ws" else {
            metrics.upgrades["not_found", default: 0] += 1
            return .reject(.problem(404, code: "not_found", detail: "no WebSocket endpoint at \(request.path.prefix(200))"))
        }
        switch authenticate(request) {
        case .failure(let response):
            metrics.upgrades["refused_\(response.status)", default: 0] += 1
            return .reject(response)
        case .success(let claims):
            guard let room = claims.roomID else {
                metrics.upgrades["refused_403", default: 0] += 1
                return .reject(.problem(403, code: "token_no_room", detail: "the token names no room_id"))
            }
            if !claims.scope.isEmpty, !claims.scope.contains("room") {
                metrics.upgrades["refused_403", default: 0] += 1
                return .reject(.problem(403, code: "token_wrong_scope", detail: "the token's scope does not include 'room'"))
            }
            var resumeAfter: Int64?
            if let raw = request.query["last_seq"] {
                guard let value = Int64(raw), value >= 0 else {
                    metrics.upgrades["refused_400", default: 0] += 1
                    return .reject(.problem(400, code: "bad_last_seq", detail: "last_seq must be a non-negative integer"))
                }
                resumeAfter = value
            }
            let identity = PeerIdentity(claims: claims, room: room, defaultRole: "peer", leewaySeconds: config.jwtLeewaySeconds)
            if let refusal = admit(identity) {
                metrics.upgrades["refused_\(refusal.status)", default: 0] += 1
                return .reject(refusal)
            }
            metrics.upgrades["accepted", default: 0] += 1
            return .accept(context: JoinTicket(identity: identity, expiresAt: claims.expiresAt, resumeAfter: resumeAfter))
        }
    }

    /// Asks the hub for a seat for `identity` (room limit, drain, kicked tokens); nil when admitted,
    /// else the problem to answer, counted by code. Service thread.
    func admit(_ identity: PeerIdentity) -> HTTPResponse? {
        guard let refusal = hub.admit(identity, now: now()) else { return nil }
        metrics.joinRefusals[refusal.code, default: 0] += 1
        return Self.problem(for: refusal)
    }

    /// The documented answer to a refused seat (docs/protocol.md, "Room limits" and "Admin API").
    static func problem(for refusal: JoinRefusal) -> HTTPResponse {
        switch refusal {
        case .roomFull(let limit):
            return .problem(409, code: refusal.code, detail: "the room already has \(limit) peers (its max_peers)",
                            extra: ["max_peers": .int(Int64(limit))])
        case .draining:
            return .problem(503, code: refusal.code, detail: "this node is draining and takes no new joins; use another node",
                            headers: [("retry-after", "5")])
        case .kicked:
            return .problem(403, code: refusal.code, detail: "this token was removed from its room by an operator; get a new token")
        case .reservedPeerID:
            return .problem(403, code: refusal.code, detail: "the peer id \(Hub.serverPeerID.rawValue) is reserved for the server")
        }
    }

    /// The token from `?token=` or `Authorization: Bearer`, verified; or the HTTP refusal.
    func authenticate(_ request: HTTPRequest) -> Result<PeerTokenClaims, HTTPResponse> {
        guard let token = request.query["token"] ?? request.bearerToken, !token.isEmpty else {
            return .failure(.problem(401, code: "token_missing", detail: "pass a token as ?token= or Authorization: Bearer",
                                     headers: [("www-authenticate", "Bearer")]))
        }
        do throws(TokenError) {
            return .success(try verifier.verify(token))
        } catch {
            return .failure(.problem(error.httpStatus, code: error.code, detail: error.message,
                                     headers: error.httpStatus == 401 ? [("www-authenticate", "Bearer error=\"invalid_token\"")] : []))
        }
    }

    // MARK: connection lifecycle

    func server(_ server: WebSocketServer, didOpen connection: ConnectionID, context: any Sendable) {
        if let ticket = context as? EndpointTicket, let endpoint = endpoints[ticket.path] {
            endpointConnections[connection] = endpoint
            endpoint.didOpen(connection, context: ticket.context)
            return
        }
        guard let ticket = context as? JoinTicket else {
            transport.close(connection, code: .internalError)
            return
        }
        sessions[connection] = Session(ticket: ticket, limiter: RateLimiter(perSecond: config.maxFramesPerSecond,
                                                                             burst: config.frameBurst))
        loadResume(for: ticket) { [transport] resume in
            transport!.post { [self] in finishJoin(connection, ticket: ticket, resume: resume) }
        }
    }

    /// Reads the room's chat position (and the missed messages when resuming) on the store queue.
    private func loadResume(for ticket: JoinTicket, completion: @escaping @Sendable (Result<ChatResume, StoreError>) -> Void) {
        let room = ticket.identity.room
        let peer = ticket.identity.peer
        let replayCap = config.replayCap
        chat.roomSummary(room: room, peer: peer) { [chat] summaryResult in
            switch summaryResult {
            case .failure(let error):
                completion(.failure(error))
            case .success(let summary):
                let base = ChatResume(lastSeq: summary.lastSeq, readSeq: summary.readSeq, unread: Int64(summary.unreadCount))
                guard let after = ticket.resumeAfter else { return completion(.success(base)) }
                chat.history(room: room, sinceSeq: after, limit: replayCap) { historyResult in
                    switch historyResult {
                    case .failure(let error):
                        completion(.failure(error))
                    case .success(let page):
                        var resume = base
                        resume.requested = true
                        resume.replay = page.messages.map(ChatMessage.init(record:))
                        resume.complete = !page.hasMore
                        resume.lastSeq = max(resume.lastSeq, page.lastSeq)
                        completion(.success(resume))
                    }
                }
            }
        }
    }

    private func finishJoin(_ connection: ConnectionID, ticket: JoinTicket, resume: Result<ChatResume, StoreError>) {
        guard sessions[connection] != nil else { return }  // left while loading
        let state: ChatResume
        switch resume {
        case .success(let loaded):
            state = loaded
        case .failure(let error):
            // Signaling still works without chat state; the client sees recovered=false if it asked.
            metrics.storeFailures += 1
            logger.error("chat state unavailable at join", ["room.id": ticket.identity.room.rawValue, "error": "\(error)"])
            state = ChatResume(complete: false, requested: ticket.resumeAfter != nil)
        }
        sessions[connection]?.joined = true
        membership(.join(connection, ticket.identity, state))
        calls.peerJoined(ticket.identity, now: now())
        let early = sessions[connection]?.early ?? []
        sessions[connection]?.early = []
        for message in early { apply(hub.handle(.message(connection, message), now: now())) }
    }

    func server(_ server: WebSocketServer, didClose connection: ConnectionID) {
        if let endpoint = endpointConnections.removeValue(forKey: connection) {
            return endpoint.didClose(connection)
        }
        guard let session = sessions.removeValue(forKey: connection) else { return }
        if session.joined {
            membership(.disconnect(connection))
        } else {
            closeReasons[connection] = nil
            apply(hub.handle(.abandonSeat(session.ticket.identity.room, session.ticket.identity.peer), now: now()))
        }
    }

    // MARK: frames

    func server(_ server: WebSocketServer, didReceive message: InboundMessage, on connection: ConnectionID) {
        if let endpoint = endpointConnections[connection] {
            return endpoint.didReceive(message, on: connection)
        }
        guard var session = sessions[connection] else { return }
        let text = admit(message, on: connection, limiter: &session.limiter)
        sessions[connection] = session
        guard let text else { return }
        let decoded: ClientMessage
        do {
            decoded = try ClientFrameDecoder.decode(text, limits: config.frameLimits)
        } catch {
            return sendError(error, to: connection)
        }
        metrics.framesIn[decoded.frameType.rawValue, default: 0] += 1
        guard session.joined else {
            sessions[connection]?.early.append(decoded)
            return
        }
        apply(hub.handle(.message(connection, decoded), now: now()))
    }

    /// The front door shared by every WebSocket endpoint: the per-connection rate limit and the
    /// transport-level refusals. Returns the text to decode, or nil when the message was answered
    /// (or dropped) here. Service thread.
    func admit(_ message: InboundMessage, on connection: ConnectionID, limiter: inout RateLimiter) -> [UInt8]? {
        guard limiter.admit(now: now()) else {
            let drops = limiter.consecutiveDrops
            if drops == config.floodCloseAfter {
                // Counted once: frames still arriving before the close completes are dropped silently.
                metrics.closes[CloseCode.flood.reason, default: 0] += 1
                transport.close(connection, code: .flood)
            } else if drops < config.floodCloseAfter && (drops == 1 || drops % 50 == 0) {
                // One error per burst, not one per dropped frame: answering every frame would let a
                // flooding client double its own traffic.
                sendError(FrameError(.rateLimited, "more than \(Int(config.maxFramesPerSecond)) frames per second; frames are being dropped"),
                          to: connection)
            }
            return nil
        }
        switch message {
        case .text(let bytes):
            return bytes
        case .binary:
            sendError(FrameError(.binaryUnsupported, "binary frames are not part of this protocol; send JSON text"), to: connection)
        case .tooLarge(let count):
            sendError(FrameError(.frameTooLarge, "frame of \(count) bytes exceeds max_frame_bytes \(config.maxFrameBytes)"),
                      to: connection)
        }
        return nil
    }

    /// Answers a refused frame with an `error` frame and counts it. Service thread.
    func sendError(_ error: FrameError, to connection: ConnectionID) {
        metrics.errors[error.code.name, default: 0] += 1
        deliver(error.frame, to: [connection])
    }

    // MARK: effects

    func apply(_ effects: [HubEffect]) {
        for effect in effects {
            switch effect {
            case .send(let targets, let frame):
                if frame.type == FrameType.error.rawValue, let code = frame.error?.code, let name = ErrorCode(rawValue: code)?.name {
                    metrics.errors[name, default: 0] += targets.count
                }
                deliver(frame, to: targets)
            case .close(let connection, let code):
                metrics.closes[code.reason, default: 0] += 1
                if code == .consultationEnded, webhooks.isEnabled { closeReasons[connection] = "consultation_ended" }
                // The hub has already let these connections go; frames still arriving must not reach it.
                if code == .replaced || code == .kicked || code == .roomClosed { sessions[connection] = nil }
                if HTTPSessions.isVirtual(connection) { httpSessions.closed(connection, code: code); continue }
                transport.close(connection, code: code)
            case .storeChat(let connection, let room, let peer, let submission, let timestamp):
                storeChat(connection: connection, room: room, peer: peer, submission, timestamp: timestamp)
            case .storeRead(let room, let peer, let seq):
                chat.markRead(room: room, peer: peer, seq: seq, nowMs: now()) { [transport] result in
                    transport!.post { [self] in
                        switch result {
                        case .success(let outcome):
                            apply(hub.handle(.readStored(room: room, peer: peer, seq: outcome.marker.seq, moved: outcome.moved), now: now()))
                        case .failure(let error):
                            metrics.storeFailures += 1
                            logger.error("read marker not stored", ["room.id": room.rawValue, "error": "\(error)"])
                        }
                    }
                }
            case .storeStats(let room, let call, let peer, let sample, let timestamp):
                calls.storeStats(StatsDraft(room: room, call: call, peer: peer, sample: sample, timestampMs: timestamp))
            case .storeMeter(let room, let snapshot):
                calls.storeMeter(room, snapshot)
            }
        }
    }

    private func storeChat(connection: ConnectionID, room: RoomID, peer: PeerID, _ submission: ChatSubmission, timestamp: Millis) {
        let draft = ChatDraft(room: room, sender: peer, clientID: submission.clientID, text: submission.text,
                              meta: submission.meta.map(JSONWriter.string), timestampMs: timestamp)
        // Monotonic, for the ack latency histogram: two clock reads per chat, no allocation.
        let received = DispatchTime.now().uptimeNanoseconds
        chat.appendChat(draft) { [transport] result in
            let outcome: ChatStoreOutcome
            switch result {
            case .success(let stored):
                outcome = .stored(ChatMessage(record: stored.message), connection: connection, duplicate: stored.duplicate)
            case .failure(let error):
                outcome = .failed(room: room, peer: peer, clientID: submission.clientID, connection: connection,
                                  WireError(.unavailable, "chat not stored: \(error.isRetryable ? "store busy" : "store error"); retry with the same client_id"))
            }
            transport!.post { [self] in
                switch outcome {
                case .stored(_, _, let duplicate): if duplicate { metrics.chatDuplicates += 1 } else { metrics.chatStored += 1 }
                case .failed: metrics.storeFailures += 1
                }
                apply(hub.handle(.chatStored(outcome), now: now()))
                metrics.ackLatency.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- received)
                if case .stored(let message, _, false) = outcome, webhooks.wants(.chatMessage) {
                    webhooks.emit(.chatMessage, key: room.rawValue, [
                        "room_id": .string(room.rawValue), "seq": .int(message.seq), "from": .string(message.from.rawValue),
                        "client_id": .string(message.clientID), "text": .string(message.text), "meta": message.meta ?? .null,
                        "ts": .int(message.timestamp),
                    ])
                }
            }
        }
    }

    private func deliver(_ frame: Frame, to targets: [ConnectionID]) {
        guard !targets.isEmpty else { return }
        let message = OutboundMessage(frame.encoded())
        metrics.framesOut[frame.type, default: 0] += targets.count
        for target in targets {
            // A virtual connection is an HTTP session: its frames go to the session, not to a socket.
            if HTTPSessions.isVirtual(target) { httpSessions.receive(frame, on: target); continue }
            transport.send(message, to: target)
        }
    }

    // MARK: timers

    /// Runs every `tick_ms` on the service thread.
    func tick() {
        let current = now()
        for endpoint in endpoints.values { endpoint.tick(now: current) }
        apply(hub.handle(.tick, now: current))
        calls.tick(now: current)
        httpSessions.tick(now: current)
        guard current - lastExpiryCheck >= 1_000 else { return }
        lastExpiryCheck = current
        let nowDate = Date(timeIntervalSince1970: Double(current) / 1000)
        for (connection, session) in sessions
        where !session.expired && session.ticket.expiresAt.addingTimeInterval(config.jwtLeewaySeconds) < nowDate {
            sessions[connection]?.expired = true
            metrics.closes[CloseCode.tokenExpired.reason, default: 0] += 1
            if webhooks.isEnabled { closeReasons[connection] = "token_expired" }
            transport.close(connection, code: .tokenExpired)
        }
    }

    // MARK: HTTP

    func server(_ server: WebSocketServer, handle request: HTTPRequest, responder: HTTPResponder) {
        routes.handle(request) { [self] response in
            metrics.httpRequests[String(response.status), default: 0] += 1
            responder.respond(response)
        }
    }
}

extension JoinRefusal {
    /// The problem `code` (and metrics label) of this refusal.
    var code: String {
        switch self {
        case .roomFull: "room_full"
        case .draining: "draining"
        case .kicked: "kicked"
        case .reservedPeerID: "reserved_peer_id"
        }
    }
}

extension PeerIdentity {
    /// The identity a verified token proves in `room`, with its seat limit and credential.
    init(claims: PeerTokenClaims, room: RoomID, call: CallID? = nil, defaultRole: String, leewaySeconds: Double) {
        let exp = Millis((claims.expiresAt.timeIntervalSince1970 + leewaySeconds) * 1_000)
        let id = claims.tokenID.map { "jti:" + $0 }
            ?? "sub:\(claims.sub.rawValue)|room:\(room.rawValue)|iat:\(Int64(claims.issuedAt?.timeIntervalSince1970 ?? 0))|exp:\(Int64(claims.expiresAt.timeIntervalSince1970))"
        self.init(peer: claims.sub, room: room, call: call ?? claims.callID, role: claims.role ?? defaultRole, name: claims.name,
                  maxPeers: claims.maxPeers, credential: TokenCredential(id: id, expiresAt: exp))
    }
}

extension ChatMessage {
    init(record: ChatRecord) {
        let meta = record.meta.flatMap { try? JSONParser.parse($0) }
        self.init(room: record.room, seq: record.seq, from: record.sender, clientID: record.clientID, text: record.text,
                  meta: meta, timestamp: record.timestampMs)
    }
}
