@testable import CallingCore
import XCTest

/// The hub as its users see it: which frames each connection receives and what is persisted.
/// Time is a plain variable passed as `now`; nothing sleeps.
final class HubTests: XCTestCase {
    private var hub = Hub()
    private var now: Millis = 1_700_000_000_000

    private let room: RoomID = "room-1"
    private let alice = ConnectionID(1)
    private let bob = ConnectionID(2)
    private let carol = ConnectionID(3)
    /// A second connection, for reconnects and takeovers.
    private let fresh = ConnectionID(4)

    // MARK: - Driving the hub

    @discardableResult
    private func join(
        _ connection: ConnectionID, _ peer: PeerID, room: RoomID? = nil, call: CallID? = "call-1", role: String = "peer",
        name: String? = nil, resume: ChatResume = ChatResume()
    ) -> [HubEffect] {
        let identity = PeerIdentity(peer: peer, room: room ?? self.room, call: call, role: role, name: name)
        return hub.handle(.join(connection, identity, resume), now: now)
    }

    @discardableResult
    private func send(_ connection: ConnectionID, _ message: ClientMessage) -> [HubEffect] {
        hub.handle(.message(connection, message), now: now)
    }

    @discardableResult
    private func disconnect(_ connection: ConnectionID) -> [HubEffect] {
        hub.handle(.disconnect(connection), now: now)
    }

    private func tick() -> [HubEffect] { hub.handle(.tick, now: now) }

    /// alice, bob and carol, in that order, in `room`.
    private func joinAll() {
        join(alice, "alice")
        join(bob, "bob")
        join(carol, "carol")
    }

    /// The frames one connection receives from `effects`, in order.
    private func frames(_ effects: [HubEffect], to connection: ConnectionID) -> [Frame] {
        effects.compactMap { effect in
            if case .send(let targets, let frame) = effect, targets.contains(connection) { return frame }
            return nil
        }
    }

    private func storeEffects(_ effects: [HubEffect]) -> [HubEffect] {
        effects.filter {
            switch $0 {
            case .storeChat, .storeChatOperation, .storeRead, .storeStats, .storeMeter: return true
            case .send, .close, .armGrace: return false
            }
        }
    }

    private func message(seq: Int64, from peer: PeerID = "alice", clientID: String = "c-1", text: String = "hello",
                         meta: JSONValue? = nil, at timestamp: Millis? = nil) -> ChatMessage {
        ChatMessage(room: room, seq: seq, from: peer, clientID: clientID, text: text, meta: meta, timestamp: timestamp ?? now)
    }

    private func ack(_ message: ChatMessage) -> Frame {
        Frame(.chatAck, payload: ["client_id": .string(message.clientID), "seq": .int(message.seq), "ts": .int(message.timestamp)])
    }

    private func typing(_ peer: PeerID, _ on: Bool) -> Frame {
        Frame(.typing, from: peer.rawValue, payload: ["typing": .bool(on)])
    }

    // MARK: - Welcome

    func test_welcome_tells_the_joiner_who_they_are_who_is_here_and_where_chat_stands() throws {
        join(bob, "bob", role: "agent", name: "Bob")
        join(carol, "carol", role: "observer", name: nil)
        now += 1_234
        let effects = join(
            alice, "alice", call: "call-7", role: "patient", name: "Alice", resume: ChatResume(lastSeq: 12, readSeq: 10, unread: 2))
        let welcome = try XCTUnwrap(frames(effects, to: alice).first)
        XCTAssertEqual(welcome, Frame(.welcome, payload: [
            "peer_id": "alice", "room_id": "room-1", "call_id": "call-7", "role": "patient", "name": "Alice",
            "peers": [
                ["peer_id": "bob", "role": "agent", "name": "Bob"],
                ["peer_id": "carol", "role": "observer", "name": nil],
            ],
            "ping_interval_ms": 25_000, "server_time": .int(now),
            "last_seq": 12, "read_seq": 10, "unread": 2,
        ]))
    }

    func test_first_joiner_sees_an_empty_roster_and_null_call_and_name() throws {
        let effects = join(alice, "alice", call: nil)
        XCTAssertEqual(effects.count, 1, "nobody else to tell")
        let welcome = try XCTUnwrap(frames(effects, to: alice).first)
        XCTAssertEqual(welcome.payload?["peers"], [])
        XCTAssertEqual(welcome.payload?["call_id"], .null)
        XCTAssertEqual(welcome.payload?["name"], .null)
        XCTAssertEqual(welcome.payload?["last_seq"], 0)
    }

    func test_ping_interval_comes_from_the_settings() throws {
        hub = Hub(settings: HubSettings(pingIntervalMs: 10_000))
        let welcome = try XCTUnwrap(frames(join(alice, "alice"), to: alice).first)
        XCTAssertEqual(welcome.payload?["ping_interval_ms"], 10_000)
    }

    func test_fresh_join_does_not_claim_recovery() throws {
        let welcome = try XCTUnwrap(frames(join(alice, "alice", resume: ChatResume(lastSeq: 5)), to: alice).first)
        XCTAssertNil(welcome.payload?["recovered"])
        XCTAssertNil(welcome.payload?["replay_count"])
    }

    func test_resumed_join_replays_missed_messages_to_the_joiner_only_and_says_if_some_are_missing() {
        join(bob, "bob")
        let missed = [message(seq: 4, from: "bob", clientID: "b-1", text: "one"), message(seq: 5, from: "bob", clientID: "b-2", text: "two")]
        let resume = ChatResume(lastSeq: 5, readSeq: 3, unread: 2, replay: missed, complete: false, requested: true)
        let effects = join(alice, "alice", resume: resume)

        let received = frames(effects, to: alice)
        XCTAssertEqual(received.map(\.type), ["welcome", "chat", "chat"], "replay follows the welcome, oldest first")
        XCTAssertEqual(received.first?.payload?["recovered"], false)
        XCTAssertEqual(received.first?.payload?["replay_count"], 2)
        XCTAssertEqual(Array(received.dropFirst()), missed.map(\.frame))
        XCTAssertEqual(received[1].from, "bob")
        XCTAssertEqual(frames(effects, to: bob).map(\.type), ["peer-joined"], "others are not sent the replay")
    }

    func test_complete_resume_is_reported_as_recovered() throws {
        let resume = ChatResume(lastSeq: 5, readSeq: 5, replay: [], complete: true, requested: true)
        let welcome = try XCTUnwrap(frames(join(alice, "alice", resume: resume), to: alice).first)
        XCTAssertEqual(welcome.payload?["recovered"], true)
        XCTAssertEqual(welcome.payload?["replay_count"], 0)
    }

    // MARK: - Joining and leaving

    func test_peer_joined_goes_to_everyone_else_not_to_the_joiner() {
        join(alice, "alice")
        join(bob, "bob")
        let effects = join(carol, "carol", role: "agent", name: "Carol")
        XCTAssertEqual(effects.count, 2)
        XCTAssertEqual(frames(effects, to: carol).map(\.type), ["welcome"])
        XCTAssertEqual(
            effects.last,
            .send([alice, bob], Frame(.peerJoined, from: "carol", payload: ["peer_id": "carol", "role": "agent", "name": "Carol"])))
    }

    func test_disconnect_tells_the_others_that_the_peer_left() {
        joinAll()
        XCTAssertEqual(disconnect(bob), [.send([alice, carol], Frame(.peerLeft, from: "bob", payload: ["peer_id": "bob"]))])
        XCTAssertEqual(hub.members(of: room), ["alice", "carol"])
        XCTAssertNil(hub.identity(of: bob))
    }

    func test_room_is_dropped_when_the_last_peer_leaves() {
        join(alice, "alice")
        join(bob, "bob")
        XCTAssertEqual(hub.roomCount, 1)
        XCTAssertEqual(hub.peerCount, 2)
        disconnect(alice)
        XCTAssertEqual(hub.roomCount, 1)
        XCTAssertEqual(disconnect(bob), [], "nobody left to tell")
        XCTAssertEqual(hub.roomCount, 0)
        XCTAssertEqual(hub.peerCount, 0)
        XCTAssertEqual(hub.members(of: room), [])
    }

    func test_disconnect_of_an_unknown_or_already_closed_connection_does_nothing() {
        joinAll()
        disconnect(bob)
        XCTAssertEqual(disconnect(bob), [])
        XCTAssertEqual(disconnect(ConnectionID(99)), [])
        XCTAssertEqual(hub.members(of: room), ["alice", "carol"])
    }

    func test_a_peer_who_comes_back_is_announced_again() {
        joinAll()
        disconnect(bob)
        let effects = join(fresh, "bob")
        XCTAssertEqual(frames(effects, to: alice).map(\.type), ["peer-joined"])
        XCTAssertEqual(hub.members(of: room), ["alice", "carol", "bob"], "the roster is in join order")
    }

    func test_rooms_are_isolated() {
        join(alice, "alice")
        let effects = join(bob, "bob", room: "room-2")
        XCTAssertTrue(frames(effects, to: alice).isEmpty)
        XCTAssertEqual(frames(effects, to: bob).first?.payload?["peers"], [])
        XCTAssertEqual(send(alice, .relay(.data, to: nil, payload: ["x": 1])), [])
        XCTAssertEqual(hub.roomCount, 2)
        XCTAssertEqual(disconnect(alice), [])
    }

