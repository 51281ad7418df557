import CallingAuth
import CallingCore
import CallingStore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The events a webhook URL can receive (docs/operations.md, "Webhooks").
enum WebhookEventType: String, CaseIterable, Sendable {
    case callStarted = "call_started"
    case callEnded = "call_ended"
    case peerJoined = "peer_joined"
    case peerLeft = "peer_left"
    case sessionStarted = "session_started"
    case sessionEnded = "session_ended"
    case presenceRequestEnded = "presence_request_ended"
    case chatMessage = "chat_message"
    case presenceRequestRinging = "presence_request_ringing"
    case presenceAgentStatus = "presence_agent_status"

    /// A constant per case (no `allCases` lookup): `wants(.chatMessage)` runs for every stored chat.
    var bit: UInt32 {
        switch self {
        case .callStarted: return 1 << 0
        case .callEnded: return 1 << 1
        case .peerJoined: return 1 << 2
        case .peerLeft: return 1 << 3
        case .sessionStarted: return 1 << 4
        case .sessionEnded: return 1 << 5
        case .presenceRequestEnded: return 1 << 6
        case .chatMessage: return 1 << 7
        case .presenceRequestRinging: return 1 << 8
        case .presenceAgentStatus: return 1 << 9
        }
    }
}

extension ServerConfig {
    /// The events `webhook_events` and `webhook_chat_messages` select, as a bit mask of `WebhookEventType.bit`.
    var webhookEventMask: UInt32 {
        let names = Set(Self.list(webhookEvents))
        var mask: UInt32 = 0
        for type in WebhookEventType.allCases where type != .chatMessage && (names.contains("all") || names.contains(type.rawValue)) {
            mask |= type.bit
        }
        if webhookChatMessages { mask |= WebhookEventType.chatMessage.bit }
        return mask
    }

    var webhookQueueSettings: WebhookQueueSettings {
        WebhookQueueSettings(maxQueued: webhookQueueMax, maxAttempts: webhookMaxAttempts, retryBaseMs: Int64(webhookRetryBaseMs),
                             retryMaxMs: Int64(webhookRetryMaxMs), timeoutMs: Int64(webhookTimeoutMs),
                             maxInFlight: webhookMaxInFlight)
    }

    /// `webhook_*` values that parse one by one but make no sense together.
    var webhookProblems: [String] {
        var problems: [String] = []
        for url in webhookURLList {
            let lowered = url.lowercased()
            guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://"), let parsed = URL(string: url),
                parsed.host?.isEmpty == false
            else {
                problems.append("webhook_urls: '\(url.prefix(200))' is not an http:// or https:// URL with a host")
                continue
            }
        }
        let known = Set(WebhookEventType.allCases.map(\.rawValue)).subtracting([WebhookEventType.chatMessage.rawValue])
        for name in Self.list(webhookEvents) where name != "all" && !known.contains(name) {
            if name == WebhookEventType.chatMessage.rawValue {
                problems.append("webhook_events: chat_message is switched on with webhook_chat_messages = true, not listed here")
            } else {
                problems.append("webhook_events: unknown event '\(name.prefix(100))' (known: all, \(known.sorted().joined(separator: ", ")))")
            }
        }
        if webhookRetryBaseMs > webhookRetryMaxMs {
            problems.append("webhook_retry_base_ms must not exceed webhook_retry_max_ms")
        }
        // A claim renewed every third of its lease must outlast an attempt, or another node could
        // send the same delivery while the first attempt is still out.
        if !databaseURL.isEmpty, webhookLeaseMs < 2 * webhookTimeoutMs {
            problems.append("webhook_lease_ms must be at least twice webhook_timeout_ms")
        }
        return problems
    }

