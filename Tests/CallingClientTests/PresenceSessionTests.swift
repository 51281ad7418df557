import CallingProtocol
import Foundation
import XCTest

@testable import CallingClient

/// The presence client's decisions, pure: connect, typed frames, reconnect after a drop, 4401
/// with and without a token provider. Time moves by hand.
final class PresenceSessionTests: XCTestCase {
    private var session = PresenceSession(token: "p1", settings: PresenceSession.Settings())
    private var now: TimeInterval = 0
    private var timers: [PresenceTimer: TimeInterval] = [:]
    private var resumed: [Waiter: Result<PresenceOutcome, CallingError>] = [:]

    @discardableResult
    private func input(_ input: PresenceInput) -> [PresenceAction] {
        let actions = session.handle(input)
        for action in actions {
            switch action {
            case .arm(let timer, let delay): timers[timer] = now + delay
            case .cancel(let timer): timers[timer] = nil
            case .resume(let waiter, let result): resumed[waiter] = result
            default: break
            }
        }
        return actions
    }

    @discardableResult
    private func advance(by seconds: TimeInterval) -> [PresenceAction] {
        let end = now + seconds
        var actions: [PresenceAction] = []
        while let (timer, due) = timers.filter({ $0.value <= end }).min(by: { $0.value < $1.value }) {
            now = due
            timers[timer] = nil
            actions += input(.timerFired(timer))
        }
        now = end
        return actions
    }

    private func server(_ json: JSONValue) -> [PresenceAction] {
        input(.socketText(session.socket, JSONWriter.string(json)))
    }

    private func events(_ actions: [PresenceAction]) -> [PresenceEvent] {
        actions.compactMap { if case .emit(let event) = $0 { event } else { nil } }
    }

    private func opened(_ actions: [PresenceAction]) -> String? {
        for case .openSocket(_, _, let token) in actions { return token }
        return nil
    }

    private let snapshot: JSONValue = ["type": "connected", "payload": [
        "peer_id": "ann", "role": "agent", "server_time": 5, "requests": [],
        "agents": [["agent_id": "ann", "status": "away", "note": .null, "queues": ["sales"], "updated_at": 4]],
    ]]

    private func connected(_ settings: PresenceSession.Settings = PresenceSession.Settings()) {
        session = PresenceSession(token: "p1", settings: settings)
        input(.connect(token: nil, waiter: 1))
        _ = server(snapshot)
    }

    func test_connect_resolves_with_the_typed_snapshot() {
        XCTAssertEqual(opened(input(.connect(token: nil, waiter: 1))), "p1")
        _ = server(snapshot)
        guard case .success(.snapshot(let value))? = resumed[1] else { return XCTFail("not resolved") }
        XCTAssertEqual(value.peerID, "ann")
        XCTAssertEqual(value.role, .agent)
        XCTAssertEqual(value.agents.first?.status, .away)
        XCTAssertEqual(value.agents.first?.queues, ["sales"])
        XCTAssertEqual(session.state, .connected)
    }

    func test_frames_become_typed_events() {
        connected()
        XCTAssertEqual(events(server(["type": "status", "from": "bo", "payload": [
            "agent_id": "bo", "status": "available", "note": "hi", "queues": [], "updated_at": 9,
        ]])).first, .status(AgentPresence(["agent_id": "bo", "status": "available", "note": "hi", "queues": [], "updated_at": 9])!))
        guard case .request(let offer)? = events(server(["type": "request", "from": "carl", "payload": [
            "request_id": "r1", "from": "carl", "name": "Carl", "queue": .null, "metadata": ["a": 1], "expires_at": 99,
        ]])).first else { return XCTFail("no request") }
        XCTAssertEqual(offer.requestID, "r1")
        XCTAssertEqual(offer.callerID, "carl")
        XCTAssertEqual(offer.metadata, ["a": 1])
        guard case .ended(let ended)? = events(server(["type": "ended", "payload": ["request_id": "r1", "reason": "timeout"]])).first
        else { return XCTFail("no ended") }
        XCTAssertEqual(ended.reason, .timeout)
        let refused = events(server(["type": "error", "error": ["code": 409, "message": "taken"],
                                     "payload": ["type": "accept", "request_id": "r1"]]))
        XCTAssertEqual(refused, [.error(CallingError(.server(code: 409, message: "taken")), requestID: "r1", frameType: "accept")])
    }

    func test_a_drop_reconnects_with_backoff_and_a_terminal_close_does_not() {
        connected()
        let dropped = input(.socketClosed(session.socket, code: 1001, reason: "server shutting down"))
        XCTAssertEqual(events(dropped).first, .closed(code: 1001, reason: "server shutting down"))
        XCTAssertEqual(session.state, .reconnecting(attempt: 1))
        XCTAssertNil(opened(advance(by: 0.9)))
        XCTAssertEqual(opened(advance(by: 0.1)), "p1")
        _ = server(snapshot)
        XCTAssertEqual(session.state, .connected)
        input(.socketClosed(session.socket, code: 4400, reason: "replaced"))
        XCTAssertEqual(session.state, .failed(.replaced))
        XCTAssertNil(opened(advance(by: 60)))
    }

