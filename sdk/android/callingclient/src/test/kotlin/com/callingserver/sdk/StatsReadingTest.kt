package com.callingserver.sdk

import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Test

/** The browser SDK's `_statsFromReport` rules on hand-made reports (what org.webrtc's RTCStatsReport holds). */
class StatsReadingTest {
    private fun report(bytesSent: Int, at: Double) = listOf(
        StatsEntry("transport", "T1", at, mapOf("selectedCandidatePairId" to "CP2")),
        StatsEntry("candidate-pair", "CP1", at, mapOf("currentRoundTripTime" to 0.5, "nominated" to true, "state" to "succeeded")),
        StatsEntry("candidate-pair", "CP2", at, mapOf("currentRoundTripTime" to 0.0234)),
        StatsEntry("inbound-rtp", "IA", at, mapOf("kind" to "audio", "jitter" to 0.0031, "packetsLost" to 3, "packetsReceived" to 97)),
        StatsEntry("inbound-rtp", "IV", at, mapOf("kind" to "video", "jitter" to 0.9, "packetsLost" to 50, "packetsReceived" to 50)),
        StatsEntry("outbound-rtp", "OA", at, mapOf("kind" to "audio", "bytesSent" to bytesSent)),
        StatsEntry("remote-outbound-rtp", "RO", at, mapOf("kind" to "audio", "bytesSent" to 999999)))

    @Test fun rttJitterLossFromTheSelectedPairAndAudioAndBitrateFromTheLastSample() {
        val (first, mark) = statsSampleOf(report(10_000, 1_000.0), null)
        assertEquals(StatsSample(23.4, 3.1, 0.03, null), first)
        val (second, _) = statsSampleOf(report(10_000 + 62_500, 6_000.0), mark)
        assertEquals(100.0, second.bitrateKbps!!, 0.0) // 62 500 bytes in 5 s
    }

    @Test fun anEmptyReportKnowsNothing() {
        val (sample, mark) = statsSampleOf(emptyList(), null)
        assertEquals(true, sample.isEmpty)
        assertNull(mark)
    }
}
