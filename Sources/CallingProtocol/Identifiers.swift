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
