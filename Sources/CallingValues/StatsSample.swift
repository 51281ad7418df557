/// The SDKs' 5-second quality sample; keys and units in docs/sdk.md, "Client SDK compatibility".
public struct StatsSample: Sendable, Equatable {
    /// Round-trip time of the selected candidate pair, ms.
    public var rttMs: Double?
    /// Inbound audio jitter, ms.
    public var jitterMs: Double?
    /// Ratio 0–1, not percent.
    public var packetLoss: Double?
    /// Outbound bitrate since the previous sample, kbit/s.
    public var bitrateKbps: Double?

    /// A sample; absent measurements stay nil.
    public init(rttMs: Double? = nil, jitterMs: Double? = nil, packetLoss: Double? = nil, bitrateKbps: Double? = nil) {
        self.rttMs = rttMs
        self.jitterMs = jitterMs
        self.packetLoss = packetLoss
        self.bitrateKbps = bitrateKbps
    }

    /// The `stats` frame payload (`rtt_ms`, `jitter_ms`, `packet_loss`, `bitrate_kbps`).
    public var json: JSONValue {
        var fields: [String: JSONValue] = [:]
        if let rttMs { fields["rtt_ms"] = .double(rttMs) }
        if let jitterMs { fields["jitter_ms"] = .double(jitterMs) }
        if let packetLoss { fields["packet_loss"] = .double(packetLoss) }
        if let bitrateKbps { fields["bitrate_kbps"] = .double(bitrateKbps) }
        return .object(fields)
    }
}
