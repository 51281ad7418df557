import CallingCore
import CallingRedis
import CallingStore
import CallingTransport
import Foundation

/// Every setting of `calling-server serve`. Layers, later wins: defaults < JSON file (`--config`)
/// < `CALLING_*` environment < command-line flags. Flag names equal the JSON keys (`--data_dir` or
/// `--data-dir`), env names are `CALLING_` + the upper-cased key. docs/configuration.md lists them.
public struct ServerConfig: Sendable, Equatable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var dataDir = "./data"
    public var logLevel = Logger.Level.info
    public var logFormat = LogFormat.text
    public var eventLoop = TransportSettings.EventLoop.libev

    /// PEM certificate served for `https://` and `wss://` (the leaf, optionally followed by its
    /// intermediates). TLS is on when this and `tlsKeyFile` are set; then the port serves no plaintext.
    public var tlsCertFile: String?
    /// Unencrypted PEM private key of `tlsCertFile`.
    public var tlsKeyFile: String?
    /// PEM intermediates sent after the leaf, for certificates delivered without them in the cert file.
    public var tlsChainFile: String?
    public var tlsMinVersion = TLSServerSettings.MinimumVersion.tls12
    /// OpenSSL cipher list for TLS 1.2 connections.
    public var tlsCiphers = TLSServerSettings.defaultCipherList

    /// File holding the HS256 secret; generated on first start when missing. Default `<data_dir>/jwt-secret`.
    public var jwtSecretFile: String?
    /// The secret itself; only from the environment (`CALLING_JWT_SECRET`), never a flag or file key.
    public var jwtSecret: String?
    /// PEM public key accepting RS256 or ES256 tokens in addition to HS256.
    public var jwtPublicKeyFile: String?
    public var jwtAudience: String? = "calling-server"
    public var jwtLeewaySeconds = 30.0
    public var tokenTTLSeconds = 3600
    /// Lifetime of the caller's `access_token` from `POST /v1/calls`: 130 minutes, as documented in
    /// docs/protocol.md ("Calls").
    public var callTokenTTLSeconds = 7_800

    public var maxFrameBytes = 65_536
    public var maxQueueBytes = 1_048_576
    public var maxBodyBytes = 262_144
    public var maxCoalescedBytes = 65_536
    public var flushAfterFrames = 256
    public var maxFramesPerSecond = 50.0
    public var frameBurst = 200.0
    public var floodCloseAfter = 100
    public var pingIntervalMs = 25_000
    public var idlePingSeconds = 30
    public var idleHangupSeconds = 75
    public var watchdogSeconds = 10.0
    public var shutdownGraceSeconds = 3.0
    public var reservedFileDescriptors = 128
    public var maxSockets = 65_536
    public var maxURLBytes = 4_096
    public var maxHeaderBytes = 8_192
    public var healthReservedSockets = 8
    public var httpTimeoutSeconds = 10
    public var httpHeaderTimeoutSeconds = 10
    public var httpKeepAliveTimeoutSeconds = 5
    public var httpBodyGraceSeconds = 10
    public var httpBodyMinBytesPerSecond = 1_024
    /// Seconds between `malloc_trim(0)` calls that hand freed heap back to the kernel; 0 disables.
    public var mallocTrimSeconds = 60
    public var tickMs = 250

    public var maxClientIDBytes = 128
    public var maxPeerIDBytes = 128
    public var typingTTLMs = 6_000
    /// How long a peer whose socket ended without a clean leave keeps its seat (docs/protocol.md,
    /// "Reconnect grace"); 0 ends the seat at once, as before the grace existed.
    public var reconnectGraceMs = 15_000
    public var chatMaxTextBytes = 4_096
    public var chatMaxMetaBytes = 2_048
    public var rpcMaxPayloadBytes = 15_360
    public var rpcMaxNameBytes = 128
    /// How long after a message's ts its author may edit it; 0 = always (docs/protocol.md, "Chat operations").
    public var chatEditWindowMs = 86_400_000
    /// Distinct reaction keys one message may carry.
    public var chatMaxReactionKeys = 20
    /// Longest reaction key, in UTF-8 bytes.
    public var chatReactionKeyMaxBytes = 32
    public var replayCap = 500
    public var historyDefaultLimit = 50
    public var historyMaxLimit = 200
    public var sqliteBusyTimeoutMs = 5_000
    /// WAL pages between two checkpoints on the store's checkpoint connection (ChatStore.swift,
    /// `WALCheckpointer`): fewer means shorter copies that compete less with the writer, more fsyncs.
    public var sqliteCheckpointPages = ChatStore.Options.defaultCheckpointEveryPages
    /// WAL size in pages past which the writer checkpoints itself, so that the WAL restarts under
    /// sustained load; each such catch-up holds the acks queued behind it for a checkpoint.
    public var sqliteWriterCatchUpPages = ChatStore.Options.defaultWriterCatchUpPages
    /// `PRAGMA quick_check` of the SQLite file at start-up, refusing a damaged file (exit 65). Reads
    /// the whole file once: seconds for a file of millions of chats (docs/operations.md).
    public var sqliteQuickCheckAtStart = true
    /// Seconds between two log lines of one kind of store failure; the ones between are counted.
    public var storeFailureLogSeconds = 10.0
    /// `postgres://…` URL (libpq's form, query parameters included) of a PostgreSQL database that holds chat history, shared
    /// by every node pointed at it; empty keeps chat in the embedded SQLite file.
    public var databaseURL = ""
    /// Least time between two reconnect attempts while `database_url` is unreachable.
    public var databaseReconnectMs = 500
    /// With `database_url`: how often each node reads the tokens other nodes kicked.
    public var databaseBanSyncMs = 1_000
    /// With `database_url`: a PostgreSQL operation under way longer than this makes `/healthz` say
    /// PostgreSQL is down. A stopped or partitioned server keeps its TCP connection open, so nothing
    /// fails: the wait is all there is to see.
    public var databaseStallMs = 3_000

    /// Comma-separated `turn:`/`turns:` URLs handed out by `GET /v1/ice` with REST credentials.
    public var turnURLs = ""
    /// Comma-separated `stun:` URLs; returned alone when no TURN is configured.
    public var stunURLs = ""
    /// coturn `static-auth-secret`; only from `CALLING_TURN_SECRET` or `turn_secret_file`.
    public var turnSecret: String?
    public var turnSecretFile: String?
    public var iceTTLSeconds = 3_600
    public var presenceGraceSeconds = 30
    public var presenceRequestTTLSeconds = 90
    public var presenceForgetSeconds = 86_400
    public var callJoinWindowSeconds = 300
    public var meterIntervalSeconds = 15
    public var meterWarningSeconds = 60
    /// HTTP sessions and WHIP (HTTPSessions.swift): how long a POST waits for the answering peer.
    public var sessionAnswerTimeoutMs = 10_000
    /// The role of the peer that answers HTTP sessions and WHIP offers.
    public var sessionAnswerRole = "agent"
    /// Signaling requests (`/webrtc-proxy`, `/whip`) per minute from one remote address.
    public var signalingRequestsPerMinute = 300
    /// Distinct peers a room seats (WebSocket peers and HTTP sessions alike) unless the joiner's token
    /// carries `max_peers`; 0 = unlimited.
    public var maxPeersPerRoom = 0

    /// Origins that may call the peer-token routes and open WebSockets from a browser (CORSPolicy.swift).
    public var allowedOrigins = "*"
    /// Folder served at `/sdk/`, `/` and `/dashboard`; nil finds it beside the binary (StaticFiles.swift).
    public var webRoot: String?
    /// Serve the demo page (`/`) and the presence dashboard (`/dashboard`). The SDK is served either way.
    public var servePages = true
    /// At start-up, print links to the demo and dashboard carrying freshly minted tokens (`make serve`).
    public var printDemoLinks = false
    /// Comma-separated `http://`/`https://` URLs that receive webhook events (Webhooks.swift); empty: off.
    public var webhookURLs = ""
    /// The HMAC key of webhook signatures; only from `CALLING_WEBHOOK_SECRET` or `webhook_secret_file`.
    public var webhookSecret: String?
    public var webhookSecretFile: String?
    /// Comma-separated event types to send, or `all`.
    public var webhookEvents = "all"
    /// Also send `chat_message` for every stored chat (off: it multiplies the store's writes).
    public var webhookChatMessages = false
    public var webhookTimeoutMs = 5_000
    public var webhookRetryBaseMs = 1_000
    public var webhookRetryMaxMs = 300_000
    public var webhookMaxAttempts = 12
    public var webhookQueueMax = 10_000
    public var webhookMaxInFlight = 8
    /// With `database_url`: how long a node's claim on a queued delivery holds without renewal;
    /// after a node's death its deliveries wait this long before another node sends them.
    public var webhookLeaseMs = 15_000
    /// With `database_url`: how often a node looks for deliveries nobody holds (another node's
    /// death, a lane another node wrote to) besides right after its own writes and deliveries.
    public var webhookPollMs = 500
    /// In a cluster with `database_url`: how long a room stays without seats before its
    /// `call_ended` (a join recorded meanwhile by a slower node continues the call).
    public var webhookCallEndSettleMs = 1_000

    /// Cluster mode (docs/operations.md, "Running a cluster"): the Redis every node shares,
    /// `redis://[[user]:password@]host[:port][/db]`; nil runs this node alone.
    public var clusterRedisURL: String?
    /// This node's id in the cluster, unique among the nodes; nil: a random `node-…` at each start.
    public var nodeID: String?
    /// How often a node refreshes its heartbeat key and checks the others'.
    public var clusterHeartbeatMs = 1_000
    /// Lifetime of the heartbeat key: a node silent this long (plus one heartbeat) is declared gone.
    public var clusterNodeTTLMs = 3_000
    /// Connect, read and write timeout of each Redis call.
    public var clusterRedisTimeoutMs = 1_000
    /// With `database_url`: how long a local peer may miss a chat seq another node stored before
    /// this node reads the history behind the gap and hands it the missing messages.
    public var clusterChatGapMs = 1_000
    /// A new presence leader waits this long for both sides of a ringing request it resumed to
    /// connect again before the request ends with `disconnected`.
    public var clusterPresenceResumeMs = 10_000
    /// How long a node waits for the node holding an HTTP session to answer a `PATCH` or `DELETE`
    /// it forwarded (then 504); a `PATCH` carrying SDP waits `sessionAnswerTimeoutMs` longer.
    public var clusterForwardTimeoutMs = 2_000

    public init() {}

    public var resolvedSecretFile: String { jwtSecretFile ?? (dataDir as NSString).appendingPathComponent("jwt-secret") }
    /// `url` with the password of its user-info part replaced by `***`, for logs and `config show`.
    public static func redactingPassword(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let at = url.range(of: "@", range: scheme.upperBound..<url.endIndex),
              let colon = url.range(of: ":", range: scheme.upperBound..<at.lowerBound)
        else { return url }
        return String(url[..<colon.upperBound]) + "***" + String(url[at.lowerBound...])
    }

    /// How the SQLite store is opened: the busy timeout and the WAL checkpoint limits.
    public var chatStoreOptions: ChatStore.Options {
        ChatStore.Options(busyTimeoutMs: Int32(sqliteBusyTimeoutMs), checkpointEveryPages: sqliteCheckpointPages,
                          writerCatchUpPages: sqliteWriterCatchUpPages, quickCheckOnOpen: sqliteQuickCheckAtStart)
    }

    public var databasePath: String { (dataDir as NSString).appendingPathComponent("calling.sqlite") }

    /// True when the port serves TLS.
    public var tlsEnabled: Bool { tlsCertFile != nil && tlsKeyFile != nil }

    /// The file lws loads: `tls_cert_file` itself, or, with `tls_chain_file`, the two joined in
    /// `<data_dir>/tls-served-chain.pem` (lws reads a whole chain from one file), which the server
    /// rewrites at start and on every reload.
    public var tlsServedChainFile: String? {
        guard let tlsCertFile else { return nil }
        return tlsChainFile == nil ? tlsCertFile : (dataDir as NSString).appendingPathComponent("tls-served-chain.pem")
    }

    public var transport: TransportSettings {
        var settings = TransportSettings(host: host, port: port, eventLoop: eventLoop, maxFrameBytes: maxFrameBytes, maxQueueBytes: maxQueueBytes,
                          maxBodyBytes: maxBodyBytes, reservedFileDescriptors: reservedFileDescriptors,
                          idlePingSeconds: idlePingSeconds, idleHangupSeconds: idleHangupSeconds, watchdogSeconds: watchdogSeconds)
        settings.maxCoalescedBytes = maxCoalescedBytes
        settings.flushAfterFrames = flushAfterFrames
        settings.maxURLBytes = maxURLBytes
        settings.maxHeaderBytes = maxHeaderBytes
        settings.healthReservedSockets = healthReservedSockets
        settings.maxSockets = maxSockets
        settings.httpTimeoutSeconds = httpTimeoutSeconds
        settings.httpHeaderTimeoutSeconds = httpHeaderTimeoutSeconds
        settings.httpKeepAliveTimeoutSeconds = httpKeepAliveTimeoutSeconds
        settings.httpBodyGraceSeconds = httpBodyGraceSeconds
        settings.httpBodyMinBytesPerSecond = httpBodyMinBytesPerSecond
        if tlsEnabled, let chain = tlsServedChainFile, let key = tlsKeyFile {
            settings.tls = TLSServerSettings(certificateChainFile: chain, privateKeyFile: key, minimumVersion: tlsMinVersion,
                                             cipherList: tlsCiphers)
        }
        return settings
    }

    /// Empty strings read as unset, so the key table can show `(unset)`.
    var turnURLsOptional: String? {
        get { turnURLs.isEmpty ? nil : turnURLs }
        set { turnURLs = newValue ?? "" }
    }

    var stunURLsOptional: String? {
        get { stunURLs.isEmpty ? nil : stunURLs }
        set { stunURLs = newValue ?? "" }
    }

    var webhookURLsOptional: String? {
        get { webhookURLs.isEmpty ? nil : webhookURLs }
        set { webhookURLs = newValue ?? "" }
    }

    /// `webhook_urls` split on commas, blanks dropped.
    public var webhookURLList: [String] { Self.list(webhookURLs) }

    /// `turn_urls` split on commas, blanks dropped.
    public var turnURLList: [String] { Self.list(turnURLs) }
    public var stunURLList: [String] { Self.list(stunURLs) }

    static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    public var frameLimits: FrameLimits {
        FrameLimits(maxClientIDBytes: maxClientIDBytes, maxPeerIDBytes: maxPeerIDBytes)
    }

    public var hub: HubSettings {
        HubSettings(pingIntervalMs: Int64(pingIntervalMs), typingTTLMs: Int64(typingTTLMs), chatMaxTextBytes: chatMaxTextBytes,
                    chatMaxMetaBytes: chatMaxMetaBytes, maxPeersPerRoom: maxPeersPerRoom, reconnectGraceMs: Int64(reconnectGraceMs),
                    rpcMaxPayloadBytes: rpcMaxPayloadBytes, rpcMaxNameBytes: rpcMaxNameBytes,
                    chatOperations: ChatOperationLimits(editWindowMs: Int64(chatEditWindowMs), maxReactionKeys: chatMaxReactionKeys,
                                                        reactionKeyMaxBytes: chatReactionKeyMaxBytes))
    }

    /// One entry per key: its JSON name, a one-line meaning, and how to read and write it.
    struct Key: Sendable {
        let name: String
        let help: String
        let apply: @Sendable (inout ServerConfig, String) -> String?  // returns a problem, or nil
        let show: @Sendable (ServerConfig) -> String
    }

    static let keys: [Key] = [
        .string("host", "address to listen on", \.host),
        .int("port", "TCP port for HTTP and WebSocket (0 picks a free one)", \.port, 0...65_535),
        .string("data_dir", "folder for the SQLite file and the generated dev secret", \.dataDir),
        Key(name: "log_level", help: "trace, debug, info, notice, warning, error, critical",
            apply: { config, value in
                guard let level = Logger.Level(name: value) else {
                    let levels = Logger.Level.allCases.map { "\($0)" }.joined(separator: ", ")
                    return "log_level: unknown level '\(value)'; use one of \(levels)"
                }
                config.logLevel = level
                return nil
            }, show: { "\($0.logLevel)" }),
        Key(name: "log_format", help: "text (logfmt) or json (one object per line)",
            apply: { config, value in
                guard let format = LogFormat(rawValue: value) else { return "log_format: must be text or json, not '\(value)'" }
                config.logFormat = format
                return nil
            }, show: { $0.logFormat.rawValue }),
        Key(name: "event_loop", help: "libev (epoll; default) or poll",
            apply: { config, value in
                guard let loop = TransportSettings.EventLoop(rawValue: value) else {
                    return "event_loop: must be libev or poll, not '\(value)'"
                }
                config.eventLoop = loop
                return nil
            }, show: { $0.eventLoop.rawValue }),
        .optionalString("tls_cert_file", "PEM certificate (leaf first, then intermediates) for https:// and wss://; TLS is on when set",
                        \.tlsCertFile),
        .optionalString("tls_key_file", "unencrypted PEM private key of tls_cert_file", \.tlsKeyFile),
        .optionalString("tls_chain_file", "PEM intermediates sent after the leaf (when tls_cert_file holds only the leaf)",
                        \.tlsChainFile),
        Key(name: "tls_min_version", help: "oldest TLS version accepted: 1.2 or 1.3",
            apply: { config, value in
                guard let version = TLSServerSettings.MinimumVersion(rawValue: value) else {
                    return "tls_min_version: must be 1.2 or 1.3, not '\(value)'"
                }
                config.tlsMinVersion = version
                return nil
            }, show: { $0.tlsMinVersion.rawValue }),
        .string("tls_ciphers", "OpenSSL cipher list for TLS 1.2 (TLS 1.3 uses OpenSSL's AEAD suites)", \.tlsCiphers),
        .optionalString("jwt_secret_file", "file with the HS256 secret (default <data_dir>/jwt-secret)", \.jwtSecretFile),
        .optionalString("jwt_public_key_file", "PEM public key for RS256/ES256 tokens", \.jwtPublicKeyFile),
        .optionalString("jwt_audience", "required `aud` claim; empty disables the check", \.jwtAudience),
        .double("jwt_leeway_seconds", "clock skew allowed on exp/nbf", \.jwtLeewaySeconds, 0...600),
        .int("token_ttl_seconds", "lifetime of tokens minted by `calling-server token`", \.tokenTTLSeconds, 1...31_536_000),
        .int("call_token_ttl_seconds", "lifetime of the access_token of POST /v1/calls (130 minutes)", \.callTokenTTLSeconds,
             60...31_536_000),
        .int("max_frame_bytes", "largest WebSocket message accepted", \.maxFrameBytes, 1_024...16_777_216),
        .int("max_queue_bytes", "outbound bytes queued per connection before closing it (4000)", \.maxQueueBytes,
             4_096...1_073_741_824),
        .int("max_body_bytes", "largest HTTP request body", \.maxBodyBytes, 1_024...16_777_216),
        .int("max_coalesced_bytes", "most bytes of queued frames written together in one send (frames that fit together in it are batched, also at 1024)",
             \.maxCoalescedBytes, 1_024...16_777_216),
        .int("flush_after_frames", "inbound frames, upgrades and posted completions handled before what they queued is written, while more keeps arriving (otherwise it is written once the wake-up's callbacks are done)",
             \.flushAfterFrames, 1...1_000_000),
        .double("max_frames_per_second", "sustained inbound frames per connection", \.maxFramesPerSecond, 1...1_000_000),
        .double("frame_burst", "inbound frames allowed at once above the rate", \.frameBurst, 1...1_000_000),
        .int("flood_close_after", "consecutive rate-limited frames before closing (4001)", \.floodCloseAfter, 1...1_000_000),
        .int("ping_interval_ms", "app-level ping interval announced in welcome", \.pingIntervalMs, 1_000...600_000),
        .int("idle_ping_seconds", "seconds after the upgrade or the last PONG before the server sends a WebSocket PING", \.idlePingSeconds, 1...3_600),
        .int("idle_hangup_seconds", "seconds after the upgrade or the last PONG before an unanswering socket is dropped", \.idleHangupSeconds, 2...7_200),
        .double("watchdog_seconds", "service-loop stall that makes the process exit (70)", \.watchdogSeconds, 1...600),
        .double("shutdown_grace_seconds", "time peers get to close on SIGTERM", \.shutdownGraceSeconds, 0...120),
        .int("reserved_fds", "file descriptors kept free below the open-file limit", \.reservedFileDescriptors, 16...100_000),
        .int("max_sockets", "most sockets held at once; the soft open-file limit is set to this plus reserved_fds (at least 1024) where the hard limit is higher, since lws scans a table that large on every close; 0 = the hard limit",
             \.maxSockets, 0...16_777_216),
        .int("health_reserved_sockets", "sockets of the budget only /healthz may use", \.healthReservedSockets, 1...1_000),
        .int("max_url_bytes", "longest HTTP request target, at most max_header_bytes - 512 (414 beyond)", \.maxURLBytes, 256...32_000),
        .int("max_header_bytes", "largest HTTP request head: target, header values, unknown field names (431 beyond)", \.maxHeaderBytes,
             1_024...32_000),
        .int("http_timeout_seconds", "seconds a request body may go without a single byte before the socket is closed", \.httpTimeoutSeconds, 1...600),
        .int("http_header_timeout_seconds", "seconds for a complete request head, from accept or from a keep-alive request's first byte",
             \.httpHeaderTimeoutSeconds, 1...600),
        .int("http_keepalive_timeout_seconds", "seconds a keep-alive socket may wait for its next request", \.httpKeepAliveTimeoutSeconds, 1...3_600),
        .int("http_body_grace_seconds", "seconds a request body may take before http_body_min_bytes_per_second applies", \.httpBodyGraceSeconds, 1...3_600),
        .int("http_body_min_bytes_per_second", "least average rate of a request body after its grace (408 and close below; 0: none)",
             \.httpBodyMinBytesPerSecond, 0...1_073_741_824),
        .int("malloc_trim_seconds", "interval of malloc_trim(0), returning freed heap to the kernel (0: never)",
             \.mallocTrimSeconds, 0...86_400),
        .int("tick_ms", "timer resolution (typing expiry, token expiry)", \.tickMs, 10...5_000),
        .int("max_client_id_bytes", "longest chat client_id", \.maxClientIDBytes, 8...1_024),
        .int("max_peer_id_bytes", "longest peer id accepted in `to`", \.maxPeerIDBytes, 8...1_024),
        .int("typing_ttl_ms", "typing indicator expiry", \.typingTTLMs, 500...600_000),
        .int("reconnect_grace_ms", "how long a peer whose socket ended without a clean leave keeps its seat (peer-reconnecting); 0 = peer-left at once. "
              + "On a single node also the grace of each seat the server restores at start, counted from the start "
              + "(docs/protocol.md, \"Across a server restart\")",
             \.reconnectGraceMs, 0...600_000),
        .int("chat_max_text_bytes", "longest chat text", \.chatMaxTextBytes, 1...1_048_576),
        .int("chat_max_meta_bytes", "largest chat meta object (serialized)", \.chatMaxMetaBytes, 2...1_048_576),
        .int("rpc_max_payload_bytes", "largest RPC payload, or RPC error message and data together (rpc-request, rpc-response)",
             \.rpcMaxPayloadBytes, 1...1_048_576),
        .int("rpc_max_name_bytes", "longest RPC method name and request id", \.rpcMaxNameBytes, 8...1_024),
        .int("chat_edit_window_ms", "how long after a message's ts its author may edit it; 0 = always", \.chatEditWindowMs,
             0...31_536_000_000),
        .int("chat_max_reaction_keys", "distinct reaction keys one message may carry", \.chatMaxReactionKeys, 1...1_000),
        .int("chat_reaction_key_max_bytes", "longest reaction key (UTF-8 bytes)", \.chatReactionKeyMaxBytes, 1...256),
        .int("replay_cap", "messages replayed on resume before saying recovered=false", \.replayCap, 0...100_000),
        .int("history_default_limit", "GET …/messages default limit", \.historyDefaultLimit, 1...10_000),
        .int("history_max_limit", "GET …/messages largest limit", \.historyMaxLimit, 1...10_000),
        .int("sqlite_busy_timeout_ms", "SQLite busy_timeout", \.sqliteBusyTimeoutMs, 0...600_000),
        .int("sqlite_checkpoint_pages", "WAL pages between two background checkpoints of the SQLite file", \.sqliteCheckpointPages,
             1...1_000_000),
        .int("sqlite_writer_catch_up_pages", "WAL size in pages past which the writer checkpoints itself after its acks (at least sqlite_checkpoint_pages)",
             \.sqliteWriterCatchUpPages, 1...100_000_000),
        .bool("sqlite_quick_check_at_start", "run PRAGMA quick_check on the SQLite file at start and refuse to start on damage (exit 65); reads the whole file once",
              \.sqliteQuickCheckAtStart),
        .double("store_failure_log_seconds", "seconds between two log lines of one kind of store failure (disk_full, read_only, …); the ones between are counted in the next",
                \.storeFailureLogSeconds, 0...86_400),
        Key(name: "database_url", help: "postgres:// URL of a PostgreSQL 15 database for chat history, API keys, kicked tokens and calls, shared by all nodes; empty = SQLite",
            apply: { config, value in
                let trimmed = value.trimmingCharacters(in: .whitespaces)
                if !trimmed.isEmpty, !trimmed.hasPrefix("postgres://"), !trimmed.hasPrefix("postgresql://") {
                    return "database_url: must start with postgres:// or postgresql://, or be empty"
                }
                config.databaseURL = trimmed
                return nil
            }, show: { ServerConfig.redactingPassword($0.databaseURL) }),
        .int("database_reconnect_ms", "least time between reconnect attempts while database_url is unreachable (chats fail at once meanwhile)",
             \.databaseReconnectMs, 10...60_000),
        .int("database_ban_sync_ms", "with database_url: how often a node reads the tokens kicked through other nodes (refused here from then on)",
             \.databaseBanSyncMs, 10...600_000),
        .int("database_stall_ms", "with database_url: /healthz reports PostgreSQL down while one of its operations has been under way this long",
             \.databaseStallMs, 10...600_000),
        .optionalString("turn_urls", "comma-separated turn:/turns: URLs for GET /v1/ice", \.turnURLsOptional),
        .optionalString("stun_urls", "comma-separated stun: URLs for GET /v1/ice", \.stunURLsOptional),
        .optionalString("turn_secret_file", "file with coturn's static-auth-secret (or CALLING_TURN_SECRET)", \.turnSecretFile),
        .int("ice_ttl_seconds", "lifetime of issued TURN credentials", \.iceTTLSeconds, 60...604_800),
        .int("presence_grace_seconds", "an agent with no connection this long becomes offline", \.presenceGraceSeconds, 0...86_400),
        .int("presence_forget_seconds", "an agent offline and unconnected this long is dropped from snapshots",
             \.presenceForgetSeconds, 60...31_536_000),
        .int("presence_request_ttl_seconds", "an unanswered call request ends after this", \.presenceRequestTTLSeconds, 1...86_400),
        .int("call_join_window_seconds", "a call nobody joins ends with error_user_not_joined", \.callJoinWindowSeconds, 1...86_400),
        .int("meter_interval_seconds", "how often a running meter is sent", \.meterIntervalSeconds, 1...3_600),
        .int("meter_warning_seconds", "remaining time at which the meter turns to warning", \.meterWarningSeconds, 0...86_400),
        .int("session_answer_timeout_ms", "how long an HTTP session or WHIP POST waits for the answer (then 502)",
             \.sessionAnswerTimeoutMs, 50...120_000),
        .string("session_answer_role", "role of the peer that answers HTTP sessions and WHIP offers", \.sessionAnswerRole),
        .int("max_peers_per_room", "peers a room seats unless the token sets max_peers (then 409 room_full); 0 = unlimited",
             \.maxPeersPerRoom, 0...1_000_000),
        .int("signaling_requests_per_minute", "HTTP session/WHIP requests per minute from one address (then 429)",
             \.signalingRequestsPerMinute, 1...1_000_000),
        Key(name: "allowed_origins", help: "`*` or comma-separated origins allowed to call from browsers (CORS, WebSocket Origin)",
            apply: { config, value in
                let problems = CORSPolicy.problems(value)
                guard problems.isEmpty else { return problems.joined(separator: "; ") }
                guard !value.trimmingCharacters(in: .whitespaces).isEmpty else { return "allowed_origins: must not be empty (use * for any)" }
                config.allowedOrigins = value
                return nil
            }, show: { $0.allowedOrigins }),
        .optionalString("web_root", "folder served at /sdk/, / and /dashboard (default: found beside the binary)", \.webRoot),
        .bool("serve_pages", "serve the demo page at / and the dashboard at /dashboard", \.servePages),
        .bool("print_demo_links", "print demo and dashboard links with fresh dev tokens at start-up", \.printDemoLinks),
        .optionalString("webhook_urls", "comma-separated http:// or https:// URLs that receive webhook events", \.webhookURLsOptional),
        .optionalString("webhook_secret_file", "file with the webhook signing secret (or CALLING_WEBHOOK_SECRET)", \.webhookSecretFile),
        .string("webhook_events", "comma-separated event types to send, or all", \.webhookEvents),
        .bool("webhook_chat_messages", "also send chat_message for every stored chat", \.webhookChatMessages),
        .int("webhook_timeout_ms", "a delivery without a complete answer in this time has failed", \.webhookTimeoutMs, 100...120_000),
        .int("webhook_retry_base_ms", "wait before the first retry; doubled for each further one", \.webhookRetryBaseMs, 10...3_600_000),
        .int("webhook_retry_max_ms", "longest wait between two attempts", \.webhookRetryMaxMs, 10...86_400_000),
        .int("webhook_max_attempts", "attempts per delivery before it is given up", \.webhookMaxAttempts, 1...1_000),
        .int("webhook_queue_max", "deliveries queued at most (persisted); newer events are dropped", \.webhookQueueMax,
             1...10_000_000),
        .int("webhook_max_in_flight", "webhook requests in flight at once (one per room and URL)", \.webhookMaxInFlight, 1...1_024),
        .int("webhook_lease_ms", "with database_url: a node's claim on a queued delivery lasts this long unrenewed (a dead node's deliveries wait it out)",
             \.webhookLeaseMs, 1_000...3_600_000),
        .int("webhook_poll_ms", "with database_url: how often a node looks for queued deliveries no live node holds", \.webhookPollMs,
             10...60_000),
        .int("webhook_call_end_settle_ms", "in a cluster with database_url: a room without seats this long ends its call (call_ended)",
             \.webhookCallEndSettleMs, 0...600_000),
        Key(name: "cluster_redis_url", help: "redis:// URL of the Redis shared by the nodes of a cluster; unset runs one node alone",
            apply: { config, value in
                config.clusterRedisURL = value.isEmpty ? nil : value
                return nil
            }, show: { config in
                // A password in the URL is never shown.
                guard let url = config.clusterRedisURL else { return "" }
                return (try? RedisEndpoint(url: url))?.description ?? url
            }),
        .optionalString("node_id", "this node's id in the cluster, unique among the nodes (default: random node-… per start)", \.nodeID),
        .int("cluster_heartbeat_ms", "how often a node refreshes its heartbeat and checks the other nodes'", \.clusterHeartbeatMs,
             50...60_000),
        .int("cluster_node_ttl_ms", "heartbeat lifetime: a node silent this long (plus a heartbeat) is gone and its peers leave",
             \.clusterNodeTTLMs, 100...600_000),
        .int("cluster_redis_timeout_ms", "connect, read and write timeout of each Redis call", \.clusterRedisTimeoutMs, 50...60_000),
        .int("cluster_chat_gap_ms", "with database_url: a chat seq a local peer still misses after this long is read from the store and delivered",
             \.clusterChatGapMs, 10...600_000),
        .int("cluster_presence_resume_ms",
             "a new presence leader waits this long for both sides of a ringing request to connect again (else it ends, disconnected)",
             \.clusterPresenceResumeMs, 100...600_000),
        .int("cluster_forward_timeout_ms",
             "a PATCH or DELETE of an HTTP session or WHIP resource held by another node waits this long for that node's answer (then 504 session_owner_timeout); a PATCH carrying SDP waits session_answer_timeout_ms longer",
             \.clusterForwardTimeoutMs, 50...600_000),
    ]

    /// `CALLING_*` variables that are not server keys: the config file's name, and what
    /// `calling-server admin` reads (docs/protocol.md, "Admin API"). An operator exports them in
    /// the same shell that runs `serve`, so they must not count as unknown keys.
    public static let clientVariables: Set<String> = ["CALLING_CONFIG", "CALLING_ADMIN_KEY", "CALLING_ADMIN_URL"]

    /// Names that are secrets: never a config-file key, never a flag.
    static let secretNames: Set<String> = ["jwt_secret", "turn_secret", "webhook_secret"]

    /// Builds the configuration from its layers; returns every problem at once.
    public static func load(file: [String: JSONValue]?, environment: [String: String], flags: [String: String])
        -> Result<ServerConfig, ConfigProblems>
    {
        var config = ServerConfig()
        var problems: [String] = []
        let byName = Dictionary(uniqueKeysWithValues: keys.map { ($0.name, $0) })
        func apply(_ name: String, _ value: String, source: String) {
            guard let key = byName[name] else {
                problems.append("\(source): unknown key '\(name)'")
                return
            }
            if let problem = key.apply(&config, value) { problems.append("\(source): \(problem)") }
        }
        for (name, value) in (file ?? [:]).sorted(by: { $0.key < $1.key }) {
            if secretNames.contains(name) {
                problems.append("config file: '\(name)' may not be stored in the config file; use its CALLING_ environment variable or its _file key")
                continue
            }
            let text: String
            switch value {
            case .string(let s): text = s
            case .int(let i): text = String(i)
            case .double(let d): text = String(d)
            case .bool(let b): text = String(b)
            case .null: text = ""
            default:
                problems.append("config file: '\(name)' must be a string or number")
                continue
            }
            apply(name, text, source: "config file")
        }
        for (variable, value) in environment.sorted(by: { $0.key < $1.key }) where variable.hasPrefix("CALLING_") {
            let name = variable.dropFirst("CALLING_".count).lowercased()
            if name == "jwt_secret" {
                config.jwtSecret = value
                continue
            }
            if name == "turn_secret" {
                config.turnSecret = value
                continue
            }
            if name == "webhook_secret" {
                config.webhookSecret = value
                continue
            }
            if clientVariables.contains(variable) { continue }
            apply(name, value, source: "env \(variable)")
        }
        for (flag, value) in flags.sorted(by: { $0.key < $1.key }) {
            let name = flag.replacingOccurrences(of: "-", with: "_")
            if secretNames.contains(name) {
                problems.append("flag --\(flag): secrets are never passed as flags; use CALLING_\(name.uppercased()) or \(name)_file")
                continue
            }
            apply(name, value, source: "flag --\(flag)")
        }
        if config.idleHangupSeconds <= config.idlePingSeconds {
            problems.append("idle_hangup_seconds must be greater than idle_ping_seconds")
        }
        if config.maxSockets > 0, config.maxSockets <= config.healthReservedSockets {
            problems.append("max_sockets must be 0 or greater than health_reserved_sockets")
        }
        if config.historyDefaultLimit > config.historyMaxLimit {
            problems.append("history_default_limit must not exceed history_max_limit")
        }
        if config.sqliteWriterCatchUpPages < config.sqliteCheckpointPages {
            problems.append("sqlite_writer_catch_up_pages must not be below sqlite_checkpoint_pages")
        }
        if (config.tlsCertFile == nil) != (config.tlsKeyFile == nil) {
            problems.append("tls_cert_file and tls_key_file must be set together")
        }
        if config.tlsChainFile != nil, config.tlsCertFile == nil {
            problems.append("tls_chain_file needs tls_cert_file and tls_key_file")
        }
        problems += config.iceURLProblems
        problems += config.webhookProblems
        problems += config.clusterProblems
        return problems.isEmpty ? .success(config) : .failure(ConfigProblems(problems: problems))
    }

    /// The cluster keys checked together: a URL that parses, a heartbeat that fits in the TTL, a node
    /// id that is one token.
    var clusterProblems: [String] {
        var problems: [String] = []
        if let url = clusterRedisURL {
            do throws(RedisError) { _ = try RedisEndpoint(url: url) } catch { problems.append("cluster_redis_url: \(error.message)") }
        }
        if clusterNodeTTLMs <= clusterHeartbeatMs {
            problems.append("cluster_node_ttl_ms must be greater than cluster_heartbeat_ms")
        }
        if let nodeID {
            let allowed = nodeID.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
            if nodeID.isEmpty || nodeID.utf8.count > 64 || !allowed {
                problems.append("node_id must be 1 to 64 printable ASCII characters without spaces")
            }
        }
        return problems
    }

    /// `key = value` lines of the effective configuration, secrets masked.
    public var summary: [(String, String)] {
        Self.keys.map { ($0.name, $0.show(self)) } + [("jwt_secret", jwtSecret == nil ? "(unset)" : "(set, hidden)"),
                                                   ("turn_secret", turnSecret == nil ? "(unset)" : "(set, hidden)"),
                                                   ("webhook_secret", webhookSecret == nil ? "(unset)" : "(set, hidden)")]
    }

    /// Markdown table of every key, for docs/configuration.md (kept true by a test).
    public static var markdownTable: String {
        let defaults = ServerConfig()
        var lines = ["| key | env | default | meaning |", "| --- | --- | --- | --- |"]
        for key in keys {
            let shown = key.show(defaults)
            lines.append("| `\(key.name)` | `CALLING_\(key.name.uppercased())` | `\(shown.isEmpty ? "(unset)" : shown)` | \(key.help) |")
        }
        return lines.joined(separator: "\n")
    }
}

