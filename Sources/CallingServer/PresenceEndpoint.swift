import CallingAuth
import CallingCore
import CallingTransport
import Foundation

/// What a presence connection proved at upgrade time, handed from `shouldUpgrade` to `didOpen`.
struct PresenceTicket: Sendable {
    var identity: PresenceIdentity
    var expiresAt: Date
}

/// The presence channel at `/v1/presence`: authenticates the upgrade (scope `presence`, a known
/// role), decodes frames, runs `PresenceHub` and carries out its effects, minting the room tokens
/// of accepted calls. Every method runs on the service thread (the `WebSocketEndpoint` contract),
/// so the state below needs no lock.
final class PresenceEndpoint: WebSocketEndpoint {
    struct Session {
        /// Set once the expiry close is under way, so it is counted and sent once.
        var expired = false
        var expiresAt: Date
        var limiter: RateLimiter
    }

    private let context: ServiceContext
    private let router: any Router
    private let gate: FrameGate
    private var hub: PresenceHub
    private var sessions: [ConnectionID: Session] = [:]
    private let limits = PresenceLimits()
    private var lastExpiryCheck: Millis = 0

    init(context: ServiceContext, router: any Router, gate: FrameGate) {
        self.context = context
        self.router = router
        self.gate = gate
        let config = context.config
        hub = PresenceHub(settings: PresenceSettings(graceMs: Int64(config.presenceGraceSeconds) * 1_000,
                                                     requestTTLMs: Int64(config.presenceRequestTTLSeconds) * 1_000,
                                                     forgetMs: Int64(config.presenceForgetSeconds) * 1_000),
                          ids: RandomPresenceIDs())
    }

    // MARK: WebSocketEndpoint

