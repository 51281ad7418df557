import CallingAuth
import CallingEndpoints
import CallingProtocol
import CallingServer
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import XCTest

@testable import CallingClient

/// The contract of the transport seam (`ClientTransport`): for each edge a client meets, the
/// terminal `TransportEvent` the transport reports and what `SignalingClient` makes of it. One
/// suite, run by `ScriptedTransportContractTests` (an in-memory transport playing the server, every
/// edge) and `LWSTransportContractTests` (libwebsockets against the real server, every edge the
/// server can produce). A URLSession transport on an Apple platform must pass the same suite.
class TransportContract: XCTestCase {
    /// The edges of the contract.
    enum Edge: Equatable {
        /// The upgrade answered with `status` and the `problem-code` header `code`.
        case refused(status: Int, code: String)
        /// The server closes with `code` (1001 going away, 4400 replaced, 4401 token expired).
        case serverCloses(UInt16)
        /// The connection ends without a close frame.
        case drop
    }

    /// Every transport event the clients of a test saw, per socket, in order.
    var recorder: RecordingTransport!

    // MARK: what each world provides

    /// A client of `peer` on the world's transport (wrapped in `recorder`), with test timings.
    func client(_ peer: String, for edge: Edge?, configure: (inout SignalingOptions) -> Void = { _ in }) async throws
        -> SignalingClient
    {
        fatalError("a contract world overrides client(_:for:configure:)")
    }

    /// Makes `edge` happen to the connected `client`.
    func provoke(_ edge: Edge, on client: SignalingClient, peer: String) async throws {
        fatalError("a contract world overrides provoke(_:on:peer:)")
    }

    /// A client (on `recorder`) whose upgrade is never answered.
    func clientHeldAtUpgrade() async throws -> SignalingClient {
        fatalError("a contract world overrides clientHeldAtUpgrade()")
    }

    // MARK: the contract

    func check_refused_upgrades_fail_connect_with_status_and_problem_code() async throws {
        for (status, code) in [(401, "token_bad_signature"), (403, "token_wrong_scope"), (409, "room_full")] {
            let edge = Edge.refused(status: status, code: code)
            let client = try await client("refused-\(status)", for: edge)
            let events = EventLog(client.events)
            do {
                try await client.connect()
                XCTFail("\(status): connect must throw")
            } catch let error as CallingError {
                guard case .connectFailed(status, code, let message) = error.kind else { XCTFail("\(status): \(error)"); continue }
                XCTAssertEqual(message, CallingError.problemMeanings[code] ?? HTTPResponseText.reason(status))
                XCTAssertFalse(error.isRetryable, "\(status)")
            }
            guard case .failed = client.state else { XCTFail("\(status): state \(client.state)"); continue }
            guard case .failed(status, code, _)? = recorder.sockets.last?.last else {
                XCTFail("\(status): transport reported \(recorder.sockets)"); continue
            }
            XCTAssertFalse(events.all.contains { if case .reconnecting = $0.state { true } else { false } })
        }
    }

    func check_a_disconnect_closes_with_1000() async throws {
        let client = try await client("alice", for: nil)
        try await client.connect()
        await client.disconnect()
        XCTAssertEqual(client.state, .ended)
        guard case .closed(1000, _)? = recorder.sockets.last?.last else { return XCTFail("\(recorder.sockets)") }
    }

