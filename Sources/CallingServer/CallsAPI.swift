import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The server-to-server REST surface (`/v1/calls…`, `/v1/tokens`): the handlers only; their rows
/// (API key of scope `calls`) are in the route table (Routes/Routes.swift). What happens to calls as rooms fill and empty is `CallBook`'s.
///
/// Runs on the service thread, like `HTTPRoutes`; every store access goes through
/// `ChatStore.perform` and comes back through `context.post`, so the loop never waits on disk.
// @unchecked Sendable: all mutable state is touched only on the service thread. Store completions
// run on the store queue and capture `self` solely to hop back through `context.post`.
final class CallsAPI: @unchecked Sendable {
    /// Longest room, call, agent id accepted by the API.
    static let maxIdentifierBytes = IdentifierRule.maxBytes

    let context: ServiceContext
    let store: any CallPersistence
    let config: ServerConfig
    let logger: Logger
    /// STUN/TURN for `ice_servers`: the one `GET /v1/ice` serves, installed by `ServerApp`.
    private var ice: ICEService { context.ice }

    /// The calls' bookkeeping; stats still buffered there are written before a stats read.
    let book: CallBook

    init(context: ServiceContext, book: CallBook, logger: Logger) {
        self.context = context
        self.book = book
        self.store = context.calls
        self.config = context.config
        self.logger = logger
    }

    private var joinWindowMs: Millis { Millis(config.callJoinWindowSeconds) * 1_000 }

    // MARK: POST /v1/calls

    func createCall(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        let request = route.http
        let body: RequestBody
        switch RequestBody.parse(request.body) {
        case .failure(let response): return respond(response)
        case .success(let parsed): body = parsed
        }
        let suffix = SecureRandom.token(bytes: 16)
        let call = CallID("call_" + suffix)
        let room = body.identifier("room_id", maxBytes: Self.maxIdentifierBytes).map { RoomID($0) } ?? RoomID("room_" + suffix)
        let peer = body.identifier("peer_id", maxBytes: config.maxPeerIDBytes).map { PeerID($0) }
            ?? PeerID("caller_" + SecureRandom.token(bytes: 9))
        let agent = body.identifier("agent_id", maxBytes: Self.maxIdentifierBytes)
        let name = body.string("name", maxBytes: 256)
        let metadata = body.object("metadata")
        let variables = body.stringMap("dynamic_variables")
        let maxPeers = body.integer("max_peers", in: Self.maxPeersRange)
        var meterLimit: Int64?
        var meterWarning: Int64?
        if let meter = body.nested("meter") {
            meterLimit = meter.integer("limit_s", in: 1...86_400, required: true)
            meterWarning = meter.integer("warning_s", in: 0...86_400)
            if let limit = meterLimit, let warning = meterWarning, warning >= limit {
                meter.problem("warning_s", "must be less than meter.limit_s")
            }
        }
        if let problems = body.problems { return respond(problems) }

        let now = context.now()
        let claims = PeerTokenClaims(
            sub: peer, roomID: room, callID: call, role: "caller", name: name, scope: ["room"], audience: config.jwtAudience,
            issuedAt: Self.date(now), expiresAt: Self.date(now + Millis(config.callTokenTTLSeconds) * 1_000),
            tokenID: Self.newTokenID(), maxPeers: maxPeers.map(Int.init))
        let token: String
        do {
            token = try context.issuer.issue(claims)
        } catch {
            logger.error("call token not issued", ["error": "\(error)"])
            return respond(.problem(500, code: "internal_error", detail: "the access token could not be issued"))
        }
        let expiresAt = Int64(claims.expiresAt.timeIntervalSince1970)
        let record = CallRecord(
            call: call, room: room, agentID: agent, metadata: metadata.map(JSONWriter.string),
            dynamicVariables: variables.map(JSONWriter.string), meterLimitS: meterLimit, meterWarningS: meterWarning,
            createdMs: now, expiresMs: expiresAt * 1_000, maxPeers: maxPeers, node: context.nodeID)
        let ice = ice.answer(for: peer, now: Self.date(now))["ice_servers"] ?? .array([])
        // A new call in the room starts any consultation meter afresh (`createCall` forgets it).
        store.createCall(record) { [context, logger] result in
            context.post {
                switch result {
                case .success:
                    logger.info("call created", ["call.id": call.rawValue, "room.id": room.rawValue])
                    var fields = record.json(joinWindowMs: Millis(context.config.callJoinWindowSeconds) * 1_000)
                    fields["peer_id"] = .string(peer.rawValue)
                    fields["access_token"] = .string(token)
                    fields["ice_servers"] = ice
                    fields["transport"] = "websocket"
                    respond(.json(201, .object(fields), headers: [("cache-control", "no-store"),
                                                                  ("location", "/v1/calls/\(call.rawValue)")]))
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("call not stored", ["error": "\(error)"])
                    respond(Problem.storeUnavailable())
                }
            }
        }
    }

