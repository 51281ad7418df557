import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// The rooms of this node: owns the `Hub`, feeds it the inputs that the room endpoint, HTTP
/// sessions and the admin API bring, and carries out its effects. Frames, closes and membership
/// changes leave through the `Router`; chats get their `seq` from `ChatPersistence` (`context.chat`); call
/// bookkeeping (ongoing calls, meters, stats) goes to `CallBook`. Lives on the service thread, so
/// its state needs no locks; store completions come back through `context.post`.
// @unchecked Sendable: every stored property is touched only on the service thread. Store completions
// run elsewhere and capture `self` solely to hop back through `context.post`.
final class SignalingService: @unchecked Sendable {
    let context: ServiceContext
    let router: any Router
    let chats: any ChatPersistence
    let calls: CallBook
    /// The `seats` table's writer on a single node (nil in a cluster, whose seats are in Redis).
    let seatJournal: SeatJournal?
    /// Set when a single node's graceful stop begins (`beginRestart`): the server's own 1001 closes
    /// that follow keep the seats (their reconnect grace) instead of ending them, since the seats
    /// are remembered and the restarted server holds them again. Service thread.
    private(set) var restarting = false

    /// `@exclusivity(unchecked)`: read or changed several times per frame, and each access to a
    /// class's stored property is otherwise checked at run time (`swift_beginAccess`, a
    /// thread-local lookup). Only the service thread touches it, and every access is a call into the pure
    /// `Hub`, which calls nothing back, so accesses never overlap.
    @exclusivity(unchecked) private var hub: Hub
    /// Rooms' live calls for `call_started`/`call_ended` (only fed while webhooks are on).
    private var lifecycle = CallLifecycle()
    /// Why the server closed a connection, for the `call_ended` reason when it was the room's last peer.
    private var closeReasons: [ConnectionID: String] = [:]
    /// Reconnect graces armed by the hub (`HubEffect.armGrace`), fed back as `.graceExpired` once
    /// due; a timer whose seat resumed or ended meanwhile is ignored by the hub then.
    private var graceTimers: [(due: Millis, timer: GraceTimer)] = []

    // Stored copies of the context's leaves: read on every frame, so not through `context`.
    private let config: ServerConfig
    private let metrics: Metrics
    private let logger: Logger
    private let webhooks: Webhooks
    private let now: @Sendable () -> Millis
    /// Chat outcomes of the store's current batch, until `postCollectedChats` posts them.
    private let chatOutcomes = CollectedChats()
    /// How often the bans other nodes stored are read (`database_ban_sync_ms`); nil without a
    /// shared store, where this node's hub already knows every ban.
    private let banSyncMs: Millis?
    private var lastBanSync: Millis = 0
    private var banSyncInFlight = false

    init(context: ServiceContext, router: any Router, chats: any ChatPersistence, calls: CallBook, seatJournal: SeatJournal? = nil) {
        self.seatJournal = seatJournal
        self.context = context
        self.config = context.config
        self.metrics = context.metrics
        self.logger = context.logger
        self.webhooks = context.webhooks
        self.now = context.now
        self.router = router
        self.chats = chats
        self.calls = calls
        self.hub = Hub(settings: context.config.hub)
        self.banSyncMs = context.config.databaseURL.isEmpty ? nil : Millis(context.config.databaseBanSyncMs)
        chats.afterAppendCompletions { [weak self] in self?.postCollectedChats() }
    }

    var hubSnapshot: Hub { hub }

    /// Whether `connection` holds a seat in the hub. False once the hub let it go (taken over,
    /// kicked, room closed) even while its socket is still closing.
    func isSeated(_ connection: ConnectionID) -> Bool { Self.inPlace(&hub) { $0.isSeated(connection) } }

    /// The seat `connection` holds, or nil: `isSeated` with where, for `relay(_:from:seat:)`.
    func seat(of connection: ConnectionID) -> Hub.Seat? { Self.inPlace(&hub) { $0.seat(of: connection) } }

