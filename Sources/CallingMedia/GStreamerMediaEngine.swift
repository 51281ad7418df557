import CGStreamer
import CallingAuth
import CallingClient
import CallingLogging
import Dispatch
import Foundation

/// Real WebRTC media for Linux peers on GStreamer's `webrtcbin`: Opus audio both ways, data
/// channels, trickle ICE with STUN/TURN, DTLS-SRTP with an ECDSA certificate. Plug it into
/// `SignalingOptions.mediaEngine` and `SignalingClient.call/accept` negotiate through it.
///
/// ```swift
/// var media = MediaOptions()
/// media.iceServers = try await client.fetchIceServers().servers
/// media.input = .wav(URL(fileURLWithPath: "greeting.wav"))
/// media.output = .pcm { peer, samples in recognizer.feed(samples) }
/// let engine = try GStreamerMediaEngine(options: media)
/// ```
///
/// One pipeline per peer connection, so one slow or failing peer cannot stall another. Answers to
/// HTTP sessions (offers carrying `session_id`) wait for ICE gathering and speak the session's
/// `control` channel (docs/protocol.md, "The control channel"): `status connected` when it opens,
/// `pong` to `ping`, `mute` honoured, `hangup` ends the call, `status ended`/`replaced` when this
/// side ends it.
public final class GStreamerMediaEngine: MediaEngine, Sendable {
    // What changes is in `state`, a `Locked`; the rest is immutable.

    /// Every `MediaEvent`, in order. One consumer; buffered without limit.
    public let events: AsyncStream<MediaEvent>
    /// The settings given to `init`.
    public let options: MediaOptions

    private let continuation: AsyncStream<MediaEvent>.Continuation
    private let certificate: DTLSCertificateValue
    private let state: Locked<State>
    /// Whether the input needs the pacer (`PCMFeed.needsPacing`, fixed by the options).
    private let needsPacing: Bool

    private struct State {
        var connections: [PeerID: PeerConnection] = [:]
        /// Servers `SignalingClient` fetched for the next connection with a peer (`useIceServers`).
        var callIceServers: [PeerID: [IceServer]] = [:]
        /// What the next call to a peer sends (`useMedia`).
        var callMedia: [PeerID: CallMedia] = [:]
        var muted = false
        /// The app's handler, in a class: no closure as a `Locked` value (docs/architecture.md, "Locks").
        var trackHandler: TrackHandler?
        var recordings = 0
        /// The pacer's position in the input; its `frame(for:shared:)` also moves the connection's
        /// `wavPosition`, which is why that runs under this lock.
        var feed: PCMFeed
        var pacer: Pacer?
        var prewarming: Task<Void, Never>?
        var watchdog: Task<Void, Never>?
    }

    private final class TrackHandler: Sendable {
        let call: @Sendable (PeerID, RemoteTrack) -> Void
        init(_ call: @escaping @Sendable (PeerID, RemoteTrack) -> Void) { self.call = call }
    }

    /// The pacer's timer. `@unchecked Sendable`: a dispatch source may be used from any thread
    /// (libdispatch objects are thread-safe), but its Swift protocol does not say so.
    private struct Pacer: @unchecked Sendable {
        let timer: any DispatchSourceTimer
    }
    /// State changes of GStreamer pipelines wait for their streaming threads: never on those
    /// threads, never on the cooperative pool.
    private let teardownQueue = DispatchQueue(label: "calling-media.teardown")
    private let pacerQueue = DispatchQueue(label: "calling-media.pacer", qos: .userInteractive)

    /// The offering side of an HTTP session (`GStreamerWebCall`).
    let sessionCaller: Bool

    /// Loads GStreamer, makes this engine's DTLS certificate and warms up (see `warmUp`); throws when GStreamer or a plugin is missing.
    public convenience init(options: MediaOptions = MediaOptions()) throws {
        try self.init(options: options, sessionCaller: false)
    }

