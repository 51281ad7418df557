/// A latency histogram with fixed bucket bounds, for Prometheus `_bucket`/`_sum`/`_count` lines.
///
/// Recording is on hot paths (every chat ack, every store commit), so it is a linear scan over a
/// dozen integer bounds and one array increment: no dictionary, no string, no allocation. The
/// buckets are stored non-cumulatively and summed when rendered.
public struct LatencyHistogram: Sendable, Hashable {
    /// Upper bounds in microseconds, ascending; an implicit `+Inf` bucket follows.
    public let boundsMicros: [Int64]
    /// `counts[i]` holds observations in `(bounds[i-1], bounds[i]]`; the last entry is `+Inf`.
    public private(set) var counts: [Int]
    public private(set) var sumMicros: Int64 = 0
    public private(set) var count: Int = 0

    /// 50 µs … 5 s: chat acks on loopback take a few hundred µs, a commit stalled by a checkpoint tens of ms.
    public static let defaultBoundsMicros: [Int64] = [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000,
                                                     100_000, 250_000, 1_000_000, 5_000_000]

    public init(boundsMicros: [Int64] = LatencyHistogram.defaultBoundsMicros) {
        self.boundsMicros = boundsMicros
        self.counts = [Int](repeating: 0, count: boundsMicros.count + 1)
    }

    public mutating func record(micros: Int64) {
        let value = max(0, micros)
        var index = 0
        while index < boundsMicros.count && value > boundsMicros[index] { index += 1 }
        counts[index] += 1
        sumMicros &+= value
        count += 1
    }

    public mutating func record(nanoseconds: UInt64) {
        record(micros: Int64(clamping: nanoseconds / 1_000))
    }

    /// Prometheus text for a histogram in seconds: `# HELP`, `# TYPE`, cumulative `_bucket{le=…}`,
    /// `_sum` and `_count`.
    public func prometheus(name: String, help: String) -> String {
        var out = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        var cumulative = 0
        for (index, bound) in boundsMicros.enumerated() {
            cumulative += counts[index]
            out += "\(name)_bucket{le=\"\(Self.seconds(bound))\"} \(cumulative)\n"
        }
        cumulative += counts[boundsMicros.count]
        out += "\(name)_bucket{le=\"+Inf\"} \(cumulative)\n"
        out += "\(name)_sum \(Self.seconds(sumMicros))\n\(name)_count \(count)\n"
        return out
    }

    /// Microseconds as decimal seconds without floating-point noise (`250` → `0.00025`).
    static func seconds(_ micros: Int64) -> String {
        let whole = micros / 1_000_000
        var fraction = String(micros % 1_000_000)
        guard fraction != "0" else { return String(whole) }
        fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(whole).\(fraction)"
    }
}
