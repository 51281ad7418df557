import CallingCore
import CallingRedis
import Foundation
import Synchronization

/// Cluster mode's Redis I/O, on its own thread (`cluster.redis`): one connection subscribed to the
/// membership bus and this node's channel, one for commands, the heartbeat, and reconnecting with
/// backoff. It decides nothing: it carries out `ClusterMembership`'s effects and frame forwards
/// submitted from the service thread, and hands what Redis says back as `Event`s through `post`.
///
/// Keys (prefix `calling:`): `nodes` (set of registered node ids), `seats:<node>` (hash: one field
/// per seat, the identity as JSON with the claim's join `epoch`), `alive:<node>` (the heartbeat, `PX cluster_node_ttl_ms`),
/// `presence:leader` (the presence lease), `presence:agents` and `presence:requests` (hashes: the
/// presence leader's state, one JSON record per agent id and per ringing request id),
/// `roomseats:<room>` and `noderooms:<node>` (the rooms' shared seat counts, `RoomSeats`).
/// Channels: `bus` (membership events, one order for every node), `node:<node>` (frames and closes
/// for that node's peers, HTTP session requests forwarded to it and their answers).
final class RedisClusterDriver: @unchecked Sendable {
    // @unchecked: `outbox` is a `Locked`; `thread`-only state (connections, timers) is touched
    // only by the driver thread; the counters are atomics.
    struct Settings: Sendable {
        var endpoint: RedisEndpoint
        var node: String
        var heartbeatMs: Int
        var nodeTTLMs: Int
        var timeoutMs: Int
        var prefix = "calling:"
    }

    enum Command: Sendable {
        case effect(ClusterEffect)
        case deliver(node: String, ClusterDelivery)
        /// The presence leader's state: set (or, with nil, delete) one record.
        case presenceStore(PresenceStoreHash, field: String, value: [UInt8]?)
        /// Deletes every presence record (before the leader writes its whole state again).
        case presenceStoreReset
        /// Asks the room's shared seat count (`RoomSeats`) for a seat for `identity` under `limit`;
        /// the answer goes to `reply` from the driver thread (`.unchecked` when Redis fails first).
        case admitSeat(PeerIdentity, limit: Int, SeatAdmissionReply)
        /// Gives back a seat `admitSeat` added for a joiner that went away before joining.
        case releaseSeat(RoomID, PeerID)
    }

    /// Answers the admissions among `commands` that had no answer yet: Redis failed first.
    private static func answerUnchecked(_ commands: [Command]) {
        for case .admitSeat(_, _, let reply) in commands { reply.answer(.unchecked) }
    }

    /// Where presence records live (keys `presence:agents`, `presence:requests`).
    enum PresenceStoreHash: String, Sendable {
        case agents
        case requests
    }

    /// The stored presence records a node read when it took the presence lease.
    struct PresenceStored: Sendable {
        var agents: [[UInt8]]
        var requests: [[UInt8]]
    }

    enum Event: Sendable {
        case connected
        case disconnected(String)
        case bus(ClusterEvent)
        case delivery(ClusterDelivery)
        /// `everyNode`: the seat lists of every registered live node (`fetchSeats(nil)`); `complete`
        /// when also settled, so an absent node may be taken for gone.
        case snapshot([String: [ClusterMembership.Claim]], everyNode: Bool, complete: Bool)
        case liveness(registered: Set<String>, alive: Set<String>)
        /// Who holds the presence lease after this heartbeat (this node takes it when it is free).
        /// `resumed`: this node has just taken it (on this connection), and this is the state the
        /// previous leader stored, read after taking the lease.
        case presenceLeader(String, resumed: PresenceStored?)
    }

    /// Takes the presence lease when it is free, renews it when this node holds it, and answers
    /// the holder, in one step on the Redis server.
    private static let leaseScript = """
        local holder = redis.call('GET', KEYS[1])
        if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return holder end
        if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return ARGV[1] end
        return holder
        """
    /// The longest wait between two connection attempts.
    static let maxBackoffMs = 2_000

    private static let releaseScript = """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """

    let settings: Settings
    private let logger: Logger
    private let post: ServicePost
    /// Commands for the driver thread, and whether `stop` was called.
    private let outbox = Locked<(commands: [Command], stopped: Bool)>(([], false))
    private var thread: Thread?
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let up = Atomic<Bool>(false)
    private let reconnectCount = Atomic<Int>(0)
    private let publishedCount = Atomic<Int>(0)
    private let receivedCount = Atomic<Int>(0)
    private let droppedCount = Atomic<Int>(0)

