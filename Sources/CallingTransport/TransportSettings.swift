/// Transport limits and knobs; every one is a configuration key (docs/configuration.md).
public struct TransportSettings: Sendable {
    public enum EventLoop: String, Sendable, CaseIterable {
        /// lws's libev plugin: epoll underneath, cost per wakeup independent of connection count.
        case libev
        /// lws's built-in poll() loop: faster with few connections, linear in open sockets.
        case poll
    }

    public var host: String
    public var port: Int
    public var eventLoop: EventLoop
    /// Largest WebSocket message accepted; larger ones are dropped and answered with an error.
    public var maxFrameBytes: Int
    /// Outbound bytes queued for one connection before it is closed as a slow consumer.
    public var maxQueueBytes: Int
    /// Largest HTTP request body accepted (413 beyond).
    public var maxBodyBytes: Int
    /// Connections kept below the open-file limit for the store, logs and listening sockets.
    public var reservedFileDescriptors: Int
    /// Seconds after a WebSocket's upgrade or last PONG before the server sends a PING (the first
    /// one, after the upgrade, between half this and this), and before it hangs up on a socket
    /// that has not answered (`KeepAliveSchedule`).
    public var idlePingSeconds: Int
    public var idleHangupSeconds: Int
    /// Seconds the service loop may go without draining its inbox before the watchdog exits.
    public var watchdogSeconds: Double
    /// Seconds a closing connection gets to flush and send its close frame before it is dropped.
    public var closeTimeoutSeconds = 2
    /// Most bytes of queued frames sent together in one write (see `writeCoalesced`).
    public var maxCoalescedBytes = 65_536
    /// Inbound frames, upgrades and posted pieces of work the service thread handles before it
    /// writes what they queued, when the event loop keeps finding more (otherwise it writes once a
    /// wake-up's callbacks are done).
    public var flushAfterFrames = 256
    /// Longest request target (path and query) accepted; longer ones get 414. At most
    /// `maxHeaderBytes` - 512, since the target is part of the head.
    public var maxURLBytes = 4_096
    /// Largest request head (target, header values, names of fields lws does not know); beyond, 431.
    public var maxHeaderBytes = 8_192
    /// The socket budget's ceiling: the soft open-file limit is set to this plus
    /// `reservedFileDescriptors` (at least 1,024) where the hard limit is higher; 0 takes the hard
    /// limit. lws sizes
    /// its descriptor tables by that limit and scans one of them on every close, so the cost of a
    /// close grows with the limit (a container's hard limit is often 1,048,576).
    public var maxSockets = 65_536
    /// Sockets of the socket budget kept for `/healthz`: once the others are in use, any other
    /// request gets 503 and the oldest socket still waiting for its request is dropped.
    public var healthReservedSockets = 8
    /// Seconds a request body may go without a single byte before lws drops the socket (lws's
    /// `timeout_secs`, re-armed by every piece of body that arrives).
    public var httpTimeoutSeconds = 10
    /// Seconds a socket has to send a complete request head, from its accept or from the first
    /// byte of a keep-alive request (lws's header-table timer, `timeout_secs_ah_idle`).
    public var httpHeaderTimeoutSeconds = 10
    /// Seconds a keep-alive socket may wait between a response and the next request.
    public var httpKeepAliveTimeoutSeconds = 5
    /// Seconds a request body may take before `httpBodyMinBytesPerSecond` applies.
    public var httpBodyGraceSeconds = 10
    /// Least average rate (bytes per second since the head arrived) of a body past its grace;
    /// a slower body gets 408 and the connection is closed. 0: no minimum.
    public var httpBodyMinBytesPerSecond = 1_024
    /// Serve `https://` and `wss://` instead of `http://` and `ws://` on the same port; nil is plaintext.
    public var tls: TLSServerSettings?

    public init(host: String = "127.0.0.1", port: Int = 8080, eventLoop: EventLoop = .libev, maxFrameBytes: Int = 65_536,
                maxQueueBytes: Int = 1_048_576, maxBodyBytes: Int = 262_144, reservedFileDescriptors: Int = 128,
                idlePingSeconds: Int = 30, idleHangupSeconds: Int = 75, watchdogSeconds: Double = 10)
    {
        self.host = host
        self.port = port
        self.eventLoop = eventLoop
        self.maxFrameBytes = maxFrameBytes
        self.maxQueueBytes = maxQueueBytes
        self.maxBodyBytes = maxBodyBytes
        self.reservedFileDescriptors = reservedFileDescriptors
        self.idlePingSeconds = idlePingSeconds
        self.idleHangupSeconds = idleHangupSeconds
        self.watchdogSeconds = watchdogSeconds
    }
}

/// The server's TLS material and policy. The files must already have been validated (the server
/// does so with `TLSCertificateFiles` in CallingAuth): lws itself loads a certificate whose key
/// does not match without complaint.
public struct TLSServerSettings: Sendable, Equatable {
    public enum MinimumVersion: String, Sendable, CaseIterable {
        case tls12 = "1.2"
        case tls13 = "1.3"
    }

    /// PEM file with the leaf certificate followed by any intermediates (what lws loads, with
    /// `SSL_CTX_use_certificate_chain_file`). Reloads read the same path again.
    public var certificateChainFile: String
    /// Unencrypted PEM private key of the leaf.
    public var privateKeyFile: String
    public var minimumVersion: MinimumVersion
    /// OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's defaults, all AEAD).
    public var cipherList: String

    /// Forward-secret AEAD suites only: the "intermediate" TLS 1.2 list of Mozilla's server-side
    /// TLS guidelines (https://wiki.mozilla.org/Security/Server_Side_TLS).
    public static let defaultCipherList = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
        + "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:"
        + "ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384"

    public init(certificateChainFile: String, privateKeyFile: String, minimumVersion: MinimumVersion = .tls12,
                cipherList: String = TLSServerSettings.defaultCipherList)
    {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.minimumVersion = minimumVersion
        self.cipherList = cipherList
    }
}
