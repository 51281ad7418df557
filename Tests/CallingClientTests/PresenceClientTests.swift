import Foundation
import XCTest

@testable import CallingClient

/// The presence channel through `PresenceClient`, ending in a room joined with the minted tokens.
final class PresenceClientTests: ClientTestCase {
    func test_request_accept_gives_both_sides_tokens_for_the_same_room() async throws {
        let ann = PresenceClient(url: server.url, token: try server.presenceToken("ann", role: "agent", name: "Ann"),
                                 queues: ["sales"], loop: server.loop)
        let carl = PresenceClient(url: server.url, token: try server.presenceToken("carl", role: "caller", name: "Carl"),
                                  loop: server.loop)
        let annEvents = EventLog(ann.events)
        let carlEvents = EventLog(carl.events)
        let snapshot = try await ann.connect()
        XCTAssertEqual(snapshot["agents"]?.arrayValue?.first?["agent_id"], "ann")
        XCTAssertEqual(snapshot["agents"]?.arrayValue?.first?["queues"], ["sales"])
        let carlSnapshot = try await carl.connect()
        XCTAssertEqual(carlSnapshot["role"], "caller")

        try ann.setStatus("available", note: "ready")
        _ = try await carlEvents.first { if case .status(let s) = $0, s["note"] == "ready" { s } else { nil } }

        try carl.request(agentId: "ann", metadata: ["topic": "billing"])
        let ringing = try await carlEvents.first { if case .request(let p) = $0 { p } else { nil } }
        XCTAssertEqual(ringing["state"], "ringing")
        let offer = try await annEvents.first { if case .request(let p) = $0 { p } else { nil } }
        XCTAssertEqual(offer["from"], "carl")
        XCTAssertEqual(offer["name"], "Carl")
        XCTAssertEqual(offer["metadata"], ["topic": "billing"])
        let requestId = try XCTUnwrap(offer["request_id"]?.stringValue)

        try ann.accept(requestId)
        let annAccepted = try await annEvents.first { if case .accepted(let a) = $0 { a } else { nil } }
        let carlAccepted = try await carlEvents.first { if case .accepted(let a) = $0 { a } else { nil } }
        XCTAssertEqual(annAccepted.roomId, carlAccepted.roomId)
        XCTAssertEqual(annAccepted.callId, carlAccepted.callId)
        XCTAssertEqual(carlAccepted.agentId, "ann")
        XCTAssertEqual(carlAccepted.callerId, "carl")
        _ = try await carlEvents.first { if case .status(let s) = $0, s["status"] == "busy" { s } else { nil } }

        // A second accept of the same request is refused; the connection stays open.
        try ann.accept(requestId)
        let (refusal, payload) = try await annEvents.first { if case .error(let e, let p) = $0 { (e, p) } else { nil } }
        XCTAssertEqual(refusal.serverCode, 409)
        XCTAssertEqual(payload?["request_id"], .string(requestId))

        // The minted tokens open the same room.
        let agentRoom = try server.client("ann", token: annAccepted.token)
        let callerRoom = try server.client("carl", token: carlAccepted.token)
        try await agentRoom.connect()
        let welcome = try await callerRoom.connect()
        XCTAssertEqual(welcome.roomId, annAccepted.roomId)
        XCTAssertEqual(welcome.callId, annAccepted.callId)
        XCTAssertEqual(welcome.role, "caller")
        XCTAssertEqual(callerRoom.peers.map(\.peerId), ["ann"])
        XCTAssertEqual(callerRoom.peers.first?.role, "agent")
        let ack = try await callerRoom.sendChat("hello agent")
        XCTAssertEqual(ack.seq, 1)

        await agentRoom.disconnect()
        await callerRoom.disconnect()
        await carl.disconnect()
        await ann.disconnect()
        _ = try await annEvents.first { if case .disconnected = $0 { true } else { nil } }
        XCTAssertFalse(ann.isConnected)
    }

    func test_decline_and_cancel_end_the_request() async throws {
        let ann = PresenceClient(url: server.url, token: try server.presenceToken("ann", role: "agent"), loop: server.loop)
        let carl = PresenceClient(url: server.url, token: try server.presenceToken("carl", role: "caller"), loop: server.loop)
        let annEvents = EventLog(ann.events)
        let carlEvents = EventLog(carl.events)
        try await ann.connect()
        try await carl.connect()

        try carl.request(agentId: "ann")
        let first = try await annEvents.first { if case .request(let p) = $0 { p["request_id"]?.stringValue } else { nil } }
        try ann.decline(first)
        let declined = try await carlEvents.first { if case .ended(let id, let reason) = $0 { (id, reason) } else { nil } }
        XCTAssertEqual(declined.0, first)
        XCTAssertEqual(declined.1, "declined")

        try carl.request(agentId: "ann")
        try await annEvents.waitCount(2) { if case .request = $0 { true } else { false } }
        let second = annEvents.all.compactMap { if case .request(let p) = $0 { p["request_id"]?.stringValue } else { nil } }.last!
        try carl.cancel(second)
        let cancelled = try await annEvents.first { if case .ended(second, let reason) = $0 { reason } else { nil } }
        XCTAssertEqual(cancelled, "cancelled")
        await carl.disconnect()
        await ann.disconnect()
    }

    func test_a_presence_token_without_the_scope_is_refused() async throws {
        let roomToken = try server.token(peer: "ann")
        let ann = PresenceClient(url: server.url, token: roomToken, loop: server.loop)
        do {
            try await ann.connect()
            XCTFail("must be refused")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 403)
            XCTAssertFalse(error.isRetryable)
        }
    }
}
