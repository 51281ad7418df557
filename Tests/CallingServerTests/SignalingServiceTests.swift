import CallingCore
import CallingServer
import CallingTesting
import Foundation
import XCTest

/// The room protocol end to end: real server, real lws clients, real SQLite.
/// One server per test, never two at once: libev allows one signal watcher per process.
final class SignalingServiceTests: ServerTestCase {

    func test_welcome_lists_the_peers_already_in_the_room() async throws {
        let alice = try await server.join("alice", role: "agent", name: "Alice")
        XCTAssertEqual(alice.welcome.type, "welcome")
        XCTAssertEqual(alice.welcome.payloadObject["peer_id"], "alice")
        XCTAssertEqual(alice.welcome.payloadObject["room_id"], "room-1")
        XCTAssertEqual(alice.welcome.payloadObject["role"], "agent")
        XCTAssertEqual(alice.welcome.payloadObject["peers"], .array([]))
        XCTAssertEqual(alice.welcome.payloadObject["ping_interval_ms"], .int(Int64(server.config.pingIntervalMs)))
        let serverTime = try XCTUnwrap(alice.welcome.payloadObject["server_time"]?.int64Value)
        XCTAssertLessThan(abs(serverTime - Int64(Date().timeIntervalSince1970 * 1000)), 5_000)

        let bob = try await server.join("bob", name: "Bob")
        XCTAssertEqual(bob.welcome.payloadObject["peers"], [["peer_id": "alice", "role": "agent", "name": "Alice"]])
        let joined = try await alice.next(type: "peer-joined")
        XCTAssertEqual(joined.from, "bob")
        XCTAssertEqual(joined.payloadObject["name"], "Bob")
    }

    func test_relay_reaches_only_the_addressed_peer_with_from_stamped_by_the_server() async throws {
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        let carol = try await server.join("carol")
        _ = try await alice.next(type: "peer-joined")
        _ = try await alice.next(type: "peer-joined")
        _ = try await bob.next(type: "peer-joined")

        alice.send(["type": "offer", "to": "bob", "from": "mallory", "payload": ["sdp": "v=0\r\n", "type": "offer"]])
        let offer = try await bob.next(type: "offer")
        XCTAssertEqual(offer.from, "alice")
        XCTAssertEqual(offer.payloadObject["sdp"], "v=0\r\n")

        bob.send(["type": "answer", "to": "alice", "payload": ["sdp": "v=0 answer"]])
        let answerFrom = try await alice.next(type: "answer").from
        XCTAssertEqual(answerFrom, "bob")

        bob.send(["type": "candidate", "to": "alice", "payload": ["candidate": "candidate:1 1 udp 1 10.0.0.1 9 typ host",
                                                                   "sdpMid": "0", "sdpMLineIndex": 0]])
        let candidateMid = try await alice.next(type: "candidate").payloadObject["sdpMid"]
        XCTAssertEqual(candidateMid, "0")
        try await carol.expectNoFrame(within: 0.3)

        alice.send(["type": "data", "payload": ["kind": "hangup"]])
        let dataKind = try await bob.next(type: "data").payloadObject["kind"]
        XCTAssertEqual(dataKind, "hangup")
        let broadcastFrom = try await carol.next(type: "data").from
        XCTAssertEqual(broadcastFrom, "alice")
    }

    func test_unknown_recipient_gets_an_error_and_the_connection_lives_on() async throws {
        let alice = try await server.join("alice")
        alice.send(["type": "offer", "to": "nobody", "payload": ["sdp": "v=0"]])
        let error = try await alice.next(type: "error")
        XCTAssertEqual(error.error?.code, ErrorCode.peerNotFound.rawValue)
        alice.send(["type": "ping", "payload": ["n": 7]])
        let pongValue = try await alice.next(type: "pong").payloadObject["n"]
        XCTAssertEqual(pongValue, 7)
    }

