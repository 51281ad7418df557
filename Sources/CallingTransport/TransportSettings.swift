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
    /// Seconds without any traffic before lws sends a WebSocket PING, and before it hangs up.
    public var idlePingSeconds: Int
    public var idleHangupSeconds: Int
    /// Seconds the service loop may go without draining its inbox before the watchdog exits.
    public var watchdogSeconds: Double
    /// Seconds a closing connection gets to flush and send its close frame before it is dropped.
    public var closeTimeoutSeconds = 2
    /// Most bytes of queued frames sent together in one write (see `writeCoalesced`).
    public var maxCoalescedBytes = 65_536
    /// Longest request target (path and query) accepted; longer ones get 414. At most
    /// `maxHeaderBytes` - 512, since the target is part of the head.
    public var maxURLBytes = 4_096
    /// Largest request head (target, header values, names of fields lws does not know); beyond, 431.
    public var maxHeaderBytes = 8_192
    /// Sockets of the socket budget kept for `/healthz`: once the others are in use, any other
    /// request gets 503 and the oldest socket still waiting for its request is dropped.
    public var healthReservedSockets = 8
    /// Seconds lws gives a new socket to send complete request headers (and a request its body).
    public var httpTimeoutSeconds = 10

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
