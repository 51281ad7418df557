import Foundation
import XCTest

@testable import CallingClient

/// The presence channel through `PresenceClient`, ending in a room joined with the minted tokens.
final class PresenceClientTests: ClientTestCase {
    func test_request_accept_gives_both_sides_tokens_for_the_same_room() async throws {
        let ann = try server.presence("ann", role: "agent", name: "Ann") { $0.queues = ["sales"] }
        let carl = try server.presence("carl", role: "caller", name: "Carl")
        let annEvents = EventLog(ann.events)
        let carlEvents = EventLog(carl.events)
        let snapshot = try await ann.connect()
        XCTAssertEqual(snapshot.agents.first?.agentID, "ann")
        XCTAssertEqual(snapshot.agents.first?.queues, ["sales"])
        XCTAssertEqual(snapshot.role, .agent)
        let carlSnapshot = try await carl.connect()
        XCTAssertEqual(carlSnapshot.role, .caller)
        XCTAssertEqual(carlSnapshot.peerID, "carl")

        try ann.setStatus(.available, note: "ready")
        let status = try await carlEvents.first { if case .status(let s) = $0, s.note == "ready" { s } else { nil } }
        XCTAssertEqual(status.status, .available)

        try carl.request(agentID: "ann", metadata: ["topic": "billing"])
        let ringing = try await carlEvents.first { if case .request(let p) = $0 { p } else { nil } }
        XCTAssertEqual(ringing.agentID, "ann")
        let offer = try await annEvents.first { if case .request(let p) = $0 { p } else { nil } }
        XCTAssertEqual(offer.callerID, "carl")
        XCTAssertEqual(offer.name, "Carl")
        XCTAssertEqual(offer.metadata, ["topic": "billing"])
        XCTAssertEqual(offer.requestID, ringing.requestID)
        let requestID = offer.requestID

        try ann.accept(requestID)
        let annAccepted = try await annEvents.first { if case .accepted(let a) = $0 { a } else { nil } }
        let carlAccepted = try await carlEvents.first { if case .accepted(let a) = $0 { a } else { nil } }
        XCTAssertEqual(annAccepted.roomID, carlAccepted.roomID)
        XCTAssertEqual(annAccepted.callID, carlAccepted.callID)
        XCTAssertEqual(carlAccepted.agentID, "ann")
        XCTAssertEqual(carlAccepted.callerID, "carl")
        _ = try await carlEvents.first { if case .status(let s) = $0, s.status == .busy { s } else { nil } }

        // A second accept of the same request is refused; the connection stays open.
        try ann.accept(requestID)
        let (refusal, refused, type) = try await annEvents.first {
            if case .error(let e, let id, let type) = $0 { (e, id, type) } else { nil }
        }
        XCTAssertEqual(refusal.serverCode, 409)
        XCTAssertEqual(refused, requestID)
        XCTAssertEqual(type, "accept")

        // The minted tokens open the same room.
        let agentRoom = try server.client("ann", token: try XCTUnwrap(annAccepted.token))
        let callerRoom = try server.client("carl", token: try XCTUnwrap(carlAccepted.token))
        try await agentRoom.connect()
        let welcome = try await callerRoom.connect()
        XCTAssertEqual(welcome.roomID, annAccepted.roomID)
        XCTAssertEqual(welcome.callID, annAccepted.callID)
        XCTAssertEqual(welcome.role, "caller")
        XCTAssertEqual(callerRoom.peers.map(\.peerID), ["ann"])
        XCTAssertEqual(callerRoom.peers.first?.role, "agent")
        let ack = try await callerRoom.sendChat("hello agent")
        XCTAssertEqual(ack.seq, 1)

        await agentRoom.disconnect()
        await callerRoom.disconnect()
        await carl.disconnect()
        await ann.disconnect()
        _ = try await annEvents.first { if case .disconnected(nil) = $0 { true } else { nil } }
        XCTAssertFalse(ann.isConnected)
        XCTAssertEqual(ann.state, .ended)
    }

