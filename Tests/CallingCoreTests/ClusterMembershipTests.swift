import CallingCore
import XCTest

/// The pure cluster membership: no Redis, no hub; inputs in, effects out.
final class ClusterMembershipTests: XCTestCase {
    let alice = PeerIdentity(peer: "alice", room: "r", role: "peer", name: "Alice")
    let bob = PeerIdentity(peer: "bob", room: "r", role: "doctor")

    func connected(_ node: String = "a") -> ClusterMembership {
        var membership = ClusterMembership(node: node)
        XCTAssertEqual(membership.handle(.connected), [.register([]), .fetchSeats(nil)])
        return membership
    }

    func seatedConnection(_ effects: [ClusterEffect]) -> ConnectionID? {
        for case .seat(let connection, _) in effects { return connection }
        return nil
    }

    func test_local_seats_are_announced_only_while_connected_and_registered_again_on_reconnect() {
        var membership = ClusterMembership(node: "a")
        XCTAssertEqual(membership.handle(.localJoined(alice, ConnectionID(1))), [], "Redis down: nothing to send")
        XCTAssertEqual(membership.handle(.connected), [.register([.init(alice, epoch: 1)]), .fetchSeats(nil)])
        XCTAssertEqual(membership.handle(.localJoined(bob, ConnectionID(2), at: 500)), [.announceJoin(bob, epoch: 500)])
        XCTAssertEqual(membership.handle(.localLeft(bob, ConnectionID(99))), [], "a connection that no longer holds the seat")
        XCTAssertEqual(membership.handle(.localLeft(bob, ConnectionID(2))), [.announceLeave("r", "bob")])
        _ = membership.handle(.disconnected)
        XCTAssertEqual(membership.handle(.localLeft(alice, ConnectionID(1))), [])
        XCTAssertEqual(membership.handle(.connected), [.register([]), .fetchSeats(nil)])
    }

    func test_remote_joins_and_leaves_become_remote_seats_and_own_echoes_are_ignored() throws {
        var membership = connected()
        XCTAssertEqual(membership.handle(.bus(.joined(node: "a", alice))), [], "our own event")
        let effects = membership.handle(.bus(.joined(node: "b", bob)))
        let remote = try XCTUnwrap(seatedConnection(effects))
        XCTAssertTrue(remote.isRemoteSeat)
        XCTAssertEqual(effects, [.seat(remote, bob)])
        XCTAssertEqual(membership.remoteSeat(remote)?.node, "b")
        XCTAssertEqual(membership.handle(.bus(.left(node: "c", room: "r", peer: "bob"))), [], "bob is not c's")
        XCTAssertEqual(membership.handle(.bus(.left(node: "b", room: "r", peer: "bob"))), [.unseat(remote)])
        XCTAssertEqual(membership.remoteCount, 0)
        XCTAssertEqual(membership.handle(.bus(.left(node: "b", room: "r", peer: "bob"))), [])
    }

    func test_a_later_join_elsewhere_takes_a_local_seat_over_without_a_leave() throws {
        var membership = connected()
        _ = membership.handle(.localJoined(alice, ConnectionID(1)))
        _ = membership.handle(.bus(.joined(node: "a", alice)))  // our echo: the join is ordered
        let effects = membership.handle(.bus(.joined(node: "b", alice)))
        let remote = try XCTUnwrap(seatedConnection(effects))
        XCTAssertEqual(effects, [.dropSeat("r", "alice"), .seat(remote, alice)])
        XCTAssertEqual(membership.localCount, 0)
        // The replaced socket's leave, when it comes, is no longer ours to announce.
        XCTAssertEqual(membership.handle(.localLeft(alice, ConnectionID(1))), [])
    }

    func test_when_two_nodes_seat_one_peer_at_once_the_later_join_on_the_bus_wins_everywhere() throws {
        var a = connected("a")
        var b = connected("b")
        XCTAssertEqual(a.handle(.localJoined(alice, ConnectionID(1))), [.announceJoin(alice, epoch: 1)])
        XCTAssertEqual(b.handle(.localJoined(alice, ConnectionID(1))), [.announceJoin(alice, epoch: 1)])
        // The bus order: a's join, then b's.
        let order: [ClusterEvent] = [.joined(node: "a", alice), .joined(node: "b", alice)]
        var aEffects: [ClusterEffect] = []
        var bEffects: [ClusterEffect] = []
        for event in order {
            aEffects += a.handle(.bus(event))
            bEffects += b.handle(.bus(event))
        }
        XCTAssertEqual(bEffects, [], "b's own join came later: b keeps its seat")
        XCTAssertEqual(b.localCount, 1)
        XCTAssertEqual(aEffects.first, .dropSeat("r", "alice"), "a gives its seat to b")
        XCTAssertEqual(a.localCount, 0)
        XCTAssertEqual(a.remoteCount, 1)
    }

