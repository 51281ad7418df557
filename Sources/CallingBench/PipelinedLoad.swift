import CallingProtocol
import Foundation

/// `bench chat`'s default load generator: every sender on one thread, plain nonblocking sockets.
///
/// Cheap on purpose, so that on two cores the server gets most of the machine: a chat frame is a
/// pre-masked template with its client_id digits patched in; all frames due on a connection go out
/// in one `send`; an ack is recognised and read by a byte scan instead of a JSON parse.
///
/// Honest on purpose, too: a chat counts only when its own `chat-ack` came back with a seq; the
/// acked seqs of a room must be distinct and gap-free (checked here) and match the stored rows
/// (checked afterwards against the database); every other member must receive each chat as a
/// broadcast; latency runs from the moment a frame is handed to `send` (in the paced phase, from
/// the moment it was due) to the read that returned its ack.
///
/// Not Sendable: created, run and dropped on the benchmark's load thread.
final class PipelinedLoad {
    struct Outcome: Sendable {
        var report: ChatBenchmark.Report
        var ackedPerRoom: [Int]
        /// How long the paced phase waited for the saturated one to be over (`settle`).
        var settledSeconds: Double
        /// How late (ms) the generator queued each paced chat after its due time, sorted: a chat is
        /// timed from when it was due, so this much of its latency is the generator's own.
        var pacedLateness: [Double]
        /// The target's CPU in each phase, when `run` was given its CPU time: what a chat costs it,
        /// and how much of its core the phase left idle (at a paced rate, the headroom that decides
        /// how long a chat queues behind others).
        var saturatedCPU: TargetCPU?
        var pacedCPU: TargetCPU?
        /// Each paced ack in arrival order, when `tracesPacedAcks`: its receive time since the paced
        /// phase began (ns) and its latency (ms).
        var pacedTrace: [(received: UInt64, latency: Double)] = []
    }

    /// The target's CPU seconds over a phase of `seconds` in which `chats` were acked.
    struct TargetCPU: Sendable {
        var cpuSeconds: Double
        var seconds: Double
        var chats: Int

        /// CPU per acked chat, µs.
        var microsecondsPerChat: Double { chats > 0 ? cpuSeconds * 1e6 / Double(chats) : .nan }
        /// CPU seconds ÷ wall-clock seconds: 1 is one whole core.
        var busy: Double { seconds > 0 ? cpuSeconds / seconds : .nan }

        var text: String {
            String(format: "%.1f µs CPU per acked chat, %.0f %% of a core", microsecondsPerChat, busy * 100)
        }
    }

