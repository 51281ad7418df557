import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The HTTP front door: static files first, then the route table (`RouteTable`), which decides
/// everything else a request meets before its handler: 404, 405 with `Allow`, CORS (preflights,
/// headers, `origin_not_allowed`), the signaling rate limit, 426 on a WebSocket path, and the
/// row's auth (peer token with its scope and bound parameter, or API key with its scope).
/// Runs on the service thread; an API key is looked up on the store queue and comes back through
/// `context.post`, so the loop never waits.
// @unchecked Sendable: used only on the service thread; store completions hop back via `post`.
final class HTTPRoutes: @unchecked Sendable {
    let context: ServiceContext
    let table: RouteTable
    /// The browser SDK and pages (`/sdk/…`, `/`, `/dashboard`), loaded by `ServerApp` at start-up.
    let staticFiles: StaticFiles
    let cors: CORSPolicy
    let apiKeys: APIKeyAuthenticator
    /// `signaling_requests_per_minute` per address for the rate-limited rows: nil to go on, or
    /// the 429 to send (`HTTPSessions.rateLimit`).
    let rateLimit: (HTTPRequest) -> HTTPResponse?
    private let rateLimitedPrefixes: Set<String>

    init(context: ServiceContext, table: RouteTable, staticFiles: StaticFiles, apiKeys: APIKeyAuthenticator,
         rateLimit: @escaping (HTTPRequest) -> HTTPResponse?)
    {
        self.context = context
        self.table = table
        self.staticFiles = staticFiles
        self.apiKeys = apiKeys
        self.rateLimit = rateLimit
        self.rateLimitedPrefixes = table.rateLimitedPrefixes
        self.cors = CORSPolicy(allowedOrigins: context.config.allowedOrigins)
    }

    func handle(_ request: HTTPRequest, respond: @escaping RouteResponder) {
        let segments = request.pathSegments
        if segments.first == "sdk" { return sdkFile(request, respond: respond) }
        if let response = staticFiles.response(for: request) { return respond(response) }
        let rows = table.rows(at: segments)
        var respond = respond
        // CORS is a property of the path: every method of a path a browser calls speaks it, so a
        // browser also reads the 405 of a wrong method. WebSocket rows check Origin at the upgrade.
        let browserRows = rows.filter { $0.route.browser && !$0.route.isWebSocket }
        if !browserRows.isEmpty {
            switch cors.check(request) {
            case .notCrossOrigin:
                break
            case .refused:
                return respond(CORSPolicy.refusal(origin: request.headers["origin"] ?? "null"))
            case .allowed(let allowOrigin):
                if request.method == .options, request.headers["access-control-request-method"] != nil {
                    let methods = RouteTable.methods(of: browserRows).filter { $0 != HTTPMethod.options.rawValue }
                    return respond(CORSPolicy.preflight(allowOrigin: allowOrigin, methods: methods))
                }
                let inner = respond
                respond = { response in
                    var response = response
                    response.headers += CORSPolicy.responseHeaders(allowOrigin: allowOrigin)
                    inner(response)
                }
            }
        }
        let limited = rows.isEmpty ? segments.first.map { rateLimitedPrefixes.contains(String($0)) } ?? false
                                   : rows.contains { $0.route.rateLimited }
        if limited, let refusal = rateLimit(request) { return respond(refusal) }
        guard !rows.isEmpty else { return respond(Problem.notFound(request)) }
        if let socket = rows.first(where: { $0.route.isWebSocket }) {
            return respond(Problem.upgradeRequired(socket.route.pattern.description))
        }
        guard let row = rows.first(where: { $0.route.methods.contains(request.method) }) else {
            return respond(Problem.methodNotAllowed(RouteTable.methods(of: rows)))
        }
        guard case .http(let run) = row.route.handler else { return respond(Problem.notFound(request)) }
        let reply = respond
        authorize(request, row.route.auth, parameters: row.parameters) { result in
            switch result {
            case .failure(let response): reply(response)
            case .success(let routeRequest): run(routeRequest, reply)
            }
        }
    }

    /// A request another node forwarded (`ClusterLink.forward`): that node already applied CORS and
    /// the rate limit, so only the row and its auth apply here.
    func handleForwarded(_ request: HTTPRequest, respond: @escaping RouteResponder) {
        let rows = table.rows(at: request.pathSegments)
        guard let row = rows.first(where: { $0.route.methods.contains(request.method) }), case .http(let run) = row.route.handler
        else { return respond(Problem.notFound(request)) }
        authorize(request, row.route.auth, parameters: row.parameters) { result in
            switch result {
            case .failure(let response): respond(response)
            case .success(let routeRequest): run(routeRequest, respond)
            }
        }
    }

