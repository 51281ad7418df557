import CGStreamer
import CallingClient
import CallingProtocol
import Dispatch
import Foundation

/// One WebRTC peer connection: a GStreamer pipeline around a `webrtcbin`, its Opus send branch,
/// its receive branches (added when the far end's audio arrives) and its data channels.
///
/// Threading: GStreamer calls back on its own streaming and signalling threads; every mutable
/// field is guarded by `lock`, and nothing done under the lock blocks or calls back into
/// GStreamer in a way that could wait for one of those threads.
final class PeerConnection: @unchecked Sendable {
    let peer: PeerID
    let pipeline: UnsafeMutablePointer<GstElement>
    let webrtc: UnsafeMutablePointer<GstElement>
    private let settings: Settings
    private let onCandidate: @Sendable (IceCandidate) -> Void
    private let onStateChange: @Sendable (PeerConnectionState) -> Void
    private let onEvent: @Sendable (MediaEvent) -> Void

    struct Settings: Sendable {
        var options: MediaOptions
        var certificate: DTLSCertificateValue
        /// Where received audio of this connection is written (resolved per peer by the engine).
        var recording: URL?
        /// Rate and channels of what an `appsrc` input produces (the WAV file's, else 48 kHz mono).
        var pcmFormat: (rate: Int, channels: Int)
        /// Start with the input muted (`GStreamerMediaEngine.setMuted`).
        var muted = false
        /// The offering side of an HTTP session (`GStreamerWebCall`): the offer carries every
        /// candidate (nothing is trickled to the server), and the `control` channel's `status`
        /// and `pong` are this side's to read.
        var sessionCaller = false
        /// What an offer made here sends (`CallMedia`); an answer follows the offer.
        var media = CallMedia.standard
    }

    private let lock = NSLock()
    // Everything below: guarded by `lock`.
    private var sendBranchAdded = false
    private var started = false
    /// The `appsrc` of a WAV, PCM or echo input; the pacer takes it through `playingPCMSource`.
    private var pcmSource: UnsafeMutablePointer<GstElement>?
    /// The `volume` element of the send branch: muting it sends silence and keeps the stream.
    private var micVolume: UnsafeMutablePointer<GstElement>?
    /// Remote tracks received so far (names them).
    private var remoteTracks = 0
    /// Whether the input is muted now (the send branch may not exist yet).
    private var inputMuted = false
    private var channels: [String: OpaquePointer] = [:]
    private var openChannels = Set<String>()
    private(set) var isSession = false
    private var localMids: [String?] = []
    private var remoteMids: [String?] = []
    private var localCandidates: [(mline: Int, candidate: String)] = []
    private var gatheringComplete = false
    private var gatheringWaiters: [CheckedContinuation<Void, Never>] = []
    private var negotiationStarted: DispatchTime?
    private var connectedAfter: Int?
    private var lastState: PeerConnectionState = .new
    private var ended = false
    /// `tearDown()` ran: the pipeline is stopped, nothing more is sent.
    private var tornDown = false
    /// The caller said `hangup` on the control channel: no `status ended` goes back.
    private var remoteHungUp = false
    /// The caller said `mute`: its audio is ignored until it unmutes (docs/protocol.md,
    /// "The control channel").
    private var remoteMuted = false
    private var meter = AudioMeter()
    private var recorder: WAVFile.Writer?
    /// Received audio waiting to be sent back (`AudioInput.echo`), capped at 200 ms.
    private var echoBacklog: [Int16] = []
    /// Position in the WAV file (`AudioInput.wav`): each call plays it from the start. The one
    /// field not under `lock`: only the engine's pacer touches it, under the engine's lock.
    var wavPosition = 0
    private var previousTotals: (bytes: Double, at: DispatchTime)?

    init(peer: PeerID, settings: Settings, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
         onStateChange: @escaping @Sendable (PeerConnectionState) -> Void, onEvent: @escaping @Sendable (MediaEvent) -> Void) throws
    {
        self.peer = peer
        self.settings = settings
        self.onCandidate = onCandidate
        self.onStateChange = onStateChange
        inputMuted = settings.muted
        self.onEvent = onEvent
        // Before the pipeline exists: a file that cannot be written must not leak one.
        recorder = try settings.recording.map { try WAVFile.Writer(url: $0) }
        guard let pipeline = gst_pipeline_new("peer-\(peer.rawValue)") else { throw MediaError.pipeline("no pipeline") }
        guard let webrtc = gst_element_factory_make("webrtcbin", "webrtc") else {
            gst_object_unref(UnsafeMutableRawPointer(pipeline))
            throw MediaError.pipeline("no webrtcbin")
        }
        self.pipeline = pipeline
        self.webrtc = webrtc
        configureICE(settings.options)
        // One BUNDLE transport for audio and data: one ICE/DTLS handshake instead of two.
        cs_set_int(UnsafeMutableRawPointer(webrtc), "bundle-policy", Int32(GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE.rawValue))
        gst_bin_add(GStreamer.cast(UnsafeMutableRawPointer(pipeline)), webrtc)
        connectSignals()
    }

    // MARK: set-up

