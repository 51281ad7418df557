import CallingAuth
import CallingCore
import CallingTransport
import Foundation

/// What a presence connection proved at upgrade time, handed from `shouldUpgrade` to `didOpen`.
struct PresenceTicket: Sendable {
    var identity: PresenceIdentity
    var expiresAt: Date
}

/// The presence channel at `/v1/presence`: admits the upgrade (a known role; the scope `presence`
/// is the route table's), decodes frames, runs `PresenceHub` and carries out its effects, minting the room tokens
/// of accepted calls. Every method runs on the service thread (the `WebSocketEndpoint` contract),
/// so the state below needs no lock.
final class PresenceEndpoint: WebSocketEndpoint {
    struct Session {
        /// Set once the expiry close is under way, so it is counted and sent once.
        var expired = false
        var expiresAt: Date
        var limiter: RateLimiter
        var identity: PresenceIdentity
    }

    /// Cluster mode: this node's id, a way to send a delivery to another node's channel, and one
    /// to keep a presence record in Redis (the leader's state, for the next leader).
    struct ClusterRelay {
        let node: String
        let send: @Sendable (_ node: String, _ delivery: ClusterDelivery) -> Void
        /// Queues `.presenceStore…` commands on the Redis connection, in order with `send`'s.
        let store: @Sendable (_ commands: [RedisClusterDriver.Command]) -> Void
    }

    private let context: ServiceContext
    private let router: any FrameDelivery
    private let gate: FrameGate
    private let relay: ClusterRelay?
    private var hub: PresenceHub
    private var sessions: [ConnectionID: Session] = [:]
    private let limits = PresenceLimits()
    private var lastExpiryCheck: Millis = 0
    /// Cluster mode: the node holding the presence lease; nil (and always on a node alone) runs
    /// the presence hub here for this node's connections.
    private(set) var leader: String?
    /// At the leader: other nodes' presence connections, by the id the hub knows them under.
    private var remote: [ConnectionID: (node: String, connection: UInt64)] = [:]
    private var remoteByOrigin: [String: ConnectionID] = [:]
    private var nextRemote: UInt64 = 0

    init(context: ServiceContext, router: any FrameDelivery, gate: FrameGate, relay: ClusterRelay? = nil) {
        self.context = context
        self.router = router
        self.gate = gate
        self.relay = relay
        hub = Self.freshHub(context.config)
    }

    private static func settings(_ config: ServerConfig) -> PresenceSettings {
        PresenceSettings(graceMs: Int64(config.presenceGraceSeconds) * 1_000,
                         requestTTLMs: Int64(config.presenceRequestTTLSeconds) * 1_000,
                         forgetMs: Int64(config.presenceForgetSeconds) * 1_000,
                         resumeMs: Int64(config.clusterPresenceResumeMs))
    }

    private static func freshHub(_ config: ServerConfig) -> PresenceHub {
        PresenceHub(settings: settings(config), ids: RandomPresenceIDs())
    }

    /// The records the previous leader stored; one that does not parse is skipped, so a bad record
    /// costs that agent or request, not the whole state (the resume log line counts what was read).
    static func decode(_ stored: RedisClusterDriver.PresenceStored) -> PresenceState {
        let agents = stored.agents.compactMap { (try? JSONParser.parse($0)).flatMap(PresenceAgentRecord.init(json:)) }
        let requests = stored.requests.compactMap { (try? JSONParser.parse($0)).flatMap(PresenceRequestRecord.init(json:)) }
        return PresenceState(agents: agents, requests: requests)
    }

    /// Whether this node runs the presence hub: alone, without a known leader, or as the leader.
    var isLeading: Bool { relay == nil || leader == nil || leader == relay?.node }

    /// Whether the hub's state goes to Redis: only the lease holder's, so a node that lost Redis
    /// (and runs presence for its own connections meanwhile) never overwrites the leader's.
    private var isStoring: Bool { relay != nil && leader == relay?.node }

    private var leaderToRelay: (ClusterRelay, String)? {
        guard let relay, let leader, leader != relay.node else { return nil }
        return (relay, leader)
    }

    // MARK: WebSocketEndpoint

