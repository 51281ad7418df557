import CallingAuth
import CallingCore
import CallingStore
import CallingTransport

/// A path with named parameters, `/v1/rooms/{room_id}/messages`: literal segments match exactly,
/// `{name}` matches any one non-empty segment. Matched against `HTTPRequest.pathSegments`.
struct RoutePattern: Sendable, Equatable, CustomStringConvertible {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    /// As written in the table and in the docs.
    let description: String
    let segments: [Segment]

    init(_ text: String) {
        description = text
        segments = text.split(separator: "/").map { part in
            part.hasPrefix("{") && part.hasSuffix("}") ? .parameter(String(part.dropFirst().dropLast())) : .literal(String(part))
        }
    }

    /// The parameters by name, or nil when `path` is not this pattern.
    func match(_ path: [Substring]) -> [String: String]? {
        guard path.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(segments, path) {
            switch segment {
            case .literal(let text): guard part == text else { return nil }
            case .parameter(let name): parameters[name] = String(part)
            }
        }
        return parameters
    }

    /// The first segment when it is a literal (`webrtc-proxy`, `whip`, `v1`).
    var prefix: String? {
        if case .literal(let text)? = segments.first { return text }
        return nil
    }
}

/// What a peer token's `scope` claim must say for a route.
enum TokenScope: Sendable, Equatable {
    /// The token passes when it lists no scope (tokens of other issuers, older tokens) or lists this one.
    case ifListed(String)
    /// The token must list this scope.
    case required(String)

    var name: String {
        switch self {
        case .ifListed(let name), .required(let name): return name
        }
    }

    func admits(_ scopes: [String]) -> Bool {
        switch self {
        case .ifListed(let name): return scopes.isEmpty || scopes.contains(name)
        case .required(let name): return scopes.contains(name)
        }
    }
}

/// A path parameter a peer token must name, checked before the handler runs.
enum TokenBinding: Sendable, Equatable {
    /// The token's `room_id` must equal the parameter (else 403 `wrong_room`).
    case room(parameter: String)
    /// The token's `call_id` must equal the parameter (else 403 `token_wrong_call`).
    case call(parameter: String)
}

/// Who may call a route.
enum RouteAuth: Sendable, Equatable {
    /// Anyone.
    case none
    /// A peer token (`?token=` or `Authorization: Bearer`), verified; with the scope it must carry
    /// and the path parameter it must name.
    case peerToken(scope: TokenScope?, binding: TokenBinding?)
    /// An API key (`X-API-Key` or `Authorization: Bearer csk_…`) with this scope.
    case apiKey(scope: String)
}

/// What a matched, authorised request hands its handler.
struct RouteRequest: Sendable {
    let http: HTTPRequest
    /// The pattern's parameters by name.
    let parameters: [String: String]
    /// The verified peer token of a `.peerToken` route.
    let claims: PeerTokenClaims?
    /// The API key of an `.apiKey` route.
    let key: APIKeyRecord?

    /// A parameter the route's pattern names (a row names only parameters its pattern has).
    func parameter(_ name: String) -> String { parameters[name] ?? "" }
}

typealias RouteResponder = @Sendable (HTTPResponse) -> Void

/// One row of the route table.
struct Route {
    enum Handler {
        /// A plain HTTP route, run on the service thread once the row's auth passed.
        case http(@Sendable (RouteRequest, @escaping RouteResponder) -> Void)
        /// A WebSocket protocol: upgrades go to the endpoint, plain HTTP gets 426.
        case webSocket(any WebSocketEndpoint)
    }

    /// The methods this row answers (a WebSocket row: the upgrade's GET).
    let methods: [HTTPMethod]
    let pattern: RoutePattern
    let auth: RouteAuth
    /// Whether browser pages call it, so it speaks CORS (preflights, `access-control-*` headers,
    /// `origin_not_allowed`). WebSocket upgrades check `Origin` whatever this says (RFC 6455 §10.2).
    let browser: Bool
    /// Whether requests count against `signaling_requests_per_minute` per address (HTTP sessions).
    let rateLimited: Bool
    let handler: Handler

    init(_ methods: [HTTPMethod], _ pattern: String, auth: RouteAuth, browser: Bool = false, rateLimited: Bool = false,
         _ handler: Handler)
    {
        self.methods = methods
        self.pattern = RoutePattern(pattern)
        self.auth = auth
        self.browser = browser
        self.rateLimited = rateLimited
        self.handler = handler
    }

    var isWebSocket: Bool {
        if case .webSocket = handler { return true }
        return false
    }
}

/// Every route of the server but the static files (`StaticFiles`, served in front of it): what
/// 404, 405 with `Allow`, CORS preflights and headers, the 426 of a WebSocket path and the upgrade
/// routing are derived from. docs/protocol.md ("Routes") and docs/openapi.yaml list the same rows
/// (RouteTableTests holds them together).
struct RouteTable {
    let routes: [Route]

    init(_ routes: [Route]) {
        self.routes = routes
    }

    /// Every row whose pattern matches `path`, whatever its method, with its parameters.
    func rows(at path: [Substring]) -> [(route: Route, parameters: [String: String])] {
        routes.compactMap { route in route.pattern.match(path).map { (route, $0) } }
    }

    /// The methods of `rows`, in table order, each once (`Allow`).
    static func methods(of rows: [(route: Route, parameters: [String: String])]) -> [String] {
        var names: [String] = []
        for row in rows { for method in row.route.methods where !names.contains(method.rawValue) { names.append(method.rawValue) } }
        return names
    }

    /// The WebSocket row at exactly `path` (an upgrade's path, compared as sent).
    func webSocketRoute(at path: String) -> (route: Route, endpoint: any WebSocketEndpoint)? {
        for route in routes {
            if case .webSocket(let endpoint) = route.handler, route.pattern.description == path { return (route, endpoint) }
        }
        return nil
    }

    /// First segments under which rate-limited rows live: a request there that matches no row is
    /// still counted (an unknown session path costs the prober the same as a known one).
    var rateLimitedPrefixes: Set<String> {
        Set(routes.filter(\.rateLimited).compactMap(\.pattern.prefix))
    }
}