    /// Applies a row's auth: synchronously for none and peer tokens, after the store's answer for
    /// an API key. `then` runs on the service thread.
    private func authorize(_ request: HTTPRequest, _ auth: RouteAuth, parameters: [String: String],
                           then: @escaping @Sendable (Result<RouteRequest, HTTPResponse>) -> Void)
    {
        switch auth {
        case .none:
            then(.success(RouteRequest(http: request, parameters: parameters, claims: nil, key: nil)))
        case .peerToken(let scope, let binding):
            then(Self.checkPeerToken(context.authenticate(request), scope: scope, binding: binding, parameters: parameters)
                .map { RouteRequest(http: request, parameters: parameters, claims: $0, key: nil) })
        case .apiKey(let scope):
            apiKeys.authenticate(request, scope: scope) { result in
                then(result.map { RouteRequest(http: request, parameters: parameters, claims: nil, key: $0) })
            }
        }
    }

    /// A verified token held to a row's scope and bound parameter.
    static func checkPeerToken(_ verified: Result<PeerTokenClaims, HTTPResponse>, scope: TokenScope?, binding: TokenBinding?,
                               parameters: [String: String]) -> Result<PeerTokenClaims, HTTPResponse>
    {
        guard case .success(let claims) = verified else { return verified }
        if let scope, !scope.admits(claims.scope) { return .failure(Problem.tokenWrongScope(scope.name)) }
        switch binding {
        case nil:
            break
        case .room(let name)?:
            guard claims.roomID == RoomID(parameters[name] ?? "") else { return .failure(Problem.wrongRoom) }
        case .call(let name)?:
            guard claims.callID == CallID(parameters[name] ?? "") else { return .failure(Problem.tokenWrongCall) }
        }
        return .success(claims)
    }

    /// `/sdk/…`: the SDK and its typings, which pages of other origins import as modules (always a
    /// CORS request), so these speak CORS under the same `allowed_origins` as the API.
    private func sdkFile(_ request: HTTPRequest, respond: @escaping RouteResponder) {
        let verdict = cors.check(request)
        guard let corsHeaders = cors.staticHeaders(for: verdict) else {
            return respond(CORSPolicy.refusal(origin: request.headers["origin"] ?? "null"))
        }
        if request.method == .options, case .allowed(let allowOrigin) = verdict, request.headers["access-control-request-method"] != nil {
            return respond(CORSPolicy.preflight(allowOrigin: allowOrigin, methods: CORSPolicy.staticMethods))
        }
        var response = staticFiles.response(for: request) ?? Problem.noFile(request)
        response.headers += corsHeaders
        respond(response)
    }
}

extension HTTPRoutes {
    /// The body of a messages page (docs/protocol.md, "History"): `{has_more, last_seq, limit,
    /// messages, next_since_seq | next_before_seq, room_id}`, each message as it is now.
    static func messagesJSON(_ page: MessagePage, query: MessageQuery, limit: Int) -> JSONValue {
        var body: [String: JSONValue] = [
            "room_id": .string(page.room.rawValue),
            "messages": .array(page.messages.map(messageJSON)),
            "has_more": .bool(page.hasMore),
            "last_seq": .int(page.lastSeq),
            "limit": .int(Int64(limit)),
        ]
        switch query.direction {
        case .after: body["next_since_seq"] = .int(page.next)
        case .before: body["next_before_seq"] = .int(page.next)
        }
        return .object(body)
    }

    static func messageJSON(_ message: MessageView) -> JSONValue {
        func meta(_ text: String?) -> JSONValue { text.flatMap { try? JSONParser.parse($0) } ?? .null }
        var object = ChatJSON(clientID: message.clientID, from: message.sender.rawValue, meta: meta(message.meta), seq: message.seq,
                              text: message.text, timestamp: message.timestampMs).fields
        object["reactions"] = .array(message.reactions.map { reaction in
            ["key": .string(reaction.key), "count": .int(Int64(reaction.peers.count)),
             "peers": .array(reaction.peers.map { .string($0.rawValue) })]
        })
        if let replyTo = message.replyTo { object["reply_to"] = .int(replyTo) }
        if let edited = message.editedTs { object["edited_ts"] = .int(edited) }
        if let deleted = message.deletedTs {
            object["deleted"] = .bool(true)
            object["deleted_ts"] = .int(deleted)
        }
        if let edits = message.edits {
            object["edits"] = .array(edits.map { edit in
                ["seq": .int(edit.seq), "ts": .int(edit.timestampMs), "text": .string(edit.text), "meta": meta(edit.meta)]
            })
        }
        return .object(object)
    }
}

extension ChatMessage {
    /// The message with its sender, as the history API lists it and the `chat_message` webhook
    /// sends it: the chat frame's payload plus `from`.
    var chatJSON: ChatJSON {
        ChatJSON(clientID: clientID, from: from.rawValue, meta: meta, seq: seq, text: text, timestamp: timestamp)
    }
}
