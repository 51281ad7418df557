/// The presence channel (`/v1/presence`): agents publish a status, dashboards watch, callers ask an
/// agent (or a queue) for a call. Same envelope as the room protocol (`Frame`, `FrameError`,
/// `ErrorCode`), its own frame types and decoder: nothing here is accepted on `/v1/ws`.

/// Who a presence connection is, from the token's `role` claim.
public enum PresenceRole: String, Sendable, CaseIterable {
    /// Has a status, joins queues, answers call requests.
    case agent
    /// Watches every agent's status; sends nothing but `ping`.
    case dashboard
    /// Requests calls with an agent or a queue.
    case caller
}

/// An agent's availability as shown to everybody on the channel.
public enum PresenceStatus: String, Sendable, CaseIterable {
    case available, busy, away, offline
}

/// Frame types on `/v1/presence`. `status` and `request` travel both ways with different payloads.
public enum PresenceFrameType: String, Sendable, CaseIterable {
    case connected
    case status
    case request
    case accept
    case decline
    case cancel
    case accepted
    case ended
    case ping
    case pong
    case error

    /// What a client may send; everything else is answered with error 402.
    public var isClientSendable: Bool {
        switch self {
        case .status, .request, .accept, .decline, .cancel, .ping: return true
        case .connected, .accepted, .ended, .pong, .error: return false
        }
    }
}

/// A named queue of agents (`sales`, `support`). Callers may request a queue instead of an agent.
public struct QueueName: Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }
    public static func < (lhs: QueueName, rhs: QueueName) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// One call request, from `request` until `accepted` or `ended`. Chosen by the server.
