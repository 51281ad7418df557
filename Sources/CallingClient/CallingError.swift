import CallingEndpoints
import CallingProtocol
import Foundation

/// Which check a server certificate failed (`CallingError.Kind.certificateRejected`).
public enum CertificateFailure: String, Equatable, Sendable {
    /// The certificate does not name the URL's host (DNS name, or IP address for an IP URL).
    case hostNameMismatch
    /// Its chain does not end at a trusted CA: the system store, or `tlsCAFile` when set.
    case untrustedIssuer
    /// Its validity period has ended.
    case expired
    /// Its validity period has not begun (a clock is wrong on one side, or the certificate is too new).
    case notYetValid
    /// Another check failed; the error's `reason` has OpenSSL's words.
    case other
}

/// An SDK error: a matchable `kind`, whether retrying can help (`isRetryable`), and the server's
/// own codes where it gave one. Compare with the static members (`error == .tokenExpired`) or
/// switch over `kind`.
///
/// ```swift
/// do { try await client.connect() } catch let error as CallingError {
///     switch error.kind {
///     case .connectFailed(401, let code?, _): print("token refused: \(code)")   // token_expired…
///     case .network(let host, let port, _): print("\(host):\(port) unreachable")
///     default: print(error.localizedDescription)
///     }
/// }
/// ```
public struct CallingError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong. New cases may be added in later versions: keep a `default` branch.
    public enum Kind: Equatable, Sendable {
        /// A sender was used while the client is not `connected`.
        case notConnected
        /// The server answered the WebSocket upgrade with `status` instead of 101. `code` is the
        /// server's problem code (`token_expired`, `token_wrong_scope`, `at_capacity`… in
        /// docs/protocol.md) when it could be read; `message` says what it means.
        case connectFailed(status: Int, code: String?, message: String)
        /// No HTTP answer from `host:port`: refused, unreachable, reset before the answer.
        case network(host: String, port: Int, reason: String)
        /// The server's certificate failed verification: `failure` says which check, `reason` says
        /// it in words with OpenSSL's reason. Not retryable: it takes a change on the server or in
        /// the trust settings (`tlsCAFile`).
        case certificateRejected(host: String, port: Int, failure: CertificateFailure, reason: String)
        /// A setting cannot be used as given (a `tlsCAFile` that is missing, unreadable or holds no
        /// PEM certificate; a TLS option or a WebSocket the platform's transport cannot serve);
        /// never retried.
        case invalidConfiguration(String)
        /// The socket closed after it was open. `code` nil: it dropped without a close frame.
        case closed(code: UInt16?, reason: String)
        /// The server refused a frame (`error` frame or failed `chat-ack`): the numeric code of
        /// docs/protocol.md "Error codes", its stable `name` (`chat_empty`…) and the message.
        case server(code: Int, name: String?, message: String)
        /// Nothing arrived in time: `welcome`, a `chat-ack`, the presence snapshot.
        case timedOut(String)
        /// The token cannot be used as it is (e.g. it has no `room_id` claim for `fetchMessages`).
        case invalidToken(String)
        /// The token provider threw something that is not a `CallingError`.
        case tokenProviderFailed(String)
        /// A REST request was answered with a problem: `code` is its problem code.
        case http(status: Int, code: String?, detail: String)
        /// The call is not valid in the client's current state (e.g. `connect()` twice).
        case invalidState(String)
        /// The `MediaEngine` failed or is missing.
        case media(String)
        /// A call's media connection was lost and did not come back, or failed.
        case disconnected(String)
        /// A URL whose scheme the SDK cannot serve (only ws, wss, http, https), or without a host.
        case unsupportedURL(String)
        /// A relay (`offer`, `answer`, `candidate`, `data`) to `peer`, which is in its reconnect
        /// grace, was dropped: `limit` frames (`SignalingOptions.heldRelayLimit`) already wait
        /// for it. `code` is `relay_overflow`, as in the browser SDK.
        case relayOverflow(peer: PeerID, frameType: String, limit: Int)

        /// A refused frame with the name of its numeric code.
        static func server(code: Int, message: String) -> Kind {
            .server(code: code, name: ErrorCode(rawValue: code)?.name, message: message)
        }
    }

    /// What went wrong.
    public let kind: Kind

    /// Wraps `kind`.
    public init(_ kind: Kind) { self.kind = kind }

    /// A socket that ended before `open`: the upgrade's HTTP status, or no answer at all.
    static func socketFailed(status: Int?, message: String, host: String, port: Int, code: String? = nil) -> CallingError {
        guard let status else { return transportFailed(message: message, code: code, host: host, port: port) }
        let meaning = code.flatMap { Self.problemMeanings[$0] }
        return CallingError(.connectFailed(status: status, code: code,
                                           message: meaning ?? HTTPResponseText.reason(status)))
    }

    /// No answer from `host:port`; `code` is the transport's `ClientFailureCode` when it knows why.
    static func transportFailed(message: String, code: String?, host: String, port: Int) -> CallingError {
        let failure: CertificateFailure
        switch code {
        case ClientFailureCode.caFileUnusable?: return CallingError(.invalidConfiguration("tlsCAFile: \(message)"))
        case ClientFailureCode.transportUnsupported?, ClientFailureCode.tlsOptionsUnsupported?:
            return CallingError(.invalidConfiguration(message))
        case ClientFailureCode.hostNameMismatch?: failure = .hostNameMismatch
        case ClientFailureCode.untrustedIssuer?: failure = .untrustedIssuer
        case ClientFailureCode.certificateExpired?: failure = .expired
        case ClientFailureCode.certificateNotYetValid?: failure = .notYetValid
        case ClientFailureCode.certificateInvalid?: failure = .other
        default: return CallingError(.network(host: host, port: port, reason: message))
        }
        return CallingError(.certificateRejected(host: host, port: port, failure: failure, reason: message))
    }

    /// Throws `invalidConfiguration` when `tls.caFile` is set for a TLS endpoint but cannot be
    /// read: checked before connecting, so the app hears about its setting instead of a network
    /// error it would retry.
    static func checkTLSFiles(_ tls: TLSClientOptions, for endpoint: ClientEndpoint) throws(CallingError) {
        guard endpoint.usesTLS, let caFile = tls.caFile else { return }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: caFile, isDirectory: &isDirectory) else {
            throw CallingError(.invalidConfiguration("tlsCAFile: \(caFile) does not exist"))
        }
        guard !isDirectory.boolValue, let contents = FileManager.default.contents(atPath: caFile) else {
            throw CallingError(.invalidConfiguration("tlsCAFile: \(caFile) is not a readable file"))
        }
        // OpenSSL skips what is not PEM and would trust nothing: every server would then look
        // untrusted, which blames the server for the app's setting.
        guard contents.range(of: Data("-----BEGIN CERTIFICATE-----".utf8)) != nil else {
            throw CallingError(.invalidConfiguration("tlsCAFile: \(caFile) holds no PEM certificate"))
        }
    }

    /// What the upgrade refusals of docs/protocol.md mean, for `connectFailed`'s message.
    static let problemMeanings: [String: String] = [
        "token_missing": "no token was sent",
        "token_malformed": "the token is not a JWT",
        "token_bad_signature": "the token's signature does not verify (another secret or key)",
        "token_unsupported_algorithm": "the token is signed with an algorithm the server does not accept",
        "token_verification_failed": "the token could not be verified",
        "token_missing_claim": "the token lacks a required claim",
        "token_invalid_claim": "a claim of the token has an invalid value",
        "token_expired": "the token has expired; connect again with a new one",
        "token_not_yet_valid": "the token is not valid yet",
        "token_wrong_audience": "the token is for another audience",
        "token_wrong_scope": "the token's scope does not allow this endpoint",
        "token_wrong_role": "the token's role does not allow this endpoint",
        "token_no_room": "the token names no room",
        "bad_last_seq": "last_seq is not a valid sequence number",
        "bad_queues": "the queues parameter is not a valid list",
        "at_capacity": "the server holds as many peers as it can; retry later",
        "shutting_down": "the server is shutting down; retry later",
        "origin_not_allowed": "this Origin is not allowed",
    ]

    /// Another connection with the same peer id took our seat (close 4400).
    public static let replaced = CallingError(.closed(code: CloseCode.replaced.rawValue, reason: "replaced"))
    /// The token expired while connected (close 4401).
    public static let tokenExpired = CallingError(.closed(code: CloseCode.tokenExpired.rawValue, reason: "token expired"))
    /// A sender was used outside `connected`.
    public static let notConnected = CallingError(.notConnected)

    /// Whether trying again (reconnecting, resending) can succeed without the app changing anything.
    public var isRetryable: Bool {
        switch kind {
        case .notConnected, .timedOut, .network, .tokenProviderFailed, .disconnected: return true
        case .connectFailed(let status, _, _):
            return status == 429 || status >= 500
        case .closed(let code, _):
            guard let code else { return true }  // dropped without a close frame
            return !(CloseCode(rawValue: code)?.isTerminal ?? (code >= 4400 && code < 5000))
        case .server(let code, _, _):
            return ErrorCode(rawValue: code)?.isTemporary ?? false
        case .invalidToken, .invalidState, .media, .unsupportedURL, .certificateRejected, .invalidConfiguration,
             .relayOverflow:
            return false
        case .http(let status, _, _):
            return status == 429 || status == 502 || status == 503
        }
    }

    /// The server's close code, when the error is a close.
    public var closeCode: UInt16? {
        if case .closed(let code, _) = kind { return code }
        return nil
    }

    /// The server's numeric error code, when the server refused a frame.
    public var serverCode: Int? {
        if case .server(let code, _, _) = kind { return code }
        return nil
    }

    /// The server's problem code (`token_expired`, `no_answering_peer`…) of a refused upgrade or
    /// REST request, the name of a refused frame's code (`chat_empty`), or `relay_overflow`.
    public var code: String? {
        switch kind {
        case .connectFailed(_, let code, _), .http(_, let code, _): return code
        case .server(_, let name, _): return name
        case .relayOverflow: return "relay_overflow"
        default: return nil
        }
    }

    /// The HTTP status, when a request or upgrade was refused.
    public var httpStatus: Int? {
        switch kind {
        case .connectFailed(let status, _, _): return status
        case .http(let status, _, _): return status
        default: return nil
        }
    }

    /// Close errors are equal by close code; refused frames by numeric code; the rest by value.
    public static func == (lhs: CallingError, rhs: CallingError) -> Bool {
        switch (lhs.kind, rhs.kind) {
        case (.closed(let a, _), .closed(let b, _)): return a == b
        case (.server(let a, _, let m), .server(let b, _, let n)): return a == b && m == n
        default: return lhs.kind == rhs.kind
        }
    }

    /// For people: what happened, with the server's code and words where it gave them.
    public var description: String {
        switch kind {
        case .notConnected: return "not connected to the server"
        case .connectFailed(let status, let code, let message):
            return "the server refused the connection: HTTP \(status)\(code.map { " \($0)" } ?? ""): \(message)"
        case .network(let host, let port, let reason): return "cannot reach \(host):\(port): \(reason)"
        case .certificateRejected(let host, let port, _, let reason): return "refused the server \(host):\(port): \(reason)"
        case .invalidConfiguration(let why): return "invalid configuration: \(why)"
        case .closed(let code?, let reason):
            return "the server closed the connection (\(code)\(reason.isEmpty ? "" : " " + reason))"
        case .closed(nil, let reason):
            return "the connection dropped without a close frame\(reason.isEmpty ? "" : ": " + reason)"
        case .server(let code, let name, let message):
            return "the server refused a frame: \(code)\(name.map { " \($0)" } ?? ""): \(message)"
        case .timedOut(let what): return "timed out waiting for \(what)"
        case .invalidToken(let why): return "invalid token: \(why)"
        case .tokenProviderFailed(let why): return "the token provider failed: \(why)"
        case .http(let status, let code, let detail): return "HTTP \(status)\(code.map { " \($0)" } ?? ""): \(detail)"
        case .invalidState(let why): return "invalid state: \(why)"
        case .media(let why): return "media: \(why)"
        case .disconnected(let why): return "call disconnected: \(why)"
        case .unsupportedURL(let why): return "unsupported URL: \(why)"
        case .relayOverflow(let peer, let type, let limit):
            return "\(type) to \(peer) dropped: \(peer) is reconnecting and \(limit) frames already wait for it"
        }
    }

    /// `LocalizedError`: the same text as `description` (English; apps localise by `kind`).
    public var errorDescription: String? { description }
}

/// Reason phrases for the statuses an upgrade can be refused with.
enum HTTPResponseText {
    static func reason(_ status: Int) -> String {
        switch status {
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 426: return "Upgrade Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 503: return "Service Unavailable"
        default: return "HTTP \(status)"
        }
    }
}
