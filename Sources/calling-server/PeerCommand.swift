import CallingClient
import CallingLogging
import CallingMedia
import CallingProtocol
import CallingServer
import Dispatch
import Foundation

/// `calling-server peer`: a Linux WebRTC peer that joins a room through a calling-server, calls
/// or answers with real Opus audio and data channels, and reports what it measured.
enum PeerCommand {
    static let usage = """
        usage: calling-server peer --url ws://HOST:PORT/v1/ws --token JWT [options]

          --call PEER          call PEER (now, or when it joins); without it, answer incoming calls
          --tone [HZ]          send a sine tone (default 440 Hz; the default input)
          --play FILE.wav      send a 16-bit PCM WAV file once, then silence
          --echo               send every peer its own audio back; echo its data messages too
          --silence            send silence
          --record FILE.wav    write received audio (48 kHz mono)
          --send-data TEXT     send TEXT on the reliable data channel "chat" when it opens
          --send-unreliable TEXT  send TEXT on the unreliable channel "state" when it opens
          --answer-sessions    answer HTTP sessions (webrtc-proxy/WHIP) and speak their control channel
          --relay-only         use TURN relay candidates only (servers from GET /v1/ice)
          --seconds N          hang up and exit after N seconds (default: on SIGINT/SIGTERM)
          --stay               keep answering after a call ends (an agent or bot serving many calls)
          --ice-restart-window S  how long a room call may be without media before it ends as
                               disconnected (the SDK's iceRestartWindow, default 15)
          --stats-seconds N    print stats every N seconds (default 5)
          --web-call CALL_ID   be the app of an HTTP session instead (docs/protocol.md "HTTP sessions"):
                               --url is the server's http(s):// base, --token the call's access_token;
                               offers, opens the control channel, pings, and hangs up after --seconds
          --dtmf DIGITS        with --web-call: send these keys on the control channel once connected (once per call)
          --ca-file FILE.pem   with a wss:// URL: trust these CA certificates instead of the system store
          --insecure-skip-tls-verify  with a wss:// URL: accept ANY certificate (development only; warns)

        Exits when the last call ends (after at least one call; not with --stay), after --seconds,
        or on a signal.
        The last line is `summary {json}`: connected, calls, connect_ms, packets_sent, packets_received,
        audio_frames_received, rms_dbfs, dominant_hz, data_received, data_by_label, data_sent, control_received,
        hangup_reason, local_candidate_types, rtt_ms, jitter_ms, packet_loss.
        """

    struct Options {
        var url: URL?
        var token: String?
        var call: PeerID?
        var input: AudioInput = .tone(440)
        var record: URL?
        var echo = false
        var sendData: String?
        var sendUnreliable: String?
        var answerSessions = false
        var relayOnly = false
        var seconds: Double?
        var statsSeconds: Double = 5
        var stay = false
        var iceRestartWindow: Double?
        var caFile: String?
        var insecureSkipTLSVerify = false
        var webCall: CallID?
        var dtmf: String?
    }

    struct Problem: Error { let message: String }