    /// The signing secret: `CALLING_WEBHOOK_SECRET`, else `webhook_secret_file` (whitespace trimmed).
    /// Nil when no URL is configured; a URL without a usable secret stops the start.
    func webhookSigner() throws(WebhookConfigError) -> WebhookSigner? {
        guard !webhookURLList.isEmpty else { return nil }
        let secret: String
        if let fromEnvironment = webhookSecret {
            secret = fromEnvironment
        } else if let path = webhookSecretFile {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw .unreadableSecretFile(path) }
            secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            throw .missingSecret
        }
        do throws(WebhookSigner.KeyError) {
            return try WebhookSigner(secret: secret)
        } catch {
            throw .badSecret(error)
        }
    }
}

enum WebhookConfigError: Error, CustomStringConvertible {
    case missingSecret
    case unreadableSecretFile(String)
    case badSecret(WebhookSigner.KeyError)

    var description: String {
        switch self {
        case .missingSecret:
            return "webhook_urls is set but there is no webhook secret: set CALLING_WEBHOOK_SECRET or webhook_secret_file"
        case .unreadableSecretFile(let path): return "cannot read the webhook secret file \(path)"
        case .badSecret(let error): return error.description
        }
    }
}

// MARK: - HTTP

/// One attempt in flight, which the driver abandons when it times out.
protocol WebhookRequest: Sendable {
    func cancel()
}

/// Sends one webhook POST. The completion runs on any thread, exactly once unless cancelled first,
/// with nil for a 2xx answer. https is whatever the implementation's TLS supports.
protocol WebhookTransport: Sendable {
    func post(url: URL, headers: [(String, String)], body: [UInt8],
              completion: @escaping @Sendable (WebhookFailure?) -> Void) -> any WebhookRequest
}

/// POSTs through Foundation's URLSession (FoundationNetworking, libcurl underneath on Linux): plain
/// HTTP and https with the system trust store. No C library is imported here; WebSocket traffic
/// stays on libwebsockets. Redirects are not followed: a 3xx is a failed attempt, so a receiver
/// cannot bounce signed events to another host.
final class URLSessionWebhookTransport: WebhookTransport {
    private let session: URLSession

    /// Refuses every redirect, so the 3xx answer itself completes the task.
    // @unchecked Sendable: no stored state; URLSession calls it on its delegate queue.
    private final class NoRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                        newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void)
        {
            completionHandler(nil)
        }
    }

    private struct Task: WebhookRequest {
        let task: URLSessionDataTask
        func cancel() { task.cancel() }
    }

    init(timeoutMs: Int, maxConnectionsPerHost: Int) {
        let configuration = URLSessionConfiguration.ephemeral
        // The queue's own deadline (`webhook_timeout_ms`) decides; URLSession's idle timeout only backs it up.
        let timeout = Double(timeoutMs) / 1_000 + 1
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        session = URLSession(configuration: configuration, delegate: NoRedirects(), delegateQueue: nil)
    }

    func post(url: URL, headers: [(String, String)], body: [UInt8],
              completion: @escaping @Sendable (WebhookFailure?) -> Void) -> any WebhookRequest
    {
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("calling-server-webhooks/1", forHTTPHeaderField: "User-Agent")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let task = session.dataTask(with: request) { _, response, error in
            if let error {
                let failure = error as NSError
                if failure.code == NSURLErrorCancelled { return }  // abandoned by the driver after its deadline
                if failure.code == NSURLErrorTimedOut { return completion(.timeout) }
                // e.g. "NSURLErrorDomain -1202 The certificate for this server is invalid…"
                return completion(.transport("\(failure.domain) \(failure.code) \(failure.localizedDescription.prefix(200))"))
            }
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            completion((200..<300).contains(status) ? nil : .status(status))
        }
        task.resume()
        return Task(task: task)
    }

    func invalidate() { session.invalidateAndCancel() }
}

// MARK: - counters

/// What `/metrics` shows of the webhook queue. Written on the webhook queue, read by the service thread.
struct WebhookCounters: Sendable {
    var delivered = 0
    /// Failed attempts by `WebhookFailure.label`.
    var failures: [String: Int] = [:]
    var gaveUp = 0
    /// Events not queued because the queue was full (or could not be written).
    var dropped = 0
    var depth = 0
    var inFlight = 0
}

