package com.callingserver.sdk

import org.webrtc.DataChannel
import org.webrtc.IceCandidate
import org.webrtc.MediaConstraints
import org.webrtc.MediaStream
import org.webrtc.MediaStreamTrack
import org.webrtc.PeerConnection
import org.webrtc.PeerConnectionFactory
import org.webrtc.RtpTransceiver
import org.webrtc.SdpObserver
import org.webrtc.SessionDescription

/**
 * [MediaEngine] on `org.webrtc` (stream-webrtc-android 1.3.x, or Google's libwebrtc Android
 * build): one Unified Plan `PeerConnection` per call, the app's local tracks added to it, remote
 * tracks handed to [onRemoteTrack].
 *
 * Built with the app (see docs/android.md "What runs here and what does not"): in this repository
 * it is only compiled, against a stub of the org.webrtc signatures it uses, never run. The
 * [CallingClient] calls every method on its own thread; org.webrtc calls the observers on its
 * signaling thread, and they only hand results over, so a `PeerConnection` is never closed or
 * disposed inside one of its callbacks.
 */
class WebRtcMediaEngine(
    private val factory: PeerConnectionFactory,
    /** The tracks to send on a new call (created by the app from `factory`), all in one stream. */
    private val localTracks: () -> List<MediaStreamTrack>,
    /** A remote track arrived on the call with the peer (any thread). */
    private val onRemoteTrack: (peerId: String, transceiver: RtpTransceiver) -> Unit = { _, _ -> }
) : MediaEngine {
    // Touched on the client's thread only.
    private val connections = HashMap<String, PeerConnection>()
    /** Per call, the outbound byte mark of the last stats sample (for the bitrate). */
    private val statsMarks = java.util.concurrent.ConcurrentHashMap<String, BytesMark>()

    private fun rtcServers(servers: List<IceServer>): List<PeerConnection.IceServer> = servers.map { server ->
        val builder = PeerConnection.IceServer.builder(server.urls)
        server.username?.let { builder.setUsername(it) }
        server.credential?.let { builder.setPassword(it) }
        builder.createIceServer()
    }

    private fun configuration(servers: List<IceServer>): PeerConnection.RTCConfiguration {
        val config = PeerConnection.RTCConfiguration(rtcServers(servers))
        config.sdpSemantics = PeerConnection.SdpSemantics.UNIFIED_PLAN
        return config
    }

    override fun createPeerConnection(peerId: String, iceServers: List<IceServer>, events: MediaEngineEvents) {
        val observer = object : PeerConnection.Observer {
            override fun onSignalingChange(newState: PeerConnection.SignalingState) {}
            override fun onIceConnectionChange(newState: PeerConnection.IceConnectionState) {
                events.onIceConnectionState(newState.name.toLowerCase(java.util.Locale.ROOT))
            }
            override fun onIceConnectionReceivingChange(receiving: Boolean) {}
            override fun onIceGatheringChange(newState: PeerConnection.IceGatheringState) {
                if (newState == PeerConnection.IceGatheringState.COMPLETE) events.onLocalCandidate(null, null, null)
            }
            override fun onIceCandidate(candidate: IceCandidate) {
                events.onLocalCandidate(candidate.sdp, candidate.sdpMid, candidate.sdpMLineIndex)
            }
            override fun onIceCandidatesRemoved(candidates: Array<IceCandidate>) {}
            override fun onAddStream(stream: MediaStream) {}
            override fun onRemoveStream(stream: MediaStream) {}
            override fun onDataChannel(dataChannel: DataChannel) {}
            override fun onRenegotiationNeeded() {}
            override fun onTrack(transceiver: RtpTransceiver) { onRemoteTrack(peerId, transceiver) }
        }
        val connection = factory.createPeerConnection(configuration(iceServers), observer)
        if (connection == null) {
            events.onIceConnectionState("failed")
            return
        }
        val streamIds = listOf("local-$peerId") // one stream, as the other SDKs send it
        for (track in localTracks()) connection.addTrack(track, streamIds)
        connections[peerId] = connection
    }

    /** Creates with [create], then sets the result as the local description; [done] gets its SDP. */
    private fun describe(connection: PeerConnection, create: (SdpObserver) -> Unit, done: (String?, String?) -> Unit) {
        create(object : SdpObserver {
            override fun onCreateSuccess(sdp: SessionDescription) {
                connection.setLocalDescription(object : SdpObserver {
                    override fun onCreateSuccess(sdp: SessionDescription) {}
                    override fun onSetSuccess() { done(sdp.description, null) }
                    override fun onCreateFailure(error: String) {}
                    override fun onSetFailure(error: String) { done(null, "setLocalDescription: $error") }
                }, sdp)
            }
            override fun onSetSuccess() {}
            override fun onCreateFailure(error: String) { done(null, error) }
            override fun onSetFailure(error: String) {}
        })
    }

    override fun createOffer(peerId: String, iceRestart: Boolean, iceServers: List<IceServer>?, done: (String?, String?) -> Unit) {
        val connection = connections[peerId] ?: return done(null, "no peer connection for $peerId")
        if (iceServers != null) connection.setConfiguration(configuration(iceServers))
        val constraints = MediaConstraints()
        if (iceRestart) constraints.mandatory.add(MediaConstraints.KeyValuePair("IceRestart", "true"))
        describe(connection, { connection.createOffer(it, constraints) }, done)
    }

    override fun createAnswer(peerId: String, done: (String?, String?) -> Unit) {
        val connection = connections[peerId] ?: return done(null, "no peer connection for $peerId")
        describe(connection, { connection.createAnswer(it, MediaConstraints()) }, done)
    }

    override fun setRemoteDescription(peerId: String, type: String, sdp: String, done: (String?) -> Unit) {
        val connection = connections[peerId] ?: return done("no peer connection for $peerId")
        val description = SessionDescription(SessionDescription.Type.fromCanonicalForm(type), sdp)
        connection.setRemoteDescription(object : SdpObserver {
            override fun onCreateSuccess(sdp: SessionDescription) {}
            override fun onSetSuccess() { done(null) }
            override fun onCreateFailure(error: String) {}
            override fun onSetFailure(error: String) { done(error) }
        }, description)
    }

    override fun addIceCandidate(peerId: String, candidate: String, sdpMid: String?, sdpMLineIndex: Int?) {
        connections[peerId]?.addIceCandidate(IceCandidate(sdpMid ?: "", sdpMLineIndex ?: 0, candidate))
    }

    override fun getStats(peerId: String, done: (StatsSample?) -> Unit) {
        val connection = connections[peerId] ?: return done(null)
        connection.getStats { report ->
            val entries = report.statsMap.values.map { StatsEntry(it.type, it.id, it.timestampUs / 1000.0, it.members) }
            val (sample, mark) = statsSampleOf(entries, statsMarks[peerId])
            if (mark != null) statsMarks[peerId] = mark
            done(sample)
        }
    }

    override fun close(peerId: String) {
        statsMarks.remove(peerId)
        val connection = connections.remove(peerId) ?: return
        // On the client's thread (never inside an observer callback): close, then free the native side.
        connection.close()
        connection.dispose()
    }
}