    static func parse(_ arguments: ArraySlice<String>) -> Result<Options, Problem> {
        var options = Options()
        var rest = arguments
        let webCall = arguments.contains("--web-call")
        func value(_ flag: String) -> String? {
            guard let next = rest.first, !next.hasPrefix("--") else { return nil }
            rest.removeFirst()
            return next
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--url":
                let schemes = webCall ? ["http", "https", "ws", "wss"] : ["ws", "wss"]
                guard let text = value(flag), let url = URL(string: text), schemes.contains(url.scheme ?? "") else {
                    return .failure(Problem(message: webCall ? "--url needs the server's http:// or https:// base"
                                                             : "--url needs a ws:// or wss:// URL"))
                }
                options.url = url
            case "--token":
                guard let token = value(flag) else { return .failure(Problem(message: "--token needs a JWT")) }
                options.token = token
            case "--call":
                guard let peer = value(flag) else { return .failure(Problem(message: "--call needs a peer id")) }
                options.call = PeerID(peer)
            case "--tone":
                if let next = rest.first, let hz = Double(next) {
                    rest.removeFirst()
                    guard hz > 0, hz < 24_000 else { return .failure(Problem(message: "--tone needs a frequency between 0 and 24000 Hz")) }
                    options.input = .tone(hz)
                } else {
                    options.input = .tone(440)
                }
            case "--play":
                guard let path = value(flag) else { return .failure(Problem(message: "--play needs a WAV file")) }
                options.input = .wav(URL(fileURLWithPath: path))
            case "--echo":
                options.echo = true
                options.input = .echo
            case "--silence": options.input = .silence
            case "--record":
                guard let path = value(flag) else { return .failure(Problem(message: "--record needs a file name")) }
                options.record = URL(fileURLWithPath: path)
            case "--send-data":
                guard let text = value(flag) else { return .failure(Problem(message: "--send-data needs a text")) }
                options.sendData = text
            case "--send-unreliable":
                guard let text = value(flag) else { return .failure(Problem(message: "--send-unreliable needs a text")) }
                options.sendUnreliable = text
            case "--answer-sessions": options.answerSessions = true
            case "--relay-only": options.relayOnly = true
            case "--stay": options.stay = true
            case "--ice-restart-window":
                guard let text = value(flag), let seconds = Double(text), seconds > 0 else { return .failure(Problem(message: "--ice-restart-window needs a positive number of seconds")) }
                options.iceRestartWindow = seconds
            case "--seconds":
                guard let text = value(flag), let seconds = Double(text), seconds > 0 else { return .failure(Problem(message: "--seconds needs a positive number")) }
                options.seconds = seconds
            case "--stats-seconds":
                guard let text = value(flag), let seconds = Double(text), seconds > 0 else { return .failure(Problem(message: "--stats-seconds needs a positive number")) }
                options.statsSeconds = seconds
            case "--ca-file":
                guard let path = value(flag) else { return .failure(Problem(message: "--ca-file needs a PEM file")) }
                guard FileManager.default.isReadableFile(atPath: path) else {
                    return .failure(Problem(message: "--ca-file \(path) cannot be read"))
                }
                options.caFile = path
            case "--insecure-skip-tls-verify": options.insecureSkipTLSVerify = true
            case "--web-call":
                guard let call = value(flag) else { return .failure(Problem(message: "--web-call needs a call id")) }
                options.webCall = CallID(call)
            case "--dtmf":
                guard let digits = value(flag), !digits.isEmpty, digits.allSatisfy({ "0123456789*#ABCD".contains($0) }) else {
                    return .failure(Problem(message: "--dtmf needs keys of 0-9 * # A-D"))
                }
                options.dtmf = digits
            default:
                return .failure(Problem(message: "unknown option \(flag)"))
            }
        }
        guard options.url != nil else { return .failure(Problem(message: "--url is required")) }
        guard options.token != nil else { return .failure(Problem(message: "--token is required")) }
        return .success(options)
    }

    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            print(usage)
            return 0
        }
        let options: Options
        switch parse(arguments) {
        case .success(let parsed): options = parsed
        case .failure(let problem):
            CallingCommand.printError("peer: \(problem.message)\n\n\(usage)")
            return 2
        }
        let finished = DispatchSemaphore(value: 0)
        let outcome = ExitCode()
        Task {
            if options.webCall != nil {
                outcome.value = await WebCallSession(options: options).run()
            } else {
                outcome.value = await PeerSession(options: options).run()
            }
            finished.signal()
        }
        finished.wait()
        return outcome.value
    }

    final class ExitCode: @unchecked Sendable {
        // @unchecked: written once by the task before the semaphore is signalled, read after.
        var value: Int32 = 1
    }
}

