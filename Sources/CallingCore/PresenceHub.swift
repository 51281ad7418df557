/// Who a presence connection is, as proven by its token (and, for agents, the `queues` query).
public struct PresenceIdentity: Sendable, Equatable {
    public var peer: PeerID
    public var role: PresenceRole
    public var name: String?
    /// Agents only: the queues named at connect. Nil keeps the queues the agent had before.
    public var queues: [QueueName]?

    public init(peer: PeerID, role: PresenceRole, name: String? = nil, queues: [QueueName]? = nil) {
        self.peer = peer
        self.role = role
        self.name = name
        self.queues = queues
    }
}

/// A request the agent accepted: the environment creates the tokens and sends `accepted` to both
/// sides (the hub holds no key). Ids are final; the agent is already `busy`.
public struct PresenceCall: Sendable, Equatable {
    public var requestID: PresenceRequestID
    public var callID: CallID
    public var roomID: RoomID
    public var caller: PeerID
    public var callerName: String?
    public var callerConnection: ConnectionID
    public var agent: PeerID
    public var agentName: String?
    public var agentConnection: ConnectionID

    public init(requestID: PresenceRequestID, callID: CallID, roomID: RoomID, caller: PeerID, callerName: String?,
                callerConnection: ConnectionID, agent: PeerID, agentName: String?, agentConnection: ConnectionID)
    {
        self.requestID = requestID
        self.callID = callID
        self.roomID = roomID
        self.caller = caller
        self.callerName = callerName
        self.callerConnection = callerConnection
        self.agent = agent
        self.agentName = agentName
        self.agentConnection = agentConnection
    }

    /// `accepted` for one side, carrying that side's own room token.
    public func acceptedFrame(token: String) -> Frame {
        Frame(type: PresenceFrameType.accepted.rawValue, payload: [
            "request_id": .string(requestID.rawValue), "call_id": .string(callID.rawValue),
            "room_id": .string(roomID.rawValue), "agent_id": .string(agent.rawValue),
            "caller_id": .string(caller.rawValue), "token": .string(token),
        ])
    }
}

/// Why a request ended, as sent in `ended.reason`.
public enum PresenceEndReason: String, Sendable, Equatable {
    /// The agent declined.
    case declined
    /// The caller cancelled.
    case cancelled
    /// Nobody accepted within `presence_request_ttl_seconds`.
    case timeout
    /// The caller's or the agent's connection closed while it rang.
    case disconnected
    /// The agent accepted but the server could not create the call tokens.
    case failed
}

/// Everything the presence hub reacts to. Inputs arrive on one thread, in order.
public enum PresenceInput: Sendable {
    case connect(ConnectionID, PresenceIdentity)
    case message(ConnectionID, PresenceMessage)
    case disconnect(ConnectionID)
    /// The environment could not mint the tokens of an accepted call.
    case callFailed(PresenceRequestID)
    /// Time passed: grace periods and request TTLs fire.
    case tick
}

/// What the presence hub asks its environment to do, in order.
public enum PresenceEffect: Sendable, Equatable {
    /// Deliver one frame to each connection.
    case send([ConnectionID], Frame)
    /// Close a connection after the frames already queued for it.
    case close(ConnectionID, CloseCode)
    /// Mint a room token for each side and send each its `acceptedFrame(token:)`; on failure feed
    /// back `.callFailed`.
    case mintCall(PresenceCall)
    /// Keep this agent's record in shared storage (nil: delete it), for a hub that resumes
    /// elsewhere. Comes before the frames of the same input, so storage is written first.
    case storeAgent(PeerID, PresenceAgentRecord?)
    /// Keep this ringing request in shared storage (nil: it no longer rings, delete it).
    case storeRequest(PresenceRequestID, PresenceRequestRecord?)
    /// Tell the backend (webhooks), whether or not anybody is connected to hear the frames.
    case notify(PresenceNotice)
}

