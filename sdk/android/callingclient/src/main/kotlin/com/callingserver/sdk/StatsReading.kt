package com.callingserver.sdk

/** One entry of a WebRTC stats report (W3C webrtc-stats): its `type`, `id` and members. */
data class StatsEntry(val type: String, val id: String, val timestampMs: Double, val members: Map<String, Any?>)

/** The outbound byte count a bitrate is measured from, kept between two samples. */
data class BytesMark(val bytesSent: Double, val timestampMs: Double)

/**
 * A [StatsSample] from one stats report, the browser SDK's `_statsFromReport`: RTT of the selected
 * candidate pair, the worst inbound audio jitter, inbound audio loss, and the outbound bitrate since
 * [previous] (null on the first sample). Returns the sample and the mark for the next one.
 */
fun statsSampleOf(entries: List<StatsEntry>, previous: BytesMark?): Pair<StatsSample, BytesMark?> {
    fun num(e: StatsEntry, key: String): Double? = (e.members[key] as? Number)?.toDouble()
    val byId = entries.associateBy { it.id }
    var pair: StatsEntry? = entries.firstOrNull { it.type == "transport" && byId.containsKey(it.members["selectedCandidatePairId"]) }
        ?.let { byId[it.members["selectedCandidatePairId"]] }
    if (pair == null) {
        pair = entries.firstOrNull { it.type == "candidate-pair" && it.members["selected"] == true }
            ?: entries.firstOrNull { it.type == "candidate-pair" && it.members["nominated"] == true && it.members["state"] == "succeeded" }
    }
    val rtt = pair?.let { num(it, "currentRoundTripTime") }?.let { it * 1000 }
    var jitter: Double? = null
    var lost = 0.0
    var received = 0.0
    var sawInbound = false
    var bytesSent = 0.0
    var sawOutbound = false
    var timestamp: Double? = null
    for (e in entries) {
        val kind = e.members["kind"] ?: e.members["mediaType"]
        if (e.type == "inbound-rtp" && kind == "audio") {
            sawInbound = true
            num(e, "jitter")?.let { jitter = Math.max(jitter ?: 0.0, it * 1000) }
            num(e, "packetsLost")?.let { lost += Math.max(0.0, it) }
            num(e, "packetsReceived")?.let { received += it }
        } else if (e.type == "outbound-rtp" && e.members["isRemote"] != true) {
            num(e, "bytesSent")?.let {
                sawOutbound = true
                bytesSent += it
                timestamp = Math.max(timestamp ?: 0.0, e.timestampMs)
            }
        }
    }
    val expected = lost + received
    val loss = if (sawInbound && expected > 0) Math.min(1.0, lost / expected) else null
    val mark = if (sawOutbound && timestamp != null) BytesMark(bytesSent, timestamp!!) else null
    var bitrate: Double? = null
    if (mark != null && previous != null && mark.timestampMs > previous.timestampMs && mark.bytesSent >= previous.bytesSent) {
        bitrate = (mark.bytesSent - previous.bytesSent) * 8 / (mark.timestampMs - previous.timestampMs) // bits per ms = kbit/s
    }
    fun round(v: Double?, digits: Int): Double? = v?.let { java.math.BigDecimal(it).setScale(digits, java.math.RoundingMode.HALF_UP).toDouble() }
    return Pair(StatsSample(round(rtt, 1), round(jitter, 2), round(loss, 4), round(bitrate, 1)), mark)
}
