import CallingCore
import CallingRedis
import Synchronization

/// What the cluster's shared seat count said about a joiner (`Router.admitAcrossNodes`).
enum SeatAdmission: Sendable, Equatable {
    /// Seated in the room's shared count; `added`: this join added the peer id (false when the
    /// peer id already held a seat there, a takeover or a reconnect, which is not a new seat).
    case admitted(added: Bool)
    /// The room already holds its limit of distinct peer ids across the cluster.
    case refused
    /// Not asked: no cluster, no limit, or Redis unreachable. The node's own check (`Hub.admit`) stands.
    case unchecked
}

/// One answer for one admission, given at most once (the driver may answer after Redis replied,
/// or drop the command when the connection fails: both paths call `answer`).
final class SeatAdmissionReply: Sendable {
    private let done = Atomic<Bool>(false)
    private let deliver: @Sendable (SeatAdmission) -> Void

    init(_ deliver: @escaping @Sendable (SeatAdmission) -> Void) { self.deliver = deliver }

    func answer(_ admission: SeatAdmission) {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return }
        deliver(admission)
    }
}

/// The cluster's count of a room's seats in Redis, so that capacity holds across nodes: two joins
/// on two nodes for a room's last seat meet in one script on the Redis server, which admits one.
///
/// Keys (after the cluster prefix): `roomseats:<room>` (hash: peer id → the node holding its
/// seat), `noderooms:<node>` (set: the rooms where that node holds seats, so the node itself, or
/// the node that forgets it, can take them all back). The scripts name keys built from the prefix
/// inside them, so they need a single Redis server (not Redis Cluster), like the rest of the driver.
enum RoomSeats {
    /// Admits `ARGV[1]` (peer) for node `ARGV[2]` when the room holds fewer than `ARGV[3]` (limit,
    /// 0 = none) distinct peer ids on live nodes. A node is live while its `alive:` key is (its own
    /// seats always count); the seats of a dead one are removed on the way. Answers 1 when the peer
    /// id was already there (no new seat), 2 when added, 0 when the room is full.
    static let admitScript = """
        if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 1 end
        local limit = tonumber(ARGV[3])
        if limit > 0 then
          local entries = redis.call('HGETALL', KEYS[1])
          local live = {}
          local count = 0
          for i = 1, #entries, 2 do
            local holder = entries[i + 1]
            if live[holder] == nil then
              live[holder] = holder == ARGV[2] or redis.call('EXISTS', ARGV[4] .. 'alive:' .. holder) == 1
            end
            if live[holder] then count = count + 1 else redis.call('HDEL', KEYS[1], entries[i]) end
          end
          if count >= limit then return 0 end
        end
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
        redis.call('SADD', KEYS[2], ARGV[5])
        return 2
        """

    /// Removes peer `ARGV[1]`'s seat when node `ARGV[2]` holds it (a seat another node took over
    /// stays), and the room from the node's set once it holds no seat there.
    static let releaseScript = """
        if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
        for _, holder in ipairs(redis.call('HVALS', KEYS[1])) do
          if holder == ARGV[2] then return 1 end
        end
        redis.call('SREM', KEYS[2], ARGV[3])
        return 0
        """

    /// Replaces every seat node `ARGV[2]` holds with the (room, peer) pairs from `ARGV[3]` on:
    /// a node registering again, or (with no pairs) a node stopping or forgotten as dead.
    static let resetScript = """
        for _, room in ipairs(redis.call('SMEMBERS', KEYS[1])) do
          local key = ARGV[1] .. 'roomseats:' .. room
          local entries = redis.call('HGETALL', key)
          for i = 1, #entries, 2 do
            if entries[i + 1] == ARGV[2] then redis.call('HDEL', key, entries[i]) end
          end
        end
        redis.call('DEL', KEYS[1])
        for i = 3, #ARGV, 2 do
          redis.call('HSET', ARGV[1] .. 'roomseats:' .. ARGV[i], ARGV[i + 1], ARGV[2])
          redis.call('SADD', KEYS[1], ARGV[i])
        end
        return 1
        """

    static func roomKey(_ prefix: String, _ room: RoomID) -> String { prefix + "roomseats:" + room.rawValue }
    static func nodeKey(_ prefix: String, _ node: String) -> String { prefix + "noderooms:" + node }

    static func admitCommand(prefix: String, node: String, _ identity: PeerIdentity, limit: Int) -> [[UInt8]] {
        ["EVAL", admitScript, "2", roomKey(prefix, identity.room), nodeKey(prefix, node), identity.peer.rawValue, node,
         String(limit), prefix, identity.room.rawValue].map { Array($0.utf8) }
    }

    /// The seat claimed outright: the node seated the peer (its join, or a takeover of the seat).
    static func claimCommands(prefix: String, node: String, room: RoomID, peer: PeerID) -> [[[UInt8]]] {
        [["HSET", roomKey(prefix, room), peer.rawValue, node].map { Array($0.utf8) },
         ["SADD", nodeKey(prefix, node), room.rawValue].map { Array($0.utf8) }]
    }

    static func releaseCommand(prefix: String, node: String, room: RoomID, peer: PeerID) -> [[UInt8]] {
        ["EVAL", releaseScript, "2", roomKey(prefix, room), nodeKey(prefix, node), peer.rawValue, node, room.rawValue]
            .map { Array($0.utf8) }
    }

    static func resetCommand(prefix: String, node: String, seats: [(room: RoomID, peer: PeerID)]) -> [[UInt8]] {
        var arguments = ["EVAL", resetScript, "1", nodeKey(prefix, node), prefix, node]
        for seat in seats { arguments += [seat.room.rawValue, seat.peer.rawValue] }
        return arguments.map { Array($0.utf8) }
    }

    /// The script's answer as an admission; an error reply (or anything else) leaves the node's own check standing.
    static func admission(from reply: RedisReply) -> SeatAdmission {
        switch reply.integer {
        case 0: return .refused
        case 1: return .admitted(added: false)
        case 2: return .admitted(added: true)
        default: return .unchecked
        }
    }
}
