import CallingCore
import XCTest

/// A room's call for webhooks: first peer in starts it, last peer out ends it.
final class CallLifecycleTests: XCTestCase {
    private var lifecycle = CallLifecycle()
    private let now: Millis = 1_700_000_000_000

    private func peer(_ id: PeerID, room: RoomID = "r1", call: CallID? = nil) -> PeerIdentity {
        PeerIdentity(peer: id, room: room, call: call)
    }

    func test_first_join_starts_the_call_and_last_leave_ends_it_with_its_duration() {
        let started = lifecycle.joined(peer("alice"), takeover: false, now: now)
        guard case .callStarted(let call)? = started.first, case .peerJoined(let who, _)? = started.last else {
            return XCTFail("\(started)")
        }
        XCTAssertEqual(call.startedAt, now)
        XCTAssertEqual(who.peer, "alice")
        XCTAssertEqual(lifecycle.joined(peer("bob"), takeover: false, now: now + 10).count, 1, "no second call_started")
        XCTAssertEqual(lifecycle.left(peer("bob"), reason: "last_peer_left", now: now + 20).count, 1, "alice is still there")
        let ended = lifecycle.left(peer("alice"), reason: "last_peer_left", now: now + 5_000)
        guard case .callEnded(let endedCall, let endedAt, let reason)? = ended.last else { return XCTFail("\(ended)") }
        XCTAssertEqual(endedAt - endedCall.startedAt, 5_000)
        XCTAssertEqual(reason, "last_peer_left")
        XCTAssertNil(lifecycle.call(in: "r1"))
    }

    func test_a_takeover_is_not_a_new_seat() {
        _ = lifecycle.joined(peer("alice"), takeover: false, now: now)
        XCTAssertEqual(lifecycle.joined(peer("alice"), takeover: true, now: now), [])
        let ended = lifecycle.left(peer("alice"), reason: "last_peer_left", now: now)
        XCTAssertEqual(ended.count, 2, "one leave empties the room: peer_left then call_ended")
    }

    func test_the_call_id_comes_from_the_first_joiner_that_names_one() {
        _ = lifecycle.joined(peer("alice"), takeover: false, now: now)
        _ = lifecycle.joined(peer("bob", call: "c9"), takeover: false, now: now)
        XCTAssertEqual(lifecycle.call(in: "r1")?.call, "c9")
    }

    func test_a_room_that_fills_again_has_a_second_call() {
        _ = lifecycle.joined(peer("alice"), takeover: false, now: now)
        _ = lifecycle.left(peer("alice"), reason: "last_peer_left", now: now + 1)
        let again = lifecycle.joined(peer("alice"), takeover: false, now: now + 2)
        guard case .callStarted(let call)? = again.first else { return XCTFail("\(again)") }
        XCTAssertEqual(call.startedAt, now + 2)
    }
}

extension CallLifecycleTests {
    func test_restored_seats_count_without_events_and_end_the_call_they_were_reported_in() {
        var lifecycle = CallLifecycle()
        let alice = PeerIdentity(peer: "alice", room: "r", call: "c1")
        let bob = PeerIdentity(peer: "bob", room: "r", call: "c1")
        lifecycle.restored(alice, callStartedAt: 1_000)
        lifecycle.restored(bob, callStartedAt: 1_000)
        XCTAssertEqual(lifecycle.call(in: "r")?.startedAt, 1_000)
        XCTAssertEqual(lifecycle.call(in: "r")?.call, "c1")
        XCTAssertEqual(lifecycle.joined(alice, takeover: true, now: 5_000), [], "a resume is a takeover: no event")
        let first = lifecycle.left(bob, reason: "last_peer_left", now: 6_000)
        XCTAssertEqual(first.count, 1, "one seat of two left: peer_left only")
        guard case .peerLeft(let who, _)? = first.first else { return XCTFail("\(first)") }
        XCTAssertEqual(who.peer, "bob")
        let last = lifecycle.left(alice, reason: "last_peer_left", now: 7_000)
        guard case .callEnded(let call, let endedAt, let reason)? = last.last, last.count == 2 else { return XCTFail("\(last)") }
        XCTAssertEqual([call.startedAt, endedAt], [1_000, 7_000], "the call ends with the start it was reported with")
        XCTAssertEqual(reason, "last_peer_left")
        XCTAssertNil(lifecycle.call(in: "r"))
    }
}
