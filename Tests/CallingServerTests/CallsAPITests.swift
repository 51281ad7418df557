import CallingAuth
import CallingCore
import CallingServer
import CallingTesting
import Foundation
import XCTest

/// The server-to-server API end to end: real server, real HTTP, real lws peers, API keys made by the
/// real CLI on the server's own database. One server at a time (libev: one signal watcher per process).
final class CallsAPITests: ServerTestCase {

    // MARK: helpers

    /// A fresh key from `calling-server apikey create` on the running server's data directory.
    func makeAPIKey(name: String = "test") throws -> String {
        let (code, output) = try runCapturingOutput(["apikey", "create", "--name", name, "--data-dir", server.config.dataDir])
        XCTAssertEqual(code, 0)
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func api(_ method: String, _ path: String, key: String?, json: JSONValue? = nil, raw: String? = nil,
             useBearer: Bool = false) async throws -> (Int, JSONValue)
    {
        var headers: [String: String] = ["Content-Type": "application/json"]
        if let key, !useBearer { headers["X-API-Key"] = key }
        let body = raw.map { Data($0.utf8) } ?? json.map { Data(JSONWriter.bytes($0)) }
        let (status, data) = try await server.http(method, path, bearer: useBearer ? key : nil, body: body, headers: headers)
        let decoded = data.isEmpty ? JSONValue.null : try JSONParser.parse([UInt8](data))
        return (status, decoded)
    }

    func createCall(key: String, _ body: JSONValue = [:]) async throws -> [String: JSONValue] {
        let (status, created) = try await api("POST", "/v1/calls", key: key, json: body)
        XCTAssertEqual(status, 201, "\(created)")
        return created.objectValue ?? [:]
    }

    /// Polls `GET /v1/calls/{id}` until `done` holds (joins and expiry are recorded asynchronously).
    func call(_ id: String, key: String, until done: ([String: JSONValue]) -> Bool, timeout: TimeInterval = 5)
        async throws -> [String: JSONValue]
    {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let (status, body) = try await api("GET", "/v1/calls/\(id)", key: key)
            XCTAssertEqual(status, 200)
            let fields = body.objectValue ?? [:]
            if done(fields) || Date() > deadline { return fields }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
    }

    func invalidNames(_ body: JSONValue) -> [String] {
        (body["invalid_params"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
    }

    // MARK: API keys

    func test_server_routes_refuse_a_missing_wrong_or_revoked_key_with_401() async throws {
        let (missing, missingBody) = try await api("POST", "/v1/calls", key: nil, json: [:])
        XCTAssertEqual(missing, 401)
        XCTAssertEqual(missingBody["code"], "api_key_missing")
        XCTAssertEqual(missingBody["status"], 401)
        let (wrong, wrongBody) = try await api("POST", "/v1/calls", key: "csk_" + String(repeating: "x", count: 43), json: [:])
        XCTAssertEqual(wrong, 401)
        XCTAssertEqual(wrongBody["code"], "api_key_invalid")
        let peerToken = try server.token(peer: "alice")
        let (jwt, _) = try await api("POST", "/v1/tokens", key: peerToken, json: ["room_id": "r", "peer_id": "p"], useBearer: true)
        XCTAssertEqual(jwt, 401, "a peer token is not an API key")

        let key = try makeAPIKey()
        let (viaHeader, _) = try await api("POST", "/v1/calls", key: key, json: [:])
        XCTAssertEqual(viaHeader, 201)
        let (viaBearer, _) = try await api("POST", "/v1/calls", key: key, json: [:], useBearer: true)
        XCTAssertEqual(viaBearer, 201)

        let (_, table) = try runCapturingOutput(["apikey", "list", "--data-dir", server.dataDir])
        let id = String(try XCTUnwrap(table.split(separator: "\n").last?.split(separator: "\t").first))
        XCTAssertEqual(try runCapturingOutput(["apikey", "revoke", "--id", id, "--data-dir", server.dataDir]).0, 0)
        let (revoked, revokedBody) = try await api("GET", "/v1/calls/anything", key: key)
        XCTAssertEqual(revoked, 401, "a revocation by the CLI applies to the running server's next request")
        XCTAssertEqual(revokedBody["code"], "api_key_invalid")
    }

    // MARK: validation

    func test_malformed_bodies_get_400_naming_every_bad_field() async throws {
        let key = try makeAPIKey()
        let (notJSON, notJSONBody) = try await api("POST", "/v1/calls", key: key, raw: "{room_id:")
        XCTAssertEqual(notJSON, 400)
        XCTAssertEqual(notJSONBody["code"], "invalid_params")
        XCTAssertEqual(invalidNames(notJSONBody), ["body"])

        let (bad, badBody) = try await api("POST", "/v1/calls", key: key, json: [
            "room_id": 5, "metadata": "nope", "dynamic_variables": ["customer_name": "Ada", "age": 36],
            "meter": ["limit_s": "ten", "warning_s": -1],
        ])
        XCTAssertEqual(bad, 400)
        XCTAssertEqual(Set(invalidNames(badBody)),
                       ["room_id", "metadata", "dynamic_variables.age", "meter.limit_s", "meter.warning_s"])
        XCTAssertTrue(badBody["detail"]?.stringValue?.contains("meter.limit_s") ?? false)

        let (warning, warningBody) = try await api("POST", "/v1/calls", key: key, json: ["meter": ["limit_s": 60, "warning_s": 60]])
        XCTAssertEqual(warning, 400)
        XCTAssertEqual(invalidNames(warningBody), ["meter.warning_s"])

        let (token, tokenBody) = try await api("POST", "/v1/tokens", key: key, json: ["room_id": "r1", "ttl_s": 0])
        XCTAssertEqual(token, 400)
        XCTAssertEqual(Set(invalidNames(tokenBody)), ["peer_id", "ttl_s"])

        // A room id is a path segment of /v1/rooms/{room_id}/messages: '/' would strand its history.
        for room in ["a/b", "/", "tab\there", "nul\u{0}x"] {
            let (call, callBody) = try await api("POST", "/v1/calls", key: key, json: ["room_id": .string(room)])
            XCTAssertEqual(call, 400, room)
            XCTAssertEqual(invalidNames(callBody), ["room_id"], room)
            let (minted, mintedBody) = try await api("POST", "/v1/tokens", key: key, json: ["room_id": .string(room), "peer_id": "p"])
            XCTAssertEqual(minted, 400, room)
            XCTAssertEqual(invalidNames(mintedBody), ["room_id"], room)
        }
        let (slashPeer, slashPeerBody) = try await api("POST", "/v1/tokens", key: key, json: ["room_id": "r1", "peer_id": "a/b"])
        XCTAssertEqual(slashPeer, 400)
        XCTAssertEqual(invalidNames(slashPeerBody), ["peer_id"])
    }

    func test_unknown_calls_are_404_and_wrong_methods_405() async throws {
        let key = try makeAPIKey()
        let (missing, missingBody) = try await api("GET", "/v1/calls/call_nope", key: key)
        XCTAssertEqual(missing, 404)
        XCTAssertEqual(missingBody["code"], "call_not_found")
        let (method, _) = try await api("DELETE", "/v1/calls", key: key)
        XCTAssertEqual(method, 405)
    }

    // MARK: calls

    func test_a_created_calls_token_joins_its_room_and_the_call_becomes_ongoing() async throws {
        try restart { $0.stunURLs = "stun:stun.example.org:3478" }
        let key = try makeAPIKey()
        let before = Int64(Date().timeIntervalSince1970)
        let created = try await createCall(key: key, [
            "room_id": "consult-1", "agent_id": "agent-7", "peer_id": "patient-1",
            "metadata": ["order": 42], "dynamic_variables": ["customer_name": "Ada"],
        ])
        let callID = try XCTUnwrap(created["call_id"]?.stringValue)
        XCTAssertTrue(callID.hasPrefix("call_"))
        XCTAssertEqual(created["room_id"], "consult-1")
        XCTAssertEqual(created["transport"], "websocket")
        XCTAssertEqual(created["state"], "registered")
        XCTAssertEqual(created["ice_servers"], [["urls": ["stun:stun.example.org:3478"]]])
        let expiresAt = try XCTUnwrap(created["expires_at"]?.int64Value)
        XCTAssertEqual(server.config.callTokenTTLSeconds, 7_800, "130 minutes by default, separate from token_ttl_seconds")
        XCTAssertEqual(Double(expiresAt - before * 1_000), Double(server.config.callTokenTTLSeconds) * 1_000, accuracy: 5_000,
                       "unix milliseconds")
        XCTAssertEqual(created["expires_at_seconds"], .int(expiresAt / 1_000), "the JWT exp, in unix seconds")
        let claims = try server.verify(try XCTUnwrap(created["access_token"]?.stringValue))
        XCTAssertEqual(Int64(claims.expiresAt.timeIntervalSince1970) * 1_000, expiresAt, "expires_at is the access token's exp")

        let token = try XCTUnwrap(created["access_token"]?.stringValue)
        let patient = try await TestPeer.connect(loop: server.loop, port: server.port, token: token)
        XCTAssertEqual(patient.welcome.payloadObject["peer_id"], "patient-1")
        XCTAssertEqual(patient.welcome.payloadObject["room_id"], "consult-1")
        XCTAssertEqual(patient.welcome.payloadObject["call_id"], .string(callID))
        XCTAssertEqual(patient.welcome.payloadObject["role"], "caller")

        let call = try await call(callID, key: key, until: { $0["state"] == "ongoing" })
        XCTAssertEqual(call["state"], "ongoing")
        XCTAssertEqual(call["agent_id"], "agent-7")
        XCTAssertEqual(call["metadata"], ["order": 42])
        XCTAssertEqual(call["dynamic_variables"], ["customer_name": "Ada"])
        XCTAssertEqual(call["end_reason"], .null)
        let joined = try XCTUnwrap(call["joined_ms"]?.int64Value)
        XCTAssertGreaterThanOrEqual(joined, try XCTUnwrap(call["created_ms"]?.int64Value))
    }

    func test_a_call_nobody_joins_in_time_ends_with_error_user_not_joined() async throws {
        try restart { $0.callJoinWindowSeconds = 1 }
        let key = try makeAPIKey()
        let created = try await createCall(key: key, ["room_id": "lonely"])
        let callID = try XCTUnwrap(created["call_id"]?.stringValue)
        let ended = try await call(callID, key: key, until: { $0["state"] == "ended" })
        XCTAssertEqual(ended["state"], "ended")
        XCTAssertEqual(ended["end_reason"], "error_user_not_joined")
        XCTAssertEqual(ended["joined_ms"], .null)

        // Joining afterwards does not bring it back.
        let late = try await TestPeer.connect(loop: server.loop, port: server.port,
                                              token: try XCTUnwrap(created["access_token"]?.stringValue))
        late.send(["type": "ping"])
        _ = try await late.next(type: "pong")
        let after = try await call(callID, key: key, until: { _ in true })
        XCTAssertEqual(after["state"], "ended")
        let (status, refused) = try await api("POST", "/v1/tokens", key: key, json: ["call_id": .string(callID), "peer_id": "agent"])
        XCTAssertEqual(status, 409)
        XCTAssertEqual(refused["code"], "call_ended")
    }

    // MARK: stats

    func test_stats_frames_are_stored_per_peer_and_served_with_aggregates() async throws {
        let key = try makeAPIKey()
        let created = try await createCall(key: key, ["room_id": "stats-room", "peer_id": "patient"])
        let callID = try XCTUnwrap(created["call_id"]?.stringValue)
        let patient = try await TestPeer.connect(loop: server.loop, port: server.port,
                                                 token: try XCTUnwrap(created["access_token"]?.stringValue))
        // The agent's token names no call: its samples go to the room's live call.
        let agent = try await server.join("agent", room: "stats-room")

        patient.send(["type": "stats", "payload": ["rtt_ms": 20, "jitter_ms": 3.5, "packet_loss": 0.01, "bitrate_kbps": 850]])
        patient.send(["type": "stats", "payload": ["rtt_ms": 40, "jitter_ms": 1.5, "packet_loss": 0.05]])
        agent.send(["type": "stats", "payload": ["rtt_ms": 100]])
        // Out of range: refused by the decoder with an error frame, and never stored.
        patient.send(["type": "stats", "payload": ["rtt_ms": 10, "packet_loss": 1.5]])
        let refused = try await patient.next(type: "error")
        XCTAssertEqual(refused.error?.code, ErrorCode.invalidPayload.rawValue)
        // A ping answered on each connection means its stats frames were handled before it.
        for peer in [patient, agent] {
            peer.send(["type": "ping"])
            _ = try await peer.next(type: "pong")
        }

        let (status, stats) = try await api("GET", "/v1/calls/\(callID)/stats", key: key)
        XCTAssertEqual(status, 200)
        XCTAssertEqual(stats["call_id"], .string(callID))
        let peers = try XCTUnwrap(stats["peers"]?.arrayValue)
        XCTAssertEqual(peers.map { $0["peer_id"] }, ["agent", "patient"])
        let patientStats = peers[1]
        XCTAssertEqual(patientStats["samples"]?.arrayValue?.count, 2)
        XCTAssertEqual(patientStats["samples"]?.arrayValue?.first?["bitrate_kbps"]?.doubleValue, 850)
        XCTAssertEqual(patientStats["samples"]?.arrayValue?.last?["bitrate_kbps"], .null)
        XCTAssertEqual(patientStats["aggregate"]?["avg_rtt_ms"]?.doubleValue, 30)
        XCTAssertEqual(patientStats["aggregate"]?["max_rtt_ms"]?.doubleValue, 40)
        XCTAssertEqual(patientStats["aggregate"]?["avg_jitter_ms"]?.doubleValue, 2.5)
        XCTAssertEqual(patientStats["aggregate"]?["max_packet_loss"]?.doubleValue, 0.05)
        XCTAssertEqual(stats["aggregate"]?["samples"], 3)
        XCTAssertEqual(stats["aggregate"]?["max_rtt_ms"]?.doubleValue, 100)

        let (unknown, _) = try await api("GET", "/v1/calls/call_nope/stats", key: key)
        XCTAssertEqual(unknown, 404)
        let (anonymous, _) = try await api("GET", "/v1/calls/\(callID)/stats", key: nil)
        XCTAssertEqual(anonymous, 401)
    }

    // MARK: meter

    /// The `meter` frames `peer` receives until (and including) `ended`.
    func meterFrames(_ peer: TestPeer, timeout: TimeInterval = 10) async throws -> [[String: JSONValue]] {
        var frames: [[String: JSONValue]] = []
        while true {
            let frame = try await peer.next(type: "meter", timeout: timeout).payloadObject
            frames.append(frame)
            if frame["state"] == "ended" { return frames }
        }
    }

    func test_the_meter_runs_warns_ends_and_closes_the_room_with_4410() async throws {
        try restart { $0.meterIntervalSeconds = 1 }
        let key = try makeAPIKey()
        let created = try await createCall(key: key, ["room_id": "consult", "peer_id": "patient",
                                                     "meter": ["limit_s": 3, "warning_s": 1]])
        XCTAssertEqual(created["meter"], ["limit_s": 3, "warning_s": 1])
        let patient = try await TestPeer.connect(loop: server.loop, port: server.port,
                                                 token: try XCTUnwrap(created["access_token"]?.stringValue))
        try await patient.expectNoFrame(within: 0.5)  // alone: the meter has not started
        let doctor = try await server.join("doctor", room: "consult", role: "agent")

        let seen = try await meterFrames(patient)
        XCTAssertEqual(seen.first, ["state": "running", "elapsed_s": 0, "limit_s": 3, "remaining_s": 3])
        let states = seen.compactMap { $0["state"]?.stringValue }
        XCTAssertEqual(states.filter { $0 != "running" }, ["warning", "ended"], "each state change is sent once, in order")
        XCTAssertGreaterThanOrEqual(states.filter { $0 == "running" }.count, 2, "plus the 1 s interval updates")
        XCTAssertEqual(seen.last, ["state": "ended", "elapsed_s": 3, "limit_s": 3, "remaining_s": 0])
        for frame in seen {
            XCTAssertEqual(frame["elapsed_s"]?.int64Value.map { $0 + (frame["remaining_s"]?.int64Value ?? 0) }, 3)
        }
        let doctorSeen = try await meterFrames(doctor)
        XCTAssertEqual(doctorSeen.last?["state"], "ended")

        let patientClose = try await patient.closeEvent().code
        let doctorClose = try await doctor.closeEvent().code
        XCTAssertEqual(patientClose, CloseCode.consultationEnded.rawValue)
        XCTAssertEqual(doctorClose, CloseCode.consultationEnded.rawValue)

        let callID = try XCTUnwrap(created["call_id"]?.stringValue)
        let call = try await call(callID, key: key, until: { $0["state"] == "ended" })
        XCTAssertEqual(call["end_reason"], "consultation_ended")

        // Coming back does not buy more time.
        let again = try await server.join("doctor", room: "consult", role: "agent")
        let verdict = try await again.next(type: "meter")
        XCTAssertEqual(verdict.payloadObject["state"], "ended")
        let againClose = try await again.closeEvent().code
        XCTAssertEqual(againClose, CloseCode.consultationEnded.rawValue)
    }

    func test_a_restart_does_not_reset_the_meter() async throws {
        let dataDir = NSTemporaryDirectory() + "calling-meter-restart-\(UUID().uuidString)"
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dataDir) }
        try restart {
            $0.dataDir = dataDir
            $0.meterIntervalSeconds = 1
        }
        let key = try makeAPIKey()
        _ = try await createCall(key: key, ["room_id": "consult", "meter": ["limit_s": 600, "warning_s": 10]])
        let patient = try await server.join("patient", room: "consult")
        let doctor = try await server.join("doctor", room: "consult")
        while try await patient.next(type: "meter").payloadObject["elapsed_s"]?.int64Value ?? 0 < 2 {}
        withExtendedLifetime(doctor) {}

        try restart { $0.dataDir = dataDir }
        let patientAgain = try await server.join("patient", room: "consult")
        let doctorAgain = try await server.join("doctor", room: "consult")
        let resumed = try await patientAgain.next(type: "meter").payloadObject
        withExtendedLifetime(doctorAgain) {}
        XCTAssertEqual(resumed["state"], "running")
        XCTAssertGreaterThanOrEqual(resumed["elapsed_s"]?.int64Value ?? 0, 2, "counting resumes from the stored elapsed time")
        XCTAssertLessThan(resumed["elapsed_s"]?.int64Value ?? 0, 10)
    }

    // MARK: tokens

    func test_tokens_endpoint_mints_a_room_token_and_checks_the_call() async throws {
        let key = try makeAPIKey()
        let (status, minted) = try await api("POST", "/v1/tokens", key: key, json: [
            "room_id": "room-9", "peer_id": "dr-who", "role": "agent", "name": "Dr Who", "ttl_s": 120,
        ])
        XCTAssertEqual(status, 201)
        let expiresAt = try XCTUnwrap(minted["expires_at"]?.int64Value)
        XCTAssertEqual(Double(expiresAt), Date().timeIntervalSince1970 + 120, accuracy: 5)
        let agent = try await TestPeer.connect(loop: server.loop, port: server.port, token: try XCTUnwrap(minted["token"]?.stringValue))
        XCTAssertEqual(agent.welcome.payloadObject["role"], "agent")
        XCTAssertEqual(agent.welcome.payloadObject["name"], "Dr Who")
        XCTAssertEqual(agent.welcome.payloadObject["room_id"], "room-9")

        let created = try await createCall(key: key, ["room_id": "room-10"])
        let callID = try XCTUnwrap(created["call_id"])
        let (forCall, forCallBody) = try await api("POST", "/v1/tokens", key: key, json: ["call_id": callID, "peer_id": "agent-1"])
        XCTAssertEqual(forCall, 201)
        XCTAssertEqual(forCallBody["room_id"], "room-10", "the room defaults to the call's")
        XCTAssertEqual(forCallBody["call_id"], callID)

        let (wrongRoom, wrongRoomBody) = try await api("POST", "/v1/tokens", key: key,
                                                       json: ["call_id": callID, "room_id": "room-11", "peer_id": "agent-1"])
        XCTAssertEqual(wrongRoom, 400)
        XCTAssertEqual(invalidNames(wrongRoomBody), ["room_id"])
        let (unknown, unknownBody) = try await api("POST", "/v1/tokens", key: key, json: ["call_id": "call_nope", "peer_id": "a"])
        XCTAssertEqual(unknown, 400)
        XCTAssertEqual(invalidNames(unknownBody), ["call_id"])
    }

    // MARK: room limits

    func test_max_peers_of_a_call_is_in_its_tokens_and_refuses_the_third_peer_before_the_upgrade() async throws {
        let key = try makeAPIKey()
        let created = try await createCall(key: key, ["room_id": "consult-2", "peer_id": "patient", "max_peers": 2])
        XCTAssertEqual(created["max_peers"], 2)
        let callID = try XCTUnwrap(created["call_id"]?.stringValue)
        let callerToken = try XCTUnwrap(created["access_token"]?.stringValue)
        XCTAssertEqual(try server.verify(callerToken).maxPeers, 2)
        XCTAssertNotNil(try server.verify(callerToken).tokenID, "server-issued tokens carry a jti")

        let (status, minted) = try await api("POST", "/v1/tokens", key: key, json: ["call_id": .string(callID), "peer_id": "doctor"])
        XCTAssertEqual(status, 201)
        let doctorToken = try XCTUnwrap(minted["token"]?.stringValue)
        XCTAssertEqual(try server.verify(doctorToken).maxPeers, 2, "a token for the call inherits its max_peers")
        let (_, third) = try await api("POST", "/v1/tokens", key: key, json: ["call_id": .string(callID), "peer_id": "nurse"])
        let nurseToken = try XCTUnwrap(third["token"]?.stringValue)

        let patient = try await TestPeer.connect(loop: server.loop, port: server.port, token: callerToken)
        let doctor = try await TestPeer.connect(loop: server.loop, port: server.port, token: doctorToken)
        _ = try await patient.next(type: "peer-joined")
        let refused = try await server.http("GET", "/v1/ws?token=\(nurseToken)", headers: [
            "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        ])
        XCTAssertEqual(refused.0, 409)
        let problem = try JSONParser.parse([UInt8](refused.1))
        XCTAssertEqual(problem["code"], "room_full")
        XCTAssertEqual(problem["max_peers"], 2)
        try await patient.expectNoFrame(within: 0.2)

        let (_, wider) = try await api("POST", "/v1/tokens", key: key,
                                       json: ["call_id": .string(callID), "peer_id": "nurse", "max_peers": 3])
        let nurse = try await TestPeer.connect(loop: server.loop, port: server.port, token: try XCTUnwrap(wider["token"]?.stringValue))
        XCTAssertEqual(nurse.welcome.payloadObject["peers"]?.arrayValue?.count, 2, "a token may carry its own max_peers")
        withExtendedLifetime(doctor) {}

        let (bad, body) = try await api("POST", "/v1/calls", key: key, json: ["max_peers": -1])
        XCTAssertEqual(bad, 400)
        XCTAssertEqual(invalidNames(body), ["max_peers"])
        let (badToken, tokenBody) = try await api("POST", "/v1/tokens", key: key, json: ["room_id": "r", "peer_id": "p", "max_peers": "two"])
        XCTAssertEqual(badToken, 400)
        XCTAssertEqual(invalidNames(tokenBody), ["max_peers"])
    }
}