/// What a backend hears about presence besides the frames: enough to wake an agent's app with a
/// push notification while its request rings, and to follow agents' statuses.
public enum PresenceNotice: Sendable, Equatable {
    /// A request started ringing for `agent_id` (once per request: not again when the offer is
    /// sent to a takeover connection or the ack to a resumed caller). Payload: `request_id`,
    /// `caller_id`, `caller_name`, `agent_id`, `queue`, `metadata`, `expires_at`, `ttl_ms`.
    case requestRinging(PresenceRequestID, [String: JSONValue])
    /// An agent's status entry changed (the payload of the `status` frame, sent whether or not
    /// anybody is connected to receive it).
    case agentStatus(PeerID, [String: JSONValue])
}

public enum PresenceIDKind: String, Sendable, CaseIterable {
    case request = "req"
    case call
    case room
}

/// Where request, call and room ids come from. Injected like the clock, so tests see fixed ids and
/// the server uses random ones.
public protocol PresenceIDSource: Sendable {
    mutating func make(_ kind: PresenceIDKind) -> String
}

/// `req_1`, `call_2`, `room_3`, …: predictable ids for tests.
public struct SequentialPresenceIDs: PresenceIDSource {
    private var counter = 0
    public init() {}
    public mutating func make(_ kind: PresenceIDKind) -> String {
        counter += 1
        return "\(kind.rawValue)_\(counter)"
    }
}

public struct PresenceSettings: Sendable, Equatable {
    /// An agent with no connection this long becomes `offline`.
    public var graceMs: Int64
    /// A request nobody answers ends with `timeout` after this.
    public var requestTTLMs: Int64
    /// How long an ended request id is remembered, so a late `accept` gets 409 rather than 404.
    public var endedMemoryMs: Int64
    /// An agent offline and unconnected this long is forgotten (dropped from snapshots), so the
    /// table does not grow with every agent id ever seen.
    public var forgetMs: Int64
    /// A hub that resumed another's state waits this long for both sides of a ringing request to
    /// connect again; a request still missing one then ends with `disconnected`.
    public var resumeMs: Int64

    public init(graceMs: Int64 = 30_000, requestTTLMs: Int64 = 90_000, endedMemoryMs: Int64? = nil,
                forgetMs: Int64 = 86_400_000, resumeMs: Int64 = 10_000)
    {
        self.graceMs = graceMs
        self.requestTTLMs = requestTTLMs
        self.endedMemoryMs = endedMemoryMs ?? max(requestTTLMs, 60_000)
        self.forgetMs = forgetMs
        self.resumeMs = resumeMs
    }
}

/// Agents' statuses and call requests: a synchronous state machine like `Hub`. No socket, no
/// clock (every input carries `now`), no key material (accepting yields `.mintCall`).
public struct PresenceHub: Sendable {
    struct Agent: Sendable {
        var status: PresenceStatus
        var note: String?
        var queues: [QueueName]
        var updatedAt: Millis
        /// When the agent last turned `available`: queue routing picks the longest idle first.
        var availableSince: Millis
        var connection: ConnectionID?
        var name: String?
        /// When its last connection closed; nil while connected or once offline.
        var disconnectedAt: Millis?
        /// Set when the grace period (not the agent) made it `offline`: the next connect revives it.
        var wentOfflineByGrace = false
    }

    struct Request: Sendable {
        var id: PresenceRequestID
        var caller: PeerID
        var callerName: String?
        /// Nil for a resumed request until a connection of the caller opens here.
        var callerConnection: ConnectionID?
        var agent: PeerID
        var queue: QueueName?
        var metadata: JSONValue?
        var expiresAt: Millis
        /// A resumed request: when it ends unless both sides are connected by then.
        var resumeBy: Millis?

        var record: PresenceRequestRecord {
            PresenceRequestRecord(id: id, caller: caller, callerName: callerName, agent: agent, queue: queue, metadata: metadata,
                                  expiresAt: expiresAt)
        }
    }

    /// A finished request, kept for `endedMemoryMs` to tell "too late" (409) from "never" (404).
    struct Tombstone: Sendable {
        enum Outcome: Sendable, Equatable {
            case accepted
            case ended(PresenceEndReason)
        }

