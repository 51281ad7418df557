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
                                        body: HTTPRoutes.historyBody(page, limit: limit))
            case .failure:
                response = Problem.storeUnavailable("history is temporarily unavailable")
            }
            context.post { respond(response) }
        }
    }
}
