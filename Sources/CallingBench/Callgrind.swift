import Foundation

/// Runs a target under valgrind's callgrind and reads back how many instructions it executed in the
/// event loop's callbacks (`--instructions true`). The wall clock of a shared host moves by tens of
/// percent from one second to the next; this count does not, so it is the figure that tells a
/// change of the per-frame work from the host's noise (docs/benchmarks.md, "Instructions per
/// relayed frame"). It counts user-space instructions only: the kernel's share of a frame, the
/// same socket work for both targets, is not in it. A phase is counted alone: the count is zeroed
/// as it starts and dumped once it is over, both while the target is idle.
struct Callgrind {
    /// Counted with everything it calls: libev's dispatch of ready watchers, through which both the
    /// server (lws on its libev loop) and the baseline run every callback. Start-up, the wait in
    /// epoll and the loop's own bookkeeping between wake-ups are left out.
    static let collectedFunction = "ev_invoke_pending"

    let valgrind: String
    /// Where the targets' count files go.
    let directory: String

    /// nil when there is no valgrind on `PATH`.
    init?(directory: String, path: String = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin") {
        guard let found = path.split(separator: ":").map({ "\($0)/valgrind" }).first(where: FileManager.default.isExecutableFile)
        else { return nil }
        valgrind = found
        self.directory = directory
    }

    func file(for kind: TargetProcess.Kind) -> String { "\(directory)/callgrind-\(kind.rawValue)-\(UUID().uuidString).out" }

    /// `binary` under callgrind, which runs it in its own process (the pid stays the target's).
    func command(_ binary: String, writingTo file: String) -> [String] {
        [valgrind, "--tool=callgrind", "--toggle-collect=\(Self.collectedFunction)", "--callgrind-out-file=\(file)",
         "--dump-instr=no", binary]
    }

    /// Starts the count of the target's phase at `pid` afresh, at a moment it is idle.
    func zero(pid: Int32) throws {
        try control(["-z", "\(pid)"])
    }

    /// The instructions counted since `zero`, dumped at a moment the target at `pid` is idle, and
    /// the file that holds them per function and line, kept for `callgrind_annotate` (callgrind
    /// writes the dump to `file.1`, beside the target's `file`, which it writes at exit).
    func dumpedInstructions(pid: Int32, file: String) throws -> (count: Int, counts: String) {
        try control(["-d", "\(pid)"])
        let dump = file + ".1"
        guard let count = Self.instructions(inFile: dump) else {
            throw LoadEngine.Failure.system("callgrind wrote no count to \(dump)")
        }
        let kept = String(file.dropLast(".out".count)) + "-saturated.out"
        try? FileManager.default.removeItem(atPath: kept)
        try FileManager.default.moveItem(atPath: dump, toPath: kept)
        return (count, kept)
    }

    /// Runs valgrind's `callgrind_control` (beside valgrind), which reaches the target through vgdb.
    private func control(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: URL(fileURLWithPath: valgrind).deletingLastPathComponent().path + "/callgrind_control")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw LoadEngine.Failure.system("callgrind_control \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
    }

    /// The instructions a count file holds (its `totals:`, else its `summary:` line), or nil.
    static func instructions(inFile path: String) -> Int? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        return instructions(inCounts: text)
    }

    static func instructions(inCounts text: String) -> Int? {
        var summary: Int?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("totals:") { return Int(line.dropFirst("totals:".count).trimmingCharacters(in: .whitespaces)) }
            if line.hasPrefix("summary:") { summary = Int(line.dropFirst("summary:".count).trimmingCharacters(in: .whitespaces)) }
        }
        return summary
    }
}
