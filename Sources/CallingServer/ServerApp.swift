import CallingAuth
import CallingCore
import CallingPostgres
import CallingRedis
import CallingStore
import CallingTransport
import Foundation

/// Builds the server in one direction, leaves first: config and secrets, the store, the transport,
/// the shared `ServiceContext`, the `Router`, then each component from the ones before it (calls,
/// rooms, HTTP sessions, admin, the WebSocket endpoints, the HTTP routes), and last the transport's
/// delegate that dispatches to them. Nothing points back at what built it. Runs the heartbeat
/// thread that drives timers and watches the service loop.
public final class ServerApp: @unchecked Sendable {
    // @unchecked: `start`/`stop` are called from the main thread only; the heartbeat thread reads
    // immutable references and the transport's atomic progress counter; `tick` runs on the service thread.
    public let config: ServerConfig
    public let logger: Logger
    let store: ChatStore
    /// Chat history: `store`, or PostgreSQL when `database_url` is set.
    let chat: any ChatPersistence
    /// API keys and kicked tokens: the same store as `chat`.
    let access: any AccessPersistence
    /// Calls, their stats and meters: the same store as `chat`.
    let callStore: any CallPersistence
    let transport: WebSocketServer
    let webhooks: Webhooks
    let context: ServiceContext
    let router: any Router
    /// Cluster mode's link between the Redis driver and the rooms; nil on a node alone.
    let cluster: ClusterLink?
    let calls: CallsAPI
    /// The calls' bookkeeping the rooms talk to (joins, leaves, meters, stats, the unjoined sweep).
    let book: CallBook
    let rooms: SignalingService
    let httpSessions: HTTPSessions
    let roomEndpoint: RoomEndpoint
    let presence: PresenceEndpoint
    /// The transport's delegate. The transport holds it strongly from `init` until its service
    /// loop ends (WebSocketServer `delegate`); the app keeps it too, from before `start` to after `stop`.
    let endpoints: WebSocketEndpoints
    /// Every route (Routes/Routes.swift), which the front door and the upgrades are routed by.
    let routeTable: RouteTable
    private var heartbeat: Thread?
    /// A condition variable, not a `Locked`: the heartbeat thread sleeps on it for a tick and
    /// `stop()` must wake it at once, which a plain lock cannot do. It guards `stopRequested`.
    private let stopping = NSCondition()
    private var stopRequested = false

    /// What happens when the watchdog sees the service loop stalled. Exiting (70) is the only safe
    /// answer in production: the loop never recovers (lws #2889). Tests observe instead.
    let onStall: @Sendable (TimeInterval) -> Void

