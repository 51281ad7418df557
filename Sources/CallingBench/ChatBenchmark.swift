import CallingAuth
import CallingCore
import CallingPostgres
import CallingServer
import CallingStore
import CallingTransport
import Foundation

/// `calling-server bench chat`: acked chat messages per second and ack latency, measured with
/// real WebSocket clients against a real server (in-process, on a fresh SQLite file) over loopback.
/// Client and server share the machine, as they do in docs/benchmarks.md.
public enum ChatBenchmark {
    /// Which load generator drives the server.
    public enum Client: String, Sendable {
        /// One thread, plain nonblocking sockets, frames built and masked from a template, acks
        /// found by a byte scan: it leaves the server most of the machine (PipelinedLoad.swift).
        case raw
        /// The lws client: as much CPU per message as the server itself spends.
        case lws
    }

    public struct Options: Sendable {
        public var rooms = 10
        public var sendersPerRoom = 2
        /// Throughput phase: chats each sender keeps in flight.
        public var window = 64
        /// Throughput phase length.
        public var seconds = 5.0
        /// Latency phase: total chats per second across all senders.
        public var rate = 5_000.0
        public var latencySeconds = 5.0
        public var eventLoop = TransportSettings.EventLoop.libev
        public var client = Client.raw
        /// `postgres://…`: chat history in that (empty) PostgreSQL database instead of SQLite.
        public var databaseURL = ""

        public init() {}
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var client: Client
        public var senders: Int
        public var throughputAcked: Int
        public var throughputSeconds: Double
        /// Send → ack at saturation (raw client only).
        public var saturatedP50Ms: Double?
        public var saturatedP99Ms: Double?
        public var latencyRate: Double
        public var latencyAcked: Int
        public var p50Ms: Double
        public var p99Ms: Double
        public var maxMs: Double

        public var ackedPerSecond: Double { Double(throughputAcked) / throughputSeconds }

        public var description: String {
            var text = String(format: """
                chat bench: %d senders, %@ client
                  throughput: %d acked in %.1f s = %.0f acked msg/s
                """, senders, client.rawValue, throughputAcked, throughputSeconds, ackedPerSecond)
            if let saturatedP50Ms, let saturatedP99Ms {
                text += String(format: " (ack p50 %.2f ms, p99 %.2f ms)", saturatedP50Ms, saturatedP99Ms)
            }
            text += String(format: "\n  latency at %.0f msg/s: %d acked, ack p50 %.2f ms, p99 %.2f ms, max %.2f ms",
                           latencyRate, latencyAcked, p50Ms, p99Ms, maxMs)
            return text
        }
    }

    public static func run(_ options: Options, logger: Logger) async throws -> Report {
        let dataDir = NSTemporaryDirectory() + "calling-bench-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        var config = ServerConfig()
        config.port = 0
        config.dataDir = dataDir
        config.eventLoop = options.eventLoop
        config.jwtSecret = SecureRandom.token(bytes: 32)
        // The benchmark measures the store and the loop, not the per-connection rate limit.
        config.maxFramesPerSecond = 1_000_000
        config.frameBurst = 1_000_000
        config.logLevel = .warning
        config.databaseURL = options.databaseURL
        let app = try ServerApp(config: config, logger: logger)
        try app.start()
        defer { app.stop() }
        let issuer = try TokenIssuer(hs256Secret: Array(config.jwtSecret!.utf8))
        var tokens: [(room: Int, token: String)] = []
        for room in 0..<options.rooms {
            for index in 0..<options.sendersPerRoom {
                let claims = PeerTokenClaims(sub: PeerID("bench-\(room)-\(index)"), roomID: RoomID("bench-\(room)"),
                                             role: "peer", scope: ["room"], audience: config.jwtAudience,
                                             expiresAt: Date().addingTimeInterval(3_600))
                tokens.append((room, try issuer.issue(claims)))
            }
        }
        switch options.client {
        case .raw:
            let port = app.port
            let peers = tokens
            let report = try await runOnThread { try PipelinedLoad(tokens: peers, port: port).run(options) }
            if options.databaseURL.isEmpty {
                // A second connection to the server's file: the store lives inside the server library.
                let store = try ChatStore.open(path: config.databasePath, options: .init(migrateOnOpen: false))
                defer { store.close() }
                try verifyStored(report.ackedPerRoom, store: store)
            } else {
                try verifyStored(report.ackedPerRoom, postgresURL: options.databaseURL)
            }
            return report.report
        case .lws:
            return try await runLWS(options, tokens: tokens, port: app.port, logger: logger)
        }
    }

