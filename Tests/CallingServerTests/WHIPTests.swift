import CallingAuth
import CallingCore
import CallingServer
import CallingTesting
import Foundation
import XCTest

/// WHIP (RFC 9725) end to end: a real publisher over URLSession, a real WebSocket agent answering.
/// One server at a time (libev: one signal watcher per process).
final class WHIPTests: XCTestCase {
    var server: ServerHarness!

    override func setUp() async throws {
        server = try ServerHarness {
            $0.turnURLs = "turn:127.0.0.1:3478?transport=udp"
            $0.turnSecret = "whip-test-turn-secret"
            $0.stunURLs = "stun:127.0.0.1:3478"
        }
    }

    override func tearDown() async throws {
        server?.shutdown()
    }

    let room = "room-w"

    func publisherToken(room: String? = nil) throws -> String {
        try server.token(peer: "pub-1", room: room ?? self.room, role: "client")
    }

    /// POSTs the offer, answers it as `agent`, returns the 201.
    func publish(agent: TestPeer, token: String, headers: [String: String] = [:]) async throws -> HTTPExchangeResult {
        let client = server.client
        let path = "/whip/\(room)"
        async let response = client.exchange("POST", path, bearer: token, contentType: "application/sdp", body: sampleOffer,
                                             headers: headers)
        let offer = try await agent.next(type: "offer")
        XCTAssertEqual(offer.payloadObject["transport"], "whip")
        agent.send(["type": "answer", "to": .string(offer.from!), "payload": ["sdp": .string(sampleAnswer())]])
        return try await response
    }

    func test_options_advertises_the_accepted_types() async throws {
        let collection = try await server.exchange("OPTIONS", "/whip/\(room)")
        XCTAssertEqual(collection.status, 204)
        XCTAssertEqual(collection.header("Accept-Post"), "application/sdp")
        XCTAssertEqual(collection.header("Accept-Patch"), "application/trickle-ice-sdpfrag")
        let resource = try await server.exchange("OPTIONS", "/whip/\(room)/anything")
        XCTAssertEqual(resource.status, 204)
        XCTAssertEqual(resource.header("Accept-Patch"), "application/trickle-ice-sdpfrag")
    }

    func test_post_returns_location_etag_ice_servers_and_the_answer() async throws {
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let created = try await publish(agent: agent, token: try publisherToken())
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertEqual(created.header("Content-Type"), "application/sdp")
        XCTAssertEqual(created.text, sampleAnswer())
        let location = try XCTUnwrap(created.header("Location"))
        XCTAssertTrue(location.hasPrefix("/whip/\(room)/"), location)
        XCTAssertNotNil(created.header("ETag"))
        let links = try XCTUnwrap(created.header("Link"))
        XCTAssertTrue(links.contains("<turn:127.0.0.1:3478?transport=udp>; rel=\"ice-server\"; username=\""), links)
        XCTAssertTrue(links.contains("credential-type=\"password\""), links)
        XCTAssertTrue(links.contains("<stun:127.0.0.1:3478>; rel=\"ice-server\""), links)
    }

    func test_trickle_needs_a_current_etag_and_relays_each_candidate() async throws {
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let token = try publisherToken()
        let created = try await publish(agent: agent, token: token)
        let location = try XCTUnwrap(created.header("Location"))
        let etag = try XCTUnwrap(created.header("ETag"))
        let fragment = "a=ice-ufrag:offU\r\na=ice-pwd:offerpassword0123456789\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n"
            + "a=candidate:1 1 udp 2122260223 192.0.2.9 50001 typ host\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
            + "a=mid:1\r\na=candidate:2 1 udp 2122260223 192.0.2.9 50002 typ host\r\n"
        let sdpfrag = "application/trickle-ice-sdpfrag"

        let noIfMatch = try await server.exchange("PATCH", location, bearer: token, contentType: sdpfrag, body: fragment)
        XCTAssertEqual(noIfMatch.status, 428)
        let stale = try await server.exchange("PATCH", location, bearer: token, contentType: sdpfrag, body: fragment,
                                              headers: ["If-Match": "\"stale.1\""])
        XCTAssertEqual(stale.status, 412)
        let wrongType = try await server.exchange("PATCH", location, bearer: token, contentType: "application/sdp", body: fragment,
                                                  headers: ["If-Match": etag])
        XCTAssertEqual(wrongType.status, 415)
        try await agent.expectNoFrame(within: 0.1)

        let trickled = try await server.exchange("PATCH", location, bearer: token, contentType: sdpfrag, body: fragment,
                                                 headers: ["If-Match": etag])
        XCTAssertEqual(trickled.status, 204, trickled.text)
        let first = try await agent.next(type: "candidate")
        XCTAssertEqual(first.payloadObject["candidate"]?.stringValue, "candidate:1 1 udp 2122260223 192.0.2.9 50001 typ host")
        XCTAssertEqual(first.payloadObject["sdpMid"], "0")
        XCTAssertEqual(first.payloadObject["sdpMLineIndex"], 0)
        let second = try await agent.next(type: "candidate")
        XCTAssertEqual(second.payloadObject["sdpMid"], "1")
        XCTAssertEqual(second.payloadObject["sdpMLineIndex"], 1)
    }

