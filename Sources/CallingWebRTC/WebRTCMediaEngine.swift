import CallingClient
import CallingLogging
import Foundation
import WebRTC

/// A `MediaEngine` on Google's WebRTC for iOS (the `WebRTC` module of stasel/WebRTC; docs/ios.md):
/// one Unified Plan peer connection per remote peer with the microphone as its audio track, the
/// audio session in voice-chat mode, remote candidates queued until the remote description is set,
/// mute by disabling the local track, ICE restart, and stats in the browser SDK's keys.
///
/// Status: compiled on Linux against a stub of the WebRTC signatures it uses (Sources/WebRTCStub);
/// it has not been built or run against the real framework. See docs/ios.md, "What was verified".
///
/// Threading: `SignalingClient` calls it from tasks, never concurrently for one peer; WebRTC calls
/// the delegates on its signaling thread. The state below is behind one lock.
public final class WebRTCMediaEngine: MediaEngine, @unchecked Sendable {
    // @unchecked: what changes is in `state` (a `Locked`); `factory` is WebRTC's, which is
    // thread-safe but not marked Sendable.
    private let factory: RTCPeerConnectionFactory
    private let configuresAudioSession: Bool
    private let state = Locked(State())

    private struct State {
        var calls: [PeerID: Call] = [:]
        var iceServers: [PeerID: [IceServer]] = [:]
        var media: [PeerID: CallMedia] = [:]
        /// The app's handler, in a class: no closure as a `Locked` value (docs/architecture.md, "Locks").
        var trackHandler: TrackHandler?
        var muted = false
        var statsBaseline: WebRTCStats.Baseline?
        var audioSessionReady = false
    }

    private final class TrackHandler: Sendable {
        let call: @Sendable (PeerID, RemoteTrack) -> Void
        init(_ call: @escaping @Sendable (PeerID, RemoteTrack) -> Void) { self.call = call }
    }

    /// With `configuresAudioSession` (the default) the engine sets the shared `RTCAudioSession` to
    /// voice-chat mode before the first call; pass false when the app (or CallKit's
    /// `provider(_:didActivate:)`) manages the session itself.
    public init(configuresAudioSession: Bool = true) {
        RTCInitializeSSL()
        factory = RTCPeerConnectionFactory()
        self.configuresAudioSession = configuresAudioSession
    }

    // MARK: MediaEngine

    public func useIceServers(_ servers: [IceServer], for peer: PeerID) {
        state.withLock { $0.iceServers[peer] = servers }
    }

    public func useMedia(_ media: CallMedia, for peer: PeerID) {
        state.withLock { $0.media[peer] = media }
    }

    public func observeTracks(_ handler: @escaping @Sendable (PeerID, RemoteTrack) -> Void) {
        let handler = TrackHandler(handler)
        state.withLock { $0.trackHandler = handler }
    }

    public func createPeerConnection(for peer: PeerID, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
                                     onStateChange: @escaping @Sendable (PeerConnectionState) -> Void) async throws
    {
        try prepareAudioSession()
        let (servers, callMedia, isMuted) = state.withLock { ($0.iceServers[peer] ?? [], $0.media[peer] ?? .standard, $0.muted) }
        let configuration = RTCConfiguration()
        configuration.iceServers = servers.map(Self.rtcServer)
        configuration.sdpSemantics = .unifiedPlan
        configuration.continualGatheringPolicy = .gatherContinually
        let delegate = PeerDelegate(peer: peer, onCandidate: onCandidate, onStateChange: onStateChange,
                                    onTrack: { [weak self] track in self?.state.withLock { $0.trackHandler }?.call(peer, track) })
        let created: RTCPeerConnection? = factory.peerConnection(with: configuration, constraints: Self.noConstraints,
                                                                  delegate: delegate)
        guard let connection = created else { throw CallingError(.media("WebRTC could not create a peer connection")) }
        var localTrack: RTCAudioTrack?
        switch callMedia.audio {
        case .sendReceive:
            let track = factory.audioTrack(with: factory.audioSource(with: Self.noConstraints), trackId: "audio-\(peer.rawValue)")
            track.isEnabled = !isMuted
            // The stream id is rewritten on the wire to `local-<peer id>` (docs/sdk.md "Wire conventions").
            _ = connection.add(track, streamIds: ["local"])
            localTrack = track
        case .receiveOnly:
            let receiveOnly = RTCRtpTransceiverInit()
            receiveOnly.direction = .recvOnly
            _ = connection.addTransceiver(of: .audio, init: receiveOnly)
        case .none:
            break
        }
        let call = Call(connection: connection, delegate: delegate, localTrack: localTrack)
        let previous = state.withLock { $0.calls.updateValue(call, forKey: peer) }
        previous?.connection.close()
    }

    public func createOffer(for peer: PeerID) async throws -> SessionDescription {
        let connection = try call(peer).connection
        let offer = try await Self.describe { done in connection.offer(for: Self.noConstraints, completionHandler: done) }
        try await Self.complete { done in connection.setLocalDescription(offer.rtc, completionHandler: done) }
        return offer.description
    }