    /// Runs `body` on the hub where it is stored. Calling a method on a class's stored struct
    /// copies the struct first (every table of the hub retained and released), since the callee
    /// might change the property meanwhile; through `inout` it is used in place. `isSeated` is
    /// asked once per inbound frame.
    @inline(__always)
    private static func inPlace<T>(_ hub: inout Hub, _ body: (inout Hub) -> T) -> T { body(&hub) }

    /// The connection seated as `peer` in `room`, if any (local or standing for another node's),
    /// and whether the seat is in its reconnect grace (its connection gone).
    func seat(of peer: PeerID, in room: RoomID) -> (connection: ConnectionID, reconnecting: Bool)? {
        Self.inPlace(&hub) { hub in hub.seat(of: peer, in: room).map { ($0.connection, $0.reconnecting) } }
    }

    /// Feeds the hub an input (a frame, a meter loaded from the store, an HTTP session's join or
    /// leave, an admin action). Service thread.
    func handle(_ input: HubInput) {
        switch input {
        case .join, .disconnect, .connectionLost, .graceExpired, .kick, .endRoom: membership(input)
        // A `leave` frame ends the seat like a clean close (webhooks, the cluster's leave).
        case .message(let connection, .leave): membership(.disconnect(connection))
        case .message(let connection, .relay(let kind, let to?, let payload)):
            relay(kind, to: to, payload: payload, from: connection)
        case .message(let connection, .chat(let submission)): chat(submission, from: connection)
        case .message(let connection, .chatOperation(let operation)):
            apply(Self.inPlace(&hub) { $0.chatOperation(operation, from: connection, now: now()) })
        default: apply(hub.handle(input, now: now()))
        }
    }

    /// An addressed relay from `connection`: what `handle(.message(connection, .relay(kind, to:
    /// to, payload: payload)))` does, for a relay decoded into values (one whose `to` has escapes,
    /// one that waited for its sender's join, an HTTP session's). Lent as parts to the same path
    /// as a relay straight from the frame (`relay(_:from:seat:)`): the hub finds the target without
    /// the effect arrays (`Hub.route(_:from:seat:)`), and the router writes the relayed frame from
    /// the parts, without copying them into a value first. An unseated sender gets nothing.
    func relay(_ kind: RelayKind, to: PeerID, payload: RawJSON?, from connection: ConnectionID) {
        guard let seat = self.seat(of: connection) else { return }
        RelayParts.with(kind, to: to, payload: payload) { relay($0, from: connection, seat: seat) }
    }

    /// `relay(_:to:payload:from:)` for the parts of a relay lent straight from the frame they
    /// arrived in, from `connection` seated at `seat` (`seat(of:)`, nothing changed since): what
    /// the room endpoint calls for the most frequent frame of all, without a `HubInput` around it,
    /// a `String` for its `to` or a slice for its payload.
    func relay(_ parts: RelayParts, from connection: ConnectionID, seat: Hub.Seat) {
        let route = Self.inPlace(&hub) { $0.route(parts, from: connection, seat: seat) }
        guard case .deliver(let from, let target, let plainIDs)? = route else { return answer(route) }
        router.deliverRelay(parts, from: from, target: target, plainIDs: plainIDs)
    }

    /// A chat from `connection`: what `handle(.message(connection, .chat(submission)))` does,
    /// with its store request made straight from the hub's answer (`Hub.admitChat`), no effects.
    func chat(_ submission: ChatSubmission, from connection: ConnectionID) {
        let now = now()
        switch Self.inPlace(&hub, { $0.admitChat(submission, from: connection, now: now) }) {
        case .store(let room, let peer): storeChat(connection: connection, room: room, peer: peer, submission, timestamp: now)
        case .effects(let effects): apply(effects)
        }
    }

    /// A relay's route that delivers nothing: an `error` back to its sender, or nothing at all.
    private func answer(_ route: RelayRoute?) {
        guard case .answer(let frame, let sender)? = route else { return }
        countError(frame, recipients: 1)
        router.deliver(frame, to: sender)
    }