    func test_browsers_may_call_from_another_origin() async throws {
        let preflight = try await server.exchange("OPTIONS", "/whip/\(room)", headers: ["Origin": "https://app.example",
                                                                                     "Access-Control-Request-Method": "POST"])
        XCTAssertEqual(preflight.status, 204)
        XCTAssertEqual(preflight.header("Access-Control-Allow-Origin"), "*")
        XCTAssertTrue(preflight.header("Access-Control-Allow-Headers")?.contains("Authorization") ?? false)
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let created = try await publish(agent: agent, token: try publisherToken(), headers: ["Origin": "https://app.example"])
        XCTAssertEqual(created.header("Access-Control-Allow-Origin"), "*")
        XCTAssertTrue(created.header("Access-Control-Expose-Headers")?.contains("Location") ?? false)
    }

    func test_a_patch_with_too_many_candidates_is_refused_before_anything_is_relayed() async throws {
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let token = try publisherToken()
        let created = try await publish(agent: agent, token: token)
        let location = try XCTUnwrap(created.header("Location"))
        let etag = try XCTUnwrap(created.header("ETag"))
        let flood = "a=mid:0\r\n" + String(repeating: "a=candidate:1 1 udp 1 192.0.2.9 5000 typ host\r\n", count: 65)
        let refused = try await server.exchange("PATCH", location, bearer: token, contentType: "application/trickle-ice-sdpfrag",
                                                body: flood, headers: ["If-Match": etag])
        XCTAssertEqual(refused.status, 400, refused.text)
        try await agent.expectNoFrame(within: 0.2)
    }

    func test_an_ice_restart_is_renegotiated_and_changes_the_etag() async throws {
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let token = try publisherToken()
        let created = try await publish(agent: agent, token: token)
        let location = try XCTUnwrap(created.header("Location"))
        let oldETag = try XCTUnwrap(created.header("ETag"))
        let restart = "a=ice-ufrag:newU\r\na=ice-pwd:newpassword0123456789ab\r\n"
        let client = server.client
        async let restarted = client.exchange("PATCH", location, bearer: token, contentType: "application/trickle-ice-sdpfrag",
                                              body: restart, headers: ["If-Match": "*"])
        let offer = try await agent.next(type: "offer")
        let sdp = try XCTUnwrap(offer.payloadObject["sdp"]?.stringValue)
        XCTAssertTrue(sdp.contains("a=ice-ufrag:newU\r\n") && !sdp.contains("offU"), sdp)
        agent.send(["type": "answer", "to": "pub-1", "payload": ["sdp": .string(sampleAnswer(ufrag: "ans2"))]])
        let answered = try await restarted
        XCTAssertEqual(answered.status, 200, answered.text)
        XCTAssertEqual(answered.header("Content-Type"), "application/trickle-ice-sdpfrag")
        XCTAssertTrue(answered.text.contains("a=ice-ufrag:ans2\r\n"), answered.text)
        XCTAssertTrue(answered.text.contains("a=candidate:1 1 udp"), answered.text)
        let newETag = try XCTUnwrap(answered.header("ETag"))
        XCTAssertNotEqual(newETag, oldETag)
        let stale = try await server.exchange("PATCH", location, bearer: token, contentType: "application/trickle-ice-sdpfrag",
                                              body: "a=end-of-candidates\r\n", headers: ["If-Match": oldETag])
        XCTAssertEqual(stale.status, 412, "the ETag before the restart is stale")
    }

    func test_post_refusals_and_delete() async throws {
        let token = try publisherToken()
        let noAnswerer = try await server.exchange("POST", "/whip/\(room)", bearer: token, contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(noAnswerer.status, 503)
        let agent = try await server.join("agent-1", room: room, role: "agent")
        let wrongType = try await server.exchange("POST", "/whip/\(room)", bearer: token, contentType: "application/json", body: "{}")
        XCTAssertEqual(wrongType.status, 415)
        let otherRoom = try await server.exchange("POST", "/whip/\(room)", bearer: try publisherToken(room: "elsewhere"),
                                                  contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(otherRoom.status, 403)
        let anonymous = try await server.exchange("POST", "/whip/\(room)", contentType: "application/sdp", body: sampleOffer)
        XCTAssertEqual(anonymous.status, 401)
        let empty = try await server.exchange("POST", "/whip/\(room)", bearer: token, contentType: "application/sdp", body: "")
        XCTAssertEqual(empty.status, 400)

        let created = try await publish(agent: agent, token: token)
        let location = try XCTUnwrap(created.header("Location"))
        let deleted = try await server.exchange("DELETE", location, bearer: token)
        XCTAssertEqual(deleted.status, 204)
        let hangup = try await agent.next(type: "data")
        XCTAssertEqual(hangup.payloadObject["kind"], "hangup")
        _ = try await agent.next(type: "peer-left")
        let again = try await server.exchange("DELETE", location, bearer: token)
        XCTAssertEqual(again.status, 204)
        let gone = try await server.exchange("PATCH", location, bearer: token, contentType: "application/trickle-ice-sdpfrag",
                                             body: "a=end-of-candidates\r\n", headers: ["If-Match": "*"])
        XCTAssertEqual(gone.status, 404)
    }
}
