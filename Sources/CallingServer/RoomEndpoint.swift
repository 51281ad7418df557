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

/// The room protocol at `/v1/ws`: checks the token's room (its scope is the route table's) and asks the hub for a seat
/// before the upgrade, loads the peer's chat position, decodes frames and hands them to the rooms'
/// `SignalingService`. Every method runs on the service thread (the `WebSocketEndpoint` contract).
// @unchecked Sendable: every stored property is touched only on the service thread; store
// completions capture `self` solely to hop back through `context.post`.
final class RoomEndpoint: WebSocketEndpoint, @unchecked Sendable {
    /// A class, not a struct: every inbound frame updates its rate limiter, and a struct in the
    /// dictionary was copied out and back (its ticket's strings, the early queue) each time.
    /// Small on purpose (one per open peer): what only the join needs lives in `Pending`, which
    /// goes once the peer is seated (the hub keeps the identity from then on).
    final class Session {
        /// The token's `exp`, for the expiry close.
        let expiresAt: Date
        /// Updated by every inbound frame; unchecked for exclusivity (see `sessions`).
        @exclusivity(unchecked) var limiter: RateLimiter
        /// Until the join completes: the ticket, and the frames that arrived meanwhile.
        private(set) var pending: Pending?
        /// Set once the expiry close is under way, so it is counted and sent once.
        var expired = false

        var joined: Bool { pending == nil }

        init(ticket: JoinTicket, limiter: RateLimiter) {
            self.expiresAt = ticket.expiresAt
            self.limiter = limiter
            self.pending = Pending(ticket: ticket)
        }

        /// Marks the session joined; returns the frames that arrived before.
        func seat() -> [ClientMessage] {
            defer { pending = nil }
            return pending?.early ?? []
        }
    }

    final class Pending {
        let ticket: JoinTicket
        /// Frames that arrived before the join finished loading chat state, in order.
        var early: [ClientMessage] = []
        /// The cluster's seat count added this peer id for this join (`SeatAdmission`): given
        /// back if the socket goes before joining.
        var addedSharedSeat = false

        init(ticket: JoinTicket) { self.ticket = ticket }
    }

    private let context: ServiceContext
    private let rooms: SignalingService
    private let gate: FrameGate
    private let router: any Router
    /// Read once or twice per inbound frame. Unchecked for exclusivity, like the transport's
    /// per-frame state (WebSocketServer.swift, `ServiceState`): only the service thread touches
    /// it, and no access is held across a call that could reach it again. Each checked access is a
    /// thread-local lookup (`swift_beginAccess`). By the
    /// connection's raw id in an `IDTable`: no seeded hash per frame, and a frame's session is
    /// borrowed from it rather than copied out (`didReceive`).
    @exclusivity(unchecked) private var sessions = IDTable<Session>()
    private var lastExpiryCheck: Millis = 0

    // Stored, not read through `context` on every frame: a computed `ServerConfig` is a copy of
    // the whole struct, which showed in the chat benchmark.
    private let config: ServerConfig
    private let frameLimits: FrameLimits
    private let metrics: Metrics

    init(context: ServiceContext, rooms: SignalingService, gate: FrameGate, router: any Router) {
        self.context = context
        self.config = context.config
        self.frameLimits = context.config.frameLimits
        self.metrics = context.metrics
        self.rooms = rooms
        self.gate = gate
        self.router = router
    }

    /// The session of `connection` while it may still talk to the hub. A joined connection whose
    /// seat the hub let go (taken over, kicked, room closed) is forgotten here: frames still
    /// arriving before its close completes must not reach the hub.
    private func liveSession(_ connection: ConnectionID) -> Session? {
        liveSessionAndSeat(connection)?.session.takeUnretainedValue()
    }

    /// `liveSession`, unretained (the table keeps it; the check that follows the lookup is the
    /// only removal a frame can cause), with the seat a joined session's connection holds (nil
    /// while not joined): a relayed frame hands it to the hub rather than have it looked up again.
    @inline(__always)
    private func liveSessionAndSeat(_ connection: ConnectionID) -> (session: Unmanaged<Session>, seat: Hub.Seat?)? {
        guard let session = sessions.unretained(for: connection.rawValue) else { return nil }
        guard session._withUnsafeGuaranteedRef({ $0.joined }) else { return (session, nil) }
        guard let seat = rooms.seat(of: connection) else {
            sessions.removeValue(for: connection.rawValue)
            return nil
        }
        return (session, seat)
    }

    // MARK: WebSocketEndpoint