    func test_identity_of_a_connection_is_what_its_token_said() {
        join(alice, "alice", call: "call-1", role: "patient", name: "Alice")
        XCTAssertEqual(hub.identity(of: alice), PeerIdentity(peer: "alice", room: room, call: "call-1", role: "patient", name: "Alice"))
        XCTAssertNil(hub.identity(of: bob))
    }

    // MARK: - Relay

    func test_offer_reaches_only_its_target_with_from_stamped_by_the_server() throws {
        joinAll()
        // A client-supplied `from` is dropped by the decoder; the hub stamps the sender's peer id.
        let spoofed = #"{"type":"offer","from":"carol","to":"bob","payload":{"type":"offer","sdp":"v=0\r\n"}}"#
        let decoded = try ClientFrameDecoder.decode(Array(spoofed.utf8))
        XCTAssertEqual(
            send(alice, decoded),
            [.send([bob], Frame(.offer, from: "alice", to: "bob", payload: ["type": "offer", "sdp": "v=0\r\n"]))])
    }

    func test_answer_candidate_and_addressed_data_are_relayed_to_the_target_only() {
        joinAll()
        let candidate: JSONValue = ["candidate": "candidate:1 1 udp 1 192.0.2.1 9 typ host", "sdpMid": nil, "sdpMLineIndex": 0]
        XCTAssertEqual(
            send(bob, .relay(.answer, to: "alice", payload: ["sdp": "v=0"])),
            [.send([alice], Frame(.answer, from: "bob", to: "alice", payload: ["sdp": "v=0"]))])
        XCTAssertEqual(
            send(bob, .relay(.candidate, to: "alice", payload: RawJSON(candidate))),
            [.send([alice], Frame(.candidate, from: "bob", to: "alice", payload: candidate))])
        XCTAssertEqual(
            send(carol, .relay(.data, to: "bob", payload: ["kind": "reject"])),
            [.send([bob], Frame(.data, from: "carol", to: "bob", payload: ["kind": "reject"]))])
    }

    func test_data_without_to_goes_to_everyone_else() {
        joinAll()
        XCTAssertEqual(
            send(bob, .relay(.data, to: nil, payload: ["kind": "hangup"])),
            [.send([alice, carol], Frame(.data, from: "bob", payload: ["kind": "hangup"]))])
    }

    func test_data_without_to_from_a_lone_peer_goes_nowhere() {
        join(alice, "alice")
        XCTAssertEqual(send(alice, .relay(.data, to: nil, payload: nil)), [])
    }

    private func assertPeerNotFound(
        _ effects: [HubEffect], sender: ConnectionID, type: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        guard effects.count == 1, case .send(let targets, let frame) = effects[0] else {
            return XCTFail("expected one error frame, got \(effects)", file: file, line: line)
        }
        XCTAssertEqual(targets, [sender], "only the sender hears about it", file: file, line: line)
        XCTAssertEqual(frame.type, "error", file: file, line: line)
        XCTAssertEqual(frame.error?.code, 404, file: file, line: line)
        XCTAssertEqual(frame.payload, ["type": .string(type)], "the refused type is echoed", file: file, line: line)
    }

    func test_relay_to_an_unknown_peer_answers_only_the_sender_with_404() {
        joinAll()
        assertPeerNotFound(send(alice, .relay(.offer, to: "dave", payload: ["sdp": "v=0"])), sender: alice, type: "offer")
        assertPeerNotFound(send(alice, .relay(.data, to: "dave", payload: nil)), sender: alice, type: "data")
    }

    func test_relay_to_oneself_is_refused_with_404() {
        joinAll()
        assertPeerNotFound(send(alice, .relay(.candidate, to: "alice", payload: ["candidate": ""])), sender: alice, type: "candidate")
    }

    func test_relay_to_a_peer_in_another_room_is_refused_with_404() {
        join(alice, "alice")
        join(bob, "bob", room: "room-2")
        assertPeerNotFound(send(alice, .relay(.offer, to: "bob", payload: ["sdp": "v=0"])), sender: alice, type: "offer")
    }

    func test_relay_to_a_peer_who_left_is_refused_with_404() {
        joinAll()
        disconnect(bob)
        assertPeerNotFound(send(alice, .relay(.answer, to: "bob", payload: ["sdp": "v=0"])), sender: alice, type: "answer")
    }

    func test_relay_decides_as_handle_does_with_one_effect() {
        // The service's fast path for addressed relays (Hub.relay) against the hub's own answer,
        // in a small room (members scanned) and a large one (members indexed).
        for size in [3, 12] {
            hub = Hub()
            let connections = (1...size).map { ConnectionID(UInt64($0)) }
            for (index, connection) in connections.enumerated() { join(connection, PeerID("p\(index)")) }
            let cases: [(ConnectionID, PeerID)] = [
                (connections[0], "p1"), (connections[size - 1], "p0"), (connections[1], "p1"), (connections[0], "nobody"),
                (ConnectionID(99), "p0"),
            ]
            for (sender, target) in cases {
                let payload: RawJSON = ["candidate": "candidate:1 1 udp 1 192.0.2.1 9 typ host"]
                let fast = hub.relay(.candidate, to: target, payload: payload, from: sender)
                let effects = send(sender, .relay(.candidate, to: target, payload: payload))
                XCTAssertEqual(fast.map { [$0.effect] } ?? [], effects, "\(size) peers, \(sender) → \(target)")
            }
        }
    }

    func test_a_route_says_whether_both_ids_are_plain() {
        // The router writes a relayed frame from its parts only between ids JSON carries as they
        // are; with one that needs escaping (a quote, a control character) it takes the encoder.
        join(alice, "alice")
        join(bob, "b\"ob")
        join(carol, "carol")
        join(fresh, "tab\tpeer")
        XCTAssertEqual(hub.route(.candidate, to: "carol", from: alice), .deliver(from: "alice", to: carol, plainIDs: true))
        XCTAssertEqual(hub.route(.candidate, to: "b\"ob", from: alice), .deliver(from: "alice", to: bob, plainIDs: false))
        XCTAssertEqual(hub.route(.offer, to: "alice", from: bob), .deliver(from: "b\"ob", to: alice, plainIDs: false))
        XCTAssertEqual(hub.route(.data, to: "tab\tpeer", from: carol), .deliver(from: "carol", to: fresh, plainIDs: false))
    }

    func test_a_route_from_a_seat_found_first_is_the_route_without_it() {
        joinAll()
        XCTAssertNil(hub.seat(of: fresh))
        for (sender, target) in [(alice, PeerID("bob")), (bob, "carol"), (carol, "alice"), (alice, "alice"), (bob, "nobody")] {
            guard let seat = hub.seat(of: sender) else { return XCTFail("\(sender) is seated") }
            XCTAssertEqual(hub.route(.candidate, to: target, from: sender, seat: seat), hub.route(.candidate, to: target, from: sender))
        }
        // A seat kept past its connection's leave routes nothing, as an unseated sender does.
        guard let stale = hub.seat(of: carol) else { return XCTFail("carol is seated") }
        _ = disconnect(carol)
        XCTAssertNil(hub.seat(of: carol))
        XCTAssertNil(hub.route(.candidate, to: "alice", from: carol, seat: stale))
        XCTAssertNil(hub.route(.candidate, to: "alice", from: carol))
    }

    /// `route(_:from:seat:)` with `to` lent as bytes answers as `route(_:to:from:)` does with the
    /// id: by byte comparison in a small room, and through the id where that does not settle it
    /// (an indexed room, an id spelt in another Unicode normalization, no such member).
    func test_a_route_for_to_as_bytes_is_the_route_for_the_id() {
        join(alice, "alice")
        join(bob, "caf\u{E9}")  // é precomposed
        join(carol, "b\"ob")
        let payload: RawJSON = ["k": 1]
        func check(_ sender: ConnectionID, _ target: PeerID, _ note: String, line: UInt = #line) {
            guard let seat = hub.seat(of: sender) else { return XCTFail("\(sender) is seated", line: line) }
            RelayParts.with(.candidate, to: target, payload: payload) { parts in
                XCTAssertEqual(hub.route(parts, from: sender, seat: seat), hub.route(.candidate, to: target, from: sender), note, line: line)
            }
        }
        check(alice, "caf\u{E9}", "the same bytes")
        check(alice, "cafe\u{301}", "é decomposed: equal as an id, not as bytes")
        check(alice, "b\"ob", "an id to escape")
        check(bob, "alice", "plain both ways")
        check(alice, "alice", "the sender itself: peer_not_found")
        check(alice, "nobody", "no such member: peer_not_found")
        XCTAssertEqual(RelayParts.with(.candidate, to: "cafe\u{301}", payload: nil) { parts in
            hub.seat(of: alice).flatMap { hub.route(parts, from: alice, seat: $0) }
        }, .deliver(from: "alice", to: bob, plainIDs: true))
        // Ids of every length from 1 to 18 bytes (the comparison goes eight bytes at a time, then
        // byte by byte), each told from one that differs only in its first or its last byte.
        let room2 = RoomID("lengths")
        for length in 1...18 {
            let id = PeerID(String(repeating: "k", count: length))
            let near = [PeerID("j" + String(repeating: "k", count: length - 1)), PeerID(String(repeating: "k", count: length - 1) + "j")]
            let sender = ConnectionID(UInt64(500 + 3 * length))
            _ = join(sender, "sender", room: room2)
            _ = join(ConnectionID(UInt64(501 + 3 * length)), id, room: room2)
            _ = join(ConnectionID(UInt64(502 + 3 * length)), near[length % 2], room: room2)
            check(sender, id, "\(length) bytes")
            check(sender, near[length % 2], "\(length) bytes, one differing")
            check(sender, near[1 - length % 2], "\(length) bytes, not in the room")
            _ = disconnect(sender)
            _ = disconnect(ConnectionID(UInt64(501 + 3 * length)))
            _ = disconnect(ConnectionID(UInt64(502 + 3 * length)))
        }
        // Past `MemberList.indexedAbove` members the room finds ids by hash.
        var others: [ConnectionID] = []
        for index in 0..<12 {
            let connection = ConnectionID(UInt64(1_000 + index))
            others.append(connection)
            join(connection, PeerID("p\(index)"))
        }
        check(alice, "p11", "an indexed room")
        check(others[3], "caf\u{E9}", "an indexed room, from another member")
        check(others[3], "p3", "an indexed room, the sender itself")
    }

