package com.callingserver.sdk

import org.json.JSONObject

/**
 * The media layer's peer connection, one per call, behind an interface so the call logic
 * ([CallMachine]) runs in pure JUnit tests and `WebRtcMediaEngine` (org.webrtc) is one
 * implementation. Every method is called on the client's own thread; [done] callbacks and
 * [MediaEngineEvents] may run on any thread (org.webrtc's signaling thread) and must only hand
 * their result over, never call back into the engine.
 */
interface MediaEngine {
    /** A new peer connection for [peerId] (Unified Plan) with the local tracks, using [iceServers]. */
    fun createPeerConnection(peerId: String, iceServers: List<IceServer>, events: MediaEngineEvents)
    /** Creates an offer and sets it as the local description; [iceServers] non-null: set first (an ICE restart). */
    fun createOffer(peerId: String, iceRestart: Boolean, iceServers: List<IceServer>?, done: (sdp: String?, error: String?) -> Unit)
    /** Creates an answer to the remote offer and sets it as the local description. */
    fun createAnswer(peerId: String, done: (sdp: String?, error: String?) -> Unit)
    /** [type] `offer` or `answer`. */
    fun setRemoteDescription(peerId: String, type: String, sdp: String, done: (error: String?) -> Unit)
    fun addIceCandidate(peerId: String, candidate: String, sdpMid: String?, sdpMLineIndex: Int?)
    /** One sample of the peer connection's statistics (null when there are none yet). */
    fun getStats(peerId: String, done: (StatsSample?) -> Unit)
    /** Closes and disposes the peer connection; called on the client's thread, never from an engine callback. */
    fun close(peerId: String)
}

/** What a peer connection reports; any thread. */
interface MediaEngineEvents {
    /** A gathered local candidate; [candidate] null at the end of gathering. */
    fun onLocalCandidate(candidate: String?, sdpMid: String?, sdpMLineIndex: Int?)
    /** The ICE connection state in the W3C spelling: `new`, `checking`, `connected`, `completed`, `disconnected`, `failed`, `closed`. */
    fun onIceConnectionState(state: String)
}

/** Timers of [CallMachine]. */
sealed class CallTimer {
    data class IceDebounce(val peer: String) : CallTimer()
    data class IceRetry(val peer: String) : CallTimer()
    data class IceWindow(val peer: String) : CallTimer()
    object Stats : CallTimer() { override fun toString() = "Stats" }
}

/** What the call logic is told: the app's calls, the room session's events, the engine's results, timers. */
sealed class CallInput {
    data class Call(val peer: String) : CallInput()
    data class Accept(val peer: String) : CallInput()
    data class Reject(val peer: String) : CallInput()
    data class Hangup(val peer: String) : CallInput()
    /** A relayed `offer`, `answer` or `candidate` ([payload]: JSON text). */
    data class Signal(val type: String, val from: String, val payload: String) : CallInput()
    data class Data(val from: String, val payload: String?) : CallInput()
    data class PeerLeft(val peer: String) : CallInput()
    data class PeerReconnecting(val peer: String) : CallInput()
    data class PeerResumed(val peer: String) : CallInput()
    /** Our socket dropped (a reconnect follows); calls are kept. */
    object SocketDown : CallInput() { override fun toString() = "SocketDown" }
    /** The session is over (`disconnect()`, or a terminal close): every call ends as `disconnect`. */
    object SessionEnded : CallInput() { override fun toString() = "SessionEnded" }
    /** A `welcome` (first or resumed) with the room's other peers. */
    data class Welcomed(val peers: List<String>) : CallInput()
    data class IceServers(val peer: String, val generation: Long, val servers: List<IceServer>) : CallInput()
    data class LocalDescription(val peer: String, val generation: Long, val type: String, val sdp: String) : CallInput()
    data class RemoteDescriptionSet(val peer: String, val generation: Long) : CallInput()
    data class EngineFailed(val peer: String, val generation: Long, val error: String) : CallInput()
    data class LocalCandidate(val peer: String, val generation: Long, val candidate: String?, val sdpMid: String?, val sdpMLineIndex: Int?) : CallInput()
    data class IceState(val peer: String, val generation: Long, val state: String) : CallInput()
    data class StatsSampled(val peer: String, val generation: Long, val sample: StatsSample?) : CallInput()
    data class TimerFired(val timer: CallTimer) : CallInput()
}