    private func configureICE(_ options: MediaOptions) {
        let element = UnsafeMutableRawPointer(webrtc)
        if let ice = cs_get_pointer(element, "ice-agent") {
            cs_set_bool(ice, "ice-tcp", options.iceTCP ? 1 : 0)
            // libnice paces connectivity checks every Ta = 20 ms and nominates regularly (a
            // check, then a second one with USE-CANDIDATE): about 45 ms of a local call's connect
            // time. RFC 8445 §14.2 allows Ta down to 5 ms.
            if cs_has_property(ice, "agent") != 0, let agent = cs_get_pointer(ice, "agent") {
                if cs_has_property(agent, "stun-pacing-timer") != 0 { cs_set_uint(agent, "stun-pacing-timer", 5) }
                g_object_unref(agent)
            }
            gst_object_unref(ice)
        }
        if options.relayOnly {
            cs_set_int(element, "ice-transport-policy", Int32(GST_WEBRTC_ICE_TRANSPORT_POLICY_RELAY.rawValue))
        }
        var stunSet = false
        for server in options.iceServers {
            for url in server.urls {
                if !stunSet, let stun = MediaSDP.webrtcbinStunURI(url) {
                    cs_set_string(element, "stun-server", stun)
                    stunSet = true
                } else if let turn = MediaSDP.webrtcbinTurnURI(url, username: server.username, credential: server.credential) {
                    _ = cs_webrtc_add_turn_server(webrtc, turn)
                }
            }
        }
    }

    private func connectSignals() {
        let element = UnsafeMutableRawPointer(webrtc)
        let onIceCandidate: @convention(c) (gpointer?, guint, UnsafePointer<gchar>?, gpointer?) -> Void = { _, mline, candidate, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let candidate else { return }
            connection.localCandidate(mline: Int(mline), String(cString: candidate))
        }
        GStreamer.connect(element, "on-ice-candidate", self, unsafeBitCast(onIceCandidate, to: GCallback.self))

        let onNotify: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, _, data in
            GStreamer.target(data, as: PeerConnection.self)?.connectionStateChanged()
        }
        GStreamer.connect(element, "notify::connection-state", self, unsafeBitCast(onNotify, to: GCallback.self))

