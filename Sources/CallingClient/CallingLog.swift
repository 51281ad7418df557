import CallingLogging
#if canImport(CallingWebSocket)
import CallingWebSocket
#endif
import Foundation

/// How severe an SDK log line is.
public enum CallingLogLevel: Int, Sendable, Comparable, CaseIterable {
    case debug, info, warning, error

    /// Orders levels by severity.
    public static func < (lhs: CallingLogLevel, rhs: CallingLogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// The SDK's log: its own warnings (e.g. every connection made with
/// `insecureSkipTLSVerification`) and the lines of libwebsockets, which the SDK runs on.
///
/// By default libwebsockets' lines are dropped and the SDK's own warnings go to stderr. With a
/// handler, both go to it (at or above `level`) and nothing to stderr. Process-wide, like
/// libwebsockets' own log.
public enum CallingLog {
    /// The handler and its level, in a class so that the lock guards a reference, not a closure
    /// (see `Locked`).
    private final class Route: Sendable {
        let handler: (@Sendable (CallingLogLevel, String) -> Void)?
        let level: CallingLogLevel
        init(_ handler: (@Sendable (CallingLogLevel, String) -> Void)?, _ level: CallingLogLevel) {
            self.handler = handler
            self.level = level
        }
    }

    private static let route = Locked(Route(nil, .warning))

    /// Sends log lines at or above `level` to `handler`; nil restores the default.
    public static func setHandler(level: CallingLogLevel = .warning,
                                  _ handler: (@Sendable (_ level: CallingLogLevel, _ line: String) -> Void)?)
    {
        let replacement = Route(handler, level)
        route.withLock { $0 = replacement }
        install()
    }

    /// Routes libwebsockets' log here, once; every SDK client calls it before its first connection.
    static func install() {
        _ = routed
    }

    #if canImport(CallingWebSocket)
    private static let routed: Void = WebSocketClientLoop.routeLibraryLog { isError, line in
        CallingLog.write(isError ? .error : .warning, "libwebsockets: " + line, fromLibrary: true)
    }
    #else
    private static let routed: Void = ()  // URLSession has no library log to route
    #endif

    static func write(_ level: CallingLogLevel, _ line: String, fromLibrary: Bool) {
        let current = route.withLock { $0 }
        let (handler, minimum) = (current.handler, current.level)
        if let handler {
            if level >= minimum { handler(level, line) }
        } else if !fromLibrary, level >= .warning {
            FileHandle.standardError.write(Data("calling-client \(level): \(line)\n".utf8))
        }
    }

    /// The `Logger` the SDK's client loop writes through.
    static let logger = Logger(label: "calling-client", level: .debug, handler: Handler())

    private struct Handler: LogHandler {
        func log(_ record: LogRecord) {
            let level: CallingLogLevel
            switch record.level {
            case .trace, .debug: level = .debug
            case .info, .notice: level = .info
            case .warning: level = .warning
            case .error, .critical: level = .error
            }
            let metadata = record.metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            CallingLog.write(level, metadata.isEmpty ? record.message : "\(record.message) \(metadata)", fromLibrary: false)
        }
    }
}