    init(settings: Settings, logger: Logger, post: @escaping ServicePost) {
        self.settings = settings
        self.logger = logger
        self.post = post
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
            _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    /// Whether both connections are up and subscribed.
    var isUp: Bool { up.load(ordering: .relaxed) }
    var reconnects: Int { reconnectCount.load(ordering: .relaxed) }
    var published: Int { publishedCount.load(ordering: .relaxed) }
    var received: Int { receivedCount.load(ordering: .relaxed) }
    /// Commands dropped because Redis was down when they were due.
    var dropped: Int { droppedCount.load(ordering: .relaxed) }

    /// Starts the driver thread; `events` runs on the service thread (through `post`).
    func start(events: @escaping @Sendable ([Event]) -> Void) {
        let thread = Thread { [self] in run(events) }
        thread.name = "cluster.redis"
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
    }

    /// Queues commands for the driver thread. Any thread.
    func submit(_ commands: [Command]) {
        guard !commands.isEmpty else { return }
        let wasEmpty = outbox.withLock { outbox in
            let wasEmpty = outbox.commands.isEmpty
            outbox.commands += commands
            return wasEmpty
        }
        if wasEmpty { wake() }
    }

    /// Stops the thread (waits up to 2 s for it).
    func stop() {
        outbox.withLock { $0.stopped = true }
        wake()
        let deadline = Date().addingTimeInterval(2)
        while thread?.isFinished == false, Date() < deadline { usleep(5_000) }
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private var isStopped: Bool {
        outbox.withLock { $0.stopped }
    }

    // MARK: the driver thread

    private var key: (String) -> String { { [prefix = settings.prefix] in prefix + $0 } }

    private func run(_ deliver: @escaping @Sendable ([Event]) -> Void) {
        var failures = 0
        var reconnecting = false
        var lastFailureLog = Date.distantPast
        while !isStopped {
            do throws(RedisError) {
                let (commands, subscriber) = try connect()
                failures = 0
                up.store(true, ordering: .relaxed)
                logger.log(.notice, "cluster connected", ["redis": settings.endpoint.description, "node": settings.node])
                post { deliver([.connected]) }
                try serve(commands: commands, subscriber: subscriber, deliver: deliver, reconnecting: reconnecting)
                return
            } catch {
                let wasUp = up.exchange(false, ordering: .relaxed)
                if wasUp {
                    logger.error("cluster lost Redis; local rooms go on, cross-node traffic waits", ["error": error.message])
                    post { deliver([.disconnected(error.message)]) }
                } else if Date().timeIntervalSince(lastFailureLog) > 30 {
                    lastFailureLog = Date()
                    logger.error("cluster cannot reach Redis; retrying", ["redis": settings.endpoint.description, "error": error.message])
                }
                // What was queued for a Redis we cannot reach is dropped: registering again after
                // the reconnect replaces this node's seat list wholesale.
                let lost = outbox.withLock { outbox -> [Command] in
                    droppedCount.add(outbox.commands.count, ordering: .relaxed)
                    defer { outbox.commands = [] }
                    return outbox.commands
                }
                Self.answerUnchecked(lost)
                failures += 1
                reconnecting = true
                reconnectCount.add(1, ordering: .relaxed)
                let backoffMs = min(100 << min(failures, 5), Self.maxBackoffMs)
                waitForWake(timeoutMs: backoffMs)
            }
        }
    }

    private func waitForWake(timeoutMs: Int) {
        var fd = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, Int32(timeoutMs))
        drainWake()
    }

    private func drainWake() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }

    private func connect() throws(RedisError) -> (RedisConnection, RedisConnection) {
        let commands = try RedisConnection.connect(settings.endpoint, timeoutMs: settings.timeoutMs)
        let subscriber = try RedisConnection.connect(settings.endpoint, timeoutMs: settings.timeoutMs)
        let channels = [key("bus"), key("node:" + settings.node)]
        try subscriber.append([Array("SUBSCRIBE".utf8)] + channels.map { Array($0.utf8) })
        try subscriber.flush()
        var confirmed = 0
        let deadline = Date().addingTimeInterval(Double(settings.timeoutMs) / 1000)
        while confirmed < channels.count {
            guard Date() < deadline else { throw RedisError("SUBSCRIBE not confirmed in \(settings.timeoutMs) ms") }
            if let reply = try subscriber.nextReply(timeoutMs: 50), reply.array?.first?.text == "subscribe" { confirmed += 1 }
        }
        return (commands, subscriber)
    }

