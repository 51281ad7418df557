import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// HTTP session signaling bridged to room peers: the Retell-style webrtc-proxy session API
/// (`/webrtc-proxy/{call_id}/v1/webrtc/sessions…`; docs/protocol.md, "HTTP sessions") and WHIP
/// (RFC 9725, `/whip/{room_id}…`).
/// The server relays SDP and candidates; it never touches media.
///
/// A session is a virtual room member: it joins the hub on a `ConnectionID` with the top bit set
/// (the transport counts up from 1, so the spaces never meet), attached to the `Router`, which
/// hands frames addressed to such ids to `receive(_:on:)` instead of a socket. The answering peer
/// (the longest-present peer with role `session_answer_role`, the call's `agent_id` first) sees an
/// ordinary `peer-joined`, an `offer` from the token's peer, answers with `answer`, and sees
/// `data {kind:"hangup"}` then `peer-left` when the session ends. A POST is held open until that
/// answer arrives (`session_answer_timeout_ms`, then 502).
///
/// Runs on the service thread: routes, hub frames and ticks all arrive there.
// @unchecked Sendable: every stored property is touched only on the service thread; store
// completions capture `self` solely to hop back through `context.post`.
final class HTTPSessions: VirtualConnection, @unchecked Sendable {
    enum Kind: String { case proxy = "http", whip }

    /// Candidates accepted in one trickle PATCH (a browser gathers a handful per m-section).
    static let maxCandidatesPerPatch = 64

    /// How a wait for the answering peer's `answer` ended.
    enum AnswerOutcome {
        case answer(String)
        case timedOut
        /// The answering peer left, hung up, or could not be reached.
        case answererGone
        /// The session ended meanwhile (replaced by a newer POST, deleted, taken over).
        case sessionGone
        /// The room's consultation meter has run out: the hub closed the session's seat.
        case consultationEnded
    }

    struct Pending {
        var deadline: Millis
        var complete: (AnswerOutcome) -> Void
    }

    final class Session {
        let id: String
        let kind: Kind
        let connection: ConnectionID
        let identity: PeerIdentity
        let answerer: PeerID
        let expiresAt: Millis
        /// The latest offer, kept for WHIP: mids give `sdpMLineIndex`, an ICE restart rewrites it.
        var offer: String
        var version = 1
        var pending: Pending?
        /// When the session joined its room, for `session_ended.duration_ms`.
        var startedAt: Millis = 0

        init(id: String, kind: Kind, connection: ConnectionID, identity: PeerIdentity, answerer: PeerID, expiresAt: Millis,
             offer: String)
        {
            self.id = id
            self.kind = kind
            self.connection = connection
            self.identity = identity
            self.answerer = answerer
            self.expiresAt = expiresAt
            self.offer = offer
        }

        /// WHIP entity tag: changes with every ICE restart.
        var etag: String { "\"\(id).\(version)\"" }
    }

    /// One live session per (room, peer): a second POST with the same token takes the seat over.
    struct Seat: Hashable {
        let room: RoomID
        let peer: PeerID
    }

    typealias Respond = @Sendable (HTTPResponse) -> Void

    let context: ServiceContext
    /// The rooms the sessions join (seats, joins, leaves, relayed frames).
    let rooms: SignalingService
    /// Frames and closes for the sessions' virtual connections arrive through it (`attach`).
    let router: any FrameDelivery
    let config: ServerConfig
    let logger: Logger
    private var nextVirtual: UInt64 = 0
    private var byID: [String: Session] = [:]
    /// Live sessions (webrtc-proxy and WHIP), for the admin drain status.
    var count: Int { byID.count }
    private var byConnection: [ConnectionID: Session] = [:]
    private var bySeat: [Seat: Session] = [:]
    /// Token buckets per remote address (`signaling_requests_per_minute`), with when each was last used.
    private var buckets: [String: (limiter: RateLimiter, lastSeen: Millis)] = [:]
    private var lastPrune: Millis = 0
    /// Outcomes by name (created_http, created_whip, replaced, answer_timeout, rate_limited…), for tests and logs.
    private(set) var counters: [String: Int] = [:]

    init(context: ServiceContext, rooms: SignalingService, router: any FrameDelivery, logger: Logger) {
        self.context = context
        self.rooms = rooms
        self.router = router
        self.config = context.config
        self.logger = logger
    }

