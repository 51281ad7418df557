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

@testable import CallingClient

/// A real server on 127.0.0.1 with a fresh SQLite file, a client loop and a token minter signing
/// with the server's secret (copied from CallingServerTests/ServerHarness.swift, which a test
/// target cannot import). `restart()` stops the server and starts a new one on the same port and
/// data dir: never two servers at once in one process (libev allows one signal watcher).
final class ClientHarness: @unchecked Sendable {
    // @unchecked: tests touch `app` only from the test's own task, one call at a time.
    private(set) var app: ServerApp
    let loop: WebSocketClientLoop
    let issuer: TokenIssuer
    private(set) var config: ServerConfig
    let dataDir: String

    init(configure: (inout ServerConfig) -> Void = { _ in }) throws {
        dataDir = NSTemporaryDirectory() + "calling-client-test-\(UUID().uuidString)"
        var config = ServerConfig()
        config.port = 0
        config.dataDir = dataDir
        config.jwtSecret = "integration-test-secret-0123456789abcdef"
        config.logLevel = .error
        config.shutdownGraceSeconds = 1
        configure(&config)
        self.config = config
        app = try ServerApp(config: config, logger: Logger(label: "test", level: .error))
        try app.start()
        self.config.port = app.port
        issuer = try TokenIssuer(hs256Secret: Array(config.jwtSecret!.utf8))
        loop = WebSocketClientLoop(logger: Logger(label: "client", level: .error))
    }

    var port: Int { app.port }
    var url: URL { URL(string: "ws://127.0.0.1:\(config.port)")! }

    /// Stops the server (peers get 1001) and starts a new one on the same port and data dir.
    /// `between` runs while no server is listening.
    func restart(between: () async throws -> Void = {}) async throws {
        app.stop()
        try await between()
        var lastError: (any Error)?
        for _ in 0..<50 {
            do {
                let next = try ServerApp(config: config, logger: Logger(label: "test", level: .error))
                try next.start()
                app = next
                return
            } catch {
                lastError = error  // the port may linger for a moment
                try await Task.sleep(nanoseconds: 100_000_000)
            }
        }
        throw lastError!
    }

    func token(peer: String, room: String = "room-1", role: String = "peer", name: String? = nil, call: String? = nil,
               ttl: TimeInterval = 600) throws -> String
    {
        try issuer.issue(PeerTokenClaims(
            sub: PeerID(peer), roomID: RoomID(room), callID: call.map { CallID($0) }, role: role, name: name,
            scope: ["room"], audience: config.jwtAudience, issuedAt: Date(), expiresAt: Date().addingTimeInterval(ttl)))
    }

    func presenceToken(_ peer: String, role: String, name: String? = nil) throws -> String {
        try issuer.issue(PeerTokenClaims(sub: PeerID(peer), role: role, name: name, scope: ["presence"],
                                         audience: config.jwtAudience, issuedAt: Date(),
                                         expiresAt: Date().addingTimeInterval(600)))
    }

    /// A client on this harness's loop with test-friendly timings.
    func client(_ peer: String, room: String = "room-1", token: String? = nil,
                configure: (inout SignalingOptions) -> Void = { _ in }) throws -> SignalingClient
    {
        var options = SignalingOptions()
        options.transport = loop
        options.reconnectDelays = [0.1, 0.2, 0.4]
        options.connectTimeout = 5
        configure(&options)
        return SignalingClient(url: url, token: try token ?? self.token(peer: peer, room: room), options: options)
    }

    /// Presence options on this harness's loop.
    func presenceOptions(_ configure: (inout PresenceOptions) -> Void = { _ in }) -> PresenceOptions {
        var options = PresenceOptions()
        options.transport = loop
        options.connectTimeout = 5
        configure(&options)
        return options
    }

    /// A presence client on this harness's loop with a fresh presence token.
    func presence(_ peer: String, role: String, name: String? = nil,
                  configure: (inout PresenceOptions) -> Void = { _ in }) throws -> PresenceClient
    {
        PresenceClient(url: url, token: try presenceToken(peer, role: role, name: name), options: presenceOptions(configure))
    }