    /// A `ping` from `connection`, seated at `seat` (`seat(of:)`, nothing changed since): what
    /// `handle(.message(connection, .ping(payload)))` does, without the input and the effect array
    /// around the one frame (most of a ping's turn on the service thread).
    func pong(_ payload: RawJSON?, from connection: ConnectionID, seat: Hub.Seat) {
        guard let frame = Self.inPlace(&hub, { $0.pong(payload, from: connection, seat: seat) }) else { return }
        router.deliver(frame, to: connection)
    }

    /// An `error` frame counts in `calling_errors_total` once per recipient.
    @inline(__always)
    private func countError(_ frame: Frame, recipients: Int) {
        // `error` first: a relayed frame has none, so it skips the type comparison.
        if let code = frame.error?.code, frame.type == FrameType.error.rawValue, let name = ErrorCode(rawValue: code)?.name {
            metrics.errors[name, default: 0] += recipients
        }
    }

    /// Seats `identity` on `connection` and marks the room's call joined (a WebSocket peer whose
    /// chat state loaded, or an HTTP session). Service thread.
    func join(_ connection: ConnectionID, _ identity: PeerIdentity, resume: ChatResume) {
        membership(.join(connection, identity, resume))
        callJoined(identity)
    }

    /// A peer joined `identity.room`: its registered calls become ongoing, and the room gets its
    /// consultation meter if it has none yet. Service thread.
    func callJoined(_ identity: PeerIdentity) {
        // `attachMeter` runs on the service thread (CallBook hops back before calling it).
        calls.peerJoined(identity, now: now(), needsMeter: hub.meter(of: identity.room) == nil) { [self] room, meter in
            handle(.attachMeter(room, meter))
        }
    }

    /// Remembers why the server is closing `connection`, for `call_ended.reason` when it was the
    /// room's last peer (only kept while webhooks are on).
    func noteCloseReason(_ reason: String, for connection: ConnectionID) {
        if webhooks.isEnabled { closeReasons[connection] = reason }
    }

    /// A connection that was promised a seat went away before joining.
    func abandonSeat(_ connection: ConnectionID, _ identity: PeerIdentity) {
        closeReasons[connection] = nil
        apply(hub.handle(.abandonSeat(identity.room, identity.peer), now: now()))
    }

