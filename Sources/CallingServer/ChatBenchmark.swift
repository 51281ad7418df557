import CallingAuth
import CallingCore
import CallingTransport
import Foundation
import Synchronization

/// `calling-server bench chat`: acked chat messages per second and ack latency, measured with
/// real WebSocket clients against a real server (in-process, on a fresh SQLite file) over loopback.
/// Client and server share the machine, as they do in docs/benchmarks.md.
public enum ChatBenchmark {
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

        public init() {}
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var senders: Int
        public var throughputAcked: Int
        public var throughputSeconds: Double
        public var latencyRate: Double
        public var latencyAcked: Int
        public var p50Ms: Double
        public var p99Ms: Double
        public var maxMs: Double

        public var ackedPerSecond: Double { Double(throughputAcked) / throughputSeconds }

        public var description: String {
            String(format: """
                chat bench: %d senders
                  throughput: %d acked in %.1f s = %.0f acked msg/s
                  latency at %.0f msg/s: %d acked, ack p50 %.2f ms, p99 %.2f ms, max %.2f ms
                """, senders, throughputAcked, throughputSeconds, ackedPerSecond, latencyRate, latencyAcked, p50Ms, p99Ms, maxMs)
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
        let app = try ServerApp(config: config, logger: logger)
        try app.start()
        defer { app.stop() }
        let issuer = try TokenIssuer(hs256Secret: Array(config.jwtSecret!.utf8))
        let loop = WebSocketClientLoop(logger: logger)
        defer { loop.shutdown() }

        var senders: [Sender] = []
        for room in 0..<options.rooms {
            for index in 0..<options.sendersPerRoom {
                let claims = PeerTokenClaims(sub: PeerID("bench-\(room)-\(index)"), roomID: RoomID("bench-\(room)"),
                                             role: "peer", scope: ["room"], audience: config.jwtAudience,
                                             expiresAt: Date().addingTimeInterval(3_600))
                let token = try issuer.issue(claims)
                let connection = loop.connect(host: "127.0.0.1", port: app.port, path: "/v1/ws?token=\(token)")
                senders.append(Sender(name: "s\(room)-\(index)", connection: connection))
            }
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
        func percentile(_ p: Double) -> Double {
            guard !latencies.isEmpty else { return .nan }
            return latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
        }
        for sender in senders { sender.connection.close() }
        return Report(senders: senders.count, throughputAcked: acked, throughputSeconds: elapsed, latencyRate: options.rate,
                      latencyAcked: latencies.count, p50Ms: percentile(0.5), p99Ms: percentile(0.99),
                      maxMs: latencies.last ?? .nan)
    }

    enum BenchError: Error { case connectionEnded(String) }

    /// One benchmark client. Its events are consumed by one task at a time.
    final class Sender: Sendable {
        let name: String
        let connection: WebSocketClientConnection
        private let counter = Atomic<Int>(0)

        init(name: String, connection: WebSocketClientConnection) {
            self.name = name
            self.connection = connection
        }

        func waitForWelcome() async throws {
            for await event in connection.events {
                switch event {
                case .text(let text) where text.contains("\"welcome\""): return
                case .closed, .failed: throw BenchError.connectionEnded("\(name): \(event)")
                default: continue
                }
            }
            throw BenchError.connectionEnded(name)
        }

        private func nextID() -> String { "\(name)-\(counter.add(1, ordering: .relaxed).newValue)" }

        private func sendChat(_ id: String) {
            connection.send(text: #"{"type":"chat","payload":{"client_id":"\#(id)","text":"benchmark message"}}"#)
        }

        /// Returns the client_id of an ack frame, or nil for any other frame (others' chats).
        private static func ackedID(_ text: String) -> String? {
            guard text.contains("\"chat-ack\""), let frame = try? JSONParser.parse(text),
                  let id = frame["payload"]?["client_id"]?.stringValue else { return nil }
            return id
        }

        func saturate(window: Int, until deadline: Date) async throws -> Int {
            var inFlight = 0
            var acked = 0
            for _ in 0..<window {
                sendChat(nextID())
                inFlight += 1
            }
            for await event in connection.events {
                switch event {
                case .text(let text):
                    guard Self.ackedID(text) != nil else { continue }
                    acked += 1
                    inFlight -= 1
                    if Date() < deadline {
                        sendChat(nextID())
                        inFlight += 1
                    } else if inFlight == 0 {
                        return acked
                    }
                case .closed, .failed: throw BenchError.connectionEnded("\(name): \(event)")
                default: continue
                }
            }
            throw BenchError.connectionEnded(name)
        }

        func paced(rate: Double, seconds: Double) async throws -> [Double] {
            let total = Int(rate * seconds)
            let interval = 1.0 / rate
            let sentAt = Mutex<[String: UInt64]>([:])
            let pacer = Task {
                let start = DispatchTime.now().uptimeNanoseconds
                for index in 0..<total {
                    let due = start + UInt64(Double(index) * interval * 1e9)
                    let now = DispatchTime.now().uptimeNanoseconds
                    if due > now { try await Task.sleep(nanoseconds: due - now) }
                    // Stamp before sending: the ack can arrive before this task runs again.
                    let id = nextID()
                    sentAt.withLock { $0[id] = DispatchTime.now().uptimeNanoseconds }
                    sendChat(id)
                }
            }
            var latencies: [Double] = []
            latencies.reserveCapacity(total)
            for await event in connection.events {
                switch event {
                case .text(let text):
                    guard let id = Self.ackedID(text) else { continue }
                    let now = DispatchTime.now().uptimeNanoseconds
                    if let sent = sentAt.withLock({ $0.removeValue(forKey: id) }) {
                        latencies.append(Double(now - sent) / 1e6)
                    }
                    if latencies.count == total {
                        try await pacer.value
                        return latencies
                    }
                case .closed, .failed:
                    pacer.cancel()
                    throw BenchError.connectionEnded("\(name): \(event)")
                default: continue
                }
            }
            pacer.cancel()
            throw BenchError.connectionEnded(name)
        }
    }
}