    func test_frames_from_a_connection_that_never_joined_are_ignored() {
        joinAll()
        XCTAssertEqual(send(fresh, .relay(.data, to: nil, payload: nil)), [])
        XCTAssertEqual(send(fresh, .ping(payload: nil)), [])
    }

    // MARK: - Ping

    func test_ping_is_answered_with_a_pong_echoing_the_payload() {
        joinAll()
        XCTAssertEqual(send(bob, .ping(payload: RawJSON(["n": 7, "t": "x"]))), [.send([bob], Frame(.pong, payload: ["n": 7, "t": "x"]))])
        XCTAssertEqual(send(bob, .ping(payload: nil)), [.send([bob], Frame(.pong))])
    }

    func test_a_pong_carries_the_ping_payload_as_it_was_sent() throws {
        joinAll()
        let ping = try ClientFrameDecoder.decode(Array(#"{"type":"ping","payload":{ "b":1.0, "a":2 }}"#.utf8))
        guard case .send([bob], let pong)? = send(bob, ping).first else { return XCTFail("expected a pong to bob") }
        XCTAssertEqual(String(decoding: pong.encoded(), as: UTF8.self), #"{"payload":{ "b":1.0, "a":2 },"type":"pong"}"#)
    }

    func test_a_pong_from_a_seat_found_first_is_the_pong_of_the_ping_through_handle() {
        joinAll()
        let payload = RawJSON(["n": 7])
        for sender in [alice, bob, carol] {
            guard let seat = hub.seat(of: sender) else { return XCTFail("\(sender) is seated") }
            guard let pong = hub.pong(payload, from: sender, seat: seat) else { return XCTFail("\(sender) gets a pong") }
            XCTAssertEqual(send(sender, .ping(payload: payload)), [.send([sender], pong)])
            XCTAssertEqual(hub.pong(nil, from: sender, seat: seat), Frame(.pong))
        }
        // A seat kept past its connection's leave answers nothing, as an unseated sender gets nothing.
        guard let stale = hub.seat(of: carol) else { return XCTFail("carol is seated") }
        _ = disconnect(carol)
        XCTAssertNil(hub.pong(payload, from: carol, seat: stale))
        XCTAssertEqual(send(carol, .ping(payload: payload)), [])
    }

    // MARK: - Takeover

    func test_same_peer_joining_again_replaces_the_old_connection_without_telling_the_room() throws {
        joinAll()
        let effects = join(fresh, "bob")
        XCTAssertEqual(effects.first, .close(bob, .replaced), "the old connection is closed as replaced (terminal)")
        XCTAssertTrue(CloseCode.replaced.isTerminal)
        XCTAssertEqual(frames(effects, to: fresh).map(\.type), ["welcome"])
        XCTAssertTrue(frames(effects, to: alice).isEmpty, "no peer-left/peer-joined for a takeover")
        XCTAssertTrue(frames(effects, to: carol).isEmpty)
        XCTAssertTrue(frames(effects, to: bob).isEmpty, "the replaced connection gets no welcome")
        let welcome = try XCTUnwrap(frames(effects, to: fresh).first)
        XCTAssertEqual(welcome.payload?["peers"]?.arrayValue?.compactMap { $0["peer_id"]?.stringValue }, ["alice", "carol"])
        XCTAssertEqual(hub.members(of: room), ["alice", "bob", "carol"], "bob keeps his place")
        XCTAssertEqual(hub.peerCount, 3)
        XCTAssertNil(hub.identity(of: bob))
        XCTAssertEqual(hub.identity(of: fresh)?.peer, "bob")
    }

    func test_late_disconnect_of_the_replaced_connection_does_not_remove_the_peer() {
        joinAll()
        join(fresh, "bob")
        XCTAssertEqual(disconnect(bob), [], "the room hears nothing")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob", "carol"])
        XCTAssertEqual(
            send(alice, .relay(.offer, to: "bob", payload: ["sdp": "v=0"])),
            [.send([fresh], Frame(.offer, from: "alice", to: "bob", payload: ["sdp": "v=0"]))],
            "frames for bob reach the new connection")
    }

    func test_frames_from_the_replaced_connection_are_ignored() {
        joinAll()
        join(fresh, "bob")
        XCTAssertEqual(send(bob, .relay(.data, to: nil, payload: ["stale": true])), [])
        XCTAssertEqual(send(bob, .chat(ChatSubmission(clientID: "c", text: "stale"))), [])
    }

    func test_broadcasts_after_a_takeover_reach_the_new_connection() {
        joinAll()
        join(fresh, "bob")
        XCTAssertEqual(
            send(alice, .relay(.data, to: nil, payload: nil)), [.send([fresh, carol], Frame(.data, from: "alice"))])
    }

    // MARK: - Typing

    func test_typing_is_broadcast_once_and_repeats_only_extend_it() {
        joinAll()
        let start = now
        XCTAssertEqual(send(alice, .typing(true)), [.send([bob, carol], typing("alice", true))])
        now = start + 4_000
        XCTAssertEqual(send(alice, .typing(true)), [], "a heartbeat is not news")
        now = start + 6_000
        XCTAssertEqual(tick(), [], "the repeat pushed the expiry to +10 s")
        now = start + 10_000
        XCTAssertEqual(tick(), [.send([bob, carol], typing("alice", false))])
    }

    func test_typing_expires_exactly_at_its_ttl() {
        joinAll()
        let start = now
        send(alice, .typing(true))
        now = start + 5_999
        XCTAssertEqual(tick(), [])
        now = start + 6_000
        XCTAssertEqual(tick(), [.send([bob, carol], typing("alice", false))])
        now += 60_000
        XCTAssertEqual(tick(), [], "expiry is announced once")
    }

    func test_typing_ttl_comes_from_the_settings() {
        hub = Hub(settings: HubSettings(typingTTLMs: 1_000))
        joinAll()
        let start = now
        send(bob, .typing(true))
        now = start + 1_000
        XCTAssertEqual(tick(), [.send([alice, carol], typing("bob", false))])
    }

    func test_typing_false_is_broadcast_and_repeated_false_is_silent() {
        joinAll()
        XCTAssertEqual(send(alice, .typing(false)), [], "not typing was already the state")
        send(alice, .typing(true))
        XCTAssertEqual(send(alice, .typing(false)), [.send([bob, carol], typing("alice", false))])
        XCTAssertEqual(send(alice, .typing(false)), [])
        now += 60_000
        XCTAssertEqual(tick(), [], "a cleared indicator does not expire again")
    }

    func test_sending_a_chat_clears_the_typing_indicator() {
        joinAll()
        send(alice, .typing(true))
        let chat = ChatSubmission(clientID: "c-1", text: "hello")
        XCTAssertEqual(send(alice, .chat(chat)), [
            .send([bob, carol], typing("alice", false)),
            .storeChat(connection: alice, room: room, peer: "alice", chat, timestamp: now),
        ])
        now += 60_000
        XCTAssertEqual(tick(), [])
    }

    func test_leaving_while_typing_clears_the_indicator_before_peer_left() {
        joinAll()
        send(bob, .typing(true))
        XCTAssertEqual(disconnect(bob), [
            .send([alice, carol], typing("bob", false)),
            .send([alice, carol], Frame(.peerLeft, from: "bob", payload: ["peer_id": "bob"])),
        ])
        now += 60_000
        XCTAssertEqual(tick(), [], "nothing is left to expire")
    }

    func test_a_joiner_is_told_who_is_typing() {
        join(alice, "alice")
        join(bob, "bob")
        send(alice, .typing(true))
        send(bob, .typing(true))
        now += 1_000
        let received = frames(join(carol, "carol"), to: carol)
        XCTAssertEqual(received.map(\.type), ["welcome", "typing", "typing"])
        XCTAssertEqual(Array(received.dropFirst()), [typing("alice", true), typing("bob", true)])
    }

    func test_a_joiner_is_not_told_about_an_indicator_past_its_ttl() {
        join(alice, "alice")
        send(alice, .typing(true))
        now += 6_000  // expired, though no tick has run yet
        XCTAssertEqual(frames(join(bob, "bob"), to: bob).map(\.type), ["welcome"])
    }

    func test_typing_alone_tells_nobody() {
        join(alice, "alice")
        XCTAssertEqual(send(alice, .typing(true)), [])
        now += 6_000
        XCTAssertEqual(tick(), [])
    }

    func test_typing_in_one_room_stays_in_that_room() {
        join(alice, "alice")
        join(bob, "bob")
        join(carol, "carol", room: "room-2")
        join(fresh, "dave", room: "room-2")
        XCTAssertEqual(send(carol, .typing(true)), [.send([fresh], typing("carol", true))])
        now += 6_000
        XCTAssertEqual(tick(), [.send([fresh], typing("carol", false))])
    }

    // MARK: - Chat submission

    private func assertChatRefused(
        _ effects: [HubEffect], clientID: String = "c-1", code: ErrorCode, file: StaticString = #filePath, line: UInt = #line
    ) {
        guard effects.count == 1, case .send(let targets, let frame) = effects[0] else {
            return XCTFail("expected one chat-ack, got \(effects)", file: file, line: line)
        }
        XCTAssertEqual(targets, [alice], "only the sender is answered", file: file, line: line)
        XCTAssertEqual(frame.type, "chat-ack", "the pending sendChat settles", file: file, line: line)
        XCTAssertEqual(frame.payload, ["client_id": .string(clientID)], file: file, line: line)
        XCTAssertEqual(frame.error?.code, code.rawValue, file: file, line: line)
        XCTAssertEqual(storeEffects(effects), [], "nothing is stored", file: file, line: line)
    }

    func test_blank_chat_is_refused_with_440_and_not_stored() {
        joinAll()
        for text in ["", " ", "\n\t  ", "\u{00A0}\u{2003}"] {
            assertChatRefused(send(alice, .chat(ChatSubmission(clientID: "c-1", text: text))), code: .chatEmpty)
        }
    }

    /// Blank means every Character is whitespace (`Character.isWhitespace`), also where a text's
    /// first byte is ASCII and what follows joins it into one Character.
    func test_a_chat_is_blank_exactly_when_every_character_is_whitespace() {
        joinAll()
        let texts = ["a", "a ", " a", "\u{1C}", "\u{1F}", "\u{7F}", "\u{0}", "\u{85}", "\u{2028}", " \u{301}", "\t\u{200D}",
                     "\r\n", "\n\u{301}x", "a\u{301}", "\u{3000}", "\u{FEFF}", "\u{200B}", "\u{0600}a", " \u{1F600}",
                     "\u{B}\u{C}", "\u{1F1FA}\u{1F1F8}", "é", "."]
        // Every ASCII scalar first, alone and with a combining mark after it.
        let ascii = (0..<128).flatMap { code -> [String] in
            let scalar = String(Unicode.Scalar(UInt8(code)))
            return [scalar, scalar + "\u{301}", scalar + "x"]
        }
        for (index, text) in (texts + ascii).enumerated() {
            let chat = ChatSubmission(clientID: "c-\(index)", text: text)
            let effects = send(alice, .chat(chat))
            if text.allSatisfy(\.isWhitespace) {
                assertChatRefused(effects, clientID: chat.clientID, code: .chatEmpty)
            } else {
                XCTAssertEqual(storeEffects(effects), [.storeChat(connection: alice, room: room, peer: "alice", chat, timestamp: now)],
                               "\(text.unicodeScalars.map(\.value))")
            }
        }
    }

    // MARK: - Chat operations

    func test_chat_operations_are_stored_with_the_senders_moderator_claim() {
        _ = hub.handle(.join(alice, PeerIdentity(peer: "alice", room: room, moderator: true), ChatResume()), now: now)
        join(bob, "bob")
        let delete = ChatOperation(clientID: "d-1", target: 3, action: .delete)
        XCTAssertEqual(send(alice, .chatOperation(delete)),
                       [.storeChatOperation(connection: alice, room: room, peer: "alice", delete, moderator: true, timestamp: now)])
        let react = ChatOperation(clientID: "r-1", target: 3, action: .react(key: "👍", remove: true))
        XCTAssertEqual(send(bob, .chatOperation(react)),
                       [.storeChatOperation(connection: bob, room: room, peer: "bob", react, moderator: false, timestamp: now)])
        XCTAssertEqual(hub.handle(.message(ConnectionID(99), .chatOperation(delete)), now: now), [], "an unseated sender gets nothing")
    }

    func test_a_chat_edit_is_checked_like_a_chat_and_a_reaction_key_by_its_rules() {
        hub = Hub(settings: HubSettings(chatMaxTextBytes: 4, chatOperations: ChatOperationLimits(reactionKeyMaxBytes: 4)))
        join(alice, "alice")
        assertChatRefused(send(alice, .chatOperation(ChatOperation(clientID: "c-1", target: 1, action: .edit(text: " ", meta: nil)))),
                          code: .chatEmpty)
        assertChatRefused(send(alice, .chatOperation(ChatOperation(clientID: "c-1", target: 1, action: .edit(text: "12345", meta: nil)))),
                          code: .chatTooLong)
        assertChatRefused(send(alice, .chatOperation(ChatOperation(clientID: "c-1", target: 1, action: .edit(text: "ok", meta: .int(1))))),
                          code: .chatMetaInvalid)
        assertChatRefused(send(alice, .chatOperation(ChatOperation(clientID: "c-1", target: 1, action: .react(key: "12345", remove: false)))),
                          code: .chatReactionInvalid)
        assertChatRefused(send(alice, .chatOperation(ChatOperation(clientID: "c-1", target: 1, action: .react(key: "a b", remove: false)))),
                          code: .chatReactionInvalid)
    }

    func test_a_stored_operation_acks_its_sender_and_reaches_the_others_as_its_frame() {
        join(alice, "alice")
        join(bob, "bob")
        let edit = ChatMessage(room: room, seq: 5, from: "alice", clientID: "e-1", text: "new", meta: nil, timestamp: now,
                               kind: .edit, target: 2)
        let effects = hub.handle(.chatStored(.stored(edit, connection: alice, duplicate: false)), now: now)
        XCTAssertEqual(frames(effects, to: alice), [Frame.chatAck(clientID: "e-1", seq: 5, timestamp: now)])
        XCTAssertEqual(frames(effects, to: bob), [Frame(.chatEdit, from: "alice", payload: [
            "client_id": "e-1", "seq": 5, "ts": .int(now), "target": 2, "text": "new", "meta": .null,
        ])])
        let refused = hub.handle(.chatStored(.failed(room: room, peer: "alice", clientID: "e-2", connection: alice,
                                                     WireError(.chatForbidden, "only the author may edit a message"))), now: now)
        XCTAssertEqual(frames(refused, to: alice).map(\.error?.code), [444])
        XCTAssertEqual(frames(refused, to: bob), [])
    }

    func test_a_tombstone_and_a_reaction_are_written_as_the_contract_says() {
        let tombstone = ChatMessage(room: room, seq: 2, from: "bob", clientID: "m-2", text: "", meta: nil, timestamp: 7,
                                    replyTo: 1, deleted: true)
        XCTAssertEqual(tombstone.frame, Frame(.chat, from: "bob", payload: [
            "client_id": "m-2", "seq": 2, "ts": 7, "text": "", "meta": .null, "reply_to": 1, "deleted": true,
        ]))
        let unreact = ChatMessage(room: room, seq: 9, from: "bob", clientID: "r-1", text: "", meta: nil, timestamp: 7,
                                  kind: .unreact, target: 2, key: "👍")
        XCTAssertEqual(unreact.frame, Frame(.chatReact, from: "bob", payload: [
            "client_id": "r-1", "seq": 9, "ts": 7, "target": 2, "key": "👍", "remove": .bool(true),
        ]))
        let delete = ChatMessage(room: room, seq: 10, from: "mod", clientID: "d-1", text: "", meta: nil, timestamp: 7,
                                 kind: .delete, target: 2)
        XCTAssertEqual(delete.frame, Frame(.chatDelete, from: "mod", payload: ["client_id": "d-1", "seq": 10, "ts": 7, "target": 2]))
    }

    func test_chat_longer_than_the_limit_is_refused_with_441() {
        hub = Hub(settings: HubSettings(chatMaxTextBytes: 10))
        joinAll()
        XCTAssertEqual(storeEffects(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "0123456789")))).count, 1)
        assertChatRefused(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "01234567890"))), code: .chatTooLong)
        XCTAssertEqual(storeEffects(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "ééééé")))).count, 1)
        // 6 characters but 12 bytes: the limit is in bytes.
        assertChatRefused(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "éééééé"))), code: .chatTooLong)
    }

    func test_chat_meta_must_be_an_object() {
        joinAll()
        for meta: JSONValue in [[1, 2], "reply", 3, true] {
            assertChatRefused(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "hi", meta: meta))), code: .chatMetaInvalid)
        }
    }

    func test_chat_meta_must_fit_the_size_limit() {
        hub = Hub(settings: HubSettings(chatMaxMetaBytes: 20))
        joinAll()
        let fits: JSONValue = ["k": .string(String(repeating: "x", count: 12))]  // {"k":"xxxxxxxxxxxx"} = 20 bytes
        let tooBig: JSONValue = ["k": .string(String(repeating: "x", count: 13))]
        XCTAssertEqual(storeEffects(send(alice, .chat(ChatSubmission(clientID: "c-1", text: "hi", meta: fits)))).count, 1)
        assertChatRefused(send(alice, .chat(ChatSubmission(clientID: "c-2", text: "hi", meta: tooBig))), clientID: "c-2", code: .chatMetaInvalid)
    }

    func test_chat_from_the_wire_with_null_meta_is_stored_not_refused() throws {
        joinAll()
        let wire = #"{"type":"chat","payload":{"client_id":"c-1","text":"hello","meta":null}}"#
        let decoded = try ClientFrameDecoder.decode(Array(wire.utf8))
        XCTAssertEqual(send(alice, decoded), [
            .storeChat(connection: alice, room: room, peer: "alice", ChatSubmission(clientID: "c-1", text: "hello"), timestamp: now),
        ])
    }

    func test_valid_chat_is_handed_to_the_store_with_server_time_and_not_delivered_yet() {
        joinAll()
        now += 42
        let chat = ChatSubmission(clientID: "c-1", text: "hello", meta: ["reply_to": 3])
        XCTAssertEqual(
            send(alice, .chat(chat)), [.storeChat(connection: alice, room: room, peer: "alice", chat, timestamp: now)],
            "no ack and no broadcast before the row is committed")
    }

    /// `admitChat(_:from:now:)`, which the service uses for every chat, leads to what `handle` returns
    /// for the same chat: `.store` for the store request alone, the effects otherwise.
    func test_admitting_a_chat_answers_store_or_the_effects_handle_returns() {
        joinAll()
        let chat = ChatSubmission(clientID: "c-1", text: "hello")
        func assertSame(_ connection: ConnectionID, _ submission: ChatSubmission, _ expected: ChatAdmission,
                        file: StaticString = #filePath, line: UInt = #line) {
            var viaHandle = hub
            let effects = viaHandle.handle(.message(connection, .chat(submission)), now: now)
            let admission = hub.admitChat(submission, from: connection, now: now)
            XCTAssertEqual(admission, expected, file: file, line: line)
            switch admission {
            case .store(let room, let peer):
                XCTAssertEqual(effects, [.storeChat(connection: connection, room: room, peer: peer, submission, timestamp: now)],
                               file: file, line: line)
            case .effects(let admitted):
                XCTAssertEqual(admitted, effects, file: file, line: line)
            }
        }
        assertSame(alice, chat, .store(room: room, peer: "alice"))
        let blank = ChatSubmission(clientID: "c-2", text: " ")
        assertSame(alice, blank, .effects([.send([alice], Frame(.chatAck, payload: ["client_id": "c-2"],
                                                                    error: WireError(.chatEmpty, "chat text is empty")))]))
        assertSame(ConnectionID(99), chat, .effects([]))
        send(alice, .typing(true))
        assertSame(alice, chat, .effects([
            .send([bob, carol], typing("alice", false)),
            .storeChat(connection: alice, room: room, peer: "alice", chat, timestamp: now),
        ]))
        XCTAssertEqual(hub.admitChat(chat, from: alice, now: now), .store(room: room, peer: "alice"), "typing ended by the chat")
    }

    // MARK: - Chat commit

    func test_stored_chat_is_acked_to_the_sender_and_delivered_to_the_others() {
        joinAll()
        let stored = message(seq: 13, text: "hello", meta: ["reply_to": 12])
        XCTAssertEqual(hub.handle(.chatStored(.stored(stored, connection: alice, duplicate: false)), now: now), [
            .send([alice], ack(stored)),
            .send([bob, carol], Frame(.chat, from: "alice", payload: [
                "seq": 13, "client_id": "c-1", "text": "hello", "meta": ["reply_to": 12], "ts": .int(stored.timestamp),
            ])),
        ])
    }

    func test_stored_chat_without_meta_carries_null_meta() {
        joinAll()
        let stored = message(seq: 1)
        let effects = hub.handle(.chatStored(.stored(stored, connection: alice, duplicate: false)), now: now)
        XCTAssertEqual(frames(effects, to: bob).first?.payload?["meta"], .null)
    }

    func test_retried_chat_gets_original_ack_without_broadcast() {
        joinAll()
        let original = message(seq: 13, at: now - 5_000)
        now += 10_000
        XCTAssertEqual(
            hub.handle(.chatStored(.stored(original, connection: alice, duplicate: true)), now: now), [.send([alice], ack(original))],
            "same seq and ts as the first time; the room already has it")
    }

    func test_ack_follows_the_sender_to_a_new_connection_after_a_reconnect() {
        joinAll()
        send(alice, .chat(ChatSubmission(clientID: "c-1", text: "hello")))
        disconnect(alice)
        join(fresh, "alice")
        let stored = message(seq: 13)
        XCTAssertEqual(hub.handle(.chatStored(.stored(stored, connection: alice, duplicate: false)), now: now), [
            .send([fresh], ack(stored)),
            .send([bob, carol], stored.frame),
        ])
    }

    func test_ack_follows_the_sender_to_a_new_connection_after_a_takeover() {
        joinAll()
        join(fresh, "alice")
        let stored = message(seq: 13)
        XCTAssertEqual(
            hub.handle(.chatStored(.stored(stored, connection: alice, duplicate: true)), now: now), [.send([fresh], ack(stored))])
    }

    func test_chat_from_a_sender_who_has_gone_still_reaches_the_room() {
        joinAll()
        disconnect(alice)
        let stored = message(seq: 13)
        XCTAssertEqual(
            hub.handle(.chatStored(.stored(stored, connection: alice, duplicate: false)), now: now), [.send([bob, carol], stored.frame)])
    }

    func test_store_failure_is_acked_with_the_error_and_not_broadcast() {
        joinAll()
        let error = WireError(.unavailable, "chat store unavailable")
        let outcome = ChatStoreOutcome.failed(room: room, peer: "alice", clientID: "c-1", connection: alice, error)
        XCTAssertEqual(
            hub.handle(.chatStored(outcome), now: now), [.send([alice], Frame(.chatAck, payload: ["client_id": "c-1"], error: error))])
    }

    func test_store_failure_ack_follows_the_sender_to_a_new_connection() {
        joinAll()
        disconnect(alice)
        join(fresh, "alice")
        let error = WireError(.unavailable, "chat store unavailable")
        let outcome = ChatStoreOutcome.failed(room: room, peer: "alice", clientID: "c-1", connection: alice, error)
        XCTAssertEqual(
            hub.handle(.chatStored(outcome), now: now), [.send([fresh], Frame(.chatAck, payload: ["client_id": "c-1"], error: error))])
    }

    /// `route(_:)`, which the service uses for every stored chat, in each case of the section
    /// above (whose `handle(.chatStored)` effects are `route(_:)`'s, through `StoredChatRoute.effects`).
    func test_route_of_a_stored_chat_names_the_ack_target_and_the_others() {
        joinAll()
        let stored = message(seq: 13, text: "hello")
        let error = WireError(.unavailable, "chat store unavailable")
        func assertSame(_ outcome: ChatStoreOutcome, _ expected: StoredChatRoute?, file: StaticString = #filePath, line: UInt = #line) {
            XCTAssertEqual(hub.route(outcome), expected, file: file, line: line)
        }
        assertSame(.stored(stored, connection: alice, duplicate: false), .deliver(stored, ack: alice, others: [bob, carol]))
        assertSame(.stored(stored, connection: alice, duplicate: true), .deliver(stored, ack: alice, others: []))
        assertSame(.failed(room: room, peer: "alice", clientID: "c-1", connection: alice, error),
                   .answer(Frame(.chatAck, payload: ["client_id": "c-1"], error: error), to: alice))
        disconnect(alice)
        assertSame(.stored(stored, connection: alice, duplicate: false), .deliver(stored, ack: nil, others: [bob, carol]))
        assertSame(.stored(stored, connection: alice, duplicate: true), nil)
        assertSame(.failed(room: room, peer: "alice", clientID: "c-1", connection: alice, error), nil)
        join(fresh, "alice")
        assertSame(.stored(stored, connection: alice, duplicate: false), .deliver(stored, ack: fresh, others: [bob, carol]))
        XCTAssertEqual(StoredChatRoute.deliver(stored, ack: fresh, others: [bob]).effects,
                       [.send([fresh], ack(stored)), .send([bob], stored.frame)], "the ack first")
        XCTAssertEqual(StoredChatRoute.deliver(stored, ack: nil, others: []).effects, [], "no send without targets")
    }

    // MARK: - Read markers

    func test_read_marker_is_handed_to_the_store() {
        joinAll()
        XCTAssertEqual(send(alice, .read(seq: 5)), [.storeRead(room: room, peer: "alice", seq: 5)])
    }

    func test_moved_read_marker_is_shown_to_the_others() {
        joinAll()
        XCTAssertEqual(
            hub.handle(.readStored(room: room, peer: "alice", seq: 5, moved: true), now: now),
            [.send([bob, carol], Frame(.read, from: "alice", payload: ["seq": 5]))])
    }

    func test_read_marker_that_did_not_move_is_not_broadcast() {
        joinAll()
        XCTAssertEqual(hub.handle(.readStored(room: room, peer: "alice", seq: 3, moved: false), now: now), [])
    }

    func test_read_marker_for_an_empty_room_goes_nowhere() {
        join(alice, "alice")
        XCTAssertEqual(hub.handle(.readStored(room: room, peer: "alice", seq: 5, moved: true), now: now), [])
        disconnect(alice)
        XCTAssertEqual(hub.handle(.readStored(room: room, peer: "alice", seq: 6, moved: true), now: now), [])
    }

    // MARK: - Stats

    func test_stats_are_stored_with_the_call_id_and_server_time() {
        join(alice, "alice", call: "call-9")
        now += 7
        let sample = StatsSample(rttMs: 42, jitterMs: 3, packetLoss: 0.01, bitrateKbps: 1_200)
        XCTAssertEqual(
            send(alice, .stats(sample)), [.storeStats(room: room, call: "call-9", peer: "alice", sample, timestamp: now)],
            "stats are not relayed to anyone")
    }

    func test_stats_from_a_room_without_a_call_are_stored_without_one() {
        join(alice, "alice", call: nil)
        let sample = StatsSample(rttMs: 1)
        XCTAssertEqual(send(alice, .stats(sample)), [.storeStats(room: room, call: nil, peer: "alice", sample, timestamp: now)])
    }
}

