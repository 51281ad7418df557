import CallingCore
import XCTest

/// The pure chat catch-up of cluster mode: which seqs each local peer has, when a gap is read from
/// the store, and who gets what the read returns.
final class ChatCatchUpTests: XCTestCase {
    let room: RoomID = "r"
    let alice = ConnectionID(1)
    let bob = ConnectionID(2)

    func message(_ seq: Int64, from: PeerID = "carol") -> ChatMessage {
        ChatMessage(room: "r", seq: seq, from: from, clientID: "c\(seq)", text: "m\(seq)", meta: nil, timestamp: 1_000 + seq)
    }

    /// alice and bob seated, and the read after their joins done.
    func twoPeers(lastSeq: Int64 = 10) -> ChatCatchUp {
        var catchUp = ChatCatchUp(settings: .init(gapMs: 100, pageSize: 50))
        catchUp.joined(room: room, peer: "alice", connection: alice, lastSeq: lastSeq, now: -100)
        catchUp.joined(room: room, peer: "bob", connection: bob, lastSeq: lastSeq, now: -100)
        XCTAssertEqual(catchUp.tick(now: 0), [.fetch(room, sinceSeq: lastSeq, limit: 50)])
        XCTAssertEqual(catchUp.fetched(room: room, messages: [], hasMore: false, now: 0), [])
        return catchUp
    }

    func test_one_read_after_a_join_finds_a_last_chat_committed_before_the_seat_was_known() {
        var catchUp = ChatCatchUp(settings: .init(gapMs: 100, pageSize: 50))
        catchUp.joined(room: room, peer: "alice", connection: alice, lastSeq: 3, now: 0)
        XCTAssertEqual(catchUp.openGaps, 0)
        XCTAssertEqual(catchUp.tick(now: 50), [])
        XCTAssertEqual(catchUp.tick(now: 100), [.fetch(room, sinceSeq: 3, limit: 50)])
        XCTAssertEqual(catchUp.fetched(room: room, messages: [message(4)], hasMore: false, now: 110),
                       [.deliver(message(4), to: [alice])])
        XCTAssertEqual(catchUp.tick(now: 1_000), [], "one read per join")
    }

    func test_in_order_and_out_of_order_arrivals_open_no_read_and_a_repeat_is_dropped() {
        var catchUp = twoPeers()
        XCTAssertEqual(catchUp.arrived(room: room, seq: 12, targets: [alice, bob], now: 10), [alice, bob])
        XCTAssertEqual(catchUp.openGaps, 2, "11 is still in flight")
        XCTAssertEqual(catchUp.arrived(room: room, seq: 11, targets: [alice, bob], now: 20), [alice, bob])
        XCTAssertEqual(catchUp.openGaps, 0)
        XCTAssertEqual(catchUp.arrived(room: room, seq: 12, targets: [alice, bob], now: 30), [], "they have 12")
        XCTAssertEqual(catchUp.arrived(room: room, seq: 9, targets: [alice], now: 30), [], "before alice's welcome")
        XCTAssertEqual(catchUp.tick(now: 1_000), [])
    }

    func test_a_peer_the_sending_node_did_not_know_yet_gets_the_missed_chat_from_the_store() {
        var catchUp = twoPeers()
        // 11 was forwarded to alice only: bob's seat had not reached the sending node.
        XCTAssertEqual(catchUp.arrived(room: room, seq: 11, targets: [alice], now: 10), [alice])
        XCTAssertEqual(catchUp.openGaps, 1)
        XCTAssertEqual(catchUp.tick(now: 50), [], "not before gapMs")
        XCTAssertEqual(catchUp.tick(now: 110), [.fetch(room, sinceSeq: 10, limit: 50)])
        XCTAssertEqual(catchUp.tick(now: 300), [], "one read at a time")
        // 12 arrives for both while the read is in flight; the read returns 11 and 12.
        XCTAssertEqual(catchUp.arrived(room: room, seq: 12, targets: [alice, bob], now: 120), [alice, bob])
        XCTAssertEqual(catchUp.fetched(room: room, messages: [message(11), message(12)], hasMore: false, now: 130),
                       [.deliver(message(11), to: [bob])])
        XCTAssertEqual(catchUp.openGaps, 0)
        XCTAssertEqual(catchUp.arrived(room: room, seq: 11, targets: [bob], now: 140), [], "a late copy is dropped")
    }

