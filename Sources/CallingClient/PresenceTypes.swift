import CallingProtocol

/// An agent's status on the presence channel (docs/protocol.md, "Presence frames"). A struct
/// rather than an enum so a status a newer server sends still arrives (as its raw value); apps set
/// only the four statuses below.
public struct PresenceStatus: Hashable, Sendable, CustomStringConvertible {
    /// The wire value (`available`, `busy`, `away`, `offline`, or one newer than this SDK).
    public let rawValue: String

    init(rawValue: String) { self.rawValue = rawValue }

    /// Takes call requests (the only status that does).
    public static let available = PresenceStatus(rawValue: "available")
    /// In a call; the server sets it when the agent accepts one.
    public static let busy = PresenceStatus(rawValue: "busy")
    /// Connected but not taking calls.
    public static let away = PresenceStatus(rawValue: "away")
    /// Not taking calls; also what the server reports once an agent's grace period has passed.
    public static let offline = PresenceStatus(rawValue: "offline")

    /// The wire value.
    public var description: String { rawValue }
}

/// The role a presence token gives its connection.
public enum PresenceRole: String, Sendable {
    /// Publishes a status and answers call requests.
    case agent
    /// Requests calls.
    case caller
    /// Watches every agent and every request.
    case dashboard
}

/// One agent as the server lists it (`connected.agents`, and every `status` frame).
public struct AgentPresence: Sendable, Equatable {
    /// The agent's peer id (its presence token's `sub`).
    public var agentID: PeerID
    /// What the agent takes (only `.available` takes requests).
    public var status: PresenceStatus
    /// Free text of at most 256 bytes, nil when cleared.
    public var note: String?
    /// The queues the agent takes requests from.
    public var queues: [String]
    /// When status, note or queues last changed, ms since the Unix epoch.
    public var updatedAt: Int64

    init?(_ json: JSONValue?) {
        guard let json, let id = json["agent_id"]?.stringValue, let status = json["status"]?.stringValue else { return nil }
        agentID = PeerID(id)
        self.status = PresenceStatus(rawValue: status)
        note = json["note"]?.stringValue
        queues = json["queues"]?.arrayValue?.compactMap(\.stringValue) ?? []
        updatedAt = json["updated_at"]?.int64Value ?? 0
    }
}

/// A call request, in the shape the receiving role sees it: the offer an agent may accept, the
/// ringing ack a caller gets, or a dashboard's view. Fields a role is not shown are nil.
public struct PresenceRequest: Sendable, Equatable {
    /// The request's id (`req_…`), for `accept`/`decline`/`cancel`.
    public var requestID: String
    /// The agent it rings for (caller ack, dashboard view).
    public var agentID: PeerID?
    /// The caller (agent offer, dashboard view).
    public var callerID: PeerID?
    /// The caller's display name from its token.
    public var name: String?
    /// The queue the request was made to, nil when it named the agent.
    public var queue: String?
    /// The caller's metadata, given to the agent only.
    public var metadata: JSONValue?
    /// When it stops ringing, ms since the Unix epoch.
    public var expiresAt: Int64

    init?(_ json: JSONValue?, from: String?) {
        guard let json, let id = json["request_id"]?.stringValue else { return nil }
        requestID = id
        agentID = json["agent_id"]?.stringValue.map { PeerID($0) }
        callerID = (json["caller_id"]?.stringValue ?? json["from"]?.stringValue ?? from).map { PeerID($0) }
        name = json["name"]?.stringValue
        queue = json["queue"]?.stringValue
        metadata = json["metadata"].flatMap(JSONValue.nonNull)
        expiresAt = json["expires_at"]?.int64Value ?? 0
    }
}

/// The `connected` snapshot a presence connection starts with.
public struct PresenceSnapshot: Sendable, Equatable {
    /// This connection's id (the token's `sub`).
    public var peerID: PeerID
    /// This connection's role; nil for a role newer than this SDK.
    public var role: PresenceRole?
    /// Every agent the server knows, offline ones included, sorted by id.
    public var agents: [AgentPresence]
    /// Dashboards only: every ringing request.
    public var requests: [PresenceRequest]
    /// The server's clock, ms since the Unix epoch.
    public var serverTime: Int64

