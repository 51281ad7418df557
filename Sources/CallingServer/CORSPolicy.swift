import CallingTransport
import Foundation

/// Which web origins may call the routes a browser uses with a peer token, and open WebSockets.
///
/// `allowed_origins` is `*` (the default) or a comma-separated list of origins
/// (`https://app.example.com, http://localhost:5173`; `null` names opaque origins such as
/// `file://` pages). `*` is safe here because every credential is a bearer token the page must
/// already hold: no cookie or HTTP auth is ever sent by the browser on its own, so a foreign page
/// gains nothing it could not do with the token anyway, and `access-control-allow-credentials` is
/// never sent. A list narrows who may embed the API, for operators who want that.
///
/// A request without `Origin` is not from a browser page (curl, the Swift SDK, Python) and is never
/// refused here. A page served by this server (its `Origin` host equals the request's `Host`) is
/// always allowed, so the demo pages keep working behind any list.
struct CORSPolicy: Sendable, Equatable {
    enum Origins: Sendable, Equatable {
        case any
        case list(Set<String>)
    }

    let origins: Origins

    /// Request headers a browser may send on the CORS routes (a preflight asks for them).
    static let allowedHeaders = "Authorization, Content-Type, If-Match"
    /// Response headers scripts may read: WHIP/session resources and retry hints.
    static let exposedHeaders = "Location, ETag, Link, Accept-Post, Accept-Patch, Retry-After"
    /// How long a browser may cache a preflight answer.
    static let maxAgeSeconds = 600

    init(allowedOrigins: String) {
        let entries = allowedOrigins.split(separator: ",").map { Self.normalized(String($0)) }.filter { !$0.isEmpty }
        origins = entries.contains("*") ? .any : .list(Set(entries))
    }

    /// Problems with an `allowed_origins` value, for config validation.
    static func problems(_ value: String) -> [String] {
        var problems: [String] = []
        for entry in value.split(separator: ",").map({ normalized(String($0)) }) where !entry.isEmpty {
            if entry == "*" || entry == "null" { continue }
            let parts = entry.split(separator: "/", omittingEmptySubsequences: false)
            let scheme = parts.first ?? ""
            if !(scheme == "http:" || scheme == "https:") || parts.count != 3 || !parts[1].isEmpty || parts[2].isEmpty {
                problems.append("allowed_origins: '\(entry)' is not an origin like https://app.example.com (scheme://host[:port], no path)")
            }
        }
        return problems
    }

    /// Origins compare as lower-cased ASCII with no trailing slash (RFC 6454 §6.2 serialization).
    static func normalized(_ origin: String) -> String {
        var text = origin.trimmingCharacters(in: .whitespaces).lowercased()
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    /// The verdict on a request's `Origin`.
    enum Verdict: Equatable {
        /// No `Origin`: not a browser page; no CORS headers needed.
        case notCrossOrigin
        /// Allowed; send these CORS headers with the response.
        case allowed(allowOrigin: String)
        case refused
    }

    func check(_ request: HTTPRequest) -> Verdict {
        guard let raw = request.headers["origin"] else { return .notCrossOrigin }
        let origin = Self.normalized(raw)
        if let host = request.headers["host"], Self.host(ofOrigin: origin) == host.lowercased() {
            return .allowed(allowOrigin: raw)
        }
        switch origins {
        case .any: return .allowed(allowOrigin: "*")
        case .list(let list): return list.contains(origin) ? .allowed(allowOrigin: raw) : .refused
        }
    }

    /// `https://a.example:8443` → `a.example:8443`; nil for `null` and other opaque origins.
    static func host(ofOrigin origin: String) -> String? {
        guard let range = origin.range(of: "://") else { return nil }
        let host = origin[range.upperBound...]
        return host.isEmpty ? nil : String(host)
    }

    /// Headers for an allowed cross-origin response. An echoed origin varies by request, so caches
    /// must key on it.
    static func responseHeaders(allowOrigin: String) -> [(String, String)] {
        var headers = [("access-control-allow-origin", allowOrigin), ("access-control-expose-headers", exposedHeaders)]
        if allowOrigin != "*" { headers.append(("vary", "Origin")) }
        return headers
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) for a route
    /// that takes `methods`.
    static func preflight(allowOrigin: String, methods: [String]) -> HTTPResponse {
        HTTPResponse(status: 204, headers: responseHeaders(allowOrigin: allowOrigin) + [
            ("access-control-allow-methods", (methods + ["OPTIONS"]).joined(separator: ", ")),
            ("access-control-allow-headers", allowedHeaders),
            ("access-control-max-age", String(maxAgeSeconds)),
        ])
    }

    static let refusal = HTTPResponse.problem(403, code: "origin_not_allowed",
                                              detail: "this origin is not in the server's allowed_origins")

    /// The refusal of an HTTP request from `origin`, readable by that origin's scripts: without
    /// `access-control-allow-origin` a browser hides the 403 behind a network error, and an app
    /// (the SDK's refusal probe included) would take it for a retryable outage. The response
    /// holds only the refusal, and the preflight of such an origin is still refused, so no request
    /// with credentials or a body from it ever reaches a route.
    static func refusal(origin: String) -> HTTPResponse {
        var response = refusal
        response.headers += [("access-control-allow-origin", origin), ("vary", "Origin")]
        return response
    }

    /// CORS headers for a static file under `/sdk/` (the SDK a page imports as a module, which is
    /// always a CORS request). Unlike the API routes these are cacheable, so the headers never
    /// depend on `Origin` without saying so: under `*` every response carries `*`, with or without
    /// `Origin`; under a list every response carries `vary: Origin`. Nil for a refused origin.
    func staticHeaders(for verdict: Verdict) -> [(String, String)]? {
        switch (verdict, origins) {
        case (.refused, _): return nil
        case (_, .any): return Self.responseHeaders(allowOrigin: "*")
        case (.notCrossOrigin, .list): return [("vary", "Origin")]
        case (.allowed(let allowOrigin), .list): return Self.responseHeaders(allowOrigin: allowOrigin)
        }
    }

    /// Methods of the static files, for a preflight.
    static let staticMethods = ["GET", "HEAD"]
}
