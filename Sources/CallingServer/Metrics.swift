import CallingCore
import CallingStore
import CallingTransport

/// Frames counted by type name. The room protocol's own types are counted by `FrameType` in an
/// inline array, without hashing the name: every inbound frame is counted here (an `Array` checked
/// its storage's uniqueness on every count; one slot per type, which MetricsTests holds to
/// `FrameType.allCases`), and so are the outbound frames the router writes from their parts (a
/// relayed frame, a stored chat and its ack). Other names (presence frames, and outbound frames
/// delivered as a `Frame`, which carries its type as a string) go to a short list whose last
/// entry used is tried first: a run of one type (a relay, a fan-out) costs one comparison of two
/// small strings per count instead of a hash. `/metrics` sees one map either way.
struct FrameCounts {
    private static let types = FrameType.allCases
    private var known = InlineArray<25, Int>(repeating: 0)
    private var other: [(name: String, count: Int)] = []
    private var last = 0

    mutating func count(_ type: FrameType, by amount: Int = 1) {
        known[Self.slot(type)] += amount
    }

    /// Where `type` is counted in `known`: its place in `FrameType.allCases` (MetricsTests holds
    /// the two together). A switch, since `allCases.firstIndex(of:)` went through the list on
    /// every count, once per inbound frame.
    @inline(__always)
    static func slot(_ type: FrameType) -> Int {
        switch type {
        case .welcome: return 0
        case .peerJoined: return 1
        case .peerLeft: return 2
        case .offer: return 3
        case .answer: return 4
        case .candidate: return 5
        case .data: return 6
        case .chat: return 7
        case .chatAck: return 8
        case .chatEdit: return 9
        case .chatDelete: return 10
        case .chatReact: return 11
        case .typing: return 12
        case .read: return 13
        case .meter: return 14
        case .stats: return 15
        case .ping: return 16
        case .pong: return 17
        case .error: return 18
        case .peerReconnecting: return 19
        case .peerResumed: return 20
        case .leave: return 21
        case .rpcRequest: return 22
        case .rpcAck: return 23
        case .rpcResponse: return 24
        }
    }

    mutating func count(named name: String, by amount: Int = 1) {
        // Lengths first: two different names (a chat's ack and its broadcast alternate) otherwise
        // went through String's slow comparison, which checks for equal but differently encoded text.
        let length = name.utf8.count
        if last < other.count, other[last].name.utf8.count == length, other[last].name == name {
            other[last].count += amount
            return
        }
        if let index = other.firstIndex(where: { $0.name.utf8.count == length && $0.name == name }) {
            other[index].count += amount
            last = index
            return
        }
        other.append((name, amount))
        last = other.count - 1
    }

    /// The count for `name`, nil when none was counted.
    subscript(name: String) -> Int? { byName[name] }

    /// Every type counted at least once, by name.
    var byName: [String: Int] {
        var result: [String: Int] = [:]
        for (name, count) in other { result[name, default: 0] += count }
        for (index, type) in Self.types.enumerated() where known[index] > 0 { result[type.rawValue, default: 0] += known[index] }
        return result
    }
}

/// Counters exposed at /metrics in Prometheus text format. Owned by the service thread.
///
/// `@exclusivity(unchecked)` on the counters every chat (or frame) moves: each access to a class's
/// stored property is otherwise checked at run time (`swift_beginAccess`, a thread-local lookup). They are touched only on the service thread, and each
/// access is a counter update that calls nothing, so there is no overlap for the check to find.
final class Metrics {
    @exclusivity(unchecked) var framesIn = FrameCounts()
    @exclusivity(unchecked) var framesOut = FrameCounts()
    var errors: [String: Int] = [:]
    var upgrades: [String: Int] = [:]
    var closes: [String: Int] = [:]
    var httpRequests: [String: Int] = [:]
    @exclusivity(unchecked) var chatStored = 0
    @exclusivity(unchecked) var chatDuplicates = 0
    var storeFailures = 0
    /// Joins refused before the upgrade by the hub's seat rules, by problem code (`room_full`, `draining`, `kicked`).
    var joinRefusals: [String: Int] = [:]
    /// From the hub's `storeChat` (the frame was just decoded) to the `chat-ack` queued after COMMIT,
    /// one observation per ack. Fixed buckets: recording is a few comparisons and one increment.
    @exclusivity(unchecked) var ackLatency = LatencyHistogram()
    /// From a batch's acks being posted on the store's queue (after its COMMIT) to the service
    /// thread running them: the hop back, one observation per batch.
    @exclusivity(unchecked) var ackDispatch = LatencyHistogram()