    func check_going_away_1001_and_a_drop_reconnect() async throws {
        for edge in [Edge.serverCloses(1001), .drop] {
            let client = try await client("alice", for: edge)
            let events = EventLog(client.events)
            try await client.connect()
            let socketsBefore = recorder.sockets.count
            try await provoke(edge, on: client, peer: "alice")
            try await eventually(timeout: 10) { events.all.compactMap(\.state).count >= 4 }
            XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected, .reconnecting(attempt: 1), .connected], "\(edge)")
            let ended = recorder.sockets[socketsBefore - 1].last
            switch edge {
            case .serverCloses(let code): guard case .closed(code, _)? = ended else { XCTFail("\(edge): \(String(describing: ended))"); break }
            default: guard case .closed(nil, _)? = ended else { XCTFail("\(edge): \(String(describing: ended))"); break }
            }
            await client.disconnect()
        }
    }

    func check_replaced_4400_and_token_expired_4401_are_terminal() async throws {
        for (code, expected) in [(UInt16(4400), CallingError.replaced), (4401, .tokenExpired)] {
            let edge = Edge.serverCloses(code)
            let client = try await client("alice-\(code)", for: edge)
            let events = EventLog(client.events)
            try await client.connect()
            try await provoke(edge, on: client, peer: "alice-\(code)")
            let failure = try await events.first(timeout: 8) { if case .failed(let error) = $0.state { error } else { nil } }
            XCTAssertEqual(failure, expected)
            XCTAssertEqual(failure.closeCode, code)
            XCTAssertFalse(failure.isRetryable)
            guard case .closed(code, _)? = recorder.sockets.last(where: { $0.contains(.open) })?.last else {
                return XCTFail("\(code): \(recorder.sockets)")
            }
            try await Task.sleep(nanoseconds: 300_000_000)
            XCTAssertFalse(events.all.contains { if case .reconnecting = $0.state { true } else { false } })
        }
    }

    func check_an_unanswered_ping_drops_the_socket_and_reconnects() async throws {
        let client = try await client("alice", for: nil) { $0.pingInterval = 0.2 }
        let events = EventLog(client.events)
        try await client.connect()
        try await Task.sleep(nanoseconds: 500_000_000)
        XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected], "pongs answered: nothing happens")
        // The transport stops reading: the pongs back up unread, as on a half-open connection.
        client.pauseReadingForTesting()
        _ = try await events.first { if case .reconnecting = $0.state { true } else { nil } }
        try await eventually { events.all.compactMap(\.state).count >= 4 }
        XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected, .reconnecting(attempt: 1), .connected])
        guard case .closed(nil, _)? = recorder.sockets.first?.last else { return XCTFail("\(recorder.sockets)") }
        await client.disconnect()
    }

    func check_an_abort_while_connecting_ends_the_socket_as_failed() async throws {
        let client = try await clientHeldAtUpgrade()
        let connecting = Task { _ = try await client.connect() }
        try await eventually { client.state == .connecting && !recorder.sockets.isEmpty }
        await client.disconnect()
        do {
            try await connecting.value
            XCTFail("connect must throw once disconnected")
        } catch {}
        try await eventually { recorder.sockets.first?.last?.isTerminal == true }
        guard case .failed(nil, _, _)? = recorder.sockets.first?.last else { return XCTFail("\(recorder.sockets)") }
        XCTAssertFalse(recorder.sockets.first?.contains(.open) ?? true)
        XCTAssertEqual(client.state, .ended)
    }
}

/// Wraps a transport and records every event of every socket it opened.
final class RecordingTransport: ClientTransport, @unchecked Sendable {
    // @unchecked: `log` only under `lock`.
    private let inner: any ClientTransport
    private let lock = NSLock()
    private var log: [[TransportEvent]] = []

    init(_ inner: any ClientTransport) {
        self.inner = inner
    }

    /// The events of each socket, in the order the sockets were opened.
    var sockets: [[TransportEvent]] { lock.withLock { log } }

    func openSocket(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?,
                    onEvent: @escaping @Sendable (TransportEvent) -> Void) -> any TransportSocket
    {
        let index = lock.withLock { () -> Int in
            log.append([])
            return log.count - 1
        }
        return inner.openSocket(host: host, port: port, path: path, headers: headers, tls: tls) { [weak self] event in
            self?.lock.withLock { self?.log[index].append(event) }
            onEvent(event)
        }
    }

    func request(_ method: String, host: String, port: Int, path: String, headers: [String: String], body: [UInt8],
                 tls: TLSClientOptions?, timeout: TimeInterval) async throws(HTTPClientError) -> HTTPClientResponse
    {
        try await inner.request(method, host: host, port: port, path: path, headers: headers, body: body, tls: tls,
                                timeout: timeout)
    }
}

// MARK: - the scripted world

/// The contract against `ScriptedTransport`: every edge, scripted.
final class ScriptedTransportContractTests: TransportContract {
    private var scripted: ScriptedTransport!

    override func setUp() {
        scripted = ScriptedTransport()
        recorder = RecordingTransport(scripted)
    }

    override func client(_ peer: String, for edge: Edge?, configure: (inout SignalingOptions) -> Void = { _ in }) async throws
        -> SignalingClient
    {
        scripted.refusal = nil
        if case .refused(let status, let code) = edge { scripted.refusal = (status, code) }
        var options = SignalingOptions()
        options.transport = recorder
        options.reconnectDelays = [0.1]
        options.connectTimeout = 5
        configure(&options)
        return SignalingClient(url: URL(string: "ws://scripted.invalid:80")!, token: "scripted-token", options: options)
    }

    override func provoke(_ edge: Edge, on client: SignalingClient, peer: String) async throws {
        let socket = try XCTUnwrap(scripted.sockets.last)
        switch edge {
        case .serverCloses(let code): socket.serverClose(code, reason: CloseCode(rawValue: code)?.reason ?? "")
        case .drop: socket.serverDrop()
        case .refused: XCTFail("a refusal is scripted at open")
        }
    }

    override func clientHeldAtUpgrade() async throws -> SignalingClient {
        scripted.holdUpgrades = true
        return try await client("alice", for: nil)
    }

