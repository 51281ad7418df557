import CallingCore
import CallingServer
import CallingTransport
import Foundation

/// The `calling-bench` command line (bench/README.md).
public enum BenchCommand {
    static let usage = """
        usage: calling-bench suite [SCENARIO…] [--quick | --smoke] [--server PATH] [--out DIR] [--no-pin true]
                                    [--relay-rate FRAMES_PER_S[,…]] [--relay-trace DIR]   relay: paced rate(s) instead of half the server's; per-frame CSV
                                    [--relay-run N]   relay: consecutive paced frames per side (default the window, 32; 1 is round-robin)
                                    [--chat-trace DIR]   chat: each paced ack's receive time and latency, CSV
                                    [--rounds N]   each scenario N times (server, baseline, server, …): medians, and the median of the rounds' ratios
                                    [--instructions true]   relay only: both targets under valgrind callgrind, instructions per relayed frame
                                    [--keepalive-peers N] [--keepalive-ping S]   keepalive: idle peers (default 19000, quick 2000) and idle_ping_seconds (10, quick 3)
               calling-bench SCENARIO [same flags]        one scenario of the suite
               calling-bench chat [--rooms N] [--senders-per-room N] [--window N] [--seconds S] [--rate R] [--latency-seconds S] [--event-loop libev|poll] [--client raw|lws]
                              [--database-url postgres://…]   the in-process chat benchmark (chat in PostgreSQL with the URL)
               calling-bench chat-ops [--seconds S] [--window N] [--history-rows N] [--inbox-rooms N] [--reads N] [--database-url postgres://…]
                              chat operations at the store: acked sends vs a mix of sends, edits and reactions; before_seq and inbox p99
        scenarios: \(Scenarios.names.joined(separator: ", ")) (all but keepalive by default)
        """

    /// Runs `calling-bench …` (`arguments[1]` is the command); returns the exit code.
    public static func run(arguments: [String]) -> Int32 {
        if arguments.count >= 2, arguments[1] == "suite" || (Scenarios.names.contains(arguments[1]) && arguments[1] != "chat") {
            return Suite.run(arguments: Array(arguments.dropFirst(arguments[1] == "suite" ? 2 : 1)))
        }
        if arguments.count >= 2, ["help", "--help", "-h"].contains(arguments[1]) {
            print(usage)
            return 0
        }
        if arguments.count >= 2, arguments[1] == "chat-ops" { return runChatOperations(Array(arguments.dropFirst(2))) }
        guard arguments.count >= 2, arguments[1] == "chat", case .success(let flags) = CallingCommand.parseFlags(arguments.dropFirst(2)) else {
            CallingCommand.printError(usage)
            return 64
        }
        var options = ChatBenchmark.Options()
        var problems: [String] = []
        for (key, value) in flags {
            switch key.replacingOccurrences(of: "_", with: "-") {
            case "rooms": if let v = Int(value), v > 0 { options.rooms = v } else { problems.append("--rooms") }
            case "senders-per-room": if let v = Int(value), v > 0 { options.sendersPerRoom = v } else { problems.append("--senders-per-room") }
            case "window": if let v = Int(value), v > 0 { options.window = v } else { problems.append("--window") }
            case "seconds": if let v = Double(value), v > 0 { options.seconds = v } else { problems.append("--seconds") }
            case "latency-seconds": if let v = Double(value), v > 0 { options.latencySeconds = v } else { problems.append("--latency-seconds") }
            case "rate": if let v = Double(value), v > 0 { options.rate = v } else { problems.append("--rate") }
            case "event-loop":
                if let loop = TransportSettings.EventLoop(rawValue: value) { options.eventLoop = loop } else { problems.append("--event-loop") }
            case "client":
                if let client = ChatBenchmark.Client(rawValue: value) { options.client = client } else { problems.append("--client") }
            case "database-url":
                if value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") { options.databaseURL = value } else { problems.append("--database-url") }
            default: problems.append("unknown flag --\(key)")
            }
        }
        guard problems.isEmpty else {
            CallingCommand.printError("bad bench flags: \(problems.joined(separator: ", "))")
            return 64
        }
        let result = Locked<Result<ChatBenchmark.Report, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                let report = try await ChatBenchmark.run(options, logger: Logger(label: "bench", level: .warning))
                result.withLock { $0 = .success(report) }
            } catch {
                result.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        done.wait()
        switch result.withLock({ $0 }) {
        case .success(let report)?:
            print(report)
            return 0
        case .failure(let error)?:
            CallingCommand.printError("bench failed: \(error)")
            return 1
        case nil:
            return 1
        }
    }

    /// `calling-bench chat-ops …`.
    static func runChatOperations(_ arguments: [String]) -> Int32 {
        guard case .success(let flags) = CallingCommand.parseFlags(arguments[...]) else {
            CallingCommand.printError(usage)
            return 64
        }
        var options = ChatOperationsBenchmark.Options()
        var problems: [String] = []
        for (key, value) in flags {
            switch key {
            case "seconds": if let v = Double(value), v > 0 { options.seconds = v } else { problems.append("--seconds") }
            case "window": if let v = Int(value), v > 0 { options.window = v } else { problems.append("--window") }
            case "history-rows": if let v = Int(value), v >= 10 { options.historyRows = v } else { problems.append("--history-rows") }
            case "inbox-rooms": if let v = Int(value), v > 0 { options.inboxRooms = v } else { problems.append("--inbox-rooms") }
            case "reads": if let v = Int(value), v > 0 { options.reads = v } else { problems.append("--reads") }
            case "database-url":
                if value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") { options.databaseURL = value } else { problems.append("--database-url") }
            default: problems.append("unknown flag --\(key)")
            }
        }
        guard problems.isEmpty else {
            CallingCommand.printError("bad bench flags: \(problems.joined(separator: ", "))")
            return 64
        }
        do {
            print(try ChatOperationsBenchmark.run(options))
            return 0
        } catch {
            CallingCommand.printError("bench failed: \(error)")
            return 1
        }
    }
}