/** What the call logic asks for. [generation] numbers a call's peer connection; results of an older one are ignored. */
sealed class CallAction {
    data class FetchIce(val peer: String, val generation: Long) : CallAction()
    data class CreatePeerConnection(val peer: String, val generation: Long, val servers: List<IceServer>) : CallAction()
    data class CreateOffer(val peer: String, val generation: Long, val iceRestart: Boolean, val servers: List<IceServer>?) : CallAction()
    data class CreateAnswer(val peer: String, val generation: Long) : CallAction()
    data class SetRemote(val peer: String, val generation: Long, val type: String, val sdp: String) : CallAction()
    data class AddCandidate(val peer: String, val candidate: String, val sdpMid: String?, val sdpMLineIndex: Int?) : CallAction()
    data class GetStats(val peer: String, val generation: Long) : CallAction()
    data class Close(val peer: String) : CallAction()
    data class SendSignal(val type: String, val to: String, val payload: String) : CallAction()
    data class SendData(val to: String, val payload: String) : CallAction()
    data class SendStats(val sample: StatsSample) : CallAction()
    data class Arm(val timer: CallTimer, val afterMs: Long) : CallAction()
    data class Cancel(val timer: CallTimer) : CallAction()
    data class Emit(val event: CallEvent) : CallAction()
}

/** What the app hears about calls. */
sealed class CallEvent {
    /** A peer calls us: `acceptCall` or `rejectCall`. */
    data class Incoming(val peer: String) : CallEvent()
    /** The call ended: `local`, `remote`, `rejected`, `peer-left`, `cancelled`, `disconnected`, `failed`, `replaced`, `disconnect` (the session ended; the browser SDK's reasons). */
    data class Hangup(val peer: String, val reason: String) : CallEvent()
    data class IceRestart(val peer: String, val attempt: Int) : CallEvent()
    data class MediaConnected(val peer: String) : CallEvent()
    data class Stats(val peer: String, val sample: StatsSample) : CallEvent()
}

/**
 * The call logic of the media layer, pure like [SignalingSession]: inputs in, actions out, no
 * engine, thread or clock. It follows the browser and Swift SDKs (docs/sdk.md "What survives a
 * drop"): ICE servers fetched for every call, candidates queued until the remote description is
 * set, `data {kind:"hangup"}` to end a call, calls kept through our own and the peer's reconnect
 * (reconciled with the roster of a resumed `welcome`), an ICE restart by the side that sent the
 * first offer (after [Settings.iceDisconnectedDebounceMs] of `disconnected`, at once on `failed`,
 * after a resume while media is down, then every [Settings.iceRestartRetryMs]; never while either
 * socket is down), the call ended as `disconnected` after [Settings.iceRestartWindowMs] without
 * connectivity (not while the peer is reconnecting), and a `stats` sample per call every
 * [Settings.statsIntervalMs].
 */
class CallMachine(val settings: Settings = Settings()) {
    data class Settings(
        val iceDisconnectedDebounceMs: Long = 2_000,
        val iceRestartRetryMs: Long = 5_000,
        val iceRestartWindowMs: Long = 15_000,
        val statsIntervalMs: Long = 5_000
    )

    private enum class Phase { RINGING, PREPARING, ACTIVE }

    private class Call(val peer: String, val generation: Long, val offerer: Boolean, var phase: Phase) {
        var pendingOffer: String? = null
        var hasPeerConnection = false
        var remoteSet = false
        var answerAfterRemote = false
        val queued = ArrayList<Triple<String, String?, Int?>>()
        var mediaConnected = false
        var restartAttempts = 0
        var restartPending = false
        var windowArmed = false
    }

    private val calls = LinkedHashMap<String, Call>()
    private val away = HashSet<String>()
    private var socketDown = false
    private var nextGeneration = 0L
    private var statsArmed = false
    private var out = ArrayList<CallAction>()

    /** Peers with a call (ringing, being set up or active). */
    val peers: Set<String> get() = calls.keys