    /// `remotePeers`: seats in the hub that stand for peers on other nodes (cluster mode), not counted as this node's peers.
    func render(hub: Hub, transport: TransportCounters, connections: Int, capacity: Int, remotePeers: Int = 0) -> String {
        var out = ""
        func gauge(_ name: String, _ help: String, _ value: Int) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n\(name) \(value)\n"
        }
        func counter(_ name: String, _ help: String, _ value: Int) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n\(name) \(value)\n"
        }
        func labeled(_ name: String, _ help: String, _ label: String, _ values: [String: Int]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n"
            for key in values.keys.sorted() { out += "\(name){\(label)=\"\(key)\"} \(values[key] ?? 0)\n" }
        }
        gauge("calling_connections", "Open WebSocket connections.", connections)
        gauge("calling_peers", "Peers joined to a room on this node.", hub.peerCount - remotePeers)
        gauge("calling_rooms", "Rooms with at least one peer.", hub.roomCount)
        gauge("calling_peer_capacity", "Peers this process can hold (open-file limit minus reserve, at most max_sockets, minus the health headroom).", capacity)
        counter("calling_connections_accepted_total", "WebSocket connections accepted.", transport.accepted)
        counter("calling_queue_drops_total", "Connections closed because their outbound queue exceeded max_queue_bytes.",
                transport.closedSlowConsumer)
        counter("calling_capacity_rejections_total", "Upgrades refused with 503 at peer capacity.", transport.rejectedAtCapacity)
        counter("calling_sockets_refused_total", "Connections closed at accept: the socket budget was spent.",
                transport.socketsRefused)
        counter("calling_sockets_evicted_total", "Sockets still waiting for a request or its body, dropped to make room.",
                transport.socketsEvicted)
        counter("calling_http_rejected_total",
                "Requests the transport answered and closed itself (framing, size limits, methods, budget).",
                transport.requestsRejected)
        counter("calling_http_body_timeouts_total",
                "Of those, request bodies answered 408 for arriving slower than http_body_min_bytes_per_second.",
                transport.requestsTimedOut)
        counter("calling_bytes_out_total", "WebSocket payload bytes written.", transport.bytesOut)
        labeled("calling_ws_writes_total",
                "WebSocket writes, by path: flush (after a wake-up's callbacks) or writeable (a closing connection, or a socket that was full).",
                "path", ["flush": transport.writesFlushed, "writeable": transport.writesOnWriteable])
        counter("calling_tls_handshake_failures_total",
                "TLS connections closed before their handshake completed (refused certificate, version, cipher, or plaintext).",
                transport.tlsHandshakeFailures)
        if let notAfter = transport.tlsCertificateNotAfter {
            gauge("calling_tls_certificate_expiry_timestamp_seconds", "notAfter of the certificate being served (Unix time).",
                  Int(notAfter))
            counter("calling_tls_certificate_reloads_total", "Certificate reloads (SIGHUP) that succeeded.",
                    transport.tlsCertificateReloads)
        }
        labeled("calling_frames_in_total", "Frames received, by type.", "type", framesIn.byName)
        labeled("calling_frames_out_total", "Frames queued for delivery, by type (one per recipient).", "type", framesOut.byName)
        labeled("calling_errors_total", "Error frames sent, by code name.", "code", errors)
        labeled("calling_upgrades_total", "WebSocket upgrade outcomes.", "result", upgrades)
        labeled("calling_closes_total", "Server-initiated closes, by reason.", "reason", closes)
        labeled("calling_http_requests_total", "HTTP requests, by status.", "status", httpRequests)
        counter("calling_chat_stored_total", "Chat messages committed.", chatStored)
        counter("calling_chat_duplicates_total", "Chat retries answered with the original ack.", chatDuplicates)
        counter("calling_store_failures_total", "Store operations that failed.", storeFailures)
        labeled("calling_join_refusals_total", "Joins (WebSocket or HTTP session) refused for a seat, by code (room_full, draining, kicked, reserved_peer_id).",
                "code", joinRefusals)
        return out
    }

    /// The latency histograms: chat acks and their hop back (service thread), and the store's
    /// queue wait and group commits (the store's counters). Together they say where an ack's time
    /// went: waiting for the store, committing, or waiting for the service thread.
    func renderLatency(store: ChatStoreMetrics) -> String {
        ackLatency.prometheus(name: "calling_chat_ack_latency_seconds",
                              help: "Chat received (storeChat) to chat-ack queued, after its COMMIT.")
            + store.queueWait.prometheus(name: "calling_store_queue_wait_seconds",
                                         help: "Oldest chat of a group-commit drain: appended to the drain starting on the store's queue.")
            + store.commitLatency.prometheus(name: "calling_store_commit_latency_seconds",
                                             help: "Write and COMMIT of one group-commit batch of chats.")
            + ackDispatch.prometheus(name: "calling_chat_ack_dispatch_seconds",
                                     help: "A committed batch's acks posted from the store's queue to the service thread running them.")
    }
}
