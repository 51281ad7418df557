import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Reads claims from a JWT without verifying it (the server verifies; the SDK only needs the
/// room id before `connect()`, like the seed SDKs' `_roomIdFromToken`).
enum TokenClaims {
    /// The payload segment, base64url-decoded and parsed; nil when the token is not a JWT.
    static func payload(of token: String) -> JSONValue? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64) else { return nil }
        return try? JSONParser.parse([UInt8](data))
    }

    static func roomId(of token: String) -> RoomID? {
        payload(of: token)?["room_id"]?.stringValue.map { RoomID($0) }
    }
}

/// Plain HTTP over URLSession (works on Linux for HTTP; WebSocket goes through lws).
enum REST {
    /// `ws://h:p` → `http://h:p`, `wss://` → `https://`.
    static func httpBase(for url: URL) -> URL? {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return nil }
        components.scheme = components.scheme == "wss" ? "https" : "http"
        components.path = ""
        components.query = nil
        return components.url
    }

    /// GET `path` with a bearer token; returns the parsed JSON body of a 2xx answer, or throws
    /// `CallingError` with the problem `code` of any other answer.
    static func get(base: URL, path: String, query: [URLQueryItem], token: String, timeout: TimeInterval)
        async throws -> JSONValue
    {
        guard var components = URLComponents(url: base, resolvingAgainstBaseURL: false) else {
            throw CallingError(.http(status: 0, code: nil, detail: "bad base URL"))
        }
        components.percentEncodedPath = path
        components.queryItems = query.isEmpty ? nil : query
        guard let url = components.url else { throw CallingError(.http(status: 0, code: nil, detail: "bad URL")) }
        var request = URLRequest(url: url, timeoutInterval: timeout)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw CallingError(.connectFailed(status: nil, message: "\(error)"))
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let body = try? JSONParser.parse([UInt8](data))
        guard (200..<300).contains(status), let body else {
            throw CallingError(.http(status: status, code: body?["code"]?.stringValue,
                                     detail: body?["detail"]?.stringValue ?? "unexpected answer"))
        }
        return body
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
func queryEncoded(_ string: String) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    return string.addingPercentEncoding(withAllowedCharacters: allowed) ?? string
}
