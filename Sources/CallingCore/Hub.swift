/// Milliseconds since the Unix epoch. The hub never reads a clock: every input carries `now`,
/// so tests drive time by hand and replays are deterministic.
public typealias Millis = Int64

/// Who a connection is, as proven by its token.
public struct PeerIdentity: Sendable, Equatable {
    public var peer: PeerID
    public var room: RoomID
    public var call: CallID?
    public var role: String
    public var name: String?
    /// The token's `max_peers` claim: this room's seat limit for this joiner, instead of
    /// `HubSettings.maxPeersPerRoom`. 0 = unlimited.
    public var maxPeers: Int?
    /// Which token this is, so a kicked peer's token can be refused until it expires.
    public var credential: TokenCredential?
    /// The token's `moderator` claim: the peer may delete anyone's chat messages.
    public var moderator: Bool

    public init(peer: PeerID, room: RoomID, call: CallID? = nil, role: String = "peer", name: String? = nil,
                maxPeers: Int? = nil, credential: TokenCredential? = nil, moderator: Bool = false) {
        self.moderator = moderator
        self.peer = peer
        self.room = room
        self.call = call
        self.role = role
        self.name = name
        self.maxPeers = maxPeers
        self.credential = credential
    }

    var rosterEntry: RosterEntry {
        RosterEntry(peerID: peer.rawValue, role: role, name: name)
    }
}

/// A token's identity: its `jti` when it has one, else `sub`, `room_id`, `iat` and `exp` together
/// (two tokens minted for the same peer in the same second are then the same credential). A kicked
/// credential is refused until `expiresAt`, after which the token is refused as expired anyway.
///
/// Without a `jti` only `iat` and `exp` are kept here: `sub` and `room_id` are the identity's peer
/// and room, so the key is put together only when a credential is banned or checked against bans
/// (every seated peer carried a ~60-byte key string before).
public struct TokenCredential: Sendable, Hashable {
    /// What tells this token from others besides the identity it belongs to.
    public enum Key: Sendable, Hashable {
        /// An opaque id that names the token on its own (the `jti`).
        case id(String)
        /// No `jti`: the token's `iat` and `exp` (Unix seconds), with its `sub` and `room_id`.
        case issued(at: Int64, expires: Int64)
    }

    public var key: Key
    /// `exp` plus the verifier's leeway, in ms.
    public var expiresAt: Millis

    /// A credential named by `id` alone (a token's `jti`).
    public init(id: String, expiresAt: Millis) {
        self.key = .id(id)
        self.expiresAt = expiresAt
    }

    /// A token without a `jti`, known by `iat` and `exp` (Unix seconds) with its `sub` and `room_id`.
    public init(issuedAt: Int64, expires: Int64, expiresAt: Millis) {
        self.key = .issued(at: issuedAt, expires: expires)
        self.expiresAt = expiresAt
    }
}

/// A seat by room and peer id, for the reconnect graces.
struct GraceSeat: Hashable, Sendable {
    var room: RoomID
    var peer: PeerID
}

/// What a ban is keyed by: the same for every identity presenting the same token.
struct BanKey: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        case id(String)
        case issued(peer: PeerID, room: RoomID, at: Int64, expires: Int64)
    }

    var kind: Kind

    init(_ credential: TokenCredential, of identity: PeerIdentity) {
        switch credential.key {
        case .id(let id): kind = .id(id)
        case .issued(let at, let expires): kind = .issued(peer: identity.peer, room: identity.room, at: at, expires: expires)
        }
    }
}

extension BanKey {
    /// The key as `TokenBan.key` spells it: `jti:<jti>`, or for a token without a `jti`
    /// `iat:<iat>:<exp>:<bytes of room_id>:<room_id><sub>` (the length keeps any room id and peer id apart).
    var storageKey: String {
        switch kind {
        case .id(let id): "jti:" + id
        case .issued(let peer, let room, let at, let expires):
            "iat:\(at):\(expires):\(room.rawValue.utf8.count):\(room.rawValue)\(peer.rawValue)"
        }
    }

    /// The key `storageKey` spelled; nil for text it cannot have produced.
    init?(storageKey: String) {
        if storageKey.hasPrefix("jti:") {
            kind = .id(String(storageKey.dropFirst(4)))
            return
        }
        guard storageKey.hasPrefix("iat:") else { return nil }
        let fields = storageKey.dropFirst(4).split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, let at = Int64(fields[0]), let expires = Int64(fields[1]), let roomBytes = Int(fields[2]),
              roomBytes >= 0, fields[3].utf8.count >= roomBytes,
              let room = String(fields[3].utf8.prefix(roomBytes)), let peer = String(fields[3].utf8.dropFirst(roomBytes))
        else { return nil }
        kind = .issued(peer: PeerID(peer), room: RoomID(room), at: at, expires: expires)
    }
}

/// A kicked token as a store keeps it, so that every node sharing the store refuses it and a
/// restarted node still does (`Hub.ban(of:)` makes one, `Hub.impose` takes them back).
public struct TokenBan: Sendable, Hashable {
    /// Names the token, whichever peer presents it (`jti:…` or `iat:…`; opaque to the store).
    public var key: String
    /// Refused until then (the token's expiry plus leeway, ms); after it the token is expired anyway.
    public var expiresAt: Millis

    public init(key: String, expiresAt: Millis) {
        self.key = key
        self.expiresAt = expiresAt
    }
}

/// Why `Hub.admit` gives a joiner no seat. docs/protocol.md ("Room limits", "Admin API") lists the
/// HTTP status and `code` of each.
public enum JoinRefusal: Sendable, Equatable {
    /// The room already seats `limit` distinct peer ids (seated or joining).
    case roomFull(limit: Int)
    /// The node is draining: no new seats, existing rooms go on.
    case draining
    /// This token was kicked (or its room ended) by the admin API.
    case kicked
    /// The token's `sub` is the id the server itself sends admin `data` frames from.
    case reservedPeerID
}

/// What the hub knows of a room's chat when a peer joins; loaded from the store before `join`.
public struct ChatResume: Sendable, Equatable {
    public var lastSeq: Int64
    public var readSeq: Int64
    public var unread: Int64
    /// Messages after the peer's `last_seq`, oldest first, at most the replay cap.
    public var replay: [ChatMessage]
    /// False when more messages were missed than the replay carries.
    public var complete: Bool
    /// Whether the client asked to resume (sent `last_seq`).
    public var requested: Bool

    public init(lastSeq: Int64 = 0, readSeq: Int64 = 0, unread: Int64 = 0, replay: [ChatMessage] = [],
                complete: Bool = true, requested: Bool = false) {
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.unread = unread
        self.replay = replay
        self.complete = complete
        self.requested = requested
    }
}

/// A stored row of a room's chat, as broadcast and replayed: a message, or an operation on one
/// (`kind`; docs/protocol.md, "Chat operations").
public struct ChatMessage: Sendable, Equatable {
    public var room: RoomID
    public var seq: Int64
    public var from: PeerID
    public var clientID: String
    /// A message's or an edit's text; "" for other operations and for content a delete erased.
    public var text: String
    public var meta: JSONValue?
    public var timestamp: Millis
    public var kind: ChatRowKind
    /// An operation's target: the seq of the message it acts on; 0 for a message.
    public var target: Int64
    /// A message's `reply_to`.
    public var replyTo: Int64?
    /// A reaction's key (`react`, `unreact`).
    public var key: String?
    /// A message or edit whose content a delete erased (replayed with `"deleted": true`).
    public var deleted: Bool

    public init(room: RoomID, seq: Int64, from: PeerID, clientID: String, text: String, meta: JSONValue?, timestamp: Millis,
                kind: ChatRowKind = .message, target: Int64 = 0, replyTo: Int64? = nil, key: String? = nil, deleted: Bool = false) {
        self.room = room
        self.seq = seq
        self.from = from
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.timestamp = timestamp
        self.kind = kind
        self.target = target
        self.replyTo = replyTo
        self.key = key
        self.deleted = deleted
    }