// MARK: - Seats, drain and the admin inputs

extension HubTests {
    private func identity(_ peer: PeerID, room: RoomID = "room-1", maxPeers: Int? = nil, token: String? = nil,
                          expiresIn: Millis = 600_000) -> PeerIdentity {
        PeerIdentity(peer: peer, room: room, maxPeers: maxPeers,
                     credential: TokenCredential(id: token ?? "jti:\(peer.rawValue)", expiresAt: now + expiresIn))
    }

    /// Admission then join, as the service does for a WebSocket upgrade.
    @discardableResult
    private func seat(_ connection: ConnectionID, _ identity: PeerIdentity) -> JoinRefusal? {
        if let refusal = hub.admit(identity, now: now) { return refusal }
        _ = hub.handle(.join(connection, identity, ChatResume()), now: now)
        return nil
    }

    private func closes(_ effects: [HubEffect]) -> [ConnectionID: CloseCode] {
        var result: [ConnectionID: CloseCode] = [:]
        for case .close(let connection, let code) in effects { result[connection] = code }
        return result
    }

    func test_a_room_at_its_limit_refuses_a_new_peer_but_not_a_takeover_of_a_seated_one() {
        hub = Hub(settings: HubSettings(maxPeersPerRoom: 2))
        XCTAssertNil(seat(alice, identity("alice")))
        XCTAssertNil(seat(bob, identity("bob")))
        XCTAssertEqual(hub.admit(identity("carol"), now: now), .roomFull(limit: 2))
        XCTAssertNil(seat(fresh, identity("bob")), "bob again takes his own seat")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob"])
        XCTAssertNil(hub.admit(identity("carol", room: "room-2"), now: now), "the limit is per room")
        disconnect(alice)
        XCTAssertNil(seat(carol, identity("carol")), "a seat freed by a leave can be taken")
    }