    fun handle(input: CallInput): List<CallAction> {
        out = ArrayList()
        when (input) {
            is CallInput.Call -> {
                calls[input.peer]?.let { end(it, "replaced", notify = true) }
                val call = Call(input.peer, ++nextGeneration, offerer = true, phase = Phase.PREPARING)
                calls[input.peer] = call
                out.add(CallAction.FetchIce(call.peer, call.generation))
            }
            is CallInput.Accept -> {
                val call = calls[input.peer]
                if (call != null && call.phase == Phase.RINGING) {
                    call.phase = Phase.PREPARING
                    out.add(CallAction.FetchIce(call.peer, call.generation))
                }
            }
            is CallInput.Reject -> calls[input.peer]?.takeIf { it.phase == Phase.RINGING }?.let { end(it, "rejected", notify = true) }
            is CallInput.Hangup -> calls[input.peer]?.let { end(it, "local", notify = true) }
            is CallInput.Signal -> signal(input)
            is CallInput.Data -> if (isHangup(input.payload)) calls[input.from]?.let {
                end(it, if (it.phase == Phase.RINGING) "cancelled" else "remote", notify = false)
            }
            is CallInput.PeerLeft -> {
                away.remove(input.peer)
                calls[input.peer]?.let { end(it, if (it.phase == Phase.RINGING) "cancelled" else "peer-left", notify = false) }
            }
            is CallInput.PeerReconnecting -> away.add(input.peer)
            is CallInput.PeerResumed -> {
                away.remove(input.peer)
                calls[input.peer]?.let { restartIfDown(it) }
            }
            is CallInput.SocketDown -> socketDown = true
            is CallInput.SessionEnded -> {
                socketDown = true // nothing can be sent any more
                for (call in calls.values.toList()) end(call, "disconnect", notify = false)
            }
            is CallInput.Welcomed -> {
                socketDown = false
                val present = input.peers.toSet()
                for (call in calls.values.toList()) {
                    if (call.peer !in present) end(call, if (call.phase == Phase.RINGING) "cancelled" else "peer-left", notify = false)
                    else restartIfDown(call)
                }
            }
            is CallInput.IceServers -> current(input.peer, input.generation)?.let { iceServers(it, input.servers) }
            is CallInput.LocalDescription -> current(input.peer, input.generation)?.let {
                out.add(CallAction.SendSignal(input.type, it.peer, JSONObject().put("type", input.type).put("sdp", input.sdp).toString()))
            }
            is CallInput.RemoteDescriptionSet -> current(input.peer, input.generation)?.let { call ->
                call.remoteSet = true
                for ((candidate, mid, index) in call.queued) out.add(CallAction.AddCandidate(call.peer, candidate, mid, index))
                call.queued.clear()
                if (call.answerAfterRemote) {
                    call.answerAfterRemote = false
                    out.add(CallAction.CreateAnswer(call.peer, call.generation))
                }
            }
            is CallInput.EngineFailed -> current(input.peer, input.generation)?.let { end(it, "failed", notify = true) }
            is CallInput.LocalCandidate -> current(input.peer, input.generation)?.let {
                out.add(CallAction.SendSignal("candidate", it.peer, candidatePayload(input.candidate, input.sdpMid, input.sdpMLineIndex)))
            }
            is CallInput.IceState -> current(input.peer, input.generation)?.let { iceState(it, input.state) }
            is CallInput.StatsSampled -> current(input.peer, input.generation)?.let { call ->
                val sample = input.sample
                if (sample != null && !sample.isEmpty) {
                    out.add(CallAction.SendStats(sample))
                    out.add(CallAction.Emit(CallEvent.Stats(call.peer, sample)))
                }
            }
            is CallInput.TimerFired -> timer(input.timer)
        }
        return out
    }

    private fun current(peer: String, generation: Long): Call? = calls[peer]?.takeIf { it.generation == generation }

    private fun isHangup(payload: String?): Boolean =
        try { payload != null && JSONObject(payload).optString("kind") == "hangup" } catch (e: Exception) { false }

    private fun signal(input: CallInput.Signal) {
        val payload = try { JSONObject(input.payload) } catch (e: Exception) { return }
        val call = calls[input.from]
        when (input.type) {
            "offer" -> {
                val sdp = payload.optString("sdp", "")
                if (call == null) {
                    val ringing = Call(input.from, ++nextGeneration, offerer = false, phase = Phase.RINGING)
                    ringing.pendingOffer = sdp
                    calls[input.from] = ringing
                    out.add(CallAction.Emit(CallEvent.Incoming(input.from)))
                } else if (call.phase == Phase.ACTIVE) {
                    // A renegotiation or the offerer's ICE restart: answered on the same connection, no `incoming`.
                    call.remoteSet = false
                    call.answerAfterRemote = true
                    out.add(CallAction.SetRemote(call.peer, call.generation, "offer", sdp))
                } else if (call.phase == Phase.RINGING) {
                    call.pendingOffer = sdp
                }
            }
            "answer" -> if (call != null && call.offerer && call.hasPeerConnection) {
                call.remoteSet = false
                out.add(CallAction.SetRemote(call.peer, call.generation, "answer", payload.optString("sdp", "")))
            }
            "candidate" -> if (call != null) {
                val candidate = payload.optString("candidate", "")
                if (candidate.isEmpty()) return // end of candidates: nothing to add
                val mid = if (payload.isNull("sdpMid")) null else payload.optString("sdpMid")
                val index = if (payload.isNull("sdpMLineIndex")) null else payload.optInt("sdpMLineIndex")
                if (call.remoteSet && call.hasPeerConnection) out.add(CallAction.AddCandidate(call.peer, candidate, mid, index))
                else call.queued.add(Triple(candidate, mid, index))
            }
        }
    }