// MARK: - driver

/// The webhook sender: a thin driver around `WebhookQueue`. It runs on its own serial queue
/// (`calling.webhooks`), persists through the store's queue and sends through `WebhookTransport`,
/// so nothing here ever runs on, or waits on, the libwebsockets service thread. The service thread
/// only calls `emit`, which appends to a locked list and, when the list was empty, schedules one
/// drain on the webhook queue.
// @unchecked Sendable: `machine`, `requests`, `timer`, `stopped` and `lastDropLog` are touched only on
// `queue`; `inbox` and `counters` are `Locked`; the rest is immutable.
final class Webhooks: @unchecked Sendable {
    struct Event: Sendable {
        var type: WebhookEventType
        var key: String
        var data: [String: JSONValue]
        var at: Millis
    }

    /// A cluster's shared outbox (`database_url`): which node this is and how long its claims last.
    struct Sharing: Sendable {
        var node: String
        var leaseMs: Int64
        var pollMs: Int
        /// How long a room stays without seats before its call ends (`SharedCallLifecycle`).
        var callEndSettleMs: Int64
        /// The rooms' calls across the cluster; nil on a node alone, which counts them in memory.
        var lifecycle: (any SharedCallLifecycle)?
    }

    private let urls: [(text: String, url: URL)]
    private let mask: UInt32
    private let signer: WebhookSigner?
    private let store: any WebhookOutbox
    /// Set with `database_url`: deliveries are claimed from the shared outbox rather than held
    /// from the moment they are written.
    let sharing: Sharing?
    private let transport: any WebhookTransport
    private let logger: Logger
    private let now: @Sendable () -> Millis
    private let queue = DispatchQueue(label: "calling.webhooks")

    private var machine: WebhookQueue
    private var requests: [Int64: (attempt: Int, request: any WebhookRequest)] = [:]
    private var timer: DispatchSourceTimer?
    /// Shared outbox only: the poll and renewal timer, and whether a claim is out (and another asked for).
    private var pollTimer: DispatchSourceTimer?
    private var claiming = false
    private var claimAgain = false
    private var lastRenew: Millis = 0
    private var endingCalls = false
    private var stopped = false
    private var lastDropLog: Millis = 0
    private var droppedSinceLog = 0

    private let inbox = Locked<(events: [Event], scheduled: Bool)>(([], false))
    private let counters = Locked(WebhookCounters())
    /// Set when the server begins its graceful stop: rooms emptied by it end with `server_shutdown`.
    let stopping = Atomic<Bool>(false)

    init(config: ServerConfig, signer: WebhookSigner?, store: any WebhookOutbox, sharing: Sharing? = nil, logger: Logger,
         transport: (any WebhookTransport)? = nil, now: @escaping @Sendable () -> Millis)
    {
        self.sharing = sharing
        urls = config.webhookURLList.compactMap { text in URL(string: text).map { (text, $0) } }
        mask = urls.isEmpty || signer == nil ? 0 : config.webhookEventMask
        self.signer = signer
        self.store = store
        self.logger = logger
        self.now = now
        self.transport = transport
            ?? URLSessionWebhookTransport(timeoutMs: config.webhookTimeoutMs, maxConnectionsPerHost: config.webhookMaxInFlight)
        machine = WebhookQueue(settings: config.webhookQueueSettings)
    }

    /// The graceful stop has begun (main thread); read on the service thread for `call_ended.reason`.
    func beginStopping() { stopping.store(true, ordering: .relaxed) }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Whether `type` is sent at all. Service thread; a load and a mask, so callers test it before
    /// building an event's data.
    @inline(__always) func wants(_ type: WebhookEventType) -> Bool { mask & type.bit != 0 }

    var isEnabled: Bool { mask != 0 }

    var snapshot: WebhookCounters { counters.withLock { $0 } }