    public func createIceRestartOffer(for peer: PeerID, iceServers servers: [IceServer]) async throws -> SessionDescription {
        let connection = try call(peer).connection
        if !servers.isEmpty {
            let configuration = connection.configuration
            configuration.iceServers = servers.map(Self.rtcServer)
            _ = connection.setConfiguration(configuration)
        }
        // The next offer carries new ICE credentials (RFC 8445 §9).
        connection.restartIce()
        return try await createOffer(for: peer)
    }

    public func createAnswer(for peer: PeerID) async throws -> SessionDescription {
        let connection = try call(peer).connection
        let answer = try await Self.describe { done in connection.answer(for: Self.noConstraints, completionHandler: done) }
        try await Self.complete { done in connection.setLocalDescription(answer.rtc, completionHandler: done) }
        return answer.description
    }

    public func setRemoteDescription(_ description: SessionDescription, for peer: PeerID) async throws {
        let call = try call(peer)
        let remote = RTCSessionDescription(type: description.kind == .offer ? .offer : .answer, sdp: description.sdp)
        try await Self.complete { done in call.connection.setRemoteDescription(remote, completionHandler: done) }
        // Candidates that arrived before the description now have somewhere to go.
        let queued = call.candidates.withLock { candidates -> [IceCandidate] in
            defer { candidates.pending = [] }
            candidates.remoteSet = true
            return candidates.pending
        }
        for candidate in queued { try await add(candidate, to: call.connection) }
    }

    public func addCandidate(_ candidate: IceCandidate, for peer: PeerID) async throws {
        guard !candidate.candidate.isEmpty else { return }  // end of candidates: nothing to hand over
        let call = try call(peer)
        let queued = call.candidates.withLock { candidates -> Bool in
            guard !candidates.remoteSet else { return false }
            candidates.pending.append(candidate)
            return true
        }
        if !queued { try await add(candidate, to: call.connection) }
    }

    public func close(peer: PeerID) {
        let ended = state.withLock { state -> Call? in
            state.iceServers[peer] = nil
            state.media[peer] = nil
            return state.calls.removeValue(forKey: peer)
        }
        ended?.connection.close()
    }

    public func setMuted(_ muted: Bool) {
        let tracks = state.withLock { state -> [Call] in
            state.muted = muted
            return Array(state.calls.values)
        }.compactMap(\.localTrack)
        for track in tracks { track.isEnabled = !muted }
    }

    public func stats() async -> StatsSample? {
        let connections = state.withLock { Array($0.calls.values) }.map(\.connection)
        guard !connections.isEmpty else { return nil }
        var entries: [WebRTCStatEntry] = []
        for connection in connections {
            entries += await withCheckedContinuation { (continuation: CheckedContinuation<[WebRTCStatEntry], Never>) in
                connection.statistics { report in continuation.resume(returning: Self.entries(report)) }
            }
        }
        return state.withLock { state -> StatsSample in
            let (sample, baseline) = WebRTCStats.sample(entries, previous: state.statsBaseline)
            state.statsBaseline = baseline
            return sample
        }
    }

    // MARK: internals

    /// One peer's connection and what the engine keeps beside it.
    /// `@unchecked Sendable`: WebRTC's objects are thread-safe but not marked Sendable, and what
    /// changes is in `candidates`.
    private final class Call: @unchecked Sendable {
        let connection: RTCPeerConnection
        /// WebRTC holds its delegate weakly.
        let delegate: PeerDelegate
        let localTrack: RTCAudioTrack?
        /// Remote candidates that arrived before the remote description, and whether it is set.
        let candidates = Locked(CandidateQueue())

        struct CandidateQueue {
            var remoteSet = false
            var pending: [IceCandidate] = []
        }

        init(connection: RTCPeerConnection, delegate: PeerDelegate, localTrack: RTCAudioTrack?) {
            self.connection = connection
            self.delegate = delegate
            self.localTrack = localTrack
        }
    }

    private static var noConstraints: RTCMediaConstraints { RTCMediaConstraints(mandatoryConstraints: nil, optionalConstraints: nil) }

    private func call(_ peer: PeerID) throws -> Call {
        guard let call = state.withLock({ $0.calls[peer] }) else { throw CallingError(.media("no peer connection with \(peer)")) }
        return call
    }

    /// Voice-chat mode (echo cancellation, the receiver or headset route), once.
    private func prepareAudioSession() throws {
        guard configuresAudioSession, !state.withLock({ $0.audioSessionReady }) else { return }
        #if os(iOS) || WEBRTC_STUB
        let session = RTCAudioSession.sharedInstance()
        let configuration = RTCAudioSessionConfiguration.webRTC()
        // AVAudioSession.Mode.voiceChat's raw value; the stub has no AVFoundation to name it by.
        configuration.mode = "AVAudioSessionModeVoiceChat"
        session.lockForConfiguration()
        defer { session.unlockForConfiguration() }
        try session.setConfiguration(configuration, active: true)
        #endif
        state.withLock { $0.audioSessionReady = true }
    }

