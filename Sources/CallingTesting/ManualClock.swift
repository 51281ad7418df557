import CallingCore

/// A clock tests move by hand, so time-dependent behaviour (rate limits, token expiry, idle
/// timeouts) is asserted without sleeping. Milliseconds, like the rest of CallingCore.
public final class ManualClock: Sendable {
    private let milliseconds: Locked<Int64>

    public init(now: Int64 = 1_700_000_000_000) {
        milliseconds = Locked(now)
    }

    /// The current time in milliseconds.
    public var now: Int64 { milliseconds.withLock { $0 } }

    /// Moves time forward (or, with a negative value, back: useful for clock-skew tests).
    public func advance(byMs delta: Int64) {
        milliseconds.withLock { $0 += delta }
    }

    /// Sets the time outright.
    public func set(_ now: Int64) {
        milliseconds.withLock { $0 = now }
    }
}