    func test_after_an_outage_every_room_reads_at_once_and_a_sender_is_not_given_its_own_message() {
        var catchUp = twoPeers()
        catchUp.joined(room: "other", peer: "dan", connection: ConnectionID(3), lastSeq: 0, now: 0)
        XCTAssertEqual(catchUp.tick(now: 100), [.fetch("other", sinceSeq: 0, limit: 50)])
        XCTAssertEqual(catchUp.fetched(room: "other", messages: [], hasMore: false, now: 100), [])
        catchUp.committed(room: room, seq: 11, now: 5)  // alice's, stored here: both have it
        XCTAssertEqual(catchUp.openGaps, 0, "a tail loss shows no gap")
        XCTAssertEqual(catchUp.busRestored(), [.fetch("other", sinceSeq: 0, limit: 50), .fetch(room, sinceSeq: 11, limit: 50)])
        XCTAssertEqual(catchUp.busRestored(), [], "reads in flight are asked again after them")
        XCTAssertEqual(catchUp.fetched(room: room, messages: [message(12, from: "bob"), message(13)], hasMore: false, now: 10),
                       [.deliver(message(12, from: "bob"), to: [alice]), .deliver(message(13), to: [alice, bob]),
                        .fetch(room, sinceSeq: 13, limit: 50)])
        XCTAssertEqual(catchUp.fetched(room: room, messages: [], hasMore: false, now: 20), [])
        XCTAssertEqual(catchUp.fetched(room: "other", messages: [], hasMore: false, now: 20),
                       [.fetch("other", sinceSeq: 0, limit: 50)])
    }

    func test_full_pages_read_on_a_failed_read_waits_and_a_joiner_after_the_gap_is_not_given_old_messages() {
        var catchUp = twoPeers()
        _ = catchUp.arrived(room: room, seq: 14, targets: [alice, bob], now: 0)
        XCTAssertEqual(catchUp.tick(now: 100), [.fetch(room, sinceSeq: 10, limit: 50)])
        catchUp.fetchFailed(room: room, now: 100)
        XCTAssertEqual(catchUp.tick(now: 150), [])
        XCTAssertEqual(catchUp.tick(now: 200), [.fetch(room, sinceSeq: 10, limit: 50)])
        // erin joins meanwhile with the room at 14: she has everything up to it.
        catchUp.joined(room: room, peer: "erin", connection: ConnectionID(5), lastSeq: 14, now: 210)
        XCTAssertEqual(catchUp.fetched(room: room, messages: [message(11), message(12)], hasMore: true, now: 220),
                       [.deliver(message(11), to: [alice, bob]), .deliver(message(12), to: [alice, bob]),
                        .fetch(room, sinceSeq: 12, limit: 50)])
        XCTAssertEqual(catchUp.fetched(room: room, messages: [message(13), message(14)], hasMore: false, now: 230),
                       [.deliver(message(13), to: [alice, bob])])
        XCTAssertEqual(catchUp.openGaps, 0)
    }

    func test_a_takeover_follows_the_new_connection_and_a_leave_forgets_the_peer() {
        var catchUp = twoPeers()
        let alice2 = ConnectionID(7)  // (its join's read is not this test's)
        catchUp.joined(room: room, peer: "alice", connection: alice2, lastSeq: 12, now: 0)
        XCTAssertEqual(catchUp.arrived(room: room, seq: 12, targets: [alice2, bob], now: 1), [bob], "alice2's welcome covered 12")
        catchUp.left(alice)  // the old connection's close changes nothing
        XCTAssertEqual(catchUp.roomCount, 1)
        catchUp.left(alice2)
        catchUp.left(bob)
        XCTAssertEqual(catchUp.roomCount, 0)
        XCTAssertEqual(catchUp.busRestored(), [])
    }
}
