import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The `Router` of cluster mode (`cluster_redis_url`): this node's sockets and HTTP sessions
/// through a `LocalRouter`, and every peer on another node as a remote seat in the hub
/// (`ClusterMembership`). A frame the hub sends to remote seats is encoded once and published to
/// each of their nodes, which hand the same bytes to their sockets (`from` is the sending node's
/// stamp). Membership frames (`welcome`, `peer-joined`, `peer-left`) are not forwarded: every
/// node makes them for its own peers from the membership bus. `meter` frames are: a room's meter
/// runs on the one node whose store holds its call.
///
/// With a shared chat store (`database_url`), `ChatCatchUp` (CallingCore) follows which chat seqs
/// each local peer has: a forwarded chat a peer already has is not handed to it again, and the
/// history behind a gap (a chat forwarded before its seat was known, or dropped while Redis was
/// down) is read from the store and delivered (`readHistory`).
/// Service thread.
// @unchecked Sendable: every method runs on the service thread; a history read's completion
// (store queue) captures the router only to hop back through `post`.
final class ClusterRouter: Router, @unchecked Sendable {
    let local: LocalRouter
    let driver: RedisClusterDriver
    private(set) var membership: ClusterMembership
    /// Frames published to other nodes, and received from them.
    private(set) var forwarded = 0
    private(set) var arrived = 0
    /// Nil without a shared chat store: each node's seqs are its own, so no gap can be told.
    private(set) var catchUp: ChatCatchUp?
    /// Chats handed to local peers from the store because the bus had not brought them, and
    /// forwarded chats not handed over because the peer had them already.
    private(set) var chatsFilled = 0
    private(set) var chatsDeduplicated = 0
    /// Where `catchUp` reads the history behind a gap: the shared chat store.
    private let history: any ChatPersistence
    /// How a history read's answer comes back to the service thread.
    private let post: ServicePost
    private let now: @Sendable () -> Millis

    private static let nodeLocalTypes: Set<String> = [FrameType.welcome.rawValue, FrameType.peerJoined.rawValue,
                                                       FrameType.peerLeft.rawValue]

    init(local: LocalRouter, driver: RedisClusterDriver, catchUp: ChatCatchUp? = nil, history: any ChatPersistence,
         post: @escaping ServicePost, now: @escaping @Sendable () -> Millis)
    {
        self.local = local
        self.driver = driver
        self.membership = ClusterMembership(node: driver.settings.node)
        self.catchUp = catchUp
        self.history = history
        self.post = post
        self.now = now
    }

    var node: String { membership.node }

    // MARK: Router

    func deliver(_ frame: Frame, to targets: [ConnectionID]) {
        // A local peer's `welcome` says from which seq on it needs live chats.
        if catchUp != nil, frame.type == FrameType.welcome.rawValue { welcomed(frame, targets) }
        guard targets.contains(where: { $0.isRemoteSeat }) else { return local.deliver(frame, to: targets) }
        local.deliver(frame, to: targets.filter { !$0.isRemoteSeat })
        guard !Self.nodeLocalTypes.contains(frame.type) else { return }
        struct Destination: Hashable {
            var node: String
            var room: RoomID
        }
        var groups: [Destination: [PeerID]] = [:]
        var order: [Destination] = []
        for target in targets where target.isRemoteSeat {
            guard let seat = membership.remoteSeat(target) else { continue }
            let destination = Destination(node: seat.node, room: seat.identity.room)
            if groups[destination] == nil { order.append(destination) }
            groups[destination, default: []].append(seat.identity.peer)
        }
        guard !order.isEmpty else { return }
        let bytes = frame.encoded()
        var commands: [RedisClusterDriver.Command] = []
        for destination in order {
            let peers = groups[destination] ?? []
            commands.append(.deliver(node: destination.node, .frame(room: destination.room, peers: peers, bytes: bytes)))
            forwarded += peers.count
        }
        driver.submit(commands)
    }

    func close(_ connection: ConnectionID, code: CloseCode) {
        guard connection.isRemoteSeat else { return local.close(connection, code: code) }
        // The hub let the remote seat go. A takeover (`replaced`) is every node's own decision from
        // the bus; an operator's kick, a closed room or a spent consultation meter is carried out
        // by the peer's node.
        if code == .kicked || code == .roomClosed || code == .consultationEnded, let seat = membership.remoteSeat(connection) {
            driver.submit([.deliver(node: seat.node, .close(room: seat.identity.room, peer: seat.identity.peer, code: Int(code.rawValue)))])
        }
        submit(membership.handle(.remoteSeatReleased(connection)))
    }