    func shouldUpgrade(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision {
        let decision = decide(request, claims: claims)
        if case .accept = decision {
            context.metrics.upgrades["accepted", default: 0] += 1
        } else {
            context.metrics.upgrades["refused", default: 0] += 1
        }
        return decision
    }

    private func decide(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision {
        guard claims.scope.contains("presence") else {
            return .reject(.problem(403, code: "token_wrong_scope", detail: "the token's scope does not include 'presence'"))
        }
        guard let roleName = claims.role, let role = PresenceRole(rawValue: roleName) else {
            return .reject(.problem(403, code: "token_wrong_role",
                                    detail: "the token's role must be agent, dashboard or caller for /v1/presence"))
        }
        var queues: [QueueName]?
        if role == .agent, let raw = request.query["queues"] {
            do throws(PresenceQueueError) {
                queues = try PresenceQueues.parse(raw, limits: limits)
            } catch {
                return .reject(.problem(400, code: "bad_queues", detail: error.message))
            }
        }
        let identity = PresenceIdentity(peer: claims.sub, role: role, name: claims.name, queues: queues)
        return .accept(context: PresenceTicket(identity: identity, expiresAt: claims.expiresAt))
    }

    func didOpen(_ connection: ConnectionID, context ticketContext: any Sendable) {
        guard let ticket = ticketContext as? PresenceTicket else {
            router.close(connection, code: .internalError)
            return
        }
        let config = context.config
        sessions[connection] = Session(expiresAt: ticket.expiresAt,
                                       limiter: RateLimiter(perSecond: config.maxFramesPerSecond, burst: config.frameBurst))
        apply(hub.handle(.connect(connection, ticket.identity), now: context.now()))
    }

    func didReceive(_ message: InboundMessage, on connection: ConnectionID) {
        guard var session = sessions[connection] else { return }
        let text = gate.admit(message, on: connection, limiter: &session.limiter)
        sessions[connection] = session
        guard let text else { return }
        let decoded: PresenceMessage
        do {
            decoded = try PresenceFrameDecoder.decode(text, limits: limits)
        } catch {
            return gate.sendError(error, to: connection)
        }
        context.metrics.framesIn.count(named: decoded.frameType.rawValue)
        apply(hub.handle(.message(connection, decoded), now: context.now()))
    }

    func didClose(_ connection: ConnectionID) {
        guard sessions.removeValue(forKey: connection) != nil else { return }
        apply(hub.handle(.disconnect(connection), now: context.now()))
    }

    func tick(now: Millis) {
        apply(hub.handle(.tick, now: now))
        guard now - lastExpiryCheck >= 1_000 else { return }
        lastExpiryCheck = now
        let limit = Date(timeIntervalSince1970: Double(now) / 1000).addingTimeInterval(-context.config.jwtLeewaySeconds)
        for (connection, session) in sessions where !session.expired && session.expiresAt < limit {
            sessions[connection]?.expired = true
            context.metrics.closes[CloseCode.tokenExpired.reason, default: 0] += 1
            router.close(connection, code: .tokenExpired)
        }
    }

    // MARK: effects

    private func send(_ frame: Frame, to targets: [ConnectionID]) {
        router.deliver(frame, to: targets)
    }

    /// Carries out effects in order. A failed mint feeds `.callFailed` back; its effects run after
    /// the ones already queued, so the agent's `busy` broadcast precedes its return to `available`.
    private func apply(_ effects: [PresenceEffect]) {
        var pending = effects[...]
        while let effect = pending.popFirst() {
            switch effect {
            case .send(let targets, let frame):
                if frame.type == PresenceFrameType.error.rawValue, let code = frame.error?.code,
                    let name = ErrorCode(rawValue: code)?.name
                {
                    context.metrics.errors[name, default: 0] += targets.count
                }
                send(frame, to: targets)
                // One `ended` effect per request (sent to whichever sides are still connected).
                if frame.type == PresenceFrameType.ended.rawValue, context.webhooks.wants(.presenceRequestEnded),
                    let payload = frame.payload?.objectValue, let request = payload["request_id"]?.stringValue
                {
                    context.webhooks.emit(.presenceRequestEnded, key: "presence", [
                        "request_id": .string(request), "outcome": payload["reason"] ?? .null,
                        "call_id": .null, "room_id": .null, "agent_id": .null, "caller_id": .null,
                    ])
                }
            case .close(let connection, let code):
                context.metrics.closes[code.reason, default: 0] += 1
                // The hub has already forgotten the old connection; its close must not reach it.
                sessions[connection] = nil
                router.close(connection, code: code)
            case .mintCall(let call):
                do {
                    let (callerToken, agentToken) = try mint(call)
                    send(call.acceptedFrame(token: callerToken), to: [call.callerConnection])
                    send(call.acceptedFrame(token: agentToken), to: [call.agentConnection])
                    if context.webhooks.wants(.presenceRequestEnded) {
                        context.webhooks.emit(.presenceRequestEnded, key: "presence", [
                            "request_id": .string(call.requestID.rawValue), "outcome": "accepted",
                            "call_id": .string(call.callID.rawValue), "room_id": .string(call.roomID.rawValue),
                            "agent_id": .string(call.agent.rawValue), "caller_id": .string(call.caller.rawValue),
                        ])
                    }
                } catch {
                    context.logger.error("call tokens not issued", ["request.id": call.requestID.rawValue, "error": "\(error)"])
                    pending.append(contentsOf: hub.handle(.callFailed(call.requestID), now: context.now()))
                }
            }
        }
    }

    /// One room token per side: same room and call, `sub` and `role` of that side, scope `room`.
    private func mint(_ call: PresenceCall) throws(TokenIssueError) -> (caller: String, agent: String) {
        let config = context.config
        let issuedAt = Date(timeIntervalSince1970: Double(context.now()) / 1000)
        let expiresAt = issuedAt.addingTimeInterval(TimeInterval(config.tokenTTLSeconds))
        func claims(_ peer: PeerID, role: PresenceRole, name: String?) -> PeerTokenClaims {
            PeerTokenClaims(sub: peer, roomID: call.roomID, callID: call.callID, role: role.rawValue, name: name, scope: ["room"],
                            audience: config.jwtAudience, issuedAt: issuedAt, expiresAt: expiresAt,
                            tokenID: CallsAPI.newTokenID())
        }
        let caller = try context.issuer.issue(claims(call.caller, role: .caller, name: call.callerName))
        let agent = try context.issuer.issue(claims(call.agent, role: .agent, name: call.agentName))
        return (caller, agent)
    }
}

/// `req_`, `call_`, `room_` followed by 24 hex digits (96 bits) from OpenSSL's CSPRNG.
struct RandomPresenceIDs: PresenceIDSource {
    private static let digits = Array("0123456789abcdef")

    mutating func make(_ kind: PresenceIDKind) -> String {
        var id = kind.rawValue + "_"
        for byte in SecureRandom.bytes(12) {
            id.append(Self.digits[Int(byte >> 4)])
            id.append(Self.digits[Int(byte & 0x0f)])
        }
        return id
    }
}
