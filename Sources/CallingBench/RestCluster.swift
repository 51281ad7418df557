import CallingLogging
import CallingTesting
import Foundation
import Glibc

extension Scenarios {
    /// Client connections of the `rest-cluster` scenario, the same for every cluster size.
    static let restClients = 8

    /// `rest-cluster`: the Calls API's throughput on one node and on three, with PostgreSQL
    /// (`database_url`) and one redis-server, in the same run (docs/benchmarks.md, "REST across
    /// nodes"). Each client creates a call (`POST /v1/calls`) through one node and reads it back
    /// (`GET /v1/calls/{id}`) through the next one, one request in flight per client, for a phase;
    /// every read must find the call it created. The nodes run unpinned (they share the cores with
    /// the generator, PostgreSQL and Redis); no baseline, the figure of interest is three against one.
    func restCluster(_ result: inout ScenarioResult) throws {
        guard RedisServer.binary != nil else { throw LoadEngine.Failure.system("rest-cluster needs redis-server (deploy/install-deps.sh --test)") }
        let clients = sizes.joinPeers < 100 ? 2 : Self.restClients
        let seconds = sizes.phaseSeconds
        result.parameters = "\(clients) keep-alive clients, POST /v1/calls through one node then GET through the next, \(seconds) s per size"
        let postgres = try TestPostgres()
        defer { postgres.stop() }
        let redis = try RedisServer()
        defer { redis.stop() }
        var rates: [Int: Double] = [:]
        for count in [1, 3] {
            let url = try postgres.createDatabase()
            var targets: [TargetProcess] = []
            defer {
                for target in targets {
                    target.stop()
                    target.removeData()
                }
            }
            for index in 0..<count {
                targets.append(try TargetProcess.server(binary: serverBinary, cpu: nil, flags: [
                    "--database_url", url, "--cluster_redis_url", redis.url, "--node_id", "bench-\(index)",
                ]))
            }
            let key = try Self.createAPIKey(binary: serverBinary, dataDir: targets[0].dataDir ?? "", databaseURL: url)
            let cpu0 = targets.map { $0.cpuSeconds() }
            let outcome = try Self.restLoad(ports: targets.map(\.port), key: key, clients: clients, seconds: seconds)
            let cpu = zip(targets, cpu0).map { $0.cpuSeconds() - $1 }.reduce(0, +)
            let label = count == 1 ? "1 node" : "\(count) nodes"
            rates[count] = Double(outcome.latencies.count) / outcome.seconds
            result.figures.append(Figure(name: "\(label): calls created and read back per second", unit: "calls/s",
                                         server: rates[count] ?? .nan, baseline: nil, higherIsBetter: true))
            let sorted = outcome.latencies.sorted()
            result.figures.append(Figure(name: "\(label): create + read p50", unit: "ms", server: Stats.percentile(sorted, 0.5) / 1e3,
                                         baseline: nil, higherIsBetter: false))
            result.figures.append(Figure(name: "\(label): create + read p99", unit: "ms", server: Stats.percentile(sorted, 0.99) / 1e3,
                                         baseline: nil, higherIsBetter: false))
            result.verified["server \(label): calls created and read back\(count > 1 ? " through another node" : "")"] = outcome.latencies.count
            result.notes.append(String(format: "%@: the nodes spent %.2f CPU s in %.2f s (all threads, from /proc)", label, cpu, outcome.seconds))
        }
        if let one = rates[1], let three = rates[3], one > 0 {
            result.notes.append(String(format: "3 nodes ÷ 1 node: %.2f", three / one))
        }
    }

    /// `calling-server apikey create` with the `calls` scope in the shared database; the key.
    private static func createAPIKey(binary: String, dataDir: String, databaseURL: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["apikey", "create", "--name", "bench", "--scope", "calls", "--data-dir", dataDir, "--database-url", databaseURL]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let key = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0, key.hasPrefix("csk_") else {
            throw LoadEngine.Failure.system("apikey create failed (\(process.terminationStatus)): \(key)")
        }
        return key
    }

    private struct RestOutcome {
        /// Microseconds per create + read, one per call.
        var latencies: [Double]
        var seconds: Double
    }

    /// `clients` threads, client `i` creating through `ports[i % n]` and reading through
    /// `ports[(i + 1) % n]`, for `seconds` after ten unmeasured pairs each.
    private static func restLoad(ports: [Int], key: String, clients: Int, seconds: Double) throws -> RestOutcome {
        struct State {
            var latencies: [Double] = []
            var failure: String?
        }
        let state = Locked(State())
        let group = DispatchGroup()
        let warmed = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        let begin = Locked<UInt64>(0)
        for index in 0..<clients {
            group.enter()
            warmed.enter()
            let thread = Thread {
                defer { group.leave() }
                var mine: [Double] = []
                var serial = 0
                var warming = true
                func pair(_ creating: HTTPClient, _ reading: HTTPClient) throws -> Double {
                    serial += 1
                    let began = LoadEngine.now()
                    let body = Array(#"{"room_id":"bench-\#(index)-\#(serial)","peer_id":"p"}"#.utf8)
                    let (created, answer) = try creating.send("POST", "/v1/calls", headers: ["X-API-Key: \(key)"], body: body)
                    let text = String(decoding: answer, as: UTF8.self)
                    guard created == 201, let range = text.range(of: #""call_id":""#),
                          let end = text[range.upperBound...].firstIndex(of: "\"") else {
                        throw LoadEngine.Failure.verification("POST /v1/calls answered \(created): \(text.prefix(200))")
                    }
                    let id = String(text[range.upperBound..<end])
                    let (read, readBody) = try reading.send("GET", "/v1/calls/\(id)", headers: ["X-API-Key: \(key)"])
                    guard read == 200, String(decoding: readBody, as: UTF8.self).contains(#""call_id":"\#(id)""#) else {
                        throw LoadEngine.Failure.verification("GET /v1/calls/\(id) answered \(read): \(String(decoding: readBody.prefix(200), as: UTF8.self))")
                    }
                    return Double(LoadEngine.now() - began) / 1e3
                }
                do {
                    let creating = try HTTPClient(port: ports[index % ports.count])
                    let reading = try HTTPClient(port: ports[(index + 1) % ports.count])
                    for _ in 0..<10 { _ = try pair(creating, reading) }
                    warming = false
                    warmed.leave()
                    start.wait()
                    let deadline = begin.withLock { $0 } + UInt64(seconds * 1e9)
                    while LoadEngine.now() < deadline { mine.append(try pair(creating, reading)) }
                } catch {
                    state.withLock { $0.failure = $0.failure ?? "\(error)" }
                    if warming { warmed.leave() }
                }
                state.withLock { $0.latencies += mine }
            }
            thread.start()
        }
        // Every client warmed up (or failed) before the clock starts.
        warmed.wait()
        begin.withLock { $0 = LoadEngine.now() }
        for _ in 0..<clients { start.signal() }
        group.wait()
        let elapsed = Double(LoadEngine.now() - begin.withLock { $0 }) / 1e9
        let final = state.withLock { $0 }
        if let failure = final.failure { throw LoadEngine.Failure.verification(failure) }
        return RestOutcome(latencies: final.latencies, seconds: elapsed)
    }
}
