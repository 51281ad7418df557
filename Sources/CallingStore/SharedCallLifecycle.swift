import CallingCore

/// A seat's start or end on one node, as `SharedCallLifecycle` records it.
public enum LifecycleSeatChange: Sendable, Equatable {
    /// `transport`: `websocket` or `http`, for the webhook's `transport` field.
    case joined(PeerIdentity, transport: String)
    /// `reason`: the call's end reason should this leave empty the room.
    case left(PeerIdentity, reason: String)
}

/// One lifecycle event decided by the shared store, with the seat's transport for peer events.
public struct SharedLifecycleEvent: Sendable, Equatable {
    public var event: CallLifecycle.Event
    public var transport: String

    public init(_ event: CallLifecycle.Event, transport: String) {
        self.event = event
        self.transport = transport
    }
}

/// Turns decided events into outbox drafts (bodies and ids, one per URL). Runs on the store's
/// queue inside the deciding transaction, so it must be pure and quick.
public typealias LifecycleDrafts = @Sendable ([SharedLifecycleEvent], _ nowMs: Int64) -> [WebhookDraft]

/// The rooms' calls for webhooks across a cluster (`database_url` with `cluster_redis_url`): which
/// seats are held on which node, so that `call_started` goes out once when a room's first seat
/// starts on any node and `call_ended` once when its last one ends anywhere, and the seats of a
/// node that died are ended (their `peer_left`) by exactly one other node.
///
/// Each node records its seats' changes from its own store queue, so one node's join can reach
/// the store after another node's leave that really came later. A room's call therefore ends
/// only once it has stayed without seats for a settle time (`endSettledCalls`): a join recorded
/// within it continues the call, with no second `call_started`. Each decision is one
/// transaction that also writes the events' rows to the outbox (`WebhookOutbox`), serialized per
/// room with the outbox's writers, so the rows of one room are in the order of the decisions.
///
/// A single node decides this in memory (CallingCore `CallLifecycle`), so only the shared store
/// implements it. Completions run on the store's queue.
public protocol SharedCallLifecycle: AnyObject, Sendable {
    /// Records `changes`, made by `node`, in order. A join of a seat another node holds is a
    /// takeover (no event); a leave of a seat `node` no longer holds changes nothing.
    func recordSeats(_ changes: [LifecycleSeatChange], node: String, nowMs: Int64, drafts: @escaping LifecycleDrafts,
                     completion: @escaping @Sendable (Result<[WebhookDelivery], StoreError>) -> Void)

    /// Ends every seat of the nodes not in `alive` (they died) with `reason` for the calls this
    /// ends; `alive` nil ends only the seats of `node` (itself, starting again under its old id).
    /// Two nodes doing so at once end each seat once. Returns the nodes whose seats were ended.
    func endSeats(ofNodesNotIn alive: Set<String>?, node: String, nowMs: Int64, reason: String, drafts: @escaping LifecycleDrafts,
                  completion: @escaping @Sendable (Result<[String], StoreError>) -> Void)

    /// Ends the calls of rooms without seats since `nowMs - settleMs` or earlier: their
    /// `call_ended`, dated when the room emptied, with the reason of its last leave. Once per room
    /// however many nodes ask at once. Returns how many ended.
    func endSettledCalls(nowMs: Int64, settleMs: Int64, drafts: @escaping LifecycleDrafts,
                         completion: @escaping @Sendable (Result<Int, StoreError>) -> Void)
}

extension SharedCallLifecycle {
    /// Runs one operation and waits for its completion: for start-up and tests, never the service thread.
    public func wait<Value: Sendable>(
        _ operation: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
    ) throws -> Value {
        try waitForCompletion(operation)
    }
}
