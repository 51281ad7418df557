import CallingCore
import XCTest

/// The presence hub as its users see it: which frames each connection receives. Ids come from
/// `SequentialPresenceIDs` (`req_1`, `call_2`, …) and time is a plain variable; nothing sleeps.
final class PresenceHubTests: XCTestCase {
    private var hub = PresenceHub(settings: PresenceSettings(graceMs: 30_000, requestTTLMs: 90_000, endedMemoryMs: 120_000))
    private var now: Millis = 1_700_000_000_000

    private let ann = ConnectionID(1)  // agent
    private let bob = ConnectionID(2)  // agent
    private let dash = ConnectionID(3)  // dashboard
    private let carl = ConnectionID(4)  // caller
    private let cora = ConnectionID(5)  // caller
    private let fresh = ConnectionID(6)  // reconnects and takeovers

    // MARK: - Driving the hub

    @discardableResult
    private func connect(_ connection: ConnectionID, _ peer: PeerID, _ role: PresenceRole, name: String? = nil,
                         queues: [QueueName]? = nil) -> [PresenceEffect]
    {
        hub.handle(.connect(connection, PresenceIdentity(peer: peer, role: role, name: name, queues: queues)), now: now)
    }

    @discardableResult
    private func send(_ connection: ConnectionID, _ message: PresenceMessage) -> [PresenceEffect] {
        hub.handle(.message(connection, message), now: now)
    }

    @discardableResult
    private func disconnect(_ connection: ConnectionID) -> [PresenceEffect] {
        hub.handle(.disconnect(connection), now: now)
    }

    @discardableResult
    private func tick() -> [PresenceEffect] { hub.handle(.tick, now: now) }

    private func advance(seconds: Int64) { now += seconds * 1_000 }

    /// Agents ann and bob, a dashboard and caller carl.
    private func connectAll(queues: [QueueName]? = nil) {
        connect(ann, "ann", .agent, queues: queues)
        connect(bob, "bob", .agent, queues: queues)
        connect(dash, "dash", .dashboard)
        connect(carl, "carl", .caller, name: "Carl")
    }

    private func frames(_ effects: [PresenceEffect], to connection: ConnectionID) -> [Frame] {
        effects.compactMap { effect in
            if case .send(let targets, let frame) = effect, targets.contains(connection) { return frame }
            return nil
        }
    }