    func test_token_expired_reconnects_only_with_a_token_provider() {
        connected()
        input(.socketClosed(session.socket, code: 4401, reason: "token expired"))
        XCTAssertEqual(session.state, .failed(.tokenExpired))

        var settings = PresenceSession.Settings()
        settings.hasTokenProvider = true
        connected(settings)
        input(.socketClosed(session.socket, code: 4401, reason: "token expired"))
        XCTAssertEqual(session.state, .reconnecting(attempt: 1))
        XCTAssertTrue(advance(by: 1).contains(.refreshToken(attempt: 1)))
        XCTAssertEqual(opened(input(.tokenRefreshed(attempt: 1, .success("p2")))), "p2")
    }

    func test_the_first_connect_is_not_retried_and_senders_need_a_connection() {
        input(.connect(token: nil, waiter: 1))
        input(.socketFailed(session.socket, status: 403, message: "forbidden"))
        guard case .failure(let error)? = resumed[1] else { return XCTFail("not rejected") }
        XCTAssertEqual(error.httpStatus, 403)
        XCTAssertNil(opened(advance(by: 60)))
        XCTAssertThrowsError(try session.send("ping", nil)) { XCTAssertEqual($0 as? CallingError, .notConnected) }
    }

    private func sent(_ actions: [PresenceAction]) -> [Frame] {
        actions.compactMap { if case .send(let frame) = $0 { frame } else { nil } }
    }

    private func agentSnapshot(_ status: String, note: JSONValue, queues: [JSONValue]) -> JSONValue {
        ["type": "connected", "payload": [
            "peer_id": "ann", "role": "agent", "server_time": 5, "requests": [],
            "agents": [["agent_id": "ann", "status": .string(status), "note": note, "queues": .array(queues), "updated_at": 4]],
        ]]
    }

    private func reconnect(to snapshot: JSONValue) -> [PresenceAction] {
        input(.socketClosed(session.socket, code: 1001, reason: "server shutting down"))
        _ = advance(by: 1)
        return server(snapshot)
    }

    func test_a_reconnect_sets_the_agents_last_status_again_unless_the_server_kept_it() throws {
        connected()
        XCTAssertEqual(sent(try session.setStatus(.busy, note: "on a call", queues: ["vip"])),
                       [Frame(type: "status", payload: ["status": "busy", "note": "on a call", "queues": ["vip"]])])
        // A restarted server: ann is back `available` with the URL's queues.
        XCTAssertEqual(sent(reconnect(to: agentSnapshot("available", note: .null, queues: ["sales"]))),
                       [Frame(type: "status", payload: ["status": "busy", "note": "on a call", "queues": ["vip"]])])
        // Back within the grace period: the server kept it, nothing is sent.
        XCTAssertEqual(sent(reconnect(to: agentSnapshot("busy", note: "on a call", queues: ["vip"]))), [])
        // The server's own change (busy on accept, here `away` with the note cleared) is what is restored next.
        _ = server(["type": "status", "from": "ann", "payload": [
            "agent_id": "ann", "status": "away", "note": .null, "queues": ["vip"], "updated_at": 9,
        ]])
        XCTAssertEqual(sent(reconnect(to: agentSnapshot("available", note: "stale", queues: ["vip"]))),
                       [Frame(type: "status", payload: ["status": "away", "note": .null, "queues": ["vip"]])])
        // Another agent's status is not ours to restore.
        _ = server(["type": "status", "from": "bo", "payload": [
            "agent_id": "bo", "status": "offline", "note": .null, "queues": [], "updated_at": 10,
        ]])
        XCTAssertEqual(session.agentStatus?.status, .away)
        // disconnect() forgets it: a new session starts from what the server has.
        input(.disconnect(waiter: 2))
        input(.socketClosed(session.socket, code: 1000, reason: "normal"))
        input(.connect(token: nil, waiter: 3))
        XCTAssertEqual(sent(server(agentSnapshot("available", note: .null, queues: ["sales"]))), [])
    }

    func test_an_agent_that_never_set_a_status_is_left_as_the_server_has_it() {
        connected()
        XCTAssertEqual(sent(reconnect(to: agentSnapshot("available", note: .null, queues: ["sales"]))), [])
        // A status set without note or queues restores only the status.
        XCTAssertNoThrow(try session.setStatus(.away, note: nil, queues: nil))
        XCTAssertEqual(sent(reconnect(to: agentSnapshot("available", note: "kept", queues: ["sales"]))),
                       [Frame(type: "status", payload: ["status": "away"])])
    }
}