    func test_a_remote_takeover_between_two_other_nodes_replaces_the_remote_seat() throws {
        var membership = connected()
        let first = try XCTUnwrap(seatedConnection(membership.handle(.bus(.joined(node: "b", alice)))))
        let second = try XCTUnwrap(seatedConnection(membership.handle(.bus(.joined(node: "c", alice)))))
        XCTAssertNotEqual(first, second)
        XCTAssertNil(membership.remoteSeat(first))
        XCTAssertEqual(membership.remoteSeat(second)?.node, "c")
        XCTAssertEqual(membership.handle(.bus(.left(node: "b", room: "r", peer: "alice"))), [], "b's late leave is stale")
        XCTAssertEqual(membership.remoteCount, 1)
    }

    func test_a_node_whose_heartbeat_lapsed_loses_its_seats_and_is_forgotten() throws {
        var membership = connected()
        let bobSeat = try XCTUnwrap(seatedConnection(membership.handle(.bus(.joined(node: "b", bob)))))
        _ = membership.handle(.bus(.joined(node: "c", alice)))
        XCTAssertEqual(membership.handle(.liveness(registered: ["a", "b", "c"], alive: ["a", "b", "c"])), [])
        XCTAssertEqual(membership.handle(.liveness(registered: ["a", "b", "c"], alive: ["a", "c"])),
                       [.unseat(bobSeat), .forgetNode("b")])
        XCTAssertEqual(membership.remoteCount, 1)
        XCTAssertEqual(membership.handle(.liveness(registered: ["a", "c", "d"], alive: ["a", "c"])), [.forgetNode("d")])
    }

    func test_snapshots_fill_gaps_remove_what_a_node_no_longer_lists_and_leave_other_holders_alone() throws {
        var membership = connected()
        let carol = PeerIdentity(peer: "carol", room: "r")
        let stale = try XCTUnwrap(seatedConnection(membership.handle(.bus(.joined(node: "b", carol)))))
        _ = membership.handle(.localJoined(alice, ConnectionID(1)))
        // b's claim on alice is older than ours (epoch 1 here, 0 there).
        let effects = membership.handle(.snapshot(["b": [.init(bob, epoch: 0), .init(alice, epoch: 0)], "a": [.init(alice, epoch: 1)]],
                                                  complete: false))
        // alice is ours; bob is new; carol is no longer on b's list.
        XCTAssertEqual(effects.count, 2)
        XCTAssertEqual(effects.first, .unseat(stale))
        guard case .seat(_, let seated)? = effects.last else { return XCTFail("\(effects)") }
        XCTAssertEqual(seated, bob)
        // A complete snapshot without b: b is gone.
        let gone = membership.handle(.snapshot(["a": [.init(alice, epoch: 1)]], complete: true))
        XCTAssertEqual(gone.count, 1)
        XCTAssertEqual(membership.remoteCount, 0)
    }

    /// Node d was cut off from Redis with alice seated; alice joined again through a meanwhile.
    /// When the partition heals, each node reads the other's list: the later claim wins on every
    /// node, whichever list it reads first, and the older one is dropped without a leave.
    func test_after_a_partition_two_claims_on_one_seat_go_to_the_later_join_on_every_node() throws {
        var d = connected("d")
        XCTAssertEqual(d.handle(.localJoined(alice, ConnectionID(1), at: 1_000)), [.announceJoin(alice, epoch: 1_000)])
        _ = d.handle(.bus(.joined(node: "d", alice, epoch: 1_000)))
        _ = d.handle(.disconnected)
        var a = connected("a")
        XCTAssertEqual(a.handle(.localJoined(alice, ConnectionID(7), at: 5_000)), [.announceJoin(alice, epoch: 5_000)])
        var b = connected("b")
        let onB = try XCTUnwrap(seatedConnection(b.handle(.bus(.joined(node: "a", alice, epoch: 5_000)))))

        // d comes back: it registers its old claim and reads everyone's lists.
        XCTAssertEqual(d.handle(.connected), [.register([.init(alice, epoch: 1_000)]), .fetchSeats(nil)])
        let heal: [String: [ClusterMembership.Claim]] = ["a": [.init(alice, epoch: 5_000)], "b": [], "d": [.init(alice, epoch: 1_000)]]
        let onD = d.handle(.snapshot(heal, complete: true))
        let remote = try XCTUnwrap(seatedConnection(onD))
        XCTAssertEqual(onD, [.dropSeat("r", "alice"), .seat(remote, alice)], "the seat on a wins; the hub's takeover closes ours with replaced")
        XCTAssertEqual(d.localCount, 0)
        XCTAssertEqual(d.remoteSeat(remote)?.node, "a")
        XCTAssertEqual(d.handle(.localLeft(alice, ConnectionID(1))), [], "the replaced socket's close is no leave: alice is still seated on a")

        // a and b read d's list (its `resynced`) before d dropped its claim: they keep a's.
        XCTAssertEqual(a.handle(.snapshot(["d": [.init(alice, epoch: 1_000)]], complete: false)), [])
        XCTAssertEqual(a.localCount, 1)
        XCTAssertEqual(b.handle(.snapshot(["d": [.init(alice, epoch: 1_000)]], complete: false)), [])
        XCTAssertEqual(b.remoteSeat(onB)?.node, "a")
    }