    func test_decline_and_cancel_end_the_request() async throws {
        let ann = try server.presence("ann", role: "agent")
        let carl = try server.presence("carl", role: "caller")
        let annEvents = EventLog(ann.events)
        let carlEvents = EventLog(carl.events)
        try await ann.connect()
        try await carl.connect()

        try carl.request(agentID: "ann")
        let first = try await annEvents.first { if case .request(let p) = $0 { p.requestID } else { nil } }
        try ann.decline(first)
        let declined = try await carlEvents.first { if case .ended(let ended) = $0 { ended } else { nil } }
        XCTAssertEqual(declined.requestID, first)
        XCTAssertEqual(declined.reason, .declined)

        try carl.request(agentID: "ann")
        try await annEvents.waitCount(2) { if case .request = $0 { true } else { false } }
        let second = annEvents.all.compactMap { if case .request(let p) = $0 { p.requestID } else { nil } }.last!
        try carl.cancel(second)
        let cancelled = try await annEvents.first { if case .ended(let e) = $0, e.requestID == second { e.reason } else { nil } }
        XCTAssertEqual(cancelled, .cancelled)
        await carl.disconnect()
        await ann.disconnect()
    }

    func test_a_presence_token_without_the_scope_is_refused() async throws {
        let roomToken = try server.token(peer: "ann")
        let ann = PresenceClient(url: server.url, token: roomToken, options: server.presenceOptions())
        do {
            try await ann.connect()
            XCTFail("must be refused")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 403)
            XCTAssertEqual(error.code, "token_wrong_scope")
            XCTAssertFalse(error.isRetryable)
        }
    }

    func test_an_agent_reconnects_after_a_server_restart_and_keeps_taking_requests() async throws {
        let ann = try server.presence("ann", role: "agent") { $0.reconnectDelays = [0.1] }
        let events = EventLog(ann.events)
        try await ann.connect()
        try ann.setStatus(.available)
        try await server.restart()
        let dropped = try await events.first { if case .closed(let code, _) = $0 { code } else { nil } }
        XCTAssertEqual(dropped, 1001)
        try await events.waitCount(2) { if case .connected = $0 { true } else { false } }
        let states = events.all.compactMap { event -> CallState? in if case .stateChanged(let s) = event { s } else { nil } }
        XCTAssertEqual(states, [.connecting, .connected, .reconnecting(attempt: 1), .connected])
        try ann.setStatus(.available)
        let carl = try server.presence("carl", role: "caller")
        let carlEvents = EventLog(carl.events)
        try await carl.connect()
        try carl.request(agentID: "ann")
        _ = try await carlEvents.first { if case .request(let r) = $0 { r } else { nil } }
        await carl.disconnect()
        await ann.disconnect()
    }

    func test_after_a_server_restart_the_agent_gets_its_status_note_and_queues_back() async throws {
        // The server keeps presence in memory: the restarted one lists ann `available` with the
        // URL's queues until the client sets what the app had set again.
        let ann = try server.presence("ann", role: "agent") {
            $0.reconnectDelays = [0.1]
            $0.queues = ["sales"]
        }
        let events = EventLog(ann.events)
        try await ann.connect()
        try ann.setStatus(.away, note: "lunch", queues: ["sales", "vip"])
        let isAway: (PresenceEvent) -> Bool = { if case .status(let s) = $0, s.agentID == "ann", s.status == .away { true } else { false } }
        try await events.waitCount(1, isAway)
        try await server.restart()
        try await events.waitCount(2) { if case .connected = $0 { true } else { false } }
        try await events.waitCount(2, isAway)

        let dashboard = try server.presence("dash", role: "dashboard")
        let seen = try await dashboard.connect()
        let agent = try XCTUnwrap(seen.agents.first { $0.agentID == "ann" })
        XCTAssertEqual(agent.status, .away)
        XCTAssertEqual(agent.note, "lunch")
        XCTAssertEqual(agent.queues.sorted(), ["sales", "vip"])
        await dashboard.disconnect()
        await ann.disconnect()
    }
}
