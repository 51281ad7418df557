import CallingServer
import Foundation
import Glibc

/// `calling-bench suite`: every scenario against the server and the lws baseline in one run, with
/// a progress line on stderr, each scenario's block as it finishes, and a JSON and a Markdown
/// summary at the end (bench/README.md).
enum Suite {
    static func run(arguments: [String]) -> Int32 {
        var names: [String] = []
        var flagArguments: [String] = []
        var rest = arguments[...]
        while let first = rest.first, !first.hasPrefix("--") {
            names.append(first)
            rest = rest.dropFirst()
        }
        var sizes = SuiteSizes.full
        var mode = "full"
        for argument in rest {
            if argument == "--quick" { sizes = .quick; mode = "quick" } else if argument == "--smoke" { sizes = .smoke; mode = "smoke" } else { flagArguments.append(argument) }
        }
        guard case .success(let flags) = CallingCommand.parseFlags(flagArguments[...]) else {
            CallingCommand.printError(BenchCommand.usage)
            return 64
        }
        let unknown = Set(flags.keys).subtracting(["server", "out", "no-pin", "baseline-source", "quiet", "relay-rate", "relay-run", "relay-trace", "chat-trace",
                                                   "rounds", "instructions", "keepalive-peers", "keepalive-ping"])
        let badNames = names.filter { !Scenarios.names.contains($0) }
        guard unknown.isEmpty, badNames.isEmpty else {
            CallingCommand.printError("unknown: \((unknown.map { "--\($0)" } + badNames).joined(separator: ", "))\n\(BenchCommand.usage)")
            return 64
        }
        if let text = flags["relay-rate"] {
            let rates = text.split(separator: ",", omittingEmptySubsequences: false).map { Double($0) }
            guard rates.allSatisfy({ $0.map { $0 > 0 && $0.isFinite } ?? false }) else {
                CallingCommand.printError("--relay-rate wants frames per second, or several separated by commas, e.g. 100000 or 100000,150000,200000")
                return 64
            }
            sizes.relayPacedRates = rates.compactMap { $0 }
        }
        if let text = flags["relay-run"] {
            // Half the relay's ring of 8,192 frames in flight per side: one run never fills it alone.
            guard let run = Int(text), (1...4_096).contains(run) else {
                CallingCommand.printError("--relay-run wants how many consecutive paced frames each side sends, from 1 to 4096, e.g. 32")
                return 64
            }
            sizes.relayRun = run
        }
        if let text = flags["keepalive-peers"] {
            // The generator holds every peer's socket in a process capped at 20,000 open files here.
            guard let peers = Int(text), (1...19_500).contains(peers) else {
                CallingCommand.printError("--keepalive-peers wants a count of idle peers from 1 to 19500, e.g. 19000")
                return 64
            }
            sizes.keepalivePeers = peers
        }
        if let text = flags["keepalive-ping"] {
            guard let seconds = Int(text), (1...600).contains(seconds) else {
                CallingCommand.printError("--keepalive-ping wants idle_ping_seconds for the keepalive scenario, 1 to 600, e.g. 10")
                return 64
            }
            sizes.keepalivePingSeconds = seconds
        }
        var rounds = 1
        if let text = flags["rounds"] {
            guard let count = Int(text), (1...100).contains(count) else {
                CallingCommand.printError("--rounds wants a count from 1 to 100, e.g. 5")
                return 64
            }
            rounds = count
        }
        if names.isEmpty { names = Scenarios.defaultNames }
        let countsInstructions = flags["instructions"] == "true"
        if countsInstructions, names != ["relay"] {
            CallingCommand.printError("--instructions counts the relay only: calling-bench relay --instructions true")
            return 64
        }
        Progress.enabled = flags["quiet"] != "true" && isatty(2) == 1
        let ownDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let server = flags["server"] ?? ownDirectory.appendingPathComponent("calling-server").path
        guard FileManager.default.isExecutableFile(atPath: server) else {
            CallingCommand.printError("no server binary at \(server) (build it, or pass --server PATH)")
            return 1
        }
        let outDirectory = flags["out"] ?? ownDirectory.deletingLastPathComponent().appendingPathComponent("bench").path
        let baseline: String
        do {
            baseline = try buildBaseline(source: flags["baseline-source"] ?? "bench/lws-baseline.c", into: outDirectory)
        } catch {
            CallingCommand.printError("cannot build the lws baseline: \(error)")
            return 1
        }
        raiseFileLimit()
        var callgrind: Callgrind?
        if countsInstructions {
            callgrind = Callgrind(directory: outDirectory)
            guard callgrind != nil else {
                CallingCommand.printError("--instructions runs the targets under valgrind, which is not on PATH (apt-get install valgrind)")
                return 1
            }
        }
        var header: [String] = ["mode \(mode); scenarios \(names.joined(separator: ", "))"
                                    + (rounds > 1 ? "; \(rounds) rounds each (server then baseline), figures the rounds' medians" : ""),
                                "server \(server); baseline \(baseline) (bench/lws-baseline.c, libwebsockets with the libev loop)",
                                "server flood limits out of the way: " + TargetProcess.floodLimitFlags.joined(separator: " "),
                                "\(Machine.cpuCount()) CPUs, load \(Machine.load()) at the start"]
        if let callgrind {
            header.append("counting instructions: each target under \(callgrind.valgrind) --tool=callgrind, collected in \(Callgrind.collectedFunction) only")
        }
        var targetCPU: Int?
        if flags["no-pin"] != "true", Machine.cpuCount() >= 2, Poller.pinCurrentThread(to: 1) {
            targetCPU = 0
            header.append("pinned: server and baseline on CPU 0 (taskset -c 0), the generator on CPU 1 (sched_setaffinity)")
        } else {
            header.append("not pinned: server, baseline and generator share every CPU")
        }
        // The generator paces by timed epoll waits; the default 50 µs slack would make it send late.
        if Poller.setTimerSlack(nanoseconds: 1) { header.append("generator timer slack 1 ns (prctl PR_SET_TIMERSLACK; the default 50 µs lets a paced wait end late)") }
        let started = Date()
        for line in header { print(line) }
        print("")
        fflush(nil)
        let scenarios = Scenarios(serverBinary: server, baselineBinary: baseline, targetCPU: targetCPU, sizes: sizes)
        scenarios.callgrind = callgrind
        scenarios.relayTraceDirectory = flags["relay-trace"]
        scenarios.chatTraceDirectory = flags["chat-trace"]
        var results: [ScenarioResult] = []
        for name in names {
            var runs: [ScenarioResult] = []
            for round in 1...rounds {
                FileHandle.standardError.write(Data((rounds > 1 ? "\(name), round \(round) of \(rounds)…\n" : "\(name)…\n").utf8))
                let result = scenarios.run(name)
                print((rounds > 1 ? "round \(round) of \(rounds): " : "") + result.text)
                print("")
                fflush(nil)  // each block as soon as it is known, also into a pipe or a log file
                runs.append(result)
            }
            let result = ScenarioResult.combining(runs)
            if rounds > 1 {
                print(result.text)
                print("")
                fflush(nil)
            }
            results.append(result)
        }
        let report = SuiteReport(started: started, header: header, results: results)
        let stamp = ISO8601DateFormatter().string(from: started).replacingOccurrences(of: ":", with: "")
        do {
            try FileManager.default.createDirectory(atPath: outDirectory, withIntermediateDirectories: true)
            let json = try JSONSerialization.data(withJSONObject: report.json, options: [.prettyPrinted, .sortedKeys])
            let jsonPath = outDirectory + "/results-\(stamp).json"
            let markdownPath = outDirectory + "/results-\(stamp).md"
            try json.write(to: URL(fileURLWithPath: jsonPath))
            try Data(report.markdown.utf8).write(to: URL(fileURLWithPath: markdownPath))
            print(report.markdown)
            print("summary: \(jsonPath)\n         \(markdownPath)")
        } catch {
            CallingCommand.printError("cannot write the summary: \(error)")
            return 1
        }
        return results.contains { $0.error != nil } ? 1 : 0
    }

    /// Compiles the baseline with gcc and pkg-config when the binary is missing or older than the source.
    static func buildBaseline(source: String, into directory: String) throws -> String {
        guard FileManager.default.fileExists(atPath: source) else {
            throw LoadEngine.Failure.system("\(source) not found (run from the repository root, or pass --baseline-source)")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let binary = directory + "/lws-baseline"
        let sourceDate = (try? FileManager.default.attributesOfItem(atPath: source)[.modificationDate] as? Date) ?? Date()
        if let built = try? FileManager.default.attributesOfItem(atPath: binary)[.modificationDate] as? Date, built > sourceDate {
            return binary
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "gcc -O2 -Wall -o \"$1\" \"$2\" $(pkg-config --cflags --libs libwebsockets)", "sh", binary, source]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw LoadEngine.Failure.system("gcc exited with \(process.terminationStatus)") }
        return binary
    }

    /// Each generator connection is a descriptor: the soft limit goes up to the hard one.
    private static func raiseFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
