import CallingAuth
import CallingCore
import CallingStore
import Foundation
import Glibc

/// What a scenario measures: the real server (`calling-server serve`) or the bare lws baseline
/// (`bench/lws-baseline.c`), each a separate process pinned with `taskset` to its own core, so its
/// RSS is its own and its file descriptors do not share the generator's budget.
final class TargetProcess {
    enum Kind: String { case server, baseline }

    let kind: Kind
    let process: Process
    let port: Int
    let dataDir: String?
    private let issuer: TokenIssuer?
    private let audience: String

    var pid: Int32 { process.processIdentifier }
    /// Where callgrind writes this target's counts when it runs under `Callgrind` (`--instructions`).
    let callgrindFile: String?

    /// Flags that take the per-connection flood limits out of the way: at the default 50 frames/s a
    /// benchmark would measure the limiter, not the server.
    static let floodLimitFlags = ["--max_frames_per_second", "1000000", "--frame_burst", "1000000", "--flood_close_after", "1000000"]

    /// Starts `calling-server serve` on 127.0.0.1 port 0 with a fresh data folder (or `dataDir`, already seeded).
    static func server(binary: String, cpu: Int?, dataDir existing: String? = nil, flags: [String] = [],
                       callgrind: Callgrind? = nil) throws -> TargetProcess {
        let dataDir = existing ?? NSTemporaryDirectory() + "calling-bench-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true)
        let secret = SecureRandom.token(bytes: 32)
        try Data(secret.utf8).write(to: URL(fileURLWithPath: dataDir + "/jwt-secret"))
        let arguments = ["serve", "--host", "127.0.0.1", "--port", "0", "--data_dir", dataDir, "--log_level", "warning",
                         "--jwt_secret_file", dataDir + "/jwt-secret"] + floodLimitFlags + flags
        let (process, port, file) = try launch(.server, binary, arguments, cpu: cpu, banner: "listening on http://127.0.0.1:",
                                               callgrind: callgrind)
        let issuer = try TokenIssuer(hs256Secret: Array(secret.utf8))
        return TargetProcess(kind: .server, process: process, port: port, dataDir: dataDir, issuer: issuer, callgrindFile: file)
    }

    static func baseline(binary: String, cpu: Int?, pageBytes: Int = 4096, flags: [String] = [],
                         callgrind: Callgrind? = nil) throws -> TargetProcess {
        let (process, port, file) = try launch(.baseline, binary, ["--page-bytes", "\(pageBytes)"] + flags, cpu: cpu,
                                               banner: "lws-baseline listening on port ", callgrind: callgrind)
        return TargetProcess(kind: .baseline, process: process, port: port, dataDir: nil, issuer: nil, callgrindFile: file)
    }

    private init(kind: Kind, process: Process, port: Int, dataDir: String?, issuer: TokenIssuer?, callgrindFile: String?) {
        self.kind = kind
        self.process = process
        self.port = port
        self.dataDir = dataDir
        self.issuer = issuer
        self.callgrindFile = callgrindFile
        audience = "calling-server"
    }