    func test_the_joiners_max_peers_overrides_the_server_default_and_zero_is_unlimited() {
        hub = Hub(settings: HubSettings(maxPeersPerRoom: 2))
        XCTAssertNil(seat(alice, identity("alice", maxPeers: 0)))
        XCTAssertNil(seat(bob, identity("bob", maxPeers: 0)))
        XCTAssertNil(seat(carol, identity("carol", maxPeers: 0)), "0 = unlimited, whatever the default")
        XCTAssertEqual(hub.admit(identity("dave", maxPeers: 3), now: now), .roomFull(limit: 3))

        hub = Hub()
        XCTAssertNil(seat(alice, identity("alice", maxPeers: 1)))
        XCTAssertEqual(hub.admit(identity("bob", maxPeers: 1), now: now), .roomFull(limit: 1), "a one-seat room stays one seat")
        XCTAssertNil(seat(bob, identity("bob")), "without a claim the default (unlimited) applies")
    }

    func test_admitted_joins_in_flight_hold_their_seat_until_they_join_abandon_or_time_out() {
        hub = Hub(settings: HubSettings(maxPeersPerRoom: 2, seatHoldMs: 5_000))
        XCTAssertNil(hub.admit(identity("alice"), now: now))
        XCTAssertNil(hub.admit(identity("bob"), now: now))
        XCTAssertEqual(hub.admit(identity("carol"), now: now), .roomFull(limit: 2), "two joins still loading hold both seats")
        XCTAssertNil(hub.admit(identity("bob"), now: now), "a second attempt of the same peer shares its hold")

        _ = hub.handle(.abandonSeat(room, "bob"), now: now)
        XCTAssertNil(hub.admit(identity("carol"), now: now), "bob's socket closed before joining: his seat went to carol")
        XCTAssertEqual(hub.admit(identity("dave"), now: now), .roomFull(limit: 2))

        _ = hub.handle(.join(alice, identity("alice"), ChatResume()), now: now)
        now += 5_001
        _ = tick()
        XCTAssertNil(hub.admit(identity("dave"), now: now), "carol's upgrade never completed: the hold expired")
        XCTAssertEqual(hub.admit(identity("erin"), now: now), .roomFull(limit: 2), "alice's seat is a member now, not a hold")
    }

