/// The SDKs' 5-second quality sample; keys and units in docs/sdk.md, "Client SDK compatibility".
public struct StatsSample: Sendable, Equatable {
    public var rttMs: Double?
    public var jitterMs: Double?
    /// Ratio 0–1, not percent.
    public var packetLoss: Double?
    public var bitrateKbps: Double?

    public init(rttMs: Double? = nil, jitterMs: Double? = nil, packetLoss: Double? = nil, bitrateKbps: Double? = nil) {
        self.rttMs = rttMs
        self.jitterMs = jitterMs
        self.packetLoss = packetLoss
        self.bitrateKbps = bitrateKbps
    }

    public var json: JSONValue {
        var fields: [String: JSONValue] = [:]
        if let rttMs { fields["rtt_ms"] = .double(rttMs) }
        if let jitterMs { fields["jitter_ms"] = .double(jitterMs) }
        if let packetLoss { fields["packet_loss"] = .double(packetLoss) }
        if let bitrateKbps { fields["bitrate_kbps"] = .double(bitrateKbps) }
        return .object(fields)
    }
}