    /// A join, a leave, a kick or a closed room: the hub's effects, the membership change told to
    /// the router, and the webhook events the change means. Events are emitted before the effects
    /// run, since an effect (a close) can lead to the next leave; the router hears of the change
    /// after them, so a close it carries out still knows where the closed seat was.
    private func membership(_ input: HubInput) {
        let current = now()
        var joined: [(PeerIdentity, ConnectionID, Bool)] = []
        var left: [(PeerIdentity, ConnectionID)] = []
        // Webhook events follow this node's seats only. In a cluster with a shared store the store
        // counts every node's seats and decides the events (`Webhooks.recordSeats`); without one
        // every node reports its own peers.
        let hooks = webhooks.isEnabled
        var events: [CallLifecycle.Event] = []
        let shared = webhooks.sharing?.lifecycle != nil
        var changes: [LifecycleSeatChange] = []
        func started(_ identity: PeerIdentity, on connection: ConnectionID, takeover: Bool) -> [CallLifecycle.Event] {
            guard shared else { return lifecycle.joined(identity, takeover: takeover, now: current) }
            changes.append(.joined(identity, transport: connection.isHTTPSession ? "http" : "websocket"))
            return []
        }
        func ended(_ identity: PeerIdentity, reason: String) -> [CallLifecycle.Event] {
            guard shared else { return lifecycle.left(identity, reason: reason, now: current) }
            changes.append(.left(identity, reason: reason))
            return []
        }
        // Tokens a kick or an ended room refuses from now on: stored, for the other nodes and a restart.
        var bans: [TokenBan] = []
        let effects: [HubEffect]
        switch input {
        case .join(let connection, let identity, _):
            let previous = hub.connection(of: identity.peer, in: identity.room)
            effects = hub.handle(input, now: current)
            // A join the hub refused (no seat) seats nobody.
            if hub.identity(of: connection) != nil {
                joined.append((identity, connection, previous != nil))
                if hooks, router.isLocal(connection) {
                    events = started(identity, on: connection, takeover: previous.map(router.isLocal) ?? false)
                }
            }
        case .disconnect(let connection), .connectionLost(let connection):
            // Nil for a connection whose seat was taken over: its leave changes nothing.
            let identity = hub.identity(of: connection)
            effects = hub.handle(input, now: current)
            let reason = closeReasons.removeValue(forKey: connection)
                ?? (webhooks.isStopping ? "server_shutdown" : "last_peer_left")
            // A seat in its reconnect grace has not ended: no `peer_left`, no leave for the
            // router (the cluster keeps it announced) until `.graceExpired` ends it.
            if let identity, hub.seat(of: identity.peer, in: identity.room)?.connection != connection {
                left.append((identity, connection))
                if hooks, router.isLocal(connection) { events = ended(identity, reason: reason) }
            }
        case .graceExpired(let timer):
            let seat = hub.seat(of: timer.peer, in: timer.room)
            effects = hub.handle(input, now: current)
            if let seat, seat.reconnecting, hub.seat(of: timer.peer, in: timer.room) == nil {
                left.append((seat.identity, seat.connection))
                if hooks, router.isLocal(seat.connection) {
                    events = ended(seat.identity, reason: webhooks.isStopping ? "server_shutdown" : "last_peer_left")
                }
            }
        case .kick(let room, let peer):
            // The hub seats the kicked peer out at once; its socket's disconnect then finds nothing.
            // A seat in its reconnect grace is found too (its connection is gone).
            let seat = hub.seat(of: peer, in: room).map { ($0.connection, $0.identity) }
            effects = hub.handle(input, now: current)
            if let (connection, identity) = seat {
                bans.append(contentsOf: Hub.ban(of: identity).map { [$0] } ?? [])
                left.append((identity, connection))
                if hooks, router.isLocal(connection) { events = ended(identity, reason: "kicked") }
            }
        case .endRoom(let room):
            let seated = hub.identities(in: room).compactMap { identity in
                hub.connection(of: identity.peer, in: room).map { ($0, identity) }
            }
            effects = hub.handle(input, now: current)
            for (connection, identity) in seated {
                bans.append(contentsOf: Hub.ban(of: identity).map { [$0] } ?? [])
                left.append((identity, connection))
                if hooks, router.isLocal(connection) { events += ended(identity, reason: "room_closed") }
            }
        default:
            effects = hub.handle(input, now: current)
        }
        if let seatJournal { remember(joined: joined, left: left, in: seatJournal, now: current) }
        for event in events { emit(event, connection: input) }
        if !changes.isEmpty { webhooks.recordSeats(changes) }
        if !bans.isEmpty { storeBans(bans) }
        // A room that lost its last seat ends its ongoing calls; an admin end already ended them,
        // and a stopping server's peers come back to the restarted one.
        if !left.isEmpty, !webhooks.isStopping, !isEndRoom(input) {
            for room in Set(left.map(\.0.room)) where hub.members(of: room).isEmpty {
                calls.roomEmptied(room, now: current)
            }
        }
        apply(effects)
        for (identity, connection, takeover) in joined { router.joined(identity, on: connection, takeover: takeover) }
        for (identity, connection) in left { router.left(identity, from: connection) }
    }

