import CallingClient

/// One entry of a WebRTC statistics report (`RTCStatistics`): its id, type, timestamp (ms) and
/// the members this SDK reads, as numbers, strings or booleans.
public struct WebRTCStatEntry: Sendable, Equatable {
    /// A member's value.
    public enum Value: Sendable, Equatable {
        case number(Double)
        case string(String)
        case bool(Bool)
    }

    /// The report's id of the entry.
    public var id: String
    /// `candidate-pair`, `inbound-rtp`, `outbound-rtp`, `transport`…
    public var type: String
    /// When it was measured, ms.
    public var timestampMs: Double
    /// The entry's members.
    public var values: [String: Value]

    /// An entry as read from a report.
    public init(id: String, type: String, timestampMs: Double, values: [String: Value]) {
        self.id = id
        self.type = type
        self.timestampMs = timestampMs
        self.values = values
    }

    func number(_ key: String) -> Double? { if case .number(let value)? = values[key] { value } else { nil } }
    func string(_ key: String) -> String? { if case .string(let value)? = values[key] { value } else { nil } }
    func bool(_ key: String) -> Bool? { if case .bool(let value)? = values[key] { value } else { nil } }
}

/// A `getStats()` report as the `stats` frame's sample, computed as the browser SDK's
/// `_statsFromReport` does (sdk/js): `rtt_ms` from the selected candidate pair's
/// `currentRoundTripTime`, `jitter_ms` the largest inbound audio jitter, `packet_loss` inbound audio
/// `packetsLost / (packetsLost + packetsReceived)` since the call began, `bitrate_kbps` the outbound
/// RTP bytes since the previous sample per elapsed time.
public enum WebRTCStats {
    /// The outbound byte count and time a later sample's bitrate is measured against.
    public struct Baseline: Sendable, Equatable {
        /// Outbound RTP bytes so far.
        public var bytesSent: Double
        /// When, ms.
        public var timestampMs: Double
    }

    /// The sample of `report` and the new baseline (nil when nothing was sent yet).
    public static func sample(_ report: [WebRTCStatEntry], previous: Baseline?) -> (sample: StatsSample, baseline: Baseline?) {
        let byID = Dictionary(report.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var pair = report.lazy.filter { $0.type == "transport" }.compactMap { $0.string("selectedCandidatePairId").flatMap { byID[$0] } }.first
        if pair == nil {
            pair = report.first { $0.type == "candidate-pair" && $0.bool("selected") == true }
                ?? report.first { $0.type == "candidate-pair" && $0.bool("nominated") == true && $0.string("state") == "succeeded" }
        }
        let rtt = pair?.number("currentRoundTripTime").map { $0 * 1000 }

        var jitter: Double?
        var lost = 0.0
        var received = 0.0
        var sawInbound = false
        var bytesSent = 0.0
        var sawOutbound = false
        var timestamp: Double?
        for entry in report {
            let kind = entry.string("kind") ?? entry.string("mediaType")
            if entry.type == "inbound-rtp", kind == "audio" {
                sawInbound = true
                if let value = entry.number("jitter") { jitter = max(jitter ?? 0, value * 1000) }
                if let value = entry.number("packetsLost") { lost += max(0, value) }
                if let value = entry.number("packetsReceived") { received += value }
            } else if entry.type == "outbound-rtp", entry.bool("isRemote") != true, let value = entry.number("bytesSent") {
                sawOutbound = true
                bytesSent += value
                timestamp = max(timestamp ?? 0, entry.timestampMs)
            }
        }
        let expected = lost + received
        let loss = sawInbound && expected > 0 ? min(1, lost / expected) : nil
        let baseline = sawOutbound ? timestamp.map { Baseline(bytesSent: bytesSent, timestampMs: $0) } : nil
        var bitrate: Double?
        if let baseline, let previous, baseline.timestampMs > previous.timestampMs, baseline.bytesSent >= previous.bytesSent {
            // bytes * 8 / ms = kbit/s
            bitrate = (baseline.bytesSent - previous.bytesSent) * 8 / (baseline.timestampMs - previous.timestampMs)
        }
        func rounded(_ value: Double?, _ digits: Double) -> Double? {
            value.map { ($0 * digits).rounded() / digits }
        }
        return (StatsSample(rttMs: rounded(rtt, 10), jitterMs: rounded(jitter, 100), packetLoss: rounded(loss, 10_000),
                            bitrateKbps: rounded(bitrate, 10)), baseline)
    }
}