    private func serve(commands: RedisConnection, subscriber: RedisConnection,
                       deliver: @escaping @Sendable ([Event]) -> Void, reconnecting: Bool) throws(RedisError) {
        var nextBeat = Date()
        // Set once this connection registered the node's seats; a heartbeat that then finds the
        // node missing from `nodes` means the others declared it gone (its heartbeat lapsed):
        // register again, as after a reconnect.
        var registered = false
        // Whether this connection saw this node take the presence lease (then it read the state).
        var holdsLease = false
        // Right after reconnecting, nodes that are alive may not have registered again yet (after a
        // Redis restart every node does so within its reconnect backoff): for one node TTL plus the
        // longest backoff, a snapshot only adds seats and a missing heartbeat removes nobody.
        let settled = reconnecting ? Date().addingTimeInterval(Double(settings.nodeTTLMs + Self.maxBackoffMs) / 1000) : Date()
        while true {
            var events: [Event] = []
            let waitMs = max(0, min(settings.heartbeatMs, Int(nextBeat.timeIntervalSinceNow * 1000)))
            if let reply = try subscriber.nextReply(timeoutMs: waitMs, wake: wakeRead) {
                collect(reply, into: &events)
                while let more = try subscriber.bufferedReply() { collect(more, into: &events) }
            }
            drainWake()
            let (due, stop) = outbox.withLock { outbox -> ([Command], Bool) in
                defer { outbox.commands = [] }
                return (outbox.commands, outbox.stopped)
            }
            // What the stop itself queued (the leaves of the peers it closed) goes out first.
            if !due.isEmpty {
                do throws(RedisError) {
                    try execute(due, on: commands, events: &events, registered: &registered, settled: Date() >= settled)
                } catch {
                    Self.answerUnchecked(due)
                    throw error
                }
            }
            if stop {
                // A node that stops on purpose leaves at once instead of waiting for its heartbeat to lapse.
                _ = try commands.pipeline([Self.bytes("DEL", key("alive:" + settings.node)), Self.bytes("DEL", key("seats:" + settings.node)),
                                           Self.bytes("SREM", key("nodes"), settings.node),
                                           RoomSeats.resetCommand(prefix: settings.prefix, node: settings.node, seats: []),
                                           Self.bytes("EVAL", Self.releaseScript, "1", key("presence:leader"), settings.node)])
                up.store(false, ordering: .relaxed)
                return
            }
            if Date() >= nextBeat {
                nextBeat = Date().addingTimeInterval(Double(settings.heartbeatMs) / 1000)
                if try heartbeat(commands, events: &events, judge: Date() >= settled, registered: registered, holdsLease: &holdsLease),
                    registered
                {
                    registered = false
                    logger.log(.notice, "cluster registration was lost (heartbeat lapsed); registering again", ["node": settings.node])
                    events.append(.connected)
                }
            }
            if !events.isEmpty {
                let batch = events
                post { deliver(batch) }
            }
        }
    }

    private func collect(_ reply: RedisReply, into events: inout [Event]) {
        guard let items = reply.array, items.count == 3, items[0].text == "message",
            let channel = items[1].text, case .string(let payload) = items[2]
        else { return }
        receivedCount.add(1, ordering: .relaxed)
        if channel == key("bus") {
            if let event = ClusterEvent(encoded: payload) { events.append(.bus(event)) }
        } else if let delivery = ClusterDelivery(encoded: payload) {
            events.append(.delivery(delivery))
        }
    }

    private static func bytes(_ parts: String...) -> [[UInt8]] { parts.map { Array($0.utf8) } }

    private func seatField(_ room: RoomID, _ peer: PeerID) -> [UInt8] {
        JSONWriter.bytes([.string(room.rawValue), .string(peer.rawValue)])
    }

    /// Hash fields have no order; `epoch` (growing with each join on a node) keeps a node's seats
    /// in join order for rosters built from a snapshot, and settles two nodes' claims on one seat.
    private func seatValue(_ claim: ClusterMembership.Claim) -> [UInt8] {
        var json = claim.identity.clusterJSON.objectValue ?? [:]
        json["epoch"] = .int(claim.epoch)
        return JSONWriter.bytes(.object(json))
    }

