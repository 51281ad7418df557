import CallingAuth
import CallingCore
import CallingPostgres
import CallingStore
import Foundation

/// `calling-server apikey create|list|revoke`: manages the keys of the server-to-server routes
/// (`/v1/calls`, `/v1/tokens`: scope `calls`) and of the admin API (`/v1/admin/…`: scope `admin`).
/// Works on the database directly (the SQLite file, or PostgreSQL with `database_url`, where the
/// keys are the whole cluster's), so it also works while the server runs: the server looks keys up
/// per request, so a revocation takes effect on the next request.
enum APIKeyCommand {
    static let usage = """
        usage: calling-server apikey create --name NAME [--scope calls|admin|"calls admin"]
                                                          print a new key (shown only this once); scope defaults to calls
               calling-server apikey list                 list keys (id, name, scope, created, revoked)
               calling-server apikey revoke --id ID       revoke a key
        (plus the config flags of serve, e.g. --data-dir DIR)
        """

    static func run(_ arguments: [String], environment: [String: String]) -> Int32 {
        guard case (let action, var flags)? = CallingCommand.actionAndFlags(arguments, usage: usage) else { return 64 }
        let name = flags.removeValue(forKey: "name")
        let id = flags.removeValue(forKey: "id")
        let scopeText = flags.removeValue(forKey: "scope")
        let config: ServerConfig
        switch CallingCommand.loadConfig(flags: flags, environment: environment) {
        case .failure(let problems):
            CallingCommand.printError(problems.description)
            return 78
        case .success(let loaded): config = loaded
        }
        switch action {
        case "create":
            guard let name, !name.trimmingCharacters(in: .whitespaces).isEmpty else {
                CallingCommand.printError("apikey create: --name is required\n\(usage)")
                return 64
            }
            let scopes = (scopeText ?? APIKeyRecord.callsScope).split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
            guard !scopes.isEmpty, scopes.allSatisfy(APIKeyRecord.knownScopes.contains) else {
                CallingCommand.printError("apikey create: --scope must be one or more of \(APIKeyRecord.knownScopes.joined(separator: ", "))")
                return 64
            }
            return withRepository(config) { keys in
                let plaintext = APIKey.generate()
                let record = APIKeyRecord(id: "ak_" + SecureRandom.token(bytes: 9), name: name, hash: APIKey.hash(plaintext),
                                          createdMs: Self.nowMs(), scopes: scopes)
                try keys.wait { keys.insertAPIKey(record, completion: $0) }
                // The key alone on stdout, so `KEY=$(calling-server apikey create --name x)` works.
                print(plaintext)
                CallingCommand.printError("created API key \(record.id) (\(name), scope \(scopes.joined(separator: " "))); the key above is not shown again")
                return 0
            }
        case "list":
            return withRepository(config) { keys in
                print(["ID", "NAME", "SCOPE", "CREATED", "REVOKED"].joined(separator: "\t"))
                for key in try keys.wait({ keys.apiKeys(completion: $0) }) {
                    print([key.id, key.name, key.scopes.joined(separator: " "), Self.timestamp(key.createdMs),
                           key.revokedMs.map(Self.timestamp) ?? "-"]
                        .joined(separator: "\t"))
                }
                return 0
            }
        case "revoke":
            guard let id, !id.isEmpty else {
                CallingCommand.printError("apikey revoke: --id is required\n\(usage)")
                return 64
            }
            return withRepository(config) { keys in
                switch try keys.wait({ keys.revokeAPIKey(id: id, nowMs: Self.nowMs(), completion: $0) }) {
                case .revoked(let key):
                    print("revoked \(key.id) (\(key.name))")
                    return 0
                case .alreadyRevoked(let key):
                    print("\(key.id) was already revoked at \(Self.timestamp(key.revokedMs ?? 0))")
                    return 0
                case .notFound:
                    CallingCommand.printError("apikey revoke: no key with id '\(id)'")
                    return 1
                }
            }
        default:
            CallingCommand.printError("apikey: unknown action '\(action)'\n\(usage)")
            return 64
        }
    }

    /// Opens (and migrates) the database the server keeps keys in, runs `body` on it, closes it;
    /// errors become exit code 1.
    private static func withRepository(_ config: ServerConfig, _ body: (any AccessPersistence) throws -> Int32) -> Int32 {
        do {
            if !config.databaseURL.isEmpty {
                let store = try PostgresChatStore.open(url: config.databaseURL)
                defer { store.close() }
                return try body(store)
            }
            try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
            let store = try ChatStore.open(path: config.databasePath, options: config.chatStoreOptions)
            defer { store.close() }
            return try body(store)
        } catch {
            CallingCommand.printError("calling-server apikey: \(error)")
            return 1
        }
    }

    private static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private static func timestamp(_ ms: Int64) -> String {
        Date(timeIntervalSince1970: Double(ms) / 1000).formatted(.iso8601)
    }
}