    /// Tells the `seats` table which seats started and which ended. A seat that only went into
    /// its reconnect grace changes nothing there: it is still held. An HTTP session's seat is not
    /// remembered (its session does not outlive the process).
    private func remember(joined: [(PeerIdentity, ConnectionID, Bool)], left: [(PeerIdentity, ConnectionID)],
                          in journal: SeatJournal, now current: Millis) {
        for (identity, _) in left { journal.record(.remove(room: identity.room, peer: identity.peer)) }
        for (identity, connection, _) in joined {
            if connection.isHTTPSession {
                journal.record(.remove(room: identity.room, peer: identity.peer))
            } else {
                let started = lifecycle.call(in: identity.room)?.startedAt ?? current
                journal.record(.save(SeatRecord(identity: identity, callStartedMs: started, joinedMs: current)))
            }
        }
    }

    /// At start, before the transport: seats the remembered `records` again, each in its
    /// reconnect grace counted from now (docs/protocol.md, "Across a server restart"). Their
    /// webhooks `call_started`/`peer_joined` went out before the restart; their `peer_left` and
    /// `call_ended` go out when the grace ends unresumed.
    func restore(_ records: [SeatRecord]) {
        guard !records.isEmpty else { return }
        let current = now()
        apply(hub.restore(records.map(\.identity), now: current))
        if webhooks.isEnabled {
            for record in records where hub.seat(of: record.identity.peer, in: record.identity.room)?.reconnecting == true {
                lifecycle.restored(record.identity, callStartedAt: record.callStartedMs)
            }
        }
    }

    /// A single node's graceful stop begins: from now on its own 1001 closes keep their seats, and
    /// each counting meter's time is stored, so the restarted server resumes it from now.
    func beginRestart() {
        restarting = true
        apply(hub.persistMeters(now: now()))
    }

    // MARK: bans

    /// Writes kicked tokens to the store (`AccessPersistence`), so that the nodes sharing it and this
    /// node after a restart refuse them too. The hub here refuses them already.
    private func storeBans(_ bans: [TokenBan]) {
        context.access.storeTokenBans(bans) { [context, logger] result in
            guard case .failure(let error) = result else { return }
            logger.error("kicked tokens not stored: other nodes may admit them", ["tokens": "\(bans.count)", "error": "\(error)"])
            context.post { context.metrics.storeFailures += 1 }
        }
    }

    /// A room ended through another node, which knows no other node's credentials (they stay on
    /// their node): this node's seat of `peer` is refused here from now on and stored for the other
    /// nodes, as the ending node does for its own seats. Before the seat's 4404 close. Service thread.
    func banSeatOfEndedRoom(_ room: RoomID, _ peer: PeerID) {
        guard let identity = hub.seat(of: peer, in: room)?.identity, let ban = Hub.ban(of: identity) else { return }
        imposeBans([ban])
        storeBans([ban])
    }

    /// Has the hub refuse `bans` (read from the store) as if they were kicked here. Service thread.
    func imposeBans(_ bans: [TokenBan]) {
        hub.impose(bans, now: now())
    }

    /// With a shared store (`database_url`): every `database_ban_sync_ms`, reads the bans other
    /// nodes stored, so that a token kicked anywhere is refused here before its upgrade, with
    /// nothing added to a join. One read at a time.
    private func syncBans(now current: Millis) {
        guard let interval = banSyncMs, current - lastBanSync >= interval, !banSyncInFlight else { return }
        lastBanSync = current
        banSyncInFlight = true
        context.access.tokenBans(activeAt: current) { [self] result in
            context.post { [self] in
                banSyncInFlight = false
                switch result {
                case .success(let bans): imposeBans(bans)
                case .failure(let error):
                    metrics.storeFailures += 1
                    logger.error("kicked tokens not read from the store", ["error": "\(error)"])
                }
            }
        }
    }

    private func emit(_ event: CallLifecycle.Event, connection input: HubInput) {
        var transport = "websocket"
        if case .join(let connection, _, _) = input, connection.isHTTPSession { transport = "http" }
        if case .disconnect(let connection) = input, connection.isHTTPSession { transport = "http" }
        let (type, key, data) = Webhooks.lifecycleEvent(event, transport: transport)
        webhooks.emit(type, key: key, data)
    }

    private func isEndRoom(_ input: HubInput) -> Bool {
        if case .endRoom = input { return true }
        return false
    }

