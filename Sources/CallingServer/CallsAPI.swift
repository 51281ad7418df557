import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The server-to-server REST surface (`/v1/calls…`, `/v1/tokens`, API-key authenticated) and the
/// call lifecycle around the room protocol: a join marks the room's call ongoing, the tick ends calls
/// nobody joined in time.
///
/// Runs on the service thread, like `HTTPRoutes`; every store access goes through
/// `ChatStore.perform` and comes back through `context.post`, so the loop never waits on disk.
// @unchecked Sendable: all mutable state is touched only on the service thread. Store completions
// run on the store queue and capture `self` solely to hop back through `context.post`.
final class CallsAPI: @unchecked Sendable {
    /// The end reason of a call nobody joined within `call_join_window_seconds` (docs/protocol.md,
    /// "Call and session rules").
    static let notJoinedReason = "error_user_not_joined"
    /// The end reason of a call whose consultation meter ran out.
    static let consultationEndedReason = "consultation_ended"
    /// The end reason of an ongoing call whose room lost its last peer (docs/protocol.md, "Calls API").
    static let lastPeerLeftReason = "last_peer_left"
    /// Longest room, call, agent id accepted by the API.
    static let maxIdentifierBytes = IdentifierRule.maxBytes

    let context: ServiceContext
    let store: ChatStore
    let config: ServerConfig
    let logger: Logger
    /// STUN/TURN for `ice_servers`: the one `GET /v1/ice` serves, installed by `ServerApp`.
    private var ice: ICEService { context.ice }

    private var lastSweep: Millis = 0
    /// Rooms whose meter is being read from the store.
    private var meterLoads: Set<RoomID> = []
    private var sweepInFlight = false
    /// `stats` frames not yet written; flushed every tick in one transaction.
    private var pendingStats: [StatsDraft] = []
    /// A burst beyond this is written at once instead of waiting for the tick.
    private static let statsBatchLimit = 512

    init(context: ServiceContext, logger: Logger) {
        self.context = context
        self.store = context.store
        self.config = context.config
        self.logger = logger
    }

    private var joinWindowMs: Millis { Millis(config.callJoinWindowSeconds) * 1_000 }

    // MARK: routing

    /// `/v1/calls`, `/v1/calls/{id}`, `/v1/calls/{id}/stats`, `/v1/tokens`. Service thread.
    func handle(_ request: HTTPRequest, segments: [Substring], respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let route: (allowed: [HTTPMethod], run: @Sendable (APIKeyRecord) -> Void)
        switch (segments.count, segments.dropFirst().first) {
        case (2, "calls"):
            route = ([.post], { [self] _ in createCall(request, respond) })
        case (3, "calls"):
            route = ([.get], { [self] _ in getCall(CallID(String(segments[2])), respond) })
        case (4, "calls") where segments[3] == "stats":
            route = ([.get], { [self] _ in getStats(CallID(String(segments[2])), respond) })
        case (2, "tokens"):
            route = ([.post], { [self] _ in createToken(request, respond) })
        default:
            return respond(.problem(404, code: "not_found", detail: "no route for \(request.method.rawValue) \(request.path.prefix(200))"))
        }
        guard route.allowed.contains(request.method) else {
            let names = route.allowed.map(\.rawValue).joined(separator: ", ")
            return respond(.problem(405, code: "method_not_allowed", detail: "use \(names)", headers: [("allow", names)]))
        }
        authenticateAPIKey(request, scope: APIKeyRecord.callsScope) { result in
            switch result {
            case .failure(let response): respond(response)
            case .success(let key): route.run(key)
            }
        }
    }

    // MARK: API keys