    // MARK: GET /v1/calls/{id}

    func getCall(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        let call = CallID(route.parameter("call_id"))
        let joinWindowMs = joinWindowMs
        store.call(call) { [context] result in
            context.post {
                switch result {
                case .success(let record?): respond(.json(200, .object(record.json(joinWindowMs: joinWindowMs))))
                case .success(nil): respond(Self.callNotFound(call))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Problem.storeUnavailable())
                }
            }
        }
    }

    static func callNotFound(_ call: CallID) -> HTTPResponse {
        .problem(404, code: "call_not_found", detail: "no call '\(call.rawValue.prefix(200))'")
    }

    // MARK: GET /v1/calls/{id}/stats

    /// Samples per peer plus aggregates. Samples still buffered are written first, so a sample the
    /// server received before this request is in the answer.
    func getStats(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        let call = CallID(route.parameter("call_id"))
        book.flushStats()
        store.callStats(call) { [context] result in
            context.post {
                switch result {
                case .success(let page) where page.call == nil && page.report.overall.samples == 0:
                    respond(Self.callNotFound(call))
                case .success(let page):
                    let report = page.report
                    respond(.json(200, report.json))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Problem.storeUnavailable())
                }
            }
        }
    }

    // MARK: POST /v1/tokens

    func createToken(_ route: RouteRequest, _ respond: @escaping RouteResponder) {
        let request = route.http
        let body: RequestBody
        switch RequestBody.parse(request.body) {
        case .failure(let response): return respond(response)
        case .success(let parsed): body = parsed
        }
        // `scope: "user"`: a user token (the inbox, GET /v1/me/rooms), bound to no room.
        let scope = body.string("scope", maxBytes: 16) ?? "room"
        if scope != "room" && scope != "user" { body.problem("scope", "must be \"room\" or \"user\"") }
        let userToken = scope == "user"
        if userToken, body.raw("room_id") != nil { body.problem("room_id", "a user token is bound to no room") }
        if userToken, body.raw("call_id") != nil { body.problem("call_id", "a user token is bound to no call") }
        let call = body.identifier("call_id", maxBytes: Self.maxIdentifierBytes).map { CallID($0) }
        let room = body.identifier("room_id", maxBytes: Self.maxIdentifierBytes, required: call == nil && !userToken).map { RoomID($0) }
        let peer = body.identifier("peer_id", maxBytes: config.maxPeerIDBytes, required: true).map { PeerID($0) }
        let role = body.identifier("role", maxBytes: 64) ?? "peer"
        let name = body.string("name", maxBytes: 256)
        let ttl = body.integer("ttl_s", in: 1...31_536_000) ?? Int64(config.tokenTTLSeconds)
        let maxPeers = body.integer("max_peers", in: Self.maxPeersRange)
        let moderator: Bool
        switch body.raw("moderator") {
        case .bool(let flag)?: moderator = flag
        case nil, .null?: moderator = false
        default:
            moderator = false
            body.problem("moderator", "must be a boolean")
        }
        if let problems = body.problems { return respond(problems) }
        guard let peer else { return respond(.problem(500, code: "internal_error", detail: "peer_id was not read")) }
        if userToken {
            let now = context.now()
            let claims = PeerTokenClaims(
                sub: peer, role: role, name: name, scope: ["user"], audience: config.jwtAudience, issuedAt: Self.date(now),
                expiresAt: Self.date(now + ttl * 1_000), tokenID: Self.newTokenID())
            do {
                let token = try context.issuer.issue(claims)
                return respond(.json(201, ["token": .string(token), "expires_at": .int(Int64(claims.expiresAt.timeIntervalSince1970)),
                                           "peer_id": .string(peer.rawValue), "scope": .string("user")],
                                     headers: [("cache-control", "no-store")]))
            } catch {
                return respond(.problem(500, code: "internal_error", detail: "the token could not be issued"))
            }
        }

        // With a call_id, the call must exist, be live, and be in the named room (which defaults to it).
        // A token for a call carries the call's max_peers unless the request sets its own.
        let issue: @Sendable (RoomID, Int64?) -> HTTPResponse = { [context, config] room, callMaxPeers in
            let now = context.now()
            let claims = PeerTokenClaims(
                sub: peer, roomID: room, callID: call, role: role, name: name, scope: ["room"], audience: config.jwtAudience,
                issuedAt: Self.date(now), expiresAt: Self.date(now + ttl * 1_000), tokenID: Self.newTokenID(),
                maxPeers: (maxPeers ?? callMaxPeers).map(Int.init), moderator: moderator)
            do {
                let token = try context.issuer.issue(claims)
                return .json(201, ["token": .string(token), "expires_at": .int(Int64(claims.expiresAt.timeIntervalSince1970)),
                                   "room_id": .string(room.rawValue), "peer_id": .string(peer.rawValue),
                                   "call_id": call.map { .string($0.rawValue) } ?? .null, "role": .string(role)],
                             headers: [("cache-control", "no-store")])
            } catch {
                return .problem(500, code: "internal_error", detail: "the token could not be issued")
            }
        }
        guard let call else {
            guard let room else { return respond(.problem(500, code: "internal_error", detail: "room_id was not read")) }
            return respond(issue(room, nil))
        }
        store.call(call) { [context] result in
            context.post {
                switch result {
                case .success(let record?):
                    if let room, room != record.room {
                        return respond(RequestBody.invalid([("room_id", "call \(call.rawValue) is in room \(record.room.rawValue)")]))
                    }
                    if record.state == .ended {
                        return respond(.problem(409, code: "call_ended", detail: "call \(call.rawValue) has ended"))
                    }
                    respond(issue(room ?? record.room, record.maxPeers))
                case .success(nil):
                    respond(RequestBody.invalid([("call_id", "no such call")]))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Problem.storeUnavailable())
                }
            }
        }
    }

    static func date(_ ms: Millis) -> Date { Date(timeIntervalSince1970: Double(ms) / 1_000) }

    /// `max_peers` accepted in request bodies (0 = unlimited).
    static let maxPeersRange: ClosedRange<Int64> = 0...10_000

    /// A `jti` for a token this server issues, so the admin API can refuse exactly that token after a kick.
    static func newTokenID() -> String { SecureRandom.token(bytes: 12) }
}