    /// Prometheus lines for `/metrics` (present, at zero, when webhooks are off).
    var metricsText: String {
        let counters = snapshot
        var out = ""
        func metric(_ name: String, _ type: String, _ help: String, _ value: Int) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        metric("calling_webhook_queue_depth", "gauge", "Webhook deliveries queued (persisted), in flight included.", counters.depth)
        metric("calling_webhook_in_flight", "gauge", "Webhook requests in flight.", counters.inFlight)
        metric("calling_webhook_deliveries_total", "counter", "Webhook deliveries answered with 2xx.", counters.delivered)
        out += "# HELP calling_webhook_failures_total Failed webhook attempts, by reason.\n# TYPE calling_webhook_failures_total counter\n"
        for key in counters.failures.keys.sorted() {
            out += "calling_webhook_failures_total{reason=\"\(key)\"} \(counters.failures[key] ?? 0)\n"
        }
        metric("calling_webhook_given_up_total", "counter", "Webhook deliveries dropped after webhook_max_attempts.", counters.gaveUp)
        metric("calling_webhook_dropped_total", "counter", "Webhook events not queued: the queue was full (webhook_queue_max).",
               counters.dropped)
        return out
    }

    /// Loads what a previous run left queued and starts sending it. Deliveries for URLs that are no
    /// longer configured are discarded (and counted in the log line). Start-up only: waits on the store.
    ///
    /// With a shared outbox nothing is loaded: this node claims lane heads as it goes, and lets go
    /// at once of what a previous run under the same node id held.
    func start() throws {
        guard isEnabled else { return }
        let configured = Set(urls.map(\.text))
        let store = self.store
        let discarded = try store.wait { store.discardWebhooks(keepingURLs: configured, completion: $0) }
        if discarded > 0 {
            logger.warning("webhook deliveries for URLs no longer configured discarded", ["count": "\(discarded)"])
        }
        var kept: [WebhookDelivery] = []
        if let sharing {
            let released = try store.wait { store.releaseWebhookClaims(node: sharing.node, completion: $0) }
            if released > 0 { logger.info("webhook claims of this node's previous run released", ["count": "\(released)"]) }
        } else {
            kept = try store.wait { store.pendingWebhooks(completion: $0) }
            if !kept.isEmpty { logger.info("webhook deliveries restored", ["count": "\(kept.count)"]) }
        }
        queue.sync {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { [self] in run(.tick) }
            timer.resume()
            self.timer = timer
            if let sharing {
                let poll = DispatchSource.makeTimerSource(queue: queue)
                poll.schedule(deadline: .now(), repeating: .milliseconds(sharing.pollMs))
                poll.setEventHandler { [self] in pollShared() }
                poll.resume()
                pollTimer = poll
            }
            run(.restore(kept))
        }
    }