    func shouldUpgrade(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision {
        let decision = decide(request, claims: claims)
        if case .accept = decision {
            context.metrics.upgrades["accepted", default: 0] += 1
        } else {
            context.metrics.upgrades["refused", default: 0] += 1
        }
        return decision
    }

    private func decide(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision {
        guard let roleName = claims.role, let role = PresenceRole(rawValue: roleName) else {
            return .reject(.problem(403, code: "token_wrong_role",
                                    detail: "the token's role must be agent, dashboard or caller for /v1/presence"))
        }
        var queues: [QueueName]?
        if role == .agent, let raw = request.query["queues"] {
            do throws(PresenceQueueError) {
                queues = try PresenceQueues.parse(raw, limits: limits)
            } catch {
                return .reject(.problem(400, code: "bad_queues", detail: error.message))
            }
        }
        let identity = PresenceIdentity(peer: claims.sub, role: role, name: claims.name, queues: queues)
        return .accept(context: PresenceTicket(identity: identity, expiresAt: claims.expiresAt))
    }

    func didOpen(_ connection: ConnectionID, context ticketContext: any Sendable) {
        guard let ticket = ticketContext as? PresenceTicket else {
            router.close(connection, code: .internalError)
            return
        }
        let config = context.config
        sessions[connection] = Session(expiresAt: ticket.expiresAt,
                                       limiter: RateLimiter(perSecond: config.maxFramesPerSecond, burst: config.frameBurst),
                                       identity: ticket.identity)
        if let (relay, leader) = leaderToRelay {
            return relay.send(leader, .presenceOpen(node: relay.node, connection: connection.rawValue, ticket.identity))
        }
        apply(hub.handle(.connect(connection, ticket.identity), now: context.now()))
    }

    func didReceive(_ message: InboundMessage, on connection: ConnectionID) {
        guard var session = sessions[connection] else { return }
        let text = gate.admit(message, on: connection, limiter: &session.limiter)
        sessions[connection] = session
        guard let text else { return }
        if let (relay, leader) = leaderToRelay {
            return relay.send(leader, .presenceMessage(node: relay.node, connection: connection.rawValue, bytes: text))
        }
        handle(text, from: connection)
    }

    /// Decodes a frame of `connection` (one of ours, or another node's at the leader) for the hub.
    private func handle(_ text: [UInt8], from connection: ConnectionID) {
        let decoded: PresenceMessage
        do {
            decoded = try PresenceFrameDecoder.decode(text, limits: limits)
        } catch {
            guard remote[connection] != nil else { return gate.sendError(error, to: connection) }
            context.metrics.errors[error.code.name, default: 0] += 1
            return send(error.frame, to: [connection])
        }
        context.metrics.framesIn.count(named: decoded.frameType.rawValue)
        apply(hub.handle(.message(connection, decoded), now: context.now()))
    }

    func didClose(_ connection: ConnectionID) {
        guard sessions.removeValue(forKey: connection) != nil else { return }
        if let (relay, leader) = leaderToRelay {
            return relay.send(leader, .presenceGone(node: relay.node, connection: connection.rawValue))
        }
        apply(hub.handle(.disconnect(connection), now: context.now()))
    }

    // MARK: cluster mode

    /// The presence lease is (now) held by `node`, or by nobody this node can see (nil). A node
    /// that has just taken the lease resumes the state its predecessor stored in Redis
    /// (`resuming`); its own connections are seated there and the other nodes open theirs there
    /// again (docs/operations.md, "Running a cluster").
    func leaderChanged(to node: String?, resuming stored: PresenceState? = nil) {
        if node == leader, stored != nil, isStoring {
            // Still the leader after losing Redis: what Redis holds missed the changes made
            // meanwhile (or was lost in a restart), so the hub's own state replaces it.
            storeWholeState()
        }
        guard node != leader else { return }
        leader = node
        if let stored, let relay, node == relay.node {
            hub = PresenceHub(settings: Self.settings(context.config), ids: RandomPresenceIDs(), resuming: stored, now: context.now())
            context.logger.log(.notice, "presence state resumed",
                               ["agents": "\(stored.agents.count)", "requests": "\(stored.requests.count)"])
        } else {
            hub = Self.freshHub(context.config)
        }
        remote = [:]
        remoteByOrigin = [:]
        context.logger.log(.notice, "presence leader", ["leader": node ?? "(this node, Redis unreachable)"])
        let local = sessions.sorted { $0.key.rawValue < $1.key.rawValue }
        if let (relay, leader) = leaderToRelay {
            for (connection, session) in local {
                relay.send(leader, .presenceOpen(node: relay.node, connection: connection.rawValue, session.identity))
            }
        } else {
            for (connection, session) in local { apply(hub.handle(.connect(connection, session.identity), now: context.now())) }
        }
    }

    private func storeWholeState() {
        guard let relay else { return }
        let state = hub.state
        relay.store([.presenceStoreReset]
            + state.agents.map { .presenceStore(.agents, field: $0.agent.rawValue, value: JSONWriter.bytes($0.json)) }
            + state.requests.map { .presenceStore(.requests, field: $0.id.rawValue, value: JSONWriter.bytes($0.json)) })
    }

    /// Redis went away: without a leader to reach, this node runs presence for its own connections.
    func clusterLost() {
        if let relay, leader != relay.node { leaderChanged(to: nil) }
    }

    /// At the leader: connections of nodes that are gone leave the hub.
    func nodesAlive(_ alive: Set<String>) {
        let gone = remote.filter { !alive.contains($0.value.node) }.keys.sorted { $0.rawValue < $1.rawValue }
        for connection in gone { remoteGone(connection) }
    }

    /// At the leader: another node's presence connection opened, sent a frame, or closed.
    func arrived(_ delivery: ClusterDelivery) {
        guard isLeading else { return }
        switch delivery {
        case .presenceOpen(let node, let origin, let identity):
            let key = "\(node)/\(origin)"
            let connection: ConnectionID
            if let known = remoteByOrigin[key] {
                connection = known
            } else {
                nextRemote += 1
                connection = ConnectionID(.remotePresence, serial: nextRemote)
                remote[connection] = (node, origin)
                remoteByOrigin[key] = connection
            }
            apply(hub.handle(.connect(connection, identity), now: context.now()))
        case .presenceMessage(let node, let origin, let bytes):
            guard let connection = remoteByOrigin["\(node)/\(origin)"] else { return }
            handle(bytes, from: connection)
        case .presenceGone(let node, let origin):
            guard let connection = remoteByOrigin["\(node)/\(origin)"] else { return }
            remoteGone(connection)
        default:
            break
        }
    }

    /// The leader closed one of this node's presence connections (an agent's takeover, ...).
    func closedByLeader(_ connection: ConnectionID, code: CloseCode) {
        guard sessions.removeValue(forKey: connection) != nil else { return }
        context.metrics.closes[code.reason, default: 0] += 1
        router.close(connection, code: code)
    }

    private func remoteGone(_ connection: ConnectionID) {
        guard let origin = remote.removeValue(forKey: connection) else { return }
        remoteByOrigin["\(origin.node)/\(origin.connection)"] = nil
        apply(hub.handle(.disconnect(connection), now: context.now()))
    }

    func tick(now: Millis) {
        if isLeading { apply(hub.handle(.tick, now: now)) }
        guard now - lastExpiryCheck >= 1_000 else { return }
        lastExpiryCheck = now
        let limit = Date(timeIntervalSince1970: Double(now) / 1000).addingTimeInterval(-context.config.jwtLeewaySeconds)
        for (connection, session) in sessions where !session.expired && session.expiresAt < limit {
            sessions[connection]?.expired = true
            context.metrics.closes[CloseCode.tokenExpired.reason, default: 0] += 1
            router.close(connection, code: .tokenExpired)
        }
    }

    // MARK: effects

    /// This node's connections get the frame from the router; another node's (at the leader) get
    /// it encoded once through that node's channel.
    private func send(_ frame: Frame, to targets: [ConnectionID]) {
        guard let relay, targets.contains(where: { remote[$0] != nil }) else { return router.deliver(frame, to: targets) }
        router.deliver(frame, to: targets.filter { remote[$0] == nil })
        let bytes = frame.encoded()
        for target in targets {
            guard let origin = remote[target] else { continue }
            relay.send(origin.node, .presenceFrame(connection: origin.connection, bytes: bytes))
        }
    }

    /// Carries out effects in order. A failed mint feeds `.callFailed` back; its effects run after
    /// the ones already queued, so the agent's `busy` broadcast precedes its return to `available`.
    private func apply(_ effects: [PresenceEffect]) {
        var pending = effects[...]
        while let effect = pending.popFirst() {
            switch effect {
            case .send(let targets, let frame):
                if frame.type == PresenceFrameType.error.rawValue, let code = frame.error?.code,
                    let name = ErrorCode(rawValue: code)?.name
                {
                    context.metrics.errors[name, default: 0] += targets.count
                }
                send(frame, to: targets)
                // One `ended` effect per request (sent to whichever sides are still connected).
                if frame.type == PresenceFrameType.ended.rawValue, context.webhooks.wants(.presenceRequestEnded),
                    let payload = frame.payload?.objectValue, let request = payload["request_id"]?.stringValue
                {
                    context.webhooks.emit(.presenceRequestEnded, key: "presence", [
                        "request_id": .string(request), "outcome": payload["reason"] ?? .null,
                        "call_id": .null, "room_id": .null, "agent_id": .null, "caller_id": .null,
                    ])
                }
            case .close(let connection, let code):
                if let origin = remote.removeValue(forKey: connection) {
                    // Another node's connection: that node closes it (and counts the close).
                    remoteByOrigin["\(origin.node)/\(origin.connection)"] = nil
                    relay?.send(origin.node, .presenceClose(connection: origin.connection, code: Int(code.rawValue)))
                    continue
                }
                context.metrics.closes[code.reason, default: 0] += 1
                // The hub has already forgotten the old connection; its close must not reach it.
                sessions[connection] = nil
                router.close(connection, code: code)
            case .mintCall(let call):
                do {
                    let (callerToken, agentToken) = try mint(call)
                    send(call.acceptedFrame(token: callerToken), to: [call.callerConnection])
                    send(call.acceptedFrame(token: agentToken), to: [call.agentConnection])
                    if context.webhooks.wants(.presenceRequestEnded) {
                        context.webhooks.emit(.presenceRequestEnded, key: "presence", [
                            "request_id": .string(call.requestID.rawValue), "outcome": "accepted",
                            "call_id": .string(call.callID.rawValue), "room_id": .string(call.roomID.rawValue),
                            "agent_id": .string(call.agent.rawValue), "caller_id": .string(call.caller.rawValue),
                        ])
                    }
                } catch {
                    context.logger.error("call tokens not issued", ["request.id": call.requestID.rawValue, "error": "\(error)"])
                    pending.append(contentsOf: hub.handle(.callFailed(call.requestID), now: context.now()))
                }
            case .storeAgent(let agent, let record):
                guard isStoring, let relay else { continue }
                relay.store([.presenceStore(.agents, field: agent.rawValue, value: record.map { JSONWriter.bytes($0.json) })])
            case .storeRequest(let id, let record):
                guard isStoring, let relay else { continue }
                relay.store([.presenceStore(.requests, field: id.rawValue, value: record.map { JSONWriter.bytes($0.json) })])
            case .notify(.requestRinging(_, let data)):
                if context.webhooks.wants(.presenceRequestRinging) { context.webhooks.emit(.presenceRequestRinging, key: "presence", data) }
            case .notify(.agentStatus(_, let data)):
                if context.webhooks.wants(.presenceAgentStatus) { context.webhooks.emit(.presenceAgentStatus, key: "presence", data) }
            }
        }
    }

    /// One room token per side: same room and call, `sub` and `role` of that side, scope `room`.
    private func mint(_ call: PresenceCall) throws(TokenIssueError) -> (caller: String, agent: String) {
        let config = context.config
        let issuedAt = Date(timeIntervalSince1970: Double(context.now()) / 1000)
        let expiresAt = issuedAt.addingTimeInterval(TimeInterval(config.tokenTTLSeconds))
        func claims(_ peer: PeerID, role: PresenceRole, name: String?) -> PeerTokenClaims {
            PeerTokenClaims(sub: peer, roomID: call.roomID, callID: call.callID, role: role.rawValue, name: name, scope: ["room"],
                            audience: config.jwtAudience, issuedAt: issuedAt, expiresAt: expiresAt,
                            tokenID: CallsAPI.newTokenID())
        }
        let caller = try context.issuer.issue(claims(call.caller, role: .caller, name: call.callerName))
        let agent = try context.issuer.issue(claims(call.agent, role: .agent, name: call.agentName))
        return (caller, agent)
    }
}

/// `req_`, `call_`, `room_` followed by 24 hex digits (96 bits) from OpenSSL's CSPRNG.
struct RandomPresenceIDs: PresenceIDSource {
    private static let digits = Array("0123456789abcdef")

    mutating func make(_ kind: PresenceIDKind) -> String {
        var id = kind.rawValue + "_"
        for byte in SecureRandom.bytes(12) {
            id.append(Self.digits[Int(byte >> 4)])
            id.append(Self.digits[Int(byte & 0x0f)])
        }
        return id
    }
}