    /// `{"type":"chat","payload":{"client_id":"m0000000000","text":"benchmark message"}}`; the ten
    /// digits are the sender's counter, so each client_id is unique per sender.
    private static let payload = Array(#"{"type":"chat","payload":{"client_id":"m0000000000","text":"benchmark message"}}"#.utf8)
    private static let digitsAt = Array(#"{"type":"chat","payload":{"client_id":"m"#.utf8).count
    private static let digitCount = 10
    /// Server frames have sorted keys, so a successful ack starts with the payload and ends with its type.
    private static let ackPrefix = Array(#"{"payload":{"client_id":"m"#.utf8)
    private static let ackSeq = Array(#"","seq":"#.utf8)
    private static let ackSuffix = Array(#","type":"chat-ack"}"#.utf8)
    private static let chatSuffix = Array(#","type":"chat"}"#.utf8)
    private static let welcomeSuffix = Array(#","type":"welcome"}"#.utf8)
    private static let errorSuffix = Array(#","type":"error"}"#.utf8)
    /// Chats one connection may have in flight (the send-time ring's size). Small enough for
    /// thousands of connections (8 bytes a slot), well above the window and the paced backlog.
    private static let ringSize = 1 << 12

    private final class Connection {
        let socket: RawClientSocket
        let room: Int
        let mask: [UInt8]
        /// Header + masked payload of a chat, digits still zero.
        let template: [UInt8]
        let headerCount: Int
        let index: Int
        var out: [UInt8] = []
        var outStart = 0
        var wantsWrite = false
        var pending = false
        var inBuffer: [UInt8] = []
        var nextCounter = 1
        /// Send time (uptime ns) by counter modulo the ring size; 0 when that slot is not in flight.
        var sentAt = [UInt64](repeating: 0, count: PipelinedLoad.ringSize)
        var inFlight = 0
        var lastSeq = 0
        var acked = 0
        var broadcasts = 0
        var welcomed = false

        init(socket: RawClientSocket, room: Int, index: Int) {
            self.socket = socket
            self.room = room
            self.index = index
            let mask = (0..<4).map { _ in UInt8.random(in: 1...255) }
            var header: [UInt8] = []
            WebSocketFraming.appendHeader(.text, length: PipelinedLoad.payload.count, mask: (mask[0], mask[1], mask[2], mask[3]),
                                          to: &header)
            self.mask = mask
            headerCount = header.count
            template = header + PipelinedLoad.payload.enumerated().map { $1 ^ mask[$0 & 3] }
            inBuffer = socket.leftover
        }
    }

    private let connections: [Connection]
    private let rooms: Int
    /// Per room, which seqs have been acked: each must be acked once, and none skipped.
    private var seenSeqs: [[Bool]]
    private var latencies: [Double] = []
    /// Set before `run`: keep each paced ack's receive time beside its latency (`Outcome.pacedTrace`).
    var tracesPacedAcks = false
    /// Beside `latencies`, when `tracesPacedAcks`: each ack's receive time.
    private var receivedAt: [UInt64] = []
    /// Indices of the connections the last wait found readable.
    private var readable: [Int] = []
    /// Connections with queued output not yet handed to `send`.
    private var dirty: [Int] = []
    private let poller: Poller
    private var scratch = [UInt8](repeating: 0, count: 1 << 16)
    private var progress = ""

    /// `peers`: each sender's room index and WebSocket path (a token URL for the server,
    /// /g/room/peer for the lws baseline, whose acks have the same shape).
    init(peers: [(room: Int, path: String)], port: Int) throws {
        poller = try Poller()
        connections = try peers.enumerated().map { index, entry in
            Connection(socket: try RawClientSocket(ipv4: "127.0.0.1", port: port, path: entry.path), room: entry.room, index: index)
        }
        for connection in connections { try poller.add(connection.socket.fd, token: connection.index, writable: false) }
        rooms = (peers.map(\.room).max() ?? -1) + 1
        seenSeqs = Array(repeating: [false], count: rooms)
    }

    convenience init(tokens: [(room: Int, token: String)], port: Int) throws {
        try self.init(peers: tokens.map { ($0.room, "/v1/ws?token=\($0.token)") }, port: port)
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// `targetCPUSeconds`: the target's CPU time so far (all its threads), when it is its own
    /// process; the paced phase then starts only once the target is idle (`settle`).
    func run(_ options: ChatBenchmark.Options, progress: String = "", targetCPUSeconds: (() -> Double)? = nil) throws -> Outcome {
        self.progress = progress
        // The welcome may have come in with the 101.
        for connection in connections { _ = try scan(connection, at: Self.now()) }
        try waitUntil(deadline: Self.now() + 10_000_000_000, "welcome") { connections.allSatisfy(\.welcomed) }

        // Phase 1: every connection keeps `window` chats in flight; each ack releases the next.
        let window = min(options.window, Self.ringSize)
        let startCPU = targetCPUSeconds?()
        let start = Self.now()
        let deadline = start + UInt64(options.seconds * 1e9)
        latencies.reserveCapacity(1 << 20)
        for connection in connections {
            for _ in 0..<window { try enqueueChat(connection, at: start) }
        }
        try flushDirty()
        var saturatedAcks = 0
        var lastAck = start
        while connections.contains(where: { $0.inFlight > 0 }) {
            guard Self.now() < deadline + 30_000_000_000 else { throw ChatBenchmark.BenchError.timedOut("saturation acks") }
            try poll(timeout: 100_000_000)
            let received = Self.now()
            if !progress.isEmpty {
                Progress.detail = { "\(saturatedAcks) acked" }
                Progress.tick(progress)
            }
            for index in readable {
                let connection = connections[index]
                let acks = try receive(connection, at: received)
                guard acks > 0 else { continue }
                saturatedAcks += acks
                lastAck = received
                if received < deadline {
                    let sent = Self.now()
                    for _ in 0..<acks { try enqueueChat(connection, at: sent) }
                }
            }
            try flushDirty()
        }
        let elapsed = Double(lastAck - start) / 1e9
        let saturatedCPU = Self.targetCPU(targetCPUSeconds, since: startCPU, start: start, chats: saturatedAcks)
        latencies.sort()
        let saturatedP50 = ChatBenchmark.percentile(latencies, 0.5)
        let saturatedP99 = ChatBenchmark.percentile(latencies, 0.99)
        latencies.removeAll(keepingCapacity: true)
        receivedAt.removeAll(keepingCapacity: true)
        let settledSeconds = options.latencySeconds > 0 ? try settle(targetCPUSeconds) : 0

        // Phase 2: a fixed offered rate, spread round-robin over the connections.
        let total = Int(options.rate * options.latencySeconds)
        let interval = 1e9 / options.rate
        let pacedStartCPU = options.latencySeconds > 0 ? targetCPUSeconds?() : nil
        let pacedStart = Self.now()
        func due(_ index: Int) -> UInt64 { pacedStart + UInt64(Double(index) * interval) }
        var next = 0
        var lateness: [Double] = []
        lateness.reserveCapacity(total)
        while next < total || connections.contains(where: { $0.inFlight > 0 }) {
            let current = Self.now()
            guard current < pacedStart + UInt64(options.latencySeconds * 1e9) + 30_000_000_000 else {
                throw ChatBenchmark.BenchError.timedOut("paced acks")
            }
            // Timed from when the chat was due, not from when this loop got to it: a generator that was
            // descheduled (on two shared cores, often because the server had the CPU) must not leave
            // the delay out of the latency (coordinated omission).
            while next < total, due(next) <= current {
                lateness.append(Double(current - due(next)) / 1e6)
                try enqueueChat(connections[next % connections.count], at: due(next))
                next += 1
            }
            try flushDirty()
            try poll(timeout: next < total ? due(next) - min(due(next), Self.now()) : 100_000_000)
            let received = Self.now()
            for index in readable { _ = try receive(connections[index], at: received) }
            if !progress.isEmpty {
                Progress.detail = { "\(next)/\(total) paced" }
                Progress.tick(progress)
            }
        }
        let pacedTrace = zip(receivedAt, latencies).map { (received: $0 &- pacedStart, latency: $1) }
        let pacedCPU = Self.targetCPU(targetCPUSeconds, since: pacedStartCPU, start: pacedStart, chats: latencies.count)
        latencies.sort()

        let ackedPerRoom = try verify()
        for connection in connections { try sendClose(connection) }
        let report = ChatBenchmark.Report(
            client: .raw, senders: connections.count, throughputAcked: saturatedAcks, throughputSeconds: elapsed,
            saturatedP50Ms: saturatedP50, saturatedP99Ms: saturatedP99, latencyRate: options.rate,
            latencyAcked: latencies.count, p50Ms: ChatBenchmark.percentile(latencies, 0.5),
            p99Ms: ChatBenchmark.percentile(latencies, 0.99), maxMs: latencies.last ?? .nan)
        lateness.sort()
        return Outcome(report: report, ackedPerRoom: ackedPerRoom, settledSeconds: settledSeconds, pacedLateness: lateness,
                       saturatedCPU: saturatedCPU, pacedCPU: pacedCPU, pacedTrace: pacedTrace)
    }

    /// What the target spent from `startCPU` (its CPU seconds when the phase began at `start`) until
    /// now, over `chats`; nil without a CPU clock.
    private static func targetCPU(_ cpuSeconds: (() -> Double)?, since startCPU: Double?, start: UInt64, chats: Int) -> TargetCPU? {
        guard let cpuSeconds, let startCPU else { return nil }
        return TargetCPU(cpuSeconds: cpuSeconds() - startCPU, seconds: Double(now() - start) / 1e9, chats: chats)
    }

    /// Between the phases: the paced phase measures the ack latency of a steady load, so it waits
    /// until the saturated phase is over for the target too. Its last acks are in, but the
    /// broadcasts of its last chats may still be on their way, and a server goes on working after
    /// a burst (the background checkpoint of the WAL the burst grew): measured from the first
    /// moment, the paced phase's first tens of milliseconds, a few percent of its chats, were that
    /// tail, and its p99 said more about the saturated phase than about 5,000 chats/s. So: every
    /// broadcast in, then the target's CPU time still for `quietWindow` (at most one clock tick
    /// in it, 10 ms of 200), up to `maxSettle`. Returns the seconds it waited.
    private func settle(_ targetCPUSeconds: (() -> Double)?) throws -> Double {
        let started = Self.now()
        let acked = ackedPerRoom()
        try waitUntil(deadline: started + 10_000_000_000, "saturation broadcasts") { broadcastsComplete(acked) }
        guard let targetCPUSeconds else { return Double(Self.now() - started) / 1e9 }
        let quietWindow: UInt64 = 200_000_000
        let maxSettle: UInt64 = 10_000_000_000
        var before = targetCPUSeconds()
        while Self.now() < started + maxSettle {
            let windowEnd = Self.now() + quietWindow
            while Self.now() < windowEnd {
                try poll(timeout: windowEnd - min(windowEnd, Self.now()))
                let received = Self.now()
                for index in readable { _ = try receive(connections[index], at: received) }
            }
            let after = targetCPUSeconds()
            if after - before <= 0.0101 { break }
            before = after
        }
        return Double(Self.now() - started) / 1e9
    }

    /// Acks so far, per room.
    private func ackedPerRoom() -> [Int] {
        var acked = [Int](repeating: 0, count: rooms)
        for connection in connections { acked[connection.room] += connection.acked }
        return acked
    }

    /// Every member has every other member's chats of `ackedPerRoom` (taken once the acks are in,
    /// not again at every wake-up of the wait).
    private func broadcastsComplete(_ ackedPerRoom: [Int]) -> Bool {
        connections.allSatisfy { $0.broadcasts == ackedPerRoom[$0.room] - $0.acked }
    }

    /// Waits for the last broadcasts, then checks that every member saw every other member's
    /// chats and that each room's acked seqs are exactly 1...acked. Returns acks per room.
    private func verify() throws -> [Int] {
        let ackedPerRoom = ackedPerRoom()
        try waitUntil(deadline: Self.now() + 5_000_000_000, "broadcasts") { broadcastsComplete(ackedPerRoom) }
        for room in 0..<rooms {
            let seen = seenSeqs[room]
            let acked = ackedPerRoom[room]
            guard acked > 0, seen.count > acked, !seen[1...acked].contains(false), !seen[(acked + 1)...].contains(true) else {
                throw ChatBenchmark.BenchError.verification("room \(room): acked seqs are not exactly 1...\(ackedPerRoom[room])")
            }
        }
        return ackedPerRoom
    }

    private func waitUntil(deadline: UInt64, _ what: String, _ condition: () -> Bool) throws {
        while !condition() {
            guard Self.now() < deadline else { throw ChatBenchmark.BenchError.timedOut(what) }
            try poll(timeout: 100_000_000)
            let received = Self.now()
            for index in readable { _ = try receive(connections[index], at: received) }
            try flushDirty()
        }
    }

    /// epoll, not select(): a thousand rooms are more descriptors than FD_SETSIZE.
    private func poll(timeout: UInt64) throws {
        readable.removeAll(keepingCapacity: true)
        let count = try poller.wait(timeoutNanoseconds: timeout)
        for slot in 0..<count {
            let index = Int(poller.tokens[slot])
            if poller.events[slot] & 2 != 0 { try flush(connections[index]) }
            if poller.events[slot] & 1 != 0 { readable.append(index) }
        }
    }

    private func flushDirty() throws {
        guard !dirty.isEmpty else { return }
        let list = dirty
        dirty.removeAll(keepingCapacity: true)
        for index in list {
            connections[index].pending = false
            try flush(connections[index])
        }
    }

    private func markDirty(_ connection: Connection) {
        if !connection.pending {
            connection.pending = true
            dirty.append(connection.index)
        }
    }

    // MARK: sending

    private func enqueueChat(_ connection: Connection, at time: UInt64) throws {
        let counter = connection.nextCounter
        let slot = counter & (Self.ringSize - 1)
        guard connection.sentAt[slot] == 0 else {
            throw ChatBenchmark.BenchError.verification("more than \(Self.ringSize) chats in flight on one connection")
        }
        connection.nextCounter += 1
        connection.sentAt[slot] = time
        connection.inFlight += 1
        let base = connection.out.count
        markDirty(connection)
        connection.out.append(contentsOf: connection.template)
        var value = counter
        let payloadStart = base + connection.headerCount
        connection.out.withUnsafeMutableBufferPointer { out in
            for payloadIndex in stride(from: Self.digitsAt + Self.digitCount - 1, through: Self.digitsAt, by: -1) {
                out[payloadStart + payloadIndex] = (48 + UInt8(value % 10)) ^ connection.mask[payloadIndex & 3]
                value /= 10
            }
        }
    }

    private func enqueueControl(_ connection: Connection, opcode: WebSocketFraming.Opcode, payload: ArraySlice<UInt8>) {
        let mask = connection.mask
        WebSocketFraming.appendHeader(opcode, length: payload.count, mask: (mask[0], mask[1], mask[2], mask[3]), to: &connection.out)
        connection.out += payload.enumerated().map { $1 ^ mask[$0 & 3] }
        markDirty(connection)
    }

    /// One `send` for everything queued on the connection; what the socket does not take waits for POLLOUT.
    private func flush(_ connection: Connection) throws {
        guard connection.outStart < connection.out.count else { return }
        let written = try connection.out.withUnsafeBytes { bytes in
            try connection.socket.write(UnsafeRawBufferPointer(rebasing: bytes[connection.outStart...]))
        }
        connection.outStart += written
        let done = connection.outStart == connection.out.count
        if done {
            connection.out.removeAll(keepingCapacity: true)
            connection.outStart = 0
        }
        if done == connection.wantsWrite {
            connection.wantsWrite = !done
            try poller.modify(connection.socket.fd, token: connection.index, writable: !done)
        }
    }

    private func sendClose(_ connection: Connection) throws {
        enqueueControl(connection, opcode: .close, payload: [0x03, 0xE8][...])
        try flush(connection)
    }

    // MARK: receiving

    /// Reads what is waiting and handles every complete frame; returns the chats acked.
    private func receive(_ connection: Connection, at time: UInt64) throws -> Int {
        let count = try scratch.withUnsafeMutableBytes { try connection.socket.read(into: $0) }
        guard count > 0 else { return 0 }
        connection.inBuffer.append(contentsOf: scratch[0..<count])
        return try scan(connection, at: time)
    }

    /// Handles every complete frame in the connection's receive buffer; returns the chats acked.
    private func scan(_ connection: Connection, at time: UInt64) throws -> Int {
        var acks = 0
        var consumed = 0
        var controls: [(WebSocketFraming.Opcode, ArraySlice<UInt8>)] = []
        try connection.inBuffer.withUnsafeBytes { buffer in
            while let frame = ServerFrameScanner.frame(in: buffer, at: consumed) {
                consumed = frame.end
                switch frame.opcode {
                case 0x1:
                    guard frame.final else { throw ChatBenchmark.BenchError.verification("fragmented server frame") }
                    if try handleText(UnsafeRawBufferPointer(rebasing: buffer[frame.payload]), connection, at: time) { acks += 1 }
                case 0x8:
                    throw ChatBenchmark.BenchError.connectionEnded("server sent Close")
                case 0x9:
                    controls.append((.pong, ArraySlice(buffer[frame.payload])))
                default:
                    break
                }
            }
        }
        connection.inBuffer.removeFirst(consumed)
        for (opcode, payload) in controls { enqueueControl(connection, opcode: opcode, payload: payload) }
        return acks
    }

    /// Returns true for a chat-ack of ours.
    private func handleText(_ text: UnsafeRawBufferPointer, _ connection: Connection, at time: UInt64) throws -> Bool {
        if Self.hasSuffix(text, Self.ackSuffix) {
            guard Self.hasPrefix(text, Self.ackPrefix) else {
                throw ChatBenchmark.BenchError.verification("chat not acked: \(String(decoding: text, as: UTF8.self))")
            }
            var index = Self.ackPrefix.count
            var counter = 0
            for _ in 0..<Self.digitCount {
                counter = counter * 10 + Int(text[index] &- 48)
                index += 1
            }
            guard Self.hasPrefix(UnsafeRawBufferPointer(rebasing: text[index...]), Self.ackSeq) else {
                throw ChatBenchmark.BenchError.verification("ack without seq: \(String(decoding: text, as: UTF8.self))")
            }
            index += Self.ackSeq.count
            var seq = 0
            while index < text.count, text[index] >= 48, text[index] <= 57 {
                seq = seq * 10 + Int(text[index] - 48)
                index += 1
            }
            try acknowledge(connection, counter: counter, seq: seq, at: time)
            return true
        }
        if Self.hasSuffix(text, Self.chatSuffix) {
            connection.broadcasts += 1
        } else if Self.hasSuffix(text, Self.welcomeSuffix) {
            connection.welcomed = true
        } else if Self.hasSuffix(text, Self.errorSuffix) {
            throw ChatBenchmark.BenchError.verification("error frame: \(String(decoding: text, as: UTF8.self))")
        }
        return false
    }

    private func acknowledge(_ connection: Connection, counter: Int, seq: Int, at time: UInt64) throws {
        let slot = counter & (Self.ringSize - 1)
        let sent = connection.sentAt[slot]
        guard counter > 0, counter < connection.nextCounter, sent != 0 else {
            throw ChatBenchmark.BenchError.verification("ack for chat m\(counter), which is not in flight")
        }
        // One connection's chats are committed, and so acked, in the order they were sent.
        guard seq > connection.lastSeq else {
            throw ChatBenchmark.BenchError.verification("ack seq \(seq) after \(connection.lastSeq) on one connection")
        }
        var seen = seenSeqs[connection.room]
        seenSeqs[connection.room] = []
        if seen.count <= seq { seen += repeatElement(false, count: max(seq + 1 - seen.count, seen.count)) }
        let duplicate = seen[seq]
        seen[seq] = true
        seenSeqs[connection.room] = seen
        guard !duplicate else { throw ChatBenchmark.BenchError.verification("seq \(seq) acked twice in one room") }
        connection.sentAt[slot] = 0
        connection.inFlight -= 1
        connection.lastSeq = seq
        connection.acked += 1
        latencies.append(Double(time &- sent) / 1e6)
        if tracesPacedAcks { receivedAt.append(time) }
    }

    private static func hasSuffix(_ text: UnsafeRawBufferPointer, _ suffix: [UInt8]) -> Bool {
        guard text.count >= suffix.count else { return false }
        let start = text.count - suffix.count
        for index in 0..<suffix.count where text[start + index] != suffix[index] { return false }
        return true
    }

    private static func hasPrefix(_ text: UnsafeRawBufferPointer, _ prefix: [UInt8]) -> Bool {
        guard text.count >= prefix.count else { return false }
        for index in 0..<prefix.count where text[index] != prefix[index] { return false }
        return true
    }
}
