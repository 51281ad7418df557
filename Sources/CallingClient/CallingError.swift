import CallingProtocol

/// An SDK error. A struct around a private enum so cases can be added without breaking apps;
/// compare with the static members (`error == .tokenExpired`) and ask `isRetryable`.
public struct CallingError: Error, Equatable, Sendable, CustomStringConvertible {
    enum Kind: Equatable, Sendable {
        case notConnected
        case connectFailed(status: Int?, message: String)
        case closed(code: UInt16?, reason: String)
        case server(code: Int, message: String)
        case timedOut(String)
        case invalidToken(String)
        case http(status: Int, code: String?, detail: String)
        /// The call is not valid in the client's current state (e.g. `connect()` twice).
        case invalidState(String)
        /// The `MediaEngine` failed or is missing.
        case media(String)
        /// A URL whose scheme the SDK cannot serve (only ws, wss, http, https), or without a host.
        case unsupportedURL(String)
    }

    let kind: Kind

    init(_ kind: Kind) { self.kind = kind }

    public static let notConnected = CallingError(.notConnected)
    public static let tokenExpired = CallingError(.closed(code: CloseCode.tokenExpired.rawValue, reason: "token expired"))
    public static let replaced = CallingError(.closed(code: CloseCode.replaced.rawValue, reason: "replaced"))

    /// Whether trying again (reconnecting, resending) can succeed without the app changing anything.
    public var isRetryable: Bool {
        switch kind {
        case .notConnected, .timedOut: return true
        case .connectFailed(let status, _):
            guard let status else { return true }  // network failure
            return status == 503 || status == 429 || status >= 500
        case .closed(let code, _):
            guard let code else { return true }  // dropped without a close frame
            return !(CloseCode(rawValue: code)?.isTerminal ?? (code >= 4400 && code < 5000))
        case .server(let code, _):
            return ErrorCode(rawValue: code)?.isTemporary ?? false
        case .invalidToken, .invalidState, .media, .unsupportedURL:
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
        if case .server(let code, _) = kind { return code }
        return nil
    }

    /// The HTTP status, when a request or upgrade was refused.
    public var httpStatus: Int? {
        switch kind {
        case .connectFailed(let status, _): return status
        case .http(let status, _, _): return status
        default: return nil
        }
    }

    public static func == (lhs: CallingError, rhs: CallingError) -> Bool {
        switch (lhs.kind, rhs.kind) {
        case (.closed(let a, _), .closed(let b, _)): return a == b
        default: return lhs.kind == rhs.kind
        }
    }

    public var description: String {
        switch kind {
        case .notConnected: return "not connected"
        case .connectFailed(let status, let message): return "connect failed (\(status.map(String.init) ?? "network")): \(message)"
        case .closed(let code, let reason): return "closed (\(code.map(String.init) ?? "no close frame")): \(reason)"
        case .server(let code, let message): return "server error \(code): \(message)"
        case .timedOut(let what): return "timed out waiting for \(what)"
        case .invalidToken(let why): return "invalid token: \(why)"
        case .http(let status, let code, let detail): return "HTTP \(status) \(code ?? ""): \(detail)"
        case .invalidState(let why): return "invalid state: \(why)"
        case .media(let why): return "media: \(why)"
        case .unsupportedURL(let why): return "unsupported URL: \(why)"
        }
    }
}
