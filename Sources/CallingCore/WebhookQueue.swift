/// An event body on its way to one webhook URL, as kept in the persisted queue.
public struct WebhookDelivery: Sendable, Equatable {
    /// Queue order: the SQLite rowid, ascending in the order events were emitted.
    public var seq: Int64
    /// `webhook-id`: the event's id, the same for every URL it goes to and for every retry.
    public var id: String
    public var url: String
    /// Deliveries with the same `url` and `key` (a room, or `presence`) go out one at a time, in `seq` order.
    public var key: String
    public var eventType: String
    /// The exact JSON body; it is signed afresh on every attempt (the timestamp changes).
    public var body: [UInt8]
    /// Attempts made so far (including one in flight).
    public var attempts: Int
    /// Not sent before this time (a retry's backoff).
    public var nextAttemptAt: Millis

    public init(seq: Int64, id: String, url: String, key: String, eventType: String, body: [UInt8], attempts: Int = 0,
                nextAttemptAt: Millis)
    {
        self.seq = seq
        self.id = id
        self.url = url
        self.key = key
        self.eventType = eventType
        self.body = body
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
    }
}

/// A delivery not yet persisted (no `seq`).
public struct WebhookDraft: Sendable, Equatable {
    public var id: String
    public var url: String
    public var key: String
    public var eventType: String
    public var body: [UInt8]
    public var createdAt: Millis

    public init(id: String, url: String, key: String, eventType: String, body: [UInt8], createdAt: Millis) {
        self.id = id
        self.url = url
        self.key = key
        self.eventType = eventType
        self.body = body
        self.createdAt = createdAt
    }

    public func delivery(seq: Int64) -> WebhookDelivery {
        WebhookDelivery(seq: seq, id: id, url: url, key: key, eventType: eventType, body: body, nextAttemptAt: createdAt)
    }
}

/// Why one attempt did not count as delivered.
public enum WebhookFailure: Sendable, Equatable {
    /// The receiver answered with a status outside 200–299.
    case status(Int)
    /// No complete answer within `timeoutMs`.
    case timeout
    /// Connection refused, reset, DNS, TLS…: no HTTP status at all.
    case transport(String)

    /// A short, bounded label for metrics (`status_5xx`, `timeout`, `transport`).
    public var label: String {
        switch self {
        case .status(let code): return "status_\(code / 100)xx"
        case .timeout: return "timeout"
        case .transport: return "transport"
        }
    }
}

public struct WebhookQueueSettings: Sendable, Equatable {
    /// Deliveries held at most (persisted plus being persisted); further events are dropped.
    public var maxQueued: Int
    /// Attempts per delivery before it is given up.
    public var maxAttempts: Int
    /// Delay before the first retry; doubled for each further one, up to `retryMaxMs`.
    public var retryBaseMs: Int64
    public var retryMaxMs: Int64
    /// An attempt without a complete answer after this long has failed (`timeout`).
    public var timeoutMs: Int64
    /// Attempts in flight at once, over all URLs and keys.
    public var maxInFlight: Int

    public init(maxQueued: Int = 10_000, maxAttempts: Int = 12, retryBaseMs: Int64 = 1_000, retryMaxMs: Int64 = 300_000,
                timeoutMs: Int64 = 5_000, maxInFlight: Int = 8)
    {
        self.maxQueued = maxQueued
        self.maxAttempts = maxAttempts
        self.retryBaseMs = retryBaseMs
        self.retryMaxMs = retryMaxMs
        self.timeoutMs = timeoutMs
        self.maxInFlight = maxInFlight
    }

    /// The wait after the `attempts`-th failed attempt: base, 2·base, 4·base, … capped at `retryMaxMs`.
    public func backoff(afterAttempts attempts: Int) -> Int64 {
        let doublings = max(0, attempts - 1)
        guard doublings < 40 else { return retryMaxMs }
        let (delay, overflow) = retryBaseMs.multipliedReportingOverflow(by: Int64(1) << Int64(doublings))
        return overflow ? retryMaxMs : min(retryMaxMs, delay)
    }
}