public struct ConfigProblems: Error, CustomStringConvertible, Equatable {
    public var problems: [String]
    public var description: String { "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n") }
}

extension ServerConfig.Key {
    static func string(_ name: String, _ help: String, _ path: WritableKeyPath<ServerConfig, String> & Sendable) -> Self {
        Self(name: name, help: help, apply: { config, value in
            guard !value.isEmpty else { return "\(name): must not be empty" }
            config[keyPath: path] = value
            return nil
        }, show: { $0[keyPath: path] })
    }

    static func optionalString(_ name: String, _ help: String, _ path: WritableKeyPath<ServerConfig, String?> & Sendable) -> Self {
        Self(name: name, help: help, apply: { config, value in
            config[keyPath: path] = value.isEmpty ? nil : value
            return nil
        }, show: { $0[keyPath: path] ?? "" })
    }

    static func bool(_ name: String, _ help: String, _ path: WritableKeyPath<ServerConfig, Bool> & Sendable) -> Self {
        Self(name: name, help: help, apply: { config, value in
            switch value.lowercased() {
            case "true", "1", "yes", "on": config[keyPath: path] = true
            case "false", "0", "no", "off": config[keyPath: path] = false
            default: return "\(name): '\(value)' is not true or false"
            }
            return nil
        }, show: { String($0[keyPath: path]) })
    }

    static func int(_ name: String, _ help: String, _ path: WritableKeyPath<ServerConfig, Int> & Sendable,
                    _ range: ClosedRange<Int>) -> Self
    {
        Self(name: name, help: help, apply: { config, value in
            guard let number = Int(value) else { return "\(name): '\(value)' is not an integer" }
            guard range.contains(number) else { return "\(name): \(number) is outside \(range.lowerBound)…\(range.upperBound)" }
            config[keyPath: path] = number
            return nil
        }, show: { String($0[keyPath: path]) })
    }

    static func double(_ name: String, _ help: String, _ path: WritableKeyPath<ServerConfig, Double> & Sendable,
                       _ range: ClosedRange<Double>) -> Self
    {
        Self(name: name, help: help, apply: { config, value in
            guard let number = Double(value), number.isFinite else { return "\(name): '\(value)' is not a number" }
            guard range.contains(number) else { return "\(name): \(number) is outside \(range.lowerBound)…\(range.upperBound)" }
            config[keyPath: path] = number
            return nil
        }, show: { value in
            let number = value[keyPath: path]
            return number.rounded() == number ? String(Int(number)) : String(number)
        })
    }
}
