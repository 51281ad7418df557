import CallingAuth
import CallingCore
import CallingServer
import CallingTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

extension HTTPClient {
    /// `POST /webrtc-proxy/{call}/v1/webrtc/sessions` with `{identity, sdp}`.
    func postSession(_ call: String, token: String?, identity: String = "client", sdp: String = sampleOffer) async throws
        -> HTTPExchangeResult
    {
        try await exchange("POST", "/webrtc-proxy/\(call)/v1/webrtc/sessions", bearer: token, contentType: "application/json",
                           body: JSONWriter.string(["identity": .string(identity), "sdp": .string(sdp)]))
    }
}

extension ServerHarness {
    var client: HTTPClient { HTTPClient(port: port) }

    func exchange(_ method: String, _ path: String, bearer: String? = nil, contentType: String? = nil, body: String? = nil,
                  headers: [String: String] = [:]) async throws -> HTTPExchangeResult
    {
        try await client.exchange(method, path, bearer: bearer, contentType: contentType, body: body, headers: headers)
    }

    /// A call made through the real API with a key from the real CLI: (call_id, room_id, access_token, peer_id).
    func createCall(agentID: String? = nil, meterLimitSeconds: Int? = nil) async throws
        -> (call: String, room: String, token: String, peer: String)
    {
        let (code, output) = try runCapturingOutput(["apikey", "create", "--name", "sessions", "--data-dir", config.dataDir])
        XCTAssertEqual(code, 0)
        let key = output.trimmingCharacters(in: .whitespacesAndNewlines)
        var body: [String: JSONValue] = [:]
        if let agentID { body["agent_id"] = .string(agentID) }
        if let meterLimitSeconds { body["meter"] = ["limit_s": .int(Int64(meterLimitSeconds)), "warning_s": 0] }
        let created = try await exchange("POST", "/v1/calls", contentType: "application/json",
                                         body: JSONWriter.string(.object(body)), headers: ["X-API-Key": key])
        XCTAssertEqual(created.status, 201, created.text)
        let fields = created.json
        return (fields["call_id"]!.stringValue!, fields["room_id"]!.stringValue!, fields["access_token"]!.stringValue!,
                fields["peer_id"]!.stringValue!)
    }
}

let sampleOffer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n"
    + "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n"
    + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\na=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n"

func sampleAnswer(ufrag: String = "ansU") -> String {
    "v=0\r\no=- 3 4 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:\(ufrag)\r\n"
        + "a=ice-pwd:answerpassword0123456789\r\na=candidate:1 1 udp 2122260223 192.0.2.7 50000 typ host\r\na=end-of-candidates\r\n"
}

/// The webrtc-proxy session API (docs/protocol.md, "HTTP sessions") end to end: real HTTP from
/// URLSession, a real WebSocket agent that answers, real calls from the real API. One server at a
/// time (libev: one signal watcher).
final class HTTPSessionsTests: ServerTestCase {

    func sessionsPath(_ call: String) -> String { "/webrtc-proxy/\(call)/v1/webrtc/sessions" }

    func post(_ call: String, token: String?, identity: String = "client", sdp: String = sampleOffer) async throws -> HTTPExchangeResult {
        try await server.client.postSession(call, token: token, identity: identity, sdp: sdp)
    }

    /// Posts an offer, plays the agent (waits for the offer, answers it), returns the 201 and the offer frame.
    func connect(_ call: String, token: String, agent: TestPeer, answer: String = sampleAnswer()) async throws
        -> (HTTPExchangeResult, Frame)
    {
        let client = server.client
        async let response = client.postSession(call, token: token)
        let offer = try await agent.next(type: "offer")
        agent.send(["type": "answer", "to": .string(offer.from!), "payload": ["sdp": .string(answer), "type": "answer"]])
        return (try await response, offer)
    }

