import CallingAuth
import CallingCore
import CallingPostgres
import CallingStore
import Foundation
import Synchronization
import CallingTransport

/// `calling-server <subcommand> [--flag value]…`. Kept in the library so tests can run commands
/// in-process; the executable only forwards `CommandLine.arguments`.
public enum CallingCommand {
    /// The global usage: every command, one line each; `calling-server <command> --help` has the
    /// command's own flags.
    public static let usage = """
        usage: calling-server <command> [flags]
               calling-server <command> --help    the command's own usage and flags
               calling-server --version           version and git commit of this build

          serve         run the signaling server (every key of docs/configuration.md is a flag)
          token         print a peer or presence token signed with the server's secret
          migrate       apply the SQLite migrations (and PostgreSQL's with database_url) and exit
          config        print the effective configuration (secrets hidden)
          config-table  print the key table of docs/configuration.md
          apikey        create | list | revoke   API keys for /v1/calls, /v1/tokens and /v1/admin
          admin         rooms | kick | end | send | drain | status   the admin API from a shell
          backup        a consistent copy of the live SQLite database (the server keeps running)
          peer          a Linux WebRTC peer: joins a room, calls or answers with audio and data
          bench         chat | suite   the load generators (the calling-bench executable beside this one)
          help [COMMAND]  this text, or COMMAND's usage
        """

    /// The flags every configuration-reading command takes (docs/configuration.md).
    static let configFlags = """
          --config FILE          JSON configuration file (else CALLING_CONFIG)
          --data-dir DIR         the server's data directory (default \(ServerConfig().dataDir))
          --<key> VALUE          any key of docs/configuration.md; CALLING_<KEY> variables apply too
        """

    /// Each command's own usage, printed for `calling-server <command> --help` (exit 0) before
    /// any configuration or key is read. `peer` has its own in the executable.
    public static let commandUsages: [String: String] = [
        "serve": """
            usage: calling-server serve [--config FILE] [--<key> VALUE]…

            Runs the signaling server until SIGINT or SIGTERM. Layers, later wins: defaults, the
            --config file, CALLING_<KEY> variables, flags (docs/configuration.md).

              --host H               address to listen on (default \(ServerConfig().host))
              --port P               port (default \(ServerConfig().port); 0 picks a free one, shown in the banner)
            \(configFlags)
            """,
        "token": """
            usage: calling-server token --peer PEER [--room ROOM] [token flags] [config flags]

            Prints a token signed with the server's secret (CALLING_JWT_SECRET, jwt_secret_file or
            <data_dir>/jwt-secret: give it the server's --data-dir or --config). It never creates a
            secret: without one it exits 1.

              --peer PEER            the token's sub (required)
              --room ROOM            room_id (required while the scope contains room)
              --role R               role claim (default peer; agent, dashboard or caller for presence)
              --name N               display name
              --call CALL            call_id claim
              --scope S              space-separated scopes (default room; presence for /v1/presence;
                                     user for GET /v1/me/rooms, with no --room)
              --ttl SECONDS          lifetime (default token_ttl_seconds)
              --audience A           aud claim (default jwt_audience)
              --max-peers N          seats of the room for this joiner (0 = unlimited)
              --jti ID               token id (default random)
              --moderator true       may delete anyone's chat messages (default false)
            \(configFlags)

            examples:
              calling-server token --data-dir ./data --room demo --peer alice
              calling-server token --data-dir ./data --peer ann --role agent --scope presence
            """,
        "migrate": """
            usage: calling-server migrate [--data-dir DIR] [--database-url postgres://…] [config flags]

            Applies the SQLite migrations (and, with database_url, PostgreSQL's chat migrations) and exits.

              --database-url URL     PostgreSQL for chat history (docs/operations.md)
            \(configFlags)
            """,
        "config": """
            usage: calling-server config [config flags]

            Prints the effective configuration, one `key = value` per line, secrets hidden.

            \(configFlags)
            """,
        "config-table": """
            usage: calling-server config-table

            Prints the key table of docs/configuration.md, generated from the source.
            """,
        "backup": """
            usage: calling-server backup --to FILE [config flags]

            Copies the live SQLite database with SQLite's online backup (the server keeps running),
            then checks the copy with integrity_check.

              --to FILE              where the copy is written (required)
            \(configFlags)
            """,
        "apikey": APIKeyCommand.usage,
        "admin": AdminCommand.usage,
        "bench": """
            usage: calling-server bench chat [--rooms N] [--senders-per-room N] [--window N] [--seconds S] [--rate R]
                                             [--latency-seconds S] [--event-loop libev|poll] [--client raw|lws]
                   calling-server bench suite [SCENARIO…] [--quick|--smoke]

            Runs the calling-bench executable beside this one with the same arguments
            (`calling-bench --help` lists every flag; bench/README.md).
            """,
    ]