    /// The key from `X-API-Key` or `Authorization: Bearer csk_…`, checked against the store and for
    /// `scope`; `then` runs on the service thread with the key's record or the 401/403/503 to send.
    func authenticateAPIKey(_ request: HTTPRequest, scope: String,
                            then: @escaping @Sendable (Result<APIKeyRecord, HTTPResponse>) -> Void) {
        let presented = request.headers["x-api-key"].map { $0.trimmingCharacters(in: .whitespaces) } ?? request.bearerToken
        guard let key = presented, !key.isEmpty else {
            return then(.failure(.problem(401, code: "api_key_missing",
                                          detail: "this route needs an API key in X-API-Key or Authorization: Bearer csk_…",
                                          headers: [("www-authenticate", "Bearer")])))
        }
        let invalid = HTTPResponse.problem(401, code: "api_key_invalid", detail: "the API key is unknown or revoked",
                                           headers: [("www-authenticate", "Bearer error=\"invalid_token\"")])
        // A peer JWT or anything else that cannot be a key is refused without touching the store.
        guard key.hasPrefix(APIKey.prefix) else { return then(.failure(invalid)) }
        store.perform({ db in try APIKeyRepository(db: db).active(hash: APIKey.hash(key)) }) { [context, logger] result in
            context.post {
                switch result {
                case .success(let record?) where record.allows(scope): then(.success(record))
                case .success(let record?):
                    then(.failure(.problem(403, code: "api_key_wrong_scope",
                                           detail: "this route needs a key with scope '\(scope)'; this key has '\(record.scopes.joined(separator: " "))'")))
                case .success(nil): then(.failure(invalid))
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("API key lookup failed", ["error": "\(error)"])
                    then(.failure(Self.storeUnavailable))
                }
            }
        }
    }

    private static let storeUnavailable = HTTPResponse.problem(503, code: "store_unavailable", detail: "the store is temporarily unavailable",
                                                               headers: [("retry-after", "1")])

    // MARK: POST /v1/calls