    /// Asks the hub for a seat for `identity` (room limit, drain, kicked tokens); nil when admitted,
    /// else the problem to answer, counted by code. Service thread.
    func admit(_ identity: PeerIdentity) -> HTTPResponse? {
        guard let refusal = hub.admit(identity, now: now()) else { return nil }
        metrics.joinRefusals[refusal.code, default: 0] += 1
        return Self.problem(for: refusal)
    }

    /// The documented answer to a refused seat (docs/protocol.md, "Room limits" and "Admin API").
    static func problem(for refusal: JoinRefusal) -> HTTPResponse {
        switch refusal {
        case .roomFull(let limit):
            return .problem(409, code: refusal.code, detail: "the room already has \(limit) peers (its max_peers)",
                            extra: ["max_peers": .int(Int64(limit))])
        case .draining:
            return .problem(503, code: refusal.code, detail: "this node is draining and takes no new joins; use another node",
                            headers: [("retry-after", "5")])
        case .kicked:
            return .problem(403, code: refusal.code, detail: "this token was removed from its room by an operator; get a new token")
        case .reservedPeerID:
            return .problem(403, code: refusal.code, detail: "the peer id \(Hub.serverPeerID.rawValue) is reserved for the server")
        }
    }

    // MARK: effects

    func apply(_ effects: [HubEffect]) {
        // Each effect switched on in place: `for effect in effects` copied every effect (and its
        // frame) out of the array and destroyed the copy, per chat's ack.
        for index in effects.indices {
            switch effects[index] {
            case .send(let targets, let frame):
                countError(frame, recipients: targets.count)
                router.deliver(frame, to: targets)
            case .close(let connection, let code):
                // A remote seat's close is its node's to count (when it closes the socket).
                if router.isLocal(connection) { metrics.closes[code.reason, default: 0] += 1 }
                if code == .consultationEnded, webhooks.isEnabled { closeReasons[connection] = "consultation_ended" }
                router.close(connection, code: code)
            case .storeChat(let connection, let room, let peer, let submission, let timestamp):
                storeChat(connection: connection, room: room, peer: peer, submission, timestamp: timestamp)
            case .storeChatOperation(let connection, let room, let peer, let operation, let moderator, let timestamp):
                storeChatOperation(connection: connection, room: room, peer: peer, operation, moderator: moderator, timestamp: timestamp)
            case .storeRead(let room, let peer, let seq):
                chats.markRead(room: room, peer: peer, seq: seq, nowMs: now()) { [context] result in
                    context.post { [self] in
                        switch result {
                        case .success(let outcome):
                            apply(hub.handle(.readStored(room: room, peer: peer, seq: outcome.marker.seq, moved: outcome.moved), now: now()))
                        case .failure(let error):
                            metrics.storeFailures += 1
                            logger.error("read marker not stored", ["room.id": room.rawValue, "error": "\(error)"])
                        }
                    }
                }
            case .storeStats(let room, let call, let peer, let sample, let timestamp):
                calls.storeStats(StatsDraft(room: room, call: call, peer: peer, sample: sample, timestampMs: timestamp))
            case .storeMeter(let room, let snapshot):
                calls.storeMeter(room, snapshot)
            case .armGrace(let timer, let due):
                graceTimers.append((due, timer))
            }
        }
    }

    private func storeChat(connection: ConnectionID, room: RoomID, peer: PeerID, _ submission: ChatSubmission, timestamp: Millis) {
        let draft = ChatDraft(room: room, sender: peer, clientID: submission.clientID, text: submission.text,
                              meta: submission.meta.map(JSONWriter.string), timestampMs: timestamp, replyTo: submission.replyTo)
        append(draft, connection: connection)
    }

