/// Cluster mode's membership decisions, pure like `Hub`: which remote peers this node seats in its
/// hub, which of its own seats it announces, what a node's loss or Redis coming back means.
/// `handle(_:)` returns effects; the cluster driver (CallingServer's `ClusterRouter` and
/// `RedisClusterDriver`) carries them out and feeds the results back.
///
/// Every node mirrors the whole cluster's room membership. A peer on another node is a *remote
/// seat*: a hub member on a `ConnectionID` of the `.remoteSeat` space, so the hub's roster, `welcome.peers`,
/// room limits and relay addressing span every node without the hub knowing. Membership events
/// travel on one Redis pub/sub channel, which gives every node the same order of events; a join
/// of a peer id already seated elsewhere is a takeover, decided identically everywhere.
///
/// Every claim on a seat carries a join epoch (`Claim`): the joining node's clock in ms, but
/// always above the epoch of any claim on that seat the node knew of, and above its own last one.
/// A seat two nodes both claim (a node cut off from Redis kept its peer while the peer joined
/// again elsewhere) is settled by the later claim, `(epoch, node)` compared, when the snapshot
/// after the partition heals shows the two: every node reaches the same answer, the loser's
/// connection is taken over (4400 `replaced`) and its node drops the seat without a leave.
public struct ClusterMembership: Sendable {
    public struct Seat: Hashable, Sendable {
        public var room: RoomID
        public var peer: PeerID
        public init(room: RoomID, peer: PeerID) {
            self.room = room
            self.peer = peer
        }
    }

    /// Where a remote seat lives.
    public struct RemoteSeat: Sendable, Equatable {
        public var node: String
        public var identity: PeerIdentity
        public var epoch: Int64
    }

    /// A node's claim on a seat, as its seat list and join events carry it.
    public struct Claim: Sendable, Equatable {
        public var identity: PeerIdentity
        /// When the node seated it (`ClusterMembership`'s epoch rule); later claims win.
        public var epoch: Int64
        public init(_ identity: PeerIdentity, epoch: Int64) {
            self.identity = identity
            self.epoch = epoch
        }
    }

    /// Whether claim `a` by node `nodeA` is later than claim `b` by `nodeB`: by epoch, then node id,
    /// so that every node orders any two claims alike.
    public static func isLater(_ a: Int64, _ nodeA: String, than b: Int64, _ nodeB: String) -> Bool {
        a != b ? a > b : nodeA > nodeB
    }

    public let node: String
    public private(set) var isConnected = false
    private var local: [Seat: (identity: PeerIdentity, connection: ConnectionID, epoch: Int64)] = [:]
    /// The last epoch this node gave a claim: epochs it hands out only grow.
    private var lastEpoch: Int64 = 0
    /// Own joins announced whose echo has not come back on the bus yet. A remote join for such a
    /// seat was published before ours, so ours (later in the bus order) wins on every node.
    private var pendingEcho: [Seat: Int] = [:]
    private var remote: [ConnectionID: RemoteSeat] = [:]
    private var remoteBySeat: [Seat: ConnectionID] = [:]
    private var nextRemote: UInt64 = 0

    public init(node: String) {
        self.node = node
    }

    /// Remote seats mirrored in the hub.
    public var remoteCount: Int { remote.count }
    /// This node's own seats.
    public var localCount: Int { local.count }

    /// Which node, room and peer a remote seat stands for.
    public func remoteSeat(_ connection: ConnectionID) -> RemoteSeat? { remote[connection] }

    /// This node's own seats in join order, for registering them again.
    public var localSeats: [PeerIdentity] { localClaims.map(\.identity) }

    /// This node's own claims in join order (epochs grow with each join).
    public var localClaims: [Claim] { local.values.sorted { $0.epoch < $1.epoch }.map { Claim($0.identity, epoch: $0.epoch) } }

    /// The epoch a claim of this node's on `remote`'s seat (or a fresh one) gets.
    private mutating func nextEpoch(at now: Int64, after known: Int64?) -> Int64 {
        lastEpoch = max(now, lastEpoch + 1, (known ?? .min) &+ 1)
        return lastEpoch
    }