        let onGathering: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, _, data in
            GStreamer.target(data, as: PeerConnection.self)?.gatheringStateChanged()
        }
        GStreamer.connect(element, "notify::ice-gathering-state", self, unsafeBitCast(onGathering, to: GCallback.self))

        let onDataChannel: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, channel, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let channel else { return }
            connection.adopt(channel: OpaquePointer(channel), addReference: true)
        }
        GStreamer.connect(element, "on-data-channel", self, unsafeBitCast(onDataChannel, to: GCallback.self))

        let onPadAdded: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, pad, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let pad else { return }
            connection.remotePadAdded(GStreamer.cast(pad))
        }
        GStreamer.connect(element, "pad-added", self, unsafeBitCast(onPadAdded, to: GCallback.self))

        // The DTLS elements appear inside webrtcbin once a transport exists; each gets our ECDSA
        // certificate before it starts a handshake (media-notes.md: RSA is refused by aiortc).
        let onElementAdded: @convention(c) (gpointer?, gpointer?, gpointer?, gpointer?) -> Void = { _, _, element, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let element,
                  String(cString: cs_type_name(element)) == "GstDtlsDec"
            else { return }
            cs_set_string(element, "pem", connection.settings.certificate.pem)
        }
        GStreamer.connect(UnsafeMutableRawPointer(pipeline), "deep-element-added", self, unsafeBitCast(onElementAdded, to: GCallback.self))

        let bus = gst_element_get_bus(pipeline)
        let box = Unmanaged.passRetained(GStreamer.WeakTarget(self)).toOpaque()
        gst_bus_set_sync_handler(bus, { _, message, data in
            guard let message else { return GST_BUS_DROP }
            GStreamer.target(data, as: PeerConnection.self)?.busMessage(message)
            // A sync handler that drops a message owns it (gstbus.h). Each message holds a
            // reference to the element that posted it: one left behind keeps the whole pipeline.
            gst_message_unref(message)
            return GST_BUS_DROP
        }, box, { data in Unmanaged<GStreamer.WeakTarget>.fromOpaque(data!).release() })
        gst_object_unref(UnsafeMutableRawPointer(bus))
    }

    /// The Opus send branch, linked to webrtcbin with the payload type the negotiation needs.
    /// Before `start()`: webrtcbin makes a transceiver per linked pad.
    private func addSendBranch(payloadType: Int) throws {
        let alreadyAdded = lock.withLock {
            defer { sendBranchAdded = true }
            return sendBranchAdded
        }
        guard !alreadyAdded else { return }
        let options = settings.options
        let source: String
        switch options.input {
        case .tone(let hz):
            source = "audiotestsrc is-live=true wave=sine freq=\(hz) volume=0.316 ! audio/x-raw,rate=48000,channels=1"
        case .silence:
            source = "audiotestsrc is-live=true wave=silence ! audio/x-raw,rate=48000,channels=1"
        case .wav, .pcm, .echo:
            let format = settings.pcmFormat
            source = "appsrc name=pcm is-live=true format=time do-timestamp=true max-bytes=192000 "
                + "caps=audio/x-raw,format=S16LE,layout=interleaved,rate=\(format.rate),channels=\(format.channels)"
        }
        let description = source + " ! audioconvert ! audioresample ! audio/x-raw,rate=48000,channels=1"
            + " ! volume name=mic mute=\(lock.withLock { inputMuted } ? "true" : "false")"
            + " ! opusenc bitrate=\(options.opusBitrate) frame-size=20 audio-type=voice complexity=\(options.opusComplexity) ! rtpopuspay pt=\(payloadType)"
            // encoding-params: webrtcbin writes the rtpmap from these caps when the offer is made before
            // rtpopuspay has negotiated; without it the line is `OPUS/48000`, which Chromium does not
            // match with its `opus/48000/2` (RFC 7587 §7 requires the /2).
            + " ! capsfilter caps=application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,encoding-params=(string)2,payload=\(payloadType)"
        let branch = try GStreamer.bin(description)
        gst_bin_add(GStreamer.cast(UnsafeMutableRawPointer(pipeline)), branch)
        guard gst_element_link(branch, webrtc) != 0 else { throw MediaError.pipeline("could not link the audio branch to webrtcbin") }
        if let pcm = gst_bin_get_by_name(GStreamer.cast(UnsafeMutableRawPointer(branch)), "pcm") {
            lock.withLock { pcmSource = pcm }
        }
        if let mic = gst_bin_get_by_name(GStreamer.cast(UnsafeMutableRawPointer(branch)), "mic") {
            lock.withLock { micVolume = mic }
        }
    }

    /// The `appsrc` of this connection's input once it plays; nil before (and without one).
    ///
    /// The appsrc timestamps a buffer when it is pushed (`do-timestamp`): the clock's time minus
    /// its own base time. Going to PLAYING, the pipeline hands its clock to every element first
    /// and then sets base times element by element, downstream first, so for a moment the appsrc
    /// has a clock and a base time of 0: a frame pushed then is stamped with the clock's absolute
    /// time (the machine's uptime, minutes or days ahead of the stream). webrtcbin syncs what it
    /// sends to the clock, so that first frame waits there for the uptime to pass again and
    /// nothing behind it is ever sent, for the whole call. The appsrc reaches PLAYING only after
    /// its base time is set, so frames pushed from then on are stamped on the stream's timeline.
    var playingPCMSource: UnsafeMutablePointer<GstElement>? {
        guard let source = lock.withLock({ pcmSource }), cs_element_is_playing(source) != 0 else { return nil }
        return source
    }

    private func start() throws {
        let (first, closed) = lock.withLock {
            defer { started = true }
            return (!started, tornDown)
        }
        // A stopped pipeline is never restarted: nothing would stop it again before release.
        guard !closed else { throw MediaError.pipeline("the peer connection is closed") }
        guard first else { return }
        guard gst_element_set_state(pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE else {
            throw MediaError.pipeline("the pipeline refused to play")
        }
    }

    // MARK: negotiation

    /// `CS_MEDIA_TRACE=1` prints each negotiation step with the milliseconds since the
    /// offer was made or received (stderr), to see where connect time goes.
    private static let tracing = ProcessInfo.processInfo.environment["CS_MEDIA_TRACE"] == "1"
    private let createdAt = DispatchTime.now()

    private func trace(_ step: @autoclosure () -> String) {
        guard Self.tracing else { return }
        let since = lock.withLock { negotiationStarted } ?? createdAt
        let ms = Double(DispatchTime.now().uptimeNanoseconds - since.uptimeNanoseconds) / 1e6
        FileHandle.standardError.write(Data("media-trace peer=\(peer) +\(String(format: "%.1f", ms))ms \(step())\n".utf8))
    }

    func createOffer() async throws -> SessionDescription {
        lock.withLock { negotiationStarted = negotiationStarted ?? .now() }
        let media = settings.media
        guard media.audio != .none || (media.dataChannels && !settings.options.dataChannels.isEmpty) else {
            throw MediaError.negotiation("a call needs audio or a data channel")
        }
        switch media.audio {
        case .sendReceive:
            try addSendBranch(payloadType: 111)
            trace("send branch added")
        case .receiveOnly:
            cs_webrtc_add_recvonly_audio(webrtc, 111)
            trace("receive-only audio transceiver added")
        case .none:
            break
        }
        try start()
        for spec in media.dataChannels ? settings.options.dataChannels : [] {
            let options = spec.reliable
                ? gst_structure_from_string("options, ordered=(boolean)true", nil)
                : gst_structure_from_string("options, ordered=(boolean)false, max-retransmits=(int)0", nil)
            defer { if let options { gst_structure_free(options) } }
            guard let channel = cs_webrtc_create_data_channel(webrtc, spec.label, options) else {
                throw MediaError.pipeline("webrtcbin refused data channel \(spec.label)")
            }
            adopt(channel: channel, addReference: false)
        }
        trace("pipeline playing")
        let offer = try await GStreamer.description(field: "offer") { cs_webrtc_create_offer(webrtc, $0) }
        trace("offer created")
        // Mids before the local description: gathering starts with it, and a candidate reported
        // before they are known would go out without its sdpMid (aiortc drops those).
        let text = offer.text
        lock.withLock { localMids = SDPText.mids(text) }
        try await GStreamer.completion("set-local-description") { cs_webrtc_set_local_description(webrtc, offer.pointer, $0) }
        trace("local offer set")
        var sent = text
        if settings.sessionCaller {
            await waitForGathering(timeout: settings.options.sessionGatherTimeout)
            let (candidates, complete) = lock.withLock { (localCandidates, gatheringComplete) }
            sent = MediaSDP.addingCandidates(candidates, complete: complete, to: text)
        }
        return SessionDescription(kind: .offer, sdp: MediaSDP.replacingFingerprints(sent, sha256: settings.certificate.fingerprint))
    }

    /// An ICE-restart offer on this live connection: webrtcbin's `create-offer` with the option
    /// `ice-restart` TRUE (new ufrag and password, RFC 8445 §9), set as the local description.
    func createIceRestartOffer() async throws -> SessionDescription {
        guard let options = gst_structure_from_string("options, ice-restart=(boolean)true", nil) else {
            throw MediaError.negotiation("could not build the ice-restart option")
        }
        let handle = StructureHandle(options)
        let offer = try await GStreamer.description(field: "offer") { cs_webrtc_create_offer_with(webrtc, handle.pointer, $0) }
        let text = offer.text
        lock.withLock { localMids = SDPText.mids(text) }
        try await GStreamer.completion("set-local-description") { cs_webrtc_set_local_description(webrtc, offer.pointer, $0) }
        trace("ice-restart offer set")
        return SessionDescription(kind: .offer, sdp: MediaSDP.replacingFingerprints(text, sha256: settings.certificate.fingerprint))
    }

    func setRemoteDescription(_ description: SessionDescription) async throws {
        if description.kind == .offer {
            lock.withLock {
                negotiationStarted = negotiationStarted ?? .now()
                isSession = description.sessionID != nil
            }
            if MediaSDP.hasAudio(description.sdp) {
                try addSendBranch(payloadType: MediaSDP.opusPayloadType(description.sdp) ?? 111)
            }
            trace("send branch added")
            try start()
            trace("pipeline playing")
        }
        var message: UnsafeMutablePointer<GstSDPMessage>?
        guard gst_sdp_message_new_from_text(description.sdp, &message) == GST_SDP_OK, let message else {
            throw MediaError.negotiation("unparseable \(description.kind.rawValue) SDP")
        }
        let type = description.kind == .offer ? GST_WEBRTC_SDP_TYPE_OFFER : GST_WEBRTC_SDP_TYPE_ANSWER
        guard let remote = gst_webrtc_session_description_new(type, message) else {
            throw MediaError.negotiation("could not wrap the SDP")
        }
        let handle = DescriptionHandle(remote)
        lock.withLock { remoteMids = SDPText.mids(description.sdp) }
        try await GStreamer.completion("set-remote-description") { cs_webrtc_set_remote_description(webrtc, handle.pointer, $0) }
        trace("remote \(description.kind.rawValue) set")
    }

    func createAnswer() async throws -> SessionDescription {
        let answer = try await GStreamer.description(field: "answer") { cs_webrtc_create_answer(webrtc, $0) }
        trace("answer created")
        var text = answer.text
        lock.withLock { localMids = SDPText.mids(text) }  // before gathering starts, as in createOffer
        try await GStreamer.completion("set-local-description") { cs_webrtc_set_local_description(webrtc, answer.pointer, $0) }
        trace("local answer set")
        if lock.withLock({ isSession }) {
            await waitForGathering(timeout: settings.options.sessionGatherTimeout)
            let (candidates, complete) = lock.withLock { (localCandidates, gatheringComplete) }
            text = MediaSDP.addingCandidates(candidates, complete: complete, to: text)
        }
        return SessionDescription(kind: .answer, sdp: MediaSDP.replacingFingerprints(text, sha256: settings.certificate.fingerprint))
    }

    func addRemoteCandidate(_ candidate: IceCandidate) {
        // An empty candidate is end-of-candidates; webrtcbin 1.22 needs no notice of it.
        guard !candidate.candidate.isEmpty else { return }
        let mline = candidate.sdpMLineIndex
            ?? lock.withLock { candidate.sdpMid.flatMap { mid in remoteMids.firstIndex(of: mid) } } ?? 0
        let line = candidate.candidate.hasPrefix("a=") ? String(candidate.candidate.dropFirst(2)) : candidate.candidate
        trace("remote candidate \(line.prefix(60))")
        cs_webrtc_add_ice_candidate(webrtc, guint(mline), line)
    }

    private func localCandidate(mline: Int, _ candidate: String) {
        let mid = lock.withLock { () -> String? in
            localCandidates.append((mline, candidate))
            return mline < localMids.count ? localMids[mline] : nil
        }
        trace("local candidate \(candidate.prefix(60))")
        onCandidate(IceCandidate(candidate: candidate, sdpMid: mid, sdpMLineIndex: mline))
    }

    private func gatheringStateChanged() {
        guard cs_get_int(UnsafeMutableRawPointer(webrtc), "ice-gathering-state") == Int32(GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE.rawValue) else {
            return
        }
        let waiters = lock.withLock {
            gatheringComplete = true
            defer { gatheringWaiters.removeAll() }
            return gatheringWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func waitForGathering(timeout: TimeInterval) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let waiting = lock.withLock {
                guard !gatheringComplete else { return false }
                gatheringWaiters.append(done)
                return true
            }
            guard waiting else { return done.resume() }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                let late = lock.withLock {
                    defer { gatheringWaiters.removeAll() }
                    return gatheringWaiters
                }
                for waiter in late { waiter.resume() }
            }
        }
    }

    // MARK: state

    private func connectionStateChanged() {
        let raw = cs_get_int(UnsafeMutableRawPointer(webrtc), "connection-state")
        let state: PeerConnectionState
        switch UInt32(raw) {
        case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTING.rawValue: state = .connecting
        case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED.rawValue: state = .connected
        case GST_WEBRTC_PEER_CONNECTION_STATE_DISCONNECTED.rawValue: state = .disconnected
        case GST_WEBRTC_PEER_CONNECTION_STATE_FAILED.rawValue: state = .failed
        case GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED.rawValue: state = .closed
        default: state = .new
        }
        report(state)
    }

    /// Reports a state once; after an ending state nothing more is reported.
    private func report(_ state: PeerConnectionState, reason: String? = nil) {
        let (changed, connectedMs) = lock.withLock { () -> (Bool, Int?) in
            guard !ended, state != lastState else { return (false, nil) }
            lastState = state
            // `disconnected` is not an end: ICE may come back (signaling gives it a grace period).
            if state == .failed || state == .closed { ended = true }
            if state == .connected, connectedAfter == nil, let started = negotiationStarted {
                connectedAfter = Int((DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000)
                return (true, connectedAfter)
            }
            return (true, nil)
        }
        guard changed else { return }
        trace("state \(state.rawValue)")
        onEvent(.stateChanged(peer: peer, state: state))
        if let connectedMs { onEvent(.connected(peer: peer, milliseconds: connectedMs)) }
        if let reason { onEvent(.failed(peer: peer, reason: reason)) }
        onStateChange(state)
    }

    private func busMessage(_ message: UnsafeMutablePointer<GstMessage>) {
        guard cs_message_type(message) == GST_MESSAGE_ERROR else { return }
        var error: UnsafeMutablePointer<GError>?
        var debug: UnsafeMutablePointer<gchar>?
        gst_message_parse_error(message, &error, &debug)
        g_free(debug)
        let source = String(cString: cs_message_source_name(message))
        let text = GStreamer.errorMessage(error)
        // The far end closing the association surfaces as an SCTP error: it left, nothing broke.
        if source.lowercased().contains("sctp") || text.lowercased().contains("sctp") {
            report(.closed)
        } else {
            report(.failed, reason: "\(source): \(text)")
        }
    }

    var connectMilliseconds: Int? { lock.withLock { connectedAfter } }
    var levels: AudioLevels { lock.withLock { meter.levels } }

    // MARK: received audio

    private func remotePadAdded(_ pad: UnsafeMutablePointer<GstPad>) {
        guard pad.pointee.direction == GST_PAD_SRC else { return }
        let sink: UnsafeMutablePointer<GstElement>
        do {
            sink = try GStreamer.bin("rtpopusdepay ! opusdec plc=true ! audioconvert ! audioresample"
                + " ! audio/x-raw,format=S16LE,layout=interleaved,rate=48000,channels=1"
                + " ! appsink name=out emit-signals=true sync=false max-buffers=200 drop=true")
        } catch {
            report(.failed, reason: "\(error)")
            return
        }
        gst_bin_add(GStreamer.cast(UnsafeMutableRawPointer(pipeline)), sink)
        if let appsink = gst_bin_get_by_name(GStreamer.cast(UnsafeMutableRawPointer(sink)), "out") {
            let onSample: @convention(c) (gpointer?, gpointer?) -> GstFlowReturn = { appsink, data in
                guard let appsink, let sample = gst_app_sink_pull_sample(GStreamer.cast(appsink)) else { return GST_FLOW_OK }
                defer { gst_sample_unref(sample) }
                guard let connection = GStreamer.target(data, as: PeerConnection.self),
                      let buffer = gst_sample_get_buffer(sample)
                else { return GST_FLOW_OK }
                var map = GstMapInfo()
                guard gst_buffer_map(buffer, &map, GST_MAP_READ) != 0 else { return GST_FLOW_OK }
                defer { gst_buffer_unmap(buffer, &map) }
                let samples = UnsafeBufferPointer(start: UnsafeRawPointer(map.data).assumingMemoryBound(to: Int16.self),
                                                  count: Int(map.size) / 2)
                connection.received(samples)
                return GST_FLOW_OK
            }
            GStreamer.connect(UnsafeMutableRawPointer(appsink), "new-sample", self, unsafeBitCast(onSample, to: GCallback.self))
            gst_object_unref(UnsafeMutableRawPointer(appsink))
        }
        gst_element_sync_state_with_parent(sink)
        let number = lock.withLock { () -> Int in
            remoteTracks += 1
            return remoteTracks
        }
        onEvent(.track(peer: peer, track: RemoteTrack(kind: "audio", id: "\(peer.rawValue)-audio-\(number)")))
        if let sinkPad = gst_element_get_static_pad(sink, "sink") {
            _ = gst_pad_link(pad, sinkPad)
            gst_object_unref(UnsafeMutableRawPointer(sinkPad))
        }
    }

    private func received(_ samples: UnsafeBufferPointer<Int16>) {
        let recorder = lock.withLock { () -> WAVFile.Writer?? in
            guard !remoteMuted else { return nil }
            meter.add(samples)
            if settings.options.input == .echo {
                echoBacklog.append(contentsOf: samples)
                let cap = 48_000 / 5
                if echoBacklog.count > cap { echoBacklog.removeFirst(echoBacklog.count - cap) }
            }
            return .some(self.recorder)
        }
        // nil: muted by the caller (its `mute` on the control channel), so its audio goes nowhere.
        guard let recorder else { return }
        recorder?.append(samples)
        if case .pcm(let callback) = settings.options.output { callback(peer, Array(samples)) }
    }

    /// Up to `count` samples of received audio to send back, for `AudioInput.echo`.
    func takeEcho(_ count: Int) -> [Int16] {
        lock.withLock {
            let taken = Array(echoBacklog.prefix(count))
            echoBacklog.removeFirst(taken.count)
            return taken
        }
    }

    // MARK: data channels

    private func adopt(channel: OpaquePointer, addReference: Bool) {
        if addReference { _ = gst_object_ref(UnsafeMutableRawPointer(channel)) }
        let label = GStreamer.string(cs_get_string(UnsafeMutableRawPointer(channel), "label")) ?? ""
        let previous = lock.withLock { () -> OpaquePointer? in
            defer { channels[label] = channel }
            return channels[label]
        }
        if let previous { gst_object_unref(UnsafeMutableRawPointer(previous)) }
        let object = UnsafeMutableRawPointer(channel)
        let onOpen: @convention(c) (gpointer?, gpointer?) -> Void = { channel, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let channel else { return }
            connection.channelOpened(GStreamer.string(cs_get_string(channel, "label")) ?? "")
        }
        GStreamer.connect(object, "on-open", self, unsafeBitCast(onOpen, to: GCallback.self))
        let onClose: @convention(c) (gpointer?, gpointer?) -> Void = { channel, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let channel else { return }
            connection.channelClosed(GStreamer.string(cs_get_string(channel, "label")) ?? "")
        }
        GStreamer.connect(object, "on-close", self, unsafeBitCast(onClose, to: GCallback.self))
        let onString: @convention(c) (gpointer?, UnsafePointer<gchar>?, gpointer?) -> Void = { channel, text, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let channel, let text else { return }
            connection.message(String(cString: text), on: GStreamer.string(cs_get_string(channel, "label")) ?? "")
        }
        GStreamer.connect(object, "on-message-string", self, unsafeBitCast(onString, to: GCallback.self))
        let onData: @convention(c) (gpointer?, OpaquePointer?, gpointer?) -> Void = { channel, bytes, data in
            guard let connection = GStreamer.target(data, as: PeerConnection.self), let channel, let bytes else { return }
            var size = 0
            guard let base = g_bytes_get_data(bytes, &size) else { return }
            let text = String(decoding: UnsafeRawBufferPointer(start: base, count: size), as: UTF8.self)
            connection.message(text, on: GStreamer.string(cs_get_string(channel, "label")) ?? "")
        }
        GStreamer.connect(object, "on-message-data", self, unsafeBitCast(onData, to: GCallback.self))
        // A channel the far end opened is usually open before webrtcbin hands it over.
        if cs_get_int(object, "ready-state") == Int32(GST_WEBRTC_DATA_CHANNEL_STATE_OPEN.rawValue) { channelOpened(label) }
    }

    private func channelOpened(_ label: String) {
        let (first, control) = lock.withLock { (openChannels.insert(label).inserted, isSession && label == "control") }
        guard first else { return }
        onEvent(.dataChannelOpen(peer: peer, label: label))
        if control { try? send(ControlMessage.status("connected").text, on: "control") }
    }

    private func channelClosed(_ label: String) {
        guard lock.withLock({ openChannels.remove(label) != nil }) else { return }
        onEvent(.dataChannelClosed(peer: peer, label: label))
    }

    private func message(_ text: String, on label: String) {
        let caller = settings.sessionCaller
        guard label == "control", caller || lock.withLock({ isSession }) else {
            onEvent(.dataMessage(peer: peer, label: label, text: text))
            return
        }
        guard let control = ControlMessage(text: text) else {
            onEvent(.dataMessage(peer: peer, label: label, text: text))
            return
        }
        onEvent(.control(peer: peer, message: control))
        if caller {
            // The agent ended the session (or another POST with our token took it over).
            if case .status(let state) = control, state == "ended" || state == "replaced" {
                lock.withLock { remoteHungUp = true }
                report(.closed)
            }
            return
        }
        switch control {
        case .ping(let ts): try? send(ControlMessage.pong(ts: ts).text, on: "control")
        case .mute(let muted): lock.withLock { remoteMuted = muted }
        case .hangup:
            lock.withLock { remoteHungUp = true }
            report(.closed)
        default: break
        }
    }

    func send(_ text: String, on label: String) throws {
        guard let channel = lock.withLock({ !tornDown && openChannels.contains(label) ? channels[label] : nil }) else {
            throw MediaError.noDataChannel(label)
        }
        var error: UnsafeMutablePointer<GError>?
        guard gst_webrtc_data_channel_send_string_full(channel, text, &error) != 0 else {
            throw MediaError.pipeline("send on \(label): \(GStreamer.errorMessage(error))")
        }
    }

    var openChannelLabels: [String] { lock.withLock { openChannels.sorted() } }

    // MARK: stats

    /// RTP packets received so far (webrtcbin's counters, without moving the bitrate baseline of
    /// `stats()`); nil when the pipeline did not answer.
    func packetsReceived() async -> Int? {
        let reply = await withCheckedContinuation { (done: CheckedContinuation<StatsReply?, Never>) in
            let promise = GStreamer.promise { outcome in
                guard case .replied(let reply) = outcome else { return done.resume(returning: nil) }
                done.resume(returning: StatsReply(reply))
            }
            cs_webrtc_get_stats(webrtc, promise)
            gst_promise_unref(promise)
        }
        return reply?.stats.packetsReceived
    }

    /// The state last reported to signaling.
    var state: PeerConnectionState { lock.withLock { lastState } }

    /// The media watchdog saw no packet for a while (`stalled`) or packets again: ICE can take
    /// tens of seconds to notice a dead path, signaling needs to know within seconds
    /// (`SignalingOptions.mediaDisconnectGrace`).
    func mediaFlow(stalled: Bool) {
        let current = lock.withLock { lastState }
        if stalled, current == .connected { report(.disconnected) }
        if !stalled, current == .disconnected { report(.connected) }
    }

    func stats() async -> PeerMediaStats {
        let reply = await withCheckedContinuation { (done: CheckedContinuation<StatsReply?, Never>) in
            let promise = GStreamer.promise { outcome in
                guard case .replied(let reply) = outcome else { return done.resume(returning: nil) }
                done.resume(returning: StatsReply(reply))
            }
            cs_webrtc_get_stats(webrtc, promise)
            gst_promise_unref(promise)
        }
        var stats = reply?.stats ?? PeerMediaStats()
        stats.connectMilliseconds = connectMilliseconds
        stats.audio = levels
        // No answer (the pipeline is stopping): no counters, and the bitrate baseline stays, so the
        // next sample is not measured against zero bytes.
        guard reply != nil else { return stats }
        let now = DispatchTime.now()
        let totalBytes = Double(stats.bytesSent + stats.bytesReceived)
        lock.withLock {
            if let previous = previousTotals, now.uptimeNanoseconds > previous.at.uptimeNanoseconds {
                let seconds = Double(now.uptimeNanoseconds - previous.at.uptimeNanoseconds) / 1e9
                stats.bitrateKbps = max(0, totalBytes - previous.bytes) * 8 / seconds / 1000
            }
            previousTotals = (totalBytes, now)
        }
        return stats
    }

    // MARK: teardown

    /// Tells an HTTP session's caller why the call ends (the `control` channel's `status`), unless it
    /// hung up itself.
    /// Returns whether a message went out (the caller then gives it a moment to leave).
    func announceEnd(replaced: Bool) -> Bool {
        let speak = lock.withLock { isSession && !remoteHungUp && openChannels.contains("control") }
        guard speak else { return false }
        return (try? send(ControlMessage.status(replaced ? "replaced" : "ended").text, on: "control")) != nil
    }

    /// Stops the pipeline and closes the recording. Off GStreamer's threads: the state change
    /// waits for them. The GStreamer objects stay until the last reference to this connection is
    /// gone (`deinit`): a stats poll, a send or the pacer may still hold it and use them, and a
    /// stopped webrtcbin answers them with errors instead of touching freed memory.
    func tearDown() {
        let recorder = lock.withLock { () -> WAVFile.Writer? in
            ended = true
            tornDown = true
            defer { self.recorder = nil }
            return self.recorder
        }
        gst_element_set_state(pipeline, GST_STATE_NULL)
        recorder?.close()
    }

    /// Sends silence (`true`) or the input again; the RTP stream and the call go on.
    func setMuted(_ muted: Bool) {
        guard let mic = lock.withLock({ () -> UnsafeMutablePointer<GstElement>? in
            inputMuted = muted
            return micVolume
        }) else { return }
        cs_set_bool(UnsafeMutableRawPointer(mic), "mute", muted ? 1 : 0)
    }

    deinit {
        // The last reference may be dropped on a GStreamer thread (a callback's strong reference
        // to its target): the pipeline is finalized elsewhere, never on a thread it owns.
        let objects = OwnedObjects(pipeline: pipeline, others: channels.values.map { UnsafeMutableRawPointer($0) }
            + [pcmSource.map { UnsafeMutableRawPointer($0) }, micVolume.map { UnsafeMutableRawPointer($0) }].compactMap { $0 })
        Self.releaseQueue.async { objects.release() }
    }

    private static let releaseQueue = DispatchQueue(label: "calling-media.release")

    /// References a finished connection owned, handed to `releaseQueue`.
    private struct OwnedObjects: @unchecked Sendable {
        // @unchecked: the connection that owned these references is gone; only `release()` uses them.
        let pipeline: UnsafeMutablePointer<GstElement>
        let others: [UnsafeMutableRawPointer]

        func release() {
            // A connection torn down already is in NULL; one that never was must stop first.
            gst_element_set_state(pipeline, GST_STATE_NULL)
            for object in others { gst_object_unref(object) }
            gst_object_unref(UnsafeMutableRawPointer(pipeline))
        }
    }
}

