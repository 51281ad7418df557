import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The REST surface. Runs on the service thread; anything that touches disk completes later
/// through `context.post`, so the loop never waits.
final class HTTPRoutes: @unchecked Sendable {
    // @unchecked: used only on the service thread; store completions hop back via `post`.
    let context: ServiceContext
    let rooms: SignalingService
    let calls: CallsAPI
    let admin: AdminAPI
    let httpSessions: HTTPSessions
    /// What `/metrics` reports of the transport.
    let transport: WebSocketServer
    /// Chat history (`context.chat`).
    let store: any ChatPersistence
    let config: ServerConfig
    /// `GET /v1/ice`.
    var ice: ICEService { context.ice }
    /// The browser SDK and pages (`/sdk/…`, `/`, `/dashboard`), loaded by `ServerApp` at start-up.
    let staticFiles: StaticFiles
    /// Cluster mode's state for `/healthz` and `/metrics`; nil on a node alone.
    let cluster: ClusterLink?
    let cors: CORSPolicy

    init(context: ServiceContext, rooms: SignalingService, calls: CallsAPI, admin: AdminAPI, httpSessions: HTTPSessions,
         transport: WebSocketServer, staticFiles: StaticFiles, cluster: ClusterLink?)
    {
        self.cluster = cluster
        self.context = context
        self.rooms = rooms
        self.calls = calls
        self.admin = admin
        self.httpSessions = httpSessions
        self.transport = transport
        self.store = context.chat
        self.config = context.config
        self.staticFiles = staticFiles
        self.cors = CORSPolicy(allowedOrigins: config.allowedOrigins)
    }