    func test_draining_refuses_new_seats_while_seated_peers_keep_talking() {
        XCTAssertNil(seat(alice, identity("alice")))
        XCTAssertNil(seat(bob, identity("bob")))
        _ = hub.handle(.setDraining(true), now: now)
        XCTAssertTrue(hub.isDraining)
        XCTAssertEqual(hub.admit(identity("carol"), now: now), .draining)
        XCTAssertEqual(hub.admit(identity("carol", room: "room-2"), now: now), .draining)
        XCTAssertNil(hub.admit(identity("bob"), now: now), "a seated peer reconnecting keeps its seat")
        let relayed = send(alice, .relay(.data, to: nil, payload: ["x": 1]))
        XCTAssertEqual(frames(relayed, to: bob).map(\.type), ["data"], "rooms go on while draining")
        _ = hub.handle(.setDraining(false), now: now)
        XCTAssertNil(hub.admit(identity("carol"), now: now))
    }

    func test_a_kicked_peer_leaves_at_once_and_its_token_is_refused_until_it_expires() {
        XCTAssertNil(seat(alice, identity("alice")))
        XCTAssertNil(seat(bob, identity("bob", token: "jti:bob-1", expiresIn: 60_000)))
        let effects = hub.handle(.kick(room, "bob"), now: now)
        XCTAssertEqual(closes(effects), [bob: .kicked])
        XCTAssertEqual(frames(effects, to: alice).map(\.type), ["peer-left"])
        XCTAssertEqual(hub.members(of: room), ["alice"])
        XCTAssertEqual(disconnect(bob), [], "the socket's own disconnect afterwards changes nothing")

        XCTAssertEqual(hub.admit(identity("bob", token: "jti:bob-1", expiresIn: 60_000), now: now), .kicked)
        XCTAssertNil(hub.admit(identity("bob", token: "jti:bob-2"), now: now), "a new token for the same peer is admitted")
        now += 60_001
        _ = tick()
        XCTAssertNil(hub.admit(identity("bob", token: "jti:bob-1", expiresIn: 60_000), now: now),
                     "after its expiry the ban is forgotten (the verifier refuses the expired token anyway)")
        XCTAssertEqual(hub.handle(.kick(room, "nobody"), now: now), [])
    }

    func test_ending_a_room_closes_everyone_with_4404_and_refuses_their_tokens() {
        XCTAssertNil(seat(alice, identity("alice")))
        XCTAssertNil(seat(bob, identity("bob")))
        XCTAssertNil(seat(carol, identity("carol", room: "room-2")))
        let effects = hub.handle(.endRoom(room), now: now)
        XCTAssertEqual(closes(effects), [alice: .roomClosed, bob: .roomClosed])
        XCTAssertTrue(frames(effects, to: alice).isEmpty, "no peer-left storm to peers that are being closed")
        XCTAssertEqual(hub.members(of: room), [])
        XCTAssertEqual(hub.roomCount, 1)
        XCTAssertEqual(hub.admit(identity("alice"), now: now), .kicked)
        XCTAssertEqual(hub.members(of: "room-2"), ["carol"], "other rooms are untouched")
    }

    func test_server_data_reaches_the_room_or_one_peer_from_the_reserved_server_id() {
        joinAll()
        let all = hub.handle(.serverData(room, to: nil, payload: ["notice": "maintenance"]), now: now)
        let frame = Frame(.data, from: "_server", payload: ["notice": "maintenance"])
        XCTAssertEqual(all, [.send([alice, bob, carol], frame)])
        let one = hub.handle(.serverData(room, to: "bob", payload: ["n": 1]), now: now)
        XCTAssertEqual(one, [.send([bob], Frame(.data, from: "_server", to: "bob", payload: ["n": 1]))])
        XCTAssertEqual(hub.handle(.serverData(room, to: "nobody", payload: [:]), now: now), [])
        XCTAssertEqual(hub.admit(identity(Hub.serverPeerID), now: now), .reservedPeerID, "no token may speak as the server")
    }

    func test_a_token_without_jti_is_banned_by_its_peer_room_iat_and_exp() {
        func token(_ peer: PeerID, room: RoomID = "room-1", iat: Int64 = 100, exp: Int64 = 1_000) -> PeerIdentity {
            PeerIdentity(peer: peer, room: room,
                         credential: TokenCredential(issuedAt: iat, expires: exp, expiresAt: now + 60_000))
        }
        XCTAssertNil(seat(alice, token("alice")))
        XCTAssertNil(seat(bob, token("bob")))
        _ = hub.handle(.kick(room, "bob"), now: now)
        XCTAssertEqual(hub.admit(token("bob"), now: now), .kicked, "the same token again")
        XCTAssertNil(hub.admit(token("bob", iat: 101), now: now), "another token of the same peer")
        XCTAssertNil(hub.admit(token("bob", room: "room-2"), now: now), "the same times for another room")
        XCTAssertNil(hub.admit(token("carol"), now: now), "the same times for another peer")
    }

