import CallingCore
import CallingServer
import CallingTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

@testable import CallingClient

/// `WebCallClient` against the real server: a call from the real `POST /v1/calls` (API key from
/// the real CLI) and a real WebSocket agent that answers offers, echoing their `session_id`.
final class WebCallClientTests: ClientTestCase {
    static let offer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
        + "a=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\n"

    static func answer(_ ufrag: String = "ansU") -> String {
        "v=0\r\no=- 3 4 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:\(ufrag)\r\n"
            + "a=ice-pwd:answerpassword0123456789\r\na=candidate:1 1 udp 2122260223 192.0.2.7 50000 typ host\r\n"
    }

    typealias Call = CreatedCall

    /// `POST /v1/calls` with a key made by `calling-server apikey create`.
    func createCall() async throws -> Call { try await server.createCall() }

    func agent(for call: Call) async throws -> TestPeer {
        try await TestPeer.connect(loop: server.loop, port: server.port,
                                   token: server.token(peer: "agent-1", room: call.room, role: "agent"))
    }

    func client(for call: Call, token: String? = nil) -> WebCallClient {
        WebCallClient(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, callID: CallID(call.id),
                      accessToken: token ?? call.token)
    }

    /// Plays the agent for one offer: answers it with `sdp`, echoing the offer's `session_id`.
    @discardableResult
    func answerNextOffer(_ agent: TestPeer, sdp: String = answer()) async throws -> Frame {
        let offer = try await agent.next(type: "offer")
        agent.send(["type": "answer", "to": .string(try XCTUnwrap(offer.from)),
                    "payload": ["sdp": .string(sdp), "type": "answer", "session_id": offer.payload?["session_id"] ?? .null]])
        return offer
    }

    /// A restart must fall back to a new session in time (`GStreamerWebCall.sessionRestartWindow`):
    /// a PATCH the agent leaves unanswered fails after the caller's `timeout`, not after the
    /// server's 10 s answer wait, and the session is still the one to POST over.
    func test_a_renegotiation_left_unanswered_fails_after_the_callers_timeout() async throws {
        let call = try await createCall()
        let agent = try await agent(for: call)
        let web = client(for: call)
        async let answered = web.start(offerSDP: Self.offer)
        try await answerNextOffer(agent)
        _ = try await answered
        let started = Date()
        do {
            _ = try await web.renegotiate(offerSDP: Self.offer + "a=restart\r\n", timeout: 0.5)
            XCTFail("answered without an answer")
        } catch let error as CallingError {
            XCTAssertNil(error.httpStatus, "a local timeout, not the server's 502: \(error)")
            guard case .network = error.kind else { return XCTFail("a network failure: \(error)") }
        }
        let waited = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(waited, 0.45)
        XCTAssertLessThan(waited, 3, "bounded by the timeout, not by session_answer_timeout_ms")
        _ = try await agent.next(type: "offer")  // the renegotiation did reach the agent
        try await web.hangup()
    }

