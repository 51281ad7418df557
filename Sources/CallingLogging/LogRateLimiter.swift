import Foundation

/// At most one log line per kind per interval, counting the ones held back.
///
/// A failing disk fails every request: logging each would flood the log (and, on a full disk, the
/// disk), logging none leaves the operator with only a counter. The first failure of a kind is
/// logged at once; the next ones within `interval` are counted, and the first one after it is logged
/// with that count (`suppressed`). A count whose kind never fails again is not reported.
///
/// A value type with the clock passed in, so that tests drive it with a manual clock.
public struct LogRateLimiter: Sendable, Equatable {
    /// What to do with one event.
    public enum Decision: Sendable, Equatable {
        /// Log it, saying how many of its kind were held back since the previous line of that kind.
        case log(suppressed: Int)
        /// Count it; it is reported with the next line of its kind.
        case suppress
    }

    /// Seconds between two lines of one kind.
    public let interval: Double
    private var lastLogged: [String: Double] = [:]
    private var suppressed: [String: Int] = [:]

    public init(interval: Double) {
        self.interval = max(0, interval)
    }

    /// Decides for one event of `kind` at `now` (seconds on any monotonic clock).
    public mutating func admit(kind: String, now: Double) -> Decision {
        if let last = lastLogged[kind], now - last < interval {
            suppressed[kind, default: 0] += 1
            return .suppress
        }
        lastLogged[kind] = now
        return .log(suppressed: suppressed.removeValue(forKey: kind) ?? 0)
    }
}

/// A `Logger` behind a `LogRateLimiter`, usable from any thread.
public final class RateLimitedLogger: Sendable {
    private let limiter: Locked<LogRateLimiter>
    private let logger: Logger
    private let clock: @Sendable () -> Double

    /// `clock` is in seconds; the default is the monotonic uptime clock.
    public init(logger: Logger, interval: Double,
                clock: @escaping @Sendable () -> Double = { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 })
    {
        self.logger = logger
        self.limiter = Locked(LogRateLimiter(interval: interval))
        self.clock = clock
    }

    /// Logs `message` with `metadata` plus `suppressed` (how many of this kind were held back since
    /// the last line), unless a line of `kind` was logged less than the interval ago.
    public func log(_ level: Logger.Level, kind: String, _ message: String, _ metadata: Logger.Metadata) {
        let now = clock()
        let decision = limiter.withLock { $0.admit(kind: kind, now: now) }
        guard case .log(let suppressed) = decision else { return }
        var metadata = metadata
        metadata["suppressed"] = String(suppressed)
        logger.log(level, message, metadata)
    }
}