    /// A message without `reply_to` or tombstone: its frame is `Frame.chat`'s, which the router
    /// may write from the fields.
    public var isPlainMessage: Bool { kind == .message && replyTo == nil && !deleted }

    public var frame: Frame {
        if isPlainMessage {
            return Frame.chat(from: from.rawValue, clientID: clientID, text: text, meta: meta, seq: seq, timestamp: timestamp)
        }
        var payload: [String: JSONValue]
        switch kind {
        case .message, .edit:
            payload = ChatJSON(clientID: clientID, meta: deleted ? nil : meta, seq: seq, text: deleted ? "" : text, timestamp: timestamp).fields
            if let replyTo { payload["reply_to"] = .int(replyTo) }
            if kind == .edit { payload["target"] = .int(target) }
            if deleted { payload["deleted"] = .bool(true) }
        case .delete:
            payload = ["client_id": .string(clientID), "seq": .int(seq), "ts": .int(timestamp), "target": .int(target)]
        case .react, .unreact:
            payload = ["client_id": .string(clientID), "seq": .int(seq), "ts": .int(timestamp), "target": .int(target)]
            payload["key"] = .string(key ?? "")
            payload["remove"] = .bool(kind == .unreact)
        }
        return Frame(kind.frameType, from: from.rawValue, payload: .object(payload))
    }

    /// Its sender's `chat-ack`: the seq and server time it was stored with.
    public var ack: Frame {
        Frame.chatAck(clientID: clientID, seq: seq, timestamp: timestamp)
    }
}

/// Everything the hub reacts to. Inputs arrive on one thread, in order.
public enum HubInput: Sendable {
    /// An authenticated connection joins its token's room.
    case join(ConnectionID, PeerIdentity, ChatResume)
    case message(ConnectionID, ClientMessage)
    /// The connection's seat ends at once: a clean leave (a `leave` frame, the client's close
    /// 1000 or 1001, a terminal close by the server, an HTTP session that ended).
    case disconnect(ConnectionID)
    /// The connection's socket ended without a clean leave (no close handshake, or a close the
    /// client may reconnect after): the seat is kept for `HubSettings.reconnectGraceMs`, the room
    /// sees `peer-reconnecting`, and a join with the same peer id within the grace resumes it.
    /// With a grace of 0, the same as `.disconnect`.
    case connectionLost(ConnectionID)
    /// A grace timer armed by `HubEffect.armGrace` is due. Ignored unless its arming is still the
    /// seat's current one (the peer resumed, left or was kicked since, or a later loss re-armed it).
    case graceExpired(GraceTimer)
    /// The store committed (or refused) a chat the hub asked it to persist.
    case chatStored(ChatStoreOutcome)
    /// The store moved (or kept) a read marker.
    case readStored(room: RoomID, peer: PeerID, seq: Int64, moved: Bool)
    /// Time passed; due timers fire.
    case tick
    /// Gives a room its consultation meter (Meter.swift), loaded by the service after a join.
    /// Ignored when the room is empty or already has one.
    case attachMeter(RoomID, Meter)
    /// A joiner admitted by `admit` went away before its join completed: its seat hold is released.
    case abandonSeat(RoomID, PeerID)
    /// Admin: closes `peer`'s connection with 4403 and refuses its token until it expires.
    case kick(RoomID, PeerID)
    /// Admin: closes every connection in the room with 4404 and refuses their tokens until they expire.
    case endRoom(RoomID)
    /// Admin: a `data` frame from `Hub.serverPeerID` to one peer of the room, or to all of them.
    case serverData(RoomID, to: PeerID?, payload: JSONValue)
    /// Admin: while draining, `admit` refuses new seats; rooms already open go on.
    case setDraining(Bool)
}

public enum ChatStoreOutcome: Sendable, Equatable {
    case stored(ChatMessage, connection: ConnectionID, duplicate: Bool)
    case failed(room: RoomID, peer: PeerID, clientID: String, connection: ConnectionID, WireError)
}

/// What the hub asks its environment to do, in order.
public enum HubEffect: Sendable, Equatable {
    /// Deliver one frame to each connection; the frame is encoded once for all of them.
    case send([ConnectionID], Frame)
    /// Close a connection after the frames already queued for it.
    case close(ConnectionID, CloseCode)
    /// Persist a chat; its outcome comes back as `.chatStored`, or goes to `route(_:)`.
    case storeChat(connection: ConnectionID, room: RoomID, peer: PeerID, ChatSubmission, timestamp: Millis)
    /// Persist a chat operation (the store applies `ChatRules` to its target in the same
    /// transaction); its outcome comes back as `.chatStored`, or goes to `route(_:)`.
    case storeChatOperation(connection: ConnectionID, room: RoomID, peer: PeerID, ChatOperation, moderator: Bool,
                            timestamp: Millis)
    /// Persist a read marker; the result comes back as `.readStored`.
    case storeRead(room: RoomID, peer: PeerID, seq: Int64)
    /// Persist a stats sample for analytics.
    case storeStats(room: RoomID, call: CallID?, peer: PeerID, StatsSample, timestamp: Millis)
    /// Persist a room's meter (started, paused, announced, ended) so a restart resumes it.
    case storeMeter(RoomID, MeterSnapshot)
    /// Feed `.graceExpired(timer)` back once the clock reaches `at`. A timer whose arming is no
    /// longer current is ignored then, so the environment never cancels one.
    case armGrace(GraceTimer, at: Millis)
}

/// A seat's reconnect grace, as armed: which seat, and which arming of it (each loss arms anew).
public struct GraceTimer: Sendable, Hashable {
    public var room: RoomID
    public var peer: PeerID
    public var arming: UInt64

    public init(room: RoomID, peer: PeerID, arming: UInt64) {
        self.room = room
        self.peer = peer
        self.arming = arming
    }
}

/// Settings the hub applies; all come from configuration.
public struct HubSettings: Sendable, Equatable {
    public var pingIntervalMs: Int64
    public var typingTTLMs: Int64
    public var chatMaxTextBytes: Int
    public var chatMaxMetaBytes: Int
    /// Distinct peer ids a room seats when the joiner's token sets no `max_peers`; 0 = unlimited.
    public var maxPeersPerRoom: Int
    /// How long a seat stays held for an admitted joiner whose join has not completed (the store
    /// read of its chat state); a join that never completes frees the seat after this.
    public var seatHoldMs: Int64
    /// How long a seat whose socket ended without a clean leave stays held for its peer to
    /// reconnect (`HubInput.connectionLost`); 0 = no grace, the seat ends at once.
    public var reconnectGraceMs: Int64
    /// Largest RPC payload (a request's `payload`, a response's `payload`, or its error's
    /// `message` and `data` together), in UTF-8 bytes (docs/protocol.md, "RPC").
    public var rpcMaxPayloadBytes: Int
    /// Longest RPC method name and request id, in UTF-8 bytes.
    public var rpcMaxNameBytes: Int
    /// Edit window and reaction limits of chat operations.
    public var chatOperations: ChatOperationLimits

    public init(pingIntervalMs: Int64 = 25_000, typingTTLMs: Int64 = 6_000, chatMaxTextBytes: Int = 4_096,
                chatMaxMetaBytes: Int = 2_048, maxPeersPerRoom: Int = 0, seatHoldMs: Int64 = 30_000,
                reconnectGraceMs: Int64 = 15_000, rpcMaxPayloadBytes: Int = 15_360, rpcMaxNameBytes: Int = 128,
                chatOperations: ChatOperationLimits = ChatOperationLimits()) {
        self.rpcMaxPayloadBytes = rpcMaxPayloadBytes
        self.rpcMaxNameBytes = rpcMaxNameBytes
        self.chatOperations = chatOperations
        self.reconnectGraceMs = reconnectGraceMs
        self.pingIntervalMs = pingIntervalMs
        self.typingTTLMs = typingTTLMs
        self.chatMaxTextBytes = chatMaxTextBytes
        self.chatMaxMetaBytes = chatMaxMetaBytes
        self.maxPeersPerRoom = maxPeersPerRoom
        self.seatHoldMs = seatHoldMs
    }
}

