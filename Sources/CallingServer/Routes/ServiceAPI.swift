import CallingAuth
import CallingCore
import CallingPostgres
import CallingStore
import CallingTransport
import Foundation

/// The handlers of the node's own routes: `/healthz`, `/metrics`, `GET /v1/ice` and the chat
/// history `GET /v1/rooms/{room_id}/messages`. Their rows, auth included, are in the route table
/// (Routes.swift); a handler here runs once the row's auth passed. Service thread; the history
/// read completes later through `context.post`, so the loop never waits.
// @unchecked Sendable: used only on the service thread; store completions hop back via `post`.
final class ServiceAPI: @unchecked Sendable {
    let context: ServiceContext
    let rooms: SignalingService
    let httpSessions: HTTPSessions
    /// What `/metrics` reports of the transport.
    let transport: WebSocketServer
    /// Chat history (`context.chat`).
    let store: any ChatPersistence
    let config: ServerConfig
    /// Cluster mode's state for `/healthz` and `/metrics`; nil on a node alone.
    let cluster: ClusterLink?
    /// The shared store (`database_url`), whose reachability `/healthz` reports; nil without one.
    let database: PostgresChatStore?

    init(context: ServiceContext, rooms: SignalingService, httpSessions: HTTPSessions, transport: WebSocketServer, cluster: ClusterLink?,
         database: PostgresChatStore?) {
        self.context = context
        self.rooms = rooms
        self.httpSessions = httpSessions
        self.transport = transport
        self.store = context.chat
        self.config = context.config
        self.cluster = cluster
        self.database = database
    }

    /// `GET|HEAD /healthz`.
    func health(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        // Still 200 when degraded: the node's rooms and calls go on working, so a load balancer
        // keeps it; the status is for the operator's monitoring.
        let storeFailing = context.store.metrics.writesFailing || (store !== context.store && store.metrics.writesFailing)
        let postgres = database.map { ClusterLink.DatabaseHealth(unreachable: $0.unreachable(stallMs: config.databaseStallMs)) }
        let postgresDown = postgres?.unreachable != nil
        guard let cluster else { return respond(.json(200, ["status": .string(storeFailing || postgresDown ? "degraded" : "ok")])) }
        let healthy = cluster.router.driver.isUp && !storeFailing && !postgresDown
        respond(.json(200, ["status": .string(healthy ? "ok" : "degraded"), "cluster": cluster.healthJSON(postgres: postgres)]))
    }

    /// `GET /metrics`.
    func metrics(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        let text = context.metrics.render(hub: rooms.hubSnapshot, transport: transport.counters,
                                          connections: transport.connectionCount, capacity: transport.capacity,
                                          remotePeers: cluster?.router.membership.remoteCount ?? 0)
        let extra = context.metrics.renderLatency(store: store.metrics) + context.webhooks.metricsText + (cluster?.metricsText ?? "")
        respond(.text(200, text + extra + httpSessions.metricsText, contentType: "text/plain; version=0.0.4"))
    }

    /// `GET /v1/ice`: STUN/TURN servers for RTCPeerConnection, TURN credentials minted for the token's peer.
    func iceServers(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping RouteResponder) {
        let now = Date(timeIntervalSince1970: Double(context.now()) / 1000)
        // no-store: the body holds a credential that no cache should keep or share.
        respond(.json(200, context.ice.answer(for: claims.sub, now: now), headers: [("cache-control", "no-store")]))
    }

