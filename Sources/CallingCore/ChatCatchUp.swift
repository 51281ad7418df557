/// Cluster mode with a shared chat store: makes sure each of this node's peers gets every chat of
/// its room exactly once, although the chats of other nodes reach it over a bus that can drop them.
///
/// A chat stored by another node comes here as a frame that node forwarded to the peers it knew to
/// be seated here. Two things lose such frames: a peer whose join had not reached that node yet when
/// the chat committed (its history was read before the commit, its seat was announced after), and a
/// Redis outage (frames to other nodes are dropped until the bus is back). The store has every
/// message, so this state machine tracks, per local peer, the seqs it has been given and asks for
/// the history behind a gap; the messages it gets back go to the peers that miss them. It also drops
/// a forwarded frame the peer already has (from its replay, or from a gap fill that overtook it).
///
/// Per local peer: `watermark`, the highest seq such that the peer has every message up to it (its
/// own messages count as had: the ack stands for them), and `pending`, the seqs above it it got out
/// of order. Per room: `horizon`, the highest seq known to exist. A peer has a gap while its
/// watermark is below the horizon; a gap still open after `gapMs` (frames in flight from other nodes
/// arrive out of order, which is no loss) asks for the history after the lowest watermark of the
/// room's peers. A chat committed just before the sending node heard of a new seat may be the
/// room's last for a while, with no later frame to show the gap: so the room also reads once
/// `gapMs` after each local join. When the bus comes back after an outage, every room asks at once:
/// a loss at the end of an outage leaves no later frame to show it either.
///
/// Pure: inputs in, effects out; the cluster link reads the store and hands the frames to sockets.
public struct ChatCatchUp: Sendable {
    public struct Settings: Sendable, Equatable {
        /// How long a peer's gap may stay open before the history behind it is read.
        public var gapMs: Int64
        /// Messages asked for per history read.
        public var pageSize: Int

        public init(gapMs: Int64 = 1_000, pageSize: Int = 500) {
            self.gapMs = gapMs
            self.pageSize = pageSize
        }
    }

    public enum Effect: Sendable, Equatable {
        /// Read the room's messages with seq > `sinceSeq`, at most `limit`; answer with `fetched` (or
        /// `fetchFailed`).
        case fetch(RoomID, sinceSeq: Int64, limit: Int)
        /// Hand `message` to these local connections: they miss it.
        case deliver(ChatMessage, to: [ConnectionID])
    }

    struct Member: Sendable {
        var connection: ConnectionID
        var watermark: Int64
        var pending: Set<Int64> = []

        func has(_ seq: Int64) -> Bool { seq <= watermark || pending.contains(seq) }

        mutating func mark(_ seq: Int64) {
            guard seq > watermark else { return }
            if seq == watermark + 1 {
                watermark = seq
                while pending.remove(watermark + 1) != nil { watermark += 1 }
            } else {
                pending.insert(seq)
            }
        }
    }

    struct Room: Sendable {
        var members: [PeerID: Member] = [:]
        var horizon: Int64 = 0
        /// When a member's gap was first seen open; nil while nobody has one.
        var gapSince: Millis?
        var fetching = false
        /// Asked again while a read was in flight (Redis came back): read once more after it.
        var again = false
        /// A local peer joined at this time: one read `gapMs` later finds a chat another node
        /// committed before it heard of the seat, even when no later chat shows the gap.
        var probeSince: Millis?

        var lowestWatermark: Int64 { members.values.map(\.watermark).min() ?? horizon }
        var hasGap: Bool { members.values.contains { $0.watermark < horizon } }
    }

    public let settings: Settings
    private var rooms: [RoomID: Room] = [:]
    private var roomOf: [ConnectionID: (RoomID, PeerID)] = [:]

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// Rooms with a local peer.
    public var roomCount: Int { rooms.count }
    /// Local peers with a gap open now.
    public var openGaps: Int {
        rooms.values.reduce(0) { total, room in total + room.members.values.filter { $0.watermark < room.horizon }.count }
    }

    // MARK: inputs

    /// A local peer was seated; its `welcome` said `lastSeq` (it has, or does not want, what came
    /// before). A takeover replaces the peer's previous connection.
    public mutating func joined(room roomID: RoomID, peer: PeerID, connection: ConnectionID, lastSeq: Int64, now: Millis) {
        var room = rooms[roomID] ?? Room()
        if let previous = room.members[peer] { roomOf[previous.connection] = nil }
        room.members[peer] = Member(connection: connection, watermark: lastSeq)
        room.horizon = max(room.horizon, lastSeq)
        if room.probeSince == nil { room.probeSince = now }
        roomOf[connection] = (roomID, peer)
        rooms[roomID] = settle(room, now: now)
    }

