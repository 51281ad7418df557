import CallingClient
import CallingLogging
import Foundation

/// What a `GStreamerWebCall` reports, in order.
public enum WebCallEvent: Sendable, Equatable {
    /// The agent's `status` on the control channel: `connected`, then `ended` or `replaced`.
    case status(String)
    /// A `pong` answering `ping()`; `rttMilliseconds` measured from its echoed `ts`.
    case pong(rttMilliseconds: Int64)
    /// The peer connection changed state.
    case connectionState(PeerConnectionState)
    /// The transport was lost: an ICE-restart offer on the same connection is about to be sent
    /// on the same session (`PATCH`, `WebCallClient.renegotiate`), `sinceDropMilliseconds` after
    /// the connection reported `disconnected` or `failed`. `restarted` follows when media is back
    /// within `sessionRestartWindow`, else `restartFailed` and `reconnecting`.
    case restarting(sinceDropMilliseconds: Int64)
    /// Media came back on the session the restart was sent on, `sinceDropMilliseconds` after the
    /// drop: no new session, the agent kept the call (no `status` follows: the control channel
    /// stayed open).
    case restarted(sinceDropMilliseconds: Int64)
    /// The restart did not bring media back: the PATCH was refused (`reason` `http STATUS CODE`,
    /// e.g. `http 404 session_not_found` for a session the server ended), could not be sent or
    /// was not answered in time (`network`), the engine could not make or apply the descriptions
    /// (`negotiation`), or media stayed away for `sessionRestartWindow` (`window`). A new session
    /// (`reconnecting`) follows.
    case restartFailed(reason: String)
    /// A new peer connection's offer is about to be posted with the same token
    /// (`WebCallClient.reconnect`), attempt 1, 2, …, `sinceDropMilliseconds` after the
    /// connection reported `disconnected` or `failed`; `status connected` follows on success.
    case reconnecting(attempt: Int, sinceDropMilliseconds: Int64)
    /// The agent sent `status replaced` on the connection a reconnect took over: the new offer was
    /// posted while the old connection was still open, as docs/protocol.md asks.
    case previousConnectionReplaced
    /// The call is over: `hangup` (ours), `ended`/`replaced` (the agent's status), `failed`
    /// (the first POST), `disconnected` (every reconnect attempt failed), and nothing more is
    /// reported.
    case ended(reason: String)
}

/// A Linux app calling an answering agent over the webrtc-proxy session API (docs/protocol.md,
/// "HTTP sessions"): the caller's side of the flow `WebCallClient` carries, with real media from
/// `GStreamerMediaEngine`. It makes the offer (every ICE candidate in it: the server forwards no
/// trickled candidates to a session caller), opens the `control` data channel, and speaks it:
/// `ping`/`pong`, `mute`, `dtmf`, `hangup`, and the agent's `status connected/ended/replaced`.
/// When media drops it restarts ICE on the same session (`PATCH`) and posts a new session only
/// when that does not bring media back (docs/media.md "Reconnect").
///
/// ```swift
/// let web = WebCallClient(baseURL: server, callID: callID, accessToken: accessToken)
/// var media = MediaOptions()
/// media.input = .tone(440)
/// let call = try GStreamerWebCall(client: web, media: media)
/// try await call.start()                  // POST offer → answer, media flowing
/// try call.ping(); try call.sendDTMF("5"); try call.mute(true)
/// await call.hangup()                     // control hangup, then DELETE
/// ```
public final class GStreamerWebCall: @unchecked Sendable {
    // @unchecked: what changes during the call is in `call` (a `Locked`); the rest is immutable,
    // but for the public settings below, which an app sets before `start`.
    /// Every event, in order, for one consumer.
    public let events: AsyncStream<WebCallEvent>
    /// The HTTP side (session id, `retryAfter`).
    public let client: WebCallClient
    /// The media engine of this call (stats, received audio, data channels).
    public let engine: GStreamerMediaEngine

    private let continuation: AsyncStream<WebCallEvent>.Continuation
    private let call = Locked(CallState())