    var sessionCount: Int { byID.count }

    /// Prometheus lines appended to `/metrics`.
    var metricsText: String {
        var out = "# HELP calling_http_sessions Live HTTP sessions and WHIP resources.\n# TYPE calling_http_sessions gauge\n"
        out += "calling_http_sessions \(byID.count)\n"
        out += "# HELP calling_http_session_events_total HTTP session and WHIP outcomes, by event.\n"
        out += "# TYPE calling_http_session_events_total counter\n"
        for key in counters.keys.sorted() { out += "calling_http_session_events_total{event=\"\(key)\"} \(counters[key] ?? 0)\n" }
        return out
    }

    // MARK: routes

    // The rows (methods, paths, peer-token auth with scope `room` bound to `{call_id}` or
    // `{room_id}`, CORS, the per-address rate limit) are in the route table (Routes/Routes.swift).

    /// `DELETE /webrtc-proxy/{call_id}/v1/webrtc/sessions/{session_id}`.
    func deleteProxySession(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let call = CallID(route.parameter("call_id"))
        deleteSession(id: route.parameter("session_id"), kind: .proxy, route.http, claims: claims, respond) { $0.identity.call == call }
    }

    /// `DELETE /whip/{room_id}/{resource_id}`.
    func deleteWHIPResource(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let room = RoomID(route.parameter("room_id"))
        deleteSession(id: route.parameter("resource_id"), kind: .whip, route.http, claims: claims, respond) { $0.identity.room == room }
    }

    /// `OPTIONS /whip/{room_id}` (not a CORS preflight, which the front door answers).
    func whipEndpointOptions(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(Self.whipOptions(resource: false))
    }

    /// `OPTIONS /whip/{room_id}/{resource_id}`.
    func whipResourceOptions(_ route: RouteRequest, _ respond: @escaping Respond) {
        respond(Self.whipOptions(resource: true))
    }

    // MARK: webrtc-proxy

