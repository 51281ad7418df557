import CallingProtocol
import CallingServer
import Foundation
import XCTest

@testable import CallingClient

/// An agent `SignalingClient` (with `FakeMediaEngine`) answering webrtc-proxy HTTP sessions
/// (docs/protocol.md "HTTP sessions"), against the real server: a call from the real
/// `POST /v1/calls`, sessions posted over real HTTP with the call's access token.
final class SessionOfferTests: ClientTestCase {
    /// Short, so an answer the server ignores shows as a 502 soon; the fake engine answers at once.
    override func configure(_ config: inout ServerConfig) {
        config.sessionAnswerTimeoutMs = 1_000
    }

    static let offer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
        + "a=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n"
    static let candidate = "candidate:842163049 1 udp 1677729535 198.51.100.4 46154 typ srflx raddr 0.0.0.0 rport 0"

    func patchCandidate(_ call: CreatedCall, session: String) async throws -> (status: Int, text: String, json: JSONValue?) {
        try await server.patchSessionCandidate(call, session: session, candidate: Self.candidate)
    }

    /// The answering agent of `call`'s room (role `agent`), connected, with `engine`.
    func agent(for call: CreatedCall, engine: FakeMediaEngine) async throws -> (SignalingClient, EventLog<CallingEvent>) {
        let agent = try server.client("agent-1", token: server.token(peer: "agent-1", room: call.room, role: "agent")) {
            $0.mediaEngine = engine
            // `disconnected` ends the call after this grace (5 s by default; SignalingSessionMediaTests).
            $0.mediaDisconnectGrace = 0.2
        }
        let events = EventLog(agent.events)
        try await agent.connect()
        return (agent, events)
    }