/// Rooms, peers and routing rules: a synchronous state machine that turns inputs into effects.
/// It owns no socket, no disk and no clock, so it is tested exhaustively without any of them.
public struct Hub: Sendable {
    struct Member: Sendable {
        var identity: PeerIdentity
        var connection: ConnectionID
        var typingUntil: Millis?
        /// Whether JSON carries the peer id as it is (no `"`, `\` or control character), found
        /// once at join: a relayed frame between two such peers is written without checking
        /// either id again (`RelayedFrame.plainLength(_:plainFrom:plainTo:payload:)`).
        let plainID: Bool
        /// In its reconnect grace: `connection` is gone, nothing is sent to it, relays to it are
        /// answered with `peer_reconnecting`, and the seat still counts toward the room's limit.
        /// Beside `plainID`, in its padding: a member is no larger for it.
        var reconnecting = false

        init(identity: PeerIdentity, connection: ConnectionID, typingUntil: Millis?) {
            self.identity = identity
            self.connection = connection
            self.typingUntil = typingUntil
            self.plainID = RelayedFrame.isPlain(identity.peer)
        }
    }

    /// A room's members in join order (so rosters and broadcasts are deterministic), found by peer
    /// id with a scan while the room is small and through an index once it is larger than
    /// `indexedAbove`. Most rooms hold a handful of peers; a dictionary per room cost ~340 bytes
    /// per seated peer at 19,000 peers in rooms of 4 (its buckets), an array of members ~150.
    struct MemberList: Sendable {
        private(set) var all: [Member] = []
        /// Position in `all` by peer id; nil while the room has at most `indexedAbove` members.
        private var index: [PeerID: Int]?

        static var indexedAbove: Int { 8 }

        var isEmpty: Bool { all.isEmpty }
        var count: Int { all.count }

        /// The member seated on `connection` (a scan: rooms are small, and a large one is scanned
        /// once per inbound frame, 8 bytes compared per member).
        func member(on connection: ConnectionID) -> Member? {
            all.first { $0.connection == connection }
        }

        func position(of peer: PeerID) -> Int? {
            if let index { return index[peer] }
            return all.firstIndex { $0.identity.peer == peer }
        }

        subscript(peer: PeerID) -> Member? {
            position(of: peer).map { all[$0] }
        }

        /// An addressed relay's ends, read in place: the peer id seated on `connection` (nil when
        /// it holds no seat here), the connection seated as `peer`, if any, and whether both ids
        /// are plain. `member(on:)` and the subscript each copy a whole member (its identity's
        /// strings): two copies per relayed frame.
        /// No target when `peer` is the sender's own id: ids are unique in a room, so that is the
        /// target being the sender's member, and the ids need not be compared again.
        /// `reconnecting`: the target is in its reconnect grace (`target` is its gone connection).
        func route(from connection: ConnectionID, to peer: PeerID)
            -> (sender: PeerID, target: ConnectionID?, plainIDs: Bool, reconnecting: Bool)?
        {
            guard let sender = all.firstIndex(where: { $0.connection == connection }) else { return nil }
            guard let target = position(of: peer), target != sender else { return (all[sender].identity.peer, nil, false, false) }
            return (all[sender].identity.peer, all[target].connection, all[sender].plainID && all[target].plainID, all[target].reconnecting)
        }

        /// `route(from:to:)` for a `to` given as UTF-8 bytes (`RelayParts`), compared with each
        /// member's id byte for byte: no `String` is made for it. Nil, and the caller goes the
        /// `PeerID` way, for whatever this does not settle: an indexed room (found by hash), and
        /// no member with these exact bytes (an id spelt in another normalization still equals it
        /// as a `String`; else `to` is not in the room, which that way answers).
        func route(from connection: ConnectionID, toUTF8 peer: UnsafeBufferPointer<UInt8>) -> (sender: PeerID, target: ConnectionID, plainIDs: Bool)? {
            guard index == nil, let sender = all.firstIndex(where: { $0.connection == connection }),
                  let target = all.firstIndex(where: { Self.spells($0.identity.peer, peer) }), target != sender,
                  !all[target].reconnecting
            else { return nil }
            return (all[sender].identity.peer, all[target].connection, all[sender].plainID && all[target].plainID)
        }

        /// Whether `id`'s UTF-8 is exactly `bytes`: compared eight bytes at a time, lengths first.
        /// (Each member's id kept at join as two words, compared in two loads, saved a little
        /// per relayed frame but cost memory per idle peer, at the per-peer memory line:
        /// docs/benchmarks.md, "Relayed from the frame's bytes".)
        @inline(__always)
        private static func spells(_ id: PeerID, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            guard id.rawValue.utf8.count == bytes.count else { return false }
            return id.rawValue.utf8.withContiguousStorageIfAvailable { own in
                guard let a = own.baseAddress.map(UnsafeRawPointer.init), let b = bytes.baseAddress.map(UnsafeRawPointer.init) else {
                    return own.count == 0
                }
                var offset = 0
                while offset &+ 8 <= own.count {
                    if a.loadUnaligned(fromByteOffset: offset, as: UInt64.self) != b.loadUnaligned(fromByteOffset: offset, as: UInt64.self) {
                        return false
                    }
                    offset &+= 8
                }
                while offset < own.count {
                    if a.load(fromByteOffset: offset, as: UInt8.self) != b.load(fromByteOffset: offset, as: UInt8.self) { return false }
                    offset &+= 1
                }
                return true
            } ?? id.rawValue.utf8.elementsEqual(bytes)
        }

        /// Whether a member is seated on `connection`.
        func seats(_ connection: ConnectionID) -> Bool { all.contains { $0.connection == connection } }

        /// A chat's sender, read in place: the peer id seated on `connection` and whether it is
        /// typing, or nil when it holds no seat here. `member(on:)` copied the whole member (its
        /// identity's strings retained and released) for these two fields.
        func chatSender(on connection: ConnectionID) -> (peer: PeerID, typing: Bool)? {
            guard let sender = all.firstIndex(where: { $0.connection == connection }) else { return nil }
            return (all[sender].identity.peer, all[sender].typingUntil != nil)
        }

        /// A chat operation's sender: its peer id and the token's `moderator` claim.
        func operationSender(on connection: ConnectionID) -> (peer: PeerID, moderator: Bool)? {
            guard let sender = all.firstIndex(where: { $0.connection == connection }) else { return nil }
            return (all[sender].identity.peer, all[sender].identity.moderator)
        }

        /// Seats `member` last, or in place of the member with its peer id; true when it is new.
        mutating func upsert(_ member: Member) -> Bool {
            if let position = position(of: member.identity.peer) {
                all[position] = member
                return false
            }
            all.append(member)
            if index != nil {
                index?[member.identity.peer] = all.count - 1
            } else if all.count > Self.indexedAbove {
                reindex()
            }
            return true
        }

        mutating func remove(_ peer: PeerID) -> Member? {
            guard let position = position(of: peer) else { return nil }
            let member = all.remove(at: position)
            if index != nil { reindex() }
            return member
        }

        mutating func setTyping(_ peer: PeerID, until: Millis?) {
            guard let position = position(of: peer) else { return }
            all[position].typingUntil = until
        }

        /// Marks `peer`'s seat as in (or out of) its reconnect grace; its typing ends with it.
        mutating func setReconnecting(_ peer: PeerID, _ reconnecting: Bool) {
            guard let position = position(of: peer) else { return }
            all[position].reconnecting = reconnecting
            if reconnecting { all[position].typingUntil = nil }
        }

        private mutating func reindex() {
            guard all.count > Self.indexedAbove / 2 else {
                index = nil
                return
            }
            var positions: [PeerID: Int] = [:]
            positions.reserveCapacity(all.count)
            for (position, member) in all.enumerated() { positions[member.identity.peer] = position }
            index = positions
        }
    }

