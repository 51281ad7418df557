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
