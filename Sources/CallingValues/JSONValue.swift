// The values the server, the wire protocol and the client SDK share: JSON values, typed ids
// and the stats sample. No imports: CallingClient re-exports this module to apps, and nothing else.
/// A JSON value with integer fidelity. Frames are parsed from and written to raw UTF-8 bytes here
/// rather than through Foundation's coders: the relay hot path needs exact control over what counts
/// as malformed (each class maps to a stable error code) and deterministic output for golden tests.
public enum JSONValue: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    /// An integer literal too large for `Int64`, kept as its exact decimal text so that relayed
    /// payloads (ids from other systems, 128-bit counters) come back digit for digit.
    case bigInteger(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// An object's field; nil for a missing key or a value that is not an object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    /// The string, or nil.
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    /// The boolean, or nil.
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    /// The fields of an object, or nil.
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o } else { return nil } }
    /// The elements of an array, or nil.
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    /// True for JSON null.
    public var isNull: Bool { self == .null }

    /// `nil` for JSON null: a field sent as `null` means the same as an absent field.
    public static func nonNull(_ value: JSONValue) -> JSONValue? {
        if case .null = value { return nil }
        return value
    }

    /// Integers, and doubles that hold an exact integer (`3.0`), as Int64.
    public var int64Value: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e15: return Int64(d)
        default: return nil
        }
    }

    /// Any number as a Double, or nil.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        case .bigInteger(let text): return Double(text)
        default: return nil
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    /// `"text"` is a string.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `42` is an integer.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// `true` is a boolean.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `[1, "a"]` is an array.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// `["k": 1]` is an object (the last of duplicate keys wins).
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    /// `nil` is JSON null.
    public init(nilLiteral: ()) { self = .null }
    /// `1.5` is a double.
    public init(floatLiteral value: Double) { self = .double(value) }
}
