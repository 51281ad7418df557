import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// `/v1/admin/…`: what an operator sees of and does to live rooms, with an API key of scope
/// `admin` (docs/protocol.md, "Admin API"). The decisions (who leaves, which token is refused, who
/// gets a frame, whether a join gets a seat) are the hub's (`HubInput.kick`, `.endRoom`,
/// `.serverData`, `.setDraining`); this class parses requests, feeds the hub and answers.
///
/// The handlers only: their rows (API key of scope `admin`) are in the route table
/// (Routes/Routes.swift). Runs on the service thread, like `CallsAPI`.
// @unchecked Sendable: touched only on the service thread; store completions hop back via `context.post`.
final class AdminAPI: @unchecked Sendable {
    /// `end_reason` of the calls of a room ended through the admin API.
    static let endedByAdminReason = "ended_by_admin"

    let context: ServiceContext
    let rooms: SignalingService
    let httpSessions: HTTPSessions
    let logger: Logger

    init(context: ServiceContext, rooms: SignalingService, httpSessions: HTTPSessions, logger: Logger) {
        self.context = context
        self.rooms = rooms
        self.httpSessions = httpSessions
        self.logger = logger
    }

    typealias Respond = @Sendable (HTTPResponse) -> Void

    /// `GET /v1/admin/rooms`.
    func listRooms(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(.json(200, roomsJSON()))
    }

    /// `GET /v1/admin/rooms/{room_id}`.
    func showRoom(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(room(RoomID(route.parameter("room_id"))))
    }

    /// `POST /v1/admin/rooms/{room_id}/peers/{peer_id}/kick`.
    func kickPeer(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(kick(RoomID(route.parameter("room_id")), PeerID(route.parameter("peer_id"))))
    }

    /// `POST /v1/admin/rooms/{room_id}/end`.
    func closeRoom(_ route: RouteRequest, _ respond: @escaping Respond) {
        endRoom(RoomID(route.parameter("room_id")), respond)
    }

    /// `POST /v1/admin/rooms/{room_id}/data`.
    func postData(_ route: RouteRequest, _ respond: @escaping Respond) {
        sendData(RoomID(route.parameter("room_id")), route.http, respond)
    }

    /// `GET /v1/admin/drain`.
    func getDrain(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(.json(200, drainStatus))
    }

    /// `POST /v1/admin/drain`.
    func postDrain(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(setDraining(route.http))
    }

    // MARK: listing

    private func peerJSON(_ identity: PeerIdentity, in room: RoomID) -> JSONValue {
        let connection = rooms.hubSnapshot.connection(of: identity.peer, in: room)
        return ["peer_id": .string(identity.peer.rawValue), "role": .string(identity.role),
                "name": identity.name.map(JSONValue.string) ?? .null, "call_id": identity.call.map { .string($0.rawValue) } ?? .null,
                "transport": connection.map { $0.isHTTPSession ? "http" : "websocket" } ?? .null]
    }

    private func roomJSON(_ room: RoomID, _ members: [PeerIdentity]) -> JSONValue {
        ["room_id": .string(room.rawValue), "peer_count": .int(Int64(members.count)),
         "peers": .array(members.map { peerJSON($0, in: room) })]
    }

    private func roomsJSON() -> JSONValue {
        let hub = rooms.hubSnapshot
        return ["draining": .bool(hub.isDraining), "rooms": .array(hub.roomList.map { roomJSON($0.room, $0.members) })]
    }

    private func room(_ room: RoomID) -> HTTPResponse {
        let members = rooms.hubSnapshot.identities(in: room)
        guard !members.isEmpty else { return Self.roomNotFound(room) }
        return .json(200, roomJSON(room, members))
    }

    // MARK: actions

    private func kick(_ room: RoomID, _ peer: PeerID) -> HTTPResponse {
        guard rooms.hubSnapshot.connection(of: peer, in: room) != nil else {
            return .problem(404, code: "peer_not_found", detail: "no peer '\(peer.rawValue.prefix(128))' in room '\(room.rawValue.prefix(128))'")
        }
        rooms.handle(.kick(room, peer))
        logger.info("peer kicked", ["room.id": room.rawValue, "peer.id": peer.rawValue])
        return .json(200, ["room_id": .string(room.rawValue), "peer_id": .string(peer.rawValue), "close_code": .int(Int64(CloseCode.kicked.rawValue))])
    }