        var agent: PeerID
        var caller: PeerID
        var callerConnection: ConnectionID?
        var outcome: Outcome
        var forgetAt: Millis
        /// A resumed request that ended while no connection of its caller was here: the caller's
        /// next connection gets the `ended` it missed.
        var callerUntold = false

        var text: String {
            switch outcome {
            case .accepted: return "been accepted"
            case .ended(let reason): return "ended (\(reason.rawValue))"
            }
        }
    }

    public let settings: PresenceSettings
    private var ids: any PresenceIDSource
    private var agents: [PeerID: Agent] = [:]
    private var connections: [ConnectionID: PresenceIdentity] = [:]
    /// Ringing requests. An agent rings for at most one, a caller waits on at most one.
    private var requests: [PresenceRequestID: Request] = [:]
    private var tombstones: [PresenceRequestID: Tombstone] = [:]
    /// What changed in the stored state during the current input (see `.storeAgent`).
    private var changedAgents: Set<PeerID> = []
    private var changedRequests: Set<PresenceRequestID> = []

    public init(settings: PresenceSettings = PresenceSettings(), ids: any PresenceIDSource = SequentialPresenceIDs()) {
        self.settings = settings
        self.ids = ids
    }

    /// A hub that takes over `state` from another (a presence leader that died): statuses, notes
    /// and queues are as they were, and every agent counts as disconnected (since when it was, or
    /// since `now`), so its grace runs unless it connects here again. Ringing requests keep their
    /// TTL and wait `resumeMs` for both sides to connect here; the caller gets the `ringing` ack
    /// again and the agent the offer, as after an agent's takeover.
    public init(settings: PresenceSettings = PresenceSettings(), ids: any PresenceIDSource = SequentialPresenceIDs(),
                resuming state: PresenceState, now: Millis)
    {
        self.init(settings: settings, ids: ids)
        for record in state.agents {
            agents[record.agent] = Agent(status: record.status, note: record.note, queues: record.queues, updatedAt: record.updatedAt,
                                         availableSince: record.availableSince, connection: nil, name: record.name,
                                         disconnectedAt: record.status == .offline && record.wentOfflineByGrace
                                             ? nil : (record.disconnectedAt ?? now),
                                         wentOfflineByGrace: record.wentOfflineByGrace)
        }
        var ringing: Set<PeerID> = []
        for record in state.requests where !ringing.contains(record.agent) {
            // Storage written by one leader holds at most one request per agent and per caller;
            // anything else is dropped rather than rung twice.
            guard !requests.values.contains(where: { $0.caller == record.caller }) else { continue }
            ringing.insert(record.agent)
            requests[record.id] = Request(id: record.id, caller: record.caller, callerName: record.callerName, callerConnection: nil,
                                          agent: record.agent, queue: record.queue, metadata: record.metadata,
                                          expiresAt: record.expiresAt, resumeBy: now + settings.resumeMs)
        }
    }

    /// The state a hub elsewhere would resume from (`init(settings:ids:resuming:now:)`).
    public var state: PresenceState {
        PresenceState(agents: agents.keys.compactMap(agentRecord), requests: requests.values.map(\.record))
    }

    private func agentRecord(_ id: PeerID) -> PresenceAgentRecord? {
        guard let agent = agents[id] else { return nil }
        return PresenceAgentRecord(agent: id, status: agent.status, note: agent.note, queues: agent.queues, updatedAt: agent.updatedAt,
                                   availableSince: agent.availableSince, name: agent.name, disconnectedAt: agent.disconnectedAt,
                                   wentOfflineByGrace: agent.wentOfflineByGrace)
    }

    public var connectionCount: Int { connections.count }
    public var ringingCount: Int { requests.count }

    public func status(of agent: PeerID) -> PresenceStatus? { agents[agent]?.status }

    public mutating func handle(_ input: PresenceInput, now: Millis) -> [PresenceEffect] {
        let effects = react(input, now: now)
        guard !changedAgents.isEmpty || !changedRequests.isEmpty else { return effects }
        // Storage first: a frame that tells someone about a change never overtakes the change's write.
        var stored: [PresenceEffect] = changedAgents.sorted().map { .storeAgent($0, agentRecord($0)) }
        stored += changedRequests.sorted().map { .storeRequest($0, requests[$0]?.record) }
        changedAgents = []
        changedRequests = []
        return stored + effects
    }

