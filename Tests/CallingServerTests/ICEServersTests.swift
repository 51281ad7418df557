import CallingCore
import CallingServer
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// `GET /v1/ice` against a real in-process server. The TURN credential is recomputed here with a
/// SHA-1/HMAC written from FIPS 180-4 / RFC 2104, so the test does not trust the server's crypto.
/// One server per test, never two at once: libev allows one signal watcher per process.
final class ICEServersTests: XCTestCase {
    static let secret = "ice-test-static-auth-secret"
    static let turnURLs = ["turn:turn.example.org:3478?transport=udp", "turns:turn.example.org:5349?transport=tcp"]
    static let stunURLs = ["stun:stun.example.org:3478"]

    var server: ServerHarness?

    override func tearDown() async throws {
        server?.shutdown()
        server = nil
    }

    private func start(turn: [String] = [], stun: [String] = [], secret: String? = ICEServersTests.secret,
                       ttl: Int = 600) throws -> ServerHarness
    {
        let harness = try ServerHarness { config in
            config.turnURLs = turn.joined(separator: ",")
            config.stunURLs = stun.joined(separator: ", ")
            config.turnSecret = secret
            config.iceTTLSeconds = ttl
        }
        server = harness
        return harness
    }

    func test_without_a_valid_token_the_answer_is_the_usual_401_problem() async throws {
        let server = try start(turn: Self.turnURLs, stun: Self.stunURLs)
        let missing = try await server.get("/v1/ice")
        XCTAssertEqual(missing.status, 401)
        XCTAssertEqual(missing.header("content-type"), "application/problem+json")
        XCTAssertEqual(missing.header("www-authenticate"), "Bearer")
        XCTAssertEqual(try missing.json()["code"], "token_missing")
        XCTAssertNil(try missing.json()["ice_servers"])

        let garbage = try await server.get("/v1/ice", bearer: "not.a.jwt")
        XCTAssertEqual(garbage.status, 401)
        XCTAssertEqual(try garbage.json()["code"], "token_malformed")

        let expired = try await server.get("/v1/ice", bearer: server.token(peer: "alice", ttl: -3_600))
        XCTAssertEqual(expired.status, 401)
        XCTAssertEqual(try expired.json()["code"], "token_expired")
    }

    func test_only_get_is_allowed() async throws {
        let server = try start(turn: Self.turnURLs)
        let posted = try await server.get("/v1/ice", method: "POST", bearer: server.token(peer: "alice"))
        XCTAssertEqual(posted.status, 405)
        XCTAssertEqual(posted.header("allow"), "GET")
        XCTAssertEqual(try posted.json()["code"], "method_not_allowed")
    }

    func test_turn_credentials_are_coturn_rest_credentials_for_the_tokens_peer() async throws {
        let server = try start(turn: Self.turnURLs, stun: Self.stunURLs, ttl: 600)
        let before = Int64(Date().timeIntervalSince1970)
        let answer = try await server.get("/v1/ice", bearer: server.token(peer: "alice"))
        let after = Int64(Date().timeIntervalSince1970)
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.header("content-type"), "application/json")
        XCTAssertEqual(answer.header("cache-control"), "no-store", "a credential must not be cached")

        let body = try answer.json()
        XCTAssertEqual(Set(body.objectValue?.keys.map { $0 } ?? []), ["ice_servers", "ttl", "expires_at"])
        XCTAssertEqual(body["ttl"], 600)
        let servers = try XCTUnwrap(body["ice_servers"]?.arrayValue)
        XCTAssertEqual(servers.count, 2)

