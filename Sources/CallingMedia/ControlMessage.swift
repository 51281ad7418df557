import CallingProtocol
import CallingClient

/// The JSON messages of an HTTP session's `control` data channel (docs/protocol.md,
/// "The control channel").
/// The caller sends `mute`, `dtmf`, `ping` and `hangup`; the answering side sends `status`
/// (`connected`, `ended`, `replaced`) and `pong`.
public enum ControlMessage: Sendable, Equatable {
    case status(String)
    case ping(ts: Int64)
    case pong(ts: Int64)
    case mute(Bool)
    case dtmf(String)
    case hangup
    /// Valid JSON with a `type` this side does not know; ignored, as newer callers may send more.
    case unknown(String)

    /// Parses one control-channel message; nil when it is not JSON with a known shape.
    public init?(text: String) {
        guard let json = try? JSONParser.parse(Array(text.utf8)), let type = json["type"]?.stringValue else { return nil }
        switch type {
        case "status":
            guard let state = json["state"]?.stringValue else { return nil }
            self = .status(state)
        case "ping": self = .ping(ts: json["ts"]?.int64Value ?? 0)
        case "pong": self = .pong(ts: json["ts"]?.int64Value ?? 0)
        case "mute":
            guard let muted = json["muted"]?.boolValue else { return nil }
            self = .mute(muted)
        case "dtmf":
            // One key of a telephone keypad (RFC 4733 events 0–15).
            guard let digit = json["digit"]?.stringValue, digit.count == 1, "0123456789*#ABCD".contains(digit) else { return nil }
            self = .dtmf(digit)
        case "hangup": self = .hangup
        default: self = .unknown(type)
        }
    }

    /// The message as sent on the channel.
    public var text: String {
        let json: JSONValue
        switch self {
        case .status(let state): json = ["type": "status", "state": .string(state)]
        case .ping(let ts): json = ["type": "ping", "ts": .int(ts)]
        case .pong(let ts): json = ["type": "pong", "ts": .int(ts)]
        case .mute(let muted): json = ["type": "mute", "muted": .bool(muted)]
        case .dtmf(let digit): json = ["type": "dtmf", "digit": .string(digit)]
        case .hangup: json = ["type": "hangup"]
        case .unknown(let type): json = ["type": .string(type)]
        }
        return JSONWriter.string(json)
    }
}