    private mutating func react(_ input: PresenceInput, now: Millis) -> [PresenceEffect] {
        switch input {
        case .connect(let connection, let identity):
            return connect(connection, identity, now: now)
        case .message(let connection, let message):
            guard let identity = connections[connection] else { return [] }
            return handle(message, from: connection, identity, now: now)
        case .disconnect(let connection):
            return disconnect(connection, now: now)
        case .callFailed(let id):
            return callFailed(id, now: now)
        case .tick:
            return tick(now: now)
        }
    }

    // MARK: connections

    private mutating func connect(_ connection: ConnectionID, _ identity: PresenceIdentity, now: Millis) -> [PresenceEffect] {
        var effects: [PresenceEffect] = []
        connections[connection] = identity
        if identity.role == .agent {
            var agent = agents[identity.peer] ?? Agent(status: .offline, note: nil, queues: [], updatedAt: now,
                                                       availableSince: now, connection: nil)
            if let old = agent.connection, old != connection {
                // Same agent id again: the new connection takes over; a ringing request follows it.
                connections[old] = nil
                effects.append(.close(old, .replaced))
            }
            agent.connection = connection
            agent.disconnectedAt = nil
            agent.name = identity.name
            var changed = false
            if let queues = identity.queues, queues != agent.queues {
                agent.queues = queues
                changed = true
            }
            // A new agent, or one whose grace ran out, comes back `available`; any other status
            // (including an `offline` the agent chose) survives the reconnect.
            if agents[identity.peer] == nil || agent.wentOfflineByGrace {
                agent.status = .available
                agent.note = nil
                agent.availableSince = now
                agent.wentOfflineByGrace = false
                changed = true
            }
            if changed { agent.updatedAt = now }
            agents[identity.peer] = agent
            changedAgents.insert(identity.peer)
            effects.append(.send([connection], connectedFrame(identity, now: now)))
            // The others hear about it; the agent's own `connected` already shows the new state.
            if changed { effects += statusDelta(identity.peer, except: connection) }
            for request in requests.values.sorted(by: { $0.id < $1.id }) where request.agent == identity.peer {
                effects.append(.send([connection], offerFrame(request)))
                settleResume(request.id)
            }
            return effects
        }
        effects.append(.send([connection], connectedFrame(identity, now: now)))
        if identity.role == .caller {
            // A resumed request finds its caller again: the ack once more, so the caller knows it still rings.
            for request in requests.values.sorted(by: { $0.id < $1.id })
            where request.caller == identity.peer && request.callerConnection == nil {
                requests[request.id]?.callerConnection = connection
                effects.append(.send([connection], ackFrame(request)))
                settleResume(request.id)
            }
            for (id, tombstone) in tombstones.sorted(by: { $0.key < $1.key }) where tombstone.caller == identity.peer && tombstone.callerUntold {
                tombstones[id]?.callerUntold = false
                if case .ended(let reason) = tombstone.outcome { effects.append(.send([connection], endedFrame(id, reason))) }
            }
        }
        return effects
    }

    /// A resumed request whose both sides are connected here again behaves as any other from now on.
    private mutating func settleResume(_ id: PresenceRequestID) {
        guard let request = requests[id], request.resumeBy != nil, request.callerConnection != nil,
            agents[request.agent]?.connection != nil
        else { return }
        requests[id]?.resumeBy = nil
    }

    private mutating func disconnect(_ connection: ConnectionID, now: Millis) -> [PresenceEffect] {
        guard let identity = connections.removeValue(forKey: connection) else { return [] }
        var effects: [PresenceEffect] = []
        switch identity.role {
        case .agent:
            guard agents[identity.peer]?.connection == connection else { return [] }
            agents[identity.peer]?.connection = nil
            agents[identity.peer]?.disconnectedAt = now
            changedAgents.insert(identity.peer)
            for request in requests.values.sorted(by: { $0.id < $1.id }) where request.agent == identity.peer {
                effects += end(request.id, .disconnected, now: now)
            }
        case .caller:
            for request in requests.values.sorted(by: { $0.id < $1.id }) where request.callerConnection == connection {
                effects += end(request.id, .disconnected, now: now)
            }
        case .dashboard:
            break
        }
        return effects
    }