    private struct CallState {
        var ended = false
        var forwarding: Task<Void, Never>?
        /// Numbers the peer connections; state reports of a replaced one are ignored.
        var generation = 0
        /// The connection of the current generation, and the one it is taking over (closed once the
        /// new offer is answered, so the agent's `status replaced` can still reach it).
        var current = PeerID("session-0")
        var previous: PeerID?
        var probe: Task<Void, Never>?
        var reconnecting = false
        /// When the current connection reported `disconnected`/`failed`; nil while it is fine.
        var droppedAt: DispatchTime?
        /// The current connection reported `failed`: it reports nothing more, so only a new session helps.
        var currentFailed = false
        /// Milliseconds from the last drop to `connected` again on the same connection.
        var recoveredAfter: Int64?
        /// When the last `pong` arrived (liveness of a connection that receives no RTP).
        var lastPong: DispatchTime?
        /// Set when the call ends: the connection's last statistics, read before it is closed.
        var closing: Task<PeerMediaStats?, Never>?
    }
    /// How long a `ping` on the control channel may wait for its `pong` once the connection
    /// reported `disconnected` (docs/media.md "Reconnect"): a pong means the transport is alive (an
    /// agent that sends no audio for a while), none means a reconnect. 0 reconnects at once.
    public var livenessWindow: TimeInterval = 0.5
    /// How long the first step of a reconnect, an ICE-restart offer sent by `PATCH` on the live
    /// session, may take to bring media back (answer applied and the connection `connected`
    /// again) before the call posts a new session instead (docs/media.md "Reconnect"). The
    /// answering side ends a call after 5 s of `disconnected`, so the window plus the liveness
    /// ping stays well under that. 0 skips the PATCH: every reconnect posts a new session.
    public var sessionRestartWindow: TimeInterval = 2
    /// Waits before reconnect attempt 1, 2, 3; the call ends as `disconnected` after the last.
    public var reconnectDelays: [TimeInterval] = [0, 1, 2, 4]

    /// `media.dataChannels` gains the `control` channel; ICE servers come from `GET /v1/ice`
    /// unless `media.iceServers` is set.
    public init(client: WebCallClient, media: MediaOptions = MediaOptions()) throws {
        self.client = client
        var options = media
        options.dataChannels = [DataChannelSpec(label: "control")] + media.dataChannels.filter { $0.label != "control" }
        engine = try GStreamerMediaEngine(options: options, sessionCaller: true)
        (events, continuation) = AsyncStream.makeStream(of: WebCallEvent.self, bufferingPolicy: .bufferingNewest(256))
    }

    deinit {
        let (forwarding, probe, current, previous) = call.withLock { ($0.forwarding, $0.probe, $0.current, $0.previous) }
        forwarding?.cancel()
        probe?.cancel()
        engine.close(peer: current)
        if let previous { engine.close(peer: previous) }
        continuation.finish()
    }

    /// Creates the peer connection, posts its offer and applies the agent's answer. Throws the
    /// `CallingError` of a refused POST (503 `no_answering_peer` with `client.retryAfter`…).
    public func start() async throws {
        await engine.warmUp()
        let media = engine.events
        let forwarding = Task { [weak self] in
            for await event in media { self?.forward(event) }
        }
        call.withLock { $0.forwarding = forwarding }
        do {
            try await negotiate(first: true)
        } catch {
            finish("failed")
            throw error
        }
    }

    /// A new peer connection, its offer posted (`start` the first time, `reconnect` after). A
    /// reconnect posts while the old connection is still open and closes it after the answer.
    private func negotiate(first: Bool, attempt: Int = 0) async throws {
        let (mine, peer) = call.withLock { call -> (Int, PeerID) in
            call.generation += 1
            if !first, call.previous == nil { call.previous = call.current }
            call.current = PeerID("session-\(call.generation)")
            call.currentFailed = false
            return (call.generation, call.current)
        }
        do {
            try await engine.createPeerConnection(for: peer, onCandidate: { _ in }, onStateChange: { [weak self] state in
                self?.stateChanged(state, generation: mine)
            })
            let offer = try await engine.createOffer(for: peer)
            let answer: String
            if first {
                answer = try await client.start(offerSDP: offer.sdp)
            } else {
                continuation.yield(.reconnecting(attempt: attempt, sinceDropMilliseconds: sinceDrop()))
                answer = try await client.reconnect(offerSDP: offer.sdp)
            }
            try await engine.setRemoteDescription(SessionDescription(kind: .answer, sdp: answer), for: peer)
        } catch {
            engine.close(peer: peer)
            throw error
        }
        let old = call.withLock { call -> PeerID? in
            call.droppedAt = nil
            defer { call.previous = nil }
            return call.previous
        }
        if let old { engine.close(peer: old) }
    }