    /// A chat operation the hub admitted: stored like a chat (same batches, same completions), the
    /// store deciding on its target with `ChatRules`.
    private func storeChatOperation(connection: ConnectionID, room: RoomID, peer: PeerID, _ operation: ChatOperation,
                                    moderator: Bool, timestamp: Millis) {
        var draft = ChatDraft(room: room, sender: peer, clientID: operation.clientID, text: "", timestampMs: timestamp,
                              target: operation.target, moderator: moderator, limits: config.hub.chatOperations)
        switch operation.action {
        case .edit(let text, let meta):
            draft.kind = .edit
            draft.text = text
            draft.meta = meta.map(JSONWriter.string)
        case .delete:
            draft.kind = .delete
        case .react(let key, let remove):
            draft.kind = remove ? .unreact : .react
            draft.key = key
        }
        append(draft, connection: connection)
    }

    private func append(_ draft: ChatDraft, connection: ConnectionID) {
        let room = draft.room
        let peer = draft.sender
        // Monotonic, for the ack latency histogram: two clock reads per chat, no allocation.
        let received = DispatchTime.now().uptimeNanoseconds
        // The client id alone, not the submission: its text and meta would be retained into the
        // completion's context and released with it, for a refusal that never reads them.
        let clientID = draft.clientID
        chats.appendChat(draft) { [chatOutcomes] result in
            let outcome: ChatStoreOutcome
            switch result {
            case .success(let stored):
                if let refusal = stored.refusal {
                    outcome = .failed(room: room, peer: peer, clientID: clientID, connection: connection, refusal)
                } else {
                    outcome = .stored(ChatMessage(record: stored.message), connection: connection, duplicate: stored.duplicate)
                }
            case .failure(let error):
                outcome = .failed(room: room, peer: peer, clientID: clientID, connection: connection,
                                  WireError(.unavailable, "chat not stored: \(error.isRetryable ? "store busy" : "store error"); retry with the same client_id"))
            }
            chatOutcomes.collect(outcome, room: room, received: received)
        }
    }

    /// On the store queue, after a batch's completions (`ChatPersistence.afterAppendCompletions`):
    /// hands the batch's outcomes to the service thread in one closure, in their order. One post
    /// per batch instead of one per chat: the post's lock and wake-up check, the closure's context
    /// and its call in the service thread's drain, paid once for hundreds of chats at saturation.
    /// The store runs this before anything else on its queue, so a read-marker or history
    /// completion after the batch is still posted after its acks.
    private func postCollectedChats() {
        guard let batch = chatOutcomes.take() else { return }
        let posted = DispatchTime.now().uptimeNanoseconds
        context.post { [self] in
            metrics.ackDispatch.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- posted)
            for index in batch.indices { completed(batch[index]) }
        }
    }

    /// On the service thread: one chat's outcome, as the store reported it.
    private func completed(_ chat: CollectedChat) {
        switch chat.outcome {
        case .stored(_, _, let duplicate): if duplicate { metrics.chatDuplicates += 1 } else { metrics.chatStored += 1 }
        case .failed: metrics.storeFailures += 1
        }
        if case .stored(let message, _, false) = chat.outcome { router.committed(message) }
        // What `apply(hub.handle(.chatStored(chat.outcome), now:))` does, without the effects:
        // the router writes the ack and the broadcast from the message (`Hub.route(_:)`).
        switch Self.inPlace(&hub, { $0.route(chat.outcome) }) {
        case .deliver(let message, let ack, let others)?: router.deliverChat(message, ack: ack, others: others)
        case .answer(let ack, let target)?: router.deliver(ack, to: target)
        case nil: break
        }
        metrics.ackLatency.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- chat.received)
        if case .stored(let message, _, false) = chat.outcome, webhooks.wants(.chatMessage) {
            let room = chat.room
            var event = message.chatJSON.fields
            event["room_id"] = .string(room.rawValue)
            // Operations ride the same event, told apart by `kind` (docs/operations.md, "Webhooks").
            if !message.isPlainMessage {
                event["kind"] = .string(message.webhookKind)
                if let replyTo = message.replyTo { event["reply_to"] = .int(replyTo) }
                if message.kind != .message { event["target"] = .int(message.target) }
                if let key = message.key { event["key"] = .string(key) }
            }
            webhooks.emit(.chatMessage, key: room.rawValue, event)
        }
    }

    // MARK: timers

    /// The hub's timers (typing expiry, seat holds, meters) and the reconnect graces that are
    /// due. Every `tick_ms`, service thread.
    func tick(now current: Millis) {
        seatJournal?.flush()
        apply(hub.handle(.tick, now: current))
        syncBans(now: current)
        guard !graceTimers.isEmpty, graceTimers.contains(where: { $0.due <= current }) else { return }
        let due = graceTimers.filter { $0.due <= current }
        graceTimers.removeAll { $0.due <= current }
        for entry in due { membership(.graceExpired(entry.timer)) }
    }
}