    private fun iceServers(call: Call, servers: List<IceServer>) {
        if (call.restartPending) {
            call.restartPending = false
            out.add(CallAction.CreateOffer(call.peer, call.generation, iceRestart = true, servers = servers))
            return
        }
        if (call.hasPeerConnection) return
        call.hasPeerConnection = true
        call.phase = Phase.ACTIVE
        out.add(CallAction.CreatePeerConnection(call.peer, call.generation, servers))
        if (call.offerer) {
            out.add(CallAction.CreateOffer(call.peer, call.generation, iceRestart = false, servers = null))
        } else {
            call.answerAfterRemote = true
            out.add(CallAction.SetRemote(call.peer, call.generation, "offer", call.pendingOffer ?: ""))
            call.pendingOffer = null
        }
        if (!statsArmed) {
            statsArmed = true
            out.add(CallAction.Arm(CallTimer.Stats, settings.statsIntervalMs))
        }
    }

    private fun iceState(call: Call, state: String) {
        when (state) {
            "connected", "completed" -> {
                val was = call.mediaConnected
                call.mediaConnected = true
                call.restartAttempts = 0
                call.windowArmed = false
                out.add(CallAction.Cancel(CallTimer.IceDebounce(call.peer)))
                out.add(CallAction.Cancel(CallTimer.IceRetry(call.peer)))
                out.add(CallAction.Cancel(CallTimer.IceWindow(call.peer)))
                if (!was) out.add(CallAction.Emit(CallEvent.MediaConnected(call.peer)))
            }
            "disconnected" -> {
                call.mediaConnected = false
                armWindow(call)
                if (call.offerer) out.add(CallAction.Arm(CallTimer.IceDebounce(call.peer), settings.iceDisconnectedDebounceMs))
            }
            "failed" -> {
                call.mediaConnected = false
                armWindow(call)
                if (call.offerer) restart(call)
            }
        }
    }

    private fun armWindow(call: Call) {
        if (call.windowArmed) return
        call.windowArmed = true
        out.add(CallAction.Arm(CallTimer.IceWindow(call.peer), settings.iceRestartWindowMs))
    }

    /** After a resume (ours or the peer's): the offerer restarts a call whose media is down. */
    private fun restartIfDown(call: Call) {
        if (call.offerer && call.hasPeerConnection && !call.mediaConnected && call.windowArmed) restart(call)
    }

    private fun restart(call: Call) {
        if (socketDown || call.peer in away) return // tried again after the resume
        call.restartAttempts += 1
        call.restartPending = true
        out.add(CallAction.Emit(CallEvent.IceRestart(call.peer, call.restartAttempts)))
        out.add(CallAction.FetchIce(call.peer, call.generation))
        out.add(CallAction.Arm(CallTimer.IceRetry(call.peer), settings.iceRestartRetryMs))
    }

    private fun timer(timer: CallTimer) {
        when (timer) {
            is CallTimer.IceDebounce, is CallTimer.IceRetry -> {
                val peer = if (timer is CallTimer.IceDebounce) timer.peer else (timer as CallTimer.IceRetry).peer
                val call = calls[peer] ?: return
                if (!call.mediaConnected) restart(call)
            }
            is CallTimer.IceWindow -> {
                val call = calls[timer.peer] ?: return
                if (call.mediaConnected) return
                if (call.peer in away) {
                    out.add(CallAction.Arm(timer, settings.iceRestartWindowMs)) // does not run out while the peer is away
                    return
                }
                end(call, "disconnected", notify = true)
            }
            is CallTimer.Stats -> {
                statsArmed = false
                val active = calls.values.filter { it.hasPeerConnection }
                for (call in active) out.add(CallAction.GetStats(call.peer, call.generation))
                if (active.isNotEmpty()) {
                    statsArmed = true
                    out.add(CallAction.Arm(CallTimer.Stats, settings.statsIntervalMs))
                }
            }
        }
    }

    /** Ends [call]: tells the peer when [notify] (our decision), closes its peer connection, reports [reason]. */
    private fun end(call: Call, reason: String, notify: Boolean) {
        calls.remove(call.peer)
        if (notify && !socketDown) out.add(CallAction.SendData(call.peer, """{"kind":"hangup"}"""))
        out.add(CallAction.Cancel(CallTimer.IceDebounce(call.peer)))
        out.add(CallAction.Cancel(CallTimer.IceRetry(call.peer)))
        out.add(CallAction.Cancel(CallTimer.IceWindow(call.peer)))
        if (call.hasPeerConnection) out.add(CallAction.Close(call.peer))
        out.add(CallAction.Emit(CallEvent.Hangup(call.peer, reason)))
    }
}
