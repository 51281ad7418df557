/// The wire envelope shared by every SDK: `{type, from?, to?, payload?, error?}`.
public struct Frame: Sendable, Equatable {
    public var type: String
    public var from: String?
    public var to: String?
    public var payload: JSONValue?
    public var error: WireError?

    public init(type: String, from: String? = nil, to: String? = nil, payload: JSONValue? = nil, error: WireError? = nil) {
        self.type = type
        self.from = from
        self.to = to
        self.payload = payload
        self.error = error
    }

    public init(_ type: FrameType, from: String? = nil, to: String? = nil, payload: JSONValue? = nil, error: WireError? = nil) {
        self.init(type: type.rawValue, from: from, to: to, payload: payload, error: error)
    }

    /// An `error` frame answering a bad client frame.
    public static func error(_ code: ErrorCode, _ message: String, inReplyTo type: String? = nil) -> Frame {
        var payload: JSONValue? = nil
        if let type { payload = ["type": .string(type)] }
        return Frame(.error, payload: payload, error: WireError(code, message))
    }

    public var json: JSONValue {
        var fields: [String: JSONValue] = ["type": .string(type)]
        if let from { fields["from"] = .string(from) }
        if let to { fields["to"] = .string(to) }
        if let payload { fields["payload"] = payload }
        if let error { fields["error"] = error.json }
        return .object(fields)
    }

    /// The same bytes as `JSONWriter.bytes(json)` (keys in sorted order), written directly: the
    /// envelope is encoded for every frame sent, so it skips building and sorting a dictionary.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        out.append(UInt8(ascii: "{"))
        if let error {
            out.append(contentsOf: #""error":"#.utf8)
            JSONWriter.write(error.json, into: &out)
            out.append(UInt8(ascii: ","))
        }
        if let from {
            out.append(contentsOf: #""from":"#.utf8)
            JSONWriter.writeString(from, into: &out)
            out.append(UInt8(ascii: ","))
        }
        if let payload {
            out.append(contentsOf: #""payload":"#.utf8)
            JSONWriter.write(payload, into: &out)
            out.append(UInt8(ascii: ","))
        }
        if let to {
            out.append(contentsOf: #""to":"#.utf8)
            JSONWriter.writeString(to, into: &out)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""type":"#.utf8)
        JSONWriter.writeString(type, into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// `{code, message}` as sent in a frame's `error` field.
public struct WireError: Sendable, Equatable, Error {
    public var code: Int
    public var message: String

    public init(_ code: ErrorCode, _ message: String) {
        self.code = code.rawValue
        self.message = message
    }

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    public var json: JSONValue { ["code": .int(Int64(code)), "message": .string(message)] }
}

/// Every frame type in the protocol. `clientSendable` is what a client may send on `/v1/ws`.
public enum FrameType: String, Sendable, CaseIterable {
    case welcome
    case peerJoined = "peer-joined"
    case peerLeft = "peer-left"
    case offer
    case answer
    case candidate
    case data
    case chat
    case chatAck = "chat-ack"
    case typing
    case read
    case meter
    case stats
    case ping
    case pong
    case error

    public var isClientSendable: Bool {
        switch self {
        case .offer, .answer, .candidate, .data, .chat, .typing, .read, .stats, .ping: return true
        default: return false
        }
    }
}