    public init(config: ServerConfig, logger: Logger,
                onStall: @escaping @Sendable (TimeInterval) -> Void = { _ in _exit(70) }) throws
    {
        self.config = config
        self.logger = logger
        self.onStall = onStall
        try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
        let secret = try SigningSecret.load(config: config, logger: logger)
        // Before the store opens: a TURN configuration without its secret stops the start here.
        let ice = try ICEService(config: config)
        // Also before the store: a certificate that is missing, not PEM or not the key's stops here.
        let tlsSummary = config.tlsEnabled ? try Self.prepareTLS(config: config, logger: logger, event: "tls certificate loaded") : nil
        let webhookSigner = try config.webhookSigner()
        let publicKey = try config.jwtPublicKeyFile.map { try String(contentsOfFile: $0, encoding: .utf8) }
        let verifier = try TokenVerifier(hs256Secret: secret, publicKeyPEM: publicKey, audience: config.jwtAudience,
                                         leeway: config.jwtLeewaySeconds)
        store = try ChatStore.open(path: config.databasePath, options: config.chatStoreOptions)
        Self.logFailures(of: store, path: config.databasePath, interval: config.storeFailureLogSeconds,
                         logger: logger.labeled("store"))
        if !store.migrationsAppliedAtOpen.isEmpty {
            logger.info("migrations applied", ["names": store.migrationsAppliedAtOpen.joined(separator: ",")])
        }
        let shared = try Self.openShared(config: config, logger: logger)
        chat = shared ?? store
        access = shared ?? store
        callStore = shared ?? store
        let transport = WebSocketServer(settings: config.transport, logger: logger.labeled("transport"))
        self.transport = transport
        let issuer = try TokenIssuer(hs256Secret: secret)
        let staticFiles = try Self.loadStaticFiles(config: config, logger: logger)
        let now = ServiceContext.systemNow
        let nodeID = config.clusterRedisURL.map { _ in config.nodeID ?? "node-" + UUID().uuidString.prefix(8).lowercased() }
        // With database_url the webhook outbox is shared: this node claims what it sends, under its
        // node id (a random one per start without node_id, whose claims then wait out their lease
        // after a restart). In a cluster the rooms' calls are counted there too.
        let sharing = shared.map { shared in
            Webhooks.Sharing(node: nodeID ?? config.nodeID ?? "node-" + UUID().uuidString.prefix(8).lowercased(),
                             leaseMs: Int64(config.webhookLeaseMs), pollMs: config.webhookPollMs,
                             callEndSettleMs: Int64(config.webhookCallEndSettleMs),
                             lifecycle: config.clusterRedisURL == nil ? nil : shared)
        }
        webhooks = Webhooks(config: config, signer: webhookSigner, store: shared ?? store, sharing: sharing,
                            logger: logger.labeled("webhooks"), now: now)
        context = ServiceContext(config: config, logger: logger.labeled("signaling"), now: now,
                                 post: { [transport] work in transport.post(work) }, store: store, chat: chat, access: access,
                                 calls: callStore, nodeID: nodeID, webhooks: webhooks, issuer: issuer, verifier: verifier, ice: ice)
        // One node: the hub seats exactly this node's connections, so the router keeps no table
        // that mirrors it (a dictionary per room); a cluster's hub also seats other nodes' peers.
        let localRouter = LocalRouter(sink: transport, metrics: context.metrics, keepsSeats: config.clusterRedisURL != nil)
        var clusterRouter: ClusterRouter?
        if let url = config.clusterRedisURL, let node = nodeID {
            let settings = RedisClusterDriver.Settings(endpoint: try RedisEndpoint(url: url), node: node,
                                                       heartbeatMs: config.clusterHeartbeatMs, nodeTTLMs: config.clusterNodeTTLMs,
                                                       timeoutMs: config.clusterRedisTimeoutMs)
            let driver = RedisClusterDriver(settings: settings, logger: logger.labeled("cluster"), post: context.post)
            // Seqs are cluster-wide only in a shared store; with each node's SQLite they are not comparable.
            let catchUp = config.databaseURL.isEmpty ? nil : ChatCatchUp(settings: ChatCatchUp.Settings(gapMs: Int64(config.clusterChatGapMs)))
            clusterRouter = ClusterRouter(local: localRouter, driver: driver, catchUp: catchUp, history: chat,
                                          post: context.post, now: context.now)
            logger.info("cluster mode", ["node": node, "redis": settings.endpoint.description])
        }
        router = clusterRouter ?? localRouter
        let gate = FrameGate(config: config, metrics: context.metrics, router: router, now: ServiceContext.floodClock)
        // Labelled `calls`, as when the calls API checked keys for the admin API too: its log lines keep their label.
        let apiKeys = APIKeyAuthenticator(context: context, logger: logger.labeled("calls"))
        // Labelled `calls` as when it was part of the calls API: its log lines keep their label.
        book = CallBook(context: context, logger: logger.labeled("calls"))
        calls = CallsAPI(context: context, book: book, logger: logger.labeled("calls"))
        // One node remembers its seats in SQLite across a restart; a cluster's are in Redis.
        let journal = clusterRouter == nil ? SeatJournal(store: store, logger: logger.labeled("seats")) : nil
        let rooms = SignalingService(context: context, router: router, chats: chat, calls: book, seatJournal: journal)
        self.rooms = rooms
        // Tokens kicked before this start (here, or on any node sharing the database) stay refused.
        let accessStore = access
        rooms.imposeBans(try accessStore.wait { accessStore.tokenBans(activeAt: now(), completion: $0) })
        httpSessions = HTTPSessions(context: context, rooms: rooms, router: router, logger: logger.labeled("sessions"))
        let admin = AdminAPI(context: context, rooms: rooms, httpSessions: httpSessions, logger: logger.labeled("admin"))
        roomEndpoint = RoomEndpoint(context: context, rooms: rooms, gate: gate, router: router)
        let presence = PresenceEndpoint(context: context, router: router, gate: gate,
                                        relay: clusterRouter.map { ClusterLink.presenceRelay($0.driver) })
        self.presence = presence
        let clusterLogger = logger.labeled("cluster")
        cluster = clusterRouter.map { ClusterLink(router: $0, rooms: rooms, presence: presence, logger: clusterLogger) }
        let service = ServiceAPI(context: context, rooms: rooms, httpSessions: httpSessions, transport: transport, cluster: cluster,
                                 database: shared)
        let table = RouteTable.server(service: service, calls: calls, admin: admin, sessions: httpSessions,
                                      room: roomEndpoint, presence: presence)
        routeTable = table
        let routes = HTTPRoutes(context: context, table: table, staticFiles: staticFiles, apiKeys: apiKeys,
                                rateLimit: { [httpSessions] in httpSessions.rateLimit($0) })
        if let cluster {
            cluster.dispatch = { [routes] in routes.handleForwarded($0, respond: $1) }
            httpSessions.forward = { [cluster] in cluster.forward(to: $0, $1, fallback: $2, $3) }
        }
        endpoints = WebSocketEndpoints(context: context, primaryPath: "/v1/ws", routes: routes)
        transport.delegate = endpoints
        if let tlsSummary { transport.setTLSCertificateExpiry(tlsSummary.notAfter) }
    }

