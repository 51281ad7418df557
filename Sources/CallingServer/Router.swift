import CallingCore
import CallingTransport

/// What the room service's decisions do outside the process's state machines: frames handed to
/// connections, connections closed (`FrameDelivery`), and room membership as the rest of the
/// deployment sees it (`RoomMembership`). Every method runs on the service thread. The room
/// service needs both; the endpoints that only write frames and close connections (presence,
/// the frame gate, HTTP sessions) hold a `FrameDelivery`.
///
/// `LocalRouter` is the single-node implementation: sockets and HTTP sessions of this process,
/// and a membership table that mirrors the hub's. `ClusterRouter` wraps it for a cluster.
typealias Router = FrameDelivery & RoomMembership

/// Frames handed to connections and connections closed, on the service thread.
protocol FrameDelivery: AnyObject {
    /// Encodes `frame` once and hands it to each target (a socket's queue, or the virtual
    /// connection attached under that id).
    func deliver(_ frame: Frame, to targets: [ConnectionID])
    /// `deliver(frame, to: [target])`, for the one-target frames of an addressed relay: a router
    /// may skip building the array.
    func deliver(_ frame: Frame, to target: ConnectionID)
    /// `deliver(relay.relayed(from: from).frame, to: target)`, for an addressed relay: a router
    /// may write the frame from its parts, lent by the caller (often straight from the frame they
    /// arrived in), without building it (or a `RelayedFrame`, whose parts would be copied in and
    /// destroyed). `plainIDs`: both ids are known to be plain (`RelayedFrame.isPlain`), so neither
    /// is checked again; false when that is not known.
    func deliverRelay(_ relay: RelayParts, from: PeerID, target: ConnectionID, plainIDs: Bool)
    /// A stored chat, as `StoredChatRoute.deliver` says: its ack to `ack`, then the message to
    /// `others` (`deliver` of `StoredChatRoute.effects`' frames). A router may write both frames
    /// from the message's fields, without building either.
    func deliverChat(_ message: ChatMessage, ack: ConnectionID?, others: [ConnectionID])
    /// Closes a connection with `code`: a socket gets a Close frame after its queued frames, a
    /// virtual connection its `closed(_:code:)`.
    func close(_ connection: ConnectionID, code: CloseCode)
    /// Makes `handler` the receiver of frames and closes for `connection` (an id in the
    /// `.httpSession` space: `ConnectionID.Space`), until `detach`.
    func attach(_ connection: ConnectionID, to handler: any VirtualConnection)
    func detach(_ connection: ConnectionID)
}

/// Room membership as the rest of the deployment sees it, and the cluster's hooks around a seat
/// and a stored chat, on the service thread.
protocol RoomMembership: AnyObject {
    /// The hub seated `identity` on `connection`; `takeover` when it replaced the peer's previous
    /// connection (the room saw no leave or join).
    func joined(_ identity: PeerIdentity, on connection: ConnectionID, takeover: Bool)
    /// The hub let `identity`'s seat on `connection` go (leave, kick, room closed).
    func left(_ identity: PeerIdentity, from connection: ConnectionID)
    /// Whether `connection` is this node's (a socket or an HTTP session) rather than a seat
    /// standing for a peer on another node. Webhooks and call bookkeeping follow local seats only.
    func isLocal(_ connection: ConnectionID) -> Bool
    /// This node stored `message` (not a retry) and its hub is handing it to the room.
    func committed(_ message: ChatMessage)
    /// After the node's own check (`Hub.admit`) let a socket upgrade: asks the deployment's shared
    /// seat count for `identity`'s seat under `limit` (> 0). `answer` may run on any thread.
    func admitAcrossNodes(_ identity: PeerIdentity, limit: Int, answer: @escaping @Sendable (SeatAdmission) -> Void)
    /// A joiner whose `admitAcrossNodes` added a seat went away (or was refused) before joining.
    func abandonAdmission(_ identity: PeerIdentity)
}

extension RoomMembership {
    func committed(_ message: ChatMessage) {}

    /// One node: its own check is the whole answer.
    func admitAcrossNodes(_ identity: PeerIdentity, limit: Int, answer: @escaping @Sendable (SeatAdmission) -> Void) {
        answer(.unchecked)
    }

    func abandonAdmission(_ identity: PeerIdentity) {}
}

extension FrameDelivery {
    func deliver(_ frame: Frame, to target: ConnectionID) { deliver(frame, to: [target]) }