    func test_the_later_claim_wins_whichever_side_holds_it_and_ties_go_to_the_greater_node_id() throws {
        // The later claim is the remote one on b: b gives its seat up.
        var b = connected("b")
        _ = b.handle(.localJoined(alice, ConnectionID(1), at: 100))
        XCTAssertEqual(b.handle(.snapshot(["c": [.init(alice, epoch: 90)]], complete: false)), [], "c's claim is older")
        XCTAssertEqual(b.handle(.snapshot(["c": [.init(alice, epoch: 100)]], complete: false)).first, .dropSeat("r", "alice"),
                       "same epoch: c > b")
        // Between two remote claims: the later one replaces the seat, an older one does not.
        var a = connected("a")
        let fromB = try XCTUnwrap(seatedConnection(a.handle(.bus(.joined(node: "b", alice, epoch: 200)))))
        XCTAssertEqual(a.handle(.snapshot(["c": [.init(alice, epoch: 150)]], complete: false)), [])
        let fromC = try XCTUnwrap(seatedConnection(a.handle(.snapshot(["c": [.init(alice, epoch: 250)]], complete: false))))
        XCTAssertNil(a.remoteSeat(fromB))
        XCTAssertEqual(a.remoteSeat(fromC)?.node, "c")
        XCTAssertEqual(a.remoteCount, 1)
    }

    func test_a_takeover_is_later_than_the_claim_it_took_over_even_with_a_clock_behind() {
        var a = connected("a")
        _ = a.handle(.bus(.joined(node: "b", alice, epoch: 9_000)))
        XCTAssertEqual(a.handle(.localJoined(alice, ConnectionID(1), at: 2_000)), [.announceJoin(alice, epoch: 9_001)])
        XCTAssertEqual(a.handle(.localJoined(bob, ConnectionID(2), at: 2_000)), [.announceJoin(bob, epoch: 9_002)],
                       "epochs only grow on a node")
    }

    func test_wire_forms_round_trip_and_garbage_is_refused() {
        let identity = PeerIdentity(peer: "p\n1", room: "r \"x\"", call: "call-1", role: "agent", name: "Ann", maxPeers: 3)
        for event in [ClusterEvent.joined(node: "n", identity, epoch: 1_700_000_000_123), .left(node: "n", room: "r", peer: "p"), .resynced(node: "n")] {
            XCTAssertEqual(ClusterEvent(encoded: event.encoded), event)
        }
        let frame = Frame(.offer, from: "alice", to: "bob", payload: ["sdp": "v=0\r\n"])
        let delivery = ClusterDelivery.frame(room: "r\n2", peers: ["bob", "eve"], bytes: frame.encoded())
        XCTAssertEqual(ClusterDelivery(encoded: delivery.encoded), delivery)
        XCTAssertEqual(Frame(wire: frame.encoded()), frame)
        XCTAssertEqual(ClusterDelivery(encoded: ClusterDelivery.close(room: "r", peer: "p", code: 4403).encoded),
                       .close(room: "r", peer: "p", code: 4403))
        let agent = PresenceIdentity(peer: "ann", role: .agent, name: nil, queues: ["sales", "vip"])
        for presence in [ClusterDelivery.presenceOpen(node: "b", connection: 7, agent),
                         .presenceMessage(node: "b", connection: UInt64.max, bytes: Array("{\"type\":\"status\"}\n".utf8)),
                         .presenceGone(node: "b", connection: 7), .presenceFrame(connection: 7, bytes: frame.encoded()),
                         .presenceClose(connection: 7, code: 4400)] {
            XCTAssertEqual(ClusterDelivery(encoded: presence.encoded), presence)
        }
        // A forwarded HTTP session request and its answer: bodies with newlines and bytes that are not UTF-8 survive.
        for http in [ClusterDelivery.httpRequest(node: "a/b\n", request: UInt64.max, method: "PATCH", path: "/whip/r/x.6162",
                                                 headers: ["authorization": "Bearer t", "if-match": "\"x.1\""], remote: "10.0.0.1",
                                                 body: Array("a=mid:0\r\n".utf8) + [0xff, 0x0a]),
                     .httpResponse(request: 3, status: 200, headers: [["etag", "\"x.2\""], ["content-type", "application/sdp"]],
                                   body: [0x0a, 0x00, 0xfe]),
                     .httpResponse(request: 4, status: 204, headers: [], body: [])] {
            XCTAssertEqual(ClusterDelivery(encoded: http.encoded), http)
        }
        XCTAssertNil(ClusterDelivery(encoded: Array("{\"kind\":\"h-req\",\"conn\":1,\"node\":\"a\"}\n".utf8)))
        XCTAssertEqual(PresenceIdentity(clusterJSON: PresenceIdentity(peer: "d", role: .dashboard).clusterJSON),
                       PresenceIdentity(peer: "d", role: .dashboard))
        XCTAssertNil(ClusterEvent(encoded: Array("{}".utf8)))
        XCTAssertNil(ClusterEvent(encoded: Array("not json".utf8)))
        XCTAssertNil(ClusterDelivery(encoded: Array("no header".utf8)))
        XCTAssertNil(PeerIdentity(clusterJSON: ["room": "r"]))
    }
}