    struct Room: Sendable {
        private(set) var members = MemberList()
        /// Each member's connection, in join order, collected from `members` (a scan, no lookup by
        /// peer id): a broadcast builds its target list once per frame either way, and a second
        /// array per room kept ~20 bytes per seated peer.
        /// A member in its reconnect grace has no connection to send to and is left out.
        var connections: [ConnectionID] { members.all.compactMap { $0.reconnecting ? nil : $0.connection } }
        /// Kept out of line: most rooms never have a meter, and inline it made every room's entry
        /// in `rooms` ~80 bytes larger (an indirect case is an immutable heap box, so the hub keeps
        /// its value semantics; a meter changes at most once a tick).
        private var meterStorage: MeterBox?
        var meter: Meter? {
            get { if case .some(let meter)? = meterStorage { return meter } else { return nil } }
            set { meterStorage = newValue.map(MeterBox.some) }
        }

        indirect enum MeterBox: Sendable {
            case some(Meter)
        }

        /// Peer ids in join order.
        var order: [PeerID] { members.all.map(\.identity.peer) }

        /// Seats `member`; a peer id already seated keeps its place in the order (a takeover).
        mutating func seat(_ member: Member) {
            _ = members.upsert(member)
        }

        mutating func unseat(_ peer: PeerID) {
            _ = members.remove(peer)
        }

        mutating func unseatAll() {
            members = MemberList()
        }

        mutating func setTyping(_ peer: PeerID, until: Millis?) {
            members.setTyping(peer, until: until)
        }

        mutating func setReconnecting(_ peer: PeerID, _ reconnecting: Bool) {
            members.setReconnecting(peer, reconnecting)
        }

        /// Every member's connection but `peer`'s (and those of members in their reconnect
        /// grace), in join order.
        func connections(excluding peer: PeerID) -> [ConnectionID] {
            guard let excluded = members[peer]?.connection else { return connections }
            var others: [ConnectionID] = []
            others.reserveCapacity(members.count - 1)
            for member in members.all where member.connection != excluded && !member.reconnecting { others.append(member.connection) }
            return others
        }
    }

    /// The open rooms by id. Each room sits in a slot that stays put while the room is open, and
    /// `connections` keeps each seated connection's slot: a frame from a seated peer reaches its
    /// room by index instead of hashing the room id, a String, on every relayed
    /// frame. A closed room's slot is reused by the next room opened.
    struct RoomTable: Sendable {
        /// A room by slot; a free slot holds an empty room.
        private var slots: [Room] = []
        /// The id of the room in each slot, nil while the slot is free.
        private var ids: [RoomID?] = []
        private var byID: [RoomID: Int32] = [:]
        private var free: [Int32] = []

        var count: Int { byID.count }
        var keys: Dictionary<RoomID, Int32>.Keys { byID.keys }

        /// The slot of the open room `id`, or nil.
        func slot(of id: RoomID) -> Int32? { byID[id] }

        /// The id of the room in `slot`, which is open.
        func id(at slot: Int32) -> RoomID { ids[Int(slot)]! }

        /// The room in `slot`, which is open (read in place, not copied).
        subscript(slot slot: Int32) -> Room {
            _read { yield slots[Int(slot)] }
        }

        /// The open room `id`; setting nil closes it and frees its slot, setting a room opens it
        /// in a free slot when it was closed. Changed in place, like a dictionary's value: the room
        /// is moved out of its slot while the caller changes it, so its tables are not copied.
        subscript(id: RoomID) -> Room? {
            get { byID[id].map { slots[Int($0)] } }
            _modify {
                var room: Room?
                let slot = byID[id]
                if let slot {
                    room = slots[Int(slot)]
                    slots[Int(slot)] = Room()
                }
                defer { store(room, id, at: slot) }
                yield &room
            }
        }

        private mutating func store(_ room: Room?, _ id: RoomID, at slot: Int32?) {
            switch (room, slot) {
            case (let room?, let slot?):
                slots[Int(slot)] = room
            case (let room?, nil):
                if let reused = free.popLast() {
                    slots[Int(reused)] = room
                    ids[Int(reused)] = id
                    byID[id] = reused
                } else {
                    byID[id] = Int32(slots.count)
                    slots.append(room)
                    ids.append(id)
                }
            case (nil, let slot?):
                ids[Int(slot)] = nil
                byID[id] = nil
                free.append(slot)
            case (nil, nil):
                break
            }
        }
    }

    public let settings: HubSettings
    // Internal (not private) for the meter hooks in Meter.swift.
    var rooms = RoomTable()
    var meteredRooms: Set<RoomID> = []
    /// Rooms where a member's typing indicator may be on; `expireTyping` drops a room once none is.
    private var typingRooms: Set<RoomID> = []
    /// The slot in `rooms` of the room each seated connection is in (a seated connection's room
    /// is open, so its slot stays put); its member is found by a scan of that room
    /// (`MemberList.member(on:)`). With the peer id as well every entry was 16 bytes larger, ~28
    /// bytes per seated peer, for a lookup that costs a scan of one room.
    private var connections: [ConnectionID: Int32] = [:]
    /// Seats promised by `admit` to joiners whose join has not arrived yet, until when.
    private var holds: [RoomID: [PeerID: Millis]] = [:]
    /// Kicked credentials, refused until the stored time (their expiry).
    private var banned: [BanKey: Millis] = [:]
    /// Seats in their reconnect grace, by room and peer: the arming of their current timer.
    private var graces: [GraceSeat: UInt64] = [:]
    private var nextArming: UInt64 = 0
    /// The last placeholder connection number given to a restored seat (`restore(_:now:)`).
    private var nextRestored: UInt64 = 0
    /// Set by `.setDraining`: `admit` refuses new seats while rooms already open go on.
    public private(set) var isDraining = false

    /// The `from` of `data` frames the admin API sends; `admit` refuses tokens with this `sub`.
    public static let serverPeerID = PeerID("_server")

    public init(settings: HubSettings = HubSettings()) {
        self.settings = settings
    }

    public var roomCount: Int { rooms.count }
    public var peerCount: Int { connections.count }

    public func members(of room: RoomID) -> [PeerID] { rooms[room]?.order ?? [] }

    /// Whether `connection` holds a seat (false once it was taken over, kicked or its room closed).
    public func isSeated(_ connection: ConnectionID) -> Bool { connections[connection] != nil }

    /// Where a connection holds its seat, as `seat(of:)` found it: `route(_:to:from:seat:)` takes
    /// it so that a relayed frame, whose sender's seat the room endpoint has just checked, does
    /// not look the connection up a second time.
    public struct Seat: Sendable {
        fileprivate let slot: Int32
    }

    /// The seat `connection` holds, or nil (`isSeated`, with where).
    public func seat(of connection: ConnectionID) -> Seat? { connections[connection].map(Seat.init(slot:)) }

    public func identity(of connection: ConnectionID) -> PeerIdentity? {
        guard let slot = connections[connection] else { return nil }
        return rooms[slot: slot].members.member(on: connection)?.identity
    }

    /// Who is in `room`, longest present first; the HTTP session bridge picks its answering peer here.
    public func identities(in room: RoomID) -> [PeerIdentity] {
        guard let state = rooms[room] else { return [] }
        return state.members.all.map(\.identity)
    }

    /// Decides, before the upgrade, whether `identity` gets a seat in its room, and holds the seat
    /// until its `.join` arrives (or `.abandonSeat`, or `seatHoldMs` pass). A peer id already seated
    /// or held in the room is a takeover, not a new seat. Returns nil when admitted.
    public mutating func admit(_ identity: PeerIdentity, now: Millis) -> JoinRefusal? {
        if identity.peer == Self.serverPeerID { return .reservedPeerID }
        if !banned.isEmpty, let credential = identity.credential, let until = banned[BanKey(credential, of: identity)], until > now {
            return .kicked
        }
        let room = rooms[identity.room]
        let seated = room?.members[identity.peer] != nil
        let held = (holds[identity.room]?[identity.peer] ?? .min) > now
        if !seated && !held {
            if isDraining { return .draining }
            let limit = identity.maxPeers ?? settings.maxPeersPerRoom
            if limit > 0 {
                var seats = Set(room?.order ?? [])
                for (peer, until) in holds[identity.room] ?? [:] where until > now { seats.insert(peer) }
                if seats.count >= limit { return .roomFull(limit: limit) }
            }
        }
        holds[identity.room, default: [:]][identity.peer] = now + settings.seatHoldMs
        return nil
    }