    private func createCall(_ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
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
            createdMs: now, expiresMs: expiresAt * 1_000, maxPeers: maxPeers)
        let ice = ice.answer(for: peer, now: Self.date(now))["ice_servers"] ?? .array([])
        store.perform({ db in
            try db.transaction(.immediate) {
                try CallRepository(db: db).insert(record)
                // A new call in the room starts any consultation meter afresh.
                try MeterRepository(db: db).delete(room: room)
            }
        }) { [context, logger] result in
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
                    respond(Self.storeUnavailable)
                }
            }
        }
    }

    // MARK: GET /v1/calls/{id}

    private func getCall(_ call: CallID, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let joinWindowMs = joinWindowMs
        store.perform({ db in try CallRepository(db: db).find(call) }) { [context] result in
            context.post {
                switch result {
                case .success(let record?): respond(.json(200, .object(record.json(joinWindowMs: joinWindowMs))))
                case .success(nil): respond(Self.callNotFound(call))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Self.storeUnavailable)
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
    private func getStats(_ call: CallID, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        flushStats()
        store.perform({ db -> (CallRecord?, CallStatsReport) in
            (try CallRepository(db: db).find(call), try CallStatsRepository(db: db).report(call: call))
        }) { [context] result in
            context.post {
                switch result {
                case .success((nil, let report)) where report.overall.samples == 0:
                    respond(Self.callNotFound(call))
                case .success((_, let report)):
                    respond(.json(200, report.json))
                case .failure:
                    context.metrics.storeFailures += 1
                    respond(Self.storeUnavailable)
                }
            }
        }
    }

    // MARK: POST /v1/tokens

    private func createToken(_ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let body: RequestBody
        switch RequestBody.parse(request.body) {
        case .failure(let response): return respond(response)
        case .success(let parsed): body = parsed
        }
        let call = body.identifier("call_id", maxBytes: Self.maxIdentifierBytes).map { CallID($0) }
        let room = body.identifier("room_id", maxBytes: Self.maxIdentifierBytes, required: call == nil).map { RoomID($0) }
        let peer = body.identifier("peer_id", maxBytes: config.maxPeerIDBytes, required: true).map { PeerID($0) }
        let role = body.identifier("role", maxBytes: 64) ?? "peer"
        let name = body.string("name", maxBytes: 256)
        let ttl = body.integer("ttl_s", in: 1...31_536_000) ?? Int64(config.tokenTTLSeconds)
        let maxPeers = body.integer("max_peers", in: Self.maxPeersRange)
        if let problems = body.problems { return respond(problems) }
        guard let peer else { return respond(.problem(500, code: "internal_error", detail: "peer_id was not read")) }

        // With a call_id, the call must exist, be live, and be in the named room (which defaults to it).
        // A token for a call carries the call's max_peers unless the request sets its own.
        let issue: @Sendable (RoomID, Int64?) -> HTTPResponse = { [context, config] room, callMaxPeers in
            let now = context.now()
            let claims = PeerTokenClaims(
                sub: peer, roomID: room, callID: call, role: role, name: name, scope: ["room"], audience: config.jwtAudience,
                issuedAt: Self.date(now), expiresAt: Self.date(now + ttl * 1_000), tokenID: Self.newTokenID(),
                maxPeers: (maxPeers ?? callMaxPeers).map(Int.init))
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
        store.perform({ db in try CallRepository(db: db).find(call) }) { [context] result in
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
                    respond(Self.storeUnavailable)
                }
            }
        }
    }

    // MARK: lifecycle hooks

    /// A peer finished joining `identity.room`: the room's registered calls become ongoing. When the
    /// room has no consultation meter yet (`needsMeter`), its saved or configured one is read and
    /// handed to `attachMeter` on the service thread. Service thread.
    func peerJoined(_ identity: PeerIdentity, now: Millis, needsMeter: Bool,
                    attachMeter: @escaping @Sendable (RoomID, Meter) -> Void) {
        let room = identity.room
        let windowStart = now - joinWindowMs
        store.perform({ db in try CallRepository(db: db).markJoined(room: room, nowMs: now, createdAfterMs: windowStart) }) {
            [logger] result in
            switch result {
            case .success(let calls):
                for call in calls { logger.info("call ongoing", ["call.id": call.rawValue, "room.id": room.rawValue]) }
            case .failure(let error):
                logger.error("call join not recorded", ["room.id": room.rawValue, "error": "\(error)"])
            }
        }
        if needsMeter { loadMeter(room: room, attach: attachMeter) }
    }

    /// The last seat of `room` ended (not by a server stop, whose peers come back to the restarted
    /// server): its ongoing calls end, so `GET /v1/calls/{id}` says `ended` and a session POST with
    /// the call's token answers 404 `call_not_found` instead of waiting for an agent. Service thread.
    func roomEmptied(_ room: RoomID, now: Millis) {
        store.perform({ db in
            try CallRepository(db: db).endOngoing(room: room, nowMs: now, reason: Self.lastPeerLeftReason)
        }) { [context, logger] result in
            switch result {
            case .success(let ended):
                for call in ended {
                    logger.info("call ended", ["call.id": call.rawValue, "room.id": room.rawValue, "reason": Self.lastPeerLeftReason])
                }
            case .failure(let error):
                logger.error("call end not recorded", ["room.id": room.rawValue, "error": "\(error)"])
                context.post { context.metrics.storeFailures += 1 }
            }
        }
    }

    // MARK: meters

    /// After a join: gives the room its consultation meter if it has none yet, from the `meters` row
    /// (a meter that ran before a restart) or else from the live call's `meter`. Service thread.
    private func loadMeter(room: RoomID, attach: @escaping @Sendable (RoomID, Meter) -> Void) {
        guard meterLoads.insert(room).inserted else { return }
        let intervalMs = Millis(config.meterIntervalSeconds) * 1_000
        let defaultWarningMs = Millis(config.meterWarningSeconds) * 1_000
        store.perform({ db -> Meter? in
            if let saved = try MeterRepository(db: db).find(room: room) {
                return Meter(limitMs: saved.limitS * 1_000, warningMs: saved.warningS * 1_000, intervalMs: intervalMs,
                             elapsedMs: saved.elapsedMs, startedAt: saved.startedMs, state: Meter.State(saved.state))
            }
            guard let call = try CallRepository(db: db).live(room: room), let limit = call.meterLimitS else { return nil }
            return Meter(limitMs: limit * 1_000, warningMs: call.meterWarningS.map { $0 * 1_000 } ?? defaultWarningMs,
                         intervalMs: intervalMs)
        }) { [self] result in
            context.post { [self] in
                meterLoads.remove(room)
                switch result {
                case .success(let meter?): attach(room, meter)
                case .success(nil): break
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("meter not loaded", ["room.id": room.rawValue, "error": "\(error)"])
                }
            }
        }
    }

    /// Persists a meter the hub started, paused, announced or ended; an ended one also ends the
    /// room's live calls (`consultation_ended`). Service thread.
    func storeMeter(_ room: RoomID, _ snapshot: MeterSnapshot) {
        let record = MeterRecord(room: room, startedMs: snapshot.startedAt, elapsedMs: snapshot.elapsedMs,
                                 limitS: snapshot.limitSeconds, warningS: snapshot.warningMs / 1_000,
                                 state: MeterRecord.State(snapshot.state))
        let now = context.now()
        store.perform({ db in
            try db.transaction(.immediate) {
                try MeterRepository(db: db).save(record)
                if record.state == .ended {
                    try CallRepository(db: db).endLive(room: room, nowMs: now, reason: Self.consultationEndedReason)
                }
            }
        }) { [context, logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("meter not stored", ["room.id": room.rawValue, "error": "\(error)"])
            context.post { context.metrics.storeFailures += 1 }
        }
    }

    /// A client `stats` frame (already range-checked by the decoder) for the analytics table; written
    /// with the next tick's batch. A sample from a peer whose token names no call goes to its room's
    /// live call, or nowhere when the room has none. Service thread.
    func storeStats(_ draft: StatsDraft) {
        pendingStats.append(draft)
        if pendingStats.count >= Self.statsBatchLimit { flushStats() }
    }

    private func flushStats() {
        guard !pendingStats.isEmpty else { return }
        let batch = pendingStats
        pendingStats = []
        store.perform({ db in try CallStatsRepository(db: db).insert(batch) }) { [context, logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("stats not stored", ["samples": "\(batch.count)", "error": "\(error)"])
            context.post { context.metrics.storeFailures += 1 }
        }
    }

    /// Every `tick_ms`: writes buffered stats; once a second, ends the calls nobody joined within the
    /// window. Service thread.
    func tick(now: Millis) {
        flushStats()
        guard now - lastSweep >= 1_000, !sweepInFlight else { return }
        lastSweep = now
        sweepInFlight = true
        let cutoff = now - joinWindowMs
        store.perform({ db in
            try CallRepository(db: db).expireUnjoined(createdAtOrBeforeMs: cutoff, nowMs: now, reason: Self.notJoinedReason)
        }) { [self] result in
            context.post { [self] in
                sweepInFlight = false
                switch result {
                case .success(let ended):
                    for call in ended {
                        logger.info("call ended", ["call.id": call.call.rawValue, "room.id": call.room.rawValue,
                                                   "reason": Self.notJoinedReason])
                    }
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("call expiry sweep failed", ["error": "\(error)"])
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

extension Meter.State {
    init(_ state: MeterRecord.State) {
        switch state {
        case .running: self = .running
        case .warning: self = .warning
        case .ended: self = .ended
        }
    }
}

extension MeterRecord.State {
    init(_ state: Meter.State) {
        switch state {
        case .running: self = .running
        case .warning: self = .warning
        case .ended: self = .ended
        }
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

/// A JSON request body read field by field, collecting every problem as `invalid_params`
/// (RFC 9457 §3.1's example extension: `[{name, reason}]`), so a client learns all of them at once.
/// JSON `null` counts as absent.
final class RequestBody {
    private let fields: [String: JSONValue]
    private let prefix: String
    private let sink: ProblemSink

    final class ProblemSink {
        var entries: [(String, String)] = []
    }

    private init(fields: [String: JSONValue], prefix: String, sink: ProblemSink) {
        self.fields = fields
        self.prefix = prefix
        self.sink = sink
    }

    /// An empty body reads as `{}`; anything else must be a JSON object.
    static func parse(_ bytes: [UInt8]) -> Result<RequestBody, HTTPResponse> {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return .success(RequestBody(fields: [:], prefix: "", sink: ProblemSink()))
        }
        do {
            guard let object = try JSONParser.parse(bytes).objectValue else {
                return .failure(invalid([("body", "must be a JSON object")]))
            }
            return .success(RequestBody(fields: object, prefix: "", sink: ProblemSink()))
        } catch {
            return .failure(invalid([("body", "not valid JSON: \(error.message)")]))
        }
    }

    static func invalid(_ entries: [(String, String)]) -> HTTPResponse {
        .problem(400, code: "invalid_params",
                 detail: "invalid request: " + entries.map { "\($0.0) \($0.1)" }.joined(separator: "; "),
                 extra: ["invalid_params": .array(entries.map { ["name": .string($0.0), "reason": .string($0.1)] })])
    }

    /// The 400 to send, or nil when every field read so far was fine.
    var problems: HTTPResponse? { sink.entries.isEmpty ? nil : Self.invalid(sink.entries) }

    func problem(_ key: String, _ reason: String) {
        sink.entries.append((prefix + key, reason))
    }

    private func value(_ key: String, required: Bool) -> JSONValue? {
        guard let value = fields[key].flatMap(JSONValue.nonNull) else {
            if required { problem(key, "is required") }
            return nil
        }
        return value
    }

    /// The field as sent, `null` read as absent; for types the typed readers do not cover (booleans).
    func raw(_ key: String) -> JSONValue? { value(key, required: false) }

    /// A string of at most `maxBytes` UTF-8 bytes without control characters.
    func string(_ key: String, maxBytes: Int, required: Bool = false) -> String? {
        guard let raw = value(key, required: required) else { return nil }
        guard let text = raw.stringValue else {
            problem(key, "must be a string")
            return nil
        }
        guard text.utf8.count <= maxBytes else {
            problem(key, "must be at most \(maxBytes) bytes")
            return nil
        }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            problem(key, "must not contain control characters")
            return nil
        }
        return text
    }

    /// A non-empty string that also contains no spaces (ids end up in JWT claims and URLs).
    func identifier(_ key: String, maxBytes: Int, required: Bool = false) -> String? {
        guard let text = string(key, maxBytes: maxBytes, required: required) else { return nil }
        // The rule every id follows (CallingValues.IdentifierRule); `string` already checked length.
        if let violation = IdentifierRule.violation(of: text, maxBytes: maxBytes) {
            problem(key, violation)
            return nil
        }
        return text
    }

    func integer(_ key: String, in range: ClosedRange<Int64>, required: Bool = false) -> Int64? {
        guard let raw = value(key, required: required) else { return nil }
        guard let number = raw.int64Value else {
            problem(key, "must be an integer")
            return nil
        }
        guard range.contains(number) else {
            problem(key, "must be between \(range.lowerBound) and \(range.upperBound)")
            return nil
        }
        return number
    }

    func object(_ key: String) -> JSONValue? {
        guard let raw = value(key, required: false) else { return nil }
        guard raw.objectValue != nil else {
            problem(key, "must be an object")
            return nil
        }
        return raw
    }

    /// An object whose values are all strings (`dynamic_variables`).
    func stringMap(_ key: String) -> JSONValue? {
        guard let raw = object(key), let entries = raw.objectValue else { return nil }
        var ok = true
        for (name, value) in entries.sorted(by: { $0.key < $1.key }) where value.stringValue == nil {
            problem("\(key).\(name)", "must be a string")
            ok = false
        }
        return ok ? raw : nil
    }

    /// A nested object whose problems are reported as `key.field`.
    func nested(_ key: String) -> RequestBody? {
        guard let raw = object(key), let entries = raw.objectValue else { return nil }
        return RequestBody(fields: entries, prefix: prefix + key + ".", sink: sink)
    }
}