public enum WebhookQueueInput: Sendable {
    /// The deliveries found in the store at start, in any order.
    case restore([WebhookDelivery])
    /// New events (one draft per URL) to admit into the queue.
    case offer([WebhookDraft])
    /// The store committed admitted drafts; `seq` order is their order.
    case stored([WebhookDelivery])
    /// The store could not persist `count` admitted drafts: they are lost, their room is released.
    case storeFailed(count: Int)
    /// `count` admitted drafts were written to a shared outbox, where whichever node claims their
    /// lane's head sends them: their room here is released, and they come back as `.restore`d
    /// deliveries when this node claims them.
    case handedOff(count: Int)
    /// An attempt ended: `nil` for a 2xx answer, else why it failed.
    case completed(seq: Int64, attempt: Int, WebhookFailure?)
    /// Time passed: timeouts and due retries.
    case tick
}

public enum WebhookQueueEffect: Sendable, Equatable {
    /// Write these admitted drafts to the store, in order; answer with `.stored` or `.storeFailed`.
    case persist([WebhookDraft])
    /// The queue is full: this draft is not kept.
    case drop(WebhookDraft)
    /// Make one attempt; `delivery.attempts` counts it. Answer with `.completed(seq, attempt:)`.
    case send(WebhookDelivery)
    /// Abandon the attempt in flight for `seq` (it timed out); a late answer is ignored.
    case cancel(seq: Int64)
    /// A 2xx answer: remove the delivery from the store.
    case delivered(WebhookDelivery)
    /// An attempt failed. With `retryAt` the store records the attempt count and time; with nil the
    /// delivery has used `maxAttempts` and is removed (given up).
    case attemptFailed(WebhookDelivery, WebhookFailure, retryAt: Millis?)
}

/// The webhook queue's decisions, as a pure state machine: which delivery goes next, when a failed
/// one is retried, when one is given up, and what is dropped when the queue is full. It holds no
/// socket, thread, disk or clock; the driver (`Webhooks` in CallingServer) persists, sends and
/// feeds back what happened.
///
/// Order: deliveries to one URL with one key form a lane. A lane has at most one attempt in flight
/// and its head must be delivered (or given up) before the next one is sent, so a receiver sees
/// one room's events in the order they happened even across retries and restarts. Lanes are
/// independent: a room whose deliveries keep failing does not hold up another room.
public struct WebhookQueue: Sendable {
    struct Lane: Sendable {
        var items: [WebhookDelivery] = []
        var head = 0
        /// The attempt in flight for the head, with its deadline.
        var inFlight: (attempt: Int, deadline: Millis)?

        var first: WebhookDelivery? { head < items.count ? items[head] : nil }
        var isEmpty: Bool { head >= items.count }
        var count: Int { items.count - head }

        mutating func popFirst() {
            head += 1
            // Compacts now and then, so a long lane does not cost O(n) per delivery.
            if head > 64 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
        }
    }

    public let settings: WebhookQueueSettings
    private var lanes: [String: Lane] = [:]
    /// The lane of each queued seq.
    private var laneOf: [Int64: String] = [:]
    /// Admitted but not yet stored.
    private var reserved = 0
    private var inFlightCount = 0

    public init(settings: WebhookQueueSettings) {
        self.settings = settings
    }

    /// Deliveries held (stored and being stored): the queue depth.
    public var depth: Int { laneOf.count + reserved }
    public var inFlight: Int { inFlightCount }

    /// The earliest time at which `.tick` has something to do (a timeout or a due retry), or nil.
    public var nextDeadline: Millis? {
        var earliest: Millis?
        for lane in lanes.values {
            let candidate: Millis?
            if let flight = lane.inFlight {
                candidate = flight.deadline
            } else {
                candidate = lane.first?.nextAttemptAt
            }
            if let candidate, candidate < (earliest ?? .max) { earliest = candidate }
        }
        return earliest
    }

