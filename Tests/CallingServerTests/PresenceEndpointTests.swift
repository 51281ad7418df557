import CallingAuth
import CallingCore
import CallingServer
import CallingTesting
import Foundation
import XCTest

/// The presence channel end to end: real server, real lws clients, real JWTs. The tokens in
/// `accepted` are checked by opening `/v1/ws` with them.
/// One server per test, never two at once: libev allows one signal watcher per process.
final class PresenceEndpointTests: ServerTestCase {

    private func presenceToken(_ peer: String, role: String?, scope: [String] = ["presence"]) throws -> String {
        try server.issuer.issue(PeerTokenClaims(sub: PeerID(peer), role: role, scope: scope, audience: server.config.jwtAudience,
                                                issuedAt: Date(), expiresAt: Date().addingTimeInterval(600)))
    }

    /// Connects to `/v1/presence`; `welcome` of the returned peer is the `connected` frame.
    private func presence(_ peer: String, _ role: String, queues: String? = nil) async throws -> TestPeer {
        try await TestPeer.connect(loop: server.loop, port: server.port, token: presenceToken(peer, role: role),
                                   path: "/v1/presence", extraQuery: queues.map { ["queues": $0] } ?? [:])
    }

    private func upgradeStatus(_ token: String, query: [String: String] = [:]) async -> Int? {
        do {
            _ = try await TestPeer.connect(loop: server.loop, port: server.port, token: token, path: "/v1/presence",
                                           extraQuery: query)
            return 101
        } catch TestPeerError.connectFailed(let status, _) {
            return status
        } catch {
            return nil
        }
    }

    private func agentEntry(_ frame: Frame, _ agent: String) -> JSONValue? {
        frame.payloadObject["agents"]?.arrayValue?.first { $0["agent_id"] == .string(agent) }
    }

    /// carl asks for ann; returns the request id from the caller's ack after ann saw the offer.
    private func ring(_ caller: TestPeer, _ agent: TestPeer, target: JSONValue = ["agent_id": "ann"]) async throws -> String {
        caller.send(["type": "request", "payload": target])
        let ack = try await caller.next(type: "request")
        XCTAssertEqual(ack.payloadObject["state"], "ringing")
        let offer = try await agent.next(type: "request")
        XCTAssertEqual(offer.payloadObject["request_id"], ack.payloadObject["request_id"])
        return try XCTUnwrap(ack.payloadObject["request_id"]?.stringValue)
    }

    // MARK: - Upgrade

    func test_tokens_without_presence_scope_or_role_are_refused_with_403() async throws {
        let roomOnly = await upgradeStatus(try server.token(peer: "ann", role: "agent"))
        XCTAssertEqual(roomOnly, 403)
        let noScope = await upgradeStatus(try presenceToken("ann", role: "agent", scope: []))
        XCTAssertEqual(noScope, 403)
        let noRole = await upgradeStatus(try presenceToken("ann", role: nil))
        XCTAssertEqual(noRole, 403)
        let otherRole = await upgradeStatus(try presenceToken("ann", role: "host"))
        XCTAssertEqual(otherRole, 403)
        let badQueues = await upgradeStatus(try presenceToken("ann", role: "agent"), query: ["queues": "sales/eu"])
        XCTAssertEqual(badQueues, 400)
        let good = await upgradeStatus(try presenceToken("ann", role: "agent", scope: ["room", "presence"]))
        XCTAssertEqual(good, 101)
    }

    func test_presence_frames_are_unknown_on_the_room_protocol() async throws {
        let alice = try await server.join("alice")
        alice.send(["type": "status", "payload": ["status": "away"]])
        let error = try await alice.next(type: "error")
        XCTAssertEqual(error.error?.code, ErrorCode.unknownType.rawValue)
    }

    // MARK: - Status