    /// Runs the queued commands in one pipeline (a snapshot's reads in a second round).
    private func execute(_ due: [Command], on connection: RedisConnection, events: inout [Event],
                         registered: inout Bool, settled: Bool) throws(RedisError) {
        let seats = key("seats:" + settings.node)
        var pipeline: [[[UInt8]]] = []
        var fetches: [[String]?] = []
        var forgets: [String] = []
        var admissions: [(PeerIdentity, Int, SeatAdmissionReply)] = []
        let prefix = settings.prefix
        let node = settings.node
        for command in due {
            switch command {
            case .deliver(let node, let delivery):
                pipeline.append([Array("PUBLISH".utf8), Array(key("node:" + node).utf8), delivery.encoded])
            case .presenceStore(let hash, let field, let value):
                let name = Array(key("presence:" + hash.rawValue).utf8)
                if let value {
                    pipeline.append([Array("HSET".utf8), name, Array(field.utf8), value])
                } else {
                    pipeline.append([Array("HDEL".utf8), name, Array(field.utf8)])
                }
            case .presenceStoreReset:
                pipeline.append(Self.bytes("DEL", key("presence:agents"), key("presence:requests")))
            case .admitSeat(let identity, let limit, let reply):
                admissions.append((identity, limit, reply))
            case .releaseSeat(let room, let peer):
                pipeline.append(RoomSeats.releaseCommand(prefix: prefix, node: node, room: room, peer: peer))
            case .effect(let effect):
                switch effect {
                case .announceJoin(let identity, let epoch):
                    pipeline.append([Array("HSET".utf8), Array(seats.utf8), seatField(identity.room, identity.peer),
                                     seatValue(.init(identity, epoch: epoch))])
                    pipeline += RoomSeats.claimCommands(prefix: prefix, node: node, room: identity.room, peer: identity.peer)
                    pipeline.append([Array("PUBLISH".utf8), Array(key("bus").utf8),
                                     ClusterEvent.joined(node: settings.node, identity, epoch: epoch).encoded])
                case .announceLeave(let room, let peer):
                    pipeline.append([Array("HDEL".utf8), Array(seats.utf8), seatField(room, peer)])
                    pipeline.append(RoomSeats.releaseCommand(prefix: prefix, node: node, room: room, peer: peer))
                    pipeline.append([Array("PUBLISH".utf8), Array(key("bus").utf8),
                                     ClusterEvent.left(node: settings.node, room: room, peer: peer).encoded])
                case .dropSeat(let room, let peer):
                    pipeline.append([Array("HDEL".utf8), Array(seats.utf8), seatField(room, peer)])
                    pipeline.append(RoomSeats.releaseCommand(prefix: prefix, node: node, room: room, peer: peer))
                case .register(let claims):
                    registered = true
                    // One transaction: a snapshot read in between must never see the list emptied.
                    pipeline.append(Self.bytes("MULTI"))
                    pipeline.append(Self.bytes("DEL", seats))
                    if !claims.isEmpty {
                        var hset = Self.bytes("HSET", seats)
                        for claim in claims {
                            hset.append(seatField(claim.identity.room, claim.identity.peer))
                            hset.append(seatValue(claim))
                        }
                        pipeline.append(hset)
                    }
                    pipeline.append(Self.bytes("SET", key("alive:" + settings.node), "1", "PX", String(settings.nodeTTLMs)))
                    pipeline.append(Self.bytes("SADD", key("nodes"), settings.node))
                    pipeline.append(RoomSeats.resetCommand(prefix: prefix, node: node,
                                                           seats: claims.map { ($0.identity.room, $0.identity.peer) }))
                    pipeline.append(Self.bytes("EXEC"))
                    pipeline.append([Array("PUBLISH".utf8), Array(key("bus").utf8), ClusterEvent.resynced(node: settings.node).encoded])
                case .fetchSeats(let nodes):
                    fetches.append(nodes)
                case .forgetNode(let node):
                    forgets.append(node)
                case .seat, .unseat:
                    break  // hub effects; the service thread applies them
                }
            }
        }
        if !pipeline.isEmpty {
            let replies = try connection.pipeline(pipeline)
            publishedCount.add(pipeline.count, ordering: .relaxed)
            for case .error(let message) in replies { logger.error("cluster command refused by Redis", ["error": message]) }
        }
        // After the pipeline: a leave queued before an admission frees its seat first.
        if !admissions.isEmpty {
            let replies = try connection.pipeline(admissions.map { RoomSeats.admitCommand(prefix: prefix, node: node, $0.0, limit: $0.1) })
            for ((_, _, reply), answer) in zip(admissions, replies) {
                if case .error(let message) = answer { logger.error("cluster seat admission refused by Redis", ["error": message]) }
                reply.answer(RoomSeats.admission(from: answer))
            }
        }
        for node in forgets {
            // Only a node whose heartbeat is still gone: it may have come back meanwhile.
            if try connection.command(["EXISTS", key("alive:" + node)]).integer == 0 {
                _ = try connection.pipeline([Self.bytes("DEL", key("seats:" + node)), Self.bytes("SREM", key("nodes"), node),
                                             RoomSeats.resetCommand(prefix: settings.prefix, node: node, seats: [])])
                logger.log(.notice, "cluster node gone", ["node": node])
            }
        }
        for nodes in fetches {
            let names: [String]
            if let nodes {
                names = nodes
            } else {
                let registered = try connection.command(["SMEMBERS", key("nodes")]).array?.compactMap(\.text) ?? []
                let alive = try connection.pipeline(registered.map { Self.bytes("EXISTS", key("alive:" + $0)) })
                names = zip(registered, alive).filter { $0.1.integer == 1 }.map(\.0)
            }
            let replies = try connection.pipeline(names.map { Self.bytes("HGETALL", key("seats:" + $0)) })
            var snapshot: [String: [ClusterMembership.Claim]] = [:]
            for (node, reply) in zip(names, replies) {
                let items = reply.array ?? []
                var claims: [ClusterMembership.Claim] = []
                var index = 1
                while index < items.count {
                    if case .string(let value) = items[index], let json = try? JSONParser.parse(value),
                        let identity = PeerIdentity(clusterJSON: json)
                    {
                        claims.append(.init(identity, epoch: json.objectValue?["epoch"]?.int64Value ?? 0))
                    }
                    index += 2
                }
                snapshot[node] = claims.sorted { $0.epoch < $1.epoch }
            }
            events.append(.snapshot(snapshot, everyNode: nodes == nil, complete: nodes == nil && settled))
        }
    }

