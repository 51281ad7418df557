/// Decides from periodic samples whether the service loop is stuck. Pure: the heartbeat thread
/// feeds it what it reads from the transport and acts on the verdict.
///
/// Two failure shapes (docs/operations.md, "Watchdog"):
/// - stalled: the loop stops draining its inbox (lws #2889 spins inside one `lws_service` call);
/// - spinning: the loop still turns, so the inbox drains, but it burns a core while handling
///   next to no socket events (lws retrying a failing `accept()` forever looked like this).
public struct LoopWatchdog: Sendable {
    public struct Sample: Sendable, Equatable {
        /// Seconds on a monotonic clock.
        public var time: Double
        /// Inbox drains so far.
        public var progress: Int64
        /// Socket callbacks so far (wake-ups excluded).
        public var callbacks: Int64
        /// CPU seconds the service thread has used so far, nil if unknown.
        public var cpuSeconds: Double?

        public init(time: Double, progress: Int64, callbacks: Int64, cpuSeconds: Double?) {
            self.time = time
            self.progress = progress
            self.callbacks = callbacks
            self.cpuSeconds = cpuSeconds
        }
    }

    public enum Verdict: Sendable, Equatable {
        case healthy
        case stalled(seconds: Double)
        case spinning(seconds: Double, cpuShare: Double, callbacksPerSecond: Double)
    }

    /// How long either condition must last.
    public let windowSeconds: Double
    /// Share of one core at or above which the loop counts as busy.
    public let busyShare: Double
    /// Below this many socket callbacks per second a busy loop counts as spinning. Real load at
    /// a full core handles thousands.
    public let minCallbacksPerSecond: Double

    private var lastProgressChange: Sample?
    private var samples: [Sample] = []

    public init(windowSeconds: Double, busyShare: Double = 0.9, minCallbacksPerSecond: Double = 50) {
        self.windowSeconds = windowSeconds
        self.busyShare = busyShare
        self.minCallbacksPerSecond = minCallbacksPerSecond
    }

    /// Records `sample` and judges the loop. After a non-healthy verdict the history restarts,
    /// so the same episode is reported once per window.
    public mutating func observe(_ sample: Sample) -> Verdict {
        if lastProgressChange == nil || lastProgressChange!.progress != sample.progress { lastProgressChange = sample }
        samples.append(sample)
        while samples.count > 2, samples[1].time <= sample.time - windowSeconds { samples.removeFirst() }

        if let since = lastProgressChange, sample.time - since.time > windowSeconds {
            reset(to: sample)
            return .stalled(seconds: sample.time - since.time)
        }
        guard let first = samples.first, sample.time - first.time >= windowSeconds,
              let cpuThen = first.cpuSeconds, let cpuNow = sample.cpuSeconds
        else { return .healthy }
        let elapsed = sample.time - first.time
        let share = (cpuNow - cpuThen) / elapsed
        let rate = Double(sample.callbacks - first.callbacks) / elapsed
        if share >= busyShare, rate < minCallbacksPerSecond {
            reset(to: sample)
            return .spinning(seconds: elapsed, cpuShare: share, callbacksPerSecond: rate)
        }
        return .healthy
    }

    private mutating func reset(to sample: Sample) {
        samples = [sample]
        lastProgressChange = sample
    }
}