    func test_a_ban_made_by_one_hub_and_imposed_on_another_refuses_the_same_token_there_only() {
        // What a store carries between nodes: `Hub.ban(of:)` on the kicking node, `impose` elsewhere.
        let withID = identity("bob", token: "jti:bob-1", expiresIn: 60_000)
        let withoutID = PeerIdentity(peer: "b:o", room: "r:1", credential: TokenCredential(issuedAt: 100, expires: 1_000, expiresAt: now + 60_000))
        let bans = [withID, withoutID].compactMap(Hub.ban(of:))
        XCTAssertEqual(bans.map(\.key), ["jti:jti:bob-1", "iat:100:1000:3:r:1b:o"])
        XCTAssertEqual(bans.map(\.expiresAt), [now + 60_000, now + 60_000])
        XCTAssertNil(Hub.ban(of: PeerIdentity(peer: "x", room: "r")), "a token the hub cannot name")

        var other = Hub()
        other.impose(bans + [TokenBan(key: "nonsense", expiresAt: now + 60_000), TokenBan(key: "jti:old", expiresAt: now)], now: now)
        XCTAssertEqual(other.admit(withID, now: now), .kicked)
        XCTAssertEqual(other.admit(withoutID, now: now), .kicked)
        XCTAssertNil(other.admit(identity("bob", token: "jti:bob-2"), now: now), "another token of the same peer")
        XCTAssertNil(other.admit(PeerIdentity(peer: "b", room: "r:1", credential: TokenCredential(issuedAt: 100, expires: 1_000, expiresAt: now + 60_000)), now: now),
                     "the same times for another peer")
        XCTAssertNil(other.admit(identity("old", token: "jti:old"), now: now), "an expired ban is not imposed")
        now += 60_001
        XCTAssertNil(other.admit(withID, now: now), "imposed bans expire as kicks here do")
    }

    func test_a_large_room_keeps_join_order_lookups_and_takeovers() {
        // More members than a room scans for a peer id: lookups go through its index, which must
        // follow every leave (positions shift) and takeover.
        let count = 30
        let peers = (0..<count).map { PeerID("p\($0)") }
        for (index, peer) in peers.enumerated() { join(ConnectionID(UInt64(100 + index)), peer) }
        XCTAssertEqual(hub.members(of: room), peers)
        for index in stride(from: 0, to: count, by: 3) { disconnect(ConnectionID(UInt64(100 + index))) }
        let remaining = peers.enumerated().filter { $0.offset % 3 != 0 }
        XCTAssertEqual(hub.members(of: room), remaining.map(\.element))
        for (index, peer) in remaining {
            let relayed = send(ConnectionID(100), .relay(.data, to: peer, payload: ["n": 1]))
            XCTAssertTrue(relayed.isEmpty, "p0 left, so its connection is no longer seated")
            let from = ConnectionID(UInt64(100 + remaining[0].offset))
            guard peer != remaining[0].element else { continue }
            XCTAssertEqual(frames(send(from, .relay(.data, to: peer, payload: ["n": 1])), to: ConnectionID(UInt64(100 + index))).count, 1,
                           "\(peer) is found at its new position")
        }
        // A takeover keeps the peer's place and moves its frames to the new connection.
        join(ConnectionID(500), "p10")
        XCTAssertEqual(hub.members(of: room), remaining.map(\.element))
        let from = ConnectionID(UInt64(100 + remaining[0].offset))
        XCTAssertEqual(frames(send(from, .relay(.data, to: "p10", payload: nil)), to: ConnectionID(500)).count, 1)
        let broadcast = send(from, .relay(.data, to: nil, payload: nil))
        guard case .send(let targets, _)? = broadcast.first else { return XCTFail("no broadcast") }
        XCTAssertEqual(targets.count, remaining.count - 1)
        XCTAssertTrue(targets.contains(ConnectionID(500)) && !targets.contains(ConnectionID(110)))
        // Shrinking back below the index threshold still finds everyone.
        for (index, _) in remaining.dropFirst(4) where index != 10 { disconnect(ConnectionID(UInt64(100 + index))) }
        disconnect(ConnectionID(500))
        XCTAssertEqual(hub.members(of: room), remaining.prefix(4).map(\.element))
        for (index, peer) in remaining.prefix(4).dropFirst() {
            XCTAssertEqual(frames(send(from, .relay(.data, to: peer, payload: nil)), to: ConnectionID(UInt64(100 + index))).count, 1)
        }
    }
}

// MARK: - Reconnect grace

extension HubTests {
    private func lose(_ connection: ConnectionID) -> [HubEffect] { hub.handle(.connectionLost(connection), now: now) }

    private func peerFrame(_ type: FrameType, _ peer: PeerID) -> Frame {
        Frame(type, from: peer.rawValue, payload: ["peer_id": .string(peer.rawValue)])
    }

    /// The grace timers `effects` arm, with when they are due.
    private func timers(_ effects: [HubEffect]) -> [(GraceTimer, Millis)] {
        effects.compactMap { if case .armGrace(let timer, let at) = $0 { return (timer, at) } else { return nil } }
    }

    func test_a_lost_connection_keeps_its_seat_and_the_room_sees_peer_reconnecting() throws {
        hub = Hub(settings: HubSettings(reconnectGraceMs: 15_000))
        joinAll()
        let effects = lose(bob)
        XCTAssertEqual(effects.first, .send([alice, carol], peerFrame(.peerReconnecting, "bob")))
        let (timer, due) = try XCTUnwrap(timers(effects).first)
        XCTAssertEqual(effects.count, 2)
        XCTAssertEqual(due, now + 15_000)
        XCTAssertEqual(timer.peer, "bob")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob", "carol"], "the seat is still there")
        XCTAssertFalse(hub.isSeated(bob), "its connection is gone")
        XCTAssertEqual(hub.seat(of: "bob", in: room)?.reconnecting, true)
        // Broadcasts skip the seat in grace: nothing is sent to a gone socket.
        XCTAssertEqual(send(alice, .relay(.data, to: nil, payload: nil)).first.flatMap {
            if case .send(let targets, _) = $0 { return targets } else { return nil }
        }, [carol])
    }

    func test_a_reconnect_within_the_grace_resumes_the_seat_with_peer_resumed() throws {
        joinAll()
        let timer = try XCTUnwrap(timers(lose(bob)).first?.0)
        now += 5_000
        let effects = join(fresh, "bob")
        XCTAssertEqual(frames(effects, to: fresh).first?.type, "welcome")
        XCTAssertEqual(frames(effects, to: alice), [peerFrame(.peerResumed, "bob")])
        XCTAssertEqual(frames(effects, to: carol), [peerFrame(.peerResumed, "bob")])
        XCTAssertEqual(closes(effects), [:], "the gone socket is not closed again")
        XCTAssertEqual(hub.seat(of: "bob", in: room)?.reconnecting, false)
        XCTAssertTrue(hub.isSeated(fresh))
        // The old timer fires later and finds its arming no longer current.
        now += 20_000
        XCTAssertEqual(hub.handle(.graceExpired(timer), now: now), [])
        XCTAssertEqual(hub.members(of: room), ["alice", "bob", "carol"])
        XCTAssertEqual(frames(send(alice, .relay(.data, to: "bob", payload: nil)), to: fresh).count, 1, "relays reach the new socket")
    }

    func test_the_grace_expiring_ends_the_seat_with_peer_left() throws {
        joinAll()
        let timer = try XCTUnwrap(timers(lose(bob)).first?.0)
        now += 15_000
        XCTAssertEqual(hub.handle(.graceExpired(timer), now: now), [.send([alice, carol], peerFrame(.peerLeft, "bob"))])
        XCTAssertEqual(hub.members(of: room), ["alice", "carol"])
        XCTAssertNil(hub.seat(of: "bob", in: room))
        XCTAssertEqual(hub.handle(.graceExpired(timer), now: now), [], "a timer fires once")
        // A later join of bob is a new seat again.
        XCTAssertEqual(frames(join(fresh, "bob"), to: alice).map(\.type), ["peer-joined"])
    }

    func test_only_the_current_arming_ends_a_seat_lost_twice() throws {
        joinAll()
        let first = try XCTUnwrap(timers(lose(bob)).first?.0)
        join(fresh, "bob")
        let second = try XCTUnwrap(timers(lose(fresh)).first?.0)
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(hub.handle(.graceExpired(first), now: now), [], "the first loss's timer is stale")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob", "carol"])
        XCTAssertEqual(frames(hub.handle(.graceExpired(second), now: now), to: alice), [peerFrame(.peerLeft, "bob")])
    }

    func test_a_clean_disconnect_or_a_leave_frame_ends_the_seat_at_once() {
        joinAll()
        XCTAssertEqual(disconnect(bob), [.send([alice, carol], peerFrame(.peerLeft, "bob"))], "client close 1000 / 1001")
        XCTAssertEqual(send(carol, .leave), [.send([alice], peerFrame(.peerLeft, "carol"))], "a leave frame")
        XCTAssertEqual(hub.members(of: room), ["alice"])
        XCTAssertFalse(hub.isSeated(carol))
        XCTAssertEqual(disconnect(carol), [], "the socket closing after its leave changes nothing")
        XCTAssertEqual(lose(carol), [])
    }

