import CallingCore
import CallingServer
import CallingTesting
import Foundation
import XCTest

/// `/v1/admin/…` and `calling-server admin` end to end: real server, real keys from the real CLI,
/// real lws peers and HTTP sessions. One server at a time (libev: one signal watcher per process).
final class AdminAPITests: ServerTestCase {

    // MARK: helpers

    func makeKey(scope: String) throws -> String {
        let (code, output) = try runCapturingOutput(["apikey", "create", "--name", "ops-\(scope)", "--scope", scope,
                                                     "--data-dir", server.config.dataDir])
        XCTAssertEqual(code, 0)
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func admin(_ method: String, _ path: String, key: String?, body: JSONValue? = nil) async throws -> HTTPExchangeResult {
        try await server.exchange(method, path, contentType: body == nil ? nil : "application/json",
                                  body: body.map(JSONWriter.string), headers: key.map { ["X-API-Key": $0] } ?? [:])
    }

    /// `calling-server admin …` in-process, with the key in the environment as an operator would set it.
    func cli(_ arguments: [String], key: String?) throws -> (Int32, String) {
        var environment: [String: String] = [:]
        if let key { environment["CALLING_ADMIN_KEY"] = key }
        return try capturingStandardOutput {
            CallingCommand.run(["calling-server", "admin"] + arguments + ["--url", "http://127.0.0.1:\(server.port)"],
                               environment: environment)
        }
    }

    // MARK: keys

    func test_admin_routes_need_an_admin_key_and_call_routes_a_calls_key() async throws {
        let calls = try makeKey(scope: "calls")
        let ops = try makeKey(scope: "admin")
        let missing = try await admin("GET", "/v1/admin/rooms", key: nil)
        XCTAssertEqual(missing.status, 401)
        XCTAssertEqual(missing.code, "api_key_missing")
        let wrong = try await admin("GET", "/v1/admin/rooms", key: calls)
        XCTAssertEqual(wrong.status, 403)
        XCTAssertEqual(wrong.code, "api_key_wrong_scope")
        XCTAssertEqual(wrong.header("content-type"), "application/problem+json")
        let bogus = try await admin("GET", "/v1/admin/rooms", key: "csk_not-a-key")
        XCTAssertEqual(bogus.status, 401)
        let listed = try await admin("GET", "/v1/admin/rooms", key: ops)
        XCTAssertEqual(listed.status, 200, listed.text)
        let createWithAdmin = try await admin("POST", "/v1/calls", key: ops, body: [:])
        XCTAssertEqual(createWithAdmin.status, 403, "an admin key does not create calls")
        XCTAssertEqual(createWithAdmin.code, "api_key_wrong_scope")
        let both = try makeKey(scope: "calls admin")
        let createWithBoth = try await admin("POST", "/v1/calls", key: both, body: [:])
        XCTAssertEqual(createWithBoth.status, 201)
        let method = try await admin("DELETE", "/v1/admin/rooms", key: ops)
        XCTAssertEqual(method.status, 405)
        let unknown = try await admin("GET", "/v1/admin/nothing", key: ops)
        XCTAssertEqual(unknown.status, 404)
    }

    // MARK: listing

    func test_rooms_list_websocket_peers_and_http_sessions() async throws {
        let ops = try makeKey(scope: "admin")
        let call = try await server.createCall(agentID: "agent-1")
        let agent = try await TestPeer.connect(loop: server.loop, port: server.port,
                                               token: server.token(peer: "agent-1", room: call.room, role: "agent", name: "Ann"))
        let other = try await server.join("solo", room: "room-b")
        let client = server.client
        async let posted = client.postSession(call.call, token: call.token)
        let offer = try await agent.next(type: "offer")
        agent.send(["type": "answer", "to": .string(offer.from!), "payload": ["sdp": .string(sampleAnswer()), "type": "answer"]])
        let answered = try await posted
        XCTAssertEqual(answered.status, 201)

        let listed = try await admin("GET", "/v1/admin/rooms", key: ops)
        XCTAssertEqual(listed.status, 200)
        XCTAssertEqual(listed.json["draining"], false)
        let rooms = listed.json["rooms"]?.arrayValue ?? []
        XCTAssertEqual(rooms.compactMap { $0["room_id"]?.stringValue }, [call.room, "room-b"].sorted())
        let one = try await admin("GET", "/v1/admin/rooms/\(call.room)", key: ops)
        XCTAssertEqual(one.json["peer_count"], 2)
        XCTAssertEqual(one.json["peers"], [
            ["peer_id": "agent-1", "role": "agent", "name": "Ann", "call_id": .null, "transport": "websocket"],
            ["peer_id": .string(call.peer), "role": "caller", "name": .null, "call_id": .string(call.call), "transport": "http"],
        ])
        let none = try await admin("GET", "/v1/admin/rooms/empty-room", key: ops)
        XCTAssertEqual(none.status, 404)
        XCTAssertEqual(none.code, "room_not_found")

        let (code, printed) = try cli(["rooms", "--room", "room-b"], key: ops)
        XCTAssertEqual(code, 0)
        XCTAssertEqual(try JSONParser.parse(Array(printed.utf8))["peers"]?.arrayValue?.first?["peer_id"], "solo")
        _ = other
    }

    // MARK: kick

    func test_a_kicked_peer_is_closed_with_4403_and_its_token_cannot_rejoin() async throws {
        let ops = try makeKey(scope: "admin")
        let alice = try await server.join("alice")
        let bobToken = try server.token(peer: "bob", tokenID: "bob-1")
        let bob = try await TestPeer.connect(loop: server.loop, port: server.port, token: bobToken)
        _ = try await alice.next(type: "peer-joined")

        let kicked = try await admin("POST", "/v1/admin/rooms/room-1/peers/bob/kick", key: ops)
        XCTAssertEqual(kicked.status, 200, kicked.text)
        XCTAssertEqual(kicked.json["close_code"], 4403)
        let close = try await bob.closeEvent()
        XCTAssertEqual(close.code, 4403)
        XCTAssertEqual(close.reason, "kicked")
        let left = try await alice.next(type: "peer-left")
        XCTAssertEqual(left.from, "bob")

        do {
            _ = try await TestPeer.connect(loop: server.loop, port: server.port, token: bobToken)
            XCTFail("the kicked token joined again")
        } catch TestPeerError.connectFailed(let status, _) {
            XCTAssertEqual(status, 403)
        }
        let again = try await TestPeer.connect(loop: server.loop, port: server.port, token: server.token(peer: "bob", tokenID: "bob-2"))
        XCTAssertEqual(again.welcome.payloadObject["peer_id"], "bob", "a new token (another jti) for the same peer is fine")

        let absent = try await admin("POST", "/v1/admin/rooms/room-1/peers/nobody/kick", key: ops)
        XCTAssertEqual(absent.status, 404)
        XCTAssertEqual(absent.code, "peer_not_found")

        let (code, _) = try cli(["kick", "--room", "room-1", "--peer", "alice"], key: ops)
        XCTAssertEqual(code, 0)
        let aliceClose = try await alice.closeEvent()
        XCTAssertEqual(aliceClose.code, 4403)
        let metrics = try await server.exchange("GET", "/metrics")
        XCTAssertTrue(metrics.text.contains(#"calling_join_refusals_total{code="kicked"} 1"#), metrics.text)
    }

    // MARK: end

    func test_ending_a_room_closes_every_peer_and_http_session_and_ends_its_call() async throws {
        let ops = try makeKey(scope: "admin")
        let calls = try makeKey(scope: "calls")
        let call = try await server.createCall(agentID: "agent-1")
        let agent = try await TestPeer.connect(loop: server.loop, port: server.port,
                                               token: server.token(peer: "agent-1", room: call.room, role: "agent"))
        let client = server.client
        async let posted = client.postSession(call.call, token: call.token)
        let offer = try await agent.next(type: "offer")
        agent.send(["type": "answer", "to": .string(offer.from!), "payload": ["sdp": .string(sampleAnswer()), "type": "answer"]])
        let session = try await posted
        XCTAssertEqual(session.status, 201)
        let location = try XCTUnwrap(session.header("location"))

        let ended = try await admin("POST", "/v1/admin/rooms/\(call.room)/end", key: ops)
        XCTAssertEqual(ended.status, 200, ended.text)
        XCTAssertEqual(ended.json["peers_closed"], 2)
        XCTAssertEqual(ended.json["calls_ended"], [.string(call.call)])
        let agentClose = try await agent.closeEvent()
        XCTAssertEqual(agentClose.code, 4404)
        let patch = try await server.exchange("PATCH", location, bearer: call.token, contentType: "application/json",
                                              body: #"{"candidate":{"candidate":"candidate:1 1 udp 1 192.0.2.1 9 typ host","sdpMid":"0"}}"#)
        XCTAssertEqual(patch.status, 404, "the HTTP session ended with the room: \(patch.text)")
        let record = try await server.exchange("GET", "/v1/calls/\(call.call)", headers: ["X-API-Key": calls])
        XCTAssertEqual(record.json["state"], "ended")
        XCTAssertEqual(record.json["end_reason"], "ended_by_admin")
        let rejoin = try await server.client.postSession(call.call, token: call.token)
        XCTAssertEqual(rejoin.status, 404, "the call is over: \(rejoin.text)")

        let nothing = try await admin("POST", "/v1/admin/rooms/\(call.room)/end", key: ops)
        XCTAssertEqual(nothing.status, 404)
    }

    // MARK: data

    func test_server_data_reaches_the_room_or_one_peer_from_the_server_identity() async throws {
        let ops = try makeKey(scope: "admin")
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        _ = try await alice.next(type: "peer-joined")

        let all = try await admin("POST", "/v1/admin/rooms/room-1/data", key: ops, body: ["payload": ["kind": "notice", "text": "restart at 02:00"]])
        XCTAssertEqual(all.status, 200, all.text)
        XCTAssertEqual(all.json["delivered"], 2)
        for peer in [alice, bob] {
            let frame = try await peer.next(type: "data")
            XCTAssertEqual(frame.from, "_server")
            XCTAssertEqual(frame.payloadObject["text"], "restart at 02:00")
        }
        let (code, _) = try cli(["send", "--room", "room-1", "--peer", "bob", "--payload", #"{"kind":"whisper"}"#], key: ops)
        XCTAssertEqual(code, 0)
        let whisper = try await bob.next(type: "data")
        XCTAssertEqual(whisper.to, "bob")
        XCTAssertEqual(whisper.payloadObject["kind"], "whisper")
        try await alice.expectNoFrame(within: 0.3)

        let noPayload = try await admin("POST", "/v1/admin/rooms/room-1/data", key: ops, body: ["payload": "text"])
        XCTAssertEqual(noPayload.status, 400)
        XCTAssertEqual(noPayload.code, "invalid_params")
        let missingPeer = try await admin("POST", "/v1/admin/rooms/room-1/data", key: ops, body: ["to": "carol", "payload": [:]])
        XCTAssertEqual(missingPeer.status, 404)
        XCTAssertEqual(missingPeer.code, "peer_not_found")
        do {
            _ = try await TestPeer.connect(loop: server.loop, port: server.port, token: server.token(peer: "_server"))
            XCTFail("a token may not speak as the server")
        } catch TestPeerError.connectFailed(let status, _) {
            XCTAssertEqual(status, 403)
        }
    }

    // MARK: drain

    func test_draining_refuses_new_joins_with_503_while_rooms_go_on_until_empty() async throws {
        let ops = try makeKey(scope: "admin")
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        _ = try await alice.next(type: "peer-joined")

        let (code, printed) = try cli(["drain"], key: ops)
        XCTAssertEqual(code, 0)
        XCTAssertEqual(try JSONParser.parse(Array(printed.utf8))["draining"], true)
        let refused = try await server.http("GET", "/v1/ws?token=\(try server.token(peer: "carol"))",
                                            headers: ["Connection": "Upgrade", "Upgrade": "websocket",
                                                      "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="])
        XCTAssertEqual(refused.0, 503)
        XCTAssertEqual(try JSONParser.parse([UInt8](refused.1))["code"], "draining")

        alice.send(["type": "data", "payload": ["still": "here"]])
        let still = try await bob.next(type: "data")
        XCTAssertEqual(still.payloadObject["still"], "here", "existing rooms go on")
        let status = try await admin("GET", "/v1/admin/drain", key: ops)
        XCTAssertEqual(status.json["empty"], false)
        XCTAssertEqual(status.json["peers"], 2)

        let (timedOut, _) = try cli(["status", "--wait", "0.2"], key: ops)
        XCTAssertEqual(timedOut, 1, "not empty yet")
        alice.close()
        bob.close()
        let (emptied, final) = try cli(["status", "--wait", "10"], key: ops)
        XCTAssertEqual(emptied, 0, final)
        XCTAssertEqual(try JSONParser.parse(Array(final.utf8))["empty"], true)

        let undrained = try await admin("POST", "/v1/admin/drain", key: ops, body: ["draining": false])
        XCTAssertEqual(undrained.json["draining"], false)
        _ = try await server.join("carol")
        let bad = try await admin("POST", "/v1/admin/drain", key: ops, body: ["draining": "yes"])
        XCTAssertEqual(bad.status, 400)
    }

    // MARK: CLI

    func test_the_cli_takes_its_key_from_the_environment_or_a_file_never_a_flag() throws {
        let ops = try makeKey(scope: "admin")
        XCTAssertEqual(try cli(["rooms", "--key", ops], key: nil).0, 64, "a key as a flag value is refused")
        XCTAssertEqual(try cli(["rooms"], key: nil).0, 64, "no key at all")
        let file = server.dataDir + "/admin-key"
        try (ops + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let (code, printed) = try cli(["rooms", "--key-file", file], key: nil)
        XCTAssertEqual(code, 0)
        XCTAssertEqual(try JSONParser.parse(Array(printed.utf8))["rooms"], [])
        XCTAssertEqual(try cli(["rooms"], key: "csk_wrong").0, 1, "a refused key is exit 1")
        XCTAssertEqual(try cli(["kick", "--room", "r"], key: ops).0, 64, "--peer is required")
        let unreachable = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "admin", "rooms", "--url", "http://127.0.0.1:1"], environment: ["CALLING_ADMIN_KEY": ops])
        }
        XCTAssertEqual(unreachable.0, 69)
    }
}
