import CallingProtocol

public enum HTTPMethod: String, Sendable {
    case get = "GET", post = "POST", put = "PUT", patch = "PATCH", delete = "DELETE", options = "OPTIONS", head = "HEAD"
}

/// An HTTP request (or WebSocket upgrade request) copied out of lws while its header table was
/// still bound: lws frees headers soon after, so nothing here points into lws memory.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    public var path: String
    public var query: [String: String]
    /// Lower-cased header names. Only the headers the routes use are copied (see `copiedHeaders`).
    public var headers: [String: String]
    public var body: [UInt8]
    public var remoteAddress: String

    public init(method: HTTPMethod, path: String, query: [String: String] = [:], headers: [String: String] = [:],
                body: [UInt8] = [], remoteAddress: String = "")
    {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    /// The bearer token from `Authorization: Bearer …`, or nil.
    public var bearerToken: String? {
        guard let value = headers["authorization"] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1]).trimmingCharacters(in: " ")
    }

    /// Path split into non-empty segments: "/v1/rooms/r1/messages" → ["v1", "rooms", "r1", "messages"].
    public var pathSegments: [Substring] { path.split(separator: "/", omittingEmptySubsequences: true) }
}

extension String {
    func trimmingCharacters(in set: Character) -> String {
        var s = Substring(self)
        while s.first == set { s = s.dropFirst() }
        while s.last == set { s = s.dropLast() }
        return String(s)
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json(_ status: Int, _ value: JSONValue, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("content-type", "application/json")] + headers, body: JSONWriter.bytes(value))
    }

    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: [("content-type", contentType)], body: Array(text.utf8))
    }

    /// RFC 9457 problem details. `code` is the stable machine-readable reason.
    public static func problem(_ status: Int, code: String, detail: String, headers: [(String, String)] = [],
                               extra: [String: JSONValue] = [:]) -> HTTPResponse
    {
        var fields: [String: JSONValue] = [
            "type": .string("https://calling-server.dev/problems/\(code)"),
            "title": .string(HTTPResponse.reasonPhrase(status)),
            "status": .int(Int64(status)),
            "code": .string(code),
            "detail": .string(detail),
        ]
        fields.merge(extra) { _, new in new }
        // `problem-code` repeats the code for clients that cannot read the body: a WebSocket
        // client whose upgrade is refused gets the status and headers only (docs/protocol.md).
        return HTTPResponse(status: status, headers: [("content-type", "application/problem+json"), ("problem-code", code)] + headers,
                            body: JSONWriter.bytes(.object(fields)))
    }

    public static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 412: return "Precondition Failed"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 415: return "Unsupported Media Type"
        case 426: return "Upgrade Required"
        case 428: return "Precondition Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        default: return "Status \(status)"
        }
    }
}

/// What to do with a WebSocket upgrade request.
public enum UpgradeDecision {
    /// Proceed; `context` is handed back when the socket opens (e.g. the verified identity).
    case accept(context: any Sendable)
    /// Refuse before the upgrade with this HTTP response (401/403/503 with a body).
    case reject(HTTPResponse)
}

/// A complete inbound WebSocket message, or why there is none.
public enum InboundMessage: Sendable, Equatable {
    case text([UInt8])
    case binary(byteCount: Int)
    /// The message exceeded the frame limit and was discarded without buffering it whole.
    case tooLarge(byteCount: Int)
}

/// Route helpers throw a ready response to stop early (a 401, a 400 naming the field).
extension HTTPResponse: Error {}

/// Request-framing rules the transport applies before a route sees a request (RFC 9112 §6).
public enum HTTPFraming {
    /// Most digits a Content-Length may have: 10^15 bytes is far above any body limit, and the
    /// value can never overflow an `Int` on the way to being compared with one.
    public static let maxContentLengthDigits = 15

    /// The value of a single Content-Length field: one or more ASCII digits, optionally between
    /// spaces or tabs, nothing else. nil for anything lws's `atoll` would have misread (`abc`,
    /// `21abc`, `0x10`, `1e20`, `-1`, `+1`, `1, 1`, 2^63).
    public static func contentLength(_ value: String) -> Int? {
        var digits = Substring(value)
        while let first = digits.first, first == " " || first == "\t" { digits = digits.dropFirst() }
        while let last = digits.last, last == " " || last == "\t" { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.utf8.count <= maxContentLengthDigits,
              digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int(digits)
    }
}