    /// Rooms by id, each with its members in join order (the admin API's listing).
    public var roomList: [(room: RoomID, members: [PeerIdentity])] {
        rooms.keys.sorted().map { ($0, identities(in: $0)) }
    }

    /// The connection seated as `peer` in `room`, if any (a gone one while the seat is in its
    /// reconnect grace).
    public func connection(of peer: PeerID, in room: RoomID) -> ConnectionID? {
        rooms[room]?.members[peer]?.connection
    }

    /// `peer`'s seat in `room`: its connection (gone while `reconnecting`), its identity, and
    /// whether it is in its reconnect grace. `identity(of:)` knows only live connections.
    public func seat(of peer: PeerID, in room: RoomID) -> (connection: ConnectionID, identity: PeerIdentity, reconnecting: Bool)? {
        guard let member = rooms[room]?.members[peer] else { return nil }
        return (member.connection, member.identity, member.reconnecting)
    }

    /// Seats in their reconnect grace, by room then peer id (for the admin API and tests).
    public var reconnectingSeats: [(room: RoomID, peer: PeerID)] {
        graces.keys.map { ($0.room, $0.peer) }.sorted { ($0.room, $0.peer) < ($1.room, $1.peer) }
    }

    public mutating func handle(_ input: HubInput, now: Millis) -> [HubEffect] {
        switch input {
        case .join(let connection, let identity, let resume):
            return join(connection, identity, resume, now: now)
        case .message(let connection, let message):
            return handle(message, from: connection, now: now)
        case .disconnect(let connection):
            return leave(connection, now: now)
        case .connectionLost(let connection):
            return settings.reconnectGraceMs > 0 ? beginGrace(connection, now: now) : leave(connection, now: now)
        case .graceExpired(let timer):
            let key = GraceSeat(room: timer.room, peer: timer.peer)
            guard graces[key] == timer.arming else { return [] }
            return endSeat(timer.peer, in: timer.room, now: now)
        case .chatStored(let outcome):
            return route(outcome)?.effects ?? []
        case .readStored(let room, let peer, let seq, let moved):
            guard moved, let members = rooms[room] else { return [] }
            let others = members.connections(excluding: peer)
            return others.isEmpty ? [] : [.send(others, Frame(.read, from: peer.rawValue, payload: ["seq": .int(seq)]))]
        case .tick:
            expireHoldsAndBans(now: now)
            return expireTyping(now: now) + advanceMeters(now: now)
        case .attachMeter(let room, let meter):
            return attachMeter(meter, to: room, now: now)
        case .abandonSeat(let room, let peer):
            releaseHold(room, peer)
            return []
        case .kick(let roomID, let peer):
            guard let member = rooms[roomID]?.members[peer] else { return [] }
            ban(member.identity)
            // A seat in its grace has no socket to close: it ends, and the room hears `peer-left`.
            if member.reconnecting { return endSeat(peer, in: roomID, now: now) }
            // Left at once, so the room and the admin listing no longer show the peer; the socket's
            // disconnect that follows the close finds nothing left to do.
            return [.close(member.connection, .kicked)] + leave(member.connection, now: now)
        case .endRoom(let roomID):
            guard let room = rooms[roomID] else { return [] }
            let seated = room.members.all
            for member in seated {
                ban(member.identity)
                connections[member.connection] = nil
                graces[GraceSeat(room: roomID, peer: member.identity.peer)] = nil
            }
            rooms[roomID] = nil
            holds[roomID] = nil
            var emptied = room
            emptied.unseatAll()
            // Seats in their grace have no socket left to close.
            return seated.filter { !$0.reconnecting }.map { .close($0.connection, .roomClosed) }
                + meterAfterLeave(roomID, remaining: emptied, now: now)
        case .serverData(let roomID, let to, let payload):
            guard let room = rooms[roomID] else { return [] }
            let frame = Frame(.data, from: Self.serverPeerID.rawValue, to: to?.rawValue, payload: payload)
            if let to {
                guard let target = room.members[to] else { return [] }
                return [.send([target.connection], frame)]
            }
            return [.send(room.connections, frame)]
        case .setDraining(let draining):
            isDraining = draining
            return []
        }
    }

    /// The ban a kick (or an ended room) imposes on `identity`'s token; nil for an identity
    /// without a credential (nothing names its token).
    public static func ban(of identity: PeerIdentity) -> TokenBan? {
        guard let credential = identity.credential else { return nil }
        return TokenBan(key: BanKey(credential, of: identity).storageKey, expiresAt: credential.expiresAt)
    }

    /// Refuses these tokens from now on, as if they had been kicked here (bans another node
    /// stored, or this one before a restart). Expired ones and keys no hub made are skipped.
    public mutating func impose(_ bans: [TokenBan], now: Millis) {
        for ban in bans where ban.expiresAt > now {
            guard let key = BanKey(storageKey: ban.key) else { continue }
            banned[key] = max(banned[key] ?? .min, ban.expiresAt)
        }
    }

    private mutating func ban(_ identity: PeerIdentity) {
        guard let credential = identity.credential else { return }
        let key = BanKey(credential, of: identity)
        banned[key] = max(banned[key] ?? .min, credential.expiresAt)
    }

    private mutating func releaseHold(_ room: RoomID, _ peer: PeerID) {
        holds[room]?[peer] = nil
        if holds[room]?.isEmpty == true { holds[room] = nil }
    }

    /// Every tick: forgets holds whose join never came and bans whose token has expired.
    private mutating func expireHoldsAndBans(now: Millis) {
        if !holds.isEmpty {
            for (room, peers) in holds {
                for (peer, until) in peers where until <= now { releaseHold(room, peer) }
            }
        }
        if !banned.isEmpty { banned = banned.filter { $0.value > now } }
    }

    // MARK: membership

    private mutating func join(_ connection: ConnectionID, _ identity: PeerIdentity, _ resume: ChatResume, now: Millis)
        -> [HubEffect]
    {
        var effects: [HubEffect] = []
        releaseHold(identity.room, identity.peer)
        var room = rooms[identity.room] ?? Room()
        let takeover = room.members[identity.peer]
        let resumed = takeover?.reconnecting == true
        if let takeover {
            // Same peer id again: the new connection takes the seat. The room sees no leave/join;
            // a seat in its grace is resumed (its connection is gone already, nothing to close).
            connections[takeover.connection] = nil
            if resumed {
                graces[GraceSeat(room: identity.room, peer: identity.peer)] = nil
            } else {
                effects.append(.close(takeover.connection, .replaced))
            }
        }
        room.seat(Member(identity: identity, connection: connection, typingUntil: takeover?.typingUntil))

        let roster = room.members.all.filter { $0.identity.peer != identity.peer }.map { member in
            var entry = member.identity.rosterEntry
            entry.reconnecting = member.reconnecting
            return entry
        }
        let welcome = WelcomePayload(
            peerID: identity.peer.rawValue, roomID: identity.room.rawValue, callID: identity.call?.rawValue,
            role: identity.role, name: identity.name, peers: roster, pingIntervalMs: settings.pingIntervalMs,
            serverTime: now, lastSeq: resume.lastSeq, readSeq: resume.readSeq, unread: resume.unread,
            resume: resume.requested ? WelcomePayload.Resume(recovered: resume.complete, replayCount: Int64(resume.replay.count)) : nil)
        effects.append(.send([connection], .welcome(welcome)))
        for message in resume.replay {
            effects.append(.send([connection], message.frame))
        }
        if takeover == nil || resumed {
            let others = room.connections(excluding: identity.peer)
            if !others.isEmpty {
                effects.append(.send(others, takeover == nil ? .peerJoined(identity.rosterEntry)
                    : Frame(.peerResumed, from: identity.peer.rawValue, payload: ["peer_id": .string(identity.peer.rawValue)])))
            }
        }
        // Typing state of the others, so a joiner does not miss an indicator that is already on.
        for member in room.members.all where member.identity.peer != identity.peer {
            if let until = member.typingUntil, until > now {
                effects.append(.send([connection], Frame(.typing, from: member.identity.peer.rawValue, payload: ["typing": true])))
            }
        }
        rooms[identity.room] = room
        // Its slot once the room is stored (a new room gets one only then).
        connections[connection] = rooms.slot(of: identity.room)
        effects += meterAfterJoin(room: identity.room, connection: connection, now: now)
        return effects
    }