    func http(_ method: String, _ path: String) async throws -> (Int, String) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
    }

    /// Any HTTP request with an optional Bearer token, Content-Type and body: status, body text,
    /// and the body parsed as JSON (nil when it is not JSON).
    func exchange(_ method: String, _ path: String, bearer: String? = nil, contentType: String? = nil,
                  body: String? = nil, headers: [String: String] = [:]) async throws -> (status: Int, text: String, json: JSONValue?)
    {
        let result = try await HTTPClient(port: port).exchange(method, path, bearer: bearer, contentType: contentType,
                                                               body: body, headers: headers)
        return (result.status, result.text, try? JSONParser.parse([UInt8](result.body)))
    }

    /// `POST /v1/calls` with a key made by the real `calling-server apikey create`.
    func createCall() async throws -> CreatedCall {
        let (code, output) = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "apikey", "create", "--name", "client-tests", "--data-dir", dataDir],
                               environment: [:])
        }
        XCTAssertEqual(code, 0)
        let created = try await exchange("POST", "/v1/calls", contentType: "application/json", body: "{}",
                                         headers: ["X-API-Key": output.trimmingCharacters(in: .whitespacesAndNewlines)])
        XCTAssertEqual(created.status, 201, created.text)
        let json = created.json
        return CreatedCall(id: try XCTUnwrap(json?["call_id"]?.stringValue), room: try XCTUnwrap(json?["room_id"]?.stringValue),
                           token: try XCTUnwrap(json?["access_token"]?.stringValue),
                           peer: try XCTUnwrap(json?["peer_id"]?.stringValue))
    }

    /// A counter from /metrics (0 when the series does not exist yet).
    func metric(_ name: String) async throws -> Double {
        let (_, body) = try await http("GET", "/metrics")
        for line in body.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ").last ?? "") ?? 0
        }
        return 0
    }

    private var stopped = false

    /// Stops the server for good (clients keep their loop).
    func stopServer() {
        if !stopped { app.stop() }
        stopped = true
    }

    func shutdown() {
        loop.shutdown()
        stopServer()
        try? FileManager.default.removeItem(atPath: dataDir)
    }
}

/// A call from `POST /v1/calls`: its id, room, the caller's access token and peer id.
struct CreatedCall: Sendable {
    var id: String
    var room: String
    var token: String
    var peer: String
}

/// Collects a client's events so tests can wait for one and count them.
final class EventLog<Event: Sendable>: @unchecked Sendable {
    // @unchecked: `events` only under `lock`.
    private let lock = NSLock()
    private var events: [Event] = []

    init(_ stream: AsyncStream<Event>) {
        Task.detached { [self] in
            for await event in stream { append(event) }
        }
    }

    private func append(_ event: Event) {
        lock.lock()
        events.append(event)
        lock.unlock()
    }

    var all: [Event] {
        lock.lock()
        defer { lock.unlock() }
        return events
    }

    /// Waits until `match` returns a value for some event, and returns the first such value.
    func first<T>(timeout: TimeInterval = 5, file: StaticString = #filePath, line: UInt = #line,
                  _ match: (Event) -> T?) async throws -> T
    {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let found = all.lazy.compactMap(match).first { return found }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        XCTFail("no matching event within \(timeout) s; got \(all)", file: file, line: line)
        throw CancellationError()
    }

    /// Waits until `count` events match.
    func waitCount(_ count: Int, timeout: TimeInterval = 5, file: StaticString = #filePath, line: UInt = #line,
                   _ match: (Event) -> Bool) async throws
    {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if all.filter(match).count >= count { return }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        XCTFail("only \(all.filter(match).count) of \(count) matching events within \(timeout) s; got \(all)",
                file: file, line: line)
        throw CancellationError()
    }
}

extension CallingEvent {
    var chatMessage: CallingClient.ChatMessage? { if case .chat(let message) = self { return message } else { return nil } }
    var state: CallState? { if case .stateChanged(let state) = self { return state } else { return nil } }
}

/// Waits until `condition` holds.
func eventually(timeout: TimeInterval = 5, file: StaticString = #filePath, line: UInt = #line,
                _ condition: () -> Bool) async throws
{
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    XCTFail("condition not met within \(timeout) s", file: file, line: line)
}

/// A test case with a fresh in-process server per test. One at a time, never two: libev allows
/// one signal watcher per process.
class ClientTestCase: XCTestCase {
    var server: ClientHarness!

    /// The server settings for this class's tests; override to change them.
    func configure(_ config: inout ServerConfig) {}

    override func setUp() async throws {
        server = try ClientHarness { configure(&$0) }
    }

    override func tearDown() async throws {
        server?.shutdown()
    }
}

extension CallingEvent {
    /// A `hangup` with `peer`, whatever the reason.
    func isHangup(_ peer: PeerID) -> Bool {
        if case .hangup(peer, _) = self { true } else { false }
    }
}
