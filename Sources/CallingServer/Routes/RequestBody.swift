import CallingCore
import CallingTransport

/// A JSON request body read field by field, collecting every problem as `invalid_params`
/// (RFC 9457 §3.1's example extension: `[{name, reason}]`), so a client learns all of them at once.
/// JSON `null` counts as absent.
final class RequestBody {
    private let fields: [String: JSONValue]
    private let prefix: String
    private let sink: ProblemSink

    final class ProblemSink {
        var entries: [(String, String)] = []
    }

    private init(fields: [String: JSONValue], prefix: String, sink: ProblemSink) {
        self.fields = fields
        self.prefix = prefix
        self.sink = sink
    }

    /// An empty body reads as `{}`; anything else must be a JSON object.
    static func parse(_ bytes: [UInt8]) -> Result<RequestBody, HTTPResponse> {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return .success(RequestBody(fields: [:], prefix: "", sink: ProblemSink()))
        }
        do {
            guard let object = try JSONParser.parse(bytes).objectValue else {
                return .failure(invalid([("body", "must be a JSON object")]))
            }
            return .success(RequestBody(fields: object, prefix: "", sink: ProblemSink()))
        } catch {
            return .failure(invalid([("body", "not valid JSON: \(error.message)")]))
        }
    }

    static func invalid(_ entries: [(String, String)]) -> HTTPResponse {
        .problem(400, code: "invalid_params",
                 detail: "invalid request: " + entries.map { "\($0.0) \($0.1)" }.joined(separator: "; "),
                 extra: ["invalid_params": .array(entries.map { ["name": .string($0.0), "reason": .string($0.1)] })])
    }

    /// The 400 to send, or nil when every field read so far was fine.
    var problems: HTTPResponse? { sink.entries.isEmpty ? nil : Self.invalid(sink.entries) }

    func problem(_ key: String, _ reason: String) {
        sink.entries.append((prefix + key, reason))
    }

    private func value(_ key: String, required: Bool) -> JSONValue? {
        guard let value = fields[key].flatMap(JSONValue.nonNull) else {
            if required { problem(key, "is required") }
            return nil
        }
        return value
    }

    /// The field as sent, `null` read as absent; for types the typed readers do not cover (booleans).
    func raw(_ key: String) -> JSONValue? { value(key, required: false) }

    /// A string of at most `maxBytes` UTF-8 bytes without control characters.
    func string(_ key: String, maxBytes: Int, required: Bool = false) -> String? {
        guard let raw = value(key, required: required) else { return nil }
        guard let text = raw.stringValue else {
            problem(key, "must be a string")
            return nil
        }
        guard text.utf8.count <= maxBytes else {
            problem(key, "must be at most \(maxBytes) bytes")
            return nil
        }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            problem(key, "must not contain control characters")
            return nil
        }
        return text
    }

    /// A non-empty string that also contains no spaces (ids end up in JWT claims and URLs).
    func identifier(_ key: String, maxBytes: Int, required: Bool = false) -> String? {
        guard let text = string(key, maxBytes: maxBytes, required: required) else { return nil }
        // The rule every id follows (CallingValues.IdentifierRule); `string` already checked length.
        if let violation = IdentifierRule.violation(of: text, maxBytes: maxBytes) {
            problem(key, violation)
            return nil
        }
        return text
    }

    func integer(_ key: String, in range: ClosedRange<Int64>, required: Bool = false) -> Int64? {
        guard let raw = value(key, required: required) else { return nil }
        guard let number = raw.int64Value else {
            problem(key, "must be an integer")
            return nil
        }
        guard range.contains(number) else {
            problem(key, "must be between \(range.lowerBound) and \(range.upperBound)")
            return nil
        }
        return number
    }

    func object(_ key: String) -> JSONValue? {
        guard let raw = value(key, required: false) else { return nil }
        guard raw.objectValue != nil else {
            problem(key, "must be an object")
            return nil
        }
        return raw
    }

    /// An object whose values are all strings (`dynamic_variables`).
    func stringMap(_ key: String) -> JSONValue? {
        guard let raw = object(key), let entries = raw.objectValue else { return nil }
        var ok = true
        for (name, value) in entries.sorted(by: { $0.key < $1.key }) where value.stringValue == nil {
            problem("\(key).\(name)", "must be a string")
            ok = false
        }
        return ok ? raw : nil
    }

    /// A nested object whose problems are reported as `key.field`.
    func nested(_ key: String) -> RequestBody? {
        guard let raw = object(key), let entries = raw.objectValue else { return nil }
        return RequestBody(fields: entries, prefix: prefix + key + ".", sink: sink)
    }
}