    private mutating func leave(_ connection: ConnectionID, now: Millis) -> [HubEffect] {
        guard let slot = connections.removeValue(forKey: connection) else { return [] }
        let roomID = rooms.id(at: slot)
        guard var room = rooms[roomID], let member = room.members.member(on: connection) else { return [] }
        let peer = member.identity.peer
        room.unseat(peer)
        if room.members.isEmpty {
            rooms[roomID] = nil
            return meterAfterLeave(roomID, remaining: room, now: now)
        }
        rooms[roomID] = room
        let others = room.connections
        var effects: [HubEffect] = []
        if member.typingUntil != nil {
            effects.append(.send(others, Frame(.typing, from: peer.rawValue, payload: ["typing": false])))
        }
        effects.append(.send(others, Frame(.peerLeft, from: peer.rawValue, payload: ["peer_id": .string(peer.rawValue)])))
        effects += meterAfterLeave(roomID, remaining: room, now: now)
        return effects
    }

    /// `connection`'s socket ended without a clean leave: its seat stays, marked reconnecting,
    /// until a join with its peer id resumes it or its grace timer ends it. The meter goes on
    /// (media between the peers does not need the signaling socket).
    private mutating func beginGrace(_ connection: ConnectionID, now: Millis) -> [HubEffect] {
        guard let slot = connections.removeValue(forKey: connection) else { return [] }
        let roomID = rooms.id(at: slot)
        guard let member = rooms[slot: slot].members.member(on: connection) else { return [] }
        let peer = member.identity.peer
        rooms[roomID]?.setReconnecting(peer, true)
        nextArming += 1
        let timer = GraceTimer(room: roomID, peer: peer, arming: nextArming)
        graces[GraceSeat(room: roomID, peer: peer)] = nextArming
        var effects: [HubEffect] = []
        let others = rooms[slot: slot].connections
        if !others.isEmpty {
            if member.typingUntil != nil {
                effects.append(.send(others, Frame(.typing, from: peer.rawValue, payload: ["typing": false])))
            }
            effects.append(.send(others, Frame(.peerReconnecting, from: peer.rawValue, payload: ["peer_id": .string(peer.rawValue)])))
        }
        effects.append(.armGrace(timer, at: now + settings.reconnectGraceMs))
        return effects
    }

    /// Whether `connection` is the placeholder of a seat restored at start (`restore(_:now:)`):
    /// its own id space (`ConnectionID.Space.restoredSeat`), which no socket of this process ever
    /// has, so a scan of a room by connection never finds a restored seat for a live one.
    public static func isRestored(_ connection: ConnectionID) -> Bool { connection.space == .restoredSeat }

    /// Seats remembered from before a restart (docs/protocol.md, "Across a server restart"), each
    /// in its reconnect grace from `now`, in the given order: the room lists them `reconnecting`,
    /// a join with the peer id resumes the seat (`peer-resumed`), and expiry ends it with
    /// `peer-left`. A seat already held (its peer joined first) is left alone. Nobody is connected
    /// yet, so the effects are only the grace timers.
    public mutating func restore(_ identities: [PeerIdentity], now: Millis) -> [HubEffect] {
        var effects: [HubEffect] = []
        for identity in identities where rooms[identity.room]?.members[identity.peer] == nil {
            nextRestored += 1
            var member = Member(identity: identity, connection: ConnectionID(.restoredSeat, serial: nextRestored), typingUntil: nil)
            member.reconnecting = true
            if rooms[identity.room] == nil { rooms[identity.room] = Room() }
            rooms[identity.room]?.seat(member)
            nextArming += 1
            graces[GraceSeat(room: identity.room, peer: identity.peer)] = nextArming
            effects.append(.armGrace(GraceTimer(room: identity.room, peer: identity.peer, arming: nextArming),
                                     at: now + settings.reconnectGraceMs))
        }
        return effects
    }

    /// Ends `peer`'s seat in its reconnect grace (expired, or kicked): the room hears `peer-left`.
    private mutating func endSeat(_ peer: PeerID, in roomID: RoomID, now: Millis) -> [HubEffect] {
        graces[GraceSeat(room: roomID, peer: peer)] = nil
        guard var room = rooms[roomID], room.members[peer]?.reconnecting == true else { return [] }
        room.unseat(peer)
        if room.members.isEmpty {
            rooms[roomID] = nil
            return meterAfterLeave(roomID, remaining: room, now: now)
        }
        rooms[roomID] = room
        var effects: [HubEffect] = []
        let others = room.connections
        if !others.isEmpty {
            effects.append(.send(others, Frame(.peerLeft, from: peer.rawValue, payload: ["peer_id": .string(peer.rawValue)])))
        }
        return effects + meterAfterLeave(roomID, remaining: room, now: now)
    }

    // MARK: frames

    /// Where an addressed relay (`offer`, `answer`, `candidate`, `data` with `to`) from
    /// `connection` goes: the one connection seated as `to`, with the sender's peer id the relayed
    /// frame stamps as `from`; or an `error` (`peer_not_found`) for the sender when `to` is not in
    /// the room (or is the sender); nil when `connection` holds no seat. Internal: the service
    /// routes every relay through `route(_:from:seat:)` and writes the frame from the parts it
    /// already holds (a decision holding the frame's parts, `relay`, was built, copied and
    /// destroyed per relayed frame, each part retained and released, and an effect array and its
    /// one-element target array were two allocations); `handle`'s `relay(_:to:payload:from:)` and
    /// the tests use this one.
    func route(_ kind: RelayKind, to: PeerID, from connection: ConnectionID) -> RelayRoute? {
        guard let slot = connections[connection] else { return nil }
        return route(kind, to: to, from: connection, seat: Seat(slot: slot))
    }

    /// `route(_:to:from:)` for a connection whose seat the caller has just found with
    /// `seat(of:)`, with nothing changing the hub in between. Should the seat be stale after all,
    /// its room no longer seats `connection` and the answer is nil, as for any unseated sender.
    /// Internal: what `route(_:from:seat:)` falls back on when the bytes of `to` do not settle it.
    func route(_ kind: RelayKind, to: PeerID, from connection: ConnectionID, seat: Seat) -> RelayRoute? {
        // The room is found by its slot, not by hashing its id, and sender and target are read
        // from it without copying the room or either member.
        guard let (peer, target, plainIDs, reconnecting) = rooms[slot: seat.slot].members.route(from: connection, to: to)
        else { return nil }
        // No target for `to` naming the sender itself either (`MemberList.route`).
        guard let target else {
            return .answer(Frame.error(.peerNotFound, "no peer '\(to.rawValue.prefix(128))' in this room", inReplyTo: kind.rawValue),
                           to: connection)
        }
        // Its socket is gone; the sender holds the frame and sends it again after `peer-resumed`.
        if reconnecting { return .answer(Self.reconnectingRefusal(to: to, type: kind.rawValue), to: connection) }
        return .deliver(from: peer, to: target, plainIDs: plainIDs)
    }

    /// The `error` 480 `peer_reconnecting` a relay of `type` addressed to `to`, a seat in its
    /// reconnect grace, is answered with. A cluster node holding the grace answers a relay from
    /// another node's peer with the same frame (docs/protocol.md "Reconnect grace").
    public static func reconnectingRefusal(to: PeerID, type: String) -> Frame {
        Frame.error(.peerReconnecting, "peer '\(to.rawValue.prefix(128))' is reconnecting; send again after peer-resumed", inReplyTo: type)
    }