    func attach(_ connection: ConnectionID, to handler: any VirtualConnection) { local.attach(connection, to: handler) }
    func detach(_ connection: ConnectionID) { local.detach(connection) }

    func joined(_ identity: PeerIdentity, on connection: ConnectionID, takeover: Bool) {
        // A remote seat's join came from the bus; the membership already knows it.
        guard !connection.isRemoteSeat else { return }
        local.joined(identity, on: connection, takeover: takeover)
        submit(membership.handle(.localJoined(identity, connection, at: now())))
    }

    func left(_ identity: PeerIdentity, from connection: ConnectionID) {
        guard !connection.isRemoteSeat else {
            return submit(membership.handle(.remoteSeatReleased(connection)))
        }
        local.left(identity, from: connection)
        catchUp?.left(connection)
        submit(membership.handle(.localLeft(identity, connection)))
    }

    func committed(_ message: ChatMessage) {
        catchUp?.committed(room: message.room, seq: message.seq, now: now())
    }

    /// The room's count in Redis (`RoomSeats`); while Redis is down the node's own check stands.
    func admitAcrossNodes(_ identity: PeerIdentity, limit: Int, answer: @escaping @Sendable (SeatAdmission) -> Void) {
        guard driver.isUp else { return answer(.unchecked) }
        driver.submit([.admitSeat(identity, limit: limit, SeatAdmissionReply(answer))])
    }

    func abandonAdmission(_ identity: PeerIdentity) {
        // A seat this node holds for another connection of the peer (a takeover under way) stays.
        guard local.connection(of: identity.peer, in: identity.room) == nil else { return }
        driver.submit([.releaseSeat(identity.room, identity.peer)])
    }

    func isLocal(_ connection: ConnectionID) -> Bool { !connection.isRemoteSeat }

    // MARK: from the driver

    /// Feeds the membership an input from Redis; returns the hub effects (`seat`, `unseat`) for
    /// the caller to apply, and queues the rest for the driver.
    func handle(_ input: ClusterInput) -> [ClusterEffect] {
        let effects = membership.handle(input)
        submit(effects)
        return effects.filter {
            switch $0 {
            case .seat, .unseat: return true
            default: return false
            }
        }
    }

    /// A frame another node addressed to some of this node's peers. `seat` is the hub's seat of a
    /// peer in `room` (`SignalingService.seat(of:in:)`): a seat in its reconnect grace has no
    /// socket, so an addressed relay to it is refused back to its sender, on whichever node, as the
    /// hub refuses one from a local sender (`refuseRelay`).
    func deliverArrived(room: RoomID, peers: [PeerID], bytes: [UInt8],
                        seat: (PeerID) -> (connection: ConnectionID, reconnecting: Bool)?)
    {
        var targets: [ConnectionID] = []
        targets.reserveCapacity(peers.count)
        for peer in peers {
            guard let (connection, reconnecting) = seat(peer) else { continue }
            if reconnecting {
                refuseRelay(room: room, to: peer, bytes: bytes, seat: seat)
            } else {
                targets.append(connection)
            }
        }
        guard !targets.isEmpty else { return }
        // The type, for the frames-out counter, without decoding the whole frame.
        let type = Self.frameType(bytes) ?? "unknown"
        // Every row of the room's chat log (a message or an operation on one) has its seq: the
        // catch-up follows them all, or an operation's seq would read as a gap and be filled twice.
        if catchUp != nil, Self.chatLogTypes.contains(type), let seq = Self.chatSeq(bytes) {
            let fresh = catchUp?.arrived(room: room, seq: seq, targets: targets, now: now()) ?? targets
            chatsDeduplicated += targets.count - fresh.count
            targets = fresh
            guard !targets.isEmpty else { return }
        }
        arrived += targets.count
        local.deliver(encoded: bytes, type: type, to: targets)
    }

    /// Relays to a seat in its grace refused here, on the node that holds the grace.
    private(set) var relaysRefused = 0