    func test_refused_upgrades_fail_connect_with_status_and_problem_code() async throws {
        try await check_refused_upgrades_fail_connect_with_status_and_problem_code()
    }
    func test_a_disconnect_closes_with_1000() async throws { try await check_a_disconnect_closes_with_1000() }
    func test_going_away_1001_and_a_drop_reconnect() async throws { try await check_going_away_1001_and_a_drop_reconnect() }
    func test_replaced_4400_and_token_expired_4401_are_terminal() async throws {
        try await check_replaced_4400_and_token_expired_4401_are_terminal()
    }
    func test_an_unanswered_ping_drops_the_socket_and_reconnects() async throws {
        try await check_an_unanswered_ping_drops_the_socket_and_reconnects()
    }
    func test_an_abort_while_connecting_ends_the_socket_as_failed() async throws {
        try await check_an_abort_while_connecting_ends_the_socket_as_failed()
    }
}

/// An in-memory transport that plays the room server: answers the upgrade (or refuses it as
/// told), sends `welcome`, answers `ping` with `pong`, and closes or drops when the test says.
/// Events are delivered on one serial queue, as a real transport's thread would.
final class ScriptedTransport: ClientTransport, @unchecked Sendable {
    // @unchecked: the `var`s only under `lock`.
    private let lock = NSLock()
    let queue = DispatchQueue(label: "scripted-transport")
    private var opened: [ScriptedSocket] = []
    private var refusalStorage: (status: Int, code: String)?
    private var holdStorage = false

    /// The next upgrades are refused with this status and problem code.
    var refusal: (status: Int, code: String)? {
        get { lock.withLock { refusalStorage } }
        set { lock.withLock { refusalStorage = newValue } }
    }

    /// The next upgrades are never answered.
    var holdUpgrades: Bool {
        get { lock.withLock { holdStorage } }
        set { lock.withLock { holdStorage = newValue } }
    }

    var sockets: [ScriptedSocket] { lock.withLock { opened } }

    func openSocket(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?,
                    onEvent: @escaping @Sendable (TransportEvent) -> Void) -> any TransportSocket
    {
        let socket = ScriptedSocket(queue: queue, onEvent: onEvent)
        let (refusal, hold) = lock.withLock { () -> ((status: Int, code: String)?, Bool) in
            opened.append(socket)
            return (refusalStorage, holdStorage)
        }
        if let refusal {
            socket.deliver(.failed(status: refusal.status, code: refusal.code, message: "HTTP \(refusal.status)"))
        } else if !hold {
            socket.accept()
        }
        return socket
    }

    func request(_ method: String, host: String, port: Int, path: String, headers: [String: String], body: [UInt8],
                 tls: TLSClientOptions?, timeout: TimeInterval) async throws(HTTPClientError) -> HTTPClientResponse
    {
        throw HTTPClientError(message: "the scripted transport has no REST")
    }
}

/// One scripted socket: what the client sent, and the server side's moves.
final class ScriptedSocket: TransportSocket, @unchecked Sendable {
    // @unchecked: the `var`s only under `lock`.
    private let lock = NSLock()
    private let queue: DispatchQueue
    private let onEvent: @Sendable (TransportEvent) -> Void
    private var isOpen = false
    private var finished = false
    private var paused = false
    private var held: [TransportEvent] = []
    private(set) var sent: [String] = []

    init(queue: DispatchQueue, onEvent: @escaping @Sendable (TransportEvent) -> Void) {
        self.queue = queue
        self.onEvent = onEvent
    }

    /// The server's side: 101, then `welcome`.
    func accept() {
        lock.withLock { isOpen = true }
        deliver(.open)
        let welcome: JSONValue = ["type": "welcome", "payload": [
            "peer_id": "alice", "room_id": "room-1", "role": "peer", "last_seq": 0, "peers": [],
            "ping_interval_ms": 25_000,
        ]]
        deliver(.text(String(decoding: JSONWriter.bytes(welcome), as: UTF8.self)))
    }

    func serverClose(_ code: UInt16, reason: String) { deliver(.closed(code: code, reason: reason)) }
    func serverDrop() { deliver(.closed(code: nil, reason: "connection lost")) }

    /// Hands `event` to the client on the transport's queue; messages wait while reading is paused.
    func deliver(_ event: TransportEvent) {
        queue.async { [self] in
            let now = lock.withLock { () -> Bool in
                guard !finished else { return false }
                if paused, case .text = event {
                    held.append(event)
                    return false
                }
                if event.isTerminal { finished = true }
                return true
            }
            if now { onEvent(event) }
        }
    }