/// A certificate in the form the pipeline needs (kept apart from CallingAuth's type so this file
/// reads on its own).
struct DTLSCertificateValue: Sendable {
    var pem: String
    var fingerprint: String
}

/// What one peer connection measured.
public struct PeerMediaStats: Sendable, Equatable {
    /// RTP packets sent.
    public var packetsSent = 0
    /// RTP packets received.
    public var packetsReceived = 0
    /// RTP packets the receiver counted as lost.
    public var packetsLost = 0
    /// RTP payload bytes sent.
    public var bytesSent = 0
    /// RTP payload bytes received.
    public var bytesReceived = 0
    /// Round-trip time of the selected candidate pair, ms.
    public var rttMs: Double?
    /// Inbound jitter, ms.
    public var jitterMs: Double?
    /// 0–1 over the call so far.
    public var packetLoss: Double?
    /// Sent plus received, over the time since the previous `stats()` of this connection.
    public var bitrateKbps: Double?
    /// `host`, `srflx`, `prflx` or `relay` of the local candidates webrtcbin reports.
    public var localCandidateTypes: [String] = []
    /// Time from the first offer to `connected`, ms.
    public var connectMilliseconds: Int?
    /// What the received audio measured.
    public var audio = AudioLevels()
}

/// Reads webrtcbin's `get-stats` reply (one structure per RTCStats object) on the replying thread.
private struct StatsReply: Sendable {
    var stats = PeerMediaStats()