    /// The hub's one public entry for an addressed relay (`offer`, `answer`, `candidate`, `data`
    /// with `to`) from `connection`, seated at `seat` (found with `seat(of:)`, the hub unchanged
    /// since): the one connection seated as `to`, with the sender's peer id the relayed frame
    /// stamps as `from`; or an `error` (`peer_not_found`, `peer_reconnecting`) for the sender; nil
    /// when the seat does not hold `connection`. `to` is lent as bytes (`RelayParts`), as the room
    /// endpoint has it straight from the frame: no `String` is made for it unless the room is
    /// indexed or no member's id has exactly its bytes (then `route(_:to:from:seat:)` answers).
    public func route(_ parts: RelayParts, from connection: ConnectionID, seat: Seat) -> RelayRoute? {
        if parts.kind.isRPC { return routeRPC(parts, from: connection, seat: seat) }
        if let (peer, target, plainIDs) = rooms[slot: seat.slot].members.route(from: connection, toUTF8: parts.to) {
            return .deliver(from: peer, to: target, plainIDs: plainIDs)
        }
        return route(parts.kind, to: parts.toPeer, from: connection, seat: seat)
    }

    /// The answer to a `ping` from `connection`, seated at `seat` (found with `seat(of:)`, the hub
    /// unchanged since): a `pong` echoing its payload, back to the sender. The decision
    /// `handle(.message(connection, .ping(payload)))` makes, without an input or an effect array
    /// around it; nil when the seat does not hold `connection` (as for any unseated sender).
    public func pong(_ payload: RawJSON?, from connection: ConnectionID, seat: Seat) -> Frame? {
        guard rooms[slot: seat.slot].members.seats(connection) else { return nil }
        return Self.pong(echoing: payload)
    }

    /// A pong carries the ping's payload as its sender wrote it (docs/protocol.md, "ping / pong").
    private static func pong(echoing payload: RawJSON?) -> Frame { Frame(.pong, rawPayload: payload) }

    /// An addressed relay from `connection` as one decision: `route`'s, with the relayed frame's
    /// parts. The same decision `handle(.message(connection, .relay(kind, to: to, payload:
    /// payload)))` makes, as one `.send` effect. Internal: `handle` and the tests call it.
    func relay(_ kind: RelayKind, to: PeerID, payload: RawJSON?, from connection: ConnectionID) -> RelayDecision? {
        let route: RelayRoute?
        if kind.isRPC {
            guard let seat = seat(of: connection) else { return nil }
            route = RelayParts.with(kind, to: to, payload: payload) { routeRPC($0, from: connection, seat: seat) }
        } else {
            route = self.route(kind, to: to, from: connection)
        }
        switch route {
        case .deliver(let from, let target, _)?: return .deliver(RelayedFrame(kind, from: from, to: to, payload: payload), to: target)
        case .answer(let frame, let sender)?: return .answer(frame, to: sender)
        case nil: return nil
        }
    }

    private mutating func handle(_ message: ClientMessage, from connection: ConnectionID, now: Millis) -> [HubEffect] {
        if case .relay(let kind, let to, let payload) = message, let to {
            return relay(kind, to: to, payload: payload, from: connection).map { [$0.effect] } ?? []
        }
        if case .chat(let submission) = message { return chat(submission, from: connection, now: now) }
        if case .chatOperation(let operation) = message { return chatOperation(operation, from: connection, now: now) }
        guard let slot = connections[connection] else { return [] }
        let roomID = rooms.id(at: slot)
        // By its slot: the room id is for the effects, not to find the room again.
        let room = rooms[slot: slot]
        guard let sender = room.members.member(on: connection) else { return [] }
        let peer = sender.identity.peer
        switch message {
        case .relay(let kind, let to, let payload):
            // Broadcast (`to` absent; addressed relays were handled above).
            let frame = Frame(kind.frameType, from: peer.rawValue, to: to?.rawValue, rawPayload: payload)
            let others = room.connections(excluding: peer)
            return others.isEmpty ? [] : [.send(others, frame)]
        case .ping(let payload):
            return [.send([connection], Self.pong(echoing: payload))]
        case .leave:
            // The seat ends now, whatever happens to the socket after (the SDK closes it).
            return leave(connection, now: now)
        case .typing(let typing):
            return setTyping(typing, room: roomID, peer: peer, now: now)
        case .chat(let submission):
            return chat(submission, from: connection, now: now)  // not reached: taken above
        case .chatOperation(let operation):
            return chatOperation(operation, from: connection, now: now)  // not reached: taken above
        case .read(let seq):
            return [.storeRead(room: roomID, peer: peer, seq: seq)]
        case .stats(let sample):
            return [.storeStats(room: roomID, call: sender.identity.call, peer: peer, sample, timestamp: now)]
        }
    }

    /// A chat from `connection`: its store request (or the ack refusing it), as effects.
    private mutating func chat(_ submission: ChatSubmission, from connection: ConnectionID, now: Millis) -> [HubEffect] {
        switch admitChat(submission, from: connection, now: now) {
        case .store(let room, let peer):
            return [.storeChat(connection: connection, room: room, peer: peer, submission, timestamp: now)]
        case .effects(let effects):
            return effects
        }
    }

    /// What a chat from `connection` leads to: `handle(.message(connection, .chat(submission)))`'s
    /// effects, with the one nearly every chat has, its store request, answered as `.store`. The
    /// service calls this for every chat and stores it straight away: the input, the effect
    /// array and the effect (the submission copied into each and destroyed) were a visible
    /// share of the service thread's work per chat under callgrind. The room is found by its slot
    /// and the sender read in place: the other frames' path copied the room and the sender's
    /// member (its identity's strings retained and released) for the peer id and typing flag.
    public mutating func admitChat(_ submission: ChatSubmission, from connection: ConnectionID, now: Millis) -> ChatAdmission {
        guard let slot = connections[connection], let (peer, typing) = rooms[slot: slot].members.chatSender(on: connection)
        else { return .effects([]) }
        let roomID = rooms.id(at: slot)
        if let error = validate(submission) {
            return .effects([.send([connection], Frame(.chatAck, payload: ["client_id": .string(submission.clientID)], error: error))])
        }
        // Sending a message ends the sender's typing indicator; a sender not typing (nearly
        // every chat) has none to end, which `setTyping` would look the member up again to find.
        guard typing else { return .store(room: roomID, peer: peer) }
        return .effects(setTyping(false, room: roomID, peer: peer, now: now)
            + [.storeChat(connection: connection, room: roomID, peer: peer, submission, timestamp: now)])
    }

    /// A chat operation from `connection`: its store request, or the `chat-ack` refusing what
    /// can be told without the stored target (an edit's text and meta, a reaction's key). The
    /// rules that need the target (`ChatRules.decide`) run in the store, in the transaction that
    /// writes the operation, so two operations on one message cannot both pass on a stale view.
    public mutating func chatOperation(_ operation: ChatOperation, from connection: ConnectionID, now: Millis) -> [HubEffect] {
        guard let slot = connections[connection], let (peer, moderator) = rooms[slot: slot].members.operationSender(on: connection)
        else { return [] }
        let roomID = rooms.id(at: slot)
        var error: WireError?
        switch operation.action {
        case .edit(let text, let meta): error = validate(text: text, meta: meta)
        case .delete: break
        case .react(let key, _): error = ChatRules.reactionKeyError(key, maxBytes: settings.chatOperations.reactionKeyMaxBytes)
        }
        if let error {
            return [.send([connection], Frame(.chatAck, payload: ["client_id": .string(operation.clientID)], error: error))]
        }
        return [.storeChatOperation(connection: connection, room: roomID, peer: peer, operation, moderator: moderator, timestamp: now)]
    }

    private func validate(_ chat: ChatSubmission) -> WireError? {
        validate(text: chat.text, meta: chat.meta)
    }

