import CallingCore
import CallingTransport
import XCTest

@testable import CallingServer

/// `LocalRouter` against a recording socket sink and a recording virtual connection: no server.
final class RouterTests: XCTestCase {
    final class Sockets: ConnectionSink {
        var sent: [(ConnectionID, OutboundMessage)] = []
        /// Which of `sent` came through `send(count:to:writing:)`, the in-place path.
        var writtenInPlace: [Bool] = []
        var closed: [(ConnectionID, CloseCode)] = []
        func send(_ message: OutboundMessage, to connection: ConnectionID) {
            sent.append((connection, message))
            writtenInPlace.append(false)
        }
        func send(count: Int, to connection: ConnectionID, writing write: (UnsafeMutablePointer<UInt8>) -> Void) {
            sent.append((connection, OutboundMessage(count: count, writing: write)))
            writtenInPlace.append(true)
        }
        func close(_ connection: ConnectionID, code: CloseCode) { closed.append((connection, code)) }
    }

    final class Session: VirtualConnection {
        var frames: [(ConnectionID, Frame)] = []
        var closes: [(ConnectionID, CloseCode)] = []
        func receive(_ frame: Frame, on connection: ConnectionID) { frames.append((connection, frame)) }
        func closed(_ connection: ConnectionID, code: CloseCode) { closes.append((connection, code)) }
    }

    let virtual = ConnectionID(.httpSession, serial: 1)

    func test_a_broadcast_is_encoded_once_and_virtual_targets_get_the_frame_not_a_socket_write() {
        let sockets = Sockets()
        let metrics = Metrics()
        let router = LocalRouter(sink: sockets, metrics: metrics)
        let session = Session()
        router.attach(virtual, to: session)
        let frame = Frame(.peerJoined, from: "a", payload: ["peer_id": "a"])
        router.deliver(frame, to: [ConnectionID(1), virtual, ConnectionID(2)])
        XCTAssertEqual(sockets.sent.map(\.0), [ConnectionID(1), ConnectionID(2)])
        XCTAssertTrue(sockets.sent[0].1 === sockets.sent[1].1, "one encoded buffer shared by every socket")
        XCTAssertEqual(sockets.sent[0].1.count, frame.encoded().count)
        XCTAssertEqual(session.frames.map(\.0), [virtual])
        XCTAssertEqual(session.frames.first?.1, frame)
        XCTAssertEqual(metrics.framesOut["peer-joined"], 3)
    }

    func test_an_addressed_relay_is_written_from_its_parts_or_handed_to_a_session_as_its_frame() {
        let sockets = Sockets()
        let metrics = Metrics()
        let router = LocalRouter(sink: sockets, metrics: metrics)
        let session = Session()
        router.attach(virtual, to: session)
        let relays = [
            RelayedFrame(.candidate, from: "alice", to: "bob", payload: ["candidate": "candidate:1 1 udp 1 192.0.2.1 9 typ host"]),
            RelayedFrame(.data, from: "alice", to: "b\"ob", payload: ["k": 1]),  // an id to escape: the general path
            RelayedFrame(.offer, from: "alice", to: "bob", payload: nil),  // no payload: the general path
        ]
        for relayed in relays {
            deliver(relayed, through: router, to: ConnectionID(1))
            let message = sockets.sent.removeLast()
            XCTAssertEqual(message.0, ConnectionID(1))
            let bytes = Array(UnsafeBufferPointer(start: message.1.payloadPointer, count: message.1.count))
            XCTAssertEqual(bytes, relayed.frame.encoded())
        }
        deliver(relays[0], through: router, to: virtual)
        XCTAssertTrue(sockets.sent.isEmpty, "a virtual id never reaches the socket sink")
        XCTAssertEqual(session.frames.map(\.0), [virtual])
        XCTAssertEqual(session.frames.first?.1, relays[0].frame)
        XCTAssertEqual(metrics.framesOut["candidate"], 2)
        XCTAssertEqual(metrics.framesOut["data"], 1)
        XCTAssertEqual(metrics.framesOut["offer"], 1)
    }

    /// `relayed` as the service hands a relay to the router: its parts lent, the ids' plainness as
    /// the hub knows it.
    private func deliver(_ relayed: RelayedFrame, through router: LocalRouter, to target: ConnectionID) {
        RelayParts.with(relayed.kind, to: relayed.to, payload: relayed.payload) {
            router.deliverRelay($0, from: relayed.from, target: target,
                                plainIDs: RelayedFrame.isPlain(relayed.from) && RelayedFrame.isPlain(relayed.to))
        }
    }