    /// Milliseconds since the current connection reported `disconnected` or `failed`.
    private func sinceDrop() -> Int64 {
        call.withLock { $0.droppedAt }.map { Int64((DispatchTime.now().uptimeNanoseconds - $0.uptimeNanoseconds) / 1_000_000) } ?? 0
    }

    /// The transport was lost: first an ICE restart on the same session (`restartOnSession`),
    /// then new peer connections with backoff until one is answered.
    private func reconnect() async {
        guard call.withLock({ call -> Bool in
            defer { call.reconnecting = true }
            return !call.reconnecting && !call.ended
        }) else { return }
        defer { call.withLock { $0.reconnecting = false } }
        if await restartOnSession() { return }
        for (index, delay) in reconnectDelays.enumerated() {
            if delay > 0 { try? await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            guard !call.withLock({ $0.ended }) else { return }
            do {
                try await negotiate(first: false, attempt: index + 1)
                return
            } catch {
                continue  // the network may still be down; the next attempt waits longer
            }
        }
        finish("disconnected")
    }

    /// An ICE-restart offer on the current connection, sent by `PATCH` on the live session
    /// (docs/protocol.md "Call and session rules": the session keeps the call, the agent answers
    /// on the same peer connection, and nothing about the call changes for the server). True when
    /// media is back within `sessionRestartWindow`; false sends the caller on to a new session:
    /// the PATCH was refused (404 once the server ended the session, 409, 410, 502 …) or not
    /// answered in time, or media did not return. GStreamer 1.22's webrtcbin keeps the ICE
    /// credentials of such an offer (docs/media.md "ICE restart is a renegotiation here"), so
    /// media returns this way only on the path it had; a new path needs the new session.
    private func restartOnSession() async -> Bool {
        let window = sessionRestartWindow
        let (peer, mine) = call.withLock { ($0.current, $0.generation) }
        guard window > 0, client.sessionID != nil, !call.withLock({ $0.ended || $0.currentFailed }) else { return false }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(window * 1e9)
        continuation.yield(.restarting(sinceDropMilliseconds: sinceDrop()))
        do {
            let offer = try await engine.createIceRestartOffer(for: peer, iceServers: [])
            let answer = try await client.renegotiate(offerSDP: offer.sdp, timeout: window)
            try await engine.setRemoteDescription(SessionDescription(kind: .answer, sdp: answer), for: peer)
        } catch let error as CallingError where error.httpStatus != nil {
            continuation.yield(.restartFailed(reason: "http \(error.httpStatus ?? 0) \(error.code ?? "-")"))
            return false
        } catch let error as CallingError where error.isNetworkFailure {
            continuation.yield(.restartFailed(reason: "network"))
            return false
        } catch {
            continuation.yield(.restartFailed(reason: "negotiation"))
            return false
        }
        while DispatchTime.now().uptimeNanoseconds < deadline {
            let (over, back) = call.withLock { ($0.ended, $0.generation == mine && $0.droppedAt == nil) }
            if over { return true }
            if back {
                continuation.yield(.restarted(sinceDropMilliseconds: call.withLock { $0.recoveredAfter } ?? 0))
                return true
            }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        continuation.yield(.restartFailed(reason: "window"))
        return false
    }

    /// Sends `ping {ts}`; the agent's `pong` arrives as `.pong`.
    public func ping() throws {
        try control(.ping(ts: Int64(Date().timeIntervalSince1970 * 1000)))
    }

    /// Tells the agent we muted (`mute {muted}`) and sends silence meanwhile.
    public func mute(_ muted: Bool) throws {
        try control(.mute(muted))
        engine.setMuted(muted)
    }

    /// Sends each key (`0`–`9`, `*`, `#`, `A`–`D`) as a `dtmf` message.
    public func sendDTMF(_ digits: String) throws {
        for digit in digits { try control(.dtmf(String(digit))) }
    }

    /// Ends the call: `hangup` on the control channel (given a moment to leave before the peer
    /// connection closes), then `DELETE` of the session. Idempotent.
    public func hangup() async {
        guard !call.withLock({ $0.ended }) else { return }
        if (try? control(.hangup)) != nil { try? await Task.sleep(nanoseconds: 200_000_000) }
        try? await client.hangup()
        finish("hangup")
    }

    /// Statistics of the call's peer connection (packets, audio levels, the tone heard); after
    /// the call ended, what it had measured when it ended.
    public func stats() async -> PeerMediaStats? {
        if let closing = call.withLock({ $0.closing }) { return await closing.value }
        return await engine.stats(for: call.withLock { $0.current })
    }

    private func control(_ message: ControlMessage) throws {
        try engine.send(message.text, label: "control", to: call.withLock { $0.current })
    }

    private func forward(_ event: MediaEvent) {
        guard case .control(let peer, let message) = event else { return }
        guard peer == call.withLock({ $0.current }) else {
            // The connection a reconnect is taking over: the agent's `replaced` proves the order.
            if case .status("replaced") = message { continuation.yield(.previousConnectionReplaced) }
            return
        }
        switch message {
        case .status(let state):
            continuation.yield(.status(state))
            if state == "ended" || state == "replaced" { finish(state) }
        case .pong(let ts):
            call.withLock { $0.lastPong = .now() }
            continuation.yield(.pong(rttMilliseconds: max(0, Int64(Date().timeIntervalSince1970 * 1000) - ts)))
        default:
            break
        }
    }

    /// Only the transport decides (docs/media.md "Reconnect"): `failed` reconnects at once;
    /// `disconnected` (ICE, or no RTP for `MediaOptions.mediaStallTimeout`) reconnects unless a
    /// `ping` on the control channel is answered within `livenessWindow`, since an agent may be
    /// silent without sending RTP while its connection is fine. Audio levels play no part.
    private func stateChanged(_ state: PeerConnectionState, generation: Int) {
        guard call.withLock({ generation == $0.generation && !$0.ended }) else { return }
        continuation.yield(.connectionState(state))
        switch state {
        case .connected:
            call.withLock { call in
                call.probe?.cancel()
                call.probe = nil
                if let dropped = call.droppedAt {
                    call.recoveredAfter = Int64((DispatchTime.now().uptimeNanoseconds - dropped.uptimeNanoseconds) / 1_000_000)
                }
                call.droppedAt = nil
            }
        case .disconnected:
            let window = livenessWindow
            call.withLock { call in
                if call.droppedAt == nil { call.droppedAt = .now() }
                call.probe?.cancel()
                call.probe = Task { [weak self] in await self?.probeLiveness(window: window) }
            }
        case .failed:
            call.withLock { call in
                if call.droppedAt == nil { call.droppedAt = .now() }
                call.currentFailed = true
                call.probe?.cancel()
                call.probe = nil
            }
            Task { [weak self] in await self?.reconnect() }
        default:
            break
        }
    }

    /// Pings the disconnected connection every `window`·2 while it stays so; the first ping left
    /// unanswered for `window` (or that cannot be sent: no open control channel) reconnects.
    private func probeLiveness(window: TimeInterval) async {
        while !Task.isCancelled {
            let sent = DispatchTime.now()
            guard window > 0, (try? ping()) != nil else { break }
            try? await Task.sleep(nanoseconds: UInt64(window * 1e9))
            guard !Task.isCancelled else { return }
            guard let pong = call.withLock({ $0.lastPong }), pong >= sent else { break }
            try? await Task.sleep(nanoseconds: UInt64(window * 1e9))
        }
        guard !Task.isCancelled else { return }
        // Not in this task: the new connection's `connected` cancels the probe.
        Task { [weak self] in await self?.reconnect() }
    }

    private func finish(_ reason: String) {
        guard call.withLock({ call -> Bool in
            defer { call.ended = true }
            return !call.ended
        }) else { return }
        // Closing the connection discards its statistics, and an app asks for them once the
        // call is over (`.ended`): read them first, then close.
        let engine = engine
        let (peer, old) = call.withLock { ($0.current, $0.previous) }
        let closing = Task { () -> PeerMediaStats? in
            let last = await engine.stats(for: peer)
            engine.close(peer: peer)
            if let old { engine.close(peer: old) }
            return last
        }
        call.withLock { call in
            call.probe?.cancel()
            call.closing = closing
        }
        continuation.yield(.ended(reason: reason))
    }
}

extension CallingError {
    /// The request never got an HTTP answer (unreachable, reset, timed out).
    fileprivate var isNetworkFailure: Bool {
        if case .network = kind { return true }
        return false
    }
}