    /// `POST /webrtc-proxy/{call_id}/v1/webrtc/sessions` with JSON `{identity: "client", sdp}`.
    func createProxySession(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let request = route.http
        let call = CallID(route.parameter("call_id"))
        guard let room = claims.roomID else { return respond(.problem(403, code: "token_no_room", detail: "the token names no room_id")) }
        guard let object = (try? JSONParser.parse(request.body))?.objectValue else {
            return respond(RequestBody.invalid([("body", "must be a JSON object with identity and sdp")]))
        }
        var problems: [(String, String)] = []
        let identityField = object["identity"]?.stringValue
        let sdp = object["sdp"]?.stringValue
        if identityField?.isEmpty ?? true { problems.append(("identity", "is required (\"client\")")) }
        if sdp?.isEmpty ?? true { problems.append(("sdp", "is required: the SDP offer")) }
        guard problems.isEmpty, let sdp else { return respond(RequestBody.invalid(problems)) }
        // `client` is the identity every call token is issued for; a token of the answering role is not a client.
        guard identityField == "client", claims.role != config.sessionAnswerRole else {
            return respond(.problem(403, code: "identity_mismatch", detail: "the access token was issued for identity \"client\""))
        }
        let identity = PeerIdentity(claims: claims, room: room, call: call, defaultRole: "client", leewaySeconds: config.jwtLeewaySeconds)
        let expiresAt = Self.millis(claims.expiresAt.addingTimeInterval(config.jwtLeewaySeconds))
        context.calls.call(call) { [context] result in
            context.post { [self] in
                switch result {
                case .success(let record?) where record.state != .ended && record.room == room:
                    start(.proxy, identity: identity, offer: sdp, preferred: record.agentID.map { PeerID($0) }, expiresAt: expiresAt) {
                        session, outcome in
                        respond(self.finishCreate(session, outcome) { answer in
                            .json(201, ["session_id": .string(session.id), "sdp": .string(answer)],
                                  headers: [("location", "/webrtc-proxy/\(call.rawValue)/v1/webrtc/sessions/\(session.id)"),
                                            ("cache-control", "no-store")])
                        })
                    } refused: { respond($0) }
                case .success(let record?) where record.room != room:
                    respond(Self.wrongCall)
                case .success:
                    respond(.problem(404, code: "call_not_found", detail: "no live call '\(call.rawValue.prefix(200))'"))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Problem.storeUnavailable())
                }
            }
        }
    }

    /// `PATCH …/sessions/{id}`: JSON `{candidate: {...}}` (204) or `application/sdp` renegotiation (200 + answer).
    func patchProxySession(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let request = route.http
        let call = CallID(route.parameter("call_id"))
        let id = route.parameter("session_id")
        guard let session = byID[id], session.kind == .proxy, session.identity.call == call else {
            return notHeld(id, request, respond, fallback: Self.sessionNotFound(id))
        }
        guard session.identity.peer == claims.sub else { return respond(Self.notYours) }
        switch Self.mediaType(request) {
        case "application/sdp":
            let sdp = String(decoding: request.body, as: UTF8.self)
            guard !sdp.allSatisfy(\.isWhitespace) else { return respond(RequestBody.invalid([("body", "must be an SDP offer")])) }
            renegotiate(session, offer: sdp, respond) { answer in
                HTTPResponse(status: 200, headers: [("content-type", "application/sdp")], body: Array(answer.utf8))
            }
        case "application/json", nil:
            guard let object = (try? JSONParser.parse(request.body))?.objectValue,
                let candidate = object["candidate"]?.objectValue, let line = candidate["candidate"]?.stringValue
            else {
                return respond(RequestBody.invalid([("candidate", "must be an object with a string candidate (RTCIceCandidateInit)")]))
            }
            let mid = candidate["sdpMid"]?.stringValue
            let index = candidate["sdpMLineIndex"]?.int64Value
            if candidate["sdpMid"].flatMap(JSONValue.nonNull) != nil && mid == nil {
                return respond(RequestBody.invalid([("candidate.sdpMid", "must be a string")]))
            }
            if candidate["sdpMLineIndex"].flatMap(JSONValue.nonNull) != nil && (index == nil || index! < 0) {
                return respond(RequestBody.invalid([("candidate.sdpMLineIndex", "must be an integer ≥ 0")]))
            }
            relayCandidate(session, line: line, mid: mid, index: index)
            respond(HTTPResponse(status: 204))
        default:
            respond(Self.unsupportedType(["application/json", "application/sdp"]))
        }
    }

    /// `DELETE` of a session or WHIP resource: 204, also when it is already gone.
    private func deleteSession(id: String, kind: Kind, _ request: HTTPRequest, claims: PeerTokenClaims, _ respond: @escaping Respond,
                               sessionMatches: (Session) -> Bool)
    {
        guard let session = byID[id], session.kind == kind, sessionMatches(session) else {
            return notHeld(id, request, respond, fallback: HTTPResponse(status: 204))
        }
        guard session.identity.peer == claims.sub else { return respond(Self.notYours) }
        logger.info("session deleted", ["session.id": session.id, "room.id": session.identity.room.rawValue])
        end(session, hangup: true, reason: "deleted")
        respond(HTTPResponse(status: 204))
    }

    // MARK: cluster

    /// In a cluster: hands a request for a session another node holds to that node and answers with
    /// its response, or with `fallback` (what this node answers for a session nobody holds) when
    /// that node is gone (`ClusterLink.forward`). Nil on a single node.
    var forward: ((_ owner: String, _ request: HTTPRequest, _ fallback: HTTPResponse, _ respond: @escaping Respond) -> Void)?

    /// A PATCH or DELETE for a session this node does not hold: the owning node named in its id
    /// answers it in a cluster, `fallback` otherwise.
    private func notHeld(_ id: String, _ request: HTTPRequest, _ respond: @escaping Respond, fallback: HTTPResponse) {
        guard let forward, let owner = Self.owner(ofSession: id), owner != context.nodeID else { return respond(fallback) }
        forward(owner, request, fallback, respond)
    }

    /// A new session's id: a UUID, and in a cluster `.` and the hex of this node's id, so that any
    /// node knows where a PATCH or DELETE must go, without a shared record that could outlive it.
    func newSessionID() -> String {
        let uuid = UUID().uuidString.lowercased()
        guard forward != nil, let node = context.nodeID else { return uuid }
        return uuid + "." + node.utf8.map { String(format: "%02x", $0) }.joined()
    }

    /// The node a session id names (`newSessionID`), or nil (a single node's id, or not an id of ours).
    static func owner(ofSession id: String) -> String? {
        guard let dot = id.lastIndex(of: "."), id.distance(from: dot, to: id.endIndex) > 1 else { return nil }
        let hex = Array(id[id.index(after: dot)...].utf8)
        guard hex.count % 2 == 0, hex.count <= 128 else { return nil }
        var bytes: [UInt8] = []
        var index = 0
        while index < hex.count {
            guard let high = hexDigit(hex[index]), let low = hexDigit(hex[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return String(bytes: bytes, encoding: .utf8)
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return nil
        }
    }

    // MARK: WHIP

    /// `POST /whip/{room_id}` with `application/sdp`: 201, `Location`, `ETag`, `Link` ICE servers, the answer.
    func createWHIPResource(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let request = route.http
        let room = RoomID(route.parameter("room_id"))
        guard Self.mediaType(request) == "application/sdp" else { return respond(Self.unsupportedType(["application/sdp"])) }
        let sdp = String(decoding: request.body, as: UTF8.self)
        guard !sdp.allSatisfy(\.isWhitespace) else { return respond(RequestBody.invalid([("body", "must be an SDP offer")])) }
        guard claims.role != config.sessionAnswerRole else {
            return respond(.problem(403, code: "identity_mismatch", detail: "a token of the answering role cannot publish"))
        }
        let identity = PeerIdentity(claims: claims, room: room, defaultRole: "client", leewaySeconds: config.jwtLeewaySeconds)
        let expiresAt = Self.millis(claims.expiresAt.addingTimeInterval(config.jwtLeewaySeconds))
        let links = linkHeaders(for: claims.sub)
        start(.whip, identity: identity, offer: sdp, preferred: nil, expiresAt: expiresAt) { [self] session, outcome in
            respond(finishCreate(session, outcome) { answer in
                HTTPResponse(status: 201, headers: [
                    ("content-type", "application/sdp"), ("location", "/whip/\(room.rawValue)/\(session.id)"),
                    ("etag", session.etag), ("cache-control", "no-store"),
                ] + links, body: Array(answer.utf8))
            })
        } refused: { respond($0) }
    }

    /// `PATCH /whip/{room_id}/{id}` with `application/trickle-ice-sdpfrag`: trickle (204) or ICE restart (200).
    func patchWHIPResource(_ route: RouteRequest, _ claims: PeerTokenClaims, _ respond: @escaping Respond) {
        let request = route.http
        let room = RoomID(route.parameter("room_id"))
        let id = route.parameter("resource_id")
        guard let session = byID[id], session.kind == .whip, session.identity.room == room else {
            return notHeld(id, request, respond, fallback: Self.sessionNotFound(id))
        }
        guard session.identity.peer == claims.sub else { return respond(Self.notYours) }
        guard Self.mediaType(request) == "application/trickle-ice-sdpfrag" else {
            return respond(Self.unsupportedType(["application/trickle-ice-sdpfrag"]))
        }
        guard let ifMatch = request.headers["if-match"]?.trimmingCharacters(in: .whitespaces), !ifMatch.isEmpty else {
            return respond(.problem(428, code: "if_match_required", detail: "send If-Match with the resource's ETag (or * for an ICE restart)"))
        }
        guard ifMatch == "*" || ifMatch == session.etag else {
            return respond(.problem(412, code: "etag_mismatch", detail: "If-Match does not match the resource's current ETag",
                                    headers: [("etag", session.etag)]))
        }
        let text = String(decoding: request.body, as: UTF8.self)
        let fragment = SDPText.Fragment.parse(text, mids: SDPText.mids(session.offer))
        // Each candidate becomes a frame to the answering peer: a cap keeps one PATCH from flooding
        // it off the server (its queue cap would close it as a slow consumer).
        guard fragment.candidates.count <= Self.maxCandidatesPerPatch else {
            return respond(RequestBody.invalid([("body", "at most \(Self.maxCandidatesPerPatch) candidates per PATCH")]))
        }
        let current = SDPText.iceCredentials(session.offer)
        if let ufrag = fragment.ufrag, ufrag != current?.ufrag {
            // ICE restart: the answering peer gets the offer again with the new credentials.
            guard let pwd = fragment.pwd else {
                return respond(RequestBody.invalid([("body", "an ICE restart needs both a=ice-ufrag and a=ice-pwd")]))
            }
            renegotiate(session, offer: SDPText.replacingICECredentials(session.offer, ufrag: ufrag, pwd: pwd), respond) { answer in
                session.version += 1
                return HTTPResponse(status: 200, headers: [("content-type", "application/trickle-ice-sdpfrag"), ("etag", session.etag)],
                                    body: Array(SDPText.restartFragment(fromAnswer: answer).utf8))
            } afterOffer: { [self] in
                relay(fragment, of: session)
            }
            return
        }
        relay(fragment, of: session)
        respond(HTTPResponse(status: 204, headers: [("etag", session.etag)]))
    }

    private func relay(_ fragment: SDPText.Fragment, of session: Session) {
        for candidate in fragment.candidates {
            relayCandidate(session, line: candidate.candidate, mid: candidate.mid, index: candidate.mLineIndex.map(Int64.init))
        }
        if fragment.endOfCandidates {
            // What RTCPeerConnection reports as end-of-candidates: an empty candidate.
            relayCandidate(session, line: "", mid: fragment.candidates.last?.mid, index: fragment.candidates.last?.mLineIndex.map(Int64.init))
        }
    }

    static func whipOptions(resource: Bool) -> HTTPResponse {
        HTTPResponse(status: 204, headers: [
            ("accept-post", "application/sdp"), ("accept-patch", "application/trickle-ice-sdpfrag"),
            ("allow", resource ? "PATCH, DELETE, OPTIONS" : "POST, OPTIONS"),
        ])
    }

    /// RFC 9725 §4.6 `Link` headers: TURN with the same REST credentials `GET /v1/ice` issues, then STUN.
    private func linkHeaders(for peer: PeerID) -> [(String, String)] {
        let now = Date(timeIntervalSince1970: Double(context.now()) / 1000)
        guard let servers = context.ice.answer(for: peer, now: now).objectValue?["ice_servers"]?.arrayValue else { return [] }
        var links: [(String, String)] = []
        for server in servers {
            guard let fields = server.objectValue else { continue }
            let urls = fields["urls"]?.arrayValue?.compactMap(\.stringValue) ?? []
            for url in urls {
                var value = "<\(url)>; rel=\"ice-server\""
                if let username = fields["username"]?.stringValue, let credential = fields["credential"]?.stringValue {
                    value += "; username=\"\(username)\"; credential=\"\(credential)\"; credential-type=\"password\""
                }
                links.append(("link", value))
            }
        }
        return links
    }

    // MARK: session lifecycle

    /// Picks the answering peer, takes over the seat's previous session, joins the hub and sends the
    /// offer; `completion` runs once with the answer or why there is none. `refused` gets a 409 when
    /// the peer id is seated by a WebSocket connection, a 503 when nobody can answer.
    private func start(_ kind: Kind, identity: PeerIdentity, offer: String, preferred: PeerID?, expiresAt: Millis,
                       completion: @escaping (Session, AnswerOutcome) -> Void, refused: (HTTPResponse) -> Void)
    {
        let hub = rooms.hubSnapshot
        let present = hub.identities(in: identity.room)
        let seat = Seat(room: identity.room, peer: identity.peer)
        if bySeat[seat] == nil, present.contains(where: { $0.peer == identity.peer }) {
            // The API's 409: the identity is in use by a different kind of participant (a WebSocket peer).
            counters["refused_identity_in_use", default: 0] += 1
            return refused(.problem(409, code: "identity_in_use",
                                    detail: "peer '\(identity.peer.rawValue.prefix(128))' is connected over WebSocket in this room"))
        }
        // A peer in its reconnect grace has no socket to take the offer.
        let candidates = present.filter {
            $0.role == config.sessionAnswerRole && $0.peer != identity.peer && hub.seat(of: $0.peer, in: identity.room)?.reconnecting != true
        }
        guard let answerer = candidates.first(where: { $0.peer == preferred }) ?? candidates.first else {
            counters["refused_no_answerer", default: 0] += 1
            return refused(.problem(503, code: "no_answering_peer",
                                    detail: "no peer with role '\(config.sessionAnswerRole)' is in the room; retry shortly",
                                    headers: [("retry-after", "2")]))
        }
        // The same seat rules as a WebSocket join: a session's own seat (a re-POST) is a takeover, not a new seat.
        if let refusal = rooms.admit(identity) {
            counters["refused_seat", default: 0] += 1
            return refused(refusal)
        }
        if let old = bySeat[seat] {
            // The answering peer learns which session went, then sees the new offer from the same peer id.
            relayData(["kind": "replaced", "session_id": .string(old.id)], from: old)
            unregister(old, reason: "replaced")
            counters["replaced", default: 0] += 1
            logger.info("session replaced", ["session.id": old.id, "room.id": identity.room.rawValue])
            finishPending(old, .sessionGone)
        }
        nextVirtual += 1
        let session = Session(id: newSessionID(), kind: kind, connection: ConnectionID(.httpSession, serial: nextVirtual),
                              identity: identity, answerer: answerer.peer, expiresAt: expiresAt, offer: offer)
        byID[session.id] = session
        byConnection[session.connection] = session
        bySeat[seat] = session
        session.startedAt = context.now()
        if context.webhooks.wants(.sessionStarted) {
            context.webhooks.emit(.sessionStarted, key: identity.room.rawValue, webhookData(session))
        }
        counters["created_\(kind.rawValue)", default: 0] += 1
        logger.info("session started", ["session.id": session.id, "room.id": identity.room.rawValue,
                                        "peer.id": identity.peer.rawValue, "answerer": answerer.peer.rawValue])
        router.attach(session.connection, to: self)
        rooms.handle(.join(session.connection, identity, ChatResume()))
        // The join itself can close the seat at once (a room whose meter has run out): no offer then,
        // or the POST would wait on a session nothing tracks any more.
        guard byID[session.id] === session else { return completion(session, .consultationEnded) }
        // A session counts as joining the call (ends the join window, starts the meter).
        rooms.callJoined(identity)
        sendOffer(session, offer) { outcome in completion(session, outcome) }
    }

    /// The first answer ends the POST: the response built by `success`, or 502 after ending the session.
    private func finishCreate(_ session: Session, _ outcome: AnswerOutcome, success: (String) -> HTTPResponse) -> HTTPResponse {
        switch outcome {
        case .answer(let sdp):
            return success(sdp)
        case .timedOut:
            end(session, hangup: true, reason: "answer_timeout")
            counters["answer_timeout", default: 0] += 1
            return .problem(502, code: "answer_timeout",
                            detail: "the answering peer did not answer within \(config.sessionAnswerTimeoutMs) ms; retry shortly",
                            headers: [("retry-after", "1")])
        case .answererGone:
            end(session, hangup: false, reason: "answerer_gone")
            return .problem(502, code: "answerer_gone", detail: "the answering peer left before answering; retry shortly",
                            headers: [("retry-after", "1")])
        case .sessionGone:
            return .problem(409, code: "session_replaced", detail: "a newer session with the same token took over")
        case .consultationEnded:
            return .problem(410, code: "consultation_ended", detail: "the consultation time of this call is used up")
        }
    }

    /// A renegotiation (`application/sdp` PATCH, WHIP ICE restart): one at a time per session (409).
    private func renegotiate(_ session: Session, offer: String, _ respond: @escaping Respond,
                             success: @escaping (String) -> HTTPResponse, afterOffer: () -> Void = {})
    {
        guard session.pending == nil else {
            return respond(.problem(409, code: "renegotiation_in_progress", detail: "wait for the pending renegotiation to finish, then retry"))
        }
        session.offer = offer
        sendOffer(session, offer) { [config, logger] outcome in
            switch outcome {
            case .answer(let sdp):
                // An app's ICE restart after a drop comes this way: the session kept the call.
                logger.info("session renegotiated", ["session.id": session.id, "room.id": session.identity.room.rawValue])
                respond(success(sdp))
            case .timedOut:
                respond(.problem(502, code: "answer_timeout",
                                 detail: "the answering peer did not answer within \(config.sessionAnswerTimeoutMs) ms",
                                 headers: [("retry-after", "1")]))
            case .answererGone:
                respond(.problem(502, code: "answerer_gone", detail: "the answering peer left", headers: [("retry-after", "1")]))
            case .sessionGone:
                respond(.problem(404, code: "session_not_found", detail: "the session ended while renegotiating"))
            case .consultationEnded:
                respond(.problem(410, code: "consultation_ended", detail: "the consultation time of this call is used up"))
            }
        }
        afterOffer()
    }

    private func sendOffer(_ session: Session, _ sdp: String, completion: @escaping (AnswerOutcome) -> Void) {
        session.pending = Pending(deadline: context.now() + Millis(config.sessionAnswerTimeoutMs), complete: completion)
        // `session_id` and `transport` tell the answering peer to gather ICE before answering:
        // an HTTP client gets no trickled candidates from its side.
        relay(.offer, from: session, payload: ["sdp": .string(sdp), "type": "offer", "session_id": .string(session.id),
                                               "transport": .string(session.kind.rawValue)])
    }

    private func relayCandidate(_ session: Session, line: String, mid: String?, index: Int64?) {
        relay(.candidate, from: session, payload: ["candidate": .string(line), "sdpMid": mid.map(JSONValue.string) ?? .null,
                                                   "sdpMLineIndex": index.map(JSONValue.int) ?? .null,
                                                   "session_id": .string(session.id)])
    }

    private func relayData(_ payload: JSONValue, from session: Session) {
        relay(.data, from: session, payload: payload)
    }

    private func relay(_ kind: RelayKind, from session: Session, payload: JSONValue) {
        rooms.handle(.message(session.connection, .relay(kind, to: session.answerer, payload: RawJSON(payload))))
    }

    private func finishPending(_ session: Session, _ outcome: AnswerOutcome) {
        guard let pending = session.pending else { return }
        session.pending = nil
        pending.complete(outcome)
    }

    private func unregister(_ session: Session, reason: String) {
        guard byID[session.id] === session else { return }
        if context.webhooks.wants(.sessionEnded) {
            var data = webhookData(session)
            let now = context.now()
            data["reason"] = .string(reason)
            data["ended_at"] = .int(now)
            data["duration_ms"] = .int(now - session.startedAt)
            context.webhooks.emit(.sessionEnded, key: session.identity.room.rawValue, data)
        }
        byID[session.id] = nil
        byConnection[session.connection] = nil
        router.detach(session.connection)
        let seat = Seat(room: session.identity.room, peer: session.identity.peer)
        if bySeat[seat] === session { bySeat[seat] = nil }
    }

    /// Ends a session: optionally tells the answering peer `data {kind:"hangup"}`, then leaves the
    /// room (`peer-left`), and settles a waiting request.
    private func end(_ session: Session, hangup: Bool, reason: String) {
        let live = byID[session.id] === session
        unregister(session, reason: reason)
        if live {
            if hangup { relayData(["kind": "hangup", "session_id": .string(session.id)], from: session) }
            rooms.handle(.disconnect(session.connection))
        }
        finishPending(session, .sessionGone)
    }

    // MARK: VirtualConnection (from the router)

    /// A frame the hub addressed to a virtual connection. Service thread.
    func receive(_ frame: Frame, on connection: ConnectionID) {
        guard let session = byConnection[connection] else { return }
        let fromAnswerer = frame.from == session.answerer.rawValue
        switch frame.type {
        case FrameType.answer.rawValue where fromAnswerer:
            guard let sdp = frame.payload?.objectValue?["sdp"]?.stringValue, !sdp.isEmpty else { return }
            // An answer naming another session answers an offer this seat had before a takeover.
            if let named = frame.payload?.objectValue?["session_id"]?.stringValue, named != session.id { return }
            finishPending(session, .answer(sdp))
        case FrameType.peerLeft.rawValue where fromAnswerer:
            logger.info("session ended: answering peer left", ["session.id": session.id])
            finishPending(session, .answererGone)
            end(session, hangup: false, reason: "answerer_left")
        case FrameType.data.rawValue where fromAnswerer && frame.payload?.objectValue?["kind"]?.stringValue == "hangup":
            logger.info("session ended by the answering peer", ["session.id": session.id])
            end(session, hangup: false, reason: "answerer_hangup")
        case FrameType.error.rawValue:
            // The answering peer was gone when the offer was relayed.
            finishPending(session, .answererGone)
        default:
            // welcome, peer-joined, chat, typing, meter, the answerer's own trickled candidates: an HTTP
            // client has no channel for them (answers must carry their candidates).
            break
        }
    }

    /// The hub closed a virtual connection: a WebSocket connection of the same peer took its seat, or
    /// the consultation meter ran out. A socket would now report its disconnect; the seat must leave
    /// the room the same way, or it stays a member forever (no-op after a takeover, which already
    /// moved the seat).
    func closed(_ connection: ConnectionID, code: CloseCode) {
        guard let session = byConnection[connection] else { return }
        unregister(session, reason: Self.endReason(code))
        rooms.handle(.disconnect(connection))
        finishPending(session, code == .consultationEnded ? .consultationEnded : .sessionGone)
    }

    /// Every `tick_ms`: answers that are late (502), tokens that expired (the session ends), idle buckets.
    func tick(now: Millis) {
        let due = byID.values.filter { ($0.pending?.deadline ?? .max) <= now }
        for session in due { finishPending(session, .timedOut) }
        let expired = byID.values.filter { $0.expiresAt <= now }
        for session in expired {
            logger.info("session ended: token expired", ["session.id": session.id])
            end(session, hangup: true, reason: "token_expired")
        }
        if now - lastPrune >= 60_000 {
            lastPrune = now
            buckets = buckets.filter { now - $0.value.lastSeen < 60_000 }
        }
    }

    // MARK: helpers

    /// `session_ended.reason` when the hub closed the session's seat.
    static func endReason(_ code: CloseCode) -> String {
        switch code {
        case .consultationEnded: return "consultation_ended"
        case .kicked: return "kicked"
        case .roomClosed: return "room_closed"
        default: return "taken_over"
        }
    }

    /// The fields `session_started` and `session_ended` share.
    private func webhookData(_ session: Session) -> [String: JSONValue] {
        ["session_id": .string(session.id), "kind": .string(session.kind == .proxy ? "webrtc-proxy" : "whip"),
         "room_id": .string(session.identity.room.rawValue),
         "call_id": session.identity.call.map { .string($0.rawValue) } ?? .null,
         "peer_id": .string(session.identity.peer.rawValue), "answerer_id": .string(session.answerer.rawValue),
         "started_at": .int(session.startedAt)]
    }

    /// A token bucket per remote address: `signaling_requests_per_minute` at once, refilled over a minute.
    func rateLimit(_ request: HTTPRequest) -> HTTPResponse? {
        let now = context.now()
        let key = request.remoteAddress.isEmpty ? "unknown" : request.remoteAddress
        let perMinute = Double(config.signalingRequestsPerMinute)
        var entry = buckets[key] ?? (RateLimiter(perSecond: perMinute / 60, burst: perMinute), now)
        let admitted = entry.limiter.admit(now: now)
        entry.lastSeen = now
        buckets[key] = entry
        guard !admitted else { return nil }
        counters["rate_limited", default: 0] += 1
        let retry = max(1, Int((60 / perMinute).rounded(.up)))
        return .problem(429, code: "rate_limited",
                        detail: "more than \(config.signalingRequestsPerMinute) signaling requests per minute from this address",
                        headers: [("retry-after", String(retry))])
    }

    static func mediaType(_ request: HTTPRequest) -> String? {
        guard let raw = request.headers["content-type"] else { return nil }
        return raw.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    static func millis(_ date: Date) -> Millis { Millis(date.timeIntervalSince1970 * 1000) }

    static let wrongCall = Problem.tokenWrongCall
    static let notYours = HTTPResponse.problem(403, code: "session_not_yours", detail: "the session belongs to another peer or call")

    static func sessionNotFound(_ id: String) -> HTTPResponse {
        .problem(404, code: "session_not_found", detail: "no live session '\(id.prefix(200))'; POST a new offer")
    }

    static func unsupportedType(_ accepted: [String]) -> HTTPResponse {
        .problem(415, code: "unsupported_media_type", detail: "send Content-Type: \(accepted.joined(separator: " or "))",
                 headers: [("accept-patch", accepted.joined(separator: ", "))])
    }

}