/// The running peer: one signaling client, one media engine, and what the summary reports.
actor PeerSession {
    private let options: PeerCommand.Options
    private var client: SignalingClient?
    private var engine: GStreamerMediaEngine?
    private var calls = Set<PeerID>()
    private var hadCall = false
    private var callCount = 0
    /// Set by the `reconnecting` state, cleared by the welcome that ends it.
    private var reconnecting = false
    private var calling = false
    private var lastStats: [PeerID: PeerMediaStats] = [:]
    private var dataReceived: [String] = []
    private var dataByLabel: [String: [String]] = [:]
    private var dataSent: [String] = []
    private var controlReceived: [String] = []
    private var connectMilliseconds: Int?
    private var hangupReason: String?
    private var done = false
    private var stop: CheckedContinuation<Void, Never>?

    init(options: PeerCommand.Options) { self.options = options }

    func run() async -> Int32 {
        let url = options.url!
        var signaling = SignalingOptions()
        signaling.tlsCAFile = options.caFile
        signaling.insecureSkipTLSVerification = options.insecureSkipTLSVerify
        // The SDK's reconnect (its default attempts and delays, ~15 s in all, as long as the
        // server's default reconnect grace): a signaling drop or a server restart mid-call
        // resumes the seat and keeps the call (docs/protocol.md "Across a server restart").
        if let window = options.iceRestartWindow { signaling.iceRestartWindow = window }
        signaling.statsInterval = options.statsSeconds
        let probe = SignalingClient(url: url, token: options.token!, options: signaling)
        var media = MediaOptions()
        media.relayOnly = options.relayOnly
        media.input = options.input
        media.output = options.record.map { .wav($0) } ?? .none
        do {
            media.iceServers = try await probe.fetchIceServers().servers
            log("ice servers=\(media.iceServers.flatMap(\.urls).joined(separator: ","))")
            if options.relayOnly, !media.iceServers.flatMap(\.urls).contains(where: { $0.hasPrefix("turn") }) {
                return fail("--relay-only needs TURN servers, and GET /v1/ice lists none (configure turn_urls)")
            }
        } catch {
            log("ice unavailable (\(error)); host candidates only")
            if options.relayOnly { return fail("--relay-only needs TURN servers from /v1/ice") }
        }
        let engine: GStreamerMediaEngine
        do {
            engine = try GStreamerMediaEngine(options: media)
        } catch {
            return fail("\(error)")
        }
        await engine.warmUp()
        signaling.mediaEngine = engine
        let client = SignalingClient(url: url, token: options.token!, options: signaling)
        self.client = client
        self.engine = engine
        installSignalHandlers()

        // The streams are taken here, before connect(): a stream only carries events from when it
        // is first asked for, and a task started now may run after the first welcome.
        let signalingStream = client.events
        let mediaStream = engine.events
        let signalingEvents = Task { for await event in signalingStream { await self.handle(event) } }
        let mediaEvents = Task { for await event in mediaStream { await self.handle(event) } }
        let ticker = Task { await self.tick() }
        do {
            let welcome = try await client.connect()
            log("state connected peer=\(welcome.peerID) room=\(welcome.roomID) peers=\(welcome.peers.map(\.peerID.rawValue).joined(separator: ","))")
            if let target = options.call, welcome.peers.contains(where: { $0.peerID == target }) { await startCall(target) }
        } catch {
            signalingEvents.cancel()
            mediaEvents.cancel()
            ticker.cancel()
            return fail("connect: \(error)")
        }
        if let seconds = options.seconds {
            Task {
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                self.finish(reason: "time")
            }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if done { continuation.resume() } else { stop = continuation }
        }
        ticker.cancel()
        // Signaling and media events arrive through two streams: a control-channel `hangup` is
        // yielded just before the call ends, but its task may not have run yet. Let it.
        try? await Task.sleep(nanoseconds: 100_000_000)
        await refreshStats()
        let hungUp = !calls.isEmpty
        for peer in calls { client.hangup(peer) }
        // The engine tells a session caller `status ended` on hanging up; give it the moment on
        // the wire it gets in a running process before this one exits.
        if hungUp { try? await Task.sleep(nanoseconds: 250_000_000) }
        printSummary()
        await client.disconnect()
        signalingEvents.cancel()
        mediaEvents.cancel()
        return 0
    }

    private func fail(_ message: String) -> Int32 {
        CallingCommand.printError("peer: \(message)")
        return 1
    }

    private func finish(reason: String) {
        guard !done else { return }
        done = true
        if hangupReason == nil { hangupReason = reason }
        log("ending reason=\(reason)")
        stop?.resume()
        stop = nil
    }

    private func installSignalHandlers() {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            // @Sendable: Dispatch runs the handler on its own queue. A closure formed in this actor
            // would otherwise be isolated to it, and Swift 6 checks that isolation at run time: a
            // SIGTERM aborted the process ("Incorrect actor executor assumption") instead of ending it.
            source.setEventHandler { @Sendable [self] in Task { await self.finish(reason: "signal") } }
            source.resume()
            SignalSources.keep(source)
        }
    }

    // MARK: events

    private func handle(_ event: CallingEvent) async {
        guard let client else { return }
        switch event {
        case .peerJoined(let info):
            log("peer-joined \(info.peerID) role=\(info.role)")
            if info.peerID == options.call, !calling { await startCall(info.peerID) }
        case .peerLeft(let peer):
            log("peer-left \(peer)")
        case .peerReconnecting(let peer):
            log("peer-reconnecting \(peer)")
        case .peerResumed(let peer):
            log("peer-resumed \(peer)")
        case .iceRestart(let peer, let attempt):
            log("ice-restart peer=\(peer) attempt=\(attempt)")
        case .connected(let welcome):
            // The first welcome is logged by run(); a reconnect's welcome follows a `reconnecting` state.
            if reconnecting {
                reconnecting = false
                log("state connected peer=\(welcome.peerID) room=\(welcome.roomID) resumed=\(welcome.resumed)")
            }
            if welcome.resumed {
                let peers = welcome.peers.map { $0.peerID.rawValue + ($0.reconnecting ? "(reconnecting)" : "") }
                log("resumed peers=\(peers.joined(separator: ","))")
            }
        case .stateChanged(.reconnecting(let attempt)):
            reconnecting = true
            log("state reconnecting attempt=\(attempt)")
        case .stateChanged(.failed(let error)):
            log("state failed \(error)")
            finish(reason: "disconnected")
        case .incoming(let call):
            let session = call.offer.sessionID
            if session != nil, !options.answerSessions {
                log("reject \(call.from) session=\(session ?? "") (no --answer-sessions)")
                try? client.reject(call.from)
                return
            }
            log("incoming \(call.from)\(session.map { " session=\($0)" } ?? "")")
            calls.insert(call.from)
            hadCall = true
            callCount += 1
            do {
                try await client.accept(call.from)
                log("answered \(call.from)")
            } catch {
                log("answer failed \(call.from): \(error)")
                callEnded(call.from, reason: "error")
            }
        case .callFailed(let peer, let error):
            // The media connection timed out or stayed lost past the grace period (docs/sdk.md "Media").
            log("call-failed \(peer) \(error)")
            if case .timedOut = error.kind { callEnded(peer, reason: "timed_out") } else { callEnded(peer, reason: "disconnected") }
        case .connectionState(let peer, let state):
            log("call-state \(state.rawValue) peer=\(peer)")
        case .hangup(let peer, let reason):
            // The SDK's reason, in the summary's snake_case: `remote` (the peer hung up),
            // `peer_left`, `cancelled`, `disconnected`, `failed`, `closed`. After `callFailed` the
            // call is already ended with `timed_out`/`disconnected` and this changes nothing.
            let name = reason.rawValue.replacingOccurrences(of: "-", with: "_")
            log("hangup \(peer) reason=\(name)")
            callEnded(peer, reason: name)
        case .rejected(let peer):
            log("rejected by \(peer)")
            callEnded(peer, reason: "rejected")
        case .stats(let sample):
            log("stats rtt_ms=\(format(sample.rttMs)) jitter_ms=\(format(sample.jitterMs)) packet_loss=\(format(sample.packetLoss)) bitrate_kbps=\(format(sample.bitrateKbps))")
        case .error(let error):
            log("error \(error)")
        case .disconnected(let error):
            log("disconnected \(error.map { "\($0)" } ?? "")")
            // A socket lost with a retryable error (a drop, a server restart's 1001) is followed
            // by the SDK's reconnect and resume, calls kept (docs/sdk.md "What survives a drop"):
            // the peer goes on. Our own disconnect (nil) or a terminal error ends it; so does
            // `failed`, once the SDK gives up reconnecting.
            if error?.isRetryable != true { finish(reason: "disconnected") }
        case .consultationEnded:
            finish(reason: "consultation_ended")
        default:
            break
        }
    }

    private func handle(_ event: MediaEvent) async {
        switch event {
        case .connected(let peer, let milliseconds):
            connectMilliseconds = connectMilliseconds ?? milliseconds
            log("connect-time peer=\(peer) connect_ms=\(milliseconds)")
        case .stateChanged(let peer, let state):
            log("state media-\(state.rawValue) peer=\(peer)")
        case .track(let peer, let track):
            log("track \(track.kind) \(track.id) peer=\(peer)")
        case .dataChannelOpen(let peer, let label):
            log("data-open \(label) peer=\(peer)")
            if let text = label == "chat" ? options.sendData : label == "state" ? options.sendUnreliable : nil {
                do {
                    try engine?.send(text, label: label, to: peer)
                    Self.append(text, to: &dataSent)
                } catch {
                    log("data-send failed: \(error)")
                }
            }
        case .dataChannelClosed(let peer, let label):
            log("data-closed \(label) peer=\(peer)")
        case .dataMessage(let peer, let label, let text):
            log("data \(label) peer=\(peer) \(text)")
            Self.append(text, to: &dataReceived)
            Self.append(text, to: &dataByLabel[label, default: []])
            if options.echo, (try? engine?.send(text, label: label, to: peer)) != nil { Self.append(text, to: &dataSent) }
        case .control(let peer, let message):
            log("control peer=\(peer) \(message.text)")
            Self.append(message.text, to: &controlReceived)
        case .failed(let peer, let reason):
            log("media-failed peer=\(peer) \(reason)")
        }
    }

    private func startCall(_ peer: PeerID) async {
        guard let client, !calling else { return }
        calling = true
        calls.insert(peer)
        hadCall = true
        callCount += 1
        log("calling \(peer)")
        do {
            try await client.call(peer)
        } catch {
            log("call failed: \(error)")
            callEnded(peer, reason: "error")
        }
    }

    /// What a summary lists, kept bounded: an agent with --stay may serve calls for months.
    private static let listCap = 1_000

    private static func append(_ text: String, to list: inout [String]) {
        if list.count >= listCap { list.removeFirst(list.count - listCap + 1) }
        list.append(text)
    }

    private func callEnded(_ peer: PeerID, reason: String) {
        guard calls.remove(peer) != nil else { return }
        // Keep the stats of the call that ended last for the summary, not of every call ever.
        if options.stay, let ended = lastStats[peer] {
            lastStats = [peer: ended]
        }
        if hangupReason == nil { hangupReason = reason }
        if calls.isEmpty, hadCall, !options.stay { finish(reason: reason) }
    }

    // MARK: stats

    /// Samples each call every second (the summary needs the last values after a call is gone)
    /// and prints them every `--stats-seconds`.
    private func tick() async {
        var elapsed = 0.0
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 1_000_000_000)
            await refreshStats()
            elapsed += 1
            if elapsed >= options.statsSeconds {
                elapsed = 0
                for (peer, stats) in lastStats.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where calls.contains(peer) {
                    log("peer-stats peer=\(peer) sent=\(stats.packetsSent) received=\(stats.packetsReceived) lost=\(stats.packetsLost)"
                        + " rtt_ms=\(format(stats.rttMs)) jitter_ms=\(format(stats.jitterMs)) level_dbfs=\(format(stats.audio.rmsDBFS))"
                        + " hz=\(format(stats.audio.dominantHz))")
                }
            }
        }
    }

    private func refreshStats() async {
        guard let engine else { return }
        for peer in calls {
            if let stats = await engine.stats(for: peer) { lastStats[peer] = stats }
        }
    }

    private func printSummary() {
        // The summary describes the main call: the one asked for, else the first answered.
        let stats = options.call.flatMap { lastStats[$0] } ?? lastStats.values.max { $0.packetsReceived < $1.packetsReceived }
        var fields: [String: JSONValue] = [
            "connected": .bool(connectMilliseconds != nil),
            "calls": .int(Int64(callCount)),
            "packets_sent": .int(Int64(stats?.packetsSent ?? 0)),
            "packets_received": .int(Int64(stats?.packetsReceived ?? 0)),
            "packets_lost": .int(Int64(stats?.packetsLost ?? 0)),
            "audio_frames_received": .int(Int64(stats?.audio.frames ?? 0)),
            "rms_dbfs": .double(stats?.audio.rmsDBFS ?? -120),
            "dominant_hz": .double(stats?.audio.dominantHz ?? 0),
            "data_received": .array(dataReceived.map { .string($0) }),
            "data_sent": .array(dataSent.map { .string($0) }),
            "data_by_label": .object(dataByLabel.mapValues { .array($0.map { .string($0) }) }),
            "control_received": .array(controlReceived.map { .string($0) }),
            "local_candidate_types": .array((stats?.localCandidateTypes ?? []).map { .string($0) }),
        ]
        if let connectMilliseconds { fields["connect_ms"] = .int(Int64(connectMilliseconds)) }
        if let hangupReason { fields["hangup_reason"] = .string(hangupReason) }
        if let rtt = stats?.rttMs { fields["rtt_ms"] = .double(rtt) }
        if let jitter = stats?.jitterMs { fields["jitter_ms"] = .double(jitter) }
        if let loss = stats?.packetLoss { fields["packet_loss"] = .double(loss) }
        PeerOutput.summary(JSONWriter.string(.object(fields)))
    }

    private nonisolated func log(_ line: String) { PeerOutput.line(line) }

    private nonisolated func format(_ value: Double?) -> String {
        guard let value else { return "-" }
        return String(format: "%.1f", value)
    }
}

