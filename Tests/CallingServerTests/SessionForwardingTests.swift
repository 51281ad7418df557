import XCTest

@testable import CallingServer

/// The pure decisions behind forwarding an HTTP session's PATCH or DELETE to the node holding it
/// (docs/operations.md, "What is shared"); the wire form is in ClusterMembershipTests, the whole
/// path in tests/integration/test_cluster_lb.py and test_cluster.py.
final class SessionForwardingTests: XCTestCase {
    private func hex(_ text: String) -> String { text.utf8.map { String(format: "%02x", $0) }.joined() }

    func test_a_session_id_names_its_node_and_anything_else_names_none() {
        let uuid = "1456059d-0170-458a-9f18-a4640f4197c7"
        for node in ["fwd-b", "node/with?odd#chars", "n.1", String(repeating: "x", count: 64)] {
            XCTAssertEqual(HTTPSessions.owner(ofSession: uuid + "." + hex(node)), node)
        }
        // A single node's ids (a bare UUID), and ids no node of ours made.
        for id in [uuid, uuid + ".", uuid + ".abc", uuid + ".ABCD", uuid + ".zz", "", ".", uuid + "." + hex(String(repeating: "x", count: 65)),
                   uuid + ".ff"] {
            XCTAssertNil(HTTPSessions.owner(ofSession: id), id)
        }
    }

    func test_an_owner_is_gone_only_once_seen_alive_and_then_not() {
        XCTAssertEqual(ClusterLink.route(owner: "b", alive: ["a", "b"], seenAlive: ["a", "b"], busUp: true), .owner)
        XCTAssertEqual(ClusterLink.route(owner: "b", alive: ["a"], seenAlive: ["a", "b"], busUp: true), .ownerGone)
        // Started after the last liveness check: its sessions are newer than the check, so it is asked.
        XCTAssertEqual(ClusterLink.route(owner: "b", alive: ["a"], seenAlive: ["a"], busUp: true), .owner)
        XCTAssertEqual(ClusterLink.route(owner: "b", alive: [], seenAlive: [], busUp: true), .owner)
        for alive: Set<String> in [["a", "b"], ["a"]] {
            XCTAssertEqual(ClusterLink.route(owner: "b", alive: alive, seenAlive: ["a", "b"], busUp: false), .unreachable)
        }
    }
}