    /// Refreshes this node's heartbeat and reports which registered nodes still have theirs.
    /// True when this node, registered on this connection, was missing from the registered set.
    /// Before its registration (which writes its seat list and joins `nodes` in one transaction)
    /// the heartbeat does not add it to `nodes`: a snapshot must never find it there with an
    /// empty seat list.
    private func heartbeat(_ connection: RedisConnection, events: inout [Event], judge: Bool,
                           registered isRegistered: Bool, holdsLease: inout Bool) throws(RedisError) -> Bool {
        let membership = isRegistered ? Self.bytes("SADD", key("nodes"), settings.node) : Self.bytes("SISMEMBER", key("nodes"), settings.node)
        let replies = try connection.pipeline([Self.bytes("SET", key("alive:" + settings.node), "1", "PX", String(settings.nodeTTLMs)),
                                               membership,
                                               Self.bytes("SMEMBERS", key("nodes")),
                                               Self.bytes("EVAL", Self.leaseScript, "1", key("presence:leader"), settings.node,
                                                          String(settings.nodeTTLMs))])
        if let leader = replies[3].text {
            var resumed: PresenceStored?
            if leader == settings.node, !holdsLease {
                // Read after taking the lease: the previous leader can no longer write (it lost
                // the lease), so this is the last state it stored.
                let stored = try connection.pipeline([Self.bytes("HVALS", key("presence:agents")),
                                                      Self.bytes("HVALS", key("presence:requests"))])
                func values(_ reply: RedisReply) -> [[UInt8]] {
                    (reply.array ?? []).compactMap { if case .string(let bytes) = $0 { return bytes } else { return nil } }
                }
                resumed = PresenceStored(agents: values(stored[0]), requests: values(stored[1]))
            }
            holdsLease = leader == settings.node
            events.append(.presenceLeader(leader, resumed: resumed))
        }
        let registered = Set(replies[2].array?.compactMap(\.text) ?? [])
        let others = registered.subtracting([settings.node]).sorted()
        let alive = try connection.pipeline(others.map { Self.bytes("EXISTS", key("alive:" + $0)) })
        var living: Set<String> = [settings.node]
        for (node, reply) in zip(others, alive) where reply.integer == 1 { living.insert(node) }
        if judge { events.append(.liveness(registered: registered, alive: living)) }
        return isRegistered && replies[1].integer == 1
    }
}