    func test_a_posted_offer_reaches_the_agent_and_its_answer_comes_back_as_201() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let client = server.client
        async let response = client.postSession(call.call, token: call.token)
        let joined = try await agent.next(type: "peer-joined")
        XCTAssertEqual(joined.from, call.peer)
        let offer = try await agent.next(type: "offer")
        XCTAssertEqual(offer.from, call.peer, "the offer comes from the token's peer, like any room peer")
        XCTAssertEqual(offer.payloadObject["sdp"]?.stringValue, sampleOffer)
        XCTAssertEqual(offer.payloadObject["transport"], "http", "the agent learns it must answer with gathered candidates")
        agent.send(["type": "answer", "to": .string(call.peer), "payload": ["sdp": .string(sampleAnswer()), "type": "answer"]])
        let created = try await response
        XCTAssertEqual(created.status, 201, created.text)
        let sessionID = try XCTUnwrap(created.json["session_id"]?.stringValue)
        XCTAssertEqual(offer.payloadObject["session_id"]?.stringValue, sessionID)
        XCTAssertEqual(created.json["sdp"]?.stringValue, sampleAnswer())
        let metrics = try await server.exchange("GET", "/metrics").text
        XCTAssertTrue(metrics.contains("calling_http_sessions 1\n"), metrics)
        XCTAssertTrue(metrics.contains(#"calling_http_session_events_total{event="created_http"} 1"#), metrics)
    }

    func test_a_session_counts_as_joining_the_call() async throws {
        try restart { $0.callJoinWindowSeconds = 2 }
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        _ = try await connect(call.call, token: call.token, agent: agent)
        // The join window passes; a call whose client connected over HTTP is not ended as not joined.
        try await Task.sleep(nanoseconds: 3_000_000_000)
        let (code, output) = try runCapturingOutput(["apikey", "create", "--name", "probe", "--data-dir", server.config.dataDir])
        XCTAssertEqual(code, 0)
        let state = try await server.exchange("GET", "/v1/calls/\(call.call)",
                                              headers: ["X-API-Key": output.trimmingCharacters(in: .whitespacesAndNewlines)])
        XCTAssertEqual(state.json["state"], "ongoing", state.text)
    }

    func test_the_agent_is_preferred_by_agent_id_then_by_time_in_the_room() async throws {
        let call = try await server.createCall(agentID: "agent-b")
        let first = try await server.join("agent-a", room: call.room, role: "agent")
        let named = try await server.join("agent-b", room: call.room, role: "agent")
        _ = try await first.next(type: "peer-joined")
        _ = try await connect(call.call, token: call.token, agent: named)
        _ = try await first.next(type: "peer-joined")
        try await first.expectNoFrame(within: 0.2)
    }

    func test_trickled_candidates_are_relayed_and_renegotiation_returns_the_answer() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        let path = sessionsPath(call.call) + "/" + created.json["session_id"]!.stringValue!

        let candidate = "candidate:842163049 1 udp 1677729535 198.51.100.4 46154 typ srflx raddr 0.0.0.0 rport 0"
        let patched = try await server.exchange("PATCH", path, bearer: call.token, contentType: "application/json",
                                                body: JSONWriter.string(["candidate": ["candidate": .string(candidate), "sdpMid": "0",
                                                                                       "sdpMLineIndex": 0]]))
        XCTAssertEqual(patched.status, 204, patched.text)
        let relayed = try await agent.next(type: "candidate")
        XCTAssertEqual(relayed.from, call.peer)
        XCTAssertEqual(relayed.payloadObject["candidate"]?.stringValue, candidate)
        XCTAssertEqual(relayed.payloadObject["sdpMid"], "0")
        XCTAssertEqual(relayed.payloadObject["sdpMLineIndex"], 0)

        let client = server.client
        async let renegotiated = client.exchange("PATCH", path, bearer: call.token, contentType: "application/sdp", body: sampleOffer + "a=x\r\n")
        let offer = try await agent.next(type: "offer")
        XCTAssertEqual(offer.payloadObject["sdp"]?.stringValue, sampleOffer + "a=x\r\n")
        // A second renegotiation while the first is unanswered is refused.
        let conflict = try await server.exchange("PATCH", path, bearer: call.token, contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(conflict.status, 409)
        XCTAssertEqual(conflict.code, "renegotiation_in_progress")
        agent.send(["type": "answer", "to": .string(call.peer), "payload": ["sdp": .string(sampleAnswer(ufrag: "v2"))]])
        let answered = try await renegotiated
        XCTAssertEqual(answered.status, 200, answered.text)
        XCTAssertEqual(answered.header("Content-Type"), "application/sdp")
        XCTAssertEqual(answered.text, sampleAnswer(ufrag: "v2"))
    }

    func test_delete_hangs_up_then_leaves_and_is_idempotent() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        let id = created.json["session_id"]!.stringValue!
        let path = sessionsPath(call.call) + "/" + id
        let deleted = try await server.exchange("DELETE", path, bearer: call.token)
        XCTAssertEqual(deleted.status, 204)
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payloadObject["kind"], "hangup")
        XCTAssertEqual(hangup.payloadObject["session_id"]?.stringValue, id)
        let left = try await agent.next(type: "peer-left")
        XCTAssertEqual(left.from, call.peer)
        let again = try await server.exchange("DELETE", path, bearer: call.token)
        XCTAssertEqual(again.status, 204, "deleting a session that is gone still succeeds")
        let patch = try await server.exchange("PATCH", path, bearer: call.token, contentType: "application/json",
                                              body: #"{"candidate":{"candidate":"candidate:1 1 udp 1 192.0.2.1 9 typ host"}}"#)
        XCTAssertEqual(patch.status, 404)
        XCTAssertEqual(patch.code, "session_not_found")
    }