/// `calling-server peer --web-call`: the app side of an HTTP session, on `GStreamerWebCall`.
actor WebCallSession {
    private let options: PeerCommand.Options
    private var statuses: [String] = []
    private var pongMilliseconds: Int64?
    private var reconnects = 0
    private var restarts = 0
    private var restarted = 0
    private var previousReplaced = 0
    private var dtmfSent = false
    private var endedReason: String?
    private var sawEnded = false
    private var stop: CheckedContinuation<Void, Never>?
    private var call: GStreamerWebCall?

    init(options: PeerCommand.Options) { self.options = options }

    func run() async -> Int32 {
        var web = WebCallOptions()
        web.tlsCAFile = options.caFile
        web.insecureSkipTLSVerification = options.insecureSkipTLSVerify
        let client = WebCallClient(baseURL: options.url!, callID: options.webCall!, accessToken: options.token!, options: web)
        var media = MediaOptions()
        media.input = options.input
        media.output = options.record.map { .wav($0) } ?? .none
        let call: GStreamerWebCall
        do {
            call = try GStreamerWebCall(client: client, media: media)
        } catch {
            CallingCommand.printError("peer: \(error)")
            return 1
        }
        self.call = call
        let events = Task { for await event in call.events { await self.handle(event) } }
        do {
            try await call.start()
            log("web-call started session=\(client.sessionID ?? "-")")
        } catch {
            events.cancel()
            CallingCommand.printError("peer: web call: \(error)")
            return 1
        }
        let seconds = options.seconds ?? 10
        Task {
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            self.finish("time")
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if endedReason != nil { continuation.resume() } else { stop = continuation }
        }
        let stats = await call.stats()
        if endedReason == "time" {
            await call.hangup()
            // The hangup's `ended` event comes through the event task; report it before the
            // summary, which is the last line (bounded: the event is already queued).
            for _ in 0..<50 where !sawEnded { try? await Task.sleep(nanoseconds: 20_000_000) }
        }
        var fields: [String: JSONValue] = [
            "connected": .bool(statuses.contains("connected")),
            "statuses": .array(statuses.map { .string($0) }),
            "packets_sent": .int(Int64(stats?.packetsSent ?? 0)),
            "packets_received": .int(Int64(stats?.packetsReceived ?? 0)),
            "audio_frames_received": .int(Int64(stats?.audio.frames ?? 0)),
            "rms_dbfs": .double(stats?.audio.rmsDBFS ?? -120),
            "dominant_hz": .double(stats?.audio.dominantHz ?? 0),
            "hangup_reason": .string(endedReason ?? "time"),
            "reconnect_attempts": .int(Int64(reconnects)),
            "restart_attempts": .int(Int64(restarts)),
            "restarts_recovered": .int(Int64(restarted)),
            "previous_replaced": .int(Int64(previousReplaced)),
        ]
        if let pongMilliseconds { fields["pong_rtt_ms"] = .int(pongMilliseconds) }
        PeerOutput.summary(JSONWriter.string(.object(fields)))
        events.cancel()
        return 0
    }

    private func handle(_ event: WebCallEvent) async {
        switch event {
        case .status(let state):
            log("status \(state)")
            statuses.append(state)
            if state == "connected" {
                try? call?.ping()
                // Once per call: a reconnect's new connection says `connected` again.
                if let digits = options.dtmf, !dtmfSent, (try? call?.sendDTMF(digits)) != nil {
                    dtmfSent = true
                    log("dtmf sent digits=\(digits)")
                }
            }
        case .pong(let rtt):
            log("pong rtt_ms=\(rtt)")
            pongMilliseconds = rtt
        case .connectionState(let state):
            log("state media-\(state.rawValue)")
        case .restarting(let since):
            log("restarting since_drop_ms=\(since)")
            restarts += 1
        case .restarted(let since):
            log("restarted since_drop_ms=\(since)")
            restarted += 1
        case .restartFailed(let reason):
            log("restart-failed \(reason)")
        case .reconnecting(let attempt, let since):
            log("reconnecting attempt=\(attempt) since_drop_ms=\(since)")
            reconnects += 1
        case .previousConnectionReplaced:
            log("previous-connection replaced")
            previousReplaced += 1
        case .ended(let reason):
            log("ended \(reason)")
            sawEnded = true
            if reason != "hangup" { finish(reason) }
        }
    }

    private func finish(_ reason: String) {
        guard endedReason == nil else { return }
        endedReason = reason
        stop?.resume()
        stop = nil
    }

    private nonisolated func log(_ line: String) { PeerOutput.line(line) }
}

