import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// Runs `work` on the service thread, after the work posted before it (the transport's inbox).
/// Store completions, which run on the store queue, hop back through it.
typealias ServicePost = @Sendable (_ work: @escaping @Sendable () -> Void) -> Void

/// The leaves that every service-thread component shares: configuration, clock, counters, the
/// store, the webhook sender, the token keys, ICE. `ServerApp` builds it first, before any of the
/// components, and it holds nothing that points back at them, so wiring has one direction.
// @unchecked Sendable: every property is a constant; `metrics` is mutated only on the service
// thread (store completions capture the context solely to hop back through `post`).
final class ServiceContext: @unchecked Sendable {
    let config: ServerConfig
    let logger: Logger
    let metrics: Metrics
    let now: @Sendable () -> Millis
    let post: ServicePost
    /// The SQLite store: the webhook outbox (through `perform`), and everything else without `database_url`.
    let store: ChatStore
    /// Chat history and every chat's `seq`: `store` itself, or PostgreSQL when `database_url` is set.
    let chat: any ChatPersistence
    /// API keys and kicked tokens: `store` itself, or PostgreSQL when `database_url` is set.
    let access: any AccessPersistence
    /// Calls, their stats and the rooms' meters: `store` itself, or PostgreSQL when `database_url` is set.
    let calls: any CallPersistence
    /// This node's id in a cluster (`node_id` or the random one), written into the calls it
    /// creates so that their meter runs here; nil outside a cluster.
    let nodeID: String?
    /// The webhook sender (Webhooks.swift); `emit` is all the service thread calls.
    let webhooks: Webhooks
    /// Signs tokens the server hands out itself (calls, presence `accepted`).
    let issuer: TokenIssuer
    let verifier: TokenVerifier
    /// `GET /v1/ice`, WHIP `Link` headers and the calls API's `ice_servers`.
    let ice: ICEService

    init(config: ServerConfig, logger: Logger, metrics: Metrics = Metrics(), now: @escaping @Sendable () -> Millis,
         post: @escaping ServicePost, store: ChatStore, chat: (any ChatPersistence)? = nil,
         access: (any AccessPersistence)? = nil, calls: (any CallPersistence)? = nil, nodeID: String? = nil, webhooks: Webhooks, issuer: TokenIssuer, verifier: TokenVerifier,
         ice: ICEService)
    {
        self.config = config
        self.logger = logger
        self.metrics = metrics
        self.now = now
        self.post = post
        self.store = store
        self.chat = chat ?? store
        self.access = access ?? store
        self.calls = calls ?? store
        self.nodeID = nodeID
        self.webhooks = webhooks
        self.issuer = issuer
        self.verifier = verifier
        self.ice = ice
    }

    /// Wall-clock milliseconds, the default clock. Read for many frames (the hub's `now`), so
    /// straight from `clock_gettime(CLOCK_REALTIME)`, the clock `Date()` reads too: through `Date`
    /// it cost more on every relayed frame.
    static let systemNow: @Sendable () -> Millis = {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Millis(now.tv_sec) * 1000 + Millis(now.tv_nsec / 1_000_000)
    }

    /// Milliseconds of the monotonic clock as of the kernel's last tick (`CLOCK_MONOTONIC_COARSE`:
    /// 4 ms steps on a 250 Hz kernel), for the flood limiter, which reads a clock for every inbound
    /// frame. It reads the time the kernel keeps per tick instead of the TSC: 5 ns against 23 for
    /// `systemNow` on the benchmark machine (docs/benchmarks.md, "The ping's own path, the
    /// limiter's clock, fewer retains"). A token bucket fed in 4 ms steps keeps its rate, since
    /// each refill covers all the time since the last one; and a monotonic clock cannot be
    /// stepped back, which would stop the refills.
    static let floodClock: @Sendable () -> Millis = {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &now)
        return Millis(now.tv_sec) * 1000 + Millis(now.tv_nsec / 1_000_000)
    }

    /// The token from `?token=` or `Authorization: Bearer`, verified; or the HTTP refusal.
    func authenticate(_ request: HTTPRequest) -> Result<PeerTokenClaims, HTTPResponse> {
        guard let token = request.query["token"] ?? request.bearerToken, !token.isEmpty else {
            return .failure(Problem.tokenMissing)
        }
        do throws(TokenError) {
            return .success(try verifier.verify(token))
        } catch {
            return .failure(Problem.tokenRefused(error))
        }
    }
}