    func test_delete_and_the_agent_leaving_end_the_call_and_a_new_post_is_a_404() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        let id = created.json["session_id"]!.stringValue!
        let deleted = try await server.exchange("DELETE", sessionsPath(call.call) + "/" + id, bearer: call.token)
        XCTAssertEqual(deleted.status, 204)
        _ = try await agent.next(type: "peer-left")
        agent.close()
        _ = try await agent.closeEvent()
        let (code, output) = try runCapturingOutput(["apikey", "create", "--name", "probe", "--data-dir", server.config.dataDir])
        XCTAssertEqual(code, 0)
        let key = output.trimmingCharacters(in: .whitespacesAndNewlines)
        var state = try await server.exchange("GET", "/v1/calls/\(call.call)", headers: ["X-API-Key": key])
        for _ in 0..<50 where state.json["state"] != "ended" {
            try await Task.sleep(nanoseconds: 20_000_000)
            state = try await server.exchange("GET", "/v1/calls/\(call.call)", headers: ["X-API-Key": key])
        }
        XCTAssertEqual(state.json["state"], "ended", state.text)
        XCTAssertEqual(state.json["end_reason"], "last_peer_left", state.text)
        let again = try await post(call.call, token: call.token)
        XCTAssertEqual(again.status, 404, again.text)
        XCTAssertEqual(again.code, "call_not_found")
    }

    func test_a_session_whose_agent_is_still_seated_keeps_the_call_ongoing_after_delete() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        let id = created.json["session_id"]!.stringValue!
        let deleted = try await server.exchange("DELETE", sessionsPath(call.call) + "/" + id, bearer: call.token)
        XCTAssertEqual(deleted.status, 204)
        _ = try await agent.next(type: "peer-left")
        // The agent is still in the room: the app may post again (a redial), and the agent answers.
        let (again, _) = try await connect(call.call, token: call.token, agent: agent)
        XCTAssertEqual(again.status, 201, again.text)
    }

    func test_the_agent_hanging_up_ends_the_session() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        agent.send(["type": "data", "to": .string(call.peer), "payload": ["kind": "hangup"]])
        let left = try await agent.next(type: "peer-left")
        XCTAssertEqual(left.from, call.peer)
        let patch = try await server.exchange("PATCH", sessionsPath(call.call) + "/" + created.json["session_id"]!.stringValue!,
                                              bearer: call.token, contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(patch.status, 404)
    }

    func test_a_second_post_with_the_same_token_takes_over() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (first, _) = try await connect(call.call, token: call.token, agent: agent)
        let oldID = first.json["session_id"]!.stringValue!

        let client = server.client
        async let second = client.postSession(call.call, token: call.token)
        let replaced = try await agent.next(type: "data")
        XCTAssertEqual(replaced.payloadObject["kind"], "replaced")
        XCTAssertEqual(replaced.payloadObject["session_id"]?.stringValue, oldID)
        let offer = try await agent.next(type: "offer")
        XCTAssertEqual(offer.from, call.peer)
        agent.send(["type": "answer", "to": .string(call.peer), "payload": ["sdp": .string(sampleAnswer())]])
        let taken = try await second
        XCTAssertEqual(taken.status, 201)
        XCTAssertNotEqual(taken.json["session_id"]?.stringValue, oldID)
        let stale = try await server.exchange("PATCH", sessionsPath(call.call) + "/" + oldID, bearer: call.token,
                                              contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(stale.status, 404)
        try await agent.expectNoFrame(within: 0.2)  // no peer-left: the seat passed to the new session
    }

    func test_every_refusal_has_its_status() async throws {
        let call = try await server.createCall()
        let other = try await server.createCall()

        let noAnswerer = try await post(call.call, token: call.token)
        XCTAssertEqual(noAnswerer.status, 503)
        XCTAssertEqual(noAnswerer.code, "no_answering_peer")
        XCTAssertNotNil(noAnswerer.header("Retry-After"))
        XCTAssertEqual(noAnswerer.header("Content-Type"), "application/problem+json")

        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let missing = try await post(call.call, token: nil)
        XCTAssertEqual(missing.status, 401)
        let expired = try server.token(peer: call.peer, room: call.room, role: "caller", call: call.call, ttl: -120)
        let expiredStatus = try await post(call.call, token: expired).status
        XCTAssertEqual(expiredStatus, 401)
        let otherCall = try await post(call.call, token: other.token)
        XCTAssertEqual(otherCall.status, 403)
        XCTAssertEqual(otherCall.code, "token_wrong_call")
        let identity = try await post(call.call, token: call.token, identity: "agent")
        XCTAssertEqual(identity.status, 403)
        let badJSON = try await server.exchange("POST", sessionsPath(call.call), bearer: call.token, contentType: "application/json",
                                                body: "{nope")
        XCTAssertEqual(badJSON.status, 400)
        let noSDP = try await server.exchange("POST", sessionsPath(call.call), bearer: call.token, contentType: "application/json",
                                              body: #"{"identity":"client"}"#)
        XCTAssertEqual(noSDP.status, 400)
        XCTAssertEqual(noSDP.json["invalid_params"]?.arrayValue?.first?.objectValue?["name"], "sdp")
        let noIdentity = try await server.exchange("POST", sessionsPath(call.call), bearer: call.token, contentType: "application/json",
                                                   body: #"{"sdp":"v=0"}"#)
        XCTAssertEqual(noIdentity.status, 400)
        let ghost = try server.token(peer: "ghost", room: "room-x", role: "caller", call: "call_unknown")
        let unknownCall = try await post("call_unknown", token: ghost)
        XCTAssertEqual(unknownCall.status, 404)
        XCTAssertEqual(unknownCall.code, "call_not_found")
        let unknownSession = try await server.exchange("PATCH", sessionsPath(call.call) + "/nope", bearer: call.token,
                                                       contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(unknownSession.status, 404)
        let wrongMethod = try await server.exchange("GET", sessionsPath(call.call), bearer: call.token)
        XCTAssertEqual(wrongMethod.status, 405)

        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        let path = sessionsPath(call.call) + "/" + created.json["session_id"]!.stringValue!
        let wrongType = try await server.exchange("PATCH", path, bearer: call.token, contentType: "text/plain", body: "hello")
        XCTAssertEqual(wrongType.status, 415)
        let badCandidate = try await server.exchange("PATCH", path, bearer: call.token, contentType: "application/json",
                                                     body: #"{"candidate":{"sdpMid":"0"}}"#)
        XCTAssertEqual(badCandidate.status, 400)
        let foreign = try await server.exchange("DELETE", path, bearer: other.token)
        XCTAssertEqual(foreign.status, 403, "a token of another call cannot end this session")
    }

    func test_an_unanswered_offer_is_a_502_and_the_agent_is_told_to_hang_up() async throws {
        try restart { $0.sessionAnswerTimeoutMs = 300 }
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let started = Date()
        let response = try await post(call.call, token: call.token)
        XCTAssertEqual(response.status, 502)
        XCTAssertEqual(response.code, "answer_timeout")
        XCTAssertLessThan(Date().timeIntervalSince(started), 3)
        _ = try await agent.next(type: "offer")
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payloadObject["kind"], "hangup")
        _ = try await agent.next(type: "peer-left")
    }

    func test_an_agent_leaving_before_answering_is_a_502() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let client = server.client
        async let response = client.postSession(call.call, token: call.token)
        _ = try await agent.next(type: "offer")
        agent.close()
        let result = try await response
        XCTAssertEqual(result.status, 502)
        XCTAssertEqual(result.code, "answerer_gone")
    }

    func test_a_session_ends_when_its_token_expires() async throws {
        try restart { $0.jwtLeewaySeconds = 0 }
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let shortLived = try server.token(peer: call.peer, room: call.room, role: "caller", call: call.call, ttl: 1.5)
        _ = try await connect(call.call, token: shortLived, agent: agent)
        let hangup = try await agent.next(type: "data", timeout: 5)
        XCTAssertEqual(hangup.payloadObject["kind"], "hangup")
        let left = try await agent.next(type: "peer-left")
        XCTAssertEqual(left.from, call.peer)
    }

    func test_an_answer_naming_a_replaced_session_does_not_answer_the_new_one() async throws {
        let call = try await server.createCall()
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (first, _) = try await connect(call.call, token: call.token, agent: agent)
        let oldID = first.json["session_id"]!.stringValue!
        let client = server.client
        async let second = client.postSession(call.call, token: call.token)
        let offer = try await agent.next(type: "offer")
        agent.send(["type": "answer", "to": .string(call.peer), "payload": ["sdp": "v=0 stale", "session_id": .string(oldID)]])
        agent.send(["type": "answer", "to": .string(call.peer),
                    "payload": ["sdp": .string(sampleAnswer()), "session_id": offer.payloadObject["session_id"]!]])
        let taken = try await second
        XCTAssertEqual(taken.json["sdp"]?.stringValue, sampleAnswer())
    }

    func test_a_peer_id_seated_over_websocket_is_a_409() async throws {
        let call = try await server.createCall()
        // Held to the end: a dropped TestPeer closes its socket, and its peer-left would reach the caller.
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let caller = try await TestPeer.connect(loop: server.loop, port: server.port, token: call.token)
        let response = try await post(call.call, token: call.token)
        XCTAssertEqual(response.status, 409)
        XCTAssertEqual(response.code, "identity_in_use")
        try await caller.expectNoFrame(within: 0.2)  // the WebSocket peer keeps its seat
        withExtendedLifetime(agent) {}
    }

    func test_a_session_leaves_the_room_when_the_meter_ends_it() async throws {
        let call = try await server.createCall(meterLimitSeconds: 1)
        let agent = try await server.join("agent-1", room: call.room, role: "agent")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        XCTAssertEqual(created.status, 201, created.text)
        let closed = try await agent.closeEvent(timeout: 10)
        XCTAssertEqual(closed.code, CloseCode.consultationEnded.rawValue)
        // The session's seat left with everyone else: the room is gone, not held by a ghost member.
        var metrics = ""
        for _ in 0..<40 {
            let (_, body) = try await server.http("GET", "/metrics")
            metrics = String(decoding: body, as: UTF8.self)
            if metrics.contains("calling_peers 0") && metrics.contains("calling_rooms 0") { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        XCTAssertTrue(metrics.contains("calling_peers 0") && metrics.contains("calling_rooms 0"), metrics)
        // A new POST on the ended call's room is refused cleanly, not left hanging.
        let again = try await post(call.call, token: call.token)
        XCTAssertNotEqual(again.status, 201)
        XCTAssertLessThan(again.status, 500, again.text)
    }

    func test_more_requests_per_minute_than_allowed_get_429() async throws {
        try restart { $0.signalingRequestsPerMinute = 3 }
        let call = try await server.createCall()
        var statuses: [Int] = []
        for _ in 0..<4 { statuses.append(try await post(call.call, token: call.token).status) }
        XCTAssertEqual(statuses, [503, 503, 503, 429])
        let limited = try await post(call.call, token: call.token)
        XCTAssertEqual(limited.code, "rate_limited")
        XCTAssertEqual(limited.header("Retry-After"), "20")
        let health = try await server.exchange("GET", "/healthz")
        XCTAssertEqual(health.status, 200, "other routes are not limited")
    }

    // MARK: room limits

    func test_an_http_session_counts_as_a_seat_and_a_full_room_refuses_it_with_409_room_full() async throws {
        try restart { $0.maxPeersPerRoom = 2 }
        let call = try await server.createCall(agentID: "agent-1")
        let agent = try await TestPeer.connect(loop: server.loop, port: server.port,
                                               token: server.token(peer: "agent-1", room: call.room, role: "agent"))
        let observer = try await TestPeer.connect(loop: server.loop, port: server.port, token: server.token(peer: "observer", room: call.room))
        let refused = try await post(call.call, token: call.token)
        XCTAssertEqual(refused.status, 409, refused.text)
        XCTAssertEqual(refused.code, "room_full")
        XCTAssertEqual(refused.header("content-type"), "application/problem+json")

        observer.close()
        _ = try await agent.next(type: "peer-joined")
        _ = try await agent.next(type: "peer-left")
        let (created, _) = try await connect(call.call, token: call.token, agent: agent)
        XCTAssertEqual(created.status, 201, "the seat the observer left is the session's")
        let sessionRefusesThird = try await server.exchange("GET", "/v1/ws?token=\(try server.token(peer: "late", room: call.room))",
                                                            headers: ["Connection": "Upgrade", "Upgrade": "websocket",
                                                                      "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="])
        XCTAssertEqual(sessionRefusesThird.status, 409, "the session holds its seat against WebSocket joiners")
        let (again, _) = try await connect(call.call, token: call.token, agent: agent)
        XCTAssertEqual(again.status, 201, "a new POST of the same caller takes over its own seat")
    }
}