    init(options: MediaOptions, sessionCaller: Bool) throws {
        try GStreamer.initialize()
        self.options = options
        self.sessionCaller = sessionCaller
        let certificate = try DTLSCertificate.generate()
        self.certificate = DTLSCertificateValue(pem: certificate.pem, fingerprint: certificate.sha256Fingerprint)
        let feed = try PCMFeed(input: options.input)
        needsPacing = feed.needsPacing
        state = Locked(State(feed: feed))
        (events, continuation) = AsyncStream.makeStream(of: MediaEvent.self)
        prewarm()
    }

    deinit {
        let (pacer, watchdog, connections) = state.withLock { ($0.pacer, $0.watchdog, Array($0.connections.values)) }
        pacer?.timer.cancel()
        watchdog?.cancel()
        // An app that drops the engine without hanging up must not leave pipelines streaming.
        for connection in connections {
            teardownQueue.async { connection.tearDown() }
        }
        continuation.finish()
    }

    /// The first call of a process pays for work done once: GStreamer loading the plugins of
    /// every element a peer connection uses (nice, DTLS, SRTP, SCTP, RTP, Opus), generating an RSA
    /// key for its first DTLS element (150–525 ms, media-notes.md) and building the DTLS agent of
    /// our certificate. A throwaway connection that makes an offer does all of it now, off any
    /// call's clock; `warmUp()` waits for it.
    private func prewarm() {
        var settings = PeerConnection.Settings(options: options, certificate: certificate, recording: nil, pcmFormat: (48_000, 1))
        settings.options.input = .silence
        settings.options.output = .none
        settings.options.iceServers = []
        let queue = teardownQueue
        let task = Task.detached {
            for receiveSide in ["rtpopusdepay", "opusdec", "appsink"] {
                if let element = gst_element_factory_make(receiveSide, nil) { gst_object_unref(UnsafeMutableRawPointer(element)) }
            }
            guard let connection = try? PeerConnection(peer: PeerID("prewarm"), settings: settings, onCandidate: { _ in },
                                                       onStateChange: { _ in }, onEvent: { _ in })
            else { return }
            _ = try? await connection.createOffer()
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                queue.async {
                    connection.tearDown()
                    done.resume()
                }
            }
        }
        state.withLock { $0.prewarming = task }
    }

    /// Returns once the start-up work of `init` is done (see `prewarm`): an app that calls right
    /// after starting can wait here so its first call connects as fast as later ones.
    public func warmUp() async {
        await state.withLock { $0.prewarming }?.value
    }

    // MARK: MediaEngine

    /// One pipeline per peer connection (a previous one with `peer` is closed first).
    public func createPeerConnection(for peer: PeerID, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
                                     onStateChange: @escaping @Sendable (PeerConnectionState) -> Void) async throws
    {
        close(peer: peer)
        let pcmFormat = state.withLock { $0.feed.format }
        let recording = state.withLock { state -> URL? in
            guard case .wav(let url) = options.output else { return nil }
            defer { state.recordings += 1 }
            guard state.recordings > 0 else { return url }
            let stem = url.deletingPathExtension().lastPathComponent
            return url.deletingLastPathComponent().appendingPathComponent("\(stem)-\(peer.rawValue).wav")
        }
        var connectionOptions = options
        let (servers, muted, media) = state.withLock {
            ($0.callIceServers.removeValue(forKey: peer), $0.muted, $0.callMedia.removeValue(forKey: peer))
        }
        if let servers { connectionOptions.iceServers = servers }
        var settings = PeerConnection.Settings(options: connectionOptions, certificate: certificate, recording: recording,
                                               pcmFormat: pcmFormat)
        settings.muted = muted
        settings.sessionCaller = sessionCaller
        if let media { settings.media = media }
        let connection = try PeerConnection(
            peer: peer, settings: settings,
            onCandidate: onCandidate, onStateChange: onStateChange,
            onEvent: { [weak self, continuation] event in
                continuation.yield(event)
                if case .track(let peer, let track) = event { self?.state.withLock { $0.trackHandler }?.call(peer, track) }
            })
        state.withLock { $0.connections[peer] = connection }
        startPacerIfNeeded()
        startWatchdogIfNeeded()
    }

    /// An offer with Opus and the data channels of `MediaOptions` (or what `useMedia` chose).
    public func createOffer(for peer: PeerID) async throws -> SessionDescription {
        try await connection(peer).createOffer()
    }

    /// An ICE-restart offer on the live connection with `peer` (webrtcbin's `ice-restart`
    /// create-offer option). webrtcbin 1.22 ignores that option (the offer keeps its ICE
    /// credentials), so with it this is a renegotiation on the same connection, not a full ICE
    /// restart. `iceServers` are not applied: webrtcbin keeps the connection's servers.
    public func createIceRestartOffer(for peer: PeerID, iceServers: [IceServer]) async throws -> SessionDescription {
        try await connection(peer).createIceRestartOffer()
    }

    /// The answer to the remote offer; for an HTTP session it waits for ICE gathering and carries every candidate.
    public func createAnswer(for peer: PeerID) async throws -> SessionDescription {
        try await connection(peer).createAnswer()
    }

    /// Applies the other side's offer or answer.
    public func setRemoteDescription(_ description: SessionDescription, for peer: PeerID) async throws {
        try await connection(peer).setRemoteDescription(description)
    }

    /// Adds a trickled remote candidate.
    public func addCandidate(_ candidate: IceCandidate, for peer: PeerID) async throws {
        try connection(peer).addRemoteCandidate(candidate)
    }

    /// Closes the connection with `peer` (reason `.ended`).
    public func close(peer: PeerID) { close(peer: peer, reason: .ended) }

    /// The next connection with `peer` uses these servers instead of `MediaOptions.iceServers`.
    public func useIceServers(_ servers: [IceServer], for peer: PeerID) {
        state.withLock { $0.callIceServers[peer] = servers }
    }

    /// Reports each received audio stream to `handler` (also `MediaEvent.track`).
    public func observeTracks(_ handler: @escaping @Sendable (PeerID, RemoteTrack) -> Void) {
        let handler = TrackHandler(handler)
        state.withLock { $0.trackHandler = handler }
    }

    /// What the next offer to `peer` sends.
    public func useMedia(_ media: CallMedia, for peer: PeerID) {
        state.withLock { $0.callMedia[peer] = media }
    }

    /// Mutes (or unmutes) the input of every connection, present and later ones.
    public func setMuted(_ muted: Bool) {
        let all = state.withLock { state -> [PeerConnection] in
            state.muted = muted
            return Array(state.connections.values)
        }
        for connection in all { connection.setMuted(muted) }
    }

    /// Closes the connection, telling an HTTP session's caller `status ended` or `replaced` first.
    public func close(peer: PeerID, reason: CallEndReason) {
        guard let connection = state.withLock({ $0.connections.removeValue(forKey: peer) }) else { return }
        // A `status` on the control channel needs a moment on the wire before SCTP goes away.
        let announced = connection.announceEnd(replaced: reason == .replaced)
        teardownQueue.asyncAfter(deadline: .now() + (announced ? 0.2 : 0)) { connection.tearDown() }
    }

    /// Worst RTT and jitter, summed bitrate and overall loss over every connection; nil without one.
    public func stats() async -> StatsSample? {
        let all = state.withLock { Array($0.connections.values) }
        guard !all.isEmpty else { return nil }
        var sample = StatsSample()
        var lost = 0
        var expected = 0
        for connection in all {
            let stats = await connection.stats()
            if let rtt = stats.rttMs { sample.rttMs = max(sample.rttMs ?? 0, rtt) }
            if let jitter = stats.jitterMs { sample.jitterMs = max(sample.jitterMs ?? 0, jitter) }
            if let bitrate = stats.bitrateKbps { sample.bitrateKbps = (sample.bitrateKbps ?? 0) + bitrate }
            lost += stats.packetsLost
            expected += stats.packetsLost + stats.packetsReceived
        }
        if expected > 0 { sample.packetLoss = Double(lost) / Double(expected) }
        return sample
    }

    // MARK: beyond the seam

    /// Everything one peer connection measured so far, or nil when there is none with `peer`.
    public func stats(for peer: PeerID) async -> PeerMediaStats? {
        guard let connection = state.withLock({ $0.connections[peer] }) else { return nil }
        return await connection.stats()
    }

    /// Sends `text` on the open data channel `label` to `peer`.
    public func send(_ text: String, label: String, to peer: PeerID) throws {
        try connection(peer).send(text, on: label)
    }

    /// Labels of the data channels open with `peer`.
    public func openDataChannels(with peer: PeerID) -> [String] {
        state.withLock { $0.connections[peer] }?.openChannelLabels ?? []
    }

    /// Queues 48 kHz mono PCM for `AudioInput.pcm`: it is sent to every peer at real-time pace.
    /// At most 10 s are kept; older samples are dropped first.
    public func push(pcm samples: [Int16]) {
        state.withLock { $0.feed.push(samples) }
    }

    /// SHA-256 fingerprint of this engine's DTLS certificate, as its SDP carries it (for tests).
    var certificateFingerprint: String { certificate.fingerprint }

    private func connection(_ peer: PeerID) throws -> PeerConnection {
        guard let connection = state.withLock({ $0.connections[peer] }) else { throw MediaError.noPeerConnection(peer.rawValue) }
        return connection
    }

    // MARK: media watchdog

    /// Polls every connection's received-packet counter (see `MediaOptions.mediaStallTimeout`).
    private func startWatchdogIfNeeded() {
        let stall = options.mediaStallTimeout
        guard stall > 0 else { return }
        state.withLock { state in
            guard state.watchdog == nil else { return }
            state.watchdog = Task.detached { [weak self] in
                var flow: [ObjectIdentifier: (packets: Int, progress: DispatchTime, stalled: Bool)] = [:]
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: 250_000_000)
                    guard let self else { return }
                    let live = self.state.withLock { Array($0.connections.values) }
                    let now = DispatchTime.now()
                    var seen = Set<ObjectIdentifier>()
                    for connection in live {
                        let id = ObjectIdentifier(connection)
                        seen.insert(id)
                        guard let packets = await connection.packetsReceived() else { continue }
                        var entry = flow[id] ?? (0, now, false)
                        if packets > entry.packets {
                            entry.packets = packets
                            entry.progress = now
                            if entry.stalled {
                                entry.stalled = false
                                connection.mediaFlow(stalled: false)
                            }
                        } else if entry.packets > 0, !entry.stalled, connection.state == .connected,
                                  Double(now.uptimeNanoseconds - entry.progress.uptimeNanoseconds) / 1e9 >= stall
                        {
                            entry.stalled = true
                            connection.mediaFlow(stalled: true)
                        }
                        flow[id] = entry
                    }
                    flow = flow.filter { seen.contains($0.key) }
                }
            }
        }
    }

    // MARK: pacing

    /// Inputs fed through `appsrc` (WAV, PCM, echo) need someone to push 20 ms every 20 ms.
    private func startPacerIfNeeded() {
        guard needsPacing else { return }
        state.withLock { state in
            guard state.pacer == nil else { return }
            let timer = DispatchSource.makeTimerSource(flags: .strict, queue: pacerQueue)
            timer.schedule(deadline: .now(), repeating: .milliseconds(PCMFeed.frameMilliseconds), leeway: .milliseconds(2))
            timer.setEventHandler { [weak self] in self?.pace() }
            state.pacer = Pacer(timer: timer)
            timer.resume()
        }
    }

    private func pace() {
        let (all, shared) = state.withLock { (Array($0.connections.values), $0.feed.nextSharedFrame()) }
        for connection in all {
            // Not before its appsrc plays (see `playingPCMSource`): a frame pushed while the
            // pipeline starts can stall what the connection sends for the whole call. The WAV
            // position and the echo stay where they are until then.
            guard let source = connection.playingPCMSource else { continue }
            let frame = state.withLock { $0.feed.frame(for: connection, shared: shared) }
            PCMFeed.push(frame, to: source)
        }
    }
}