    func deliverRelay(_ relay: RelayParts, from: PeerID, target: ConnectionID, plainIDs: Bool) {
        deliver(relay.relayed(from: from).frame, to: target)
    }

    func deliverChat(_ message: ChatMessage, ack: ConnectionID?, others: [ConnectionID]) {
        for case .send(let targets, let frame) in StoredChatRoute.deliver(message, ack: ack, others: others).effects {
            deliver(frame, to: targets)
        }
    }
}

/// A room member that is not a socket of the transport: an HTTP session's seat (HTTPSessions.swift).
protocol VirtualConnection: AnyObject {
    func receive(_ frame: Frame, on connection: ConnectionID)
    func closed(_ connection: ConnectionID, code: CloseCode)
}

/// The socket side a router delivers to; `WebSocketServer` is the one in production.
protocol ConnectionSink: AnyObject {
    func send(_ message: OutboundMessage, to connection: ConnectionID)
    /// One frame of `count` bytes for `connection` alone, which `write` puts in place
    /// (`WebSocketServer.send(count:to:writing:)`).
    func send(count: Int, to connection: ConnectionID, writing write: (UnsafeMutablePointer<UInt8>) -> Void)
    func close(_ connection: ConnectionID, code: CloseCode)
}

extension WebSocketServer: ConnectionSink {}

/// One node: frames go to this process's sockets and HTTP sessions.
final class LocalRouter: Router {
    private let sink: any ConnectionSink
    private let metrics: Metrics
    /// Weak: a session detaches when it ends, and a stopped server must not be kept alive by its router.
    private struct WeakHandler { weak var handler: (any VirtualConnection)? }
    private var virtuals: [ConnectionID: WeakHandler] = [:]
    private var seats: [RoomID: [PeerID: ConnectionID]] = [:]
    /// Whether `joined`/`left` fill `seats`, for `connection(of:in:)`. Only a cluster's local
    /// router needs the table (`ClusterRouter` asks it which local connection a peer has, since
    /// its hub also seats other nodes' peers); alone, the hub seats exactly this node's
    /// connections and is asked directly, so the router keeps no copy (a dictionary per room).
    private let keepsSeats: Bool
    /// Scratch space `deliver` encodes each frame into.
    private var encodeBuffer: [UInt8] = []

    init(sink: any ConnectionSink, metrics: Metrics, keepsSeats: Bool = true) {
        self.sink = sink
        self.metrics = metrics
        self.keepsSeats = keepsSeats
    }

    func deliver(_ frame: Frame, to targets: [ConnectionID]) {
        if targets.count == 1 { return deliver(frame, to: targets[0]) }
        guard !targets.isEmpty else { return }
        let message = encode(frame)
        metrics.framesOut.count(named: frame.type, by: targets.count)
        for target in targets { hand(frame, message, to: target) }
    }

    func deliver(_ frame: Frame, to target: ConnectionID) {
        metrics.framesOut.count(named: frame.type, by: 1)
        // A frame for one socket (a chat-ack, a chat in a room of two) is framed straight into
        // its pending bytes, as a relay is: no message to allocate, fill, copy into the socket's
        // write and free. A message is worth it only when several targets share it.
        if !target.isHTTPSession {
            if let length = frame.plainChatLength {
                return sink.send(count: length, to: target) { frame.writePlainChat(to: $0) }
            }
            if let length = frame.plainRelayedLength {
                return sink.send(count: length, to: target) { frame.writePlainRelayed(to: $0) }
            }
        }
        hand(frame, encode(frame), to: target)
    }

    func deliverRelay(_ relay: RelayParts, from: PeerID, target: ConnectionID, plainIDs: Bool) {
        // A socket's frame is written from the relay's parts into the target's pending bytes (no
        // message of its own); an HTTP session, or a relay without a payload or with ids to
        // escape, takes the `Frame` path.
        guard !target.isHTTPSession, plainIDs, let length = relay.plainLength(plainFrom: from) else {
            return deliver(relay.relayed(from: from).frame, to: target)
        }
        metrics.framesOut.count(relay.kind.frameType)
        sink.send(count: length, to: target) { relay.writePlain(from: from, at: $0) }
    }

