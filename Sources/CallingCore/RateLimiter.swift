/// A token bucket per connection: `burst` frames at once, refilled at `perSecond`.
/// Counts consecutive refusals so a client that keeps flooding can be closed rather than answered.
public struct RateLimiter: Sendable, Equatable {
    public let perSecond: Double
    public let burst: Double
    private var tokens: Double
    private var last: Millis?
    public private(set) var consecutiveDrops = 0

    public init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
        self.tokens = max(1, burst)
    }

    /// Whether one more frame may pass at `now`.
    public mutating func admit(now: Millis) -> Bool {
        if let last, now > last {
            tokens = min(burst, tokens + Double(now - last) * perSecond / 1000)
        }
        last = max(last ?? now, now)
        if tokens >= 1 {
            tokens -= 1
            consecutiveDrops = 0
            return true
        }
        consecutiveDrops += 1
        return false
    }
}