extension CallRecord {
    /// The call as `GET /v1/calls/{id}` shows it. `*_ms` are unix milliseconds; `expires_at` is the
    /// access token's expiry in unix milliseconds (as in the `POST` answer), `expires_at_seconds`
    /// the same instant in unix seconds (the JWT `exp`).
    func json(joinWindowMs: Millis) -> [String: JSONValue] {
        func object(_ text: String?) -> JSONValue { text.flatMap { try? JSONParser.parse($0) } ?? .null }
        func int(_ value: Int64?) -> JSONValue { value.map(JSONValue.int) ?? .null }
        var meter: JSONValue = .null
        if let meterLimitS {
            meter = ["limit_s": .int(meterLimitS), "warning_s": int(meterWarningS)]
        }
        return [
            "call_id": .string(call.rawValue), "room_id": .string(room.rawValue), "agent_id": agentID.map(JSONValue.string) ?? .null,
            "metadata": object(metadata), "dynamic_variables": object(dynamicVariables), "meter": meter,
            "state": .string(state.rawValue), "end_reason": endReason.map(JSONValue.string) ?? .null,
            "created_ms": .int(createdMs), "join_deadline_ms": .int(createdMs + joinWindowMs), "joined_ms": int(joinedMs),
            "ended_ms": int(endedMs), "expires_at": .int(expiresMs), "expires_at_seconds": .int(expiresMs / 1_000),
            "max_peers": int(maxPeers),
        ]
    }
}

extension CallStatsReport {
    /// `GET /v1/calls/{id}/stats`: absent sample fields and aggregates over no values are `null`.
    var json: JSONValue {
        func number(_ value: Double?) -> JSONValue { value.map(JSONValue.double) ?? .null }
        func aggregate(_ value: StatsAggregate) -> JSONValue {
            ["samples": .int(Int64(value.samples)), "avg_rtt_ms": number(value.avgRTTMs), "max_rtt_ms": number(value.maxRTTMs),
             "avg_jitter_ms": number(value.avgJitterMs), "max_packet_loss": number(value.maxPacketLoss),
             "avg_bitrate_kbps": number(value.avgBitrateKbps)]
        }
        let peers: [JSONValue] = peers.map { peer in
            ["peer_id": .string(peer.peer.rawValue), "aggregate": aggregate(peer.aggregate),
             "samples": .array(peer.samples.map { record in
                 ["ts_ms": .int(record.timestampMs), "rtt_ms": number(record.sample.rttMs), "jitter_ms": number(record.sample.jitterMs),
                  "packet_loss": number(record.sample.packetLoss), "bitrate_kbps": number(record.sample.bitrateKbps)]
             })]
        }
        return ["call_id": .string(call.rawValue), "peers": .array(peers), "aggregate": aggregate(overall)]
    }
}