    /// Starts `binary`, under `callgrind` when given (which runs it in the same process and writes
    /// its counts to the file returned), and waits for its banner with the port.
    private static func launch(_ kind: Kind, _ binary: String, _ arguments: [String], cpu: Int?, banner: String,
                               callgrind: Callgrind?) throws -> (Process, Int, callgrindFile: String?) {
        let file = callgrind?.file(for: kind)
        let command = callgrind.map { $0.command(binary, writingTo: file!) } ?? [binary]
        // Under callgrind start-up (the runtime's relocations, the store's schema) is ~50 times slower.
        let timeout: TimeInterval = callgrind == nil ? 30 : 120
        let process = Process()
        if let cpu {
            // taskset execs the target, so the pid is the target's.
            process.executableURL = URL(fileURLWithPath: "/usr/bin/taskset")
            process.arguments = ["-c", "\(cpu)"] + command + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: command[0])
            process.arguments = Array(command.dropFirst()) + arguments
        }
        var environment = ProcessInfo.processInfo.environment
        for key in environment.keys where key.hasPrefix("CALLING_") { environment.removeValue(forKey: key) }
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read the banner line by line; the rest of stdout is drained so the target never blocks on it.
        var collected = Data()
        let handle = output.fileHandleForReading
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            collected += chunk
            let text = String(decoding: collected, as: UTF8.self)
            if let range = text.range(of: banner) {
                let digits = text[range.upperBound...].prefix { $0.isNumber }
                if let port = Int(digits) {
                    DispatchQueue.global().async { while !handle.availableData.isEmpty {} }
                    return (process, port, file)
                }
            }
        }
        process.terminate()
        throw LoadEngine.Failure.system("\(binary) did not start: \(String(decoding: collected, as: UTF8.self))")
    }

    /// The WebSocket path for `peer` in `room`: a signed token for the server, /g/room/peer for the baseline.
    func path(room: String, peer: String) throws -> String {
        guard let issuer else { return "/g/\(room)/\(peer)" }
        let claims = PeerTokenClaims(sub: PeerID(peer), roomID: RoomID(room), role: "peer", scope: ["room"],
                                     audience: audience, expiresAt: Date().addingTimeInterval(3_600))
        return "/v1/ws?token=\(try issuer.issue(claims))"
    }

    func token(room: String, peer: String) throws -> String {
        guard let issuer else { return "" }
        return try issuer.issue(PeerTokenClaims(sub: PeerID(peer), roomID: RoomID(room), role: "peer", scope: ["room"],
                                                audience: audience, expiresAt: Date().addingTimeInterval(3_600)))
    }

    /// VmRSS of the target process, in KiB.
    func rssKiB() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// User + system CPU seconds the target has used.
    func cpuSeconds() -> Double { Self.cpuSeconds(pid: pid) }

    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14, stime 15 (proc(5)).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            // Under callgrind the drain and the exit run ~50 times slower, and the counts are
            // written only at the exit: a kill would lose them.
            let deadline = Date().addingTimeInterval(callgrindFile == nil ? 10 : 60)
            while process.isRunning, Date() < deadline { usleep(20_000) }
            if process.isRunning { kill(pid, SIGKILL) }
            process.waitUntilExit()
        }
    }

    func removeData() {
        if let dataDir { try? FileManager.default.removeItem(atPath: dataDir) }
    }
}

/// The machine's state next to every figure: 1-minute load and the CPUs in use.
enum Machine {
    static func load() -> String {
        let text = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? ""
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    static func cpuCount() -> Int { Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

    static func ownCPUSeconds() -> Double { TargetProcess.cpuSeconds(pid: getpid()) }

    /// One CPU's time so far, in clock ticks, from a `cpuN` line of /proc/stat.
    struct CPUTicks: Equatable {
        /// Time the hypervisor gave this virtual CPU's host core to something else while the guest
        /// wanted it (proc(5), "steal"): on a shared host, what a run lost that no code of its own spent.
        var stolen: Int
        var total: Int
    }

    /// Each CPU's ticks, in CPU order; empty where /proc/stat cannot be read.
    static func cpuTicks() -> [CPUTicks] {
        cpuTicks(procStat: (try? String(contentsOfFile: "/proc/stat", encoding: .utf8)) ?? "")
    }

    /// The `cpuN` lines of `procStat` (user nice system idle iowait irq softirq steal …).
    static func cpuTicks(procStat: String) -> [CPUTicks] {
        procStat.split(separator: "\n").compactMap { line -> CPUTicks? in
            let fields = line.split(separator: " ")
            guard let name = fields.first, name.hasPrefix("cpu"), name.count > 3, fields.count >= 9 else { return nil }
            let ticks = fields.dropFirst().prefix(8).compactMap { Int($0) }
            guard ticks.count == 8 else { return nil }
            return CPUTicks(stolen: ticks[7], total: ticks.reduce(0, +))
        }
    }

    /// Per CPU, the share of the time between two readings that the host stole; nil for a CPU
    /// whose clock did not move or that is not in both.
    static func stolenShares(from start: [CPUTicks], to end: [CPUTicks]) -> [Double?] {
        zip(start, end).map { start, end in
            end.total > start.total ? Double(end.stolen - start.stolen) / Double(end.total - start.total) : nil
        }
    }
}

/// One progress line on stderr, rewritten in place at most every 250 ms.
enum Progress {
    nonisolated(unsafe) private static var last: UInt64 = 0
    nonisolated(unsafe) static var enabled = true
    nonisolated(unsafe) static var detail: () -> String = { "" }

    static func tick(_ what: String) {
        guard enabled else { return }
        let now = LoadEngine.now()
        guard now - last > 250_000_000 else { return }
        last = now
        let line = "\r\u{1B}[K  … \(what) \(detail())  load \(Machine.load())"
        FileHandle.standardError.write(Data(line.utf8))
    }

    static func finishLine() {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}
