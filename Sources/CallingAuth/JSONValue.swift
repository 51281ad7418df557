import Foundation

/// Any JSON value, for reading JOSE headers and claim sets whose member types are untrusted.
///
/// Claims are read through this rather than a `Decodable` struct so that a claim of the wrong type
/// can be reported by name (`invalidClaim("exp")`) instead of as an opaque decoding failure.
enum JSONValue: Decodable, Equatable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Deeper than this is not a token we issue. Checked before decoding because decoding recurses
    /// once per level and verification may run on a thread with a small stack.
    static let maximumDepth = 16

    /// Parses `bytes` as a JSON object, or returns nil for anything else (invalid UTF-8, invalid
    /// JSON, a non-object, nesting deeper than `maximumDepth`). Never traps.
    static func object(from bytes: [UInt8]) -> [String: JSONValue]? {
        guard nestingIsWithinLimit(bytes) else { return nil }
        return try? JSONDecoder().decode([String: JSONValue].self, from: Data(bytes))
    }

    /// A lexical scan for `[`/`{` nesting that skips string contents. It need not validate the JSON;
    /// the decoder does that.
    static func nestingIsWithinLimit(_ bytes: [UInt8]) -> Bool {
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > maximumDepth { return false }
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth -= 1
            default:
                break
            }
        }
        return true
    }
}