    func test_a_chat_or_ack_for_one_socket_is_written_in_place_and_one_for_several_is_shared() {
        let sockets = Sockets()
        let metrics = Metrics()
        let router = LocalRouter(sink: sockets, metrics: metrics)
        let ack = Frame.chatAck(clientID: "c-1", seq: 13, timestamp: 1_700_000_000_123)
        let chat = Frame.chat(from: "alice", clientID: "c-1", text: "hello", meta: nil, seq: 13, timestamp: 1_700_000_000_123)
        let escaped = Frame.chat(from: "alice", clientID: "c-2", text: "say \"hi\"", meta: nil, seq: 14, timestamp: 1_700_000_000_124)
        router.deliver(ack, to: ConnectionID(1))
        router.deliver(chat, to: [ConnectionID(2)])
        router.deliver(escaped, to: [ConnectionID(2)])
        router.deliver(chat, to: [ConnectionID(2), ConnectionID(3)])
        XCTAssertEqual(sockets.sent.map(\.0), [ConnectionID(1), ConnectionID(2), ConnectionID(2), ConnectionID(2), ConnectionID(3)])
        XCTAssertEqual(sockets.writtenInPlace, [true, true, false, false, false],
                       "one plain target: in place; a string to escape, or several targets: a message")
        XCTAssertTrue(sockets.sent[3].1 === sockets.sent[4].1, "several targets share one message")
        let expected = [ack, chat, escaped, chat, chat].map { $0.encoded() }
        for (index, (_, message)) in sockets.sent.enumerated() {
            XCTAssertEqual(Array(UnsafeBufferPointer(start: message.payloadPointer, count: message.count)), expected[index])
        }
        XCTAssertEqual(metrics.framesOut["chat-ack"], 1)
        XCTAssertEqual(metrics.framesOut["chat"], 4)
    }

    /// A stored chat as the service hands it over (`Hub.route(_:)`): the same bytes, to the same
    /// targets in the same order, as delivering `StoredChatRoute.effects`' frames, written from
    /// the message's fields where they need no escaping and no target is an HTTP session.
    func test_a_stored_chat_is_written_from_the_message_as_its_effects_frames_would_be() {
        let stored = ChatMessage(room: "r", seq: 13, from: "alice", clientID: "c-1", text: "hello", meta: nil,
                                 timestamp: 1_700_000_000_123)
        let escaped = ChatMessage(room: "r", seq: 14, from: "alice", clientID: "c-2", text: "say \"hi\"", meta: nil,
                                  timestamp: 1_700_000_000_124)
        let withMeta = ChatMessage(room: "r", seq: 15, from: "alice", clientID: "c-3", text: "hi", meta: ["reply_to": 13],
                                   timestamp: 1_700_000_000_125)
        let escapedID = ChatMessage(room: "r", seq: 16, from: "alice", clientID: "c\\4", text: "hi", meta: nil,
                                    timestamp: 1_700_000_000_126)
        let cases: [(ChatMessage, ack: ConnectionID?, others: [ConnectionID], inPlace: [Bool])] = [
            (stored, ConnectionID(1), [ConnectionID(2), ConnectionID(3)], [true, false, false]),
            (stored, ConnectionID(1), [ConnectionID(2)], [true, true]),
            (stored, ConnectionID(1), [], [true]),
            (stored, nil, [ConnectionID(2), ConnectionID(3)], [false, false]),
            (escaped, ConnectionID(1), [ConnectionID(2), ConnectionID(3)], [true, false, false]),
            (withMeta, ConnectionID(1), [ConnectionID(2)], [true, false]),
            (escapedID, ConnectionID(1), [ConnectionID(2), ConnectionID(3)], [false, false, false]),
        ]
        for (message, ack, others, inPlace) in cases {
            let sockets = Sockets()
            let metrics = Metrics()
            LocalRouter(sink: sockets, metrics: metrics).deliverChat(message, ack: ack, others: others)
            var expected: [(ConnectionID, [UInt8])] = []
            for case .send(let targets, let frame) in StoredChatRoute.deliver(message, ack: ack, others: others).effects {
                expected += targets.map { ($0, frame.encoded()) }
            }
            XCTAssertEqual(sockets.sent.map(\.0), expected.map(\.0), "\(message.seq)")
            for (index, (_, sent)) in sockets.sent.enumerated() {
                XCTAssertEqual(Array(UnsafeBufferPointer(start: sent.payloadPointer, count: sent.count)), expected[index].1)
            }
            XCTAssertEqual(sockets.writtenInPlace, inPlace, "\(message.seq), \(others.count) others")
            if others.count > 1 { XCTAssertTrue(sockets.sent[sockets.sent.count - 1].1 === sockets.sent[sockets.sent.count - 2].1) }
            XCTAssertEqual(metrics.framesOut["chat-ack"], ack == nil ? nil : 1)
            XCTAssertEqual(metrics.framesOut["chat"], others.isEmpty ? nil : others.count)
        }
        // An HTTP session gets frames, never bytes: its ack, and the broadcast it shares with a socket.
        let sockets = Sockets()
        let metrics = Metrics()
        let router = LocalRouter(sink: sockets, metrics: metrics)
        let session = Session()
        router.attach(virtual, to: session)
        router.deliverChat(stored, ack: virtual, others: [ConnectionID(2), virtual])
        XCTAssertEqual(metrics.framesOut["chat-ack"], 1)
        XCTAssertEqual(metrics.framesOut["chat"], 2)
        XCTAssertEqual(session.frames.map(\.0), [virtual, virtual])
        XCTAssertEqual(session.frames.map(\.1), [Frame.chatAck(clientID: "c-1", seq: 13, timestamp: 1_700_000_000_123), stored.frame])
        XCTAssertEqual(sockets.sent.map(\.0), [ConnectionID(2)])
        XCTAssertEqual(sockets.sent.first.map { Array(UnsafeBufferPointer(start: $0.1.payloadPointer, count: $0.1.count)) },
                       stored.frame.encoded())
    }

