import CallingAuth
import CallingTransport

/// The problem+json answers (RFC 9457, through `HTTPResponse.problem`) that more than one route or
/// the front door gives, built in this one place so their codes, details and headers cannot drift
/// apart. A problem only one handler gives stays beside that handler.
enum Problem {
    /// No route (or no file, or no WebSocket endpoint) at the request's path.
    static func notFound(_ request: HTTPRequest) -> HTTPResponse {
        .problem(404, code: "not_found", detail: "no route for \(request.method.rawValue) \(request.path.prefix(200))")
    }

    /// A path with no static file.
    static func noFile(_ request: HTTPRequest) -> HTTPResponse {
        .problem(404, code: "not_found", detail: "no file at \(request.path.prefix(200))")
    }

    /// An upgrade to a path where no WebSocket endpoint is registered.
    static func noWebSocketEndpoint(_ request: HTTPRequest) -> HTTPResponse {
        .problem(404, code: "not_found", detail: "no WebSocket endpoint at \(request.path.prefix(200))")
    }

    /// A route that exists for other methods; `allow` lists them (RFC 9110 §15.5.6).
    static func methodNotAllowed(_ allowed: [String]) -> HTTPResponse {
        let names = allowed.joined(separator: ", ")
        return .problem(405, code: "method_not_allowed", detail: "use \(names)", headers: [("allow", names)])
    }

    /// A plain HTTP request to a WebSocket endpoint.
    static func upgradeRequired(_ path: String) -> HTTPResponse {
        .problem(426, code: "upgrade_required", detail: "\(path) is a WebSocket endpoint", headers: [("upgrade", "websocket")])
    }

    /// The store failed or is unreachable; the client may retry in a second.
    static func storeUnavailable(_ detail: String = "the store is temporarily unavailable") -> HTTPResponse {
        .problem(503, code: "store_unavailable", detail: detail, headers: [("retry-after", "1")])
    }

    /// A route that needs a peer token got none.
    static let tokenMissing = HTTPResponse.problem(401, code: "token_missing", detail: "pass a token as ?token= or Authorization: Bearer",
                                                   headers: [("www-authenticate", "Bearer")])

    /// A peer token that did not verify (401 with `invalid_token`) or was refused (403).
    static func tokenRefused(_ error: TokenError) -> HTTPResponse {
        .problem(error.httpStatus, code: error.code, detail: error.message,
                 headers: error.httpStatus == 401 ? [("www-authenticate", "Bearer error=\"invalid_token\"")] : [])
    }

    /// A peer token whose `scope` claim lists scopes but not `scope`.
    static func tokenWrongScope(_ scope: String) -> HTTPResponse {
        .problem(403, code: "token_wrong_scope", detail: "the token's scope does not include '\(scope)'")
    }

    /// A peer token for another room than the route's `{room_id}`.
    static let wrongRoom = HTTPResponse.problem(403, code: "wrong_room", detail: "the token is for another room")

    /// A peer token for another call than the route's `{call_id}`.
    static let tokenWrongCall = HTTPResponse.problem(403, code: "token_wrong_call", detail: "the access token belongs to another call")

    /// A route that needs an API key got none.
    static let apiKeyMissing = HTTPResponse.problem(401, code: "api_key_missing",
                                                    detail: "this route needs an API key in X-API-Key or Authorization: Bearer csk_…",
                                                    headers: [("www-authenticate", "Bearer")])

    /// An API key that is unknown or revoked (or cannot be a key at all).
    static let apiKeyInvalid = HTTPResponse.problem(401, code: "api_key_invalid", detail: "the API key is unknown or revoked",
                                                    headers: [("www-authenticate", "Bearer error=\"invalid_token\"")])

    /// A known key without the route's scope.
    static func apiKeyWrongScope(_ scope: String, has scopes: [String]) -> HTTPResponse {
        .problem(403, code: "api_key_wrong_scope",
                 detail: "this route needs a key with scope '\(scope)'; this key has '\(scopes.joined(separator: " "))'")
    }
}