    public mutating func handle(_ input: WebhookQueueInput, now: Millis) -> [WebhookQueueEffect] {
        var effects: [WebhookQueueEffect] = []
        switch input {
        case .restore(let deliveries):
            for delivery in deliveries.sorted(by: { $0.seq < $1.seq }) { insert(delivery) }
        case .offer(let drafts):
            var admitted: [WebhookDraft] = []
            for draft in drafts {
                if depth < settings.maxQueued {
                    reserved += 1
                    admitted.append(draft)
                } else {
                    effects.append(.drop(draft))
                }
            }
            if !admitted.isEmpty { effects.append(.persist(admitted)) }
        case .stored(let deliveries):
            reserved = max(0, reserved - deliveries.count)
            for delivery in deliveries { insert(delivery) }
        case .storeFailed(let count), .handedOff(let count):
            reserved = max(0, reserved - count)
        case .completed(let seq, let attempt, let failure):
            effects += complete(seq: seq, attempt: attempt, failure: failure, now: now)
        case .tick:
            effects += expire(now: now)
        }
        effects += dispatch(now: now)
        return effects
    }

    private static func laneKey(url: String, key: String) -> String { url + "\n" + key }

    private mutating func insert(_ delivery: WebhookDelivery) {
        guard laneOf[delivery.seq] == nil else { return }
        let name = Self.laneKey(url: delivery.url, key: delivery.key)
        laneOf[delivery.seq] = name
        lanes[name, default: Lane()].items.append(delivery)
    }

    private mutating func complete(seq: Int64, attempt: Int, failure: WebhookFailure?, now: Millis) -> [WebhookQueueEffect] {
        guard let name = laneOf[seq], var lane = lanes[name], let head = lane.first, head.seq == seq,
            let flight = lane.inFlight, flight.attempt == attempt
        else { return [] }  // a late answer to an attempt already timed out, or unknown
        lane.inFlight = nil
        inFlightCount -= 1
        guard let failure else {
            lane.popFirst()
            laneOf[seq] = nil
            store(lane, as: name)
            return [.delivered(head)]
        }
        return fail(&lane, name: name, failure, now: now)
    }

    /// Records a failed attempt of the lane's head: schedules its retry or gives it up.
    private mutating func fail(_ lane: inout Lane, name: String, _ failure: WebhookFailure, now: Millis) -> [WebhookQueueEffect] {
        guard var head = lane.first else { return [] }
        if head.attempts >= settings.maxAttempts {
            lane.popFirst()
            laneOf[head.seq] = nil
            store(lane, as: name)
            return [.attemptFailed(head, failure, retryAt: nil)]
        }
        head.nextAttemptAt = now + settings.backoff(afterAttempts: head.attempts)
        lane.items[lane.head] = head
        store(lane, as: name)
        return [.attemptFailed(head, failure, retryAt: head.nextAttemptAt)]
    }

    private mutating func store(_ lane: Lane, as name: String) {
        lanes[name] = lane.isEmpty && lane.inFlight == nil ? nil : lane
    }

    private mutating func expire(now: Millis) -> [WebhookQueueEffect] {
        var effects: [WebhookQueueEffect] = []
        let due = lanes.filter { ($0.value.inFlight?.deadline ?? .max) <= now }
            .sorted { ($0.value.first?.seq ?? 0) < ($1.value.first?.seq ?? 0) }
        for (name, var lane) in due {
            guard let head = lane.first else { continue }
            lane.inFlight = nil
            inFlightCount -= 1
            effects.append(.cancel(seq: head.seq))
            effects += fail(&lane, name: name, .timeout, now: now)
        }
        return effects
    }

    /// Starts attempts for due lane heads, oldest first, up to `maxInFlight`.
    private mutating func dispatch(now: Millis) -> [WebhookQueueEffect] {
        let free = settings.maxInFlight - inFlightCount
        guard free > 0 else { return [] }
        var ready: [(seq: Int64, name: String)] = []
        for (name, lane) in lanes where lane.inFlight == nil {
            if let head = lane.first, head.nextAttemptAt <= now { ready.append((head.seq, name)) }
        }
        guard !ready.isEmpty else { return [] }
        ready.sort { $0.seq < $1.seq }
        var effects: [WebhookQueueEffect] = []
        for (_, name) in ready.prefix(free) {
            guard var lane = lanes[name], var head = lane.first else { continue }
            head.attempts += 1
            lane.items[lane.head] = head
            lane.inFlight = (head.attempts, now + settings.timeoutMs)
            lanes[name] = lane
            inFlightCount += 1
            effects.append(.send(head))
        }
        return effects
    }
}