    /// Answers an addressed relay (`offer`, `answer`, `candidate`, `data` with `to`) that another
    /// node forwarded to `peer`, a seat in its reconnect grace here, with the hub's `error` 480
    /// `peer_reconnecting` to its sender. Only this node knows of the grace when the relay is sent
    /// (other nodes' hubs keep the seat as a plain remote seat), so the refusal crosses the bus
    /// back, as any frame to a remote seat does. Broadcasts skip the seat, as they do locally.
    private func refuseRelay(room: RoomID, to peer: PeerID, bytes: [UInt8],
                             seat: (PeerID) -> (connection: ConnectionID, reconnecting: Bool)?)
    {
        guard let frame = try? JSONParser.parse(bytes), let type = frame["type"]?.stringValue, RelayKind(rawValue: type) != nil,
              frame["to"]?.stringValue == peer.rawValue, let from = frame["from"]?.stringValue,
              let sender = seat(PeerID(from)), !sender.reconnecting
        else { return }
        relaysRefused += 1
        // An RPC frame's refusal names its request id, as the hub's own does (`Hub.routeRPC`).
        let rpcID = RelayKind(rawValue: type)?.isRPC == true ? frame["payload"]?["id"]?.stringValue : nil
        deliver(Hub.naming(rpcID, in: Hub.reconnectingRefusal(to: peer, type: type)), to: [sender.connection])
    }

    /// Every `tick_ms`: gaps open for `cluster_chat_gap_ms` read the history behind them.
    func tick(now current: Millis) {
        guard catchUp != nil else { return }
        perform(catchUp?.tick(now: current) ?? [])
    }

    /// Redis is back after an outage: every room with local peers reads what the bus dropped.
    func busRestored() {
        guard catchUp != nil else { return }
        perform(catchUp?.busRestored() ?? [])
    }

    /// Reads `room`'s history after `sinceSeq` for `catchUp`, answered by `historyRead` on the
    /// service thread. Weak: a stopped server must not be kept alive by a read in flight.
    private func readHistory(room: RoomID, sinceSeq: Int64, limit: Int) {
        history.history(room: room, sinceSeq: sinceSeq, limit: limit) { [weak self, post] result in
            post { [weak self] in
                switch result {
                case .success(let page):
                    self?.historyRead(room: room, .success(page.messages.map(ChatMessage.init(record:))), hasMore: page.hasMore)
                case .failure:
                    self?.historyRead(room: room, .failure(HistoryReadFailure()), hasMore: false)
                }
            }
        }
    }

    /// The answer to a `readHistory`.
    func historyRead(room: RoomID, _ result: Result<[ChatMessage], HistoryReadFailure>, hasMore: Bool) {
        switch result {
        case .success(let messages): perform(catchUp?.fetched(room: room, messages: messages, hasMore: hasMore, now: now()) ?? [])
        case .failure: catchUp?.fetchFailed(room: room, now: now())
        }
    }

    struct HistoryReadFailure: Error {}

    private func perform(_ effects: [ChatCatchUp.Effect]) {
        for effect in effects {
            switch effect {
            case .fetch(let room, let sinceSeq, let limit):
                readHistory(room: room, sinceSeq: sinceSeq, limit: limit)
            case .deliver(let message, let targets):
                chatsFilled += targets.count
                local.deliver(message.frame, to: targets)
            }
        }
    }

    /// Every welcome is the hub's, and the hub sends them typed (`Frame.welcome`).
    private func welcomed(_ frame: Frame, _ targets: [ConnectionID]) {
        guard let welcome = frame.welcomePayload else { return }
        let current = now()
        for target in targets where !target.isRemoteSeat {
            catchUp?.joined(room: RoomID(welcome.roomID), peer: PeerID(welcome.peerID), connection: target,
                            lastSeq: welcome.lastSeq, now: current)
        }
    }

    /// The frame types of chat log rows (ChatRowKind.frameType).
    static let chatLogTypes: Set<String> = [FrameType.chat.rawValue, FrameType.chatEdit.rawValue, FrameType.chatDelete.rawValue,
                                             FrameType.chatReact.rawValue]

    /// `payload.seq` of an encoded chat frame.
    static func chatSeq(_ bytes: [UInt8]) -> Int64? {
        guard let value = try? JSONParser.parse(bytes), case .int(let seq)? = value["payload"]?["seq"] else { return nil }
        return seq
    }

    private func submit(_ effects: [ClusterEffect]) {
        let commands = effects.compactMap { effect -> RedisClusterDriver.Command? in
            switch effect {
            case .seat, .unseat: return nil
            default: return .effect(effect)
            }
        }
        driver.submit(commands)
    }

