import CallingLogging
import CallingStore
import CallingTesting
import Foundation
import Glibc

/// Sizes of one run. `full` is `make bench`, `quick` is `make bench-quick`, `smoke` the test's tiny N.
struct SuiteSizes {
    var idlePeers = 19_000
    var roomSize = 4
    var rttIdlePeers = 8_000
    var rttPings = 5_000
    var relayPairs = 10
    var relayWindow = 32
    var phaseSeconds = 5.0
    var fanoutReceivers = 1_000
    var fanoutWindow = 16
    var joinPeers = 1_000
    var historyRows = 1_000_000
    var historyRequests = 2_000
    var chatBusyRooms = 10
    var chatManyRooms = 1_000
    var chatRate = 5_000.0
    /// The relay's paced rates in frames/s, one paced phase each in this order; empty: one phase at
    /// half the server's saturated rate (`--relay-rate`).
    var relayPacedRates: [Double] = []
    /// How many consecutive paced frames each side sends before the next side's turn
    /// (`--relay-run`); nil: the saturated phase's window, so both phases offer the same shape.
    var relayRun: Int?
    /// The keepalive scenario: idle peers held through three keep-alive rounds of this many seconds.
    var keepalivePeers = 19_000
    var keepalivePingSeconds = 10

    static let full = SuiteSizes()
    static let quick = SuiteSizes(idlePeers: 2_000, rttIdlePeers: 1_000, rttPings: 1_000, phaseSeconds: 1,
                                  fanoutReceivers: 200, historyRows: 100_000, historyRequests: 300, chatManyRooms: 1_000,
                                  chatRate: 2_000, keepalivePeers: 2_000, keepalivePingSeconds: 3)
    static let smoke = SuiteSizes(idlePeers: 20, rttIdlePeers: 10, rttPings: 50, relayPairs: 2, relayWindow: 8, phaseSeconds: 0.3,
                                  fanoutReceivers: 10, fanoutWindow: 4, joinPeers: 20, historyRows: 2_000, historyRequests: 20,
                                  chatBusyRooms: 2, chatManyRooms: 20, chatRate: 200, keepalivePeers: 20, keepalivePingSeconds: 1)
}

/// The scenarios of docs/benchmarks.md. Each runs its load against the server, then against the
/// baseline, each a fresh process; figures are the server's, the baseline's and their ratio.
final class Scenarios {
    let serverBinary: String
    let baselineBinary: String
    let targetCPU: Int?
    let sizes: SuiteSizes
    /// Where the relay writes each paced frame's receive time, latency and sending side
    /// (`--relay-trace DIR`), or nil.
    var relayTraceDirectory: String?
    /// Where the chat scenario writes each paced ack's receive time and latency (`--chat-trace DIR`), or nil.
    var chatTraceDirectory: String?
    /// Set: the targets run under callgrind, and the relay reports instructions per relayed frame
    /// instead of rates and latencies (`--instructions true`; only the relay supports it).
    var callgrind: Callgrind?

    init(serverBinary: String, baselineBinary: String, targetCPU: Int?, sizes: SuiteSizes) {
        self.serverBinary = serverBinary
        self.baselineBinary = baselineBinary
        self.targetCPU = targetCPU
        self.sizes = sizes
    }

    static let names = ["idle", "rtt", "relay", "fanout", "chat", "chat-postgres", "join", "history", "keepalive", "rest-cluster"]
    /// What `calling-bench suite` runs when no scenario is named: all but `keepalive`, which holds
    /// its peers through three keep-alive rounds (a minute or more at full size), and
    /// `rest-cluster`, which compares cluster sizes rather than the server with the baseline; they
    /// run when named.
    static let defaultNames = names.filter { $0 != "keepalive" && $0 != "rest-cluster" }

    func run(_ name: String) -> ScenarioResult {
        var result = ScenarioResult(name: name, parameters: "")
        result.loadBefore = Machine.load()
        let ticks = Machine.cpuTicks()
        do {
            switch name {
            case "idle": try idle(&result)
            case "rtt": try rtt(&result)
            case "relay": try relay(&result)
            case "fanout": try fanout(&result)
            case "chat": try chat(&result)
            case "chat-postgres": try chatPostgres(&result)
            case "join": try join(&result)
            case "history": try history(&result)
            case "keepalive": try keepalive(&result)
            case "rest-cluster": try restCluster(&result)
            default: result.error = "unknown scenario"
            }
        } catch {
            result.error = "\(error)"
        }
        Progress.finishLine()
        result.loadAfter = Machine.load()
        result.stolen = Machine.stolenShares(from: ticks, to: Machine.cpuTicks())
        return result
    }

    // MARK: helpers

    private func start(_ kind: TargetProcess.Kind, pageBytes: Int = 4096, dataDir: String? = nil,
                       serverFlags: [String] = [], baselineFlags: [String] = []) throws -> TargetProcess {
        switch kind {
        case .server: return try TargetProcess.server(binary: serverBinary, cpu: targetCPU, dataDir: dataDir, flags: serverFlags,
                                                      callgrind: callgrind)
        case .baseline: return try TargetProcess.baseline(binary: baselineBinary, cpu: targetCPU, pageBytes: pageBytes,
                                                          flags: baselineFlags, callgrind: callgrind)
        }
    }

    /// Runs `body` against a fresh target of each kind; stops and cleans up whatever happens.
    private func both(serverFlags: () throws -> [String] = { [] }, baselineFlags: [String] = [],
                      _ body: (TargetProcess) throws -> Void) throws {
        for kind in [TargetProcess.Kind.server, .baseline] {
            let target = try start(kind, serverFlags: kind == .server ? try serverFlags() : [],
                                   baselineFlags: kind == .baseline ? baselineFlags : [])
            defer {
                target.stop()
                target.removeData()
            }
            try body(target)
        }
    }

