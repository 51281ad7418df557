/// One JSON value as text: the bytes of a relayed payload exactly as its sender wrote them (from
/// the value's first byte to its last; whitespace, key order, escapes and number spellings inside
/// are kept), or the compact sorted encoding of a value the server built itself.
///
/// The relay path forwards these bytes instead of parsing the payload into a `JSONValue` and
/// writing it again (docs/protocol.md, "Envelope"): a value of this type always holds one complete,
/// valid JSON value, so it can be written into a frame as it stands. Only `ClientFrameDecoder`
/// (after validating the whole frame) and `init(_:)` make one.
public struct RawJSON: Sendable {
    /// The value's UTF-8 text. A slice: a decoded frame's payload shares the frame's buffer.
    public let bytes: ArraySlice<UInt8>

    /// `bytes` must be exactly one valid JSON value (the decoder's scan has checked it).
    init(validated bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    /// The compact encoding of `value`, object keys sorted (`JSONWriter`).
    public init(_ value: JSONValue) {
        bytes = JSONWriter.bytes(value)[...]
    }

    /// The value parsed (for receivers that read fields, such as HTTP sessions and tests).
    public var value: JSONValue {
        // Valid by construction; `.null` only if that promise were broken.
        (try? JSONParser.parse(bytes)) ?? .null
    }
}

/// Equal when they hold the same JSON value, however it is spelt: compared in the writer's
/// canonical form (`JSONWriter`: keys sorted, `1.0` as `1`), so `{"a":1.0, "b":2}` equals
/// `{"b":2,"a":1}`. Off the hot path (tests, and decisions that compare payloads).
extension RawJSON: Equatable, Hashable {
    public static func == (lhs: RawJSON, rhs: RawJSON) -> Bool {
        lhs.bytes == rhs.bytes || lhs.canonical == rhs.canonical
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(canonical)
    }

    private var canonical: [UInt8] { JSONWriter.bytes(value) }
}

/// `["sdp": "v=0"]` is the raw text of that object (compact, sorted keys).
extension RawJSON: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(.object(Dictionary(elements, uniquingKeysWith: { _, last in last })))
    }
}

extension RawJSON: CustomStringConvertible {
    public var description: String { String(decoding: bytes, as: UTF8.self) }
}