/// A chat's outcome on its way from the store queue to the service thread.
struct CollectedChat: Sendable {
    var outcome: ChatStoreOutcome
    var room: RoomID
    /// When the service thread received it (`DispatchTime` uptime), for the ack latency.
    var received: UInt64
}

/// The outcomes the store's completions of one batch collect, for one post to the service thread.
// @unchecked Sendable: touched only on the store's queue (its append completions and its
// after-batch body, which `ChatPersistence` runs there, one at a time), never on the service
// thread: `take` hands the array over by value.
final class CollectedChats: @unchecked Sendable {
    private var pending: [CollectedChat] = []

    /// On the store queue, from a completion.
    func collect(_ outcome: consuming ChatStoreOutcome, room: RoomID, received: UInt64) {
        pending.append(CollectedChat(outcome: outcome, room: room, received: received))
    }

    /// On the store queue, after a batch: what was collected, or nil when nothing was.
    func take() -> [CollectedChat]? {
        guard !pending.isEmpty else { return nil }
        defer { pending = [] }
        return pending
    }
}

extension JoinRefusal {
    /// The problem `code` (and metrics label) of this refusal.
    var code: String {
        switch self {
        case .roomFull: "room_full"
        case .draining: "draining"
        case .kicked: "kicked"
        case .reservedPeerID: "reserved_peer_id"
        }
    }
}

extension PeerIdentity {
    /// The identity a verified token proves in `room`, with its seat limit and credential.
    init(claims: PeerTokenClaims, room: RoomID, call: CallID? = nil, defaultRole: String, leewaySeconds: Double) {
        let exp = Millis((claims.expiresAt.timeIntervalSince1970 + leewaySeconds) * 1_000)
        // Without a jti the token is its sub, room_id (this identity's peer and room), iat and exp.
        let credential = claims.tokenID.map { TokenCredential(id: $0, expiresAt: exp) }
            ?? TokenCredential(issuedAt: Int64(claims.issuedAt?.timeIntervalSince1970 ?? 0),
                               expires: Int64(claims.expiresAt.timeIntervalSince1970), expiresAt: exp)
        self.init(peer: claims.sub, room: room, call: call ?? claims.callID, role: claims.role ?? defaultRole, name: claims.name,
                  maxPeers: claims.maxPeers, credential: credential, moderator: claims.moderator)
    }
}

extension ChatMessage {
    /// The `kind` of a `chat_message` webhook event for this row.
    var webhookKind: String {
        switch kind {
        case .message: "message"
        case .edit: "edit"
        case .delete: "delete"
        case .react: "react"
        case .unreact: "unreact"
        }
    }

    /// Borrows the record: each field is copied once, and no copy of the whole record is made and
    /// destroyed per chat (the store completion builds one of these for every acked chat).
    init(record: borrowing ChatRecord) {
        let meta = record.meta.flatMap { try? JSONParser.parse($0) }
        self.init(room: record.room, seq: record.seq, from: record.sender, clientID: record.clientID, text: record.text,
                  meta: meta, timestamp: record.timestampMs, kind: record.kind, target: record.target, replyTo: record.replyTo,
                  key: record.key, deleted: record.deleted)
    }
}
