/// What a room's occupancy means for webhooks: a call starts when the first peer joins an empty
/// room and ends when the last peer leaves it (docs/operations.md, "Webhooks"). A pure value fed by
/// the service thread from the hub's membership changes; it owns no clock.
///
/// This is the room's live call, not the `/v1/calls` record: a room used without `POST /v1/calls`
/// has calls too, a `/v1/calls` call that nobody joins never starts one, and a room that empties
/// and fills again has two calls in a row.
public struct CallLifecycle: Sendable {
    public struct Call: Sendable, Equatable {
        public var room: RoomID
        /// The `call_id` of the first joiner whose token named one.
        public var call: CallID?
        public var startedAt: Millis
        var peers: Int

        /// A room's call as a shared store keeps it (`SharedCallLifecycle`), which counts its seats itself.
        public init(room: RoomID, call: CallID?, startedAt: Millis) {
            self.init(room: room, call: call, startedAt: startedAt, peers: 0)
        }

        init(room: RoomID, call: CallID?, startedAt: Millis, peers: Int) {
            self.room = room
            self.call = call
            self.startedAt = startedAt
            self.peers = peers
        }
    }

    public enum Event: Sendable, Equatable {
        case callStarted(Call)
        case peerJoined(PeerIdentity, Call)
        case peerLeft(PeerIdentity, Call)
        case callEnded(Call, endedAt: Millis, reason: String)
    }

    private var calls: [RoomID: Call] = [:]

    public init() {}

    public func call(in room: RoomID) -> Call? { calls[room] }

    /// A peer took a seat. `takeover` (the same peer id on a new connection) is not a new seat: no event.
    public mutating func joined(_ identity: PeerIdentity, takeover: Bool, now: Millis) -> [Event] {
        if takeover, calls[identity.room] != nil { return [] }
        var events: [Event] = []
        var call = calls[identity.room] ?? Call(room: identity.room, call: identity.call, startedAt: now, peers: 0)
        if call.peers == 0 { events.append(.callStarted(call)) }
        if call.call == nil { call.call = identity.call }
        call.peers += 1
        calls[identity.room] = call
        events.append(.peerJoined(identity, call))
        return events
    }

    /// A seat restored at start (`Hub.restore`): its `call_started` and `peer_joined` went out
    /// before the restart, so it counts toward the room's call without an event, and the call's
    /// `call_ended` carries the start it was first reported with.
    public mutating func restored(_ identity: PeerIdentity, callStartedAt: Millis) {
        var call = calls[identity.room] ?? Call(room: identity.room, call: identity.call, startedAt: callStartedAt, peers: 0)
        call.startedAt = min(call.startedAt, callStartedAt)
        if call.call == nil { call.call = identity.call }
        call.peers += 1
        calls[identity.room] = call
    }

    /// A seated peer left (not a connection that had been taken over). `reason` is the call's end
    /// reason should this leave empty the room.
    public mutating func left(_ identity: PeerIdentity, reason: String, now: Millis) -> [Event] {
        guard var call = calls[identity.room] else { return [] }
        call.peers -= 1
        var events: [Event] = [.peerLeft(identity, call)]
        if call.peers <= 0 {
            calls[identity.room] = nil
            events.append(.callEnded(call, endedAt: now, reason: reason))
        } else {
            calls[identity.room] = call
        }
        return events
    }
}
