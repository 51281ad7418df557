import CallingAuth
import CallingCore
import Foundation

/// The ICE servers `GET /v1/ice` hands to a peer: the `turn_urls` with short-lived credentials in
/// coturn's REST format (`use-auth-secret`), and the `stun_urls` as a separate entry without any.
///
/// Built once at start-up and immutable afterwards, so the service thread reads it without locks.
struct ICEService: Sendable {
    let turnURLs: [String]
    let stunURLs: [String]
    /// coturn's `static-auth-secret`. Nil when no TURN is configured; never logged or shown.
    private let turnSecret: String?
    let ttlSeconds: Int

    /// No servers at all: what `GET /v1/ice` answers until `ServerApp` installs the configured one.
    init() {
        turnURLs = []
        stunURLs = []
        turnSecret = nil
        ttlSeconds = ServerConfig().iceTTLSeconds
    }

    /// Reads the TURN secret (`CALLING_TURN_SECRET`, else `turn_secret_file` with surrounding
    /// whitespace trimmed) and refuses a configuration whose TURN credentials coturn could not check.
    init(config: ServerConfig) throws(ICEConfigError) {
        var secret: String?
        if let fromEnvironment = config.turnSecret {
            guard !fromEnvironment.isEmpty else { throw .emptySecret("CALLING_TURN_SECRET") }
            secret = fromEnvironment
        } else if let path = config.turnSecretFile {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw .unreadableSecretFile(path) }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !trimmed.isEmpty else { throw .emptySecret(path) }
            secret = trimmed
        }
        if !config.turnURLList.isEmpty, secret == nil { throw .missingSecret }
        turnURLs = config.turnURLList
        stunURLs = config.stunURLList
        turnSecret = turnURLs.isEmpty ? nil : secret
        ttlSeconds = config.iceTTLSeconds
    }

    /// The `GET /v1/ice` body for `peer` at `now`: TURN entry first (when configured), then STUN.
    /// `expires_at` is the expiry inside the TURN username; without TURN it only says when to ask again.
    func answer(for peer: PeerID, now: Date) -> JSONValue {
        var servers: [JSONValue] = []
        var expiresAt = Int64((now.timeIntervalSince1970 + Double(ttlSeconds)).rounded(.down))
        if let turnSecret {
            let credentials = TurnCredentials.make(secret: turnSecret, peer: peer, ttl: TimeInterval(ttlSeconds), now: now)
            expiresAt = Int64(credentials.expiresAt.timeIntervalSince1970)
            servers.append(["urls": .array(turnURLs.map(JSONValue.string)), "username": .string(credentials.username),
                            "credential": .string(credentials.credential)])
        }
        if !stunURLs.isEmpty {
            servers.append(["urls": .array(stunURLs.map(JSONValue.string))])
        }
        return ["ice_servers": .array(servers), "ttl": .int(Int64(ttlSeconds)), "expires_at": .int(expiresAt)]
    }
}

/// Why the ICE configuration stops the start (exit 1).
enum ICEConfigError: Error, CustomStringConvertible {
    case missingSecret
    case unreadableSecretFile(String)
    case emptySecret(String)

    var description: String {
        switch self {
        case .missingSecret:
            return "turn_urls is set but there is no TURN secret: put coturn's static-auth-secret in CALLING_TURN_SECRET or in the file named by turn_secret_file"
        case .unreadableSecretFile(let path): return "cannot read the TURN secret file \(path)"
        case .emptySecret(let source): return "the TURN secret from \(source) is empty"
        }
    }
}

extension ServerConfig {
    /// `turn_urls` entries must be `turn:`/`turns:` URIs (RFC 7065), `stun_urls` entries
    /// `stun:`/`stuns:` (RFC 7064); anything else would reach browsers and fail there, one call at a time.
    var iceURLProblems: [String] {
        func check(_ urls: [String], key: String, schemes: [String]) -> [String] {
            urls.compactMap { url in
                let lowered = url.lowercased()
                let valid = schemes.contains { scheme in
                    lowered.hasPrefix(scheme + ":") && lowered.count > scheme.count + 1
                } && !url.contains(where: \.isWhitespace)
                return valid ? nil : "\(key): '\(url.prefix(200))' must start with \(schemes.map { $0 + ":" }.joined(separator: " or "))"
            }
        }
        return check(turnURLList, key: "turn_urls", schemes: ["turn", "turns"])
            + check(stunURLList, key: "stun_urls", schemes: ["stun", "stuns"])
    }
}