    private static let welcomeSuffix = Array(#""type":"welcome"}"#.utf8)
    private static let peerIDKey = Array(#""peer_id":""#.utf8)

    /// True for the connection's own welcome (the first `peer_id` of a welcome is the joiner's;
    /// the list of other peers comes after it in sorted-key order). Throws on someone else's.
    private static func isWelcome(_ connection: LoadEngine.Connection, _ text: UnsafeRawBufferPointer) throws -> Bool {
        guard !connection.welcomed, Bytes.hasSuffix(text, welcomeSuffix) else { return false }
        let own = Array((connection.name + "\"").utf8)
        guard let at = Bytes.find(peerIDKey, in: text), text.count >= at + peerIDKey.count + own.count,
              zip(text[(at + peerIDKey.count)...], own).allSatisfy({ $0 == $1 }) else {
            throw LoadEngine.Failure.verification("\(connection.name) got a welcome not naming it: \(Bytes.string(text))")
        }
        connection.welcomed = true
        return true
    }

    /// Queues `count` peers named `prefix0…` in rooms of `roomSize` and runs until every one has
    /// its welcome. Returns the seconds from the first connect to the last welcome.
    @discardableResult
    private func join(_ engine: LoadEngine, _ target: TargetProcess, count: Int, roomSize: Int, prefix: String,
                      timeout: Double = 120) throws -> Double {
        let first = engine.connections.count
        for index in 0..<count {
            let room = "\(prefix)r\(index / roomSize)"
            let peer = "\(prefix)\(index)"
            engine.connect(name: peer, path: try target.path(room: room, peer: peer), group: index / roomSize)
        }
        let started = LoadEngine.now()
        var welcomed = 0
        let previous = engine.onText
        engine.onText = { connection, text, time in
            if try Self.isWelcome(connection, text) { welcomed += 1 } else { try previous(connection, text, time) }
        }
        defer { engine.onText = previous }
        Progress.detail = { "\(welcomed)/\(count) joined" }
        try engine.run(seconds: timeout, "\(target.kind.rawValue): joining") { welcomed == count }
        let all = engine.connections[first...]
        guard all.count == count, all.allSatisfy(\.welcomed) else {
            throw LoadEngine.Failure.verification("\(welcomed) welcomes for \(count) peers")
        }
        return Double(LoadEngine.now() - started) / 1e9
    }

    /// Runs the engine for `seconds` so late frames (peer-joined storms, settling RSS) arrive.
    private func settle(_ engine: LoadEngine, seconds: Double) throws {
        let end = LoadEngine.now() + UInt64(seconds * 1e9)
        while LoadEngine.now() < end { try engine.step(timeoutNanoseconds: 20_000_000) }
    }

    private func share(_ generator: Double, _ target: Double) -> Double { target > 0 ? generator / target : .nan }

    // MARK: idle

    private func idle(_ result: inout ScenarioResult) throws {
        let peers = sizes.idlePeers
        result.parameters = "\(peers) joined peers, rooms of \(sizes.roomSize)"
        var perPeer: [TargetProcess.Kind: Double] = [:]
        var joinSeconds: [TargetProcess.Kind: Double] = [:]
        try both { target in
            let engine = try LoadEngine(port: target.port)
            try settle(engine, seconds: 0.5)
            let before = target.rssKiB()
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            joinSeconds[target.kind] = try join(engine, target, count: peers, roomSize: sizes.roomSize, prefix: "i")
            result.generatorShare[target.kind.rawValue] = share(Machine.ownCPUSeconds() - cpu0.0, target.cpuSeconds() - cpu0.1)
            try settle(engine, seconds: 1)
            let after = target.rssKiB()
            guard engine.connections.allSatisfy(\.isOpen) else { throw LoadEngine.Failure.verification("a peer was closed while idle") }
            perPeer[target.kind] = Double(after - before) / Double(peers)
            result.verified["\(target.kind.rawValue) welcomes"] = engine.connections.filter(\.welcomed).count
            result.notes.append("\(target.kind.rawValue) VmRSS \(before) KiB before, \(after) KiB after")
            engine.closeAll()
        }
        result.figures.append(Figure(name: "RSS per idle joined peer", unit: "KiB", server: perPeer[.server] ?? .nan,
                                     baseline: perPeer[.baseline], higherIsBetter: false))
        result.figures.append(Figure(name: "time to join all", unit: "s", server: joinSeconds[.server] ?? .nan,
                                     baseline: joinSeconds[.baseline], higherIsBetter: false))
    }

    // MARK: keepalive

    /// N idle peers held through three keep-alive rounds (`idle_ping_seconds` short, so the rounds
    /// come soon): what a round costs the service thread, and whether the rest of the server waits
    /// for it. Probed throughout: `GET /healthz` (the baseline: `/page`) on a fresh connection from
    /// another thread every 100 ms, and an app-level `ping` from one more peer every 100 ms.
    /// The baseline runs lws's own keep-alive (its retry and idle policy, `--idle-ping`).
    private func keepalive(_ result: inout ScenarioResult) throws {
        let peers = sizes.keepalivePeers
        let pingSeconds = sizes.keepalivePingSeconds
        let hangupSeconds = 2 * pingSeconds + 5
        let rounds = 3
        result.parameters = "\(peers) idle joined peers, rooms of \(sizes.roomSize), idle_ping_seconds \(pingSeconds), " +
            "idle_hangup_seconds \(hangupSeconds), held until each has answered \(rounds) PINGs"
        var cpuPerPeerRound: [TargetProcess.Kind: Double] = [:]
        var probeP99: [TargetProcess.Kind: Double] = [:]
        var peerP99: [TargetProcess.Kind: Double] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        let serverFlags = ["--idle_ping_seconds", "\(pingSeconds)", "--idle_hangup_seconds", "\(hangupSeconds)"]
        let baselineFlags = ["--idle-ping", "\(pingSeconds)", "--idle-hangup", "\(hangupSeconds)"]
        // The figures of a target that finished are kept when the other fails: at 19,000 peers the
        // baseline's own keep-alive can stall its joins past the generator's timeout.
        defer {
            result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
            if let server = cpuPerPeerRound[.server] {
                result.figures.append(Figure(name: "CPU per peer per round", unit: "µs", server: server,
                                             baseline: cpuPerPeerRound[.baseline], higherIsBetter: false))
                result.figures.append(Figure(name: "HTTP probe p99 during rounds", unit: "µs", server: probeP99[.server] ?? .nan,
                                             baseline: probeP99[.baseline], higherIsBetter: false))
                result.figures.append(Figure(name: "probe peer ping p99 during rounds", unit: "µs", server: peerP99[.server] ?? .nan,
                                             baseline: peerP99[.baseline], higherIsBetter: false))
            }
        }
        try both(serverFlags: { serverFlags }, baselineFlags: baselineFlags) { target in
            let engine = try LoadEngine(port: target.port)
            try join(engine, target, count: peers, roomSize: sizes.roomSize, prefix: "k")
            try join(engine, target, count: 1, roomSize: 1, prefix: "probe")
            let prober = engine.connections.last!
            let idle = engine.connections.dropLast()
            try settle(engine, seconds: 0.3)
            let pingsBefore = idle.map(\.pingsReceived)
            var frame = Self.pingTemplate
            let offset = Self.pingTemplate.count - 13
            var latencies: [Double] = []
            var sentAt: UInt64 = 0
            var outstanding = false
            engine.onText = { connection, text, time in
                guard connection === prober, let counter = Bytes.counter(after: Self.counterKey, in: text) else { return }
                guard counter == connection.expected else {
                    throw LoadEngine.Failure.verification("probe pong \(counter), expected \(connection.expected)")
                }
                connection.expected += 1
                outstanding = false
                latencies.append(Double(time - sentAt) / 1e3)
            }
            let http = HTTPProbe(port: target.port, path: target.kind == .server ? "/healthz" : "/page")
            http.start()
            defer { http.stop() }
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            let started = LoadEngine.now()
            let deadline = started + UInt64(Double(rounds * pingSeconds + hangupSeconds + 30) * 1e9)
            var nextPing = started
            var nextCheck = started
            var sent = 0
            var done = false
            Progress.detail = { "\(sent) probe pings" }
            while !done {
                let now = LoadEngine.now()
                guard now < deadline else {
                    let behind = zip(idle, pingsBefore).filter { $0.0.pingsReceived - $0.1 < rounds }.count
                    throw LoadEngine.Failure.timedOut("\(behind) of \(peers) peers had fewer than \(rounds) PINGs")
                }
                if !outstanding, now >= nextPing {
                    sent += 1
                    Bytes.patch(sent, into: &frame, at: offset)
                    sentAt = now
                    outstanding = true
                    engine.send(prober, frame)
                    nextPing = now + 100_000_000
                }
                _ = try engine.step(timeoutNanoseconds: 5_000_000)
                if now >= nextCheck {
                    nextCheck = now + 250_000_000
                    done = zip(idle, pingsBefore).allSatisfy { $0.0.pingsReceived - $0.1 >= rounds }
                }
            }
            let elapsed = Double(LoadEngine.now() - started) / 1e9
            let targetCPU = target.cpuSeconds() - cpu0.1
            gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0, targetCPU)
            http.stop()
            guard engine.connections.allSatisfy(\.isOpen) else { throw LoadEngine.Failure.verification("a peer was dropped") }
            let pings = zip(idle, pingsBefore).reduce(0) { $0 + $1.0.pingsReceived - $1.1 }
            cpuPerPeerRound[target.kind] = targetCPU / Double(pings) * 1e6
            let probes = http.latencies.sorted()
            probeP99[target.kind] = Stats.percentile(probes, 0.99)
            peerP99[target.kind] = Stats.percentile(latencies.sorted(), 0.99)
            result.verified["\(target.kind.rawValue) PINGs answered"] = pings
            result.verified["\(target.kind.rawValue) probe pongs in order"] = latencies.count
            result.notes.append(String(
                format: "%@: %.1f s for %d rounds, %.2f s CPU (%.0f %% of a core), %d HTTP probes (max %.0f ms, %d unanswered in 5 s), %d probe pings (max %.0f ms)",
                target.kind.rawValue, elapsed, rounds, targetCPU, targetCPU / elapsed * 100, probes.count + http.failures,
                (probes.last ?? .nan) / 1e3, http.failures, latencies.count, (latencies.max() ?? .nan) / 1e3))
            engine.closeAll()
        }
    }

    // MARK: join

    private func join(_ result: inout ScenarioResult) throws {
        let peers = sizes.joinPeers
        result.parameters = "\(peers) peers connect at once (≤ 512 upgrades in flight), rooms of 2"
        var seconds: [TargetProcess.Kind: Double] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        try both { target in
            let engine = try LoadEngine(port: target.port)
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            let elapsed = try join(engine, target, count: peers, roomSize: 2, prefix: "j")
            seconds[target.kind] = elapsed
            let targetCPU = target.cpuSeconds() - cpu0.1
            gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0, targetCPU)
            // Whether the target spent the phase computing or waiting: its CPU (all threads, kernel
            // included, in clock ticks) per join, and as a share of the phase's wall clock.
            result.notes.append(String(format: "%@: %.0f µs CPU per join, %.0f %% of the phase", target.kind.rawValue,
                                       targetCPU / Double(peers) * 1e6, targetCPU / elapsed * 100))
            result.verified["\(target.kind.rawValue) welcomes"] = engine.connections.filter(\.welcomed).count
            engine.closeAll()
        }
        result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
        func rate(_ kind: TargetProcess.Kind) -> Double? { seconds[kind].map { Double(peers) / $0 } }
        result.figures.append(Figure(name: "joins per second", unit: "joins/s", server: rate(.server) ?? .nan,
                                     baseline: rate(.baseline), higherIsBetter: true))
        result.figures.append(Figure(name: "time to all joined", unit: "s", server: seconds[.server] ?? .nan,
                                     baseline: seconds[.baseline], higherIsBetter: false))
    }