    func test_terminal_closes_end_the_seat_at_once_even_during_the_grace() {
        hub = Hub()
        seat(alice, identity("alice"))
        seat(bob, identity("bob"))
        seat(carol, identity("carol"))
        _ = lose(bob)
        // A kick of a seat in its grace: no socket to close, the seat ends, the token is refused.
        let kicked = hub.handle(.kick(room, "bob"), now: now)
        XCTAssertEqual(kicked, [.send([alice, carol], peerFrame(.peerLeft, "bob"))])
        XCTAssertEqual(hub.admit(identity("bob"), now: now), .kicked)
        // A takeover of a live seat is still `replaced`, not a resume.
        let takeover = join(fresh, "carol")
        XCTAssertEqual(closes(takeover), [carol: .replaced])
        XCTAssertFalse(frames(takeover, to: alice).contains { $0.type == "peer-resumed" })
        // Ending the room closes only the live sockets.
        _ = lose(alice)
        XCTAssertEqual(closes(hub.handle(.endRoom(room), now: now)), [fresh: .roomClosed])
        XCTAssertEqual(hub.roomCount, 0)
        XCTAssertEqual(hub.reconnectingSeats.count, 0)
    }

    func test_a_relay_to_a_peer_in_its_grace_is_answered_with_peer_reconnecting() throws {
        joinAll()
        _ = lose(bob)
        for kind in [RelayKind.offer, .candidate, .data] {
            let effects = send(alice, .relay(kind, to: "bob", payload: nil))
            let error = try XCTUnwrap(frames(effects, to: alice).first)
            XCTAssertEqual(error.type, "error")
            XCTAssertEqual(error.error?.code, ErrorCode.peerReconnecting.rawValue)
            XCTAssertEqual(effects.count, 1, "nothing goes to bob's gone socket")
        }
        XCTAssertTrue(ErrorCode.peerReconnecting.isTemporary)
        let seat = try XCTUnwrap(hub.seat(of: alice))
        XCTAssertEqual(hub.route(.candidate, to: "bob", from: alice, seat: seat),
                       .answer(Frame.error(.peerReconnecting, "peer 'bob' is reconnecting; send again after peer-resumed", inReplyTo: "candidate"),
                               to: alice))
    }

    func test_a_seat_in_its_grace_counts_toward_the_room_limit_and_its_peer_gets_back_in() {
        hub = Hub(settings: HubSettings(maxPeersPerRoom: 2))
        XCTAssertNil(seat(alice, identity("alice")))
        XCTAssertNil(seat(bob, identity("bob")))
        _ = lose(bob)
        XCTAssertEqual(hub.admit(identity("carol"), now: now), .roomFull(limit: 2), "bob's seat is held for him")
        _ = hub.handle(.setDraining(true), now: now)
        XCTAssertNil(seat(fresh, identity("bob")), "bob gets back in, full room and drain alike")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob"])
    }

    func test_the_welcome_lists_a_seat_in_its_grace_as_reconnecting() throws {
        join(alice, "alice")
        join(bob, "bob")
        _ = lose(alice)
        let welcome = try XCTUnwrap(frames(join(carol, "carol"), to: carol).first)
        XCTAssertEqual(welcome.payload?["peers"], [
            ["peer_id": "alice", "role": "peer", "name": nil, "reconnecting": true],
            ["peer_id": "bob", "role": "peer", "name": nil],
        ])
    }

    func test_a_room_whose_every_peer_is_in_its_grace_stays_open_until_the_last_grace_ends() throws {
        join(alice, "alice")
        join(bob, "bob")
        let a = try XCTUnwrap(timers(lose(alice)).first?.0)
        let b = try XCTUnwrap(timers(lose(bob)).first?.0)
        XCTAssertEqual(hub.roomCount, 1)
        XCTAssertEqual(hub.handle(.graceExpired(a), now: now), [], "nobody connected to tell")
        XCTAssertEqual(hub.handle(.graceExpired(b), now: now), [])
        XCTAssertEqual(hub.roomCount, 0)
    }

    func test_typing_ends_when_the_grace_begins() {
        joinAll()
        send(bob, .typing(true))
        XCTAssertEqual(frames(lose(bob), to: alice), [typing("bob", false), peerFrame(.peerReconnecting, "bob")])
    }

    func test_a_grace_of_zero_ends_a_lost_seat_at_once_as_before() {
        hub = Hub(settings: HubSettings(reconnectGraceMs: 0))
        joinAll()
        XCTAssertEqual(lose(bob), [.send([alice, carol], peerFrame(.peerLeft, "bob"))])
        XCTAssertEqual(hub.members(of: room), ["alice", "carol"])
    }
}

// MARK: - Seats restored after a restart

extension HubTests {
    private func restoredTimers(_ effects: [HubEffect]) -> [GraceTimer: Millis] {
        var result: [GraceTimer: Millis] = [:]
        for case .armGrace(let timer, let at) in effects { result[timer] = at }
        return result
    }

    private func peerEvent(_ type: FrameType, _ peer: PeerID) -> Frame {
        Frame(type, from: peer.rawValue, payload: ["peer_id": .string(peer.rawValue)])
    }

    func test_restored_seats_are_held_in_their_grace_from_the_start_and_listed_reconnecting() throws {
        hub = Hub(settings: HubSettings(reconnectGraceMs: 15_000))
        let effects = hub.restore([identity("alice"), identity("bob")], now: now)
        XCTAssertEqual(Set(restoredTimers(effects).values), [now + 15_000], "the full grace, counted from the start")
        XCTAssertEqual(effects.count, 2, "nobody is connected: only the timers")
        XCTAssertEqual(hub.members(of: room), ["alice", "bob"])
        XCTAssertEqual(hub.peerCount, 0, "no live connection")
        XCTAssertEqual(hub.reconnectingSeats.map(\.peer), ["alice", "bob"])
        let placeholder = try XCTUnwrap(hub.seat(of: "bob", in: room)?.connection)
        XCTAssertTrue(Hub.isRestored(placeholder))
        XCTAssertFalse(Hub.isRestored(alice))

        // Alice comes back first: bob is listed reconnecting, and he is not told anything.
        XCTAssertNil(hub.admit(identity("alice"), now: now))
        let back = hub.handle(.join(alice, identity("alice"), ChatResume()), now: now)
        let welcome = try XCTUnwrap(frames(back, to: alice).first)
        XCTAssertEqual(welcome.payload?["peers"], [["peer_id": "bob", "role": "peer", "name": nil, "reconnecting": true]])
        XCTAssertEqual(back.count, 1, "nobody else is connected to hear alice resume")
        XCTAssertEqual(closes(back), [:], "the placeholder is no socket to close")

        // A relay to bob is refused with peer_reconnecting; bob resumes and alice hears peer-resumed.
        let refused = send(alice, .relay(.offer, to: "bob", payload: nil))
        XCTAssertEqual(frames(refused, to: alice).first?.error?.code, ErrorCode.peerReconnecting.rawValue)
        let resumed = hub.handle(.join(bob, identity("bob"), ChatResume()), now: now + 1_000)
        XCTAssertEqual(frames(resumed, to: alice), [peerEvent(.peerResumed, "bob")])
        XCTAssertEqual(frames(send(alice, .relay(.offer, to: "bob", payload: nil)), to: bob).count, 1)
        XCTAssertEqual(hub.reconnectingSeats.count, 0)
        // The timers armed at restore are stale now.
        for timer in restoredTimers(effects).keys { XCTAssertEqual(hub.handle(.graceExpired(timer), now: now + 15_000), []) }
        XCTAssertEqual(hub.members(of: room), ["alice", "bob"])
    }

    func test_a_restored_seat_whose_peer_never_returns_ends_with_peer_left_once() throws {
        let effects = hub.restore([identity("alice"), identity("bob")], now: now)
        let bobTimer = try XCTUnwrap(restoredTimers(effects).keys.first { $0.peer == "bob" })
        join(alice, "alice")
        now += 15_000
        XCTAssertEqual(hub.handle(.graceExpired(bobTimer), now: now), [.send([alice], peerEvent(.peerLeft, "bob"))])
        XCTAssertEqual(hub.handle(.graceExpired(bobTimer), now: now), [], "a timer fires once")
        XCTAssertEqual(hub.members(of: room), ["alice"])
    }

    func test_restored_seats_count_toward_the_room_limit_and_a_room_nobody_reclaims_closes() throws {
        hub = Hub(settings: HubSettings(maxPeersPerRoom: 2))
        let effects = hub.restore([identity("alice"), identity("bob")], now: now)
        XCTAssertEqual(hub.admit(identity("carol"), now: now), .roomFull(limit: 2), "the restored seats are held")
        _ = hub.handle(.setDraining(true), now: now)
        XCTAssertNil(hub.admit(identity("bob"), now: now), "their peers get back in, drain or not")
        XCTAssertEqual(hub.roomCount, 1)
        for timer in restoredTimers(effects).keys { XCTAssertEqual(hub.handle(.graceExpired(timer), now: now + 15_000), []) }
        XCTAssertEqual(hub.roomCount, 0)
        XCTAssertEqual(hub.reconnectingSeats.count, 0)
    }

    func test_a_kick_of_a_restored_seat_ends_it_and_refuses_its_token() {
        _ = hub.restore([identity("alice"), identity("bob")], now: now)
        join(alice, "alice")
        XCTAssertEqual(hub.handle(.kick(room, "bob"), now: now), [.send([alice], peerEvent(.peerLeft, "bob"))])
        XCTAssertEqual(hub.admit(identity("bob"), now: now), .kicked, "the remembered credential is banned")
    }

    func test_restoring_a_seat_already_held_changes_nothing() {
        join(alice, "alice")
        XCTAssertEqual(hub.restore([identity("alice")], now: now), [])
        XCTAssertTrue(hub.isSeated(alice))
        XCTAssertEqual(hub.seat(of: "alice", in: room)?.reconnecting, false)
    }
}