    private func validate(text: String, meta: JSONValue?) -> WireError? {
        if Self.isBlank(text) { return WireError(.chatEmpty, "chat text is empty") }
        if text.utf8.count > settings.chatMaxTextBytes {
            return WireError(.chatTooLong, "chat text is longer than \(settings.chatMaxTextBytes) bytes")
        }
        if let meta {
            guard meta.objectValue != nil else { return WireError(.chatMetaInvalid, "chat meta must be an object") }
            if JSONWriter.bytes(meta).count > settings.chatMaxMetaBytes {
                return WireError(.chatMetaInvalid, "chat meta is larger than \(settings.chatMaxMetaBytes) bytes")
            }
        }
        return nil
    }

    /// Whether every Character of `text` is whitespace (an empty text is). A Character is
    /// whitespace when its first scalar is, so a text whose first byte is an ASCII scalar that is
    /// not (nearly every chat) is told at once, without breaking it into Characters. The ASCII
    /// scalars with Unicode's White_Space property are U+0009–U+000D and U+0020; asking the
    /// scalar's properties costs a table lookup per call.
    static func isBlank(_ text: String) -> Bool {
        if let first = text.utf8.first, first < 0x80, first != 0x20, !(0x09...0x0D).contains(first) { return false }
        return text.allSatisfy(\.isWhitespace)
    }

    /// Where a chat the store answered goes: its ack to the sender, and the stored message to the
    /// rest of its room unless it was a retry; or, for a refusal, the ack with its error; nil
    /// when there is nobody to tell (the sender left, and nobody else is to receive it). The
    /// answer follows a sender who reconnected while the insert was in flight (a new connection
    /// is looked up only then). The service calls this for every chat and hands the answer to
    /// `Router.deliverChat`, which a single node's router writes from the message's fields: the
    /// effects (`handle(.chatStored(_:))`), their array, the two `Frame`s built, copied into them
    /// and destroyed, were a fifth of the service thread's work per chat under callgrind.
    public func route(_ outcome: ChatStoreOutcome) -> StoredChatRoute? {
        switch outcome {
        case .failed(let room, let peer, let clientID, let connection, let error):
            let target = connections[connection] != nil ? connection : rooms[room]?.members[peer]?.connection
            guard let target else { return nil }
            return .answer(Frame(.chatAck, payload: ["client_id": .string(clientID)], error: error), to: target)
        case .stored(let message, let connection, let duplicate):
            // A sender still connected is seated in the message's room, which its seat's slot
            // names: the room id is hashed only for a sender who has gone.
            let seat = connections[connection]
            let ack = seat != nil ? connection : rooms[message.room]?.members[message.from]?.connection
            var others: [ConnectionID] = []
            // Read in place: `rooms[message.room]` copied the room (each of its tables retained and released).
            if !duplicate, let slot = seat ?? rooms.slot(of: message.room) {
                others = rooms[slot: slot].connections(excluding: message.from)
            }
            guard ack != nil || !others.isEmpty else { return nil }
            return .deliver(message, ack: ack, others: others)
        }
    }

    // MARK: typing

    private mutating func setTyping(_ typing: Bool, room roomID: RoomID, peer: PeerID, now: Millis) -> [HubEffect] {
        guard let wasUntil = rooms[roomID]?.members[peer].map({ $0.typingUntil }) else { return [] }
        let wasTyping = wasUntil != nil
        // Nothing to record: the common case on every chat, kept free of dictionary writes.
        if !typing && !wasTyping { return [] }
        // Mutated in place through the dictionaries so the room is not copied (copy-on-write).
        rooms[roomID]?.setTyping(peer, until: typing ? now + settings.typingTTLMs : nil)
        if typing { typingRooms.insert(roomID) }
        // Repeated "typing: true" only extends the TTL; others hear about changes, not heartbeats.
        guard typing != wasTyping, let room = rooms[roomID] else { return [] }
        let others = room.connections(excluding: peer)
        return others.isEmpty ? [] : [.send(others, Frame(.typing, from: peer.rawValue, payload: ["typing": .bool(typing)]))]
    }

    /// Every tick: ends the typing indicators whose TTL passed. Only rooms where someone typed
    /// are visited (`typingRooms`), in room order as before; sorting every room on every tick
    /// grew with the number of rooms (1,000s of idle ones on a busy node).
    private mutating func expireTyping(now: Millis) -> [HubEffect] {
        guard !typingRooms.isEmpty else { return [] }
        var effects: [HubEffect] = []
        for roomID in typingRooms.sorted() {
            guard let room = rooms[roomID] else {
                typingRooms.remove(roomID)
                continue
            }
            var stillTyping = false
            for member in room.members.all {
                guard let until = member.typingUntil else { continue }
                if until <= now {
                    effects += setTyping(false, room: roomID, peer: member.identity.peer, now: now)
                } else {
                    stillTyping = true
                }
            }
            if !stillTyping { typingRooms.remove(roomID) }
        }
        return effects
    }
}

/// `Hub.route`'s answer for an addressed relay: its one target and the sender's peer id, or an
/// error for the sender when the target is not in the room. The relayed frame's other parts (its
/// kind, `to` and payload) are the caller's already.
public enum RelayRoute: Sendable, Equatable {
    /// `plainIDs`: both the sender's id and `to` are plain (`RelayedFrame.isPlain`), as seated.
    /// The caller's `to` equals the target's id, and equal strings (canonically equivalent) have
    /// the same `"`, `\` and control characters, none of which a decomposition produces.
    case deliver(from: PeerID, to: ConnectionID, plainIDs: Bool)
    /// An `error` frame (`peer_not_found`) back to the sender. Indirect: a `Frame` inline made
    /// every route several times larger, and routes are moved with `memcpy` several times per
    /// relayed frame; the box is allocated only for this rare answer.
    indirect case answer(Frame, to: ConnectionID)
}

/// `Hub.admitChat(_:from:now:)`'s answer for a chat from a connection.
public enum ChatAdmission: Sendable, Equatable {
    /// Store it: `HubEffect.storeChat` for the chat, its connection and `now`, in `room` from `peer`.
    case store(room: RoomID, peer: PeerID)
    /// Anything else, as effects: the ack refusing it, the end of the sender's typing before its
    /// store request, or nothing for a connection with no seat.
    case effects([HubEffect])
}

/// `Hub.route(_:)`'s answer for a chat the store answered (nil there: nobody to tell).
public enum StoredChatRoute: Sendable, Equatable {
    /// A stored chat: `message`'s ack (`Frame.chatAck`) to `ack`, nil when the sender has left
    /// the room; then `message.frame` to `others`, empty for a retry of a stored chat (only its
    /// sender hears of it again) or a room of one.
    case deliver(ChatMessage, ack: ConnectionID?, others: [ConnectionID])
    /// A refused chat: the ack carrying the error, to the sender.
    case answer(Frame, to: ConnectionID)

    /// The same effects as `Hub.handle(.chatStored(_:))` returns for it: the ack first.
    public var effects: [HubEffect] {
        switch self {
        case .deliver(let message, let ack, let others):
            // Built as one literal: appending to an empty array allocated twice.
            guard let ack else { return others.isEmpty ? [] : [.send(others, message.frame)] }
            return others.isEmpty ? [.send([ack], message.ack)] : [.send([ack], message.ack), .send(others, message.frame)]
        case .answer(let frame, let target):
            return [.send([target], frame)]
        }
    }
}

/// `Hub.relay`'s answer for an addressed relay: the frame for its one target, or an error for the
/// sender when the target is not in the room.
public enum RelayDecision: Sendable, Equatable {
    case deliver(RelayedFrame, to: ConnectionID)
    /// An `error` frame (`peer_not_found`) back to the sender.
    case answer(Frame, to: ConnectionID)

    /// The same decision as the `.send` effect `Hub.handle` returns for it.
    public var effect: HubEffect {
        switch self {
        case .deliver(let relayed, let target): return .send([target], relayed.frame)
        case .answer(let frame, let sender): return .send([sender], frame)
        }
    }
}
