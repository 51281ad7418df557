/// Typed identifiers: a room id can never be passed where a peer id is expected. One generic
/// string wrapper, told apart by a phantom tag, instead of three copies of the same struct.
public struct Identifier<Tag: IdentifierTag>: Hashable, Sendable, Codable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The id as sent on the wire.
    public let rawValue: String
    /// Wraps a wire id.
    public init(_ rawValue: String) { self.rawValue = rawValue }
    /// An id from a literal (`"alice"`).
    public init(stringLiteral value: String) { self.rawValue = value }
    /// Decodes from a JSON string.
    public init(from decoder: Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    /// Encodes as a JSON string.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
    /// The raw id.
    public var description: String { rawValue }
    /// Orders by raw id.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Marks what an `Identifier` names.
public protocol IdentifierTag: Sendable {}

/// Tags `RoomID`.
public enum RoomTag: IdentifierTag {}
/// Tags `PeerID`.
public enum PeerTag: IdentifierTag {}
/// Tags `CallID`.
public enum CallTag: IdentifierTag {}

/// A room: peers in one room exchange signaling frames and share one chat history.
public typealias RoomID = Identifier<RoomTag>
/// A participant, as named by the `sub` claim of its token. Stable across reconnects.
public typealias PeerID = Identifier<PeerTag>
/// A call: the business-level session a room belongs to (`call_id`; docs/protocol.md, "Calls API").
public typealias CallID = Identifier<CallTag>

/// The one rule for room, peer, call and agent ids, wherever they enter (docs/protocol.md, "Ids"):
/// 1 to `maxBytes` bytes of UTF-8, no space, no `/`, no control character (below U+0020, U+007F).
/// Ids are path segments of the REST routes (`/v1/rooms/{room_id}/messages`, `/v1/calls/{call_id}`),
/// which are split after percent-decoding: an id with a `/` could join a room whose history no
/// route reaches, so it is refused where it is issued (`POST /v1/tokens`, `POST /v1/calls`,
/// `calling-server token`) and where a token signed elsewhere is presented (the room join).
public enum IdentifierRule {
    /// Room and call ids: the REST API's limit.
    public static let maxBytes = 128

    /// Why `text` is not a valid id (a phrase such as "must not contain '/' or control
    /// characters"), or nil when it is one.
    public static func violation(of text: String, maxBytes: Int) -> String? {
        if text.isEmpty { return "must not be empty" }
        if text.utf8.count > maxBytes { return "must be at most \(maxBytes) bytes" }
        if text.utf8.contains(0x20) { return "must not contain spaces" }
        if text.unicodeScalars.contains(where: { $0 == "/" || $0.value < 0x20 || $0.value == 0x7F }) {
            return "must not contain '/' or control characters"
        }
        return nil
    }
}