    func shouldUpgrade(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision {
        guard let room = claims.roomID else {
            metrics.upgrades["refused_403", default: 0] += 1
            return .reject(.problem(403, code: "token_no_room", detail: "the token names no room_id"))
        }
        // A token signed elsewhere is not held to POST /v1/tokens' id rule: checked here too, or a
        // room whose history no REST route reaches could be joined (docs/protocol.md, "Ids").
        if let violation = IdentifierRule.violation(of: room.rawValue, maxBytes: IdentifierRule.maxBytes) {
            metrics.upgrades["refused_400", default: 0] += 1
            return .reject(.problem(400, code: "invalid_room_id", detail: "the token's room_id \(violation)"))
        }
        if let violation = IdentifierRule.violation(of: claims.sub.rawValue, maxBytes: config.maxPeerIDBytes) {
            metrics.upgrades["refused_400", default: 0] += 1
            return .reject(.problem(400, code: "invalid_peer_id", detail: "the token's sub \(violation)"))
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
        if let refusal = rooms.admit(identity) {
            metrics.upgrades["refused_\(refusal.status)", default: 0] += 1
            return .reject(refusal)
        }
        metrics.upgrades["accepted", default: 0] += 1
        return .accept(context: JoinTicket(identity: identity, expiresAt: claims.expiresAt, resumeAfter: resumeAfter))
    }

    func didOpen(_ connection: ConnectionID, context ticketContext: any Sendable) {
        guard let ticket = ticketContext as? JoinTicket else {
            router.close(connection, code: .internalError)
            return
        }
        sessions.insert(Session(ticket: ticket, limiter: RateLimiter(perSecond: config.maxFramesPerSecond, burst: config.frameBurst)),
                        for: connection.rawValue)
        // The hub's check before the upgrade knows this node's view of the room only; across
        // nodes the room's last seat is given in one step on Redis (`RoomSeats`), before the peer
        // is announced to anyone.
        let limit = ticket.identity.maxPeers ?? config.maxPeersPerRoom
        guard limit > 0 else { return startJoin(connection, ticket: ticket) }
        router.admitAcrossNodes(ticket.identity, limit: limit) { [context] admission in
            context.post { [self] in admitted(connection, ticket: ticket, admission, limit: limit) }
        }
    }

    private func startJoin(_ connection: ConnectionID, ticket: JoinTicket) {
        loadResume(for: ticket) { [context] resume in
            context.post { [self] in finishJoin(connection, ticket: ticket, resume: resume) }
        }
    }

    /// The cluster's answer for a joiner's seat: join, or close with 4409 `room full` before any
    /// `welcome` (the room never hears of the peer).
    private func admitted(_ connection: ConnectionID, ticket: JoinTicket, _ admission: SeatAdmission, limit: Int) {
        guard let pending = sessions[connection.rawValue]?.pending else {
            // Gone while asking (its hold was released in `didClose`).
            if admission == .admitted(added: true) { router.abandonAdmission(ticket.identity) }
            return
        }
        switch admission {
        case .admitted(let added):
            pending.addedSharedSeat = added
            startJoin(connection, ticket: ticket)
        case .unchecked:
            startJoin(connection, ticket: ticket)
        case .refused:
            sessions.removeValue(for: connection.rawValue)
            rooms.abandonSeat(connection, ticket.identity)
            metrics.joinRefusals[JoinRefusal.roomFull(limit: limit).code, default: 0] += 1
            metrics.closes[CloseCode.roomFull.reason, default: 0] += 1
            context.logger.info("join refused: room full across the cluster",
                                ["room.id": ticket.identity.room.rawValue, "peer.id": ticket.identity.peer.rawValue, "max_peers": "\(limit)"])
            router.close(connection, code: .roomFull)
        }
    }

    /// Reads the room's chat position (and the missed messages when resuming) on the store queue.
    private func loadResume(for ticket: JoinTicket, completion: @escaping @Sendable (Result<ChatResume, StoreError>) -> Void) {
        let room = ticket.identity.room
        let peer = ticket.identity.peer
        let replayCap = config.replayCap
        let chat = context.chat
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
        guard sessions[connection.rawValue] != nil else { return }  // left while loading
        let state: ChatResume
        switch resume {
        case .success(let loaded):
            state = loaded
        case .failure(let error):
            // Signaling still works without chat state; the client sees recovered=false if it asked.
            metrics.storeFailures += 1
            context.logger.error("chat state unavailable at join", ["room.id": ticket.identity.room.rawValue, "error": "\(error)"])
            state = ChatResume(complete: false, requested: ticket.resumeAfter != nil)
        }
        let early = sessions[connection.rawValue]?.seat() ?? []
        rooms.join(connection, ticket.identity, resume: state)
        for message in early { rooms.handle(.message(connection, message)) }
    }

    func didClose(_ connection: ConnectionID) {
        didClose(connection, ending: .closedByClient(CloseCode.normal.rawValue))
    }

    /// A seated peer whose socket ended without a clean leave keeps its seat for its reconnect
    /// grace (`Hub`, `.connectionLost`); a clean one leaves at once (docs/protocol.md, "Reconnect
    /// grace", "Across a server restart").
    func didClose(_ connection: ConnectionID, ending: SocketEnding) {
        guard let session = sessions.removeValue(for: connection.rawValue) else { return }
        if let pending = session.pending {
            rooms.abandonSeat(connection, pending.ticket.identity)
            if pending.addedSharedSeat { router.abandonAdmission(pending.ticket.identity) }
        } else {
            // The server's own 1001 on a single node's graceful stop is a restart, not a leave:
            // the seat is remembered and held again by the restarted server.
            let restart = rooms.restarting && ending == .closedByServer(CloseCode.goingAway.rawValue)
            rooms.handle(ending.isCleanLeave && !restart ? .disconnect(connection) : .connectionLost(connection))
        }
    }

    func didReceive(_ message: InboundMessage, on connection: ConnectionID) {
        // The session borrowed from the table instead of copied out of it (an atomic retain and
        // release per inbound frame): once its seat is checked, nothing this frame does removes
        // it (only `didClose` and that check do).
        guard let (entry, seat) = liveSessionAndSeat(connection) else { return }
        entry._withUnsafeGuaranteedRef { session in
            guard gate.admits(message, on: connection, limiter: &session.limiter), case .text(let text) = message else { return }
            text.withUnsafeBufferPointer { receive($0, on: connection, session: session, seat: seat) }
        }
    }

    func didReceiveText(_ bytes: UnsafeBufferPointer<UInt8>, on connection: ConnectionID) {
        // As in `didReceive`.
        guard let (entry, seat) = liveSessionAndSeat(connection) else { return }
        entry._withUnsafeGuaranteedRef { session in
            guard gate.admitsFrame(on: connection, limiter: &session.limiter) else { return }
            receive(bytes, on: connection, session: session, seat: seat)
        }
    }

    /// A text frame, lent for the call: an addressed relay is relayed from these bytes; anything
    /// else is decoded into a message that owns its parts.
    @inline(__always)
    private func receive(_ text: UnsafeBufferPointer<UInt8>, on connection: ConnectionID, session: Session, seat: Hub.Seat?) {
        let decoded: ClientMessage
        do {
            switch try ClientFrameDecoder.decodeFrame(lent: text, limits: frameLimits) {
            case .relay(let relay):
                metrics.framesIn.count(relay.kind.frameType)
                // Relayed from the frame's bytes, unless it has to wait for its sender's join. A
                // joined session's connection always has its seat, and nothing since
                // `liveSessionAndSeat` has changed the hub: the seat is still the sender's.
                guard session.pending == nil, let seat else { decoded = relay.message(in: Array(text)); break }
                return relay.withParts(in: text) { rooms.relay($0, from: connection, seat: seat) }
            case .message(let message):
                metrics.framesIn.count(message.frameType)
                decoded = message
            }
        } catch {
            return gate.sendError(error, to: connection)
        }
        if let pending = session.pending {
            pending.early.append(decoded)
            return
        }
        // Consumed by the switch: its parts move out of it, and the message is not destroyed
        // again after the call it went to.
        switch consume decoded {
        case .ping(let payload):
            // Likewise (a joined session's connection always has its seat).
            guard let seat else { return rooms.handle(.message(connection, .ping(payload: payload))) }
            rooms.pong(payload, from: connection, seat: seat)
        case .chat(let submission):
            rooms.chat(submission, from: connection)
        case let message:
            rooms.handle(.message(connection, message))
        }
    }

    /// Once a second: closes connections whose token has expired (beyond the leeway) with 4001.
    func tick(now current: Millis) {
        guard current - lastExpiryCheck >= 1_000 else { return }
        lastExpiryCheck = current
        let nowDate = Date(timeIntervalSince1970: Double(current) / 1000)
        for connection in sessions.storedKeys.map(ConnectionID.init) {
            guard let session = liveSession(connection), !session.expired,
                session.expiresAt.addingTimeInterval(config.jwtLeewaySeconds) < nowDate
            else { continue }
            session.expired = true
            metrics.closes[CloseCode.tokenExpired.reason, default: 0] += 1
            rooms.noteCloseReason("token_expired", for: connection)
            router.close(connection, code: .tokenExpired)
        }
    }
}