    /// `"type":"…"` from encoded frame bytes (JSONWriter sorts keys, so it follows payload/to).
    static func frameType(_ bytes: [UInt8]) -> String? {
        let marker = Array(#""type":""#.utf8)
        guard bytes.count > marker.count else { return nil }
        var index = bytes.count - marker.count
        while index >= 0 {
            if bytes[index] == marker[0], Array(bytes[index..<(index + marker.count)]) == marker {
                let start = index + marker.count
                guard let end = bytes[start...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
                return String(decoding: bytes[start..<end], as: UTF8.self)
            }
            index -= 1
        }
        return nil
    }
}

/// Joins the cluster driver's events to the rooms: remote seats become hub joins and leaves,
/// frames from other nodes reach local peers, and a kick from another node is carried out here.
/// Built by `ServerApp` after the rooms; reports Redis's state for `/healthz` and `/metrics`.
final class ClusterLink: @unchecked Sendable {
    // @unchecked: touched only on the service thread; the driver's events arrive through `post`.
    let router: ClusterRouter
    let rooms: SignalingService
    let presence: PresenceEndpoint
    private let logger: Logger
    private(set) var isSynced = false
    private var lastError: String?
    /// Redis was lost since the last complete resync.
    private var lostBus = false
    /// A dead node's seats are being ended in the shared store (`endSeatsOfDeadNodes`).
    private var endingSeats = false
    /// The nodes with a heartbeat at the last liveness check, and every node seen alive since start.
    private var alive: Set<String> = []
    private var seenAlive: Set<String> = []
    /// HTTP session requests sent to their owning node (`forward`), by request id, awaiting its answer.
    private var forwarded: [UInt64: (deadline: Millis, respond: @Sendable (HTTPResponse) -> Void)] = [:]
    private var nextForward: UInt64 = 0
    /// Runs a request another node forwarded (`HTTPRoutes.handleForwarded`); set by `ServerApp`.
    var dispatch: ((HTTPRequest, @escaping @Sendable (HTTPResponse) -> Void) -> Void)?

    init(router: ClusterRouter, rooms: SignalingService, presence: PresenceEndpoint, logger: Logger) {
        self.router = router
        self.rooms = rooms
        self.presence = presence
        self.logger = logger
    }

    /// How the presence endpoint reaches another node: that node's channel, through the driver.
    static func presenceRelay(_ driver: RedisClusterDriver) -> PresenceEndpoint.ClusterRelay {
        PresenceEndpoint.ClusterRelay(node: driver.settings.node, send: { [driver] node, delivery in
            driver.submit([.deliver(node: node, delivery)])
        }, store: { [driver] commands in driver.submit(commands) })
    }

    func start() {
        router.driver.start { [self] events in handle(events) }
    }

    /// Every `tick_ms`, service thread: also answers forwarded requests whose owner is late (504).
    func tick(now: Millis) {
        router.tick(now: now)
        let late = forwarded.filter { $0.value.deadline <= now }
        for (id, entry) in late {
            forwarded[id] = nil
            entry.respond(Self.ownerTimeout)
        }
    }

    /// Where a request for a session held by `owner` goes (pure). A node is gone when a liveness
    /// check found it alive and a later one did not; one never seen alive may have started since the
    /// last check (its session is newer than the check), so it is asked, and 504 if it is dead.
    enum ForwardRoute: Equatable {
        /// Over the owner's channel.
        case owner
        /// The owner is gone, and its sessions with it: answer what a node holding none answers.
        case ownerGone
        /// Redis is unreachable: nothing can reach the owner now.
        case unreachable
    }

    static func route(owner: String, alive: Set<String>, seenAlive: Set<String>, busUp: Bool) -> ForwardRoute {
        guard busUp else { return .unreachable }
        return seenAlive.contains(owner) && !alive.contains(owner) ? .ownerGone : .owner
    }

    /// Sends a PATCH or DELETE for a session `owner` holds to that node; `respond` gets its answer,
    /// `fallback` when it is gone, 504 `session_owner_timeout` after `cluster_forward_timeout_ms`,
    /// 503 `cluster_unavailable` while Redis is unreachable. Service thread.
    func forward(to owner: String, _ request: HTTPRequest, fallback: HTTPResponse, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        switch Self.route(owner: owner, alive: alive, seenAlive: seenAlive, busUp: router.driver.isUp) {
        case .ownerGone:
            respond(fallback)
        case .unreachable:
            respond(.problem(503, code: "cluster_unavailable", detail: "the node holding this session cannot be reached now; retry shortly",
                             headers: [("retry-after", "1")]))
        case .owner:
            nextForward += 1
            let id = nextForward
            let config = rooms.context.config
            // A PATCH carrying SDP (a renegotiation, WHIP's ICE restart) waits for the answering peer first.
            let sdp = ["application/sdp", "application/trickle-ice-sdpfrag"].contains(HTTPSessions.mediaType(request) ?? "")
            let wait = config.clusterForwardTimeoutMs + (sdp ? config.sessionAnswerTimeoutMs : 0)
            forwarded[id] = (rooms.context.now() + Millis(wait), respond)
            // Only what the routes read: the token, the body's type, WHIP's If-Match.
            let headers = request.headers.filter { ["authorization", "content-type", "if-match"].contains($0.key) }
            router.driver.submit([.deliver(node: owner, .httpRequest(node: router.driver.settings.node, request: id,
                                                                       method: request.method.rawValue, path: request.path,
                                                                       headers: headers, remote: request.remoteAddress,
                                                                       body: request.body))])
        }
    }

    static let ownerTimeout = HTTPResponse.problem(504, code: "session_owner_timeout",
                                                   detail: "the node holding this session did not answer in time (cluster_forward_timeout_ms); retry shortly",
                                                   headers: [("retry-after", "1")])

    /// Another node's forwarded request: run as if it had arrived here, the response sent back.
    private func serveForwarded(from node: String, request id: UInt64, method: String, path: String, headers: [String: String],
                                remote: String, body: [UInt8])
    {
        guard let method = HTTPMethod(rawValue: method), let dispatch else { return }
        let driver = router.driver
        dispatch(HTTPRequest(method: method, path: path, headers: headers, body: body, remoteAddress: remote)) { response in
            driver.submit([.deliver(node: node, .httpResponse(request: id, status: response.status,
                                                              headers: response.headers.map { [$0.0, $0.1] }, body: response.body))])
        }
    }

    func stop() { router.driver.stop() }

    private func handle(_ events: [RedisClusterDriver.Event]) {
        for event in events {
            switch event {
            case .connected:
                lastError = nil
                apply(router.handle(.connected))
            case .disconnected(let error):
                isSynced = false
                lostBus = true
                lastError = error
                apply(router.handle(.disconnected))
                presence.clusterLost()
            case .bus(let event):
                apply(router.handle(.bus(event)))
            case .snapshot(let seats, let everyNode, let complete):
                if everyNode { isSynced = true }
                apply(router.handle(.snapshot(seats, complete: complete)))
                // Frames to other nodes were dropped while Redis was away; everyone has re-seated now.
                if everyNode, lostBus {
                    lostBus = false
                    router.busRestored()
                }
            case .liveness(let registered, let alive):
                self.alive = alive
                seenAlive.formUnion(alive)
                apply(router.handle(.liveness(registered: registered, alive: alive)))
                presence.nodesAlive(alive)
                endSeatsOfDeadNodes(alive: alive)
            case .presenceLeader(let node, let resumed):
                presence.leaderChanged(to: node, resuming: resumed.map(PresenceEndpoint.decode))
            case .delivery(.presenceFrame(let connection, let bytes)):
                router.local.deliver(encoded: bytes, type: ClusterRouter.frameType(bytes) ?? "unknown", to: [ConnectionID(connection)])
            case .delivery(.presenceClose(let connection, let code)):
                presence.closedByLeader(ConnectionID(connection), code: CloseCode(rawValue: UInt16(code)) ?? .internalError)
            case .delivery(.frame(let room, let peers, let bytes)):
                router.deliverArrived(room: room, peers: peers, bytes: bytes) { [rooms] peer in rooms.seat(of: peer, in: room) }
            case .delivery(.close(let room, let peer, let code)):
                guard let connection = router.local.connection(of: peer, in: room) else { continue }
                if code == Int(CloseCode.kicked.rawValue) {
                    rooms.handle(.kick(room, peer))
                } else if let closeCode = CloseCode(rawValue: UInt16(code)) {
                    if closeCode == .roomClosed { rooms.banSeatOfEndedRoom(room, peer) }
                    rooms.context.metrics.closes[closeCode.reason, default: 0] += 1
                    router.local.close(connection, code: closeCode)
                }
            case .delivery(.httpRequest(let node, let id, let method, let path, let headers, let remote, let body)):
                serveForwarded(from: node, request: id, method: method, path: path, headers: headers, remote: remote, body: body)
            case .delivery(.httpResponse(let id, let status, let headers, let body)):
                forwarded.removeValue(forKey: id)?.respond(HTTPResponse(status: status, headers: headers.map { ($0[0], $0[1]) }, body: body))
            case .delivery(let delivery):
                presence.arrived(delivery)
            }
        }
    }

    /// With a shared store: the seats a dead node held there end, with their `peer_left` (and the
    /// `call_ended` of rooms that empties), decided by the store so that one node sends them
    /// however many notice the death. Asked at every liveness check, one at a time, so seats of a
    /// node that died while the store was unreachable end once it is back.
    private func endSeatsOfDeadNodes(alive: Set<String>) {
        let webhooks = rooms.context.webhooks
        guard webhooks.sharing?.lifecycle != nil, !endingSeats else { return }
        endingSeats = true
        webhooks.endSeats(ofNodesNotIn: alive) { [self, logger] result in
            switch result {
            case .success(let nodes) where !nodes.isEmpty:
                logger.log(.notice, "seats of dead nodes ended", ["nodes": nodes.joined(separator: ",")])
            case .success: break
            case .failure(let error): logger.error("seats of dead nodes not ended", ["error": "\(error)"])
            }
            rooms.context.post { [self] in endingSeats = false }
        }
    }

    private func apply(_ effects: [ClusterEffect]) {
        for effect in effects {
            switch effect {
            // A join like a local one for call bookkeeping: the node whose store holds the room's call
            // marks it joined and runs its consultation meter, whichever node the peers are on.
            case .seat(let connection, let identity): rooms.join(connection, identity, resume: ChatResume())
            case .unseat(let connection): rooms.handle(.disconnect(connection))
            default: break
            }
        }
    }

    /// What `/healthz` says of the shared store (`database_url`).
    struct DatabaseHealth {
        /// Why PostgreSQL is not answering (`PostgresChatStore.unreachable`); nil while it is.
        var unreachable: String?
    }

    /// The `cluster` object of `/healthz`: Redis's and PostgreSQL's reachability (`postgres` null
    /// without `database_url`), and in `error` what failed, Redis first.
    func healthJSON(postgres: DatabaseHealth?) -> JSONValue {
        let errors = [lastError, postgres?.unreachable].compactMap { $0 }
        return ["node_id": .string(router.node), "redis": .string(router.driver.isUp ? "up" : "down"),
                "postgres": postgres.map { .string($0.unreachable == nil ? "up" : "down") } ?? .null, "synced": .bool(isSynced),
                "presence_leader": presence.leader.map(JSONValue.string) ?? .null,
                "remote_peers": .int(Int64(router.membership.remoteCount)), "local_peers": .int(Int64(router.membership.localCount)),
                "error": errors.isEmpty ? .null : .string(errors.joined(separator: "; "))]
    }

    /// Prometheus lines appended to `/metrics`.
    var metricsText: String {
        var out = ""
        func line(_ name: String, _ type: String, _ help: String, _ value: Int) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        line("calling_cluster_redis_up", "gauge", "1 while this node reaches Redis and is subscribed to the cluster bus.",
             router.driver.isUp ? 1 : 0)
        line("calling_cluster_remote_peers", "gauge", "Peers seated in this node's rooms from other nodes.", router.membership.remoteCount)
        line("calling_cluster_reconnects_total", "counter", "Failed Redis connections or connection losses.", router.driver.reconnects)
        line("calling_cluster_commands_total", "counter", "Redis commands sent (publishes, seat list changes, heartbeats excluded).",
             router.driver.published)
        line("calling_cluster_messages_received_total", "counter", "Pub/sub messages received from the cluster.", router.driver.received)
        line("calling_cluster_commands_dropped_total", "counter", "Commands dropped because Redis was unreachable.", router.driver.dropped)
        line("calling_cluster_frames_forwarded_total", "counter", "Frame deliveries published to peers on other nodes.", router.forwarded)
        line("calling_cluster_frames_arrived_total", "counter", "Frame deliveries from other nodes handed to local peers.", router.arrived)
        line("calling_cluster_relays_refused_total", "counter",
             "Relays from other nodes to a seat in its reconnect grace here, answered with error 480 peer_reconnecting.",
             router.relaysRefused)
        line("calling_cluster_chat_gap_fills_total", "counter",
             "Chats handed to local peers from the shared store because the bus had not brought them (database_url).", router.chatsFilled)
        line("calling_cluster_chat_duplicates_dropped_total", "counter",
             "Chats from other nodes not handed to a local peer that had them already (database_url).", router.chatsDeduplicated)
        return out
    }
}
