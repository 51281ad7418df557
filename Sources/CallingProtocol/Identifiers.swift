/// One transport connection. A peer may own a different connection after a reconnect or takeover,
/// so routing state is keyed by connection, never by socket pointer.
public struct ConnectionID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "c\(rawValue)" }
    public static func < (lhs: ConnectionID, rhs: ConnectionID) -> Bool { lhs.rawValue < rhs.rawValue }

    /// What `Dictionary` and `Set` hash a connection id with. Tables keyed by connection (the room
    /// endpoint's sessions, the hub's seats) are looked up several times per inbound frame, and the
    /// default (a seeded SipHash through `Hasher`) was a visible share of a relayed
    /// frame under callgrind. Ids are assigned by the server (counting up from 1, with flag bits
    /// for HTTP sessions and other nodes' peers), never chosen by a client, so nobody can aim
    /// collisions at a table; a 64-bit finalizer (MurmurHash3's fmix64) of the id and the table's
    /// seed spreads consecutive ids over the low bits the tables index with.
    public func _rawHashValue(seed: Int) -> Int {
        var mixed = rawValue ^ UInt64(truncatingIfNeeded: seed)
        mixed ^= mixed >> 33
        mixed &*= 0xFF51_AFD7_ED55_8CCD
        mixed ^= mixed >> 33
        mixed &*= 0xC4CE_B9FE_1A85_EC53
        mixed ^= mixed >> 33
        return Int(truncatingIfNeeded: mixed)
    }
}

/// The server's connection id spaces, defined here once. The transport numbers its WebSockets
/// counting up from 1; every other space is marked by one top bit of its own and counts up from 1
/// below it, so an id names exactly one space, and a WebSocket's count never reaches the bits.
extension ConnectionID {
    /// What a connection id stands for.
    public enum Space: Sendable, Equatable {
        /// A WebSocket of this process (CallingTransport's `WebSocketServer`).
        case socket
        /// An HTTP session's seat in the hub, not a socket (CallingServer's `HTTPSessions`).
        case httpSession
        /// A peer on another node, seated in this node's hub (cluster mode, CallingCore's
        /// `ClusterMembership`).
        case remoteSeat
        /// Another node's presence connection, at the presence leader (CallingServer's
        /// `PresenceEndpoint`).
        case remotePresence
        /// The placeholder of a seat remembered from before a restart, in its reconnect grace
        /// until its peer joins again (CallingCore's `Hub.restore`): never a live connection.
        case restoredSeat
    }

    // Computed and inlinable, not stored constants: other modules test them per relayed frame, and
    // a `static let` of another module is reached through its lazy initializer's accessor.
    @inlinable static var httpSessionBit: UInt64 { 1 << 63 }
    @inlinable static var remoteSeatBit: UInt64 { 1 << 62 }
    @inlinable static var remotePresenceBit: UInt64 { 1 << 61 }
    @inlinable static var restoredSeatBit: UInt64 { 1 << 60 }

    /// The `serial`-th id (from 1) of `space`; for `.socket` the id is the serial itself.
    @inlinable
    public init(_ space: Space, serial: UInt64) {
        switch space {
        case .socket: self.init(serial)
        case .httpSession: self.init(Self.httpSessionBit | serial)
        case .remoteSeat: self.init(Self.remoteSeatBit | serial)
        case .remotePresence: self.init(Self.remotePresenceBit | serial)
        case .restoredSeat: self.init(Self.restoredSeatBit | serial)
        }
    }

    /// The space this id belongs to.
    @inlinable
    public var space: Space {
        if rawValue & Self.httpSessionBit != 0 { return .httpSession }
        if rawValue & Self.remoteSeatBit != 0 { return .remoteSeat }
        if rawValue & Self.remotePresenceBit != 0 { return .remotePresence }
        if rawValue & Self.restoredSeatBit != 0 { return .restoredSeat }
        return .socket
    }

    /// An HTTP session's seat rather than a socket: the one-bit test the router makes per frame.
    @inlinable
    public var isHTTPSession: Bool { rawValue & Self.httpSessionBit != 0 }

    /// A peer seated here whose socket is on another node.
    @inlinable
    public var isRemoteSeat: Bool { rawValue & (Self.httpSessionBit | Self.remoteSeatBit) == Self.remoteSeatBit }
}