    // MARK: rtt

    private static let pingTemplate = Array(#"{"type":"ping","payload":{"n":"0000000000"}}"#.utf8)
    private static let counterKey = Array(#""n":""#.utf8)

    private func rtt(_ result: inout ScenarioResult) throws {
        let idlePeers = sizes.rttIdlePeers
        result.parameters = "\(sizes.rttPings) sequential pings with \(idlePeers) idle peers open"
        var p50: [TargetProcess.Kind: Double] = [:]
        var p99: [TargetProcess.Kind: Double] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        try both { target in
            let engine = try LoadEngine(port: target.port)
            try join(engine, target, count: idlePeers, roomSize: sizes.roomSize, prefix: "i")
            try join(engine, target, count: 1, roomSize: 1, prefix: "pinger")
            let pinger = engine.connections.last!
            try settle(engine, seconds: 0.3)
            var frame = Self.pingTemplate
            let offset = Self.pingTemplate.count - 13
            var latencies: [Double] = []
            latencies.reserveCapacity(sizes.rttPings)
            var sentAt: UInt64 = 0
            var answered = 0
            engine.onText = { connection, text, time in
                guard connection === pinger else { return }
                guard let counter = Bytes.counter(after: Self.counterKey, in: text) else { return }
                guard counter == connection.expected else {
                    throw LoadEngine.Failure.verification("pong \(counter), expected \(connection.expected)")
                }
                connection.expected += 1
                answered += 1
                latencies.append(Double(time - sentAt) / 1e3)
            }
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            let deadline = LoadEngine.now() + UInt64(max(10, sizes.phaseSeconds * 4) * 1e9)
            for index in 1...sizes.rttPings {
                Bytes.patch(index, into: &frame, at: offset)
                sentAt = LoadEngine.now()
                engine.send(pinger, frame)
                while answered < index {
                    guard LoadEngine.now() < deadline else { throw LoadEngine.Failure.timedOut("pong \(index)") }
                    try engine.step(timeoutNanoseconds: 100_000_000)
                }
                Progress.detail = { "\(answered)/\(self.sizes.rttPings) pongs" }
                Progress.tick("\(target.kind.rawValue): pinging")
            }
            gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0, target.cpuSeconds() - cpu0.1)
            guard engine.connections.allSatisfy(\.isOpen) else { throw LoadEngine.Failure.verification("a peer was closed") }
            latencies.sort()
            p50[target.kind] = Stats.percentile(latencies, 0.5)
            p99[target.kind] = Stats.percentile(latencies, 0.99)
            result.verified["\(target.kind.rawValue) pongs in order"] = answered
            engine.closeAll()
        }
        result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
        result.figures.append(Figure(name: "round trip p50", unit: "µs", server: p50[.server] ?? .nan, baseline: p50[.baseline], higherIsBetter: false))
        result.figures.append(Figure(name: "round trip p99", unit: "µs", server: p99[.server] ?? .nan, baseline: p99[.baseline], higherIsBetter: false))
    }

    // MARK: relay and fan-out

    private static let candidateMarker = Array("candidate:".utf8)

    private static func candidateFrame(to peer: String) -> (bytes: [UInt8], offset: Int) {
        let head = #"{"type":"candidate","to":""# + peer + #"","payload":{"candidate":"candidate:"#
        let text = head + #"0000000000 1 udp 2122260223 192.0.2.1 54400 typ host","sdpMid":"0","sdpMLineIndex":0}}"#
        return (Array(text.utf8), head.utf8.count)
    }

    private func relay(_ result: inout ScenarioResult) throws {
        let pairs = sizes.relayPairs
        let seconds = sizes.phaseSeconds
        // In the latency figures' names too, which `--rounds` matches by name: the rate itself,
        // which half the server's rate makes differ by run, goes into a note.
        let givenRates = sizes.relayPacedRates
        let rateLabels = givenRates.isEmpty ? ["half the server's rate"] : givenRates.map { "\(Int($0)) frames/s" }
        let run = sizes.relayRun ?? sizes.relayWindow
        result.parameters = "\(pairs) pairs, candidate frames both ways, window \(sizes.relayWindow), \(seconds) s saturated, "
            + (callgrind != nil ? "each target under callgrind (--instructions)"
                : "\(seconds) s paced at " + (rateLabels.count > 1 ? "each of " : "") + rateLabels.joined(separator: ", ")
                    + (givenRates.isEmpty ? "" : " (--relay-rate)")
                    + (run == 1 ? ", one frame per side in turn" : ", in runs of \(run) frames per side")
                    + (sizes.relayRun == nil ? " (the window)" : " (--relay-run)"))
        var instructions: [TargetProcess.Kind: Double] = [:]
        var saturated: [TargetProcess.Kind: Double] = [:]
        // Per target, each paced phase's latencies (sorted), in `pacedRates`' order.
        var paced: [TargetProcess.Kind: [[Double]]] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        var pacedRates: [Double] = givenRates
        try both { target in
            let engine = try LoadEngine(port: target.port)
            engine.stampsReceives = true
            for pair in 0..<pairs {
                let room = "relay\(pair)"
                for side in ["a", "b"] {
                    let peer = "\(side)\(pair)"
                    engine.connect(name: peer, path: try target.path(room: room, peer: peer), group: pair)
                }
            }
            var welcomed = 0
            engine.onText = { connection, text, _ in if try Self.isWelcome(connection, text) { welcomed += 1 } }
            try engine.run(seconds: 60, "\(target.kind.rawValue): joining pairs") { welcomed == 2 * pairs }
            try settle(engine, seconds: 0.2)
            let connections = engine.connections
            let book = RelayBook(frames: connections.map { Self.candidateFrame(to: connections[$0.index ^ 1].name) })
            let ringSize = RelayBook.ringSize
            func send(_ sender: LoadEngine.Connection, at time: UInt64) throws {
                sender.sent += 1
                let slot = sender.index * ringSize + (sender.sent & (ringSize - 1))
                guard book.sentAt[slot] == 0 else {
                    // Say whether the partner is just far behind or one frame never came.
                    let partner = connections[sender.index ^ 1]
                    throw LoadEngine.Failure.verification("more than \(ringSize) frames in flight from \(sender.name): frame \(sender.sent - ringSize) sent \(Int(Double(LoadEngine.now() &- book.sentAt[slot]) / 1e6)) ms ago, \(partner.name) expects \(partner.expected), \(sender.inFlight) in flight")
                }
                book.sentAt[slot] = time
                sender.inFlight += 1
                Bytes.patch(sender.sent, into: &book.frames[sender.index].bytes, at: book.frames[sender.index].offset)
                book.frames[sender.index].bytes.withUnsafeBytes { engine.send(sender, $0) }
            }
            engine.onText = { [unowned engine] receiver, text, time in
                guard let counter = Bytes.counter(after: Self.candidateMarker, in: text) else { return }
                guard counter == receiver.expected else {
                    throw LoadEngine.Failure.verification("\(receiver.name) got candidate \(counter), expected \(receiver.expected)")
                }
                receiver.expected += 1
                receiver.received += 1
                let sender = connections[receiver.index ^ 1]
                let slot = sender.index * ringSize + (counter & (ringSize - 1))
                book.latencies.append(Double(time &- book.sentAt[slot]) / 1e3)
                let kernel = engine.kernelReceiveTime
                book.queueWaits.append(kernel > 0 && kernel < time ? Double(time - kernel) / 1e3 : 0)
                if book.tracing {
                    book.receivedAt.append(time)
                    book.senders.append(sender.index)
                }
                book.sentAt[slot] = 0
                sender.inFlight -= 1
                book.delivered += 1
                if time < book.refill { try send(sender, at: LoadEngine.now()) }
            }
            // Saturated: each side keeps `window` frames in flight towards its partner.
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            var phase = GeneratorCost.Snapshot(engine, target, delivered: book.delivered)
            // The joins' and upgrades' instructions are not the frames': the count starts here.
            if let callgrind { try callgrind.zero(pid: target.pid) }
            let start = LoadEngine.now()
            book.refill = start + UInt64(seconds * 1e9)
            for connection in connections { for _ in 0..<sizes.relayWindow { try send(connection, at: start) } }
            Progress.detail = { "\(book.delivered) relayed" }
            try engine.run(seconds: seconds + 30, "\(target.kind.rawValue): saturating") {
                LoadEngine.now() >= book.refill && connections.allSatisfy { $0.inFlight == 0 }
            }
            func verifyInOrder() throws {
                let inOrder = connections.reduce(0) { $0 + $1.received }
                guard inOrder == book.delivered, connections.allSatisfy({ $0.expected == connections[$0.index ^ 1].sent + 1 }) else {
                    throw LoadEngine.Failure.verification("relayed \(inOrder) of \(book.delivered); some frame was lost")
                }
                result.verified["\(target.kind.rawValue) frames relayed in order"] = book.delivered
            }
            if let callgrind, let file = target.callgrindFile {
                // Under callgrind a rate is valgrind's, not the machine's: the count is the figure,
                // taken now that every frame in flight has come back and the target is idle.
                let (count, counts) = try callgrind.dumpedInstructions(pid: target.pid, file: file)
                try verifyInOrder()
                engine.closeAll()
                target.stop()
                try? FileManager.default.removeItem(atPath: file)
                guard book.delivered > 0 else { throw LoadEngine.Failure.verification("no frame relayed") }
                instructions[target.kind] = Double(count) / Double(book.delivered)
                result.notes.append("\(target.kind.rawValue): \(count) instructions in \(Callgrind.collectedFunction) over \(book.delivered) frames relayed"
                                    + " (by function and line: callgrind_annotate \(counts))")
                return
            }
            let elapsed = Double(LoadEngine.now() - start) / 1e9
            let rate = Double(book.delivered) / elapsed
            saturated[target.kind] = rate
            if target.kind == .server, givenRates.isEmpty { pacedRates = [rate / 2] }
            let afterSaturated = GeneratorCost.Snapshot(engine, target, delivered: book.delivered)
            result.notes.append("\(target.kind.rawValue) saturated: " + GeneratorCost(from: phase, to: afterSaturated).text)
            // The generator's CPU spent sorting and writing out each paced phase, kept out of its share.
            var betweenPhases = 0.0
            // Paced: half the server's saturated rate (or each rate given), in runs per side
            // (`PacedSchedule`), timed from when each frame was due (a late generator must not hide
            // its own delay).
            for pacedRate in pacedRates {
                // With several rates each phase's notes and trace say which rate they are of.
                let label = "\(target.kind.rawValue) paced" + (pacedRates.count > 1 ? " at \(Int(pacedRate)) frames/s" : "")
                book.latencies.removeAll(keepingCapacity: true)
                book.receivedAt.removeAll(keepingCapacity: true)
                book.senders.removeAll(keepingCapacity: true)
                book.queueWaits.removeAll(keepingCapacity: true)
                let pacedDelivered = book.delivered
                // Taken here, not when the last phase ended: sorting its latencies is the generator's
                // own time between phases, not this phase's.
                phase = GeneratorCost.Snapshot(engine, target, delivered: book.delivered)
                let total = max(1, Int(pacedRate * seconds))
                book.tracing = relayTraceDirectory != nil
                let pacedStart = LoadEngine.now()
                let schedule = PacedSchedule(start: pacedStart, rate: pacedRate, sides: connections.count, run: run)
                var next = 0
                // How late the generator queued each frame (its own delay, counted in the latency).
                var lateness: [Double] = []
                lateness.reserveCapacity(total)
                book.latencies.reserveCapacity(total)
                book.queueWaits.reserveCapacity(total)
                Progress.detail = { "\(book.delivered - pacedDelivered)/\(total) relayed at \(Int(pacedRate))/s" }
                while next < total || connections.contains(where: { $0.inFlight > 0 }) {
                    let now = LoadEngine.now()
                    guard now < pacedStart + UInt64((seconds + 30) * 1e9) else { throw LoadEngine.Failure.timedOut("paced relay") }
                    while next < total, schedule.due(next) <= now {
                        let due = schedule.due(next)
                        lateness.append(Double(now - due) / 1e3)
                        try send(connections[schedule.side(next)], at: due)
                        next += 1
                    }
                    let due = next < total ? schedule.due(next) : now + 50_000_000
                    try engine.step(timeoutNanoseconds: due > now ? due - now : 0)
                    Progress.tick("\(target.kind.rawValue): paced")
                }
                result.notes.append("\(label): " + GeneratorCost(from: phase, to: GeneratorCost.Snapshot(engine, target, delivered: book.delivered)).text)
                let figuring = Machine.ownCPUSeconds()
                lateness.sort()
                book.queueWaits.sort()
                result.notes.append("\(label): the generator queued frames late by p50 " + String(format: "%.1f µs, p99 %.1f µs", Stats.percentile(lateness, 0.5), Stats.percentile(lateness, 0.99)) + " after their due time (counted in the latency); delivered frames waited in its sockets before it read them p50 " + String(format: "%.1f µs, p99 %.1f µs", Stats.percentile(book.queueWaits, 0.5), Stats.percentile(book.queueWaits, 0.99)) + " (kernel receive stamps, SO_TIMESTAMPNS: the last segment of each read, so a lower bound; also counted)")
                if let directory = relayTraceDirectory {
                    let name = "relay-\(target.kind.rawValue)-paced" + (pacedRates.count > 1 ? "-\(Int(pacedRate))" : "") + ".csv"
                    try Self.writeTrace(book.latencies, receivedAt: book.receivedAt, senders: book.senders, since: pacedStart, to: "\(directory)/\(name)")
                }
                book.latencies.sort()
                paced[target.kind, default: []].append(book.latencies)
                betweenPhases += Machine.ownCPUSeconds() - figuring
            }
            gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0 - betweenPhases, target.cpuSeconds() - cpu0.1)
            try verifyInOrder()
            engine.closeAll()
        }
        if callgrind != nil {
            result.notes.append("user-space instructions in the event loop's callbacks (callgrind --toggle-collect=\(Callgrind.collectedFunction)) ÷ frames relayed; the kernel's share is not counted")
            result.figures.append(Figure(name: "instructions per relayed frame", unit: "instructions", server: instructions[.server] ?? .nan,
                                         baseline: instructions[.baseline], higherIsBetter: false))
            return
        }
        result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
        result.figures.append(Figure(name: "saturated relay rate", unit: "frames/s", server: saturated[.server] ?? .nan,
                                     baseline: saturated[.baseline], higherIsBetter: true))
        result.notes.append("paced at " + pacedRates.map { "\(Int($0))" }.joined(separator: ", ") + " frames/s"
                            + (givenRates.isEmpty ? ", half the server's saturated rate" : ""))
        for (index, rateLabel) in rateLabels.enumerated() {
            func percentile(_ kind: TargetProcess.Kind, _ p: Double) -> Double? {
                paced[kind].flatMap { index < $0.count ? Stats.percentile($0[index], p) : nil }
            }
            for (label, p) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
                result.figures.append(Figure(name: "latency \(label) at \(rateLabel)", unit: "µs", server: percentile(.server, p) ?? .nan,
                                             baseline: percentile(.baseline, p), higherIsBetter: false))
            }
        }
    }

    /// One line per paced frame in arrival order: receive time since the phase began and latency, both µs.
    /// The sending side's index (0-based, in join order: a0, b0, a1, …) shows the runs it was paced in.
    private static func writeTrace(_ latencies: [Double], receivedAt: [UInt64], senders: [Int], since start: UInt64, to path: String) throws {
        try writeCSV(header: "received_us,latency_us,sender", rows: latencies.indices.map { index in
            String(format: "%.1f,%.1f,%d", Double(receivedAt[index] &- start) / 1e3, latencies[index], senders[index])
        }, to: path)
    }

    /// One line per paced ack in arrival order: receive time since the phase began (µs) and latency (ms).
    private static func writeChatTrace(_ acks: [(received: UInt64, latency: Double)], to path: String) throws {
        try writeCSV(header: "received_us,latency_ms", rows: acks.map { String(format: "%.1f,%.3f", Double($0.received) / 1e3, $0.latency) }, to: path)
    }

    /// `header` and `rows`, one line each, into `path`, creating its folder.
    private static func writeCSV(header: String, rows: [String], to path: String) throws {
        let text = ([header] + rows).joined(separator: "\n") + "\n"
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    private static let dataTemplate = Array(#"{"type":"data","payload":{"n":"0000000000"}}"#.utf8)

    private func fanout(_ result: inout ScenarioResult) throws {
        let receivers = sizes.fanoutReceivers
        let seconds = sizes.phaseSeconds
        result.parameters = "1 sender, \(receivers) receivers in one room, data frames, window \(sizes.fanoutWindow) messages, \(seconds) s"
        var rates: [TargetProcess.Kind: Double] = [:]
        var completion: [TargetProcess.Kind: [Double]] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        try both { target in
            let engine = try LoadEngine(port: target.port)
            try join(engine, target, count: 1, roomSize: 1, prefix: "fan-sender")
            // Receivers join the sender's room ("fan-senderr0").
            let first = engine.connections.count
            for index in 0..<receivers {
                engine.connect(name: "f\(index)", path: try target.path(room: "fan-senderr0", peer: "f\(index)"), group: 0)
            }
            var welcomed = 0
            engine.onText = { connection, text, _ in if try Self.isWelcome(connection, text) { welcomed += 1 } }
            Progress.detail = { "\(welcomed)/\(receivers) joined" }
            try engine.run(seconds: 120, "\(target.kind.rawValue): joining receivers") { welcomed == receivers }
            try settle(engine, seconds: 0.5)  // the peer-joined storm
            let sender = engine.connections[0]
            let ringSize = 1 << 10
            var received = [Int](repeating: 0, count: ringSize)
            var sentAt = [UInt64](repeating: 0, count: ringSize)
            var frame = Self.dataTemplate
            let offset = Self.dataTemplate.count - 13
            var deliveries = 0
            var completed = 0
            var latencies: [Double] = []
            var refill: UInt64 = 0
            func send(at time: UInt64) {
                sender.sent += 1
                sender.inFlight += 1
                sentAt[sender.sent & (ringSize - 1)] = time
                Bytes.patch(sender.sent, into: &frame, at: offset)
                engine.send(sender, frame)
            }
            engine.onText = { receiver, text, time in
                guard receiver.index >= first, let counter = Bytes.counter(after: Self.counterKey, in: text) else { return }
                guard counter == receiver.expected else {
                    throw LoadEngine.Failure.verification("\(receiver.name) got message \(counter), expected \(receiver.expected)")
                }
                receiver.expected += 1
                deliveries += 1
                let slot = counter & (ringSize - 1)
                received[slot] += 1
                if received[slot] == receivers {
                    received[slot] = 0
                    completed += 1
                    sender.inFlight -= 1
                    latencies.append(Double(time - sentAt[slot]) / 1e3)
                    if time < refill { send(at: LoadEngine.now()) }
                }
            }
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            let start = LoadEngine.now()
            refill = start + UInt64(seconds * 1e9)
            for _ in 0..<sizes.fanoutWindow { send(at: start) }
            Progress.detail = { "\(deliveries) deliveries" }
            try engine.run(seconds: seconds + 30, "\(target.kind.rawValue): fanning out") { LoadEngine.now() >= refill && sender.inFlight == 0 }
            let elapsed = Double(LoadEngine.now() - start) / 1e9
            gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0, target.cpuSeconds() - cpu0.1)
            guard deliveries == completed * receivers, completed == sender.sent else {
                throw LoadEngine.Failure.verification("\(deliveries) deliveries for \(completed) of \(sender.sent) messages")
            }
            rates[target.kind] = Double(deliveries) / elapsed
            completion[target.kind] = latencies.sorted()
            result.verified["\(target.kind.rawValue) deliveries in order"] = deliveries
            engine.closeAll()
        }
        result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
        result.figures.append(Figure(name: "deliveries per second", unit: "frames/s", server: rates[.server] ?? .nan,
                                     baseline: rates[.baseline], higherIsBetter: true))
        result.figures.append(Figure(name: "send → last receiver p50", unit: "µs",
                                     server: completion[.server].map { Stats.percentile($0, 0.5) } ?? .nan,
                                     baseline: completion[.baseline].map { Stats.percentile($0, 0.5) }, higherIsBetter: false))
    }

    // MARK: chat

    /// `chat` with the server's chat history in PostgreSQL (`database_url`): a throwaway PostgreSQL 15
    /// (CallingTesting `TestPostgres`: initdb in a temporary folder, a free loopback port, default
    /// settings, so `fsync` and `synchronous_commit` on) and a fresh database for each run.
    private func chatPostgres(_ result: inout ScenarioResult) throws {
        let postgres = try TestPostgres()
        defer { postgres.stop() }
        try chat(&result, postgres: postgres)
        result.notes.append("chat history in PostgreSQL 15 on the same machine (unpinned, sharing the cores), over loopback TCP")
    }

    private func chat(_ result: inout ScenarioResult, postgres: TestPostgres? = nil) throws {
        let seconds = sizes.phaseSeconds
        result.parameters = "\(sizes.chatBusyRooms) busy rooms × 2 senders and \(sizes.chatManyRooms) rooms × 2, window 64, \(seconds) s each; ack latency at \(Int(sizes.chatRate))/s"
        for (label, rooms, rate) in [("busy rooms", sizes.chatBusyRooms, sizes.chatRate), ("\(sizes.chatManyRooms) rooms", sizes.chatManyRooms, 0)] {
            var reports: [TargetProcess.Kind: ChatBenchmark.Report] = [:]
            var gen: [TargetProcess.Kind: Double] = [:]
            var settled: [TargetProcess.Kind: Double] = [:]
            var late: [TargetProcess.Kind: [Double]] = [:]
            var cost: [TargetProcess.Kind: String] = [:]
            var databaseURL: String?
            let serverFlags = { () throws -> [String] in
                guard let postgres else { return [] }
                let url = try postgres.createDatabase()
                databaseURL = url
                return ["--database_url", url]
            }
            try both(serverFlags: serverFlags) { target in
                var peers: [(room: Int, path: String)] = []
                for room in 0..<rooms {
                    for index in 0..<2 { peers.append((room, try target.path(room: "bench-\(room)", peer: "bench-\(room)-\(index)"))) }
                }
                var options = ChatBenchmark.Options()
                options.window = 64
                options.seconds = seconds
                options.rate = rate > 0 ? rate : 1
                options.latencySeconds = rate > 0 ? seconds : 0
                let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
                Progress.detail = { "" }
                let load = try PipelinedLoad(peers: peers, port: target.port)
                load.tracesPacedAcks = chatTraceDirectory != nil && rate > 0
                let outcome = try load.run(options, progress: "\(target.kind.rawValue): \(label)", targetCPUSeconds: target.cpuSeconds)
                if let directory = chatTraceDirectory, rate > 0 {
                    try Self.writeChatTrace(outcome.pacedTrace, to: "\(directory)/\(result.name)-\(target.kind.rawValue)-paced.csv")
                }
                if rate > 0 {
                    settled[target.kind] = outcome.settledSeconds
                    late[target.kind] = outcome.pacedLateness
                }
                cost[target.kind] = [outcome.saturatedCPU.map { "saturated \($0.text)" },
                                     outcome.pacedCPU.map { "paced at \(Int(rate))/s \($0.text)" }]
                    .compactMap { $0 }.joined(separator: "; ")
                gen[target.kind] = share(Machine.ownCPUSeconds() - cpu0.0, target.cpuSeconds() - cpu0.1)
                if target.kind == .server, let databaseURL {
                    target.stop()
                    try ChatBenchmark.verifyStored(outcome.ackedPerRoom, postgresURL: databaseURL)
                    result.verified["server \(label) acked = stored rows"] = outcome.ackedPerRoom.reduce(0, +)
                } else if target.kind == .server, let dataDir = target.dataDir {
                    target.stop()
                    let store = try ChatStore.open(path: dataDir + "/calling.sqlite", options: .init(migrateOnOpen: false))
                    defer { store.close() }
                    try ChatBenchmark.verifyStored(outcome.ackedPerRoom, store: store)
                    result.verified["server \(label) acked = stored rows"] = outcome.ackedPerRoom.reduce(0, +)
                } else {
                    result.verified["\(target.kind.rawValue) \(label) acked with gap-free seqs"] = outcome.ackedPerRoom.reduce(0, +)
                }
                reports[target.kind] = outcome.report
            }
            for (kind, value) in gen { result.generatorShare["\(kind.rawValue) \(label)"] = value }
            if !settled.isEmpty {
                let waits = settled.sorted { $0.key.rawValue < $1.key.rawValue }
                    .map { "\($0.key.rawValue) " + String(format: "%.2f s", $0.value) }.joined(separator: ", ")
                result.notes.append("\(label): the paced phase began once the saturated one was over, every broadcast in and the target idle for 0.2 s (waited \(waits))")
            }
            for (kind, text) in cost.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where !text.isEmpty {
                result.notes.append("\(kind.rawValue) \(label): the target spent \(text) (its own process, all threads, from /proc)")
            }
            for (kind, values) in late.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where !values.isEmpty {
                result.notes.append("\(kind.rawValue) \(label) paced: the generator queued chats late by p50 "
                    + String(format: "%.3f ms, p99 %.3f ms, max %.3f ms", Stats.percentile(values, 0.5), Stats.percentile(values, 0.99), values.last ?? 0)
                    + " after their due time (counted in the ack latency)")
            }
            result.figures.append(Figure(name: "\(label): acked chats per second", unit: "msg/s",
                                         server: reports[.server]?.ackedPerSecond ?? .nan,
                                         baseline: reports[.baseline]?.ackedPerSecond, higherIsBetter: true))
            if rate > 0 {
                result.figures.append(Figure(name: "\(label): ack p50 at \(Int(rate))/s", unit: "ms", server: reports[.server]?.p50Ms ?? .nan,
                                             baseline: reports[.baseline]?.p50Ms, higherIsBetter: false))
                result.figures.append(Figure(name: "\(label): ack p99 at \(Int(rate))/s", unit: "ms", server: reports[.server]?.p99Ms ?? .nan,
                                             baseline: reports[.baseline]?.p99Ms, higherIsBetter: false))
            }
        }
        result.notes.append("the baseline acks from a counter (no \(postgres == nil ? "SQLite" : "PostgreSQL")): the ratio is what storing and committing costs")
    }

    // MARK: history

    private func history(_ result: inout ScenarioResult) throws {
        let rows = sizes.historyRows
        let requests = sizes.historyRequests
        result.parameters = "pages of 100 from a room of \(rows) stored rows, \(requests) sequential requests at random positions, one keep-alive connection"
        let dataDir = NSTemporaryDirectory() + "calling-bench-history-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let seedStart = Date()
        try Self.seedHistory(path: dataDir + "/calling.sqlite", rows: rows)
        result.notes.append(String(format: "seeded %d rows in %.1f s", rows, Date().timeIntervalSince(seedStart)))
        var p50: [TargetProcess.Kind: Double] = [:]
        var p99: [TargetProcess.Kind: Double] = [:]
        var gen: [TargetProcess.Kind: Double] = [:]
        var pageBytes = 4096
        for kind in [TargetProcess.Kind.server, .baseline] {
            let target = try start(kind, pageBytes: pageBytes, dataDir: kind == .server ? dataDir : nil)
            defer { target.stop() }
            let client = try HTTPClient(port: target.port)
            let token = try target.token(room: "history", peer: "reader")
            var latencies: [Double] = []
            var generator = SystemRandomNumberGenerator()
            let cpu0 = (Machine.ownCPUSeconds(), target.cpuSeconds())
            for index in 0..<requests {
                let since = Int.random(in: 0...(rows - 100), using: &generator)
                let path = kind == .server ? "/v1/rooms/history/messages?since_seq=\(since)&limit=100&token=\(token)" : "/page"
                let started = LoadEngine.now()
                let (status, body) = try client.get(path)
                latencies.append(Double(LoadEngine.now() - started) / 1e3)
                guard status == 200 else { throw LoadEngine.Failure.verification("\(kind.rawValue) answered \(status): \(String(decoding: body.prefix(200), as: UTF8.self))") }
                if kind == .server {
                    let expected = Array(#""next_since_seq":\#(since + 100),"#.utf8)
                    let first = Array(#""seq":\#(since + 1),"#.utf8)
                    guard body.withUnsafeBytes({ Bytes.find(expected, in: $0) != nil && Bytes.find(first, in: $0) != nil }) else {
                        throw LoadEngine.Failure.verification("page after \(since) does not hold seqs \(since + 1)…\(since + 100)")
                    }
                    pageBytes = body.count
                } else if body.count != pageBytes {
                    throw LoadEngine.Failure.verification("baseline page of \(body.count) bytes, expected \(pageBytes)")
                }
                if index % 50 == 0 {
                    Progress.detail = { "\(index)/\(requests) pages" }
                    Progress.tick("\(kind.rawValue): history")
                }
            }
            gen[kind] = share(Machine.ownCPUSeconds() - cpu0.0, target.cpuSeconds() - cpu0.1)
            latencies.sort()
            p50[kind] = Stats.percentile(latencies, 0.5)
            p99[kind] = Stats.percentile(latencies, 0.99)
            result.verified["\(kind.rawValue) pages checked"] = latencies.count
        }
        result.notes.append("the baseline serves a fixed body of the page's size (\(pageBytes) bytes) from memory")
        result.generatorShare = Dictionary(uniqueKeysWithValues: gen.map { ($0.key.rawValue, $0.value) })
        result.figures.append(Figure(name: "page of 100 p50", unit: "µs", server: p50[.server] ?? .nan, baseline: p50[.baseline], higherIsBetter: false))
        result.figures.append(Figure(name: "page of 100 p99", unit: "µs", server: p99[.server] ?? .nan, baseline: p99[.baseline], higherIsBetter: false))
    }

    /// Writes `rows` messages into room "history" with one INSERT … SELECT, through CallingStore
    /// (which applies the migrations), far faster than sending them as chats.
    static func seedHistory(path: String, rows: Int) throws {
        let store = try ChatStore.open(path: path)
        defer { store.close() }
        try store.sync { db in
            try db.transaction(.immediate) {
                try db.run("INSERT INTO rooms (room_id, last_seq, room_no) VALUES ('history', ?1, 1)", [.integer(Int64(rows))])
                try db.run("""
                    WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?1)
                    INSERT INTO chat_messages (room_no, seq, room_id, sender, client_id, text, meta, ts)
                    SELECT 1, n, 'history', 'peer-' || (n % 10), 'c' || n, 'history benchmark message number ' || n, NULL,
                           1796000000000 + n FROM s
                    """, [.integer(Int64(rows))])
            }
        }
    }
}

/// `GET path` on a fresh connection every 100 ms from a thread of its own, each answer's latency
/// recorded (µs); one not answered within 5 s counts as a failure.
final class HTTPProbe: @unchecked Sendable {
    // @unchecked: `thread` is set in `start`, before `stop` reads it; the thread is joined in `stop`.
    // The stop flag and the results are in `state`.
    private let port: Int
    private let path: String
    private struct State {
        var stopped = false
        var results: [Double] = []
        var failed = 0
    }

    private let state = Locked(State())
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    init(port: Int, path: String) {
        self.port = port
        self.path = path
    }

    func start() {
        let thread = Thread { [self] in
            while !state.withLock({ $0.stopped }) {
                let began = LoadEngine.now()
                let answered: Bool
                if let client = try? HTTPClient(port: port, timeoutSeconds: 5), let (status, _) = try? client.get(path) {
                    answered = status == 200
                } else {
                    answered = false
                }
                let latency = Double(LoadEngine.now() - began) / 1e3
                state.withLock { if answered { $0.results.append(latency) } else { $0.failed += 1 } }
                let rest = 100_000 - min(100_000, Int(latency))
                if rest > 0 { usleep(UInt32(rest)) }
            }
            finished.signal()
        }
        self.thread = thread
        thread.start()
    }

    /// Stops the thread and waits for its last probe (idempotent).
    func stop() {
        let started = thread != nil
        let wasRunning = state.withLock { state -> Bool in
            defer { state.stopped = true }
            return !state.stopped && started
        }
        if wasRunning { finished.wait() }
    }

    var latencies: [Double] { state.withLock { $0.results } }
    var failures: Int { state.withLock { $0.failed } }
}

/// A blocking HTTP/1.1 client on one keep-alive connection (bodies with content-length).
final class HTTPClient {
    private let fd: Int32
    private var buffer: [UInt8] = []

    init(port: Int, timeoutSeconds: Int = 10) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw LoadEngine.Failure.system("connect: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func get(_ path: String) throws -> (status: Int, body: [UInt8]) {
        try request(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
    }

    /// `method path` with `headers` (each `name: value`) and `body` (JSON when not empty).
    func send(_ method: String, _ path: String, headers: [String] = [], body: [UInt8] = []) throws -> (status: Int, body: [UInt8]) {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for header in headers { head += header + "\r\n" }
        if !body.isEmpty { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        return try request(Array((head + "\r\n").utf8) + body)
    }

    /// Writes `request` whole and reads one response (content-length bodies only).
    private func request(_ request: [UInt8]) throws -> (status: Int, body: [UInt8]) {
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw LoadEngine.Failure.system("send: \(String(cString: strerror(errno)))") }
            sent += n
        }
        let terminator = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            headEnd = buffer.withUnsafeBytes { Bytes.find(terminator, in: $0) }
            if headEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self).lowercased()
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        guard let lengthLine = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
              let length = Int(lengthLine.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) else {
            throw LoadEngine.Failure.system("response without content-length: \(head.prefix(300))")
        }
        let bodyStart = headEnd! + 4
        while buffer.count < bodyStart + length { try fill() }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return (status, body)
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { throw LoadEngine.Failure.system(n == 0 ? "the server closed the connection" : "recv: \(String(cString: strerror(errno)))") }
        buffer += chunk[0..<n]
    }
}

/// The relay's paced phase: frame `n` is due at `start + n / rate` and goes from side
/// `(n / run) % sides`, so each side sends `run` consecutive frames before the next side's turn.
///
/// The saturated phase's rate is that of sides that each keep a window of frames in flight, which
/// the kernel and both event loops move a batch per system call. Handed out one frame per side in
/// turn, the same rate is a different load: a batch for one side only forms once a frame is queued
/// for every side, so at a rate that needs batches to keep up each frame waits for `sides` times as
/// many others as it would in runs of its own side (docs/benchmarks.md, "The relay's pacing").
/// `run` 1 is that round-robin.
struct PacedSchedule {
    let start: UInt64
    /// Nanoseconds between consecutive frames' due times.
    let interval: Double
    let sides: Int
    let run: Int

    init(start: UInt64, rate: Double, sides: Int, run: Int) {
        precondition(rate > 0 && sides > 0 && run > 0)
        self.start = start
        interval = 1e9 / rate
        self.sides = sides
        self.run = run
    }

    func due(_ frame: Int) -> UInt64 { start + UInt64(Double(frame) * interval) }

    func side(_ frame: Int) -> Int { (frame / run) % sides }
}

/// The relay's per-frame bookkeeping in one object: the closures that share it reach its fields
/// without the run-time exclusivity check that every access to a captured `var` costs.
private final class RelayBook {
    static let ringSize = 1 << 13
    @exclusivity(unchecked) var frames: [(bytes: [UInt8], offset: Int)]
    /// When each frame in flight was sent (or due), `ringSize` slots per connection.
    @exclusivity(unchecked) var sentAt: [UInt64]
    @exclusivity(unchecked) var delivered = 0
    @exclusivity(unchecked) var latencies: [Double] = []
    /// How long each frame's bytes waited in the generator's socket before the read that found them.
    @exclusivity(unchecked) var queueWaits: [Double] = []
    @exclusivity(unchecked) var receivedAt: [UInt64] = []
    /// Set for the paced phases with `--relay-trace` only: the saturated phase's millions of frames
    /// are not traced.
    @exclusivity(unchecked) var tracing = false
    /// With a trace: which connection sent each delivered frame, in `receivedAt`'s order.
    @exclusivity(unchecked) var senders: [Int] = []
    /// Saturating while now < refill.
    @exclusivity(unchecked) var refill: UInt64 = 0

    init(frames: [(bytes: [UInt8], offset: Int)]) {
        self.frames = frames
        sentAt = [UInt64](repeating: 0, count: frames.count * Self.ringSize)
    }
}

/// What the generator spent on one phase of a scenario: its own CPU (the whole `calling-bench`
/// process, utime + stime), the target's, and the data-path system calls, per delivered frame.
struct GeneratorCost: Equatable {
    struct Snapshot: Equatable {
        var time: UInt64
        var generatorCPU: Double
        var targetCPU: Double
        var syscalls: LoadEngine.SyscallCounts
        var delivered: Int

        init(time: UInt64, generatorCPU: Double, targetCPU: Double, syscalls: LoadEngine.SyscallCounts, delivered: Int) {
            self.time = time
            self.generatorCPU = generatorCPU
            self.targetCPU = targetCPU
            self.syscalls = syscalls
            self.delivered = delivered
        }

        init(_ engine: LoadEngine, _ target: TargetProcess, delivered: Int) {
            self.init(time: LoadEngine.now(), generatorCPU: Machine.ownCPUSeconds(), targetCPU: target.cpuSeconds(),
                      syscalls: engine.syscalls, delivered: delivered)
        }
    }

    var frames: Int
    var seconds: Double
    /// CPU seconds per frame, in µs.
    var generatorMicroseconds: Double
    var targetMicroseconds: Double
    /// The generator's CPU seconds ÷ the phase's wall-clock seconds (1 is its whole core).
    var generatorBusy: Double
    /// The target's, likewise: at a paced rate, how far from idle "half the load" left it.
    var targetBusy: Double
    var sendsPerFrame: Double
    var receivesPerFrame: Double
    var waitsPerFrame: Double

    init(from start: Snapshot, to end: Snapshot) {
        frames = end.delivered - start.delivered
        seconds = Double(end.time &- start.time) / 1e9
        let perFrame = frames > 0 ? 1 / Double(frames) : .nan
        generatorMicroseconds = (end.generatorCPU - start.generatorCPU) * 1e6 * perFrame
        targetMicroseconds = (end.targetCPU - start.targetCPU) * 1e6 * perFrame
        generatorBusy = seconds > 0 ? (end.generatorCPU - start.generatorCPU) / seconds : .nan
        targetBusy = seconds > 0 ? (end.targetCPU - start.targetCPU) / seconds : .nan
        sendsPerFrame = Double(end.syscalls.sends - start.syscalls.sends) * perFrame
        receivesPerFrame = Double(end.syscalls.receives - start.syscalls.receives) * perFrame
        waitsPerFrame = Double(end.syscalls.waits - start.syscalls.waits) * perFrame
    }

    var text: String {
        String(format: "%d frames in %.2f s; CPU per frame: generator %.2f µs (%.0f %% of its core), target %.2f µs (%.0f %% of its core); per frame the generator made %.2f send, %.2f recv, %.2f epoll waits",
               frames, seconds, generatorMicroseconds, generatorBusy * 100, targetMicroseconds, targetBusy * 100, sendsPerFrame,
               receivesPerFrame, waitsPerFrame)
    }
}