    public mutating func handle(_ input: ClusterInput) -> [ClusterEffect] {
        switch input {
        case .localJoined(let identity, let connection, let now):
            let seat = Seat(room: identity.room, peer: identity.peer)
            // A takeover of a seat this node knew of gets a later epoch than that claim, whatever the clocks say.
            let known = remoteBySeat[seat].flatMap { remote[$0]?.epoch } ?? local[seat]?.epoch
            let epoch = nextEpoch(at: now, after: known)
            local[seat] = (identity, connection, epoch)
            // The hub took the seat over from a remote seat (closed with `replaced`); it is ours now.
            if let previous = remoteBySeat.removeValue(forKey: seat) { remote[previous] = nil }
            guard isConnected else { return [] }
            pendingEcho[seat, default: 0] += 1
            return [.announceJoin(identity, epoch: epoch)]
        case .localLeft(let identity, let connection):
            let seat = Seat(room: identity.room, peer: identity.peer)
            guard local[seat]?.connection == connection else { return [] }
            local[seat] = nil
            pendingEcho[seat] = nil
            return isConnected ? [.announceLeave(identity.room, identity.peer)] : []
        case .remoteSeatReleased(let connection):
            forgetRemote(connection)
            return []
        case .bus(let event):
            return handle(event)
        case .connected:
            isConnected = true
            pendingEcho = [:]
            return [.register(localClaims), .fetchSeats(nil)]
        case .disconnected:
            isConnected = false
            pendingEcho = [:]
            return []
        case .snapshot(let seatsByNode, let complete):
            return reconcile(seatsByNode, complete: complete)
        case .liveness(let registered, let alive):
            var effects: [ClusterEffect] = []
            let seatedNodes = Set(remote.values.map(\.node))
            for gone in seatedNodes.subtracting(alive).sorted() where gone != node {
                effects += unseatAll(of: gone)
            }
            for gone in registered.union(seatedNodes).subtracting(alive).sorted() where gone != node {
                effects.append(.forgetNode(gone))
            }
            return effects
        }
    }

    private mutating func handle(_ event: ClusterEvent) -> [ClusterEffect] {
        switch event {
        case .joined(let from, let identity, let epoch):
            let seat = Seat(room: identity.room, peer: identity.peer)
            if from == node {
                if let count = pendingEcho[seat] { pendingEcho[seat] = count > 1 ? count - 1 : nil }
                return []
            }
            if (pendingEcho[seat] ?? 0) > 0 { return [] }
            // Our epochs stay above every claim we heard of, so a takeover through us later is later by epoch too.
            lastEpoch = max(lastEpoch, epoch)
            var effects: [ClusterEffect] = []
            if local.removeValue(forKey: seat) != nil {
                // Our peer joined on another node: the hub's takeover closes our connection with
                // `replaced`; our entry in the shared seat list goes without a leave.
                effects.append(.dropSeat(identity.room, identity.peer))
            }
            if let previous = remoteBySeat[seat] { forgetRemote(previous) }
            effects.append(.seat(newRemote(from, identity, epoch: epoch), identity))
            return effects
        case .left(let from, let room, let peer):
            let seat = Seat(room: room, peer: peer)
            guard from != node, let connection = remoteBySeat[seat], remote[connection]?.node == from else { return [] }
            forgetRemote(connection)
            return [.unseat(connection)]
        case .resynced(let from):
            return from == node ? [] : [.fetchSeats([from])]
        }
    }

    /// A snapshot of some nodes' seat lists (or of every registered live node when `complete`).
    /// Snapshots and bus events travel on different connections, so a snapshot fills gaps and
    /// removes seats its node no longer lists. A seat listed by a node while another holds it (ours
    /// or remote) goes to the later claim: two claims on one seat only meet here after a partition,
    /// since on the bus the later join takes the seat over and the loser drops its claim.
    private mutating func reconcile(_ seatsByNode: [String: [Claim]], complete: Bool) -> [ClusterEffect] {
        var effects: [ClusterEffect] = []
        if complete {
            for gone in Set(remote.values.map(\.node)).subtracting(seatsByNode.keys).sorted() {
                effects += unseatAll(of: gone)
            }
        }
        for from in seatsByNode.keys.sorted() where from != node {
            let listed = seatsByNode[from] ?? []
            let listedSeats = Set(listed.map { Seat(room: $0.identity.room, peer: $0.identity.peer) })
            for (connection, seat) in remote.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where seat.node == from {
                if !listedSeats.contains(Seat(room: seat.identity.room, peer: seat.identity.peer)) {
                    forgetRemote(connection)
                    effects.append(.unseat(connection))
                }
            }
            for claim in listed {
                let identity = claim.identity
                let seat = Seat(room: identity.room, peer: identity.peer)
                lastEpoch = max(lastEpoch, claim.epoch)
                if let mine = local[seat] {
                    guard Self.isLater(claim.epoch, from, than: mine.epoch, node) else { continue }
                    // Our peer joined again elsewhere while we could not hear it: the seat there wins,
                    // and the hub's takeover closes our connection with `replaced`, without a leave.
                    local[seat] = nil
                    pendingEcho[seat] = nil
                    effects.append(.dropSeat(identity.room, identity.peer))
                } else if let current = remoteBySeat[seat], let held = remote[current] {
                    guard held.node != from, Self.isLater(claim.epoch, from, than: held.epoch, held.node) else { continue }
                    forgetRemote(current)
                }
                effects.append(.seat(newRemote(from, identity, epoch: claim.epoch), identity))
            }
        }
        return effects
    }