    func test_dashboard_gets_a_snapshot_then_deltas() async throws {
        let ann = try await presence("ann", "agent", queues: "sales,support")
        XCTAssertEqual(ann.welcome.type, "connected")
        XCTAssertEqual(ann.welcome.payloadObject["peer_id"], "ann")
        XCTAssertEqual(ann.welcome.payloadObject["role"], "agent")

        let dash = try await presence("dash", "dashboard")
        XCTAssertEqual(dash.welcome.type, "connected")
        let entry = try XCTUnwrap(agentEntry(dash.welcome, "ann"))
        XCTAssertEqual(entry["status"], "available")
        XCTAssertEqual(entry["note"], .null)
        XCTAssertEqual(entry["queues"], ["sales", "support"])
        XCTAssertNotNil(entry["updated_at"]?.int64Value)

        ann.send(["type": "status", "payload": ["status": "away", "note": "lunch"]])
        let delta = try await dash.next(type: "status")
        XCTAssertEqual(delta.payloadObject["agent_id"], "ann")
        XCTAssertEqual(delta.payloadObject["status"], "away")
        XCTAssertEqual(delta.payloadObject["note"], "lunch")
        let echo = try await ann.next(type: "status")
        XCTAssertEqual(echo.payloadObject["status"], "away", "the agent hears its own change too")

        let bob = try await presence("bob", "agent")
        let joined = try await dash.next(type: "status")
        XCTAssertEqual(joined.payloadObject["agent_id"], "bob")
        XCTAssertEqual(joined.payloadObject["status"], "available")
        XCTAssertEqual(agentEntry(bob.welcome, "ann")?["status"], "away")
    }

    func test_an_agent_that_reconnects_keeps_its_status() async throws {
        let ann = try await presence("ann", "agent")
        ann.send(["type": "status", "payload": ["status": "busy", "note": "wrap-up"]])
        _ = try await ann.next(type: "status")
        ann.close()
        _ = try await ann.closeEvent()

        let again = try await presence("ann", "agent")
        XCTAssertEqual(agentEntry(again.welcome, "ann")?["status"], "busy")
        XCTAssertEqual(agentEntry(again.welcome, "ann")?["note"], "wrap-up")
    }

    func test_an_agent_gone_longer_than_the_grace_period_turns_offline() async throws {
        try restart { $0.presenceGraceSeconds = 1 }
        let dash = try await presence("dash", "dashboard")
        let ann = try await presence("ann", "agent")
        _ = try await dash.next(type: "status")
        ann.close()
        let offline = try await dash.next(type: "status", timeout: 5)
        XCTAssertEqual(offline.payloadObject["agent_id"], "ann")
        XCTAssertEqual(offline.payloadObject["status"], "offline")
    }

    func test_a_second_agent_connection_replaces_the_first_with_4400() async throws {
        let ann = try await presence("ann", "agent")
        let again = try await presence("ann", "agent")
        let closed = try await ann.closeEvent()
        XCTAssertEqual(closed.code, CloseCode.replaced.rawValue)
        again.send(["type": "ping", "payload": ["n": 1]])
        let pong = try await again.next(type: "pong")
        XCTAssertEqual(pong.payloadObject["n"], 1)
    }

    func test_bad_input_gets_an_error_frame_and_the_connection_stays() async throws {
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let cases: [(TestPeer, JSONValue, ErrorCode)] = [
            (ann, ["type": "status", "payload": ["status": "sleeping"]], .invalidPayload),
            (ann, ["type": "status", "payload": ["status": "away", "note": .string(String(repeating: "x", count: 257))]],
             .invalidPayload),
            (ann, ["type": "offer", "to": "carl", "payload": ["sdp": "v=0"]], .unknownType),
            (carl, ["type": "request", "payload": ["agent_id": "zed"]], .peerNotFound),
            (carl, ["type": "status", "payload": ["status": "away"]], .forbidden),
            (carl, ["type": "accept", "payload": ["request_id": "req_x"]], .forbidden),
            (ann, ["type": "accept", "payload": ["request_id": "req_x"]], .peerNotFound),
        ]
        for (peer, frame, code) in cases {
            peer.send(frame)
            let error = try await peer.next(type: "error")
            XCTAssertEqual(error.error?.code, code.rawValue, JSONWriter.string(frame))
            XCTAssertEqual(error.payloadObject["type"], frame["type"], JSONWriter.string(frame))
        }
        for peer in [ann, carl] {
            peer.send(["type": "ping"])
            _ = try await peer.next(type: "pong")
        }
    }

