import CallingAuth
import CallingCore
import CallingServer
import CallingTesting
import CallingTransport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// A real server on 127.0.0.1 port 0 with a fresh SQLite file, plus a client loop and a token
/// minter that signs with the server's secret.
final class ServerHarness {
    let app: ServerApp
    let loop: WebSocketClientLoop
    let issuer: TokenIssuer
    let config: ServerConfig
    let dataDir: String

    init(configure: (inout ServerConfig) -> Void = { _ in },
         onStall: @escaping @Sendable (TimeInterval) -> Void = { _ in XCTFail("service loop stalled") }) throws
    {
        dataDir = NSTemporaryDirectory() + "calling-test-\(UUID().uuidString)"
        var config = ServerConfig()
        config.port = 0
        config.dataDir = dataDir
        config.jwtSecret = "integration-test-secret-0123456789abcdef"
        config.logLevel = .error
        configure(&config)
        self.config = config
        app = try ServerApp(config: config, logger: Logger(label: "test", level: .error),
                            onStall: onStall)
        try app.start()
        issuer = try TokenIssuer(hs256Secret: Array(config.jwtSecret!.utf8))
        loop = WebSocketClientLoop(logger: Logger(label: "client", level: .error))
    }

    var port: Int { app.port }

    /// Reads back a token the server issued (it signs with the same secret).
    func verify(_ token: String) throws -> PeerTokenClaims {
        try TokenVerifier(hs256Secret: Array(config.jwtSecret!.utf8), audience: config.jwtAudience).verify(token)
    }

    func token(peer: String, room: String = "room-1", role: String = "peer", name: String? = nil, call: String? = nil,
               ttl: TimeInterval = 600, maxPeers: Int? = nil, tokenID: String? = nil) throws -> String
    {
        try issuer.issue(PeerTokenClaims(
            sub: PeerID(peer), roomID: RoomID(room), callID: call.map { CallID($0) }, role: role, name: name,
            scope: ["room"], audience: config.jwtAudience, issuedAt: Date(), expiresAt: Date().addingTimeInterval(ttl),
            tokenID: tokenID, maxPeers: maxPeers))
    }

    func join(_ peer: String, room: String = "room-1", role: String = "peer", name: String? = nil,
              query: [String: String] = [:]) async throws -> TestPeer
    {
        try await TestPeer.connect(loop: loop, port: port, token: token(peer: peer, room: room, role: role, name: name),
                                   extraQuery: query)
    }

    /// A plain HTTP request over URLSession (which works on Debian for HTTP, not for WebSocket).
    func http(_ method: String, _ path: String, bearer: String? = nil, body: Data? = nil, headers: [String: String] = [:])
        async throws -> (Int, Data)
    {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.httpBody = body
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, data)
    }

    func shutdown() {
        loop.shutdown()
        app.stop()
        try? FileManager.default.removeItem(atPath: dataDir)
    }
}

extension Frame {
    var payloadObject: [String: JSONValue] { payload?.objectValue ?? [:] }
}

/// A test case with a fresh default server per test. One server at a time, never two: libev
/// allows one signal watcher per process, so `restart` stops the default before starting another.
class ServerTestCase: XCTestCase {
    var server: ServerHarness!

    override func setUp() async throws {
        server = try ServerHarness()
    }

    override func tearDown() async throws {
        server?.shutdown()
    }

    /// Replaces the default server with one configured for the test.
    func restart(_ configure: (inout ServerConfig) -> Void) throws {
        server.shutdown()
        server = nil
        server = try ServerHarness(configure: configure)
    }
}