        let turn = servers[0]
        XCTAssertEqual(turn["urls"], .array(Self.turnURLs.map(JSONValue.string)))
        let username = try XCTUnwrap(turn["username"]?.stringValue)
        let credential = try XCTUnwrap(turn["credential"]?.stringValue)
        let parts = username.split(separator: ":", maxSplits: 1)
        XCTAssertEqual(parts.count, 2, username)
        XCTAssertEqual(parts.last, "alice", "the username ends with :<peer id from the token>")
        let expiry = try XCTUnwrap(Int64(parts[0]), username)
        XCTAssertTrue((before + 600...after + 600).contains(expiry), "expiry \(expiry) is not now + ttl (\(before + 600)…\(after + 600))")
        XCTAssertEqual(body["expires_at"], .int(expiry), "expires_at is the expiry coturn reads from the username")
        XCTAssertEqual(credential, Data(HMACSHA1.mac(key: Array(Self.secret.utf8), message: Array(username.utf8))).base64EncodedString(),
                       "credential = base64(HMAC-SHA1(static-auth-secret, username))")

        XCTAssertEqual(servers[1], ["urls": .array(Self.stunURLs.map(JSONValue.string))], "STUN is its own entry, without credentials")

        // ?token= works like the header, and each peer gets its own username.
        let bob = try await server.get("/v1/ice?token=\(server.token(peer: "bob"))")
        XCTAssertEqual(bob.status, 200)
        let bobUsername = try XCTUnwrap(try bob.json()["ice_servers"]?.arrayValue?.first?["username"]?.stringValue)
        XCTAssertTrue(bobUsername.hasSuffix(":bob"), bobUsername)
    }

    func test_turn_secret_file_is_read_and_trimmed() async throws {
        let file = NSTemporaryDirectory() + "turn-secret-\(UUID().uuidString)"
        try "file-secret-value\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        server = try ServerHarness { config in
            config.turnURLs = Self.turnURLs[0]
            config.turnSecretFile = file
        }
        let server = try XCTUnwrap(server)
        let answer = try await server.get("/v1/ice", bearer: server.token(peer: "carol"))
        let turn = try XCTUnwrap(try answer.json()["ice_servers"]?.arrayValue?.first)
        let username = try XCTUnwrap(turn["username"]?.stringValue)
        XCTAssertEqual(turn["credential"]?.stringValue,
                       Data(HMACSHA1.mac(key: Array("file-secret-value".utf8), message: Array(username.utf8))).base64EncodedString())
    }

    func test_without_turn_only_stun_is_returned() async throws {
        let server = try start(stun: Self.stunURLs + ["stuns:stun.example.org:5349"], secret: nil)
        let answer = try await server.get("/v1/ice", bearer: server.token(peer: "alice"))
        XCTAssertEqual(answer.status, 200)
        let body = try answer.json()
        XCTAssertEqual(body["ice_servers"], [["urls": ["stun:stun.example.org:3478", "stuns:stun.example.org:5349"]]])
        XCTAssertNotNil(body["expires_at"]?.int64Value)
    }

    func test_a_secret_without_turn_urls_hands_out_no_credentials() async throws {
        let server = try start(stun: Self.stunURLs)
        let body = try await server.get("/v1/ice", bearer: server.token(peer: "alice")).json()
        XCTAssertEqual(body["ice_servers"], [["urls": ["stun:stun.example.org:3478"]]])
    }

    func test_with_nothing_configured_the_list_is_empty() async throws {
        let server = try start(secret: nil)
        let answer = try await server.get("/v1/ice", bearer: server.token(peer: "alice"))
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(try answer.json()["ice_servers"], [])
    }

    func test_turn_urls_without_a_secret_stop_the_start() throws {
        XCTAssertThrowsError(try start(turn: Self.turnURLs, secret: nil)) { error in
            XCTAssertTrue("\(error)".contains("CALLING_TURN_SECRET"), "\(error)")
        }
        XCTAssertThrowsError(try ServerHarness { config in
            config.turnURLs = Self.turnURLs[0]
            config.turnSecretFile = "/nonexistent/turn-secret"
        }) { error in
            XCTAssertTrue("\(error)".contains("/nonexistent/turn-secret"), "\(error)")
        }
    }

    func test_config_refuses_urls_with_the_wrong_scheme() {
        let result = ServerConfig.load(file: nil, environment: ["CALLING_TURN_SECRET": "s"],
                                       flags: ["turn_urls": "turn:ok.example, stun:wrong.example, turn:",
                                               "stun_urls": "stun:ok.example,STUNS:ok.example,turn:wrong.example"])
        guard case .failure(let problems) = result else { return XCTFail("expected problems") }
        XCTAssertEqual(problems.problems.count, 3, problems.description)
        XCTAssertTrue(problems.problems.contains { $0.contains("'stun:wrong.example' must start with turn: or turns:") }, problems.description)
        XCTAssertTrue(problems.problems.contains { $0.contains("'turn:' must start") }, problems.description)
        XCTAssertTrue(problems.problems.contains { $0.contains("'turn:wrong.example' must start with stun: or stuns:") }, problems.description)

        let good = ServerConfig.load(file: nil, environment: ["CALLING_TURN_SECRET": "s"],
                                     flags: ["turn_urls": "turn:a.example:3478?transport=udp,turns:a.example:5349",
                                             "stun_urls": "stun:a.example"])
        let summary = (try? good.get().summary) ?? []
        XCTAssertEqual(summary.first { $0.0 == "turn_secret" }?.1, "(set, hidden)", "`calling-server config` never shows the TURN secret")
    }

    func test_the_test_hmac_matches_rfc_2202() {
        // RFC 2202 test case 2, so a bug in the reference implementation cannot hide one in the server.
        let mac = HMACSHA1.mac(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        XCTAssertEqual(mac.map { String(format: "%02x", $0) }.joined(), "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
    }
}

/// A reply with its headers, which `ServerHarness.http` does not return.
struct HTTPReply {
    var status: Int
    var headers: [String: String]
    var body: Data

    func header(_ name: String) -> String? { headers[name.lowercased()] }
    func json() throws -> JSONValue { try JSONParser.parse(Array(body)) }
}

extension ServerHarness {
    func get(_ path: String, method: String = "GET", bearer: String? = nil) async throws -> HTTPReply {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return HTTPReply(status: http.statusCode, headers: headers, body: data)
    }
}

/// SHA-1 (FIPS 180-4) and HMAC (RFC 2104), straight from the specs, for checking credentials only.
enum HMACSHA1 {
    static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var block = key.count > 64 ? sha1(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        let inner = sha1(block.map { $0 ^ 0x36 } + message)
        return sha1(block.map { $0 ^ 0x5c } + inner)
    }

    static func sha1(_ message: [UInt8]) -> [UInt8] {
        var h: [UInt32] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0]
        var padded = message + [0x80]
        while padded.count % 64 != 56 { padded.append(0) }
        let bits = UInt64(message.count) * 8
        for shift in stride(from: 56, through: 0, by: -8) { padded.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        for chunk in stride(from: 0, to: padded.count, by: 64) {
            var w = [UInt32](repeating: 0, count: 80)
            for i in 0..<16 {
                w[i] = padded[chunk + 4 * i..<chunk + 4 * i + 4].reduce(0) { $0 << 8 | UInt32($1) }
            }
            for i in 16..<80 {
                let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w[i] = x << 1 | x >> 31
            }
            var (a, b, c, d, e) = (h[0], h[1], h[2], h[3], h[4])
            for i in 0..<80 {
                let (f, k): (UInt32, UInt32)
                switch i {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5A82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ED9_EBA1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
                default: (f, k) = (b ^ c ^ d, 0xCA62_C1D6)
                }
                let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
                (e, d, c, b, a) = (d, c, b << 30 | b >> 2, a, temp)
            }
            h[0] = h[0] &+ a
            h[1] = h[1] &+ b
            h[2] = h[2] &+ c
            h[3] = h[3] &+ d
            h[4] = h[4] &+ e
        }
        return h.flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> UInt32(24 - 8 * $0)) } }
    }
}