    // MARK: - Requests

    func test_request_accept_gives_both_sides_tokens_for_the_same_room() async throws {
        let ann = try await presence("ann", "agent", queues: "sales")
        let carl = try await presence("carl", "caller")
        let dash = try await presence("dash", "dashboard")

        carl.send(["type": "request", "payload": ["queue": "sales", "metadata": ["topic": "refund"]]])
        let ack = try await carl.next(type: "request")
        XCTAssertEqual(ack.payloadObject["agent_id"], "ann")
        XCTAssertEqual(ack.payloadObject["state"], "ringing")
        let requestID = try XCTUnwrap(ack.payloadObject["request_id"]?.stringValue)
        XCTAssertTrue(requestID.hasPrefix("req_"))
        let offer = try await ann.next(type: "request")
        XCTAssertEqual(offer.payloadObject["request_id"], .string(requestID))
        XCTAssertEqual(offer.payloadObject["from"], "carl")
        XCTAssertEqual(offer.payloadObject["metadata"], ["topic": "refund"])

        ann.send(["type": "accept", "payload": ["request_id": .string(requestID)]])
        let agentSide = try await ann.next(type: "accepted")
        let callerSide = try await carl.next(type: "accepted")
        for side in [agentSide, callerSide] {
            XCTAssertEqual(side.payloadObject["request_id"], .string(requestID))
        }
        XCTAssertEqual(agentSide.payloadObject["call_id"], callerSide.payloadObject["call_id"])
        XCTAssertEqual(agentSide.payloadObject["room_id"], callerSide.payloadObject["room_id"])
        let roomID = try XCTUnwrap(callerSide.payloadObject["room_id"]?.stringValue)
        let callID = try XCTUnwrap(callerSide.payloadObject["call_id"]?.stringValue)
        XCTAssertTrue(roomID.hasPrefix("room_") && callID.hasPrefix("call_"), "\(roomID) \(callID)")
        let agentToken = try XCTUnwrap(agentSide.payloadObject["token"]?.stringValue)
        let callerToken = try XCTUnwrap(callerSide.payloadObject["token"]?.stringValue)
        XCTAssertNotEqual(agentToken, callerToken, "each side gets its own token")

        let busy = try await dash.next(type: "status")
        XCTAssertEqual(busy.payloadObject["agent_id"], "ann")
        XCTAssertEqual(busy.payloadObject["status"], "busy")

        // The tokens open the room protocol, into the same room, as the right peers.
        let callerInRoom = try await TestPeer.connect(loop: server.loop, port: server.port, token: callerToken)
        XCTAssertEqual(callerInRoom.welcome.payloadObject["peer_id"], "carl")
        XCTAssertEqual(callerInRoom.welcome.payloadObject["role"], "caller")
        XCTAssertEqual(callerInRoom.welcome.payloadObject["room_id"], .string(roomID))
        XCTAssertEqual(callerInRoom.welcome.payloadObject["call_id"], .string(callID))
        let agentInRoom = try await TestPeer.connect(loop: server.loop, port: server.port, token: agentToken)
        XCTAssertEqual(agentInRoom.welcome.payloadObject["peer_id"], "ann")
        XCTAssertEqual(agentInRoom.welcome.payloadObject["role"], "agent")
        XCTAssertEqual(agentInRoom.welcome.payloadObject["room_id"], .string(roomID))
        XCTAssertEqual(agentInRoom.welcome.payloadObject["peers"], [["peer_id": "carl", "role": "caller", "name": .null]])
        let joined = try await callerInRoom.next(type: "peer-joined")
        XCTAssertEqual(joined.from, "ann")
        agentInRoom.send(["type": "offer", "to": "carl", "payload": ["sdp": "v=0\r\n"]])
        let relayed = try await callerInRoom.next(type: "offer")
        XCTAssertEqual(relayed.from, "ann")

        // First accept won; a second one is a conflict.
        ann.send(["type": "accept", "payload": ["request_id": .string(requestID)]])
        let late = try await ann.next(type: "error")
        XCTAssertEqual(late.error?.code, ErrorCode.conflict.rawValue)
        XCTAssertEqual(late.payloadObject["request_id"], .string(requestID))
    }

