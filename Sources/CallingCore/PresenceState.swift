/// An agent as the presence hub keeps it in shared storage, so that a hub started elsewhere (a new
/// presence leader) resumes it. Connections are not part of it: they belong to the nodes, which
/// open them at the new leader again.
public struct PresenceAgentRecord: Sendable, Equatable {
    public var agent: PeerID
    public var status: PresenceStatus
    public var note: String?
    public var queues: [QueueName]
    public var updatedAt: Millis
    public var availableSince: Millis
    public var name: String?
    /// When its last connection closed; nil while connected (or once offline by grace).
    public var disconnectedAt: Millis?
    public var wentOfflineByGrace: Bool

    public init(agent: PeerID, status: PresenceStatus, note: String?, queues: [QueueName], updatedAt: Millis,
                availableSince: Millis, name: String?, disconnectedAt: Millis?, wentOfflineByGrace: Bool)
    {
        self.agent = agent
        self.status = status
        self.note = note
        self.queues = queues
        self.updatedAt = updatedAt
        self.availableSince = availableSince
        self.name = name
        self.disconnectedAt = disconnectedAt
        self.wentOfflineByGrace = wentOfflineByGrace
    }

    /// The stored form (one JSON object; the agent id is the storage key and is repeated inside).
    public var json: JSONValue {
        [
            "agent_id": .string(agent.rawValue), "status": .string(status.rawValue), "note": note.map(JSONValue.string) ?? .null,
            "queues": .array(queues.map { .string($0.rawValue) }), "updated_at": .int(updatedAt),
            "available_since": .int(availableSince), "name": name.map(JSONValue.string) ?? .null,
            "disconnected_at": disconnectedAt.map(JSONValue.int) ?? .null, "offline_by_grace": .bool(wentOfflineByGrace),
        ]
    }

    /// Nil for anything `json` does not produce: a record written by an incompatible version is
    /// skipped rather than half-read.
    public init?(json: JSONValue) {
        guard let id = json["agent_id"]?.stringValue, let statusText = json["status"]?.stringValue,
            let status = PresenceStatus(rawValue: statusText), let queues = json["queues"]?.arrayValue,
            let updatedAt = json["updated_at"]?.int64Value, let availableSince = json["available_since"]?.int64Value
        else { return nil }
        let names = queues.compactMap(\.stringValue)
        guard names.count == queues.count else { return nil }
        self.init(agent: PeerID(id), status: status, note: json["note"]?.stringValue, queues: names.map { QueueName($0) },
                  updatedAt: updatedAt, availableSince: availableSince, name: json["name"]?.stringValue,
                  disconnectedAt: json["disconnected_at"]?.int64Value,
                  wentOfflineByGrace: json["offline_by_grace"]?.boolValue ?? false)
    }
}

/// A ringing request as the presence hub keeps it in shared storage. Its TTL is absolute
/// (`expiresAt`), so a resumed request times out when it would have anyway.
public struct PresenceRequestRecord: Sendable, Equatable {
    public var id: PresenceRequestID
    public var caller: PeerID
    public var callerName: String?
    public var agent: PeerID
    public var queue: QueueName?
    public var metadata: JSONValue?
    public var expiresAt: Millis

    public init(id: PresenceRequestID, caller: PeerID, callerName: String?, agent: PeerID, queue: QueueName?,
                metadata: JSONValue?, expiresAt: Millis)
    {
        self.id = id
        self.caller = caller
        self.callerName = callerName
        self.agent = agent
        self.queue = queue
        self.metadata = metadata
        self.expiresAt = expiresAt
    }

    /// The stored form (one JSON object; the request id is the storage key and is repeated inside).
    public var json: JSONValue {
        [
            "request_id": .string(id.rawValue), "caller_id": .string(caller.rawValue),
            "caller_name": callerName.map(JSONValue.string) ?? .null, "agent_id": .string(agent.rawValue),
            "queue": queue.map { .string($0.rawValue) } ?? .null, "metadata": metadata ?? .null, "expires_at": .int(expiresAt),
        ]
    }

    public init?(json: JSONValue) {
        guard let id = json["request_id"]?.stringValue, let caller = json["caller_id"]?.stringValue,
            let agent = json["agent_id"]?.stringValue, let expiresAt = json["expires_at"]?.int64Value
        else { return nil }
        self.init(id: PresenceRequestID(id), caller: PeerID(caller), callerName: json["caller_name"]?.stringValue,
                  agent: PeerID(agent), queue: json["queue"]?.stringValue.map { QueueName($0) },
                  metadata: json["metadata"].flatMap(JSONValue.nonNull), expiresAt: expiresAt)
    }
}

/// Everything a presence hub needs to resume elsewhere: what `PresenceHub.state` reads and
/// `PresenceHub(settings:ids:resuming:now:)` starts from.
public struct PresenceState: Sendable, Equatable {
    /// Sorted by agent id.
    public var agents: [PresenceAgentRecord]
    /// Sorted by request id.
    public var requests: [PresenceRequestRecord]

    public init(agents: [PresenceAgentRecord] = [], requests: [PresenceRequestRecord] = []) {
        self.agents = agents.sorted { $0.agent < $1.agent }
        self.requests = requests.sorted { $0.id < $1.id }
    }
}