    // MARK: frames

    private mutating func handle(_ message: PresenceMessage, from connection: ConnectionID, _ identity: PresenceIdentity,
                                 now: Millis) -> [PresenceEffect]
    {
        let type = message.frameType.rawValue
        func refuse(_ code: ErrorCode, _ text: String) -> [PresenceEffect] {
            [.send([connection], Self.errorFrame(code, text, type: type, requestID: message.requestID))]
        }
        let allowed: Set<PresenceRole>
        switch message {
        case .ping: allowed = Set(PresenceRole.allCases)
        case .setStatus, .accept, .decline: allowed = [.agent]
        case .request, .cancel: allowed = [.caller]
        }
        guard allowed.contains(identity.role) else {
            let roles = PresenceRole.allCases.filter(allowed.contains).map(\.rawValue).joined(separator: ", ")
            return refuse(.forbidden, "\(type) is for \(roles) connections; this token's role is \(identity.role.rawValue)")
        }

        switch message {
        case .ping(let payload):
            return [.send([connection], Frame(type: PresenceFrameType.pong.rawValue, payload: payload))]

        case .setStatus(let status, let note, let queues):
            guard var agent = agents[identity.peer] else { return [] }
            if status == .available && agent.status != .available { agent.availableSince = now }
            agent.status = status
            agent.note = note
            if let queues { agent.queues = queues }
            agent.updatedAt = now
            agents[identity.peer] = agent
            changedAgents.insert(identity.peer)
            var effects = statusDelta(identity.peer)
            // An agent who stops being available no longer rings.
            if status != .available {
                for request in requests.values.sorted(by: { $0.id < $1.id }) where request.agent == identity.peer {
                    effects += end(request.id, .declined, now: now)
                }
            }
            return effects

        case .request(let target, let metadata):
            if let waiting = requests.values.first(where: { $0.caller == identity.peer }) {
                return refuse(.conflict, "request \(waiting.id.rawValue) is still ringing; cancel it first")
            }
            let agentID: PeerID
            var queue: QueueName?
            switch target {
            case .agent(let id):
                guard let agent = agents[id] else { return refuse(.peerNotFound, "no agent '\(id.rawValue.prefix(128))'") }
                guard id != identity.peer else { return refuse(.conflict, "an agent cannot be called by itself") }
                guard agent.status == .available, agent.connection != nil else {
                    let state = agent.connection == nil ? "not connected" : agent.status.rawValue
                    return refuse(.conflict, "agent '\(id.rawValue.prefix(128))' is not available (\(state))")
                }
                guard !requests.values.contains(where: { $0.agent == id }) else {
                    return refuse(.conflict, "agent '\(id.rawValue.prefix(128))' is answering another request")
                }
                agentID = id
            case .queue(let name):
                let members = agents.filter { $0.value.queues.contains(name) }
                guard !members.isEmpty else { return refuse(.peerNotFound, "no agent is in queue '\(name.rawValue)'") }
                let ringing = Set(requests.values.map(\.agent))
                let candidates = members.filter {
                    $0.value.status == .available && $0.value.connection != nil && !ringing.contains($0.key) && $0.key != identity.peer
                }
                guard let pick = candidates.min(by: { ($0.value.availableSince, $0.key) < ($1.value.availableSince, $1.key) }) else {
                    return refuse(.conflict, "no agent in queue '\(name.rawValue)' is available")
                }
                agentID = pick.key
                queue = name
            }
            let request = Request(id: PresenceRequestID(ids.make(.request)), caller: identity.peer, callerName: identity.name,
                                  callerConnection: connection, agent: agentID, queue: queue, metadata: metadata,
                                  expiresAt: now + settings.requestTTLMs)
            requests[request.id] = request
            changedRequests.insert(request.id)
            var effects: [PresenceEffect] = []
            if let agentConnection = agents[agentID]?.connection {
                effects.append(.send([agentConnection], offerFrame(request)))
            }
            effects.append(.send([connection], ackFrame(request)))
            effects += toDashboards(Frame(type: PresenceFrameType.request.rawValue, from: request.caller.rawValue,
                                          payload: supervisorEntry(request)))
            effects.append(.notify(.requestRinging(request.id, [
                "request_id": .string(request.id.rawValue), "caller_id": .string(request.caller.rawValue),
                "caller_name": request.callerName.map(JSONValue.string) ?? .null, "agent_id": .string(agentID.rawValue),
                "queue": queue.map { .string($0.rawValue) } ?? .null, "metadata": metadata ?? .null,
                "expires_at": .int(request.expiresAt), "ttl_ms": .int(settings.requestTTLMs),
            ])))
            return effects

        case .accept(let id):
            guard let request = requests[id], request.agent == identity.peer else { return refuseUnknown(id, connection, message, now: now) }
            guard let callerConnection = request.callerConnection else {
                // A resumed request whose caller has not connected here yet: nobody to give the
                // call to. It rings on until the caller is back or `resumeMs` ends it.
                return [.send([connection], Self.errorFrame(.conflict, "request \(id.rawValue.prefix(128))'s caller is reconnecting; try again",
                                                            type: message.frameType.rawValue, requestID: id))]
            }
            requests[id] = nil
            changedRequests.insert(id)
            remember(request, .accepted, now: now)
            // The caller's connection is alive: its close would have ended the request.
            let call = PresenceCall(requestID: id, callID: CallID(ids.make(.call)), roomID: RoomID(ids.make(.room)),
                                    caller: request.caller, callerName: request.callerName,
                                    callerConnection: callerConnection, agent: identity.peer,
                                    agentName: identity.name, agentConnection: connection)
            agents[identity.peer]?.status = .busy
            agents[identity.peer]?.updatedAt = now
            changedAgents.insert(identity.peer)
            // Dashboards learn where the call went, never its tokens.
            let seen = Frame(type: PresenceFrameType.accepted.rawValue, payload: [
                "request_id": .string(id.rawValue), "call_id": .string(call.callID.rawValue), "room_id": .string(call.roomID.rawValue),
                "agent_id": .string(call.agent.rawValue), "caller_id": .string(call.caller.rawValue),
            ])
            return [.mintCall(call)] + toDashboards(seen) + statusDelta(identity.peer)

        case .decline(let id):
            guard let request = requests[id], request.agent == identity.peer else { return refuseUnknown(id, connection, message, now: now) }
            return end(request.id, .declined, now: now)

        case .cancel(let id):
            guard let request = requests[id], request.caller == identity.peer else { return refuseUnknown(id, connection, message, now: now) }
            return end(request.id, .cancelled, now: now)
        }
    }