public struct PresenceRequestID: Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }
    public static func < (lhs: PresenceRequestID, rhs: PresenceRequestID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Whom a caller asks for.
public enum PresenceTarget: Sendable, Equatable {
    case agent(PeerID)
    /// The longest-idle `available` agent of the queue.
    case queue(QueueName)
}

/// A presence client frame after envelope and payload validation.
public enum PresenceMessage: Sendable, Equatable {
    /// `status`: an agent sets its status; `queues` (when present) replaces its queue list.
    case setStatus(PresenceStatus, note: String?, queues: [QueueName]?)
    /// `request`: a caller asks for a call; `metadata` is passed to the agent unchanged.
    case request(PresenceTarget, metadata: JSONValue?)
    case accept(PresenceRequestID)
    case decline(PresenceRequestID)
    case cancel(PresenceRequestID)
    case ping(payload: JSONValue?)

    public var frameType: PresenceFrameType {
        switch self {
        case .setStatus: return .status
        case .request: return .request
        case .accept: return .accept
        case .decline: return .decline
        case .cancel: return .cancel
        case .ping: return .ping
        }
    }

    /// The request a frame is about, echoed in its `error` so clients can settle the right promise.
    public var requestID: PresenceRequestID? {
        switch self {
        case .accept(let id), .decline(let id), .cancel(let id): return id
        case .setStatus, .request, .ping: return nil
        }
    }
}

/// Fixed bounds of the presence channel (docs/protocol.md, "Presence channel").
public struct PresenceLimits: Sendable, Equatable {
    /// Longest status `note`, in UTF-8 bytes.
    public var maxNoteBytes: Int
    /// Longest queue name; names are `[A-Za-z0-9_.-]`.
    public var maxQueueNameBytes: Int
    /// Most queues one agent may be in.
    public var maxQueues: Int
    /// Longest `agent_id` or `request_id`.
    public var maxIDBytes: Int
    /// Largest `metadata` object, serialized.
    public var maxMetadataBytes: Int

    public init(maxNoteBytes: Int = 256, maxQueueNameBytes: Int = 64, maxQueues: Int = 16, maxIDBytes: Int = 128,
                maxMetadataBytes: Int = 4_096)
    {
        self.maxNoteBytes = maxNoteBytes
        self.maxQueueNameBytes = maxQueueNameBytes
        self.maxQueues = maxQueues
        self.maxIDBytes = maxIDBytes
        self.maxMetadataBytes = maxMetadataBytes
    }
}

public enum PresenceFrameDecoder {
    /// Parses and validates one text frame from a presence connection. `from` is ignored.
    public static func decode(_ bytes: [UInt8], limits: PresenceLimits = PresenceLimits()) throws(FrameError)
        -> PresenceMessage
    {
        try decode(FrameEnvelope.parse(bytes), limits: limits)
    }

    public static func decode(_ value: JSONValue, limits: PresenceLimits = PresenceLimits()) throws(FrameError)
        -> PresenceMessage
    {
        let (fields, typeName) = try FrameEnvelope.fields(value)
        guard let type = PresenceFrameType(rawValue: typeName), type.isClientSendable else {
            throw FrameError(.unknownType, "unknown presence frame type '\(typeName.prefix(64))'", type: typeName)
        }
        func invalid(_ message: String) -> FrameError { FrameError(.invalidPayload, message, type: typeName) }
        switch fields["to"] {
        case nil, .null?: break
        case .string?: throw invalid("presence frames are not addressed; remove 'to' (name the agent in the payload)")
        default: throw FrameError(.badFrame, "field 'to' must be a string", type: typeName)
        }
        let payload = fields["payload"].flatMap(JSONValue.nonNull)
        let body = payload?.objectValue
        if payload != nil, body == nil, type != .ping { throw invalid("\(typeName) payload must be an object") }

        switch type {
        case .status:
            guard let raw = body?["status"] else { throw invalid("status needs 'status'") }
            guard let name = raw.stringValue, let status = PresenceStatus(rawValue: name) else {
                throw invalid("'status' must be one of available, busy, away, offline")
            }
            var note: String?
            switch body?["note"] {
            case nil, .null?: note = nil
            case .string(let text)?:
                guard text.utf8.count <= limits.maxNoteBytes else {
                    throw invalid("'note' is longer than \(limits.maxNoteBytes) bytes")
                }
                note = text
            default: throw invalid("'note' must be a string or null")
            }
            var queues: [QueueName]?
            switch body?["queues"] {
            case nil, .null?: queues = nil
            case .array(let entries)?:
                var names: [String] = []
                for entry in entries {
                    guard let name = entry.stringValue else { throw invalid("'queues' must be an array of strings") }
                    names.append(name)
                }
                do throws(PresenceQueueError) {
                    queues = try PresenceQueues.validate(names, limits: limits)
                } catch {
                    throw invalid(error.message)
                }
            default: throw invalid("'queues' must be an array of strings or null")
            }
            return .setStatus(status, note: note, queues: queues)
        case .request:
            let agent = body?["agent_id"].flatMap(JSONValue.nonNull)
            let queue = body?["queue"].flatMap(JSONValue.nonNull)
            let target: PresenceTarget
            switch (agent, queue) {
            case (.string(let id)?, nil):
                guard !id.isEmpty, id.utf8.count <= limits.maxIDBytes else {
                    throw invalid("'agent_id' must be 1–\(limits.maxIDBytes) bytes")
                }
                target = .agent(PeerID(id))
            case (nil, .string(let name)?):
                do throws(PresenceQueueError) {
                    target = .queue(try PresenceQueues.validate([name], limits: limits)[0])
                } catch {
                    throw invalid(error.message)
                }
            case (nil, nil): throw invalid("request needs 'agent_id' or 'queue'")
            case (.some, .some): throw invalid("request takes 'agent_id' or 'queue', not both")
            default: throw invalid("'agent_id' and 'queue' must be strings")
            }
            let metadata = body?["metadata"].flatMap(JSONValue.nonNull)
            if let metadata {
                guard metadata.objectValue != nil else { throw invalid("'metadata' must be an object or null") }
                guard JSONWriter.bytes(metadata).count <= limits.maxMetadataBytes else {
                    throw invalid("'metadata' is larger than \(limits.maxMetadataBytes) bytes")
                }
            }
            return .request(target, metadata: metadata)
        case .accept, .decline, .cancel:
            guard let id = body?["request_id"]?.stringValue, !id.isEmpty, id.utf8.count <= limits.maxIDBytes else {
                throw invalid("\(typeName) needs a string 'request_id' of 1–\(limits.maxIDBytes) bytes")
            }
            let requestID = PresenceRequestID(id)
            switch type {
            case .accept: return .accept(requestID)
            case .decline: return .decline(requestID)
            default: return .cancel(requestID)
            }
        case .ping:
            return .ping(payload: payload)
        case .connected, .accepted, .ended, .pong, .error:
            throw FrameError(.unknownType, "unknown presence frame type '\(typeName)'", type: typeName)
        }
    }
}

/// Why a queue list was refused.
public struct PresenceQueueError: Error, Sendable, Equatable {
    public var message: String
}

/// Queue names, from the `queues` query parameter of the upgrade or a `status` frame.
public enum PresenceQueues {
    /// `"sales,support"` → `[sales, support]`. Blanks between commas are skipped; an empty string is
    /// an empty list.
    public static func parse(_ text: String, limits: PresenceLimits = PresenceLimits()) throws(PresenceQueueError)
        -> [QueueName]
    {
        let names = text.split(separator: ",", omittingEmptySubsequences: true).map(String.init)
        return try validate(names, limits: limits)
    }

    /// Checks each name and the count; duplicates are dropped, first occurrence kept.
    public static func validate(_ names: [String], limits: PresenceLimits = PresenceLimits()) throws(PresenceQueueError)
        -> [QueueName]
    {
        var seen = Set<String>()
        var queues: [QueueName] = []
        for name in names where seen.insert(name).inserted {
            guard !name.isEmpty, name.utf8.count <= limits.maxQueueNameBytes, name.utf8.allSatisfy(isQueueByte) else {
                throw PresenceQueueError(message: "queue names are 1–\(limits.maxQueueNameBytes) characters of A-Z a-z 0-9 _ . -")
            }
            queues.append(QueueName(name))
        }
        guard queues.count <= limits.maxQueues else {
            throw PresenceQueueError(message: "at most \(limits.maxQueues) queues")
        }
        return queues
    }

    private static func isQueueByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }
}