    /// Every `tick_ms` on the service thread, in this order: presence timers, the hub's timers, the
    /// calls' sweep and stats batch, HTTP session deadlines, room token expiry, the cluster's chat gaps.
    private func tick() {
        let now = context.now()
        presence.tick(now: now)
        rooms.tick(now: now)
        book.tick(now: now)
        httpSessions.tick(now: now)
        roomEndpoint.tick(now: now)
        cluster?.tick(now: now)
        transport.expireHTTPDeadlines()
    }

    /// One log line per kind of store failure per `interval` (`store_failure_log_seconds`), with the
    /// number held back since the previous one: every failure also counts in
    /// `calling_store_failures_total`, but a counter alone does not say why.
    static func logFailures(of store: ChatStore, path: String, interval: Double, logger: Logger) {
        let limited = RateLimitedLogger(logger: logger, interval: interval)
        store.onFailure { failure in
            var metadata: Logger.Metadata = ["kind": failure.error.kind, "operation": failure.operation,
                                             "affected": String(failure.affected), "path": path,
                                             "error": failure.error.description]
            if case .sqlite(let error) = failure.error, let cause = error.cause { metadata["cause"] = cause }
            limited.log(.error, kind: failure.error.kind, "store operation failed", metadata)
        }
    }

    /// A PostgreSQL store for `database_url` (its migrations applied), for chat history, API keys and
    /// kicked tokens; nil without one (the SQLite store keeps them). An unreachable PostgreSQL stops
    /// the start: a node meant to share them must not keep its own.
    static func openShared(config: ServerConfig, logger: Logger) throws -> PostgresChatStore? {
        guard !config.databaseURL.isEmpty else { return nil }
        let postgres = try PostgresChatStore.open(url: config.databaseURL,
                                                  options: .init(reconnectIntervalMs: config.databaseReconnectMs))
        logger.info("chat history, API keys and kicked tokens in PostgreSQL", ["database_url": ServerConfig.redactingPassword(config.databaseURL),
                                                    "migrations_applied": postgres.migrationsAppliedAtOpen.joined(separator: ",")])
        return postgres
    }

    /// The SDK and pages, from `web_root` or the folder found beside the binary. An explicit
    /// `web_root` that cannot be read stops the start; a missing default only turns them off.
    static func loadStaticFiles(config: ServerConfig, logger: Logger) throws -> StaticFiles {
        let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        guard let root = config.webRoot
            ?? StaticFiles.defaultRoot(executable: executable, workingDirectory: FileManager.default.currentDirectoryPath)
        else {
            logger.log(.notice, "no web_root found: /sdk/, / and /dashboard are not served")
            return .empty
        }
        let files = try StaticFiles(root: root, pagesEnabled: config.servePages)
        logger.info("serving web files", ["web_root": files.root ?? root, "files": "\(files.assets.count)",
                                          "pages": "\(config.servePages)"])
        return files
    }

    /// The bound port.
    public var port: Int { transport.port }