    /// Closes the room's connections (4404) and HTTP sessions, and ends its live calls in the store.
    private func endRoom(_ room: RoomID, _ respond: @escaping Respond) {
        let closed = rooms.hubSnapshot.identities(in: room).count
        rooms.handle(.endRoom(room))
        let now = context.now()
        context.calls.endLiveCalls(room: room, nowMs: now, reason: Self.endedByAdminReason) { [context, logger] result in
            context.post {
                switch result {
                case .success(let calls):
                    guard closed > 0 || !calls.isEmpty else { return respond(Self.roomNotFound(room)) }
                    logger.info("room ended", ["room.id": room.rawValue, "peers": "\(closed)", "calls": "\(calls.count)"])
                    respond(.json(200, ["room_id": .string(room.rawValue), "peers_closed": .int(Int64(closed)),
                                        "close_code": .int(Int64(CloseCode.roomClosed.rawValue)),
                                        "calls_ended": .array(calls.map { .string($0.rawValue) })]))
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("calls of an ended room not marked ended", ["room.id": room.rawValue, "error": "\(error)"])
                    respond(Problem.storeUnavailable("the room was closed but its calls could not be marked ended; retry"))
                }
            }
        }
    }

    /// `{payload: object, to?: peer_id}` → a `data` frame from `_server`.
    private func sendData(_ room: RoomID, _ request: HTTPRequest, _ respond: @escaping Respond) {
        let body: RequestBody
        switch RequestBody.parse(request.body) {
        case .failure(let response): return respond(response)
        case .success(let parsed): body = parsed
        }
        let to = body.identifier("to", maxBytes: context.config.maxPeerIDBytes).map { PeerID($0) }
        let payload = body.object("payload")
        if payload == nil, body.problems == nil { body.problem("payload", "is required (a JSON object)") }
        if let payload, JSONWriter.bytes(payload).count > context.config.maxFrameBytes - 256 {
            body.problem("payload", "must serialize to less than max_frame_bytes")
        }
        if let problems = body.problems { return respond(problems) }
        guard let payload else { return respond(.problem(500, code: "internal_error", detail: "payload was not read")) }
        let members = rooms.hubSnapshot.identities(in: room)
        guard !members.isEmpty else { return respond(Self.roomNotFound(room)) }
        if let to, !members.contains(where: { $0.peer == to }) {
            return respond(.problem(404, code: "peer_not_found", detail: "no peer '\(to.rawValue.prefix(128))' in room '\(room.rawValue.prefix(128))'"))
        }
        rooms.handle(.serverData(room, to: to, payload: payload))
        respond(.json(200, ["room_id": .string(room.rawValue), "from": .string(Hub.serverPeerID.rawValue),
                            "delivered": .int(to == nil ? Int64(members.count) : 1)]))
    }

    /// `POST /v1/admin/drain {draining?: bool}` (default true).
    private func setDraining(_ request: HTTPRequest) -> HTTPResponse {
        let draining: Bool
        switch RequestBody.parse(request.body) {
        case .failure(let response): return response
        case .success(let body):
            switch body.raw("draining") {
            case nil: draining = true
            case .bool(let value)?: draining = value
            default: return RequestBody.invalid([("draining", "must be true or false")])
            }
        }
        rooms.handle(.setDraining(draining))
        logger.info(draining ? "draining: new joins refused" : "drain ended: joins accepted", [:])
        return .json(200, drainStatus)
    }

    /// Whether the node is draining and whether anything is left on it.
    /// Peers and rooms count this node's own seats: in cluster mode the hub also seats peers of
    /// other nodes, which a drained node does not wait for.
    private var drainStatus: JSONValue {
        let hub = rooms.hubSnapshot
        var peers = hub.peerCount
        var roomCount = hub.roomCount
        if rooms.router is ClusterRouter {
            peers = 0
            roomCount = 0
            for (room, members) in hub.roomList {
                let local = members.filter { hub.connection(of: $0.peer, in: room).map(rooms.router.isLocal) ?? false }.count
                peers += local
                if local > 0 { roomCount += 1 }
            }
        }
        return ["draining": .bool(hub.isDraining), "rooms": .int(Int64(roomCount)), "peers": .int(Int64(peers)),
                "http_sessions": .int(Int64(httpSessions.count)), "empty": .bool(peers == 0)]
    }

    static func roomNotFound(_ room: RoomID) -> HTTPResponse {
        .problem(404, code: "room_not_found", detail: "nobody is in room '\(room.rawValue.prefix(128))' on this node")
    }
}