    /// A local connection left its seat (or closed).
    public mutating func left(_ connection: ConnectionID) {
        guard let (roomID, peer) = roomOf.removeValue(forKey: connection), var room = rooms[roomID] else { return }
        if room.members[peer]?.connection == connection { room.members[peer] = nil }
        if room.members.isEmpty {
            rooms[roomID] = nil
        } else {
            rooms[roomID] = room
        }
    }

    /// This node stored `seq` in `room`: its hub gave it to every local peer (the sender got the ack).
    public mutating func committed(room roomID: RoomID, seq: Int64, now: Millis) {
        guard var room = rooms[roomID] else { return }
        for peer in Array(room.members.keys) { room.members[peer]?.mark(seq) }
        room.horizon = max(room.horizon, seq)
        rooms[roomID] = settle(room, now: now)
    }

    /// Another node forwarded chat `seq` of `room` to `targets`. Returns the targets that do not
    /// have it yet (the frame goes to those only) and counts it as theirs.
    public mutating func arrived(room roomID: RoomID, seq: Int64, targets: [ConnectionID], now: Millis) -> [ConnectionID] {
        guard var room = rooms[roomID] else { return targets }
        var fresh: [ConnectionID] = []
        fresh.reserveCapacity(targets.count)
        for target in targets {
            guard let (_, peer) = roomOf[target], var member = room.members[peer], member.connection == target else {
                fresh.append(target)
                continue
            }
            if member.has(seq) { continue }
            member.mark(seq)
            room.members[peer] = member
            fresh.append(target)
        }
        room.horizon = max(room.horizon, seq)
        rooms[roomID] = settle(room, now: now)
        return fresh
    }

    /// Time passed: rooms whose gap stayed open for `gapMs` read the history behind it.
    public mutating func tick(now: Millis) -> [Effect] {
        var effects: [Effect] = []
        for roomID in rooms.keys.sorted() {
            guard var room = rooms[roomID], !room.fetching else { continue }
            let due = [room.gapSince, room.probeSince].contains { since in since.map { now - $0 >= settings.gapMs } ?? false }
            guard due else { continue }
            room.fetching = true
            room.probeSince = nil
            effects.append(.fetch(roomID, sinceSeq: room.lowestWatermark, limit: settings.pageSize))
            rooms[roomID] = room
        }
        return effects
    }

    /// The bus is back after an outage: every room reads what it may have missed, at once.
    public mutating func busRestored() -> [Effect] {
        var effects: [Effect] = []
        for roomID in rooms.keys.sorted() {
            guard var room = rooms[roomID] else { continue }
            if room.fetching {
                room.again = true
            } else {
                room.fetching = true
                effects.append(.fetch(roomID, sinceSeq: room.lowestWatermark, limit: settings.pageSize))
            }
            rooms[roomID] = room
        }
        return effects
    }

    /// A history read answered: messages with seq > the read's `sinceSeq`, ascending and gap-free
    /// (the store's guarantee); `hasMore` when the page was full.
    public mutating func fetched(room roomID: RoomID, messages: [ChatMessage], hasMore: Bool, now: Millis) -> [Effect] {
        guard var room = rooms[roomID] else { return [] }
        var effects: [Effect] = []
        for message in messages {
            var targets: [ConnectionID] = []
            for peer in room.members.keys.sorted() {
                guard var member = room.members[peer], !member.has(message.seq) else { continue }
                member.mark(message.seq)
                room.members[peer] = member
                // A peer's own message is had (it got the ack, on this connection or an earlier one).
                if peer != message.from { targets.append(member.connection) }
            }
            if !targets.isEmpty { effects.append(.deliver(message, to: targets)) }
            room.horizon = max(room.horizon, message.seq)
        }
        room.fetching = false
        if (hasMore && !messages.isEmpty) || room.again {
            room.again = false
            room.fetching = true
            effects.append(.fetch(roomID, sinceSeq: room.lowestWatermark, limit: settings.pageSize))
        } else {
            // Read to the end. A gap still open (a seq the store did not show yet) waits another
            // `gapMs` before the next read.
            room.gapSince = nil
        }
        rooms[roomID] = settle(room, now: now)
        return effects
    }

    /// A history read failed (the store is down): the gap stays, and is read again after `gapMs`.
    public mutating func fetchFailed(room roomID: RoomID, now: Millis) {
        guard var room = rooms[roomID] else { return }
        room.fetching = false
        room.gapSince = now
        rooms[roomID] = room
    }

    /// Starts or ends the room's gap clock.
    private func settle(_ room: Room, now: Millis) -> Room {
        var room = room
        if room.hasGap {
            if room.gapSince == nil { room.gapSince = now }
        } else {
            room.gapSince = nil
        }
        return room
    }
}