/// The peer's standard output. Unbuffered: a test reads these lines while the peer runs, and a
/// killed peer loses none. `summary {json}` is the last line, as `--help` and docs/media.md
/// promise: events still arriving from the signaling and media tasks after it are not printed.
enum PeerOutput {
    // An NSLock, not a `Locked`: it is held across the write to standard output, which orders
    // the lines (none after the summary) and may block on a full pipe; a `Locked` body must not
    // block (docs/architecture.md, "Locks"). It guards `summarized`.
    nonisolated(unsafe) private static var summarized = false
    private static let lock = NSLock()

    static func line(_ text: String) {
        lock.withLock {
            guard !summarized else { return }
            FileHandle.standardOutput.write(Data((text + "\n").utf8))
        }
    }

    static func summary(_ json: String) {
        lock.withLock {
            guard !summarized else { return }
            summarized = true
            FileHandle.standardOutput.write(Data(("summary " + json + "\n").utf8))
        }
    }
}

/// Keeps signal sources alive for the life of the process.
enum SignalSources {
    /// `@unchecked Sendable`: a dispatch source may be used from any thread (libdispatch objects
    /// are thread-safe), but its Swift protocol does not say so; these are only kept, never used.
    private struct Kept: @unchecked Sendable { let source: any DispatchSourceSignal }
    private static let sources = Locked<[Kept]>([])
    static func keep(_ source: any DispatchSourceSignal) { sources.withLock { $0.append(Kept(source: source)) } }
}