    /// Posts a session and accepts its offer on `agent`; returns the session id (checked against the 201).
    func establish(_ call: CreatedCall, agent: SignalingClient, events: EventLog<CallingEvent>, sdp: String = offer,
                   file: StaticString = #filePath, line: UInt = #line) async throws -> String
    {
        let known = Set(events.all.compactMap { $0.incomingCall?.offer.sessionID })
        let server = self.server!
        async let posted = server.postSession(call, sdp: sdp)
        let incoming = try await events.first(file: file, line: line) { event -> IncomingCall? in
            guard let incoming = event.incomingCall, let id = incoming.offer.sessionID, !known.contains(id) else { return nil }
            return incoming
        }
        try await agent.accept(incoming.from)
        let created = try await posted
        XCTAssertEqual(created.status, 201, created.text, file: file, line: line)
        let id = try XCTUnwrap(incoming.offer.sessionID, file: file, line: line)
        XCTAssertEqual(created.json?["session_id"]?.stringValue, id, file: file, line: line)
        return id
    }

    // MARK: (1) + (2): session_id in, session_id out

    func test_a_session_offer_carries_its_session_id_and_accepting_it_answers_the_post() async throws {
        let call = try await server.createCall()
        let caller = PeerID(call.peer)
        let engine = FakeMediaEngine(name: "agent")
        let (agent, events) = try await agent(for: call, engine: engine)

        let server = self.server!
        async let posted = server.postSession(call, sdp: Self.offer)
        let incoming = try await events.first { $0.incomingCall }
        XCTAssertEqual(incoming.from, caller, "the offer comes from the token's peer id")
        XCTAssertEqual(incoming.offer.kind, .offer)
        XCTAssertEqual(incoming.offer.sdp, Self.offer)
        let sessionID = try XCTUnwrap(incoming.offer.sessionID, "session_id of the offer payload")
        let order = events.all
        XCTAssertLessThan(try XCTUnwrap(order.firstIndex { if case .peerJoined(let info) = $0 { info.peerID == caller } else { false } }),
                          try XCTUnwrap(order.firstIndex { $0.incomingCall != nil }), "peer-joined, then the offer")

        try await agent.accept(caller)
        let created = try await posted
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertEqual(created.json?["session_id"]?.stringValue, sessionID)
        XCTAssertEqual(created.json?["sdp"]?.stringValue, "answer-from-agent", "the engine's answer is the POST's answer")
        XCTAssertEqual(Array(engine.log.prefix(3)), ["create \(caller)", "setRemote \(caller) offer \(Self.offer)", "answer \(caller)"])
        await agent.disconnect()
    }

    /// The server ignores an answer naming another session; an answer without `session_id` it
    /// would take. So a 502 here proves the answer carried the offer's `session_id` (a 201 would
    /// mean it was dropped).
    func test_the_answer_echoes_the_offers_session_id_so_an_answer_to_a_stale_offer_is_ignored() async throws {
        let call = try await server.createCall()
        let caller = PeerID(call.peer)
        let (agent, events) = try await agent(for: call, engine: FakeMediaEngine(name: "agent"))

        let server = self.server!
        async let posted = server.postSession(call, sdp: Self.offer)
        let live = try await events.first { $0.incomingCall }
        XCTAssertNotNil(live.offer.sessionID)
        // A late offer of a session that has gone (as after a takeover) overtakes the live one.
        agent.receiveForTesting(JSONWriter.string([
            "type": "offer", "from": .string(call.peer), "to": "agent-1",
            "payload": ["sdp": .string(Self.offer), "type": "offer", "session_id": "stale-session", "transport": "http"],
        ]))
        let stale = try await events.first { $0.incomingCall?.offer.sessionID == "stale-session" ? $0.incomingCall : nil }
        XCTAssertEqual(stale.from, caller)
        try await agent.accept(caller)

        let refused = try await posted
        XCTAssertEqual(refused.status, 502, refused.text)
        XCTAssertEqual(refused.json?["code"], "answer_timeout", "the answer named the stale session and was ignored")
        // The timed-out session is hung up: data {kind:"hangup"} reaches the agent as `hangup`.
        _ = try await events.first { $0.isHangup(caller) ? true : nil }
        await agent.disconnect()
    }

    // MARK: (4): an ending engine state hangs up the session

    func test_an_ending_engine_state_sends_hangup_so_the_server_ends_the_session() async throws {
        let call = try await server.createCall()
        let caller = PeerID(call.peer)
        let engine = FakeMediaEngine(name: "agent")
        let (agent, events) = try await agent(for: call, engine: engine)

        // Each ending state, each on a fresh session (the seat is free again after the previous one ended).
        for (round, state) in [PeerConnectionState.closed, .failed, .disconnected].enumerated() {
            let id = try await establish(call, agent: agent, events: events)
            let live = try await patchCandidate(call, session: id)
            XCTAssertEqual(live.status, 204, "the session is live: \(live.text)")
            XCTAssertTrue(engine.fireState(state, for: caller))

            try await events.waitCount(round + 1) { $0.isHangup(caller) }
            // The server ended the session: its virtual member leaves the room, PATCH answers 404.
            try await events.waitCount(round + 1) { $0 == .peerLeft(caller) }
            let patched = try await patchCandidate(call, session: id)
            XCTAssertEqual(patched.status, 404, "\(state): \(patched.text)")
            XCTAssertEqual(patched.json?["code"], "session_not_found")
            try await eventually { engine.log.filter { $0 == "close \(caller)" }.count == round + 1 }
        }
        XCTAssertEqual(events.all.filter { $0.isHangup(caller) }.count, 3, "one hangup per ended session")
        XCTAssertFalse(events.all.contains { if case .error = $0 { true } else { false } }, "\(events.all)")
        await agent.disconnect()
    }

    // MARK: (3): replaced

    func test_a_second_post_with_the_same_token_closes_the_old_connection_as_replaced_and_offers_anew() async throws {
        let call = try await server.createCall()
        let caller = PeerID(call.peer)
        let engine = FakeMediaEngine(name: "agent")
        let (agent, events) = try await agent(for: call, engine: engine)
        let oldID = try await establish(call, agent: agent, events: events)

        let server = self.server!
        async let second = server.postSession(call, sdp: Self.offer + "a=new\r\n")
        let replaced = try await events.first { event -> JSONValue? in
            if case .data(let from, let payload) = event, from == caller, payload?["kind"] == "replaced" { payload } else { nil }
        }
        XCTAssertEqual(replaced["session_id"]?.stringValue, oldID, "data {kind:replaced} names the old session")
        try await eventually { engine.log.contains("close \(caller) replaced") }

        let next = try await events.first { event -> IncomingCall? in
            guard let incoming = event.incomingCall, incoming.offer.sessionID != oldID else { return nil }
            return incoming
        }
        XCTAssertEqual(next.from, caller, "the new session has the same peer id")
        XCTAssertEqual(next.offer.sdp, Self.offer + "a=new\r\n")
        let newID = try XCTUnwrap(next.offer.sessionID)
        XCTAssertNotEqual(newID, oldID)
        try await agent.accept(caller)
        let created = try await second
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertEqual(created.json?["session_id"]?.stringValue, newID)

        let log = engine.log
        XCTAssertEqual(log.filter { $0.hasPrefix("close \(caller)") }, ["close \(caller) replaced"], "closed once, as replaced")
        XCTAssertLessThan(try XCTUnwrap(log.firstIndex(of: "close \(caller) replaced")),
                          try XCTUnwrap(log.lastIndex(of: "create \(caller)")), "the old connection closes before the new one")
        XCTAssertEqual(log.filter { $0 == "create \(caller)" }.count, 2, "a new peer connection for the new session")
        XCTAssertFalse(events.all.contains { $0.isHangup(caller) || $0 == .peerLeft(caller) },
                       "a takeover is neither a hangup nor a leave: \(events.all)")

        let old = try await patchCandidate(call, session: oldID)
        XCTAssertEqual(old.status, 404, "the old session is gone: \(old.text)")
        let new = try await patchCandidate(call, session: newID)
        XCTAssertEqual(new.status, 204, "the new one lives: \(new.text)")
        await agent.disconnect()
    }

    /// A real engine's replaced connection can still report `disconnected`/`failed` while it tears
    /// down (GStreamerMediaEngine gives the control channel 0.2 s). That late report belongs to the
    /// old connection: it must not hang up the new session.
    func test_a_late_ending_state_of_the_replaced_connection_does_not_end_the_new_session() async throws {
        let call = try await server.createCall()
        let caller = PeerID(call.peer)
        let engine = FakeMediaEngine(name: "agent")
        let (agent, events) = try await agent(for: call, engine: engine)
        _ = try await establish(call, agent: agent, events: events)
        let newID = try await establish(call, agent: agent, events: events, sdp: Self.offer + "a=new\r\n")
        XCTAssertTrue(engine.log.contains("close \(caller) replaced"))

        XCTAssertTrue(engine.fireState(.disconnected, for: caller, connection: 0))
        // A chat round trip orders after the state report on the client's queue, and its ack after
        // any hangup frame on the server.
        _ = try await agent.sendChat("barrier")
        XCTAssertFalse(events.all.contains { $0.isHangup(caller) }, "\(events.all)")
        let alive = try await patchCandidate(call, session: newID)
        XCTAssertEqual(alive.status, 204, "the new session lives: \(alive.text)")

        // The new connection's own ending state still ends it.
        XCTAssertTrue(engine.fireState(.failed, for: caller))
        _ = try await events.first { $0.isHangup(caller) ? true : nil }
        _ = try await events.first { $0 == .peerLeft(caller) ? true : nil }
        let ended = try await patchCandidate(call, session: newID)
        XCTAssertEqual(ended.status, 404, ended.text)
        await agent.disconnect()
    }

    // MARK: (4) only for sessions

    func test_an_ending_engine_state_of_a_websocket_peer_sends_no_hangup() async throws {
        let aliceEngine = FakeMediaEngine(name: "alice")
        let bobEngine = FakeMediaEngine(name: "bob")
        let alice = try server.client("alice") { $0.mediaEngine = aliceEngine }
        let bob = try server.client("bob") { $0.mediaEngine = bobEngine }
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()

        try await alice.call("bob")
        let incoming = try await bobEvents.first { $0.incomingCall }
        XCTAssertNil(incoming.offer.sessionID, "a WebSocket peer's offer names no session")
        try await bob.accept("alice")
        try await eventually { aliceEngine.log.contains("setRemote bob answer answer-from-bob") }

        XCTAssertTrue(bobEngine.fireState(.closed, for: "alice"))
        _ = try await bobEvents.first { $0.isHangup("alice") ? true : nil }
        try await eventually { bobEngine.log.contains("close alice") }
        // bob's frames reach alice in order: a hangup sent on the state change would precede this.
        try bob.sendData(["kind": "probe"], to: "alice")
        _ = try await aliceEvents.first { event -> Bool? in
            if case .data(let from, let payload) = event, from == "bob", payload?["kind"] == "probe" { true } else { nil }
        }
        XCTAssertFalse(aliceEvents.all.contains { $0.isHangup("bob") }, "\(aliceEvents.all)")
        XCTAssertFalse(aliceEngine.log.contains("close bob"), "alice's call was not ended by the server or bob")
        await alice.disconnect()
        await bob.disconnect()
    }
}

extension CreatedCall {
    var sessionsPath: String { "/webrtc-proxy/\(id)/v1/webrtc/sessions" }
}

extension ClientHarness {
    /// `POST /webrtc-proxy/{call}/v1/webrtc/sessions` with `{identity:"client", sdp}` and the call's token.
    func postSession(_ call: CreatedCall, sdp: String) async throws -> (status: Int, text: String, json: JSONValue?) {
        try await exchange("POST", call.sessionsPath, bearer: call.token, contentType: "application/json",
                           body: JSONWriter.string(["identity": "client", "sdp": .string(sdp)]))
    }

    /// `PATCH …/sessions/{id}` with a trickled candidate: 204 while the session lives, 404 after.
    func patchSessionCandidate(_ call: CreatedCall, session: String, candidate: String) async throws
        -> (status: Int, text: String, json: JSONValue?)
    {
        try await exchange("PATCH", call.sessionsPath + "/" + session, bearer: call.token, contentType: "application/json",
                           body: JSONWriter.string(["candidate": ["candidate": .string(candidate), "sdpMid": "0", "sdpMLineIndex": 0]]))
    }
}

extension CallingEvent {
    var incomingCall: IncomingCall? { if case .incoming(let call) = self { return call } else { return nil } }
}
