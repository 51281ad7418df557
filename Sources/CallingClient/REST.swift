import CallingEndpoints
import CallingProtocol
import Foundation

/// Reads claims from a JWT without verifying it (the server verifies; the SDK only needs the
/// room id before `connect()`, like `_roomIdFromToken` of the iOS and Android SDKs; docs/sdk.md,
/// "Client SDK compatibility").
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

    static func roomID(of token: String) -> RoomID? {
        payload(of: token)?["room_id"]?.stringValue.map { RoomID($0) }
    }
}

/// REST calls over the client's transport (`ClientTransport.request`), so `https://` is verified
/// the same way as the transport's `wss://`.
enum REST {
    /// The endpoint of a `ws://`/`wss://`/`http://`/`https://` URL; other schemes are an error,
    /// never a plaintext fallback.
    static func endpoint(for url: URL) throws(CallingError) -> ClientEndpoint {
        do {
            return try ClientEndpoint(url: url)
        } catch {
            throw CallingError(.unsupportedURL(error.description))
        }
    }

    /// GET `path` with a bearer token; returns the parsed JSON body of a 2xx answer, or throws
    /// `CallingError` with the problem `code` of any other answer.
    static func get(transport: any ClientTransport, endpoint: ClientEndpoint, tls: TLSClientOptions, path: String,
                    query: [URLQueryItem], token: String, timeout: TimeInterval) async throws -> JSONValue
    {
        var components = URLComponents()
        components.percentEncodedPath = path
        components.queryItems = query.isEmpty ? nil : query
        let target = components.percentEncodedPath + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        let response = try await send(transport: transport, endpoint: endpoint, tls: tls, method: "GET", target: target,
                                      headers: ["Authorization": "Bearer \(token)"], body: [], timeout: timeout)
        let body = try? JSONParser.parse(response.body)
        guard (200..<300).contains(response.status), let body else {
            throw CallingError(.http(status: response.status, code: body?["code"]?.stringValue,
                                     detail: body?["detail"]?.stringValue ?? "unexpected answer"))
        }
        return body
    }

    /// One request; a request that got no answer throws `network(host:port:reason:)`, or
    /// `certificateRejected` / `invalidConfiguration` for what TLS refused.
    static func send(transport: any ClientTransport, endpoint: ClientEndpoint, tls: TLSClientOptions, method: String,
                     target: String, headers: [String: String], body: [UInt8], timeout: TimeInterval)
        async throws(CallingError) -> HTTPClientResponse
    {
        try CallingError.checkTLSFiles(tls, for: endpoint)
        do {
            return try await transport.request(method, host: endpoint.host, port: endpoint.port, path: target, headers: headers,
                                          body: body, tls: endpoint.usesTLS ? tls : nil, timeout: timeout)
        } catch {
            throw CallingError.transportFailed(message: error.message, code: error.code, host: endpoint.host, port: endpoint.port)
        }
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
func queryEncoded(_ string: String) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    return string.addingPercentEncoding(withAllowedCharacters: allowed) ?? string
}