    private func frame(_ effects: [PresenceEffect], _ type: String, to connection: ConnectionID,
                       file: StaticString = #filePath, line: UInt = #line) -> Frame?
    {
        let found = frames(effects, to: connection).first { $0.type == type }
        if found == nil {
            XCTFail("no \(type) frame for \(connection) in \(effects)", file: file, line: line)
        }
        return found
    }

    private func errorCode(_ effects: [PresenceEffect], to connection: ConnectionID) -> ErrorCode? {
        frames(effects, to: connection).first { $0.type == "error" }?.error.flatMap { ErrorCode(rawValue: $0.code) }
    }

    private func calls(_ effects: [PresenceEffect]) -> [PresenceCall] {
        effects.compactMap { if case .mintCall(let call) = $0 { return call } else { return nil } }
    }

    private func agentEntry(_ frame: Frame?, _ agent: String) -> JSONValue? {
        frame?.payload?["agents"]?.arrayValue?.first { $0["agent_id"] == .string(agent) }
    }

    /// carl asks for `target`; returns the request id the hub chose.
    private func request(_ target: PresenceTarget, from caller: ConnectionID = ConnectionID(4), metadata: JSONValue? = nil,
                         file: StaticString = #filePath, line: UInt = #line) -> PresenceRequestID?
    {
        let effects = send(caller, .request(target, metadata: metadata))
        guard let id = frames(effects, to: caller).first(where: { $0.type == "request" })?.payload?["request_id"]?.stringValue else {
            XCTFail("no request ack in \(effects)", file: file, line: line)
            return nil
        }
        return PresenceRequestID(id)
    }

    // MARK: - Snapshot and status

    func test_every_connection_gets_a_snapshot_of_all_agents() throws {
        connect(ann, "ann", .agent, queues: ["sales"])
        advance(seconds: 1)
        send(ann, .setStatus(.away, note: "lunch", queues: nil))
        let effects = connect(dash, "dash", .dashboard)
        let connected = try XCTUnwrap(frame(effects, "connected", to: dash))
        XCTAssertEqual(connected.payload?["peer_id"], "dash")
        XCTAssertEqual(connected.payload?["role"], "dashboard")
        XCTAssertEqual(agentEntry(connected, "ann"), [
            "agent_id": "ann", "status": "away", "note": "lunch", "queues": ["sales"], "updated_at": .int(now),
        ])
        let callerView = frame(connect(carl, "carl", .caller), "connected", to: carl)
        XCTAssertEqual(agentEntry(callerView, "ann")?["status"], "away")
    }

    func test_a_new_agent_starts_available_and_everybody_hears_it() {
        connect(dash, "dash", .dashboard)
        let effects = connect(ann, "ann", .agent)
        XCTAssertEqual(agentEntry(frame(effects, "connected", to: ann), "ann")?["status"], "available")
        let delta = frame(effects, "status", to: dash)
        XCTAssertEqual(delta?.payload?["agent_id"], "ann")
        XCTAssertEqual(delta?.payload?["status"], "available")
        XCTAssertEqual(delta?.from, "ann")
        XCTAssertEqual(frames(effects, to: ann).map(\.type), ["connected"], "its snapshot already says so")
    }

    func test_status_changes_reach_every_connection_including_the_agent() {
        connectAll()
        advance(seconds: 5)
        let effects = send(ann, .setStatus(.away, note: "back at 2", queues: nil))
        for connection in [ann, bob, dash, carl] {
            let delta = frame(effects, "status", to: connection)
            XCTAssertEqual(delta?.payload?["status"], "away")
            XCTAssertEqual(delta?.payload?["note"], "back at 2")
            XCTAssertEqual(delta?.payload?["updated_at"], .int(now))
        }
    }

    func test_status_survives_a_reconnect_within_the_grace_period() {
        connect(dash, "dash", .dashboard)
        connect(ann, "ann", .agent)
        send(ann, .setStatus(.away, note: "meeting", queues: nil))
        XCTAssertTrue(frames(disconnect(ann), to: dash).isEmpty, "a disconnect alone is not news")
        advance(seconds: 29)
        XCTAssertTrue(tick().isEmpty)
        let effects = connect(fresh, "ann", .agent)
        XCTAssertEqual(agentEntry(frame(effects, "connected", to: fresh), "ann")?["status"], "away")
        XCTAssertEqual(agentEntry(frame(effects, "connected", to: fresh), "ann")?["note"], "meeting")
        XCTAssertTrue(frames(effects, to: dash).isEmpty)
        advance(seconds: 60)
        XCTAssertTrue(tick().isEmpty, "the grace timer stopped when the agent came back")
    }

    func test_grace_expiry_makes_the_agent_offline_and_a_later_connect_available_again() {
        connect(dash, "dash", .dashboard)
        connect(ann, "ann", .agent)
        send(ann, .setStatus(.busy, note: "on a call", queues: nil))
        disconnect(ann)
        advance(seconds: 30)
        let expired = tick()
        let delta = frame(expired, "status", to: dash)
        XCTAssertEqual(delta?.payload?["status"], "offline")
        XCTAssertEqual(delta?.payload?["note"], .null)
        XCTAssertEqual(hub.status(of: "ann"), .offline)
        advance(seconds: 1)
        XCTAssertTrue(tick().isEmpty, "offline is announced once")

        let back = connect(fresh, "ann", .agent)
        XCTAssertEqual(frame(back, "status", to: dash)?.payload?["status"], "available")
    }

    func test_agents_offline_and_unconnected_for_the_forget_period_leave_the_snapshot() {
        hub = PresenceHub(settings: PresenceSettings(graceMs: 30_000, requestTTLMs: 90_000, forgetMs: 3_600_000))
        connect(ann, "ann", .agent)
        connect(bob, "bob", .agent)
        disconnect(ann)
        disconnect(bob)
        connect(fresh, "bob", .agent)  // bob came back: kept
        advance(seconds: 30)
        tick()
        advance(seconds: 3_600)
        tick()
        let snapshot = frame(connect(dash, "dash", .dashboard), "connected", to: dash)
        let listed = snapshot?.payload?["agents"]?.arrayValue?.compactMap { $0["agent_id"]?.stringValue }
        XCTAssertEqual(listed, ["bob"])
        XCTAssertEqual(hub.status(of: "ann"), nil)
    }

    func test_an_offline_the_agent_chose_survives_reconnects() {
        connect(ann, "ann", .agent)
        send(ann, .setStatus(.offline, note: nil, queues: nil))
        disconnect(ann)
        advance(seconds: 60)
        tick()
        connect(fresh, "ann", .agent)
        XCTAssertEqual(hub.status(of: "ann"), .offline)
    }

    func test_a_second_agent_connection_takes_over_and_the_old_one_is_closed_replaced() {
        connect(dash, "dash", .dashboard)
        connect(ann, "ann", .agent)
        let effects = connect(fresh, "ann", .agent)
        XCTAssertTrue(effects.contains(.close(ann, .replaced)))
        XCTAssertNotNil(frame(effects, "connected", to: fresh))
        XCTAssertTrue(frames(effects, to: dash).isEmpty, "the status did not change")
        XCTAssertTrue(disconnect(ann).isEmpty, "the replaced connection's close changes nothing")
        advance(seconds: 60)
        XCTAssertTrue(tick().isEmpty, "the agent is still connected")
        let delta = send(fresh, .setStatus(.away, note: nil, queues: nil))
        XCTAssertEqual(frame(delta, "status", to: fresh)?.payload?["status"], "away")
        XCTAssertTrue(frames(delta, to: ann).isEmpty, "the replaced connection hears nothing more")
    }

    func test_queues_come_from_connect_and_are_replaced_by_status() {
        connect(ann, "ann", .agent, queues: ["sales", "support"])
        let effects = send(ann, .setStatus(.available, note: nil, queues: ["billing"]))
        XCTAssertEqual(frame(effects, "status", to: ann)?.payload?["queues"], ["billing"])
        disconnect(ann)
        let back = connect(fresh, "ann", .agent)
        XCTAssertEqual(agentEntry(frame(back, "connected", to: fresh), "ann")?["queues"], ["billing"],
                       "a connect without queues keeps the list")
        let changed = connect(ConnectionID(7), "ann", .agent, queues: ["sales"])
        XCTAssertEqual(agentEntry(frame(changed, "connected", to: ConnectionID(7)), "ann")?["queues"], ["sales"])
    }

    func test_ping_is_answered_with_pong_for_every_role() {
        connectAll()
        for connection in [ann, dash, carl] {
            let pong = frames(send(connection, .ping(payload: ["n": 3])), to: connection)
            XCTAssertEqual(pong, [Frame(type: "pong", payload: ["n": 3])])
        }
    }

    // MARK: - Requests

    func test_request_rings_the_agent_and_acks_the_caller() {
        connectAll()
        let effects = send(carl, .request(.agent("ann"), metadata: ["topic": "refund"]))
        let offer = frame(effects, "request", to: ann)
        XCTAssertEqual(offer?.payload?["request_id"], "req_1")
        XCTAssertEqual(offer?.payload?["from"], "carl")
        XCTAssertEqual(offer?.payload?["name"], "Carl")
        XCTAssertEqual(offer?.payload?["metadata"], ["topic": "refund"])
        XCTAssertEqual(offer?.payload?["expires_at"], .int(now + 90_000))
        let ack = frame(effects, "request", to: carl)
        XCTAssertEqual(ack?.payload?["request_id"], "req_1")
        XCTAssertEqual(ack?.payload?["agent_id"], "ann")
        XCTAssertEqual(ack?.payload?["state"], "ringing")
        XCTAssertTrue(frames(effects, to: bob).isEmpty)
        // A supervisor sees who rings whom, but not the caller's metadata, which is for the agent.
        let watched = frame(effects, "request", to: dash)
        XCTAssertEqual(watched?.payload, ["request_id": "req_1", "agent_id": "ann", "caller_id": "carl", "name": "Carl",
                                          "queue": .null, "state": "ringing", "expires_at": .int(now + 90_000)])
    }

    func test_a_supervisor_follows_each_request_to_its_outcome_without_seeing_tokens() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        // A dashboard that connects while it rings finds it in its snapshot.
        let late = ConnectionID(9)
        let snapshot = try XCTUnwrap(frame(connect(late, "dash-2", .dashboard), "connected", to: late))
        XCTAssertEqual(snapshot.payload?["requests"]?.arrayValue?.first?["request_id"], .string(id.rawValue))
        let accepted = send(ann, .accept(id))
        let seen = try XCTUnwrap(frame(accepted, "accepted", to: dash))
        XCTAssertEqual(seen.payload?["room_id"], "room_3")
        XCTAssertEqual(seen.payload?["agent_id"], "ann")
        XCTAssertEqual(seen.payload?["caller_id"], "carl")
        XCTAssertNil(seen.payload?["token"], "room tokens go only to the two parties")
        XCTAssertNotNil(frame(accepted, "accepted", to: late))

        send(bob, .setStatus(.available, note: nil, queues: nil))
        let second = try XCTUnwrap(request(.agent("bob")))
        let declined = send(bob, .decline(second))
        XCTAssertEqual(frame(declined, "ended", to: dash)?.payload,
                       ["request_id": .string(second.rawValue), "reason": "declined", "agent_id": "bob", "caller_id": "carl"])
        let empty = try XCTUnwrap(frame(connect(ConnectionID(10), "dash-3", .dashboard), "connected", to: ConnectionID(10)))
        XCTAssertEqual(empty.payload?["requests"], .array([]))
        // Callers and agents do not get the supervisor's list.
        XCTAssertNil(frame(connect(ConnectionID(11), "carl-2", .caller), "connected", to: ConnectionID(11))?.payload?["requests"])
    }

    func test_accept_mints_one_call_and_makes_the_agent_busy() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let effects = send(ann, .accept(id))
        let call = try XCTUnwrap(calls(effects).first)
        XCTAssertEqual(call, PresenceCall(requestID: id, callID: "call_2", roomID: "room_3", caller: "carl", callerName: "Carl",
                                          callerConnection: carl, agent: "ann", agentName: nil, agentConnection: ann))
        XCTAssertEqual(frame(effects, "status", to: dash)?.payload?["status"], "busy")
        XCTAssertEqual(hub.status(of: "ann"), .busy)
        let accepted = call.acceptedFrame(token: "t")
        XCTAssertEqual(accepted.payload, ["request_id": .string(id.rawValue), "call_id": "call_2", "room_id": "room_3",
                                          "agent_id": "ann", "caller_id": "carl", "token": "t"])
    }