    public func start() throws {
        // Before the transport: what a previous run left queued goes out ahead of anything new.
        try webhooks.start()
        // Before the transport: seats a previous run under this node id held in the shared store
        // ended with it (a cluster node seats nobody again after a restart).
        if webhooks.sharing?.lifecycle != nil {
            let webhooks = self.webhooks
            let ended = try waitForCompletion { webhooks.endSeats(ofNodesNotIn: nil, completion: $0) }
            if !ended.isEmpty { logger.info("seats of this node's previous run ended", ["node": ended.joined(separator: ",")]) }
        }
        // Before the transport: the seats of the previous run are held before anyone can join.
        if let journal = rooms.seatJournal {
            let remembered = try journal.remembered()
            rooms.restore(remembered)
            if !remembered.isEmpty {
                logger.info("seats restored", ["seats": "\(remembered.count)", "rooms": "\(Set(remembered.map(\.identity.room)).count)",
                                               "grace_ms": "\(config.hub.reconnectGraceMs)"])
            }
        }
        try transport.start()
        cluster?.start()
        let thread = Thread { [self] in runHeartbeat() }
        thread.name = "heartbeat"
        heartbeat = thread
        thread.start()
    }

    /// SIGHUP: validates the configured certificate files again and, when they are usable, makes the
    /// listener serve them to new connections; live connections keep theirs. A bad file leaves the
    /// old certificate in service and throws (the caller logs it).
    @discardableResult
    public func reloadTLSCertificate() throws -> TLSCertificateSummary {
        guard config.tlsEnabled else { throw TransportError.notServingTLS }
        let summary = try Self.prepareTLS(config: config, logger: logger, event: nil)
        try transport.reloadTLSCertificate()
        transport.setTLSCertificateExpiry(summary.notAfter)
        logger.log(.notice, "tls certificate reloaded", ["subject": summary.subject, "not_after": "\(summary.notAfter)"])
        return summary
    }

    /// Validates the TLS files and, with a separate chain file, writes the joined file lws loads.
    @discardableResult
    private static func prepareTLS(config: ServerConfig, logger: Logger, event: String?) throws -> TLSCertificateSummary {
        guard let cert = config.tlsCertFile, let key = config.tlsKeyFile, let served = config.tlsServedChainFile else {
            throw TransportError.notServingTLS
        }
        let summary = try TLSCertificateFiles.validate(certFile: cert, keyFile: key, chainFile: config.tlsChainFile)
        if let chain = config.tlsChainFile {
            let joined = try TLSCertificateFiles.combinedChainPEM(certFile: cert, chainFile: chain)
            // Atomic: a reload racing a connection must never let lws read half a file.
            try Data(joined).write(to: URL(fileURLWithPath: served), options: .atomic)
        }
        let metadata = ["subject": summary.subject, "not_after": "\(summary.notAfter)",
                        "intermediates": "\(summary.intermediates)", "cert_file": cert]
        if summary.isExpired {
            logger.error("tls certificate has expired; clients will refuse it", metadata)
        } else if let event {
            logger.info(event, metadata)
        }
        return summary
    }

    /// Graceful stop: peers get 1001, pending chat writes are flushed, then the store closes. On a
    /// single node the stop is a restart: the seats stay remembered (docs/protocol.md, "Across a
    /// server restart"); a cluster node's seats end (their leaves are published).
    public func stop() {
        stopping.lock()
        stopRequested = true
        stopping.broadcast()
        stopping.unlock()
        // Rooms emptied by the stop end their calls with reason server_shutdown.
        webhooks.beginStopping()
        // Posted ahead of the transport's closes, so the service thread reads them as a restart.
        if rooms.seatJournal != nil { transport.post { [rooms] in rooms.beginRestart() } }
        transport.stop(grace: config.shutdownGraceSeconds)
        // The last seat changes (a leave during the stop) go in before the store closes.
        rooms.seatJournal?.flush()
        // After the transport: the leaves of the peers the stop closed are published first.
        cluster?.stop()
        // After the service thread is done emitting, before the store closes: the last events are queued.
        webhooks.stop()
        if chat !== store { chat.close() }
        store.close()
        logger.info("stopped")
    }