    private mutating func unseatAll(of gone: String) -> [ClusterEffect] {
        let connections = remote.filter { $0.value.node == gone }.keys.sorted { $0.rawValue < $1.rawValue }
        for connection in connections { forgetRemote(connection) }
        return connections.map { .unseat($0) }
    }

    private mutating func newRemote(_ from: String, _ identity: PeerIdentity, epoch: Int64) -> ConnectionID {
        nextRemote += 1
        let connection = ConnectionID(.remoteSeat, serial: nextRemote)
        remote[connection] = RemoteSeat(node: from, identity: identity, epoch: epoch)
        remoteBySeat[Seat(room: identity.room, peer: identity.peer)] = connection
        return connection
    }

    private mutating func forgetRemote(_ connection: ConnectionID) {
        guard let seat = remote.removeValue(forKey: connection) else { return }
        let key = Seat(room: seat.identity.room, peer: seat.identity.peer)
        if remoteBySeat[key] == connection { remoteBySeat[key] = nil }
    }
}

/// A membership event on the cluster bus, from the node that made it.
public enum ClusterEvent: Sendable, Equatable {
    /// `epoch`: the claim's join epoch (`ClusterMembership.Claim`).
    case joined(node: String, PeerIdentity, epoch: Int64 = 0)
    case left(node: String, room: RoomID, peer: PeerID)
    /// The node registered its seats afresh (it started, or Redis came back): read its list again.
    case resynced(node: String)
}

public enum ClusterInput: Sendable {
    /// The hub seated one of this node's connections (a socket or an HTTP session); `at`: this
    /// node's clock in ms, the floor of the claim's epoch.
    case localJoined(PeerIdentity, ConnectionID, at: Int64 = 0)
    /// The hub let one of this node's seats go.
    case localLeft(PeerIdentity, ConnectionID)
    /// The hub let a remote seat go on its own (taken over, kicked, room closed).
    case remoteSeatReleased(ConnectionID)
    case bus(ClusterEvent)
    /// Redis is reachable and the bus subscribed.
    case connected
    case disconnected
    /// The seat lists of the named nodes; `complete` when every registered live node is listed.
    case snapshot([String: [ClusterMembership.Claim]], complete: Bool)
    /// Registered nodes and those whose heartbeat key is still alive.
    case liveness(registered: Set<String>, alive: Set<String>)
}

public enum ClusterEffect: Sendable, Equatable {
    /// Seat a remote peer in the hub (a `.join` on the remote connection, with no chat state).
    case seat(ConnectionID, PeerIdentity)
    /// Let a remote seat go in the hub (a `.disconnect`: the room's peers see `peer-left`).
    case unseat(ConnectionID)
    /// Add the seat to this node's shared seat list and publish the join, with the claim's epoch.
    case announceJoin(PeerIdentity, epoch: Int64)
    /// Remove the seat from this node's list and publish the leave.
    case announceLeave(RoomID, PeerID)
    /// Remove the seat from this node's list without a leave (another node took it over).
    case dropSeat(RoomID, PeerID)
    /// Register this node with exactly these claims, in join order (replacing its list, atomically),
    /// and publish `resynced`.
    case register([ClusterMembership.Claim])
    /// Read the seat lists of these nodes (nil: of every registered live node, a complete snapshot).
    case fetchSeats([String]?)
    /// A node is gone: delete its seat list and registration.
    case forgetNode(String)
}

extension PeerIdentity {
    /// The fields a remote node needs (roster entry, room limit); credentials stay on their node.
    public var clusterJSON: JSONValue {
        ["room": .string(room.rawValue), "peer": .string(peer.rawValue), "role": .string(role),
         "name": name.map(JSONValue.string) ?? .null, "call": call.map { .string($0.rawValue) } ?? .null,
         "max_peers": maxPeers.map { .int(Int64($0)) } ?? .null]
    }

    public init?(clusterJSON json: JSONValue) {
        guard let fields = json.objectValue, let room = fields["room"]?.stringValue, let peer = fields["peer"]?.stringValue,
            let role = fields["role"]?.stringValue
        else { return nil }
        self.init(peer: PeerID(peer), room: RoomID(room), call: fields["call"]?.stringValue.map { CallID($0) }, role: role,
                  name: fields["name"]?.stringValue, maxPeers: fields["max_peers"]?.int64Value.map { Int($0) })
    }
}