    func test_first_accept_wins_and_later_answers_get_409() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        XCTAssertEqual(calls(send(ann, .accept(id))).count, 1)
        let again = send(ann, .accept(id))
        XCTAssertTrue(calls(again).isEmpty)
        XCTAssertEqual(errorCode(again, to: ann), .conflict)
        XCTAssertEqual(frame(again, "error", to: ann)?.payload, ["type": "accept", "request_id": .string(id.rawValue)])
        XCTAssertEqual(errorCode(send(ann, .decline(id)), to: ann), .conflict)
        XCTAssertEqual(errorCode(send(carl, .cancel(id)), to: carl), .conflict)
    }

    func test_decline_ends_the_request_for_both_sides() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let effects = send(ann, .decline(id))
        let ended = Frame(type: "ended", payload: ["request_id": .string(id.rawValue), "reason": "declined"])
        XCTAssertEqual(frames(effects, to: ann), [ended])
        XCTAssertEqual(frames(effects, to: carl), [ended])
        XCTAssertEqual(hub.status(of: "ann"), .available)
        XCTAssertEqual(errorCode(send(ann, .accept(id)), to: ann), .conflict, "accepting an ended request")
    }

    func test_cancel_by_the_caller_ends_it_for_both() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let effects = send(carl, .cancel(id))
        XCTAssertEqual(frame(effects, "ended", to: ann)?.payload?["reason"], "cancelled")
        XCTAssertEqual(frame(effects, "ended", to: carl)?.payload?["reason"], "cancelled")
        XCTAssertEqual(hub.ringingCount, 0)
    }

    func test_unanswered_request_times_out_after_the_ttl() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        advance(seconds: 89)
        XCTAssertTrue(tick().isEmpty)
        advance(seconds: 1)
        let effects = tick()
        XCTAssertEqual(frame(effects, "ended", to: ann)?.payload, ["request_id": .string(id.rawValue), "reason": "timeout"])
        XCTAssertEqual(frame(effects, "ended", to: carl)?.payload?["reason"], "timeout")
        XCTAssertEqual(errorCode(send(ann, .accept(id)), to: ann), .conflict)
    }

    func test_ended_requests_are_forgotten_after_a_while_and_then_read_as_unknown() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        send(carl, .cancel(id))
        advance(seconds: 120)
        tick()
        XCTAssertEqual(errorCode(send(ann, .accept(id)), to: ann), .peerNotFound)
    }

    func test_a_disconnect_of_either_side_ends_the_request() throws {
        connectAll()
        let first = try XCTUnwrap(request(.agent("ann")))
        let callerGone = disconnect(carl)
        XCTAssertEqual(frame(callerGone, "ended", to: ann)?.payload, ["request_id": .string(first.rawValue), "reason": "disconnected"])

        connect(cora, "cora", .caller)
        let second = try XCTUnwrap(request(.agent("bob"), from: cora))
        let agentGone = disconnect(bob)
        XCTAssertEqual(frame(agentGone, "ended", to: cora)?.payload, ["request_id": .string(second.rawValue), "reason": "disconnected"])
        XCTAssertEqual(hub.ringingCount, 0)
    }

    func test_a_ringing_request_follows_the_agent_to_its_new_connection() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let effects = connect(fresh, "ann", .agent)
        XCTAssertEqual(frames(effects, to: fresh).map(\.type), ["connected", "request"])
        XCTAssertEqual(frame(effects, "request", to: fresh)?.payload?["request_id"], .string(id.rawValue))
        XCTAssertEqual(calls(send(fresh, .accept(id))).first?.agentConnection, fresh)
    }

    func test_an_agent_turning_away_declines_what_rings() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let effects = send(ann, .setStatus(.away, note: nil, queues: nil))
        XCTAssertEqual(frame(effects, "ended", to: carl)?.payload, ["request_id": .string(id.rawValue), "reason": "declined"])
    }

    func test_failed_minting_ends_the_request_and_frees_the_agent() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        send(ann, .accept(id))
        let effects = hub.handle(.callFailed(id), now: now)
        XCTAssertEqual(frame(effects, "ended", to: carl)?.payload?["reason"], "failed")
        XCTAssertEqual(frame(effects, "ended", to: ann)?.payload?["reason"], "failed")
        XCTAssertEqual(frame(effects, "status", to: dash)?.payload?["status"], "available")
        XCTAssertTrue(hub.handle(.callFailed(id), now: now).isEmpty, "reported once")
    }

    // MARK: - Queue routing

    func test_queue_request_goes_to_the_longest_idle_available_agent() {
        connect(ann, "ann", .agent, queues: ["sales"])
        advance(seconds: 1)
        connect(bob, "bob", .agent, queues: ["sales", "support"])
        advance(seconds: 1)
        connect(ConnectionID(7), "abe", .agent, queues: ["support"])
        connect(carl, "carl", .caller)
        connect(cora, "cora", .caller)

        // ann has been available longest.
        let first = send(carl, .request(.queue("sales"), metadata: nil))
        XCTAssertEqual(frame(first, "request", to: carl)?.payload?["agent_id"], "ann")
        XCTAssertEqual(frame(first, "request", to: carl)?.payload?["queue"], "sales")
        XCTAssertEqual(frame(first, "request", to: ann)?.payload?["queue"], "sales")
        // ann is ringing, so the next sales caller gets bob.
        let second = send(cora, .request(.queue("sales"), metadata: nil))
        XCTAssertEqual(frame(second, "request", to: cora)?.payload?["agent_id"], "bob")
    }

    func test_queue_routing_skips_busy_away_and_disconnected_agents() {
        connect(ann, "ann", .agent, queues: ["sales"])
        advance(seconds: 1)
        connect(bob, "bob", .agent, queues: ["sales"])
        advance(seconds: 1)
        connect(ConnectionID(7), "abe", .agent, queues: ["sales"])
        connect(carl, "carl", .caller)
        send(ann, .setStatus(.away, note: nil, queues: nil))
        disconnect(bob)
        let effects = send(carl, .request(.queue("sales"), metadata: nil))
        XCTAssertEqual(frame(effects, "request", to: carl)?.payload?["agent_id"], "abe")
    }

    func test_becoming_available_again_moves_an_agent_to_the_back_of_the_queue() {
        connect(ann, "ann", .agent, queues: ["sales"])
        advance(seconds: 1)
        connect(bob, "bob", .agent, queues: ["sales"])
        advance(seconds: 1)
        send(ann, .setStatus(.busy, note: nil, queues: nil))
        send(ann, .setStatus(.available, note: nil, queues: nil))
        connect(carl, "carl", .caller)
        XCTAssertEqual(frame(send(carl, .request(.queue("sales"), metadata: nil)), "request", to: carl)?.payload?["agent_id"], "bob")
    }

    func test_a_queue_with_nobody_available_is_409_and_an_unknown_queue_404() {
        connect(ann, "ann", .agent, queues: ["sales"])
        connect(carl, "carl", .caller)
        send(ann, .setStatus(.busy, note: nil, queues: nil))
        XCTAssertEqual(errorCode(send(carl, .request(.queue("sales"), metadata: nil)), to: carl), .conflict)
        XCTAssertEqual(errorCode(send(carl, .request(.queue("nobody"), metadata: nil)), to: carl), .peerNotFound)
    }

    // MARK: - Refusals

    func test_requests_for_unknown_or_unavailable_agents_are_refused() throws {
        connectAll()
        connect(cora, "cora", .caller)
        XCTAssertEqual(errorCode(send(carl, .request(.agent("zed"), metadata: nil)), to: carl), .peerNotFound)
        send(bob, .setStatus(.busy, note: nil, queues: nil))
        XCTAssertEqual(errorCode(send(carl, .request(.agent("bob"), metadata: nil)), to: carl), .conflict)
        send(bob, .setStatus(.away, note: nil, queues: nil))
        XCTAssertEqual(errorCode(send(carl, .request(.agent("bob"), metadata: nil)), to: carl), .conflict)
        send(bob, .setStatus(.available, note: nil, queues: nil))
        disconnect(bob)
        XCTAssertEqual(hub.status(of: "bob"), .available)
        XCTAssertEqual(errorCode(send(carl, .request(.agent("bob"), metadata: nil)), to: carl), .conflict,
                       "available but in its grace period, not connected")

        _ = try XCTUnwrap(request(.agent("ann")))
        XCTAssertEqual(errorCode(send(cora, .request(.agent("ann"), metadata: nil)), to: cora), .conflict,
                       "ann is ringing for carl")
        XCTAssertEqual(errorCode(send(carl, .request(.queue("sales"), metadata: nil)), to: carl), .conflict,
                       "carl already waits on a request")
        XCTAssertEqual(hub.ringingCount, 1)
    }

    func test_frames_from_the_wrong_role_are_403_and_change_nothing() throws {
        connectAll()
        let id = try XCTUnwrap(request(.agent("ann")))
        let cases: [(ConnectionID, PresenceMessage, String)] = [
            (carl, .accept(id), "a caller accepting"),
            (carl, .decline(id), "a caller declining"),
            (carl, .setStatus(.away, note: nil, queues: nil), "a caller setting a status"),
            (dash, .setStatus(.away, note: nil, queues: nil), "a dashboard setting a status"),
            (dash, .accept(id), "a dashboard accepting"),
            (dash, .request(.agent("bob"), metadata: nil), "a dashboard requesting"),
            (ann, .request(.agent("bob"), metadata: nil), "an agent requesting"),
            (ann, .cancel(id), "an agent cancelling"),
        ]
        for (connection, message, name) in cases {
            let effects = send(connection, message)
            XCTAssertEqual(effects.count, 1, name)
            let error = frame(effects, "error", to: connection)
            XCTAssertEqual(error?.error?.code, ErrorCode.forbidden.rawValue, name)
            XCTAssertEqual(error?.payload?["type"], .string(message.frameType.rawValue), name)
        }
        XCTAssertEqual(hub.ringingCount, 1)
        XCTAssertEqual(hub.status(of: "ann"), .available)
    }

    func test_answering_someone_elses_request_is_404() throws {
        connectAll()
        connect(cora, "cora", .caller)
        let id = try XCTUnwrap(request(.agent("ann")))
        XCTAssertEqual(errorCode(send(bob, .accept(id)), to: bob), .peerNotFound)
        XCTAssertEqual(errorCode(send(bob, .decline(id)), to: bob), .peerNotFound)
        XCTAssertEqual(errorCode(send(cora, .cancel(id)), to: cora), .peerNotFound)
        XCTAssertEqual(errorCode(send(ann, .accept("req_999")), to: ann), .peerNotFound)
        send(carl, .cancel(id))
        XCTAssertEqual(errorCode(send(bob, .accept(id)), to: bob), .peerNotFound, "ended, but never bob's")
        XCTAssertEqual(hub.ringingCount, 0)
    }

    func test_an_agent_cannot_be_requested_by_a_caller_with_its_own_id() {
        connect(ann, "ann", .agent, queues: ["sales"])
        connect(carl, "ann", .caller)
        XCTAssertEqual(errorCode(send(carl, .request(.agent("ann"), metadata: nil)), to: carl), .conflict)
        XCTAssertEqual(errorCode(send(carl, .request(.queue("sales"), metadata: nil)), to: carl), .conflict)
    }

    // MARK: - Resuming on another hub (a new presence leader)

    /// What a store that carries out every `.storeAgent`/`.storeRequest` holds.
    private struct FakeStore {
        var agents: [PeerID: PresenceAgentRecord] = [:]
        var requests: [PresenceRequestID: PresenceRequestRecord] = [:]

        mutating func apply(_ effects: [PresenceEffect]) {
            for effect in effects {
                switch effect {
                case .storeAgent(let id, let record): agents[id] = record
                case .storeRequest(let id, let record): requests[id] = record
                default: break
                }
            }
        }

        var state: PresenceState { PresenceState(agents: Array(agents.values), requests: Array(requests.values)) }
    }

    private func stored(_ effects: [PresenceEffect]) -> [PresenceEffect] {
        effects.filter {
            switch $0 {
            case .storeAgent, .storeRequest: return true
            default: return false
            }
        }
    }

    /// ann `away` with a note and queues, bob available in `sales` and ringing for carl.
    private func ringingScene() throws -> PresenceRequestID {
        connectAll(queues: ["sales"])
        send(ann, .setStatus(.away, note: "dentist", queues: ["sales", "vip"]))
        return try XCTUnwrap(request(.agent("bob")))
    }

    /// The hub a new leader starts from what the old one stored; `now` moves on by the takeover.
    private func takeOver(_ state: PresenceState, after seconds: Int64 = 2) {
        advance(seconds: seconds)
        hub = PresenceHub(settings: PresenceSettings(graceMs: 30_000, requestTTLMs: 90_000, endedMemoryMs: 120_000, resumeMs: 10_000),
                          ids: SequentialPresenceIDs(), resuming: state, now: now)
    }

    func test_every_change_of_the_stored_state_is_an_effect_that_comes_before_its_frames() throws {
        var store = FakeStore()
        func step(_ effects: [PresenceEffect], file: StaticString = #filePath, line: UInt = #line) {
            store.apply(effects)
            XCTAssertEqual(store.state, hub.state, "the store mirrors the hub", file: file, line: line)
            // Storage effects first: no frame announces a change before its write.
            let firstFrame = effects.firstIndex { if case .send = $0 { return true } else { return false } } ?? effects.count
            XCTAssertTrue(effects[firstFrame...].allSatisfy { stored([$0]).isEmpty }, "\(effects)", file: file, line: line)
        }
        step(connect(ann, "ann", .agent, queues: ["sales"]))
        step(connect(bob, "bob", .agent))
        step(connect(carl, "carl", .caller, name: "Carl"))
        XCTAssertTrue(stored(connect(dash, "dash", .dashboard)).isEmpty, "a dashboard stores nothing")
        step(send(ann, .setStatus(.away, note: "dentist", queues: ["vip"])))
        let effects = send(carl, .request(.agent("bob"), metadata: ["topic": "refund"]))
        step(effects)
        let id = try XCTUnwrap(store.requests.keys.first)
        XCTAssertEqual(store.requests[id], PresenceRequestRecord(id: id, caller: "carl", callerName: "Carl", agent: "bob", queue: nil,
                                                                 metadata: ["topic": "refund"], expiresAt: now + 90_000))
        step(send(bob, .accept(id)))
        XCTAssertTrue(store.requests.isEmpty, "an accepted request no longer rings")
        XCTAssertEqual(store.agents["bob"]?.status, .busy)
        step(disconnect(ann))
        XCTAssertEqual(store.agents["ann"]?.disconnectedAt, now)
        XCTAssertTrue(stored(send(carl, .ping(payload: nil))).isEmpty, "a ping changes nothing stored")
        advance(seconds: 31)
        step(tick())
        XCTAssertEqual(store.agents["ann"]?.status, .offline)
        advance(seconds: 86_400)
        step(tick())
        XCTAssertNil(store.agents["ann"], "a forgotten agent is deleted")
    }

    func test_records_round_trip_through_json_and_garbage_is_refused() {
        let agent = PresenceAgentRecord(agent: "ann", status: .away, note: "dentist", queues: ["sales", "vip"], updatedAt: 5,
                                        availableSince: 3, name: "Ann", disconnectedAt: 7, wentOfflineByGrace: false)
        XCTAssertEqual(PresenceAgentRecord(json: agent.json), agent)
        let bare = PresenceAgentRecord(agent: "bob", status: .offline, note: nil, queues: [], updatedAt: 1, availableSince: 1, name: nil,
                                       disconnectedAt: nil, wentOfflineByGrace: true)
        XCTAssertEqual(PresenceAgentRecord(json: bare.json), bare)
        let request = PresenceRequestRecord(id: "req_1", caller: "carl", callerName: nil, agent: "bob", queue: "sales",
                                            metadata: ["a": [1, 2]], expiresAt: 9)
        XCTAssertEqual(PresenceRequestRecord(json: request.json), request)
        XCTAssertNil(PresenceAgentRecord(json: ["agent_id": "ann", "status": "sleepy", "queues": [], "updated_at": 1, "available_since": 1]))
        XCTAssertNil(PresenceAgentRecord(json: "ann"))
        XCTAssertNil(PresenceRequestRecord(json: ["request_id": "req_1", "caller_id": "carl"]))
    }

    func test_a_hub_resuming_stored_state_keeps_statuses_notes_and_queues() throws {
        _ = try ringingScene()
        takeOver(hub.state)
        // Nodes open their connections at the new leader again, under new ids.
        let effects = connect(fresh, "ann", .agent)
        let entry = agentEntry(frame(effects, "connected", to: fresh), "ann")
        XCTAssertEqual(entry?["status"], "away")
        XCTAssertEqual(entry?["note"], "dentist")
        XCTAssertEqual(entry?["queues"], ["sales", "vip"])
        XCTAssertTrue(frames(effects, to: fresh).allSatisfy { $0.type == "connected" }, "nothing rings for ann")
        connect(cora, "cora", .caller)
        XCTAssertEqual(errorCode(send(cora, .request(.agent("ann"), metadata: nil)), to: cora), .conflict, "away is not offered calls")
        XCTAssertEqual(errorCode(send(cora, .request(.queue("vip"), metadata: nil)), to: cora), .conflict)
        XCTAssertEqual(hub.status(of: "bob"), .available)
    }

    func test_a_resumed_request_rings_again_on_both_sides_and_accept_makes_the_call() throws {
        let id = try ringingScene()
        let expiresAt = now + 90_000
        takeOver(hub.state)
        let newCarl = ConnectionID(40), newBob = ConnectionID(20), newDash = ConnectionID(30)
        let watched = connect(newDash, "dash", .dashboard)
        XCTAssertEqual(frame(watched, "connected", to: newDash)?.payload?["requests"]?.arrayValue?.first?["request_id"], .string(id.rawValue))
        let callerSide = connect(newCarl, "carl", .caller, name: "Carl")
        XCTAssertEqual(frames(callerSide, to: newCarl).map(\.type), ["connected", "request"])
        let ack = frame(callerSide, "request", to: newCarl)?.payload
        XCTAssertEqual(ack?["request_id"], .string(id.rawValue))
        XCTAssertEqual(ack?["state"], "ringing")
        XCTAssertEqual(ack?["expires_at"], .int(expiresAt), "the TTL goes on, it does not restart")
        let agentSide = connect(newBob, "bob", .agent)
        XCTAssertEqual(frame(agentSide, "request", to: newBob)?.payload?["request_id"], .string(id.rawValue))
        advance(seconds: 11)
        XCTAssertTrue(frames(tick(), to: newCarl).isEmpty, "both sides are back: the resume window no longer applies")
        let call = try XCTUnwrap(calls(send(newBob, .accept(id))).first)
        XCTAssertEqual(call.callerConnection, newCarl)
        XCTAssertEqual(call.agentConnection, newBob)
        XCTAssertEqual(hub.status(of: "bob"), .busy)
    }

    func test_an_accept_before_the_caller_is_back_is_409_and_the_request_rings_on() throws {
        let id = try ringingScene()
        takeOver(hub.state)
        connect(fresh, "bob", .agent)
        XCTAssertEqual(errorCode(send(fresh, .accept(id)), to: fresh), .conflict)
        XCTAssertEqual(hub.ringingCount, 1)
        connect(cora, "carl", .caller)
        XCTAssertEqual(calls(send(fresh, .accept(id))).first?.callerConnection, cora)
    }

    func test_a_resumed_request_missing_a_side_ends_disconnected_after_the_resume_window() throws {
        let id = try ringingScene()
        takeOver(hub.state)
        let newCarl = ConnectionID(40)
        connect(newCarl, "carl", .caller)
        connect(dash, "dash", .dashboard)
        advance(seconds: 9)
        XCTAssertTrue(frames(tick(), to: newCarl).isEmpty, "bob may still come back")
        advance(seconds: 1)
        let effects = tick()
        XCTAssertEqual(frame(effects, "ended", to: newCarl)?.payload, ["request_id": .string(id.rawValue), "reason": "disconnected"])
        XCTAssertEqual(frame(effects, "ended", to: dash)?.payload?["reason"], "disconnected")
        XCTAssertEqual(stored(effects), [.storeRequest(id, nil)])
        XCTAssertEqual(hub.ringingCount, 0)
    }

    func test_a_caller_who_comes_back_after_its_resumed_request_ended_is_told() throws {
        let id = try ringingScene()
        takeOver(hub.state)
        connect(fresh, "bob", .agent)
        advance(seconds: 10)
        XCTAssertEqual(frame(tick(), "ended", to: fresh)?.payload?["reason"], "disconnected")
        let effects = connect(cora, "carl", .caller)
        XCTAssertEqual(frames(effects, to: cora).map(\.type), ["connected", "ended"])
        XCTAssertEqual(frame(effects, "ended", to: cora)?.payload, ["request_id": .string(id.rawValue), "reason": "disconnected"])
        XCTAssertEqual(frames(connect(carl, "carl", .caller), to: carl).map(\.type), ["connected"], "told once")
        XCTAssertEqual(errorCode(send(cora, .cancel(id)), to: cora), .conflict, "ended, not unknown")
    }

    func test_a_resumed_request_still_times_out_at_its_original_expiry() throws {
        let id = try ringingScene()
        takeOver(hub.state, after: 85)
        connect(carl, "carl", .caller)
        connect(bob, "bob", .agent)
        advance(seconds: 4)
        XCTAssertTrue(tick().isEmpty)
        advance(seconds: 1)
        XCTAssertEqual(frame(tick(), "ended", to: carl)?.payload, ["request_id": .string(id.rawValue), "reason": "timeout"])
    }

    func test_agents_that_do_not_come_back_to_the_new_hub_go_offline_after_their_grace() throws {
        _ = try ringingScene()
        disconnect(ann)
        advance(seconds: 20)
        takeOver(hub.state, after: 0)
        connect(dash, "dash", .dashboard)
        advance(seconds: 10)
        let effects = tick()
        let offline = frames(effects, to: dash).filter { $0.type == "status" && $0.payload?["status"] == "offline" }.compactMap(\.from)
        XCTAssertEqual(offline, ["ann"], "ann's grace started when it left the old leader, not at the takeover")
        advance(seconds: 20)
        XCTAssertEqual(frames(tick(), to: dash).filter { $0.type == "status" }.compactMap(\.from), ["bob"])
    }

    // MARK: - Notices for the backend (webhooks)

    private func notices(_ effects: [PresenceEffect]) -> [PresenceNotice] {
        effects.compactMap { if case .notify(let notice) = $0 { return notice } else { return nil } }
    }

    func test_a_request_rings_once_for_the_backend_even_when_a_takeover_is_offered_it_again() throws {
        connect(ann, "ann", .agent, queues: ["sales"])
        connect(carl, "carl", .caller, name: "Carl")
        let effects = send(carl, .request(.queue("sales"), metadata: ["topic": "billing"]))
        let id = try XCTUnwrap(frames(effects, to: carl).first?.payload?["request_id"]?.stringValue)
        XCTAssertEqual(notices(effects), [.requestRinging(PresenceRequestID(id), [
            "request_id": .string(id), "caller_id": "carl", "caller_name": "Carl", "agent_id": "ann", "queue": "sales",
            "metadata": ["topic": "billing"], "expires_at": .int(now + 90_000), "ttl_ms": 90_000,
        ])])
        let takeover = connect(fresh, "ann", .agent)
        XCTAssertEqual(frame(takeover, "request", to: fresh)?.payload?["request_id"], .string(id), "offered again")
        XCTAssertEqual(notices(takeover), [], "but it does not ring again for the backend")
    }

    func test_every_status_change_is_a_notice_also_with_nobody_connected_to_hear_it() {
        let first = connect(ann, "ann", .agent)
        XCTAssertEqual(frames(first, to: ann).map(\.type), ["connected"], "nobody else to tell")
        guard case .agentStatus(let agent, let entry)? = notices(first).first else { return XCTFail("\(first)") }
        XCTAssertEqual(agent, "ann")
        XCTAssertEqual(entry["status"], "available")
        advance(seconds: 1)
        XCTAssertEqual(notices(send(ann, .setStatus(.away, note: "lunch", queues: nil))).count, 1)
        disconnect(ann)
        XCTAssertEqual(notices(tick()), [], "a disconnect alone changes no status")
        advance(seconds: 31)
        guard case .agentStatus(_, let offline)? = notices(tick()).first else { return XCTFail("no offline notice") }
        XCTAssertEqual(offline["status"], "offline")
        XCTAssertEqual(notices(tick()), [], "offline is told once")
    }
}