    func handle(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let segments = request.pathSegments
        if segments.first == "sdk" { return sdkFile(request, respond: respond) }
        if let response = staticFiles.response(for: request) { return respond(response) }
        var respond = respond
        if let methods = Self.browserRouteMethods(segments) {
            switch cors.check(request) {
            case .notCrossOrigin:
                break
            case .refused:
                return respond(CORSPolicy.refusal(origin: request.headers["origin"] ?? "null"))
            case .allowed(let allowOrigin):
                if request.method == .options, request.headers["access-control-request-method"] != nil {
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
        route(request, segments: segments, respond: respond)
    }

    /// `/sdk/…`: the SDK and its typings, which pages of other origins import as modules (always a
    /// CORS request), so these speak CORS under the same `allowed_origins` as the API.
    private func sdkFile(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let verdict = cors.check(request)
        guard let corsHeaders = cors.staticHeaders(for: verdict) else {
            return respond(CORSPolicy.refusal(origin: request.headers["origin"] ?? "null"))
        }
        if request.method == .options, case .allowed(let allowOrigin) = verdict, request.headers["access-control-request-method"] != nil {
            return respond(CORSPolicy.preflight(allowOrigin: allowOrigin, methods: CORSPolicy.staticMethods))
        }
        var response = staticFiles.response(for: request)
            ?? .problem(404, code: "not_found", detail: "no file at \(request.path.prefix(200))")
        response.headers += corsHeaders
        respond(response)
    }

    /// The methods of a route that browsers call with a peer token, which therefore speaks CORS;
    /// nil for every other route (API-key routes are server-to-server and send no CORS headers).
    static func browserRouteMethods(_ segments: [Substring]) -> [String]? {
        switch segments.count {
        case 2 where segments[0] == "v1" && segments[1] == "ice": return ["GET"]
        case 4 where segments[0] == "v1" && segments[1] == "rooms" && segments[3] == "messages": return ["GET"]
        case 5 where segments[0] == "webrtc-proxy": return ["POST"]
        case 6 where segments[0] == "webrtc-proxy": return ["PATCH", "DELETE"]
        case 2 where segments[0] == "whip": return ["POST"]
        case 3 where segments[0] == "whip": return ["PATCH", "DELETE"]
        default: return nil
        }
    }

    private func route(_ request: HTTPRequest, segments: [Substring], respond: @escaping @Sendable (HTTPResponse) -> Void) {
        switch (request.method, segments.count) {
        case (_, 1) where segments[0] == "healthz":
            guard request.method == .get || request.method == .head else { return respond(methodNotAllowed(["GET", "HEAD"])) }
            // Still 200 when degraded: the node's rooms and calls go on working, so a load balancer
            // keeps it; the status is for the operator's monitoring.
            let storeFailing = context.store.metrics.writesFailing || (store !== context.store && store.metrics.writesFailing)
            guard let cluster else { return respond(.json(200, ["status": .string(storeFailing ? "degraded" : "ok")])) }
            let healthy = cluster.router.driver.isUp && !storeFailing
            respond(.json(200, ["status": .string(healthy ? "ok" : "degraded"), "cluster": cluster.healthJSON]))
        case (_, 1) where segments[0] == "metrics":
            guard request.method == .get else { return respond(methodNotAllowed(["GET"])) }
            let text = context.metrics.render(hub: rooms.hubSnapshot, transport: transport.counters,
                                              connections: transport.connectionCount, capacity: transport.capacity,
                                              remotePeers: cluster?.router.membership.remoteCount ?? 0)
            let extra = context.metrics.renderLatency(store: store.metrics) + context.webhooks.metricsText + (cluster?.metricsText ?? "")
            respond(.text(200, text + extra + httpSessions.metricsText, contentType: "text/plain; version=0.0.4"))
        case (_, 4) where segments[0] == "v1" && segments[1] == "rooms" && segments[3] == "messages":
            guard request.method == .get else { return respond(methodNotAllowed(["GET"])) }
            messages(room: RoomID(String(segments[2])), request, respond)
        case (_, 2) where segments[0] == "v1" && segments[1] == "ice":
            guard request.method == .get else { return respond(methodNotAllowed(["GET"])) }
            iceServers(request, respond)
        case (_, 2...4) where segments[0] == "v1" && (segments[1] == "calls" || segments[1] == "tokens"):
            calls.handle(request, segments: segments, respond: respond)
        case (_, 3...) where segments[0] == "v1" && segments[1] == "admin":
            admin.handle(request, segments: segments, respond: respond)
        case (_, _) where segments.first == "webrtc-proxy" || segments.first == "whip":
            httpSessions.handle(request, segments: segments, respond: respond)
        case (_, 2) where segments[0] == "v1" && (segments[1] == "ws" || segments[1] == "presence"):
            respond(.problem(426, code: "upgrade_required", detail: "/v1/\(segments[1]) is a WebSocket endpoint",
                             headers: [("upgrade", "websocket")]))
        default:
            respond(.problem(404, code: "not_found", detail: "no route for \(request.method.rawValue) \(request.path.prefix(200))"))
        }
    }

    private func methodNotAllowed(_ allowed: [String]) -> HTTPResponse {
        .problem(405, code: "method_not_allowed", detail: "use \(allowed.joined(separator: ", "))",
                 headers: [("allow", allowed.joined(separator: ", "))])
    }

    /// `GET /v1/ice`: STUN/TURN servers for RTCPeerConnection, TURN credentials minted for the token's peer.
    private func iceServers(_ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        switch context.authenticate(request) {
        case .failure(let response):
            respond(response)
        case .success(let claims):
            let now = Date(timeIntervalSince1970: Double(context.now()) / 1000)
            // no-store: the body holds a credential that no cache should keep or share.
            respond(.json(200, ice.answer(for: claims.sub, now: now), headers: [("cache-control", "no-store")]))
        }
    }

    /// `GET /v1/rooms/{id}/messages?since_seq=&limit=`: history paging with a peer token of that room.
    private func messages(room: RoomID, _ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let claims: PeerTokenClaims
        switch context.authenticate(request) {
        case .failure(let response): return respond(response)
        case .success(let verified): claims = verified
        }
        guard claims.roomID == room else {
            return respond(.problem(403, code: "wrong_room", detail: "the token is for another room"))
        }
        var problems: [String] = []
        var sinceSeq: Int64 = 0
        if let raw = request.query["since_seq"] {
            if let value = Int64(raw), value >= 0 { sinceSeq = value } else { problems.append("since_seq must be a non-negative integer") }
        }
        var limit = config.historyDefaultLimit
        if let raw = request.query["limit"] {
            if let value = Int(raw), value >= 1 {
                limit = min(value, config.historyMaxLimit)
            } else {
                problems.append("limit must be an integer from 1 to \(config.historyMaxLimit)")
            }
        }
        guard problems.isEmpty else {
            return respond(.problem(400, code: "bad_parameter", detail: problems.joined(separator: "; ")))
        }
        store.history(room: room, sinceSeq: sinceSeq, limit: limit) { [context, limit] result in
            let response: HTTPResponse
            switch result {
            case .success(let page):
                response = HTTPResponse(status: 200, headers: [("content-type", "application/json")],
                                        body: Self.historyBody(page, limit: limit))
            case .failure:
                response = .problem(503, code: "store_unavailable", detail: "history is temporarily unavailable",
                                    headers: [("retry-after", "1")])
            }
            context.post { respond(response) }
        }
    }
}

extension HTTPRoutes {
    /// The body of a history page: `{has_more, last_seq, limit, messages, next_since_seq, room_id}`,
    /// the same bytes as `JSONWriter.bytes(historyJSON(page, limit:))`, written directly. A page
    /// holds up to 100 messages, and building a dictionary for each, then sorting and encoding it,
    /// was most of the time a page took.
    static func historyBody(_ page: HistoryPage, limit: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + page.messages.count * 160)
        JSONWriter.writeRaw(#"{"has_more":"#, into: &out)
        JSONWriter.write(.bool(page.hasMore), into: &out)
        JSONWriter.writeRaw(#","last_seq":"#, into: &out)
        JSONWriter.writeInteger(page.lastSeq, into: &out)
        JSONWriter.writeRaw(#","limit":"#, into: &out)
        JSONWriter.writeInteger(Int64(limit), into: &out)
        JSONWriter.writeRaw(#","messages":["#, into: &out)
        for (offset, record) in page.messages.enumerated() {
            if offset > 0 { out.append(UInt8(ascii: ",")) }
            ChatMessage(record: record).writeHistoryJSON(into: &out)
        }
        JSONWriter.writeRaw(#"],"next_since_seq":"#, into: &out)
        JSONWriter.writeInteger(page.nextSinceSeq, into: &out)
        JSONWriter.writeRaw(#","room_id":"#, into: &out)
        JSONWriter.writeString(page.room.rawValue, into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The history page as a value: what `historyBody` writes.
    static func historyJSON(_ page: HistoryPage, limit: Int) -> JSONValue {
        [
            "room_id": .string(page.room.rawValue),
            "messages": .array(page.messages.map { ChatMessage(record: $0).historyJSON }),
            "next_since_seq": .int(page.nextSinceSeq),
            "has_more": .bool(page.hasMore),
            "last_seq": .int(page.lastSeq),
            "limit": .int(Int64(limit)),
        ]
    }
}

extension ChatMessage {
    /// A message as listed by the history API: the chat frame's payload plus `from`.
    var historyJSON: JSONValue {
        ["seq": .int(seq), "from": .string(from.rawValue), "client_id": .string(clientID), "text": .string(text),
         "meta": meta ?? .null, "ts": .int(timestamp)]
    }

    /// `JSONWriter.write(historyJSON)`'s bytes (keys sorted), written directly.
    func writeHistoryJSON(into out: inout [UInt8]) {
        JSONWriter.writeRaw(#"{"client_id":"#, into: &out)
        JSONWriter.writeString(clientID, into: &out)
        JSONWriter.writeRaw(#","from":"#, into: &out)
        JSONWriter.writeString(from.rawValue, into: &out)
        JSONWriter.writeRaw(#","meta":"#, into: &out)
        JSONWriter.write(meta ?? .null, into: &out)
        JSONWriter.writeRaw(#","seq":"#, into: &out)
        JSONWriter.writeInteger(seq, into: &out)
        JSONWriter.writeRaw(#","text":"#, into: &out)
        JSONWriter.writeString(text, into: &out)
        JSONWriter.writeRaw(#","ts":"#, into: &out)
        JSONWriter.writeInteger(timestamp, into: &out)
        out.append(UInt8(ascii: "}"))
    }
}