extension PresenceIdentity {
    public var clusterJSON: JSONValue {
        ["peer": .string(peer.rawValue), "role": .string(role.rawValue), "name": name.map(JSONValue.string) ?? .null,
         "queues": queues.map { .array($0.map { .string($0.rawValue) }) } ?? .null]
    }

    public init?(clusterJSON json: JSONValue) {
        guard let fields = json.objectValue, let peer = fields["peer"]?.stringValue,
            let role = fields["role"]?.stringValue.flatMap(PresenceRole.init(rawValue:))
        else { return nil }
        self.init(peer: PeerID(peer), role: role, name: fields["name"]?.stringValue,
                  queues: fields["queues"]?.arrayValue.map { $0.compactMap(\.stringValue).map { QueueName($0) } })
    }
}

extension ClusterEvent {
    public var encoded: [UInt8] {
        switch self {
        case .joined(let node, let identity, let epoch):
            return JSONWriter.bytes(["t": "join", "node": .string(node), "seat": identity.clusterJSON, "epoch": .int(epoch)])
        case .left(let node, let room, let peer):
            return JSONWriter.bytes(["t": "leave", "node": .string(node), "room": .string(room.rawValue), "peer": .string(peer.rawValue)])
        case .resynced(let node):
            return JSONWriter.bytes(["t": "resync", "node": .string(node)])
        }
    }

    public init?(encoded bytes: [UInt8]) {
        guard let fields = (try? JSONParser.parse(bytes))?.objectValue, let node = fields["node"]?.stringValue else { return nil }
        switch fields["t"]?.stringValue {
        case "join":
            guard let seat = fields["seat"], let identity = PeerIdentity(clusterJSON: seat) else { return nil }
            self = .joined(node: node, identity, epoch: fields["epoch"]?.int64Value ?? 0)
        case "leave":
            guard let room = fields["room"]?.stringValue, let peer = fields["peer"]?.stringValue else { return nil }
            self = .left(node: node, room: RoomID(room), peer: PeerID(peer))
        case "resync":
            self = .resynced(node: node)
        default:
            return nil
        }
    }
}

/// What one node sends another on its own channel: a frame for some of its peers in a room, or a
/// close of one of them. A JSON header line, then (for a frame) the frame's bytes as the sender
/// encoded them, so the receiver hands them to sockets without decoding.
///
/// The presence channel runs on one node at a time, the presence leader (a Redis lease): the
/// other nodes relay their presence connections' opens, frames and closes to it (`presence…` from
/// the connection's node, with its id there), and it sends frames and closes back.
public enum ClusterDelivery: Sendable, Equatable {
    case frame(room: RoomID, peers: [PeerID], bytes: [UInt8])
    case close(room: RoomID, peer: PeerID, code: Int)
    case presenceOpen(node: String, connection: UInt64, PresenceIdentity)
    case presenceMessage(node: String, connection: UInt64, bytes: [UInt8])
    case presenceGone(node: String, connection: UInt64)
    /// Leader → the connection's node.
    case presenceFrame(connection: UInt64, bytes: [UInt8])
    case presenceClose(connection: UInt64, code: Int)
    /// A `PATCH` or `DELETE` of an HTTP session or WHIP resource another node holds, from the node
    /// that received it (`node`), to be answered with `httpResponse` under the same `request` id.
    case httpRequest(node: String, request: UInt64, method: String, path: String, headers: [String: String],
                     remote: String, body: [UInt8])
    /// The owner's answer to an `httpRequest`.
    case httpResponse(request: UInt64, status: Int, headers: [[String]], body: [UInt8])