    /// `calling-server --version`: the version and the git commit this binary was built from.
    public static var versionLine: String { "calling-server \(BuildInfo.version) (commit \(BuildInfo.commit))" }

    static func wantsHelp(_ arguments: ArraySlice<String>) -> Bool {
        arguments.contains { $0 == "--help" || $0 == "-h" }
    }

    /// Splits `--key value` / `--key=value` flags; a bare word is an error.
    public static func parseFlags(_ arguments: ArraySlice<String>) -> Result<[String: String], ConfigProblems> {
        var flags: [String: String] = [:]
        var problems: [String] = []
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            guard argument.hasPrefix("--"), argument.count > 2 else {
                problems.append("unexpected argument '\(argument)'")
                continue
            }
            let body = argument.dropFirst(2)
            if let equals = body.firstIndex(of: "=") {
                flags[String(body[..<equals])] = String(body[body.index(after: equals)...])
            } else if let value = iterator.next() {
                flags[String(body)] = value
            } else {
                problems.append("flag \(argument) needs a value")
            }
        }
        return problems.isEmpty ? .success(flags) : .failure(ConfigProblems(problems: problems))
    }

    /// Loads the layered config; `--config`/`CALLING_CONFIG` names the JSON file.
    static func loadConfig(flags: [String: String], environment: [String: String]) -> Result<ServerConfig, ConfigProblems> {
        var flags = flags
        let file = flags.removeValue(forKey: "config") ?? environment["CALLING_CONFIG"]
        var fileValues: [String: JSONValue]?
        if let file {
            guard let data = FileManager.default.contents(atPath: file) else {
                return .failure(ConfigProblems(problems: ["config file \(file) cannot be read"]))
            }
            do {
                guard let object = try JSONParser.parse(Array(data)).objectValue else {
                    return .failure(ConfigProblems(problems: ["config file \(file) must hold a JSON object"]))
                }
                fileValues = object
            } catch {
                return .failure(ConfigProblems(problems: ["config file \(file): \(error.message)"]))
            }
        }
        return ServerConfig.load(file: fileValues, environment: environment, flags: flags)
    }

    /// Runs a command; returns the process exit code. `serve` blocks until SIGINT/SIGTERM.
    public static func run(_ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) -> Int32 {
        guard arguments.count >= 2 else {
            print(usage)
            return 64
        }
        let command = arguments[1]
        switch command {
        case "--version", "version":
            print(versionLine)
            return 0
        case "help", "--help", "-h":
            if arguments.count > 2 {
                guard let own = commandUsages[arguments[2]] else {
                    printError("unknown command '\(arguments[2])'\n\(usage)")
                    return 64
                }
                print(own)
            } else {
                print(usage)
            }
            return 0
        default:
            break
        }
        // Before anything else reads the configuration or a key: help must work on a machine
        // where neither is set up yet.
        if wantsHelp(arguments.dropFirst(2)), let own = commandUsages[command] {
            print(own)
            return 0
        }
        if command == "bench" { return bench(arguments: arguments) }
        if command == "apikey" { return APIKeyCommand.run(arguments, environment: environment) }
        if command == "admin" { return AdminCommand.run(arguments, environment: environment) }
        let flags: [String: String]
        switch parseFlags(arguments.dropFirst(2)) {
        case .failure(let problems):
            printError(problems.description)
            return 64
        case .success(let parsed): flags = parsed
        }
        switch command {
        case "serve": return serve(flags: flags, environment: environment, executable: arguments[0])
        case "token": return token(flags: flags, environment: environment)
        case "migrate": return migrate(flags: flags, environment: environment)
        case "backup": return backup(flags: flags, environment: environment)
        case "config":
            guard case .success(let config) = loadConfig(flags: flags, environment: environment).mapError({ error -> ConfigProblems in
                printError(error.description)
                return error
            }) else { return 78 }
            for (key, value) in config.summary { print("\(key) = \(value)") }
            return 0
        case "config-table":
            // The key table of docs/configuration.md, regenerated from the source of truth.
            print(ServerConfig.markdownTable)
            return 0
        default:
            printError("unknown command '\(command)'\n\(usage)")
            return 64
        }
    }

    /// `calling-server <command> <action> [--flag value]…`: the action and its flags; nil (after
    /// printing the problem and `usage`) when there is no action or a flag is malformed.
    static func actionAndFlags(_ arguments: [String], usage: String) -> (action: String, flags: [String: String])? {
        guard arguments.count >= 3 else {
            printError(usage)
            return nil
        }
        switch parseFlags(arguments.dropFirst(3)) {
        case .failure(let problems):
            printError(problems.description + "\n" + usage)
            return nil
        case .success(let flags):
            return (arguments[2], flags)
        }
    }

    public static func printError(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    private static func serve(flags: [String: String], environment: [String: String], executable: String) -> Int32 {
        let config: ServerConfig
        switch loadConfig(flags: flags, environment: environment) {
        case .failure(let problems):
            printError(problems.description)
            return 78  // EX_CONFIG
        case .success(let loaded): config = loaded
        }
        let logger = Logger(label: "server", level: config.logLevel, handler: StderrLogHandler(format: config.logFormat))
        // Signals are handled on a dispatch queue; the default action must be off first.
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        signal(SIGPIPE, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        let app: ServerApp
        do {
            app = try ServerApp(config: config, logger: logger)
            try app.start()
        } catch StoreError.damaged(let path, let findings) {
            // Serving from a damaged file would look healthy and fail every chat (issue 37).
            logger.critical("store damaged; refusing to start", [
                "path": path, "found": findings.prefix(5).joined(separator: "; "),
                "action": "stop, move the file and its -wal and -shm aside, and restore the newest copy made by `calling-server backup` (docs/operations.md, Backup)",
            ])
            return 65  // EX_DATAERR
        } catch {
            printError("calling-server: cannot start: \(error)")
            return 1
        }
        // Machine-readable line for scripts and tests that start the server on port 0.
        // Written unbuffered: scripts wait for this line before connecting.
        let banner = "calling-server listening on \(config.tlsEnabled ? "https" : "http")://\(config.host):\(app.port)\n"
            + "mint a token: \(mintCommand(executable: executable, flags: flags, environment: environment, config: config))\n"
        FileHandle.standardOutput.write(Data(banner.utf8))
        if config.printDemoLinks {
            // Standard output only, never the log: these links carry live tokens.
            do {
                let links = try DemoLinks.text(config: config, port: app.port, servePages: config.servePages)
                FileHandle.standardOutput.write(Data(links.utf8))
            } catch {
                printError("calling-server: cannot mint demo tokens: \(error)")
            }
        }
        let done = DispatchSemaphore(value: 0)
        let signalQueue = DispatchQueue(label: "signals")
        var sources: [DispatchSourceSignal] = []
        for signalNumber in [SIGINT, SIGTERM] {
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: signalQueue)
            source.setEventHandler {
                logger.info("shutting down", ["signal": "\(signalNumber)"])
                done.signal()
            }
            source.resume()
            sources.append(source)
        }
        // SIGHUP reloads the TLS certificate (docs/operations.md, "TLS"); without TLS it is ignored.
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: signalQueue)
        hangup.setEventHandler {
            guard config.tlsEnabled else {
                logger.info("SIGHUP ignored: TLS is off, nothing to reload")
                return
            }
            do {
                try app.reloadTLSCertificate()
            } catch {
                logger.error("tls certificate reload failed; still serving the previous certificate", ["error": "\(error)"])
            }
        }
        hangup.resume()
        done.wait()
        hangup.cancel()
        // A second signal while draining skips the grace period.
        for source in sources {
            source.setEventHandler { _exit(0) }
        }
        app.stop()
        return 0
    }

    /// The banner's `token` command line: the same config file and the flags that decide which
    /// secret signs and what `aud` a token carries, so the printed command mints a token this
    /// server accepts when copied as is.
    static func mintCommand(executable: String, flags: [String: String], environment: [String: String], config: ServerConfig) -> String {
        var words = [executable, "token"]
        if let file = flags["config"] ?? environment["CALLING_CONFIG"] { words += ["--config", file] }
        words += ["--data-dir", config.dataDir]
        for key in ["jwt_secret_file", "jwt_audience"] {
            if let value = flags[key] ?? flags[key.replacingOccurrences(of: "_", with: "-")] {
                words += ["--" + key.replacingOccurrences(of: "_", with: "-"), value]
            }
        }
        words += ["--room", "demo", "--peer", "alice"]
        return words.map(shellQuoted).joined(separator: " ")
    }

    /// `word` as one POSIX shell word: as is when it is plain, else in single quotes.
    static func shellQuoted(_ word: String) -> String {
        let plain = !word.isEmpty && word.unicodeScalars.allSatisfy {
            CharacterSet.alphanumerics.contains($0) || "-_./:=@%+,".unicodeScalars.contains($0)
        }
        return plain ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// The load generators are not part of the server library (bench/README.md): `bench …` runs the
    /// `calling-bench` executable built beside this one, with the same arguments.
    private static func bench(arguments: [String]) -> Int32 {
        let executable = URL(fileURLWithPath: arguments[0]).deletingLastPathComponent().appendingPathComponent("calling-bench").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            printError("bench: \(executable) not found; build it with `swift build --product calling-bench`")
            return 1
        }
        var argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments.dropFirst(2)).map { strdup($0) } + [nil]
        execv(executable, &argv)
        printError("bench: cannot run \(executable): \(String(cString: strerror(errno)))")
        return 1
    }

    private static func token(flags: [String: String], environment: [String: String]) -> Int32 {
        var flags = flags
        let tokenKeys = ["room", "peer", "role", "name", "call", "scope", "ttl", "audience", "max-peers", "jti", "moderator"]
        var options: [String: String] = [:]
        for key in tokenKeys { options[key] = flags.removeValue(forKey: key) }
        let config: ServerConfig
        switch loadConfig(flags: flags, environment: environment) {
        case .failure(let problems):
            printError(problems.description)
            return 78
        case .success(let loaded): config = loaded
        }
        var problems: [String] = []
        if options["peer"]?.isEmpty ?? true { problems.append("--peer is required") }
        let scope = (options["scope"] ?? "room").split(separator: " ").map(String.init)
        if options["room"]?.isEmpty ?? true, scope.contains("room") { problems.append("--room is required for a room token") }
        // The same id rule as POST /v1/tokens and the join (IdentifierRule).
        for (key, limit) in [("peer", config.maxPeerIDBytes), ("room", IdentifierRule.maxBytes), ("call", IdentifierRule.maxBytes)] {
            if let value = options[key], !value.isEmpty, let violation = IdentifierRule.violation(of: value, maxBytes: limit) {
                problems.append("--\(key) \(violation)")
            }
        }
        var ttl = config.tokenTTLSeconds
        if let raw = options["ttl"] {
            if let parsed = Int(raw), parsed > 0 { ttl = parsed } else { problems.append("--ttl must be a positive number of seconds") }
        }
        var maxPeers: Int?
        if let raw = options["max-peers"] {
            if let parsed = Int(raw), (0...1_000_000).contains(parsed) { maxPeers = parsed } else {
                problems.append("--max-peers must be an integer from 0 (unlimited) to 1000000")
            }
        }
        if let raw = options["moderator"], raw != "true", raw != "false" { problems.append("--moderator must be true or false") }
        guard problems.isEmpty, let peer = options["peer"] else {
            printError(problems.joined(separator: "\n"))
            return 64
        }
        do {
            let secret = try SigningSecret.load(config: config, generateIfMissing: false)
            let issuer = try TokenIssuer(hs256Secret: secret)
            let now = Date()
            let claims = PeerTokenClaims(
                sub: PeerID(peer), roomID: options["room"].map { RoomID($0) }, callID: options["call"].map { CallID($0) },
                role: options["role"] ?? "peer", name: options["name"], scope: scope,
                audience: options["audience"] ?? config.jwtAudience, issuedAt: now,
                expiresAt: now.addingTimeInterval(TimeInterval(ttl)), tokenID: options["jti"] ?? CallsAPI.newTokenID(),
                maxPeers: maxPeers, moderator: options["moderator"] == "true")
            print(try issuer.issue(claims))
            return 0
        } catch {
            printError("calling-server token: \(error)")
            return 1
        }
    }

    /// `backup --to FILE`: SQLite's online backup of `<data_dir>/calling.sqlite` while the server runs,
    /// then `PRAGMA integrity_check` on the copy. Never migrates: the copy has the live schema version.
    private static func backup(flags: [String: String], environment: [String: String]) -> Int32 {
        var flags = flags
        guard let target = flags.removeValue(forKey: "to"), !target.isEmpty else {
            printError("usage: calling-server backup --to FILE [--data-dir DIR | --config FILE]")
            return 64
        }
        let config: ServerConfig
        switch loadConfig(flags: flags, environment: environment) {
        case .failure(let problems):
            printError(problems.description)
            return 78
        case .success(let loaded): config = loaded
        }
        guard FileManager.default.fileExists(atPath: config.databasePath) else {
            printError("calling-server backup: no database at \(config.databasePath)")
            return 66
        }
        let started = Date()
        do {
            let source = try SQLiteConnection(path: config.databasePath, options: .init(busyTimeoutMs: Int32(config.sqliteBusyTimeoutMs)))
            defer { source.close() }
            let pages = try source.backup(to: target)
            let copy = try SQLiteConnection(path: target, options: .init(readOnly: true))
            defer { copy.close() }
            let integrity = try copy.query("PRAGMA integrity_check") { $0.text(0) }
            guard integrity == ["ok"] else {
                printError("calling-server backup: the copy at \(target) fails integrity_check: \(integrity.prefix(5).joined(separator: "; "))")
                return 1
            }
            let version = try copy.userVersion()
            let milliseconds = Int(Date().timeIntervalSince(started) * 1000)
            print("backup of \(config.databasePath) written to \(target): \(pages) pages, schema version \(version), integrity ok, \(milliseconds) ms")
            return 0
        } catch {
            printError("calling-server backup: \(error)")
            return 1
        }
    }

    private static func migrate(flags: [String: String], environment: [String: String]) -> Int32 {
        let config: ServerConfig
        switch loadConfig(flags: flags, environment: environment) {
        case .failure(let problems):
            printError(problems.description)
            return 78
        case .success(let loaded): config = loaded
        }
        do {
            try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
            var options = config.chatStoreOptions
            options.migrateOnOpen = false
            let store = try ChatStore.open(path: config.databasePath, options: options)
            defer { store.close() }
            let applied = try store.migrate()
            print(applied.isEmpty ? "schema is up to date" : "applied: \(applied.joined(separator: ", "))")
            if !config.databaseURL.isEmpty {
                let chat = try PostgresChatStore.open(url: config.databaseURL, options: .init(migrateOnOpen: false))
                defer { chat.close() }
                let appliedThere = try chat.migrate()
                let target = ServerConfig.redactingPassword(config.databaseURL)
                print(appliedThere.isEmpty ? "postgres schema is up to date (\(target))"
                                           : "postgres applied: \(appliedThere.joined(separator: ", ")) (\(target))")
            }
            return 0
        } catch {
            printError("calling-server migrate: \(error)")
            return 1
        }
    }
}