    func send(text: String) {
        let ping = lock.withLock { () -> Bool in
            sent.append(text)
            return isOpen && text.contains(#""type":"ping""#)
        }
        if ping { deliver(.text(#"{"type":"pong"}"#)) }
    }

    func close(code: UInt16, reason: String) {
        let open = lock.withLock { isOpen }
        deliver(open ? .closed(code: code, reason: reason) : .failed(status: nil, code: nil, message: "closed before open"))
    }

    func abort() {
        let open = lock.withLock { isOpen }
        deliver(open ? .closed(code: nil, reason: "aborted") : .failed(status: nil, code: nil, message: "aborted"))
    }

    func pauseReading() { lock.withLock { paused = true } }

    func resumeReading() {
        let released = lock.withLock { () -> [TransportEvent] in
            paused = false
            defer { held = [] }
            return held
        }
        released.forEach(deliver)
    }
}

// MARK: - the live world

/// The contract against the real server over libwebsockets.
final class LWSTransportContractTests: TransportContract {
    private var server: ClientHarness!

    override func setUp() async throws {
        server = try ClientHarness {
            $0.maxPeersPerRoom = 1
            $0.jwtLeewaySeconds = 0  // the 2 s token of 4401 expires on time
        }
        recorder = RecordingTransport(server.loop)
    }

    override func tearDown() async throws {
        server?.shutdown()
        if silentListener >= 0 { close(silentListener) }
    }

    override func client(_ peer: String, for edge: Edge?, configure: (inout SignalingOptions) -> Void = { _ in }) async throws
        -> SignalingClient
    {
        var room = "room-\(peer)"
        var token: String
        switch edge {
        case .refused(401, _)?:
            token = try TokenIssuer(hs256Secret: Array("another-secret-0123456789abcdef-xyz".utf8)).issue(PeerTokenClaims(
                sub: PeerID(peer), roomID: RoomID(room), scope: ["room"], audience: server.config.jwtAudience,
                expiresAt: Date().addingTimeInterval(600)))
        case .refused(403, _)?:
            token = try server.issuer.issue(PeerTokenClaims(
                sub: PeerID(peer), roomID: RoomID(room), role: "peer", scope: ["presence"], audience: server.config.jwtAudience,
                issuedAt: Date(), expiresAt: Date().addingTimeInterval(600)))
        case .refused(409, _)?:
            room = "full-room"
            token = try server.token(peer: peer, room: room)
        case .serverCloses(4401)?:
            token = try server.token(peer: peer, room: room, ttl: 2)
        default:
            token = try server.token(peer: peer, room: room)
        }
        if case .refused(409, _)? = edge {
            // The room seats one peer: another is in it.
            let sitter = try server.client("sitter", room: room)
            try await sitter.connect()
            sitters.append(sitter)
        }
        return try server.client(peer, room: room, token: token) { options in
            options.transport = recorder
            options.reconnectDelays = [0.1]
            configure(&options)
        }
    }

    /// Clients kept connected for the length of a test.
    private var sitters: [SignalingClient] = []

    override func provoke(_ edge: Edge, on client: SignalingClient, peer: String) async throws {
        switch edge {
        case .serverCloses(1001): try await server.restart()
        case .serverCloses(4400):
            // The same peer id connects again: the server replaces the first socket.
            let second = try server.client(peer, room: "room-\(peer)")
            try await second.connect()
            sitters.append(second)
        case .serverCloses(4401): break  // the token's 2 s run out
        case .drop: client.dropConnectionForTesting()
        default: XCTFail("the real server cannot be made to \(edge)")
        }
    }

    func test_refused_upgrades_fail_connect_with_status_and_problem_code() async throws {
        try await check_refused_upgrades_fail_connect_with_status_and_problem_code()
    }
    func test_a_disconnect_closes_with_1000() async throws { try await check_a_disconnect_closes_with_1000() }
    func test_going_away_1001_and_a_drop_reconnect() async throws { try await check_going_away_1001_and_a_drop_reconnect() }
    func test_replaced_4400_and_token_expired_4401_are_terminal() async throws {
        try await check_replaced_4400_and_token_expired_4401_are_terminal()
    }
    func test_an_unanswered_ping_drops_the_socket_and_reconnects() async throws {
        try await check_an_unanswered_ping_drops_the_socket_and_reconnects()
    }
    func test_an_abort_while_connecting_ends_the_socket_as_failed() async throws {
        try await check_an_abort_while_connecting_ends_the_socket_as_failed()
    }

    /// A TCP listener that never accepts: the kernel completes the handshake, lws sends its
    /// upgrade, and no answer ever comes (a server stuck before its HTTP layer).
    private var silentListener: Int32 = -1

    override func clientHeldAtUpgrade() async throws -> SignalingClient {
        silentListener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(silentListener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(listen(silentListener, 4), 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(silentListener, $0, &length) }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        var options = SignalingOptions()
        options.transport = recorder
        options.connectTimeout = 5
        return SignalingClient(url: URL(string: "ws://127.0.0.1:\(port)")!, token: try server.token(peer: "alice"), options: options)
    }
}