    /// The generator gets a thread of its own rather than a cooperative-pool thread it would block.
    private static func runOnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = "bench-load"
            thread.start()
        }
    }

    /// Every acked chat must be a committed row: the rows in each room are exactly the acked ones
    /// (the generator already checked that the acked seqs are distinct and gap-free).
    static func verifyStored(_ ackedPerRoom: [Int], store: ChatStore) throws {
        // By room_no, the key since migration 006 (room_id alone would scan the table); by room_id in
        // a database of an older server, so that the bench can measure one against the other.
        let numbered = try store.sync { db in
            try db.queryFirst("SELECT count(*) FROM pragma_table_info('chat_messages') WHERE name = 'room_no'") { $0.int64(0) }
        } == 1
        let sql = numbered
            ? "SELECT count(*), coalesce(max(seq), 0) FROM chat_messages WHERE room_no = (SELECT room_no FROM rooms WHERE room_id = ?1)"
            : "SELECT count(*), coalesce(max(seq), 0) FROM chat_messages WHERE room_id = ?1"
        for (room, acked) in ackedPerRoom.enumerated() {
            let (rows, lastSeq) = try store.sync { db in
                try db.queryFirst(sql, [.text("bench-\(room)")]) { (Int($0.int64(0)), Int($0.int64(1))) } ?? (0, 0)
            }
            guard rows == acked, lastSeq == acked else {
                throw BenchError.verification("room bench-\(room): \(acked) acked, \(rows) rows stored, last seq \(lastSeq)")
            }
        }
    }

    /// `verifyStored` against the PostgreSQL chat tables.
    static func verifyStored(_ ackedPerRoom: [Int], postgresURL: String) throws {
        let db = try PostgresConnection(url: postgresURL)
        defer { db.close() }
        for (room, acked) in ackedPerRoom.enumerated() {
            let row = try db.query("SELECT count(*), coalesce(max(seq), 0) FROM chat_messages WHERE room_id = $1::text",
                                   ["bench-\(room)"]).rows.first
            let rows = Int(row?[0] ?? "") ?? -1
            let lastSeq = Int(row?[1] ?? "") ?? -1
            guard rows == acked, lastSeq == acked else {
                throw BenchError.verification("room bench-\(room): \(acked) acked, \(rows) rows stored, last seq \(lastSeq)")
            }
        }
    }

    /// The original generator: one lws client connection per sender on an lws client thread.
    private static func runLWS(_ options: Options, tokens: [(room: Int, token: String)], port: Int,
                               logger: Logger) async throws -> Report
    {
        let loop = WebSocketClientLoop(logger: logger)
        defer { loop.shutdown() }
        let senders = tokens.enumerated().map { index, entry in
            Sender(name: "s\(index)", loop: loop, port: port, token: entry.token)
        }
        for sender in senders { try await sender.waitForWelcome() }

        // Phase 1: saturate. Each sender keeps `window` chats in flight; an ack releases the next.
        let deadline = Date().addingTimeInterval(options.seconds)
        let started = Date()
        let acked = try await withThrowingTaskGroup(of: Int.self) { group in
            for sender in senders {
                group.addTask { try await sender.saturate(window: options.window, until: deadline) }
            }
            return try await group.reduce(0, +)
        }
        let elapsed = Date().timeIntervalSince(started)

        // Phase 2: a fixed offered rate, measuring send → ack.
        let perSender = options.rate / Double(senders.count)
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
            for sender in senders {
                group.addTask { try await sender.paced(rate: perSender, seconds: options.latencySeconds) }
            }
            return try await group.reduce(into: [Double]()) { $0 += $1 }
        }.sorted()
        for sender in senders { sender.connection.close() }
        return Report(client: .lws, senders: senders.count, throughputAcked: acked, throughputSeconds: elapsed,
                      latencyRate: options.rate, latencyAcked: latencies.count, p50Ms: percentile(latencies, 0.5),
                      p99Ms: percentile(latencies, 0.99), maxMs: latencies.last ?? .nan)
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    enum BenchError: Error { case connectionEnded(String), timedOut(String), verification(String) }

    /// One benchmark client. Its events are handled on the client loop's thread as they arrive
    /// (no task hop per message), so the client costs as little as possible next to the server.
    final class Sender: @unchecked Sendable {
        // @unchecked: `connection` is set once, in `init`; the rest is `state` (a `Locked`) or
        // immutable. A chat is sent after the lock is let go, with the id decided under it.
        let name: String
        private(set) var connection: WebSocketClientConnection!
        private let state = Locked(State())
        private let welcomed = DispatchSemaphore(value: 0)
        private let finished = DispatchSemaphore(value: 0)

        private struct State {
            var counter = 0
            var phase = Phase.connecting
            var failure: String?

            mutating func nextID(_ name: String) -> String {
                counter += 1
                return "\(name)-\(counter)"
            }
        }

        private enum Phase {
            case connecting, idle
            case saturating(deadline: Date, inFlight: Int, acked: Int)
            case pacing(total: Int, sentAt: [String: UInt64], latencies: [Double])
        }

        init(name: String, loop: WebSocketClientLoop, port: Int, token: String) {
            self.name = name
            connection = loop.connect(host: "127.0.0.1", port: port, path: "/v1/ws?token=\(token)") { [weak self] event in
                self?.handle(event)
            }
        }

        private func handle(_ event: WebSocketClientEvent) {
            switch event {
            case .text(let text):
                let welcome = state.withLock { state -> Bool in
                    guard case .connecting = state.phase else { return false }
                    state.phase = .idle
                    return true
                }
                if welcome {
                    welcomed.signal()
                    return
                }
                // Server frames have sorted keys, so an ack ends with its type.
                guard text.hasSuffix(#""type":"chat-ack"}"#), let frame = try? JSONParser.parse(text),
                      let id = frame["payload"]?["client_id"]?.stringValue else { return }
                if let next = acknowledge(id) { sendChat(next) }
            case .closed, .failed:
                state.withLock { $0.failure = "\(name): \(event)" }
                welcomed.signal()
                finished.signal()
            default:
                break
            }
        }

        /// On the client loop's thread: counts the ack, and returns the id of the chat to send next
        /// (saturation keeps its window full until the deadline).
        private func acknowledge(_ id: String) -> String? {
            let (next, done) = state.withLock { state -> (String?, Bool) in
                switch state.phase {
                case .saturating(let deadline, var inFlight, var acked):
                    acked += 1
                    var next: String?
                    if Date() < deadline {
                        next = state.nextID(name)
                    } else {
                        inFlight -= 1
                    }
                    state.phase = .saturating(deadline: deadline, inFlight: inFlight, acked: acked)
                    return (next, inFlight == 0)
                case .pacing(let total, var sentAt, var latencies):
                    let now = DispatchTime.now().uptimeNanoseconds
                    if let sent = sentAt.removeValue(forKey: id) { latencies.append(Double(now - sent) / 1e6) }
                    state.phase = .pacing(total: total, sentAt: sentAt, latencies: latencies)
                    return (nil, latencies.count == total)
                default:
                    return (nil, false)
                }
            }
            if done { finished.signal() }
            return next
        }

        private func sendChat(_ id: String) {
            connection.send(text: #"{"type":"chat","payload":{"client_id":"\#(id)","text":"benchmark message"}}"#)
        }

        private func wait(_ semaphore: DispatchSemaphore, seconds: Double, what: String) throws {
            if semaphore.wait(timeout: .now() + seconds) == .timedOut { throw BenchError.timedOut("\(name): \(what)") }
            if let failure = state.withLock({ $0.failure }) { throw BenchError.connectionEnded(failure) }
        }

        func waitForWelcome() async throws {
            try wait(welcomed, seconds: 10, what: "welcome")
        }

        func saturate(window: Int, until deadline: Date) async throws -> Int {
            let ids = state.withLock { state in
                state.phase = .saturating(deadline: deadline, inFlight: window, acked: 0)
                return (0..<window).map { _ in state.nextID(name) }
            }
            for id in ids { sendChat(id) }
            try wait(finished, seconds: deadline.timeIntervalSinceNow + 30, what: "saturation acks")
            return state.withLock { state in
                guard case .saturating(_, _, let acked) = state.phase else { return 0 }
                state.phase = .idle
                return acked
            }
        }

        func paced(rate: Double, seconds: Double) async throws -> [Double] {
            let total = Int(rate * seconds)
            state.withLock { $0.phase = .pacing(total: total, sentAt: [:], latencies: []) }
            let interval = 1.0 / rate
            let start = DispatchTime.now().uptimeNanoseconds
            for index in 0..<total {
                let due = start + UInt64(Double(index) * interval * 1e9)
                let now = DispatchTime.now().uptimeNanoseconds
                if due > now { try await Task.sleep(nanoseconds: due - now) }
                // Stamp before sending: the ack can arrive before this task runs again.
                let id = state.withLock { state in
                    let id = state.nextID(name)
                    if case .pacing(let total, var sentAt, let latencies) = state.phase {
                        sentAt[id] = DispatchTime.now().uptimeNanoseconds
                        state.phase = .pacing(total: total, sentAt: sentAt, latencies: latencies)
                    }
                    return id
                }
                sendChat(id)
            }
            try wait(finished, seconds: 30, what: "paced acks")
            return state.withLock { state in
                guard case .pacing(_, _, let latencies) = state.phase else { return [] }
                state.phase = .idle
                return latencies
            }
        }
    }
}