    /// A router that writes no chat of its own (a cluster's) delivers `StoredChatRoute.effects`'
    /// frames, in their order, through `deliver`.
    func test_a_router_without_its_own_chat_writer_delivers_the_routes_frames() {
        final class Recording: Router {
            var delivered: [([ConnectionID], Frame)] = []
            func deliver(_ frame: Frame, to targets: [ConnectionID]) { delivered.append((targets, frame)) }
            func close(_ connection: ConnectionID, code: CloseCode) {}
            func attach(_ connection: ConnectionID, to handler: any VirtualConnection) {}
            func detach(_ connection: ConnectionID) {}
            func joined(_ identity: PeerIdentity, on connection: ConnectionID, takeover: Bool) {}
            func left(_ identity: PeerIdentity, from connection: ConnectionID) {}
            func connection(of peer: PeerID, in room: RoomID) -> ConnectionID? { nil }
            func isLocal(_ connection: ConnectionID) -> Bool { true }
        }
        let stored = ChatMessage(room: "r", seq: 13, from: "alice", clientID: "c-1", text: "hello", meta: nil,
                                 timestamp: 1_700_000_000_123)
        let ack = Frame.chatAck(clientID: "c-1", seq: 13, timestamp: 1_700_000_000_123)
        let cases: [(ack: ConnectionID?, others: [ConnectionID], expected: [([ConnectionID], Frame)])] = [
            (ConnectionID(1), [ConnectionID(2), ConnectionID(3)], [([ConnectionID(1)], ack), ([ConnectionID(2), ConnectionID(3)], stored.frame)]),
            (ConnectionID(1), [], [([ConnectionID(1)], ack)]),
            (nil, [ConnectionID(2)], [([ConnectionID(2)], stored.frame)]),
        ]
        for (target, others, expected) in cases {
            let router = Recording()
            router.deliverChat(stored, ack: target, others: others)
            XCTAssertEqual(router.delivered.map(\.0), expected.map(\.0))
            XCTAssertEqual(router.delivered.map(\.1), expected.map(\.1))
        }
    }

    func test_closes_go_to_the_socket_or_the_attached_session_and_a_detached_session_gets_nothing() {
        let sockets = Sockets()
        let router = LocalRouter(sink: sockets, metrics: Metrics())
        let session = Session()
        router.attach(virtual, to: session)
        router.close(ConnectionID(7), code: .replaced)
        router.close(virtual, code: .consultationEnded)
        XCTAssertEqual(sockets.closed.map(\.0), [ConnectionID(7)])
        XCTAssertEqual(session.closes.map(\.1), [.consultationEnded])
        router.detach(virtual)
        router.deliver(Frame(.pong), to: [virtual])
        router.close(virtual, code: .kicked)
        XCTAssertTrue(session.frames.isEmpty)
        XCTAssertEqual(session.closes.count, 1)
        XCTAssertTrue(sockets.sent.isEmpty, "a virtual id never reaches the socket sink")
    }

    func test_membership_follows_joins_takeovers_and_leaves() {
        let router = LocalRouter(sink: Sockets(), metrics: Metrics())
        let alice = PeerIdentity(peer: "alice", room: "r")
        router.joined(alice, on: ConnectionID(1), takeover: false)
        XCTAssertEqual(router.connection(of: "alice", in: "r"), ConnectionID(1))
        router.joined(alice, on: ConnectionID(2), takeover: true)
        // The replaced connection's late leave must not unseat the new one.
        router.left(alice, from: ConnectionID(1))
        XCTAssertEqual(router.connection(of: "alice", in: "r"), ConnectionID(2))
        router.left(alice, from: ConnectionID(2))
        XCTAssertNil(router.connection(of: "alice", in: "r"))
        XCTAssertNil(router.connection(of: "alice", in: "other"))
    }

    /// A lone node's router keeps no seat table (its hub is asked instead): joins leave no entry.
    func test_a_router_built_without_seats_keeps_none() {
        let router = LocalRouter(sink: Sockets(), metrics: Metrics(), keepsSeats: false)
        router.joined(PeerIdentity(peer: "alice", room: "r"), on: ConnectionID(1), takeover: false)
        XCTAssertNil(router.connection(of: "alice", in: "r"))
    }
}