    /// 409 for a request this connection was part of that has ended; 404 for anything else, so
    /// request ids of others reveal nothing.
    private func refuseUnknown(_ id: PresenceRequestID, _ connection: ConnectionID, _ message: PresenceMessage, now: Millis)
        -> [PresenceEffect]
    {
        let type = message.frameType.rawValue
        let peer = connections[connection]?.peer
        if let tombstone = tombstones[id], tombstone.agent == peer || tombstone.caller == peer {
            return [.send([connection], Self.errorFrame(.conflict, "request \(id.rawValue.prefix(128)) has already \(tombstone.text)",
                                                        type: type, requestID: id))]
        }
        return [.send([connection], Self.errorFrame(.peerNotFound, "no request \(id.rawValue.prefix(128)) for you",
                                                    type: type, requestID: id))]
    }

    private mutating func callFailed(_ id: PresenceRequestID, now: Millis) -> [PresenceEffect] {
        guard let tombstone = tombstones[id], tombstone.outcome == .accepted else { return [] }
        tombstones[id]?.outcome = .ended(.failed)
        var effects: [PresenceEffect] = []
        var targets: [ConnectionID] = []
        if let caller = tombstone.callerConnection, connections[caller] != nil { targets.append(caller) }
        if let connection = agents[tombstone.agent]?.connection { targets.append(connection) }
        if !targets.isEmpty { effects.append(.send(targets, endedFrame(id, .failed))) }
        effects += toDashboards(supervisorEndedFrame(id, .failed, agent: tombstone.agent, caller: tombstone.caller))
        // The call never existed, so the agent is not busy with it.
        if agents[tombstone.agent]?.status == .busy {
            agents[tombstone.agent]?.status = .available
            agents[tombstone.agent]?.availableSince = now
            agents[tombstone.agent]?.updatedAt = now
            changedAgents.insert(tombstone.agent)
            effects += statusDelta(tombstone.agent)
        }
        return effects
    }