    func test_decline_ends_the_request_on_both_sides() async throws {
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let id = try await ring(carl, ann)
        ann.send(["type": "decline", "payload": ["request_id": .string(id)]])
        for peer in [ann, carl] {
            let ended = try await peer.next(type: "ended")
            XCTAssertEqual(ended.payloadObject["request_id"], .string(id))
            XCTAssertEqual(ended.payloadObject["reason"], "declined")
        }
    }

    func test_cancel_ends_the_request_on_both_sides() async throws {
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let id = try await ring(carl, ann)
        carl.send(["type": "cancel", "payload": ["request_id": .string(id)]])
        for peer in [ann, carl] {
            let ended = try await peer.next(type: "ended")
            XCTAssertEqual(ended.payloadObject["reason"], "cancelled")
        }
        ann.send(["type": "accept", "payload": ["request_id": .string(id)]])
        let late = try await ann.next(type: "error")
        XCTAssertEqual(late.error?.code, ErrorCode.conflict.rawValue)
    }

    func test_an_unanswered_request_times_out() async throws {
        try restart { $0.presenceRequestTTLSeconds = 1 }
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let started = Date()
        let id = try await ring(carl, ann)
        for peer in [ann, carl] {
            let ended = try await peer.next(type: "ended", timeout: 5)
            XCTAssertEqual(ended.payloadObject["request_id"], .string(id))
            XCTAssertEqual(ended.payloadObject["reason"], "timeout")
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.9)
    }

    func test_a_caller_that_disconnects_ends_its_request() async throws {
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let id = try await ring(carl, ann)
        carl.close()
        let ended = try await ann.next(type: "ended")
        XCTAssertEqual(ended.payloadObject["request_id"], .string(id))
        XCTAssertEqual(ended.payloadObject["reason"], "disconnected")
    }

    // MARK: - Room limits

    func test_the_room_of_an_accepted_call_obeys_max_peers_per_room() async throws {
        try restart { $0.maxPeersPerRoom = 2 }
        let ann = try await presence("ann", "agent")
        let carl = try await presence("carl", "caller")
        let id = try await ring(carl, ann)
        ann.send(["type": "accept", "payload": ["request_id": .string(id)]])
        let agentAccepted = try await ann.next(type: "accepted")
        let agentToken = try XCTUnwrap(agentAccepted.payloadObject["token"]?.stringValue)
        let accepted = try await carl.next(type: "accepted")
        let callerToken = try XCTUnwrap(accepted.payloadObject["token"]?.stringValue)
        let room = try XCTUnwrap(accepted.payloadObject["room_id"]?.stringValue)

        let callerInRoom = try await TestPeer.connect(loop: server.loop, port: server.port, token: callerToken)
        let agentInRoom = try await TestPeer.connect(loop: server.loop, port: server.port, token: agentToken)
        do {
            _ = try await TestPeer.connect(loop: server.loop, port: server.port, token: server.token(peer: "eve", room: room))
            XCTFail("a third peer joined a full room")
        } catch TestPeerError.connectFailed(let status, _) {
            XCTAssertEqual(status, 409)
        }
        let again = try await TestPeer.connect(loop: server.loop, port: server.port, token: agentToken)
        XCTAssertEqual(again.welcome.payloadObject["peer_id"], "ann", "the agent reconnecting takes its own seat")
        let replaced = try await agentInRoom.closeEvent()
        XCTAssertEqual(replaced.code, 4400)
        withExtendedLifetime(callerInRoom) {}
    }
}