    /// Queues one event for every configured URL. Service thread (or any thread); never blocks
    /// beyond a short lock.
    func emit(_ type: WebhookEventType, key: String, _ data: [String: JSONValue]) {
        guard wants(type) else { return }
        let event = Event(type: type, key: key, data: data, at: now())
        let schedule = inbox.withLock { state -> Bool in
            state.events.append(event)
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if schedule { queue.async { [self] in drainInbox() } }
    }

    /// Graceful stop, after the service thread has stopped and before the store closes: queues what
    /// was emitted, gives attempts in flight up to `grace` seconds to finish, then stops sending. What
    /// is still queued stays in the store for the next start.
    func stop(grace: TimeInterval = 2) {
        guard isEnabled else { return }
        queue.sync { drainInbox() }
        let deadline = Date().addingTimeInterval(grace)
        while Date() < deadline, queue.sync(execute: { !requests.isEmpty }) {
            Thread.sleep(forTimeInterval: 0.01)
        }
        queue.sync {
            drainInbox()
            stopped = true
            for entry in requests.values { entry.request.cancel() }
            requests = [:]
            timer?.cancel()
            timer = nil
            pollTimer?.cancel()
            pollTimer = nil
        }
        (transport as? URLSessionWebhookTransport)?.invalidate()
    }

    // MARK: on `queue`

    private func drainInbox() {
        let events = inbox.withLock { state -> [Event] in
            state.scheduled = false
            let taken = state.events
            state.events = []
            return taken
        }
        guard !events.isEmpty, !stopped else { return }
        var drafts: [WebhookDraft] = []
        drafts.reserveCapacity(events.count * urls.count)
        for event in events {
            let id = Self.eventID()
            let body = JSONWriter.bytes(["id": .string(id), "type": .string(event.type.rawValue), "timestamp": .int(event.at),
                                         "data": .object(event.data)])
            for url in urls {
                drafts.append(WebhookDraft(id: id, url: url.text, key: event.key, eventType: event.type.rawValue, body: body,
                                           createdAt: event.at))
            }
        }
        run(.offer(drafts))
    }

    private func run(_ input: WebhookQueueInput) {
        guard !stopped else { return }
        let current = now()
        let effects = machine.handle(input, now: current)
        var deletes: [Int64] = []
        for effect in effects {
            switch effect {
            case .persist(let drafts):
                let shared = sharing != nil
                store.enqueueWebhooks(drafts) { [self] result in
                    queue.async { [self] in
                        switch result {
                        case .success(let deliveries) where shared:
                            // Written for whichever node claims their lanes; most often this one, now.
                            run(.handedOff(count: deliveries.count))
                            claimShared()
                        case .success(let deliveries):
                            run(.stored(deliveries))
                        case .failure(let error):
                            counters.withLock { $0.dropped += drafts.count }
                            logger.error("webhook events not queued", ["count": "\(drafts.count)", "error": "\(error)"])
                            run(.storeFailed(count: drafts.count))
                        }
                    }
                }
            case .drop(let draft):
                counters.withLock { $0.dropped += 1 }
                droppedSinceLog += 1
                // One line per second at most: a full queue under a chat flood would otherwise log per message.
                if current - lastDropLog >= 1_000 {
                    logger.warning("webhook queue full; events dropped",
                                   ["dropped": "\(droppedSinceLog)", "queue_max": "\(machine.settings.maxQueued)",
                                    "event": draft.eventType])
                    lastDropLog = current
                    droppedSinceLog = 0
                }
            case .send(let delivery):
                send(delivery)
            case .cancel(let seq):
                requests.removeValue(forKey: seq)?.request.cancel()
            case .delivered(let delivery):
                counters.withLock { $0.delivered += 1 }
                deletes.append(delivery.seq)
            case .attemptFailed(let delivery, let failure, let retryAt):
                counters.withLock { $0.failures[failure.label, default: 0] += 1 }
                var metadata: Logger.Metadata = ["webhook.id": delivery.id, "event": delivery.eventType,
                                                 "attempt": "\(delivery.attempts)", "reason": Self.describe(failure)]
                if let retryAt {
                    metadata["retry_in_ms"] = "\(retryAt - current)"
                    logger.info("webhook attempt failed", metadata)
                    let seq = delivery.seq
                    let attempts = delivery.attempts
                    store.rescheduleWebhook(seq: seq, attempts: attempts, nextAttemptMs: retryAt) { [logger] result in
                        if case .failure(let error) = result { logger.error("webhook retry not recorded", ["error": "\(error)"]) }
                    }
                } else {
                    counters.withLock { $0.gaveUp += 1 }
                    logger.warning("webhook delivery given up", metadata)
                    deletes.append(delivery.seq)
                }
            }
        }
        if !deletes.isEmpty {
            let seqs = deletes
            let shared = sharing != nil
            store.removeWebhooks(seqs: seqs) { [self] result in
                if case .failure(let error) = result { logger.error("webhook delivery not removed", ["error": "\(error)"]) }
                // A removed head lets its lane's next row be claimed, by this node or another.
                if shared { queue.async { [self] in claimShared() } }
            }
        }
        let depth = machine.depth
        let inFlight = machine.inFlight
        counters.withLock {
            $0.depth = depth
            $0.inFlight = inFlight
        }
        if let deadline = machine.nextDeadline {
            timer?.schedule(deadline: .now() + .milliseconds(Int(max(1, min(deadline - current, 86_400_000)))))
        } else {
            timer?.schedule(deadline: .distantFuture)
        }
    }

    // MARK: shared outbox, on `queue`

    /// The poll timer: renews this node's claims every third of their lease, ends the calls of
    /// rooms that stayed empty (one ask at a time), then claims.
    private func pollShared() {
        guard let sharing, !stopped else { return }
        let current = now()
        if let lifecycle = sharing.lifecycle, !endingCalls {
            endingCalls = true
            lifecycle.endSettledCalls(nowMs: current, settleMs: sharing.callEndSettleMs, drafts: lifecycleDrafts) { [self] result in
                queue.async { [self] in
                    endingCalls = false
                    switch result {
                    case .success(let ended): if ended > 0 { claimShared() }
                    case .failure(let error): logger.error("settled calls not ended", ["error": "\(error)"])
                    }
                }
            }
        }
        if current - lastRenew >= sharing.leaseMs / 3 {
            lastRenew = current
            store.renewWebhookClaims(node: sharing.node, nowMs: current, leaseMs: sharing.leaseMs) { [logger] result in
                if case .failure(let error) = result { logger.error("webhook claims not renewed", ["error": "\(error)"]) }
            }
        }
        claimShared()
    }

    /// Claims the lane heads no live node holds, up to what this node may hold (`webhook_queue_max`,
    /// at most a hundred at a time), and starts sending them. One claim out at a time; a request
    /// meanwhile runs one more after it.
    private func claimShared() {
        guard let sharing, !stopped else { return }
        if claiming {
            claimAgain = true
            return
        }
        let limit = min(100, machine.settings.maxQueued - machine.depth)
        guard limit > 0 else { return }
        claiming = true
        store.claimWebhooks(node: sharing.node, nowMs: now(), leaseMs: sharing.leaseMs, limit: limit) { [self] result in
            queue.async { [self] in
                claiming = false
                switch result {
                case .success(let claimed):
                    if !claimed.isEmpty { run(.restore(claimed)) }
                    // A full page may have left more behind it.
                    if claimAgain || claimed.count == limit {
                        claimAgain = false
                        claimShared()
                    }
                case .failure(let error):
                    claimAgain = false
                    logger.error("webhook deliveries not claimed", ["error": "\(error)"])
                }
            }
        }
    }

    /// With a cluster's shared lifecycle: records seats that started or ended on this node; the
    /// store decides the events (`call_started` once per room across nodes, …) and writes their
    /// deliveries in the same transaction. Service thread or any; never blocks.
    func recordSeats(_ changes: [LifecycleSeatChange]) {
        guard isEnabled, let sharing, let lifecycle = sharing.lifecycle, !changes.isEmpty else { return }
        lifecycle.recordSeats(changes, node: sharing.node, nowMs: now(), drafts: lifecycleDrafts) { [self] result in
            switch result {
            case .success: queue.async { [self] in claimShared() }
            case .failure(let error):
                counters.withLock { $0.dropped += changes.count }
                logger.error("seat changes not recorded: their webhook events are lost", ["count": "\(changes.count)", "error": "\(error)"])
            }
        }
    }

    /// With a cluster's shared lifecycle: ends the seats of the nodes not in `alive` (dead), or of
    /// this node's previous run (nil), once across the cluster, with their `peer_left`; a room this
    /// empties ends (reason `node_lost`) once it has stayed empty for the settle time. `completion` gets the nodes whose
    /// seats were ended, on the store's queue.
    func endSeats(ofNodesNotIn alive: Set<String>?, completion: @escaping @Sendable (Result<[String], StoreError>) -> Void) {
        guard isEnabled, let sharing, let lifecycle = sharing.lifecycle else { return completion(.success([])) }
        lifecycle.endSeats(ofNodesNotIn: alive, node: sharing.node, nowMs: now(), reason: "node_lost", drafts: lifecycleDrafts) { [self] result in
            if case .success(let nodes) = result, !nodes.isEmpty { queue.async { [self] in claimShared() } }
            completion(result)
        }
    }

    /// The drafts of decided lifecycle events: the events this server sends, one per URL. Pure;
    /// runs on the store's queue.
    private var lifecycleDrafts: LifecycleDrafts {
        { [urls, mask] events, at in
            var drafts: [WebhookDraft] = []
            for shared in events {
                let (type, key, data) = Self.lifecycleEvent(shared.event, transport: shared.transport)
                guard mask & type.bit != 0 else { continue }
                let id = Self.eventID()
                let body = JSONWriter.bytes(["id": .string(id), "type": .string(type.rawValue), "timestamp": .int(at), "data": .object(data)])
                for url in urls {
                    drafts.append(WebhookDraft(id: id, url: url.text, key: key, eventType: type.rawValue, body: body, createdAt: at))
                }
            }
            return drafts
        }
    }

    /// A room's lifecycle event as a webhook: its type, ordering key and `data`
    /// (docs/operations.md, "Webhooks").
    static func lifecycleEvent(_ event: CallLifecycle.Event, transport: String) -> (WebhookEventType, String, [String: JSONValue]) {
        func base(_ call: CallLifecycle.Call) -> [String: JSONValue] {
            ["room_id": .string(call.room.rawValue), "call_id": call.call.map { .string($0.rawValue) } ?? .null,
             "started_at": .int(call.startedAt)]
        }
        func peer(_ identity: PeerIdentity, _ call: CallLifecycle.Call) -> [String: JSONValue] {
            var data = base(call)
            data["peer_id"] = .string(identity.peer.rawValue)
            data["role"] = .string(identity.role)
            data["name"] = identity.name.map(JSONValue.string) ?? .null
            data["transport"] = .string(transport)
            return data
        }
        switch event {
        case .callStarted(let call):
            return (.callStarted, call.room.rawValue, base(call))
        case .peerJoined(let identity, let call):
            return (.peerJoined, call.room.rawValue, peer(identity, call))
        case .peerLeft(let identity, let call):
            return (.peerLeft, call.room.rawValue, peer(identity, call))
        case .callEnded(let call, let endedAt, let reason):
            var data = base(call)
            data["ended_at"] = .int(endedAt)
            data["duration_ms"] = .int(endedAt - call.startedAt)
            data["reason"] = .string(reason)
            return (.callEnded, call.room.rawValue, data)
        }
    }

    private func send(_ delivery: WebhookDelivery) {
        guard let signer, let url = urls.first(where: { $0.text == delivery.url })?.url else {
            // Not reachable: start() keeps only configured URLs. Give the attempt back as failed.
            return run(.completed(seq: delivery.seq, attempt: delivery.attempts, .transport("unconfigured")))
        }
        let timestamp = now() / 1_000
        let headers = signer.headers(id: delivery.id, timestamp: timestamp, body: delivery.body)
        let seq = delivery.seq
        let attempt = delivery.attempts
        let request = transport.post(url: url, headers: headers, body: delivery.body) { [self] failure in
            queue.async { [self] in
                // A late answer to an abandoned attempt must not forget the retry that replaced it.
                if requests[seq]?.attempt == attempt { requests[seq] = nil }
                run(.completed(seq: seq, attempt: attempt, failure))
            }
        }
        requests[seq] = (attempt, request)
    }

    private static func describe(_ failure: WebhookFailure) -> String {
        switch failure {
        case .status(let code): return "status \(code)"
        case .timeout: return "timeout"
        case .transport(let detail): return detail
        }
    }

    /// `msg_` and 24 hex digits (96 bits) from OpenSSL's CSPRNG.
    static func eventID() -> String {
        let digits = Array("0123456789abcdef".utf8)
        var id = Array("msg_".utf8)
        for byte in SecureRandom.bytes(12) {
            id.append(digits[Int(byte >> 4)])
            id.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: id, as: UTF8.self)
    }
}