    func test_every_bad_input_class_gets_its_error_code_and_the_connection_stays() async throws {
        try restart { $0.maxFrameBytes = 4_096 }
        let alice = try await server.join("alice")
        let cases: [(String, [UInt8], Bool, ErrorCode)] = [
            ("invalid JSON", Array("{nope".utf8), false, .badJSON),
            ("not an object", Array("[1,2]".utf8), false, .badFrame),
            ("type not a string", Array(#"{"type":5}"#.utf8), false, .badFrame),
            ("to not a string", Array(#"{"type":"data","to":5}"#.utf8), false, .badFrame),
            ("unknown type", Array(#"{"type":"teleport"}"#.utf8), false, .unknownType),
            ("server-only type", Array(#"{"type":"welcome"}"#.utf8), false, .unknownType),
            ("offer without sdp", Array(#"{"type":"offer","to":"x","payload":{}}"#.utf8), false, .invalidPayload),
            ("binary frame", [1, 2, 3], true, .binaryUnsupported),
            ("invalid UTF-8", [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D], false, .invalidUTF8),
            ("oversize", Array(("{\"type\":\"ping\",\"payload\":\"" + String(repeating: "x", count: 5_000) + "\"}").utf8), false,
             .frameTooLarge),
        ]
        for (name, bytes, binary, code) in cases {
            alice.connection.send(bytes: bytes, binary: binary)
            let error = try await alice.next(type: "error")
            XCTAssertEqual(error.error?.code, code.rawValue, name)
            XCTAssertFalse(error.error?.message.isEmpty ?? true, name)
        }
        alice.send(["type": "ping"])
        _ = try await alice.next(type: "pong")
    }

    func test_second_connection_with_same_peer_takes_over_without_leave_or_join() async throws {
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        _ = try await alice.next(type: "peer-joined")

        let bobAgain = try await server.join("bob")
        let closed = try await bob.closeEvent()
        XCTAssertEqual(closed.code, CloseCode.replaced.rawValue)
        XCTAssertTrue(CloseCode.replaced.isTerminal)
        try await alice.expectNoFrame(within: 0.3)

        alice.send(["type": "data", "to": "bob", "payload": ["kind": "hello"]])
        let relayedFrom = try await bobAgain.next(type: "data").from
        XCTAssertEqual(relayedFrom, "alice")
    }

    func test_refused_tokens_get_http_statuses_before_the_upgrade() async throws {
        func status(_ token: String) async -> Int? {
            do {
                _ = try await TestPeer.connect(loop: server.loop, port: server.port, token: token)
                return 101
            } catch TestPeerError.connectFailed(let status, _) {
                return status
            } catch {
                return nil
            }
        }
        let good = try server.token(peer: "alice")
        var tampered = Array(good)
        tampered[tampered.count - 3] = tampered[tampered.count - 3] == "A" ? "B" : "A"
        let garbageStatus = await status("not-a-jwt")
        XCTAssertEqual(garbageStatus, 401)
        let tamperedStatus = await status(String(tampered))
        XCTAssertEqual(tamperedStatus, 401)
        let expiredStatus = await status(try server.token(peer: "alice", ttl: -120))
        XCTAssertEqual(expiredStatus, 401)
        let otherAudience = try server.issuer.issue(.init(sub: "alice", roomID: "room-1", audience: "someone-else",
                                                          expiresAt: Date().addingTimeInterval(60)))
        let audienceStatus = await status(otherAudience)
        XCTAssertEqual(audienceStatus, 403)
        let noRoom = try server.issuer.issue(.init(sub: "alice", audience: server.config.jwtAudience,
                                                   expiresAt: Date().addingTimeInterval(60)))
        let noRoomStatus = await status(noRoom)
        XCTAssertEqual(noRoomStatus, 403)
        let validStatus = await status(good)
        XCTAssertEqual(validStatus, 101)
    }

    func test_bearer_header_is_accepted_like_the_query_token() async throws {
        let peer = try await TestPeer.connect(loop: server.loop, port: server.port, token: try server.token(peer: "hdr"),
                                              useHeader: true)
        XCTAssertEqual(peer.welcome.payloadObject["peer_id"], "hdr")
    }

    func test_plain_http_on_websocket_endpoints_gets_426() async throws {
        for path in ["/v1/ws", "/v1/presence"] {
            let (status, body) = try await server.http("GET", path)
            XCTAssertEqual(status, 426, path)
            XCTAssertEqual(try JSONParser.parse(Array(body))["code"], "upgrade_required", path)
        }
    }

    func test_healthz_and_metrics_answer() async throws {
        let alice = try await server.join("alice")
        alice.send(["type": "ping"])
        _ = try await alice.next(type: "pong")
        let (health, _) = try await server.http("GET", "/healthz")
        XCTAssertEqual(health, 200)
        let (status, body) = try await server.http("GET", "/metrics")
        XCTAssertEqual(status, 200)
        let text = String(decoding: body, as: UTF8.self)
        XCTAssertTrue(text.contains("calling_connections 1"), text)
        XCTAssertTrue(text.contains(#"calling_frames_in_total{type="ping"} 1"#), text)
        XCTAssertTrue(text.contains(#"calling_frames_out_total{type="pong"} 1"#), text)
    }

    func test_flooding_client_is_rate_limited_then_closed() async throws {
        try restart {
            $0.maxFramesPerSecond = 5
            $0.frameBurst = 5
            $0.floodCloseAfter = 20
        }
        let alice = try await server.join("alice")
        for _ in 0..<40 { alice.send(["type": "ping"]) }
        var sawRateLimit = false
        while let frame = try await alice.next(timeout: 5) {
            if frame.error?.code == ErrorCode.rateLimited.rawValue { sawRateLimit = true }
        }
        XCTAssertTrue(sawRateLimit)
        let floodClose = try await alice.closeEvent().code
        XCTAssertEqual(floodClose, CloseCode.flood.rawValue)
    }

    // MARK: room limits

    /// An upgrade to `/v1/ws` made by hand, so the refusal's status and problem body can be read.
    private func upgradeRefusal(_ token: String) async throws -> (Int, JSONValue) {
        let (status, body) = try await server.http("GET", "/v1/ws?token=\(token)", headers: [
            "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        ])
        return (status, try JSONParser.parse([UInt8](body)))
    }

    func test_max_peers_per_room_refuses_the_next_peer_with_409_room_full_but_not_a_takeover() async throws {
        try restart { $0.maxPeersPerRoom = 2 }
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        _ = try await alice.next(type: "peer-joined")
        let (status, problem) = try await upgradeRefusal(try server.token(peer: "carol"))
        XCTAssertEqual(status, 409)
        XCTAssertEqual(problem["code"], "room_full")
        XCTAssertEqual(problem["max_peers"], 2)
        do {
            _ = try await server.join("carol")
            XCTFail("carol joined a full room")
        } catch TestPeerError.connectFailed(let refused, _) {
            XCTAssertEqual(refused, 409, "a WebSocket client sees the status, never a hang")
        }
        let bobAgain = try await server.join("bob")
        XCTAssertEqual(bobAgain.welcome.payloadObject["peers"], [["peer_id": "alice", "role": "peer", "name": .null]],
                       "bob reconnecting takes his own seat")
        let replaced = try await bob.closeEvent()
        XCTAssertEqual(replaced.code, 4400)
        _ = try await server.join("dave", room: "room-2")

        alice.close()
        _ = try await bobAgain.next(type: "peer-left")
        _ = try await server.join("carol")

        let metrics = try await server.exchange("GET", "/metrics")
        XCTAssertTrue(metrics.text.contains(#"calling_join_refusals_total{code="room_full"} 2"#), metrics.text)
        XCTAssertTrue(metrics.text.contains(#"calling_upgrades_total{result="refused_409"} 2"#), metrics.text)
    }
}