    private func add(_ candidate: IceCandidate, to connection: RTCPeerConnection) async throws {
        let rtc = RTCIceCandidate(sdp: candidate.candidate, sdpMLineIndex: Int32(candidate.sdpMLineIndex ?? 0),
                                  sdpMid: candidate.sdpMid)
        try await Self.complete { done in connection.add(rtc, completionHandler: done) }
    }

    private static func rtcServer(_ server: IceServer) -> RTCIceServer {
        RTCIceServer(urlStrings: server.urls, username: server.username, credential: server.credential)
    }

    /// A description and the RTC object it came from, carried across a continuation.
    private struct Described: @unchecked Sendable {
        // @unchecked: RTCSessionDescription is immutable.
        let rtc: RTCSessionDescription
        var description: SessionDescription {
            SessionDescription(kind: rtc.type == .offer ? .offer : .answer, sdp: rtc.sdp)
        }
    }

    private static func describe(_ start: (@escaping (RTCSessionDescription?, (any Error)?) -> Void) -> Void)
        async throws -> Described
    {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Described, any Error>) in
            start { description, error in
                if let description { continuation.resume(returning: Described(rtc: description)) } else {
                    continuation.resume(throwing: CallingError(.media("WebRTC: \(error.map { "\($0)" } ?? "no description")")))
                }
            }
        }
    }

    private static func complete(_ start: (@escaping ((any Error)?) -> Void) -> Void) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            start { error in
                if let error { continuation.resume(throwing: CallingError(.media("WebRTC: \(error)"))) } else {
                    continuation.resume()
                }
            }
        }
    }

    /// The report's entries in the shape `WebRTCStats` reads.
    static func entries(_ report: RTCStatisticsReport) -> [WebRTCStatEntry] {
        report.statistics.values.map { statistic in
            var values: [String: WebRTCStatEntry.Value] = [:]
            for (key, value) in statistic.values {
                if let string = value as? String {
                    values[key] = .string(string)
                } else if let number = value as? NSNumber {
                    // NSNumber holds both; the members this SDK reads as booleans are `selected`, `nominated`, `isRemote`.
                    values[key] = ["selected", "nominated", "isRemote"].contains(key) ? .bool(number.boolValue)
                                                                                        : .number(number.doubleValue)
                }
            }
            return WebRTCStatEntry(id: statistic.id, type: statistic.type, timestampMs: statistic.timestamp_us / 1000,
                                   values: values)
        }
    }

    /// The state WebRTC reports, as signaling knows it.
    static func state(_ state: RTCPeerConnectionState) -> PeerConnectionState {
        switch state {
        case .new: .new
        case .connecting: .connecting
        case .connected: .connected
        case .disconnected: .disconnected
        case .failed: .failed
        case .closed: .closed
        @unknown default: .failed
        }
    }
}

/// One peer connection's delegate: candidates, connection state and remote tracks to the engine's
/// callbacks. WebRTC calls it on its signaling thread.
private final class PeerDelegate: NSObject, RTCPeerConnectionDelegate, @unchecked Sendable {
    // @unchecked: only immutable `let`s of Sendable closures.
    let peer: PeerID
    let onCandidate: @Sendable (IceCandidate) -> Void
    let onStateChange: @Sendable (PeerConnectionState) -> Void
    let onTrack: @Sendable (RemoteTrack) -> Void

    init(peer: PeerID, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
         onStateChange: @escaping @Sendable (PeerConnectionState) -> Void, onTrack: @escaping @Sendable (RemoteTrack) -> Void)
    {
        self.peer = peer
        self.onCandidate = onCandidate
        self.onStateChange = onStateChange
        self.onTrack = onTrack
    }

    func peerConnection(_ peerConnection: RTCPeerConnection, didGenerate candidate: RTCIceCandidate) {
        onCandidate(IceCandidate(candidate: candidate.sdp, sdpMid: candidate.sdpMid, sdpMLineIndex: Int(candidate.sdpMLineIndex)))
    }

    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCPeerConnectionState) {
        onStateChange(WebRTCMediaEngine.state(newState))
    }

    func peerConnection(_ peerConnection: RTCPeerConnection, didAdd rtpReceiver: RTCRtpReceiver,
                        streams mediaStreams: [RTCMediaStream])
    {
        guard let track = rtpReceiver.track else { return }
        onTrack(RemoteTrack(kind: track.kind, id: track.trackId))
    }

    // Required by the protocol; signaling needs none of them.
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange stateChanged: RTCSignalingState) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didAdd stream: RTCMediaStream) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didRemove stream: RTCMediaStream) {}
    func peerConnectionShouldNegotiate(_ peerConnection: RTCPeerConnection) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCIceConnectionState) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCIceGatheringState) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didRemove candidates: [RTCIceCandidate]) {}
    func peerConnection(_ peerConnection: RTCPeerConnection, didOpen dataChannel: RTCDataChannel) {}
}