    init(_ json: JSONValue) {
        peerID = PeerID(json["peer_id"]?.stringValue ?? "")
        role = json["role"]?.stringValue.flatMap(PresenceRole.init(rawValue:))
        agents = (json["agents"]?.arrayValue ?? []).compactMap { AgentPresence($0) }
        requests = (json["requests"]?.arrayValue ?? []).compactMap { PresenceRequest($0, from: nil) }
        serverTime = json["server_time"]?.int64Value ?? 0
    }
}

/// The `accepted` frame: the call exists. Callers and agents get their room token; dashboards see
/// the same frame without one.
public struct PresenceAccepted: Sendable, Equatable {
    /// The request's id (`req_…`), for `accept`/`decline`/`cancel`.
    public var requestID: String
    /// The call created for the request.
    public var callID: CallID
    /// The room both sides join with their tokens.
    public var roomID: RoomID
    /// The agent who accepted.
    public var agentID: PeerID
    /// The caller who asked.
    public var callerID: PeerID
    /// A room token for `/v1/ws` with `sub` = our own id; nil for dashboards.
    public var token: String?

    init?(_ json: JSONValue?) {
        guard let json, let id = json["request_id"]?.stringValue, let call = json["call_id"]?.stringValue,
              let room = json["room_id"]?.stringValue else { return nil }
        requestID = id
        callID = CallID(call)
        roomID = RoomID(room)
        agentID = PeerID(json["agent_id"]?.stringValue ?? "")
        callerID = PeerID(json["caller_id"]?.stringValue ?? "")
        token = json["token"]?.stringValue
    }
}

/// Why a call request ended without a call.
public struct PresenceEndReason: Hashable, Sendable, CustomStringConvertible {
    /// The wire value; one of the constants below or a reason newer than this SDK.
    public let rawValue: String

    init(rawValue: String) { self.rawValue = rawValue }

    /// The agent declined, or left `available` while it rang.
    public static let declined = PresenceEndReason(rawValue: "declined")
    /// The caller cancelled.
    public static let cancelled = PresenceEndReason(rawValue: "cancelled")
    /// Nobody accepted within the server's `presence_request_ttl_seconds`.
    public static let timeout = PresenceEndReason(rawValue: "timeout")
    /// The caller's or the agent's connection closed while it rang.
    public static let disconnected = PresenceEndReason(rawValue: "disconnected")
    /// The agent accepted but the server could not create the call.
    public static let failed = PresenceEndReason(rawValue: "failed")

    /// The wire value.
    public var description: String { rawValue }
}

/// The `ended` frame.
public struct PresenceEnded: Sendable, Equatable {
    /// The request's id (`req_…`), for `accept`/`decline`/`cancel`.
    public var requestID: String
    /// Why it ended.
    public var reason: PresenceEndReason
    /// Dashboards only.
    public var agentID: PeerID?
    /// Dashboards only.
    public var callerID: PeerID?

    init?(_ json: JSONValue?) {
        guard let json, let id = json["request_id"]?.stringValue else { return nil }
        requestID = id
        reason = PresenceEndReason(rawValue: json["reason"]?.stringValue ?? "")
        agentID = json["agent_id"]?.stringValue.map { PeerID($0) }
        callerID = json["caller_id"]?.stringValue.map { PeerID($0) }
    }
}

/// What a `PresenceClient` reports, in order.
public enum PresenceEvent: Sendable, Equatable {
    /// The snapshot: on `connect()` and after every automatic reconnect.
    case connected(PresenceSnapshot)
    case stateChanged(CallState)
    /// One agent's new status.
    case status(AgentPresence)
    /// For an agent: an offer to accept or decline. For a caller: the ack of its request
    /// (ringing). For a dashboard: a request that started ringing.
    case request(PresenceRequest)
    /// The call exists: connect a `SignalingClient` with `token`.
    case accepted(PresenceAccepted)
    /// The request ended without a call.
    case ended(PresenceEnded)
    /// A refused frame; the connection stays open. `requestID` and `frameType` name what was refused.
    case error(CallingError, requestID: String?, frameType: String?)
    /// The server closed the socket with a close frame (`disconnected` follows).
    case closed(code: UInt16, reason: String)
    /// The socket ended; nil after `disconnect()`. `state` says whether a reconnect follows.
    case disconnected(CallingError?)
}