    /// `GET /v1/rooms/{room_id}/messages?since_seq=&limit=`: history paging with a peer token of
    /// that room (the row binds the token to `room_id`).
    func messages(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping RouteResponder) {
        let room = RoomID(route.parameter("room_id"))
        let request = route.http
        var problems: [String] = []
        var direction = MessageQuery.Direction.after(0)
        if request.query["since_seq"] != nil, request.query["before_seq"] != nil {
            problems.append("give at most one of since_seq and before_seq")
        }
        if let raw = request.query["since_seq"] {
            if let value = Int64(raw), value >= 0 { direction = .after(value) } else { problems.append("since_seq must be a non-negative integer") }
        }
        if let raw = request.query["before_seq"] {
            if let value = Int64(raw), value >= 1 { direction = .before(value) } else { problems.append("before_seq must be an integer ≥ 1") }
        }
        var includeEdits = false
        if let raw = request.query["include"] {
            if raw == "edits" { includeEdits = true } else { problems.append("include must be edits") }
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
        let query = MessageQuery(direction, limit: limit, includeEdits: includeEdits)
        store.messages(room: room, query: query) { [context, limit] result in
            let response: HTTPResponse
            switch result {
            case .success(let page):
                response = HTTPResponse(status: 200, headers: [("content-type", "application/json")],
                                        body: JSONWriter.bytes(HTTPRoutes.messagesJSON(page, query: query, limit: limit)))
            case .failure:
                response = Problem.storeUnavailable("history is temporarily unavailable")
            }
            context.post { respond(response) }
        }
    }

    /// `GET /v1/me/rooms?limit=&cursor=`: the inbox of a user token's peer (docs/protocol.md, "Inbox").
    func inbox(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping RouteResponder) {
        let request = route.http
        var problems: [String] = []
        var limit = Self.inboxDefaultLimit
        if let raw = request.query["limit"] {
            if let value = Int(raw), (1...Self.inboxMaxLimit).contains(value) { limit = value } else {
                problems.append("limit must be an integer from 1 to \(Self.inboxMaxLimit)")
            }
        }
        var after: InboxCursor?
        if let raw = request.query["cursor"] {
            if let cursor = Self.inboxCursor(raw) { after = cursor } else { problems.append("cursor is not one this server gave out") }
        }
        guard problems.isEmpty else {
            return respond(.problem(400, code: "bad_parameter", detail: problems.joined(separator: "; ")))
        }
        store.inbox(peer: claims.sub, query: InboxQuery(limit: limit, after: after)) { [context] result in
            let response: HTTPResponse
            switch result {
            case .success(let page):
                var body: [String: JSONValue] = ["rooms": .array(page.rooms.map(Self.inboxJSON)), "has_more": .bool(page.hasMore)]
                if let next = page.next { body["next_cursor"] = .string(Self.inboxCursor(next)) }
                response = .json(200, .object(body), headers: [("cache-control", "no-store")])
            case .failure:
                response = Problem.storeUnavailable("the inbox is temporarily unavailable")
            }
            context.post { respond(response) }
        }
    }

    /// Rooms per inbox page unless the request says (`limit`), and the most it may ask for.
    static let inboxDefaultLimit = 50
    static let inboxMaxLimit = 200
    /// A last message's text in the inbox is cut to this many characters.
    static let inboxPreviewCharacters = 140

    static func inboxJSON(_ room: InboxRoom) -> JSONValue {
        var last: JSONValue = .null
        if let message = room.lastMessage {
            last = ["seq": .int(message.seq), "from": .string(message.sender.rawValue),
                    "text": .string(String(message.text.prefix(inboxPreviewCharacters))), "ts": .int(message.timestampMs)]
        }
        return ["room_id": .string(room.room.rawValue), "last_seq": .int(room.lastSeq), "last_ts": .int(room.lastTs),
                "last_message": last, "read_seq": .int(room.readSeq), "unread": .int(room.unread)]
    }

    /// The opaque `cursor` of the next inbox page: the last room's activity time and id, base64url.
    static func inboxCursor(_ cursor: InboxCursor) -> String {
        Data("\(cursor.lastTs):\(cursor.room.rawValue)".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func inboxCursor(_ text: String) -> InboxCursor? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), let decoded = String(data: data, encoding: .utf8),
              let colon = decoded.firstIndex(of: ":"), let lastTs = Int64(decoded[..<colon]) else { return nil }
        let room = String(decoded[decoded.index(after: colon)...])
        guard !room.isEmpty else { return nil }
        return InboxCursor(lastTs: lastTs, room: RoomID(room))
    }
}