    /// Posts a tick every `tick_ms` and exits the process if the service loop stops draining its
    /// inbox for `watchdog_seconds` (libwebsockets #2889: a spinning loop never recovers), or keeps
    /// turning at a full core with next to no socket events for as long (LoopWatchdog).
    private func runHeartbeat() {
        var watchdog = LoopWatchdog(windowSeconds: config.watchdogSeconds)
        let interval = Double(config.tickMs) / 1000
        var lastTrim = ProcessInfo.processInfo.systemUptime
        while true {
            stopping.lock()
            if !stopRequested { _ = stopping.wait(until: Date().addingTimeInterval(interval)) }
            let done = stopRequested
            stopping.unlock()
            if done { return }
            transport.post { [self] in tick() }
            let sample = LoopWatchdog.Sample(time: ProcessInfo.processInfo.systemUptime, progress: transport.progress,
                                             callbacks: transport.callbacks, cpuSeconds: transport.serviceCPUSeconds)
            if config.mallocTrimSeconds > 0, sample.time - lastTrim >= Double(config.mallocTrimSeconds) {
                lastTrim = sample.time
                MallocTrim.run()
            }
            switch watchdog.observe(sample) {
            case .healthy:
                continue
            case .stalled(let seconds):
                logger.critical("service loop stalled; exiting so the supervisor restarts us",
                                ["stalled_seconds": "\(Int(seconds))"])
                onStall(seconds)
            case .spinning(let seconds, let share, let rate):
                logger.critical("service loop spinning without progress; exiting so the supervisor restarts us",
                                ["seconds": "\(Int(seconds))", "cpu_share": "\(Int(share * 100))%",
                                 "callbacks_per_second": "\(Int(rate))"])
                onStall(seconds)
            }
        }
    }
}

/// glibc keeps freed memory in its per-thread arenas: after 4 rounds of 3,000 joins and leaves the
/// heap in use stayed at 2 MiB while RSS with no connection open grew 38 → 86 MiB, and
/// `malloc_trim(0)` took it back to 47 MiB (docs/operations.md, "Memory"). Not in Swift's Glibc
/// module, so it is looked up once at run time; absent (another libc), nothing happens.
enum MallocTrim {
    private typealias Function = @convention(c) (Int) -> Int32
    private static let function: Function? = dlsym(dlopen(nil, RTLD_NOW), "malloc_trim")
        .map { unsafeBitCast($0, to: Function.self) }

    static func run() { _ = function?(0) }
}

/// The HS256 signing secret: `CALLING_JWT_SECRET`, else the secret file, else (only at the default
/// path) a freshly generated one that is kept for the next start.
public enum SigningSecret {
    /// The secret from `CALLING_JWT_SECRET`, `jwt_secret_file` or `<data_dir>/jwt-secret`. Only
    /// the server itself (`generateIfMissing`) writes a new one: a token minted with a fresh
    /// secret no running server knows would be refused.
    public static func load(config: ServerConfig, logger: Logger? = nil, generateIfMissing: Bool = true) throws -> [UInt8] {
        if let secret = config.jwtSecret { return try validated(Array(secret.utf8), source: "CALLING_JWT_SECRET") }
        let path = config.resolvedSecretFile
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            return try validated(Array(text.trimmingCharacters(in: .whitespacesAndNewlines).utf8), source: path)
        }
        guard config.jwtSecretFile == nil else { throw SecretError.unreadable(path) }
        guard generateIfMissing else { throw SecretError.missing(path) }
        try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
        let generated = SecureRandom.token(bytes: 32)
        guard FileManager.default.createFile(atPath: path, contents: Data((generated + "\n").utf8),
                                             attributes: [.posixPermissions: 0o600])
        else { throw SecretError.unwritable(path) }
        logger?.log(.notice, "generated a dev signing secret", ["path": path])
        return Array(generated.utf8)
    }

    private static func validated(_ bytes: [UInt8], source: String) throws -> [UInt8] {
        guard bytes.count >= TokenIssuer.minimumSecretLength else {
            throw SecretError.tooShort(source, minimum: TokenIssuer.minimumSecretLength)
        }
        return bytes
    }

    public enum SecretError: Error, CustomStringConvertible {
        case unreadable(String)
        case unwritable(String)
        case tooShort(String, minimum: Int)
        /// No secret yet and the caller may not generate one.
        case missing(String)

        public var description: String {
            switch self {
            case .unreadable(let path): return "cannot read the JWT secret file \(path)"
            case .unwritable(let path): return "cannot write a generated JWT secret to \(path)"
            case .tooShort(let source, let minimum): return "the JWT secret from \(source) is shorter than \(minimum) bytes"
            case .missing(let path):
                return "no JWT secret at \(path): pass the --data-dir (or --config) of the server, which writes it on its "
                    + "first start, or set CALLING_JWT_SECRET / jwt_secret_file to the server's secret"
            }
        }
    }
}
