import CallingLogging
import Foundation

/// A throwaway PostgreSQL server for tests: `initdb` in a fresh temporary folder and `postgres`
/// listening on a free loopback port (TCP only; its socket folder is the temporary folder), trust
/// authentication for the superuser `calling`. Stopped by `stop()` (fast shutdown) and removed with its
/// folder; a server still running when the process exits is stopped then.
///
/// PostgreSQL refuses to run as root. Started by root, the server runs as the `postgres` user that
/// Debian's package creates (or `CALLING_TEST_PG_USER`), through `setpriv`; otherwise as the caller.
/// The binaries come from `CALLING_TEST_PG_BIN`, default `/usr/lib/postgresql/15/bin`
/// (`deploy/install-deps.sh --test` installs them). `tests/integration/support.py` has the same
/// helper for the Python tests.
public final class TestPostgres: @unchecked Sendable {
    // @unchecked Sendable: `process` is replaced only by `restart`, and read by `stop` and `kill9`,
    // all under `lock`.
    public let port: Int
    public let directory: String
    /// The superuser name; trust authentication, so no password.
    public let user = "calling"
    private var process: Process
    private let runAs: String?
    /// A bare NSLock, not `Locked`: it is held across the server's stop and restart, which wait
    /// for processes, and it guards a `Process`, which is not Sendable.
    private let lock = NSLock()
    private var stopped = false

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Where the PostgreSQL binaries are.
    public static var binDirectory: String {
        ProcessInfo.processInfo.environment["CALLING_TEST_PG_BIN"] ?? "/usr/lib/postgresql/15/bin"
    }

    /// Whether this machine can run `TestPostgres` (the binaries are installed).
    public static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: binDirectory + "/postgres")
            && FileManager.default.isExecutableFile(atPath: binDirectory + "/initdb")
    }

    /// Runs initdb and starts the server; returns once it accepts connections.
    public init() throws {
        directory = NSTemporaryDirectory() + "calling-pg-\(UUID().uuidString)"
        let data = directory + "/data"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let runAs = Self.serverUser()
        self.runAs = runAs
        if let runAs { try Self.run("/bin/chown", ["-R", "\(runAs):\(runAs)", directory]) }
        try Self.run(Self.binDirectory + "/initdb",
                     ["-D", data, "-U", user, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                     as: runAs)
        var lastFailure = ""
        for _ in 0..<5 {
            let port = try Self.freeLoopbackPort()
            let log = directory + "/postgres-\(port).log"
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            if let runAs { try Self.run("/bin/chown", ["\(runAs):\(runAs)", log]) }
            let process = try Self.launch(directory: directory, port: port, log: log, as: runAs)
            if Self.waitReady(port: port, process: process) {
                self.port = port
                self.process = process
                Self.registry.withLock { $0.append(self) }
                return
            }
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            lastFailure = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        }
        try? FileManager.default.removeItem(atPath: directory)
        throw Failure(description: "postgres did not start: \(lastFailure.suffix(2_000))")
    }

    deinit { stop() }

    /// A libpq URL for `database` on this server.
    public func url(database: String = "postgres") -> String {
        "postgresql://\(user)@127.0.0.1:\(port)/\(database)"
    }

    /// Creates an empty database (with `createdb`) and returns its URL.
    public func createDatabase(_ name: String) throws -> String {
        try Self.run(Self.binDirectory + "/createdb", ["-h", "127.0.0.1", "-p", "\(port)", "-U", user, name])
        return url(database: name)
    }

    /// A database with a fresh unique name.
    public func createDatabase() throws -> String {
        try createDatabase("t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16))
    }

    /// Runs SQL through `psql` (for what a test does behind the store's back) and returns its
    /// unaligned, tuples-only output.
    @discardableResult
    public func psql(_ sql: String, database: String) throws -> String {
        try Self.run(Self.binDirectory + "/psql",
                     ["-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", database, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql])
    }

    /// Fast shutdown (SIGINT: sessions are ended, the WAL is flushed), then the folder is removed.
    /// Idempotent.
    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard !stopped else { return }
        stopped = true
        if process.isRunning {
            kill(process.processIdentifier, SIGINT)
            let deadline = Date().addingTimeInterval(10)
            while process.isRunning, Date() < deadline { usleep(20_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Stops the server abruptly (SIGKILL), as a crash would, and leaves the folder. For tests of what a
    /// client sees while the server is gone; `restart()` brings it back on the same port.
    public func kill9() {
        lock.lock()
        defer { lock.unlock() }
        if process.isRunning {
            // The backends too: a postmaster killed alone leaves them running until they notice,
            // and a backend in the middle of a transaction may still commit it.
            let pid = process.processIdentifier
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
            kill(pid, SIGKILL)
            for child in children.split(separator: " ").compactMap({ Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) {
                kill(child, SIGKILL)
            }
        }
        process.waitUntilExit()
    }

    /// Starts the server again on the same port and data after `kill9` (it runs crash recovery).
    public func restart() throws {
        lock.lock()
        defer { lock.unlock() }
        guard !stopped, !process.isRunning else { return }
        let log = directory + "/postgres-\(port).log"
        // A killed postmaster leaves its children for a moment; they hold the shared memory the new one needs.
        var started: Process?
        for _ in 0..<50 {
            let candidate = try Self.launch(directory: directory, port: port, log: log, as: runAs)
            if Self.waitReady(port: port, process: candidate) {
                started = candidate
                break
            }
            if candidate.isRunning { candidate.terminate() }
            candidate.waitUntilExit()
            usleep(100_000)
        }
        guard let started else { throw Failure(description: "postgres did not restart on port \(port)") }
        process = started
    }

    private static func launch(directory: String, port: Int, log: String, as runAs: String?) throws -> Process {
        let process = Process()
        let arguments = [binDirectory + "/postgres", "-D", directory + "/data", "-p", "\(port)", "-c", "listen_addresses=127.0.0.1",
                         "-c", "unix_socket_directories=\(directory)", "-c", "max_connections=200",
                         "-c", "logging_collector=off"]
        configure(process, arguments, as: runAs)
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }

    // MARK: Helpers

    private static let registry: Registry = {
        atexit { TestPostgres.stopAll() }
        return Registry([])
    }()

    private static func stopAll() {
        for server in registry.withLock({ $0 }) { server.stop() }
    }

    private typealias Registry = Locked<[TestPostgres]>

    /// The user to run the server as: nil when not root (run as the caller).
    private static func serverUser() -> String? {
        guard geteuid() == 0 else { return nil }
        return ProcessInfo.processInfo.environment["CALLING_TEST_PG_USER"] ?? "postgres"
    }

    private static func configure(_ process: Process, _ arguments: [String], as user: String?) {
        if let user {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(user)", "--regid=\(user)", "--init-groups", "--"] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: arguments[0])
            process.arguments = Array(arguments.dropFirst())
        }
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C"
        process.environment = environment
        // The folder every user can enter (the server user cannot read root's working directory).
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
    }

    @discardableResult
    private static func run(_ executable: String, _ arguments: [String], as user: String? = nil) throws -> String {
        let process = Process()
        configure(process, [executable] + arguments, as: user)
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: bytes, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(executable) \(arguments.joined(separator: " ")) exited \(process.terminationStatus): \(text)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A port nobody listens on right now (bound to port 0 and released; the start retries on a race).
    private static func freeLoopbackPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "bind: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func waitReady(port: Int, process: Process) -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, process.isRunning {
            if (try? run(binDirectory + "/pg_isready", ["-q", "-h", "127.0.0.1", "-p", "\(port)"])) != nil { return true }
            usleep(50_000)
        }
        return false
    }
}