    init(_ reply: UnsafePointer<GstStructure>?) {
        guard let reply else { return }
        var collected = PeerMediaStats()
        withUnsafeMutablePointer(to: &collected) { target in
            _ = gst_structure_foreach(reply, { _, value, data in
                guard let entry = cs_value_get_structure(value) else { return 1 }
                let stats = data!.assumingMemoryBound(to: PeerMediaStats.self)
                StatsReply.add(entry, to: &stats.pointee)
                return 1
            }, target)
        }
        stats = collected
    }

    private static func number(_ entry: UnsafePointer<GstStructure>, _ field: String) -> Double? {
        let value = cs_value_as_double(gst_structure_get_value(entry, field))
        return value.isNaN ? nil : value
    }

    static func add(_ entry: UnsafePointer<GstStructure>, to stats: inout PeerMediaStats) {
        var type: gint = 0
        guard gst_structure_get_enum(entry, "type", cs_stats_type_gtype(), &type) != 0 else { return }
        switch UInt32(type) {
        case GST_WEBRTC_STATS_INBOUND_RTP.rawValue:
            stats.packetsReceived += Int(number(entry, "packets-received") ?? 0)
            stats.bytesReceived += Int(number(entry, "bytes-received") ?? 0)
            stats.packetsLost += max(0, Int(number(entry, "packets-lost") ?? 0))
            if let jitter = number(entry, "jitter") { stats.jitterMs = max(stats.jitterMs ?? 0, jitter * 1000) }
            let expected = stats.packetsReceived + stats.packetsLost
            if expected > 0 { stats.packetLoss = Double(stats.packetsLost) / Double(expected) }
        case GST_WEBRTC_STATS_OUTBOUND_RTP.rawValue:
            stats.packetsSent += Int(number(entry, "packets-sent") ?? 0)
            stats.bytesSent += Int(number(entry, "bytes-sent") ?? 0)
        case GST_WEBRTC_STATS_REMOTE_INBOUND_RTP.rawValue:
            if let rtt = number(entry, "round-trip-time"), rtt > 0 { stats.rttMs = max(stats.rttMs ?? 0, rtt * 1000) }
        case GST_WEBRTC_STATS_LOCAL_CANDIDATE.rawValue:
            if let type = gst_structure_get_string(entry, "candidate-type") {
                let name = String(cString: type)
                if !stats.localCandidateTypes.contains(name) { stats.localCandidateTypes.append(name) }
            }
        default:
            break
        }
    }
}