    func test_start_candidate_renegotiate_and_hangup_reach_the_agent() async throws {
        let call = try await createCall()
        let agent = try await agent(for: call)
        let web = client(for: call)
        XCTAssertNil(web.sessionID)

        async let answered = web.start(offerSDP: Self.offer)
        let offer = try await answerNextOffer(agent)
        let answer = try await answered
        XCTAssertEqual(answer, Self.answer())
        XCTAssertEqual(offer.from, call.peer)
        XCTAssertEqual(offer.payload?["sdp"]?.stringValue, Self.offer)
        let id = try XCTUnwrap(web.sessionID)
        XCTAssertEqual(offer.payload?["session_id"]?.stringValue, id)

        do {
            _ = try await web.start(offerSDP: Self.offer)
            XCTFail("a second start while live")
        } catch let error as CallingError {
            XCTAssertFalse(error.isRetryable, "\(error)")
        }

        let line = "candidate:842163049 1 udp 1677729535 198.51.100.4 46154 typ srflx raddr 0.0.0.0 rport 0"
        try await web.addCandidate(candidate: line, sdpMid: "0", sdpMLineIndex: 0)
        let candidate = try await agent.next(type: "candidate")
        XCTAssertEqual(candidate.from, call.peer)
        XCTAssertEqual(candidate.payload?["candidate"]?.stringValue, line)
        XCTAssertEqual(candidate.payload?["sdpMid"], "0")
        XCTAssertEqual(candidate.payload?["sdpMLineIndex"], 0)
        XCTAssertEqual(candidate.payload?["session_id"]?.stringValue, id)

        async let renegotiated = web.renegotiate(offerSDP: Self.offer + "a=x\r\n")
        let second = try await agent.next(type: "offer")
        XCTAssertEqual(second.payload?["sdp"]?.stringValue, Self.offer + "a=x\r\n")
        do {
            _ = try await web.renegotiate(offerSDP: Self.offer)
            XCTFail("a second renegotiation while the first is unanswered")
        } catch let error as CallingError {
            XCTAssertEqual(error, CallingError(.http(status: 409, code: "renegotiation_in_progress", detail: error.kindDetail)))
            XCTAssertFalse(error.isRetryable)
        }
        agent.send(["type": "answer", "to": .string(call.peer),
                    "payload": ["sdp": .string(Self.answer("v2")), "type": "answer", "session_id": .string(id)]])
        let answer2 = try await renegotiated
        XCTAssertEqual(answer2, Self.answer("v2"))
        XCTAssertEqual(web.sessionID, id, "renegotiation keeps the session")

        try await web.hangup()
        XCTAssertNil(web.sessionID)
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payload?["kind"], "hangup")
        XCTAssertEqual(hangup.payload?["session_id"]?.stringValue, id)
        _ = try await agent.next(type: "peer-left")
        try await web.hangup()  // idempotent
        do {
            try await web.addCandidate(candidate: "", sdpMid: nil, sdpMLineIndex: nil)
            XCTFail("candidate after hangup")
        } catch let error as CallingError {
            XCTAssertNil(error.httpStatus, "refused locally: \(error)")
        }
    }

    func test_reconnect_takes_over_and_the_old_session_answers_404() async throws {
        let call = try await createCall()
        let agent = try await agent(for: call)
        let old = client(for: call)
        async let first = old.start(offerSDP: Self.offer)
        try await answerNextOffer(agent)
        _ = try await first
        let oldID = try XCTUnwrap(old.sessionID)

        // The app's new peer connection after a network change: same call, same token.
        let new = client(for: call)
        async let second = new.reconnect(offerSDP: Self.offer + "a=new\r\n")
        let replaced = try await agent.next(type: "data")
        XCTAssertEqual(replaced.payload?["kind"], "replaced")
        XCTAssertEqual(replaced.payload?["session_id"]?.stringValue, oldID)
        let offer = try await answerNextOffer(agent, sdp: Self.answer("v2"))
        XCTAssertEqual(offer.from, call.peer, "the seat passes on to the same peer id")
        let answer = try await second
        XCTAssertEqual(answer, Self.answer("v2"))
        let newID = try XCTUnwrap(new.sessionID)
        XCTAssertNotEqual(newID, oldID)

        do {
            try await old.addCandidate(candidate: "", sdpMid: "0", sdpMLineIndex: 0)
            XCTFail("the replaced session still accepted a candidate")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 404)
            XCTAssertEqual(error, CallingError(.http(status: 404, code: "session_not_found", detail: error.kindDetail)))
            XCTAssertFalse(error.isRetryable)
        }
        try await old.hangup()  // DELETE of a replaced session: 204, and it leaves the new one alone

        try await new.addCandidate(candidate: "", sdpMid: "0", sdpMLineIndex: 0)
        let candidate = try await agent.next(type: "candidate")
        XCTAssertEqual(candidate.payload?["session_id"]?.stringValue, newID)
        XCTAssertEqual(candidate.payload?["candidate"]?.stringValue, "")
        try await new.hangup()
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payload?["kind"], "hangup")
        XCTAssertEqual(hangup.payload?["session_id"]?.stringValue, newID)
    }

    func test_without_an_agent_start_is_a_retryable_503_with_retry_after() async throws {
        let call = try await createCall()
        let web = client(for: call)
        do {
            _ = try await web.start(offerSDP: Self.offer)
            XCTFail("started without an agent")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 503)
            XCTAssertTrue(error.isRetryable)
            XCTAssertEqual(error, CallingError(.http(status: 503, code: "no_answering_peer", detail: error.kindDetail)))
            XCTAssertEqual(web.retryAfter, 2)
        }
        XCTAssertNil(web.sessionID)
    }

    func test_a_bad_token_is_a_401_that_is_not_retryable() async throws {
        let call = try await createCall()
        _ = try await agent(for: call)
        let web = client(for: call, token: "not-a-jwt")
        do {
            _ = try await web.start(offerSDP: Self.offer)
            XCTFail("started with a bad token")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 401)
            XCTAssertFalse(error.isRetryable)
            XCTAssertNil(web.retryAfter)
        }
        XCTAssertNil(web.sessionID)
    }

    func test_the_sessions_url_keeps_a_base_path_and_maps_websocket_schemes() {
        func url(_ base: String, _ call: String = "c1") -> String? {
            WebCallClient(baseURL: URL(string: base)!, callID: CallID(call), accessToken: "t").sessionsURL?.absoluteString
        }
        XCTAssertEqual(url("http://127.0.0.1:8080"), "http://127.0.0.1:8080/webrtc-proxy/c1/v1/webrtc/sessions")
        XCTAssertEqual(url("https://calls.example.org/api/"), "https://calls.example.org/api/webrtc-proxy/c1/v1/webrtc/sessions")
        XCTAssertEqual(url("wss://calls.example.org"), "https://calls.example.org/webrtc-proxy/c1/v1/webrtc/sessions")
        XCTAssertEqual(url("ws://h:1", "a/b c"), "http://h:1/webrtc-proxy/a%2Fb%20c/v1/webrtc/sessions")
    }

    func test_a_hangup_during_start_deletes_the_session_when_it_arrives() async throws {
        let call = try await createCall()
        let agent = try await agent(for: call)
        let web = client(for: call)
        async let started = web.start(offerSDP: Self.offer)
        let offer = try await agent.next(type: "offer")
        try await web.hangup()  // no session yet: nothing to delete now
        agent.send(["type": "answer", "to": .string(call.peer),
                    "payload": ["sdp": .string(Self.answer()), "session_id": offer.payload?["session_id"] ?? .null]])
        do {
            _ = try await started
            XCTFail("start completed after hangup")
        } catch let error as CallingError {
            XCTAssertNil(error.httpStatus, "\(error)")
        }
        XCTAssertNil(web.sessionID)
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payload?["kind"], "hangup")
        XCTAssertEqual(hangup.payload?["session_id"], offer.payload?["session_id"])
    }
}

private extension CallingError {
    /// The `detail` of an `http` error, so tests can compare the status and code exactly.
    var kindDetail: String {
        if case .http(_, _, let detail) = kind { return detail }
        return ""
    }
}