    // MARK: ending requests

    private mutating func end(_ id: PresenceRequestID, _ reason: PresenceEndReason, now: Millis) -> [PresenceEffect] {
        guard let request = requests.removeValue(forKey: id) else { return [] }
        changedRequests.insert(id)
        remember(request, .ended(reason), now: now)
        var targets: [ConnectionID] = []
        if let caller = request.callerConnection, connections[caller] != nil {
            targets.append(caller)
        } else if request.resumeBy != nil {
            tombstones[id]?.callerUntold = true
        }
        if let agentConnection = agents[request.agent]?.connection { targets.append(agentConnection) }
        let effects: [PresenceEffect] = targets.isEmpty ? [] : [.send(targets, endedFrame(id, reason))]
        return effects + toDashboards(supervisorEndedFrame(id, reason, agent: request.agent, caller: request.caller))
    }

    private mutating func remember(_ request: Request, _ outcome: Tombstone.Outcome, now: Millis) {
        tombstones[request.id] = Tombstone(agent: request.agent, caller: request.caller, callerConnection: request.callerConnection,
                                           outcome: outcome, forgetAt: now + settings.endedMemoryMs)
    }

    // MARK: timers

    private mutating func tick(now: Millis) -> [PresenceEffect] {
        var effects: [PresenceEffect] = []
        for request in requests.values.sorted(by: { $0.id < $1.id }) where request.expiresAt <= now {
            effects += end(request.id, .timeout, now: now)
        }
        for request in requests.values.sorted(by: { $0.id < $1.id }) where (request.resumeBy ?? .max) <= now {
            effects += end(request.id, .disconnected, now: now)
        }
        for (id, agent) in agents.sorted(by: { $0.key < $1.key }) {
            guard let since = agent.disconnectedAt, since + settings.graceMs <= now else { continue }
            agents[id]?.disconnectedAt = nil
            changedAgents.insert(id)
            guard agent.status != .offline else { continue }
            agents[id]?.status = .offline
            agents[id]?.note = nil
            agents[id]?.updatedAt = now
            agents[id]?.wentOfflineByGrace = true
            changedAgents.insert(id)
            effects += statusDelta(id)
        }
        tombstones = tombstones.filter { $0.value.forgetAt > now }
        // Forgotten agents were already announced offline; a later connect starts them afresh.
        let kept = agents.filter { _, agent in
            agent.connection != nil || agent.status != .offline || agent.updatedAt + settings.forgetMs > now
        }
        if kept.count != agents.count { changedAgents.formUnion(agents.keys.filter { kept[$0] == nil }) }
        agents = kept
        return effects
    }

    // MARK: frames out

    private func agentEntry(_ id: PeerID, _ agent: Agent) -> JSONValue {
        [
            "agent_id": .string(id.rawValue), "status": .string(agent.status.rawValue),
            "note": agent.note.map(JSONValue.string) ?? .null,
            "queues": .array(agent.queues.map { .string($0.rawValue) }), "updated_at": .int(agent.updatedAt),
        ]
    }