    func deliverChat(_ message: ChatMessage, ack: ConnectionID?, others: [ConnectionID]) {
        if let ack {
            // A socket's ack is written from the message's fields into its pending bytes.
            if !ack.isHTTPSession,
               let length = Frame.plainChatAckLength(clientID: message.clientID, seq: message.seq, timestamp: message.timestamp)
            {
                metrics.framesOut.count(.chatAck)
                sink.send(count: length, to: ack) {
                    Frame.writePlainChatAck(clientID: message.clientID, seq: message.seq, timestamp: message.timestamp, to: $0)
                }
            } else {
                deliver(message.ack, to: ack)
            }
        }
        guard !others.isEmpty else { return }
        // The broadcast is written once, into the message every socket shares (or straight into
        // the one socket's pending bytes); an HTTP session among the targets, a meta or a string
        // to escape, an operation or a reply take the `Frame` path.
        guard message.meta == nil, message.isPlainMessage, !others.contains(where: { $0.isHTTPSession }),
              let length = Frame.plainChatLength(from: message.from.rawValue, clientID: message.clientID, text: message.text,
                                                 seq: message.seq, timestamp: message.timestamp)
        else { return deliver(message.frame, to: others) }
        metrics.framesOut.count(.chat, by: others.count)
        let write = { (destination: UnsafeMutablePointer<UInt8>) in
            Frame.writePlainChat(from: message.from.rawValue, clientID: message.clientID, text: message.text,
                                 seq: message.seq, timestamp: message.timestamp, to: destination)
        }
        if others.count == 1 { return sink.send(count: length, to: others[0], writing: write) }
        let shared = OutboundMessage(count: length, writing: write)
        for target in others { sink.send(shared, to: target) }
    }

    /// A relayed frame, a chat and a chat-ack are written straight into the message every target
    /// shares; others are encoded into a buffer kept for the purpose, then copied once: no array
    /// per frame.
    @inline(__always)
    private func encode(_ frame: Frame) -> OutboundMessage {
        if let length = frame.plainRelayedLength {
            return OutboundMessage(count: length) { frame.writePlainRelayed(to: $0) }
        }
        if let length = frame.plainChatLength {
            return OutboundMessage(count: length) { frame.writePlainChat(to: $0) }
        }
        encodeBuffer.removeAll(keepingCapacity: true)
        frame.encode(into: &encodeBuffer)
        return OutboundMessage(encodeBuffer[...])
    }

    @inline(__always)
    private func hand(_ frame: Frame, _ message: OutboundMessage, to target: ConnectionID) {
        // A virtual connection is an HTTP session: its frames go to the session, never to a socket.
        if target.isHTTPSession {
            virtuals[target]?.handler?.receive(frame, on: target)
            return
        }
        sink.send(message, to: target)
    }

    func close(_ connection: ConnectionID, code: CloseCode) {
        if connection.isHTTPSession {
            virtuals[connection]?.handler?.closed(connection, code: code)
            return
        }
        sink.close(connection, code: code)
    }

    func attach(_ connection: ConnectionID, to handler: any VirtualConnection) {
        virtuals[connection] = WeakHandler(handler: handler)
    }

    func detach(_ connection: ConnectionID) {
        virtuals[connection] = nil
    }

    func joined(_ identity: PeerIdentity, on connection: ConnectionID, takeover: Bool) {
        guard keepsSeats else { return }
        seats[identity.room, default: [:]][identity.peer] = connection
    }

    func left(_ identity: PeerIdentity, from connection: ConnectionID) {
        guard keepsSeats, seats[identity.room]?[identity.peer] == connection else { return }
        seats[identity.room]?[identity.peer] = nil
        if seats[identity.room]?.isEmpty == true { seats[identity.room] = nil }
    }

    /// The connection seated as `peer` in `room` on this node, if any; nil for every peer when
    /// the router keeps no seats (`keepsSeats`).
    func connection(of peer: PeerID, in room: RoomID) -> ConnectionID? {
        seats[room]?[peer]
    }

    func isLocal(_ connection: ConnectionID) -> Bool { true }

    /// Hands a frame another node already encoded to local connections: sockets share one buffer;
    /// an HTTP session gets the frame parsed back.
    func deliver(encoded bytes: [UInt8], type: String, to targets: [ConnectionID]) {
        guard !targets.isEmpty else { return }
        metrics.framesOut.count(named: type, by: targets.count)
        var message: OutboundMessage?
        var frame: Frame??
        for target in targets {
            if target.isHTTPSession {
                if frame == nil { frame = .some(Frame(wire: bytes)) }
                if let parsed = frame ?? nil { virtuals[target]?.handler?.receive(parsed, on: target) }
                continue
            }
            if message == nil { message = OutboundMessage(bytes) }
            sink.send(message!, to: target)
        }
    }
}