    public var encoded: [UInt8] {
        var out: [UInt8]
        func header(_ kind: String, _ fields: [String: JSONValue], body: [UInt8] = []) -> [UInt8] {
            var all = fields
            all["kind"] = .string(kind)
            var bytes = JSONWriter.bytes(.object(all))
            bytes.append(0x0a)
            return bytes + body
        }
        switch self {
        case .presenceOpen(let node, let connection, let identity):
            return header("p-open", ["node": .string(node), "conn": .int(Int64(bitPattern: connection)), "identity": identity.clusterJSON])
        case .presenceMessage(let node, let connection, let bytes):
            return header("p-msg", ["node": .string(node), "conn": .int(Int64(bitPattern: connection))], body: bytes)
        case .presenceGone(let node, let connection):
            return header("p-gone", ["node": .string(node), "conn": .int(Int64(bitPattern: connection))])
        case .presenceFrame(let connection, let bytes):
            return header("p-frame", ["conn": .int(Int64(bitPattern: connection))], body: bytes)
        case .presenceClose(let connection, let code):
            return header("p-close", ["conn": .int(Int64(bitPattern: connection)), "close": .int(Int64(code))])
        case .httpRequest(let node, let request, let method, let path, let headers, let remote, let body):
            return header("h-req", ["node": .string(node), "conn": .int(Int64(bitPattern: request)), "method": .string(method),
                                    "path": .string(path), "headers": .object(headers.mapValues(JSONValue.string)),
                                    "remote": .string(remote)], body: body)
        case .httpResponse(let request, let status, let headers, let body):
            return header("h-res", ["conn": .int(Int64(bitPattern: request)), "status": .int(Int64(status)),
                                    "headers": .array(headers.map { .array($0.map(JSONValue.string)) })], body: body)
        case .frame(let room, let peers, let bytes):
            out = JSONWriter.bytes(["room": .string(room.rawValue), "peers": .array(peers.map { .string($0.rawValue) })])
            out.append(0x0a)
            out += bytes
        case .close(let room, let peer, let code):
            out = JSONWriter.bytes(["room": .string(room.rawValue), "peers": [.string(peer.rawValue)], "close": .int(Int64(code))])
            out.append(0x0a)
        }
        return out
    }

    public init?(encoded bytes: [UInt8]) {
        // JSONWriter escapes newlines inside strings, so the first 0x0a ends the header.
        guard let newline = bytes.firstIndex(of: 0x0a),
            let header = (try? JSONParser.parse(Array(bytes[..<newline])))?.objectValue
        else { return nil }
        let body = Array(bytes[(newline + 1)...])
        if let kind = header["kind"]?.stringValue {
            guard let raw = header["conn"]?.int64Value else { return nil }
            let connection = UInt64(bitPattern: raw)
            let node = header["node"]?.stringValue
            switch kind {
            case "p-open":
                guard let node, let json = header["identity"], let identity = PresenceIdentity(clusterJSON: json) else { return nil }
                self = .presenceOpen(node: node, connection: connection, identity)
            case "p-msg":
                guard let node else { return nil }
                self = .presenceMessage(node: node, connection: connection, bytes: body)
            case "p-gone":
                guard let node else { return nil }
                self = .presenceGone(node: node, connection: connection)
            case "p-frame":
                self = .presenceFrame(connection: connection, bytes: body)
            case "p-close":
                guard let code = header["close"]?.int64Value else { return nil }
                self = .presenceClose(connection: connection, code: Int(code))
            case "h-req":
                guard let node, let method = header["method"]?.stringValue, let path = header["path"]?.stringValue,
                    let fields = header["headers"]?.objectValue
                else { return nil }
                self = .httpRequest(node: node, request: connection, method: method, path: path,
                                    headers: fields.compactMapValues(\.stringValue), remote: header["remote"]?.stringValue ?? "",
                                    body: body)
            case "h-res":
                guard let status = header["status"]?.int64Value, let fields = header["headers"]?.arrayValue else { return nil }
                self = .httpResponse(request: connection, status: Int(status),
                                     headers: fields.compactMap { $0.arrayValue?.compactMap(\.stringValue) }.filter { $0.count == 2 },
                                     body: body)
            default:
                return nil
            }
            return
        }
        guard let room = header["room"]?.stringValue, let peers = header["peers"]?.arrayValue?.compactMap(\.stringValue)
        else { return nil }
        if let code = header["close"]?.int64Value {
            guard let peer = peers.first else { return nil }
            self = .close(room: RoomID(room), peer: PeerID(peer), code: Int(code))
        } else {
            self = .frame(room: RoomID(room), peers: peers.map { PeerID($0) }, bytes: body)
        }
    }
}

extension Frame {
    /// A frame parsed back from its wire bytes (for a receiver that needs its fields, like an HTTP
    /// session); nil when the bytes are not a frame object.
    public init?(wire bytes: [UInt8]) {
        guard let fields = (try? JSONParser.parse(bytes))?.objectValue, let type = fields["type"]?.stringValue else { return nil }
        var error: WireError?
        if let object = fields["error"]?.objectValue, let code = object["code"]?.int64Value {
            error = WireError(code: Int(code), message: object["message"]?.stringValue ?? "")
        }
        self.init(type: type, from: fields["from"]?.stringValue, to: fields["to"]?.stringValue, payload: fields["payload"],
                  error: error)
    }
}