    private func connectedFrame(_ identity: PresenceIdentity, now: Millis) -> Frame {
        let list = agents.sorted { $0.key < $1.key }.map { agentEntry($0.key, $0.value) }
        var payload: [String: JSONValue] = [
            "peer_id": .string(identity.peer.rawValue), "role": .string(identity.role.rawValue),
            "agents": .array(list), "server_time": .int(now),
        ]
        if identity.role == .dashboard {
            payload["requests"] = .array(requests.values.sorted { $0.id < $1.id }.map(supervisorEntry))
        }
        return Frame(type: PresenceFrameType.connected.rawValue, payload: .object(payload))
    }

    /// A ringing request as a supervisor sees it: who rings whom, from which queue, until when.
    /// Not the caller's metadata, which is for the agent.
    private func supervisorEntry(_ request: Request) -> JSONValue {
        [
            "request_id": .string(request.id.rawValue), "agent_id": .string(request.agent.rawValue),
            "caller_id": .string(request.caller.rawValue), "name": request.callerName.map(JSONValue.string) ?? .null,
            "queue": request.queue.map { .string($0.rawValue) } ?? .null, "state": "ringing",
            "expires_at": .int(request.expiresAt),
        ]
    }

    private func supervisorEndedFrame(_ id: PresenceRequestID, _ reason: PresenceEndReason, agent: PeerID, caller: PeerID) -> Frame {
        Frame(type: PresenceFrameType.ended.rawValue, payload: [
            "request_id": .string(id.rawValue), "reason": .string(reason.rawValue),
            "agent_id": .string(agent.rawValue), "caller_id": .string(caller.rawValue),
        ])
    }

    /// `frame` to every dashboard connection: they watch requests as well as statuses.
    private func toDashboards(_ frame: Frame) -> [PresenceEffect] {
        let targets = connections.filter { $0.value.role == .dashboard }.map(\.key).sorted()
        return targets.isEmpty ? [] : [.send(targets, frame)]
    }

    /// The agent's current status to every connection, the agent's own included.
    private func statusDelta(_ id: PeerID, except skipped: ConnectionID? = nil) -> [PresenceEffect] {
        guard let agent = agents[id] else { return [] }
        let entry = agentEntry(id, agent)
        let notice = PresenceEffect.notify(.agentStatus(id, entry.objectValue ?? [:]))
        let targets = connections.keys.filter { $0 != skipped }.sorted()
        guard !targets.isEmpty else { return [notice] }
        let frame = Frame(type: PresenceFrameType.status.rawValue, from: id.rawValue, payload: entry)
        return [.send(targets, frame), notice]
    }

    /// To the caller: its request rings (`state: "ringing"`).
    private func ackFrame(_ request: Request) -> Frame {
        Frame(type: PresenceFrameType.request.rawValue, payload: [
            "request_id": .string(request.id.rawValue), "agent_id": .string(request.agent.rawValue), "state": "ringing",
            "queue": request.queue.map { .string($0.rawValue) } ?? .null, "expires_at": .int(request.expiresAt),
        ])
    }

    private func offerFrame(_ request: Request) -> Frame {
        Frame(type: PresenceFrameType.request.rawValue, from: request.caller.rawValue, payload: [
            "request_id": .string(request.id.rawValue), "from": .string(request.caller.rawValue),
            "name": request.callerName.map(JSONValue.string) ?? .null,
            "queue": request.queue.map { .string($0.rawValue) } ?? .null,
            "metadata": request.metadata ?? .null, "expires_at": .int(request.expiresAt),
        ])
    }

    private func endedFrame(_ id: PresenceRequestID, _ reason: PresenceEndReason) -> Frame {
        Frame(type: PresenceFrameType.ended.rawValue, payload: [
            "request_id": .string(id.rawValue), "reason": .string(reason.rawValue),
        ])
    }

    static func errorFrame(_ code: ErrorCode, _ message: String, type: String, requestID: PresenceRequestID?) -> Frame {
        var payload: [String: JSONValue] = ["type": .string(type)]
        if let requestID { payload["request_id"] = .string(requestID.rawValue) }
        return Frame(type: PresenceFrameType.error.rawValue, payload: .object(payload), error: WireError(code, message))
    }
}
