import CallingClient
import XCTest

@testable import CallingWebRTC

/// The iOS engine's stats mapping (pure; the engine itself is only compiled here, docs/ios.md):
/// the same keys and rules as the browser SDK's `_statsFromReport`.
final class WebRTCStatsTests: XCTestCase {
    private func entry(_ id: String, _ type: String, at ms: Double = 1_000,
                       _ values: [String: WebRTCStatEntry.Value]) -> WebRTCStatEntry
    {
        WebRTCStatEntry(id: id, type: type, timestampMs: ms, values: values)
    }

    func test_rtt_from_the_transports_selected_pair_jitter_loss_and_bitrate_against_the_baseline() {
        let first = [
            entry("T1", "transport", ["selectedCandidatePairId": .string("CP2")]),
            entry("CP1", "candidate-pair", ["currentRoundTripTime": .number(0.5), "nominated": .bool(true), "state": .string("succeeded")]),
            entry("CP2", "candidate-pair", ["currentRoundTripTime": .number(0.0423)]),
            entry("IA", "inbound-rtp", ["kind": .string("audio"), "jitter": .number(0.0031), "packetsLost": .number(5),
                                        "packetsReceived": .number(95)]),
            entry("IB", "inbound-rtp", ["kind": .string("audio"), "jitter": .number(0.0125), "packetsLost": .number(-2),
                                        "packetsReceived": .number(100)]),
            entry("IV", "inbound-rtp", ["kind": .string("video"), "jitter": .number(0.9), "packetsLost": .number(500)]),
            entry("O1", "outbound-rtp", at: 1_000, ["bytesSent": .number(10_000)]),
            entry("OR", "outbound-rtp", at: 1_000, ["bytesSent": .number(99_999), "isRemote": .bool(true)]),
        ]
        let (sample, baseline) = WebRTCStats.sample(first, previous: nil)
        XCTAssertEqual(sample.rttMs, 42.3)
        XCTAssertEqual(sample.jitterMs, 12.5, "the largest inbound audio jitter")
        XCTAssertEqual(sample.packetLoss, 0.025, "5 lost of 200 expected audio packets; video and negative counts ignored")
        XCTAssertNil(sample.bitrateKbps, "no baseline yet")
        XCTAssertEqual(baseline, WebRTCStats.Baseline(bytesSent: 10_000, timestampMs: 1_000))

        let later = [entry("O1", "outbound-rtp", at: 6_000, ["bytesSent": .number(50_000)])]
        let (next, nextBaseline) = WebRTCStats.sample(later, previous: baseline)
        XCTAssertEqual(next.bitrateKbps, 64, "40 000 bytes in 5 s")
        XCTAssertNil(next.rttMs)
        XCTAssertNil(next.packetLoss)
        XCTAssertEqual(nextBaseline?.timestampMs, 6_000)
        XCTAssertEqual(next.json, ["bitrate_kbps": 64.0])
    }

    func test_without_a_transport_the_nominated_succeeded_pair_counts_and_an_empty_report_is_empty() {
        let report = [
            entry("CP1", "candidate-pair", ["currentRoundTripTime": .number(0.2), "nominated": .bool(true), "state": .string("in-progress")]),
            entry("CP2", "candidate-pair", ["currentRoundTripTime": .number(0.0306), "nominated": .bool(true), "state": .string("succeeded")]),
        ]
        XCTAssertEqual(WebRTCStats.sample(report, previous: nil).sample.rttMs, 30.6)
        let (empty, baseline) = WebRTCStats.sample([], previous: nil)
        XCTAssertEqual(empty, StatsSample())
        XCTAssertNil(baseline)
    }
}
