import CallingClient
import Foundation

/// What a `GStreamerWebCall` reports, in order.
public enum WebCallEvent: Sendable, Equatable {
    /// The agent's `status` on the control channel: `connected`, then `ended` or `replaced`.
    case status(String)
    /// A `pong` answering `ping()`; `rttMilliseconds` measured from its echoed `ts`.
    case pong(rttMilliseconds: Int64)
    /// The peer connection changed state.
    case connectionState(PeerConnectionState)
    /// Media stayed lost past the grace period: a new peer connection is posted with the same
    /// token (`WebCallClient.reconnect`), attempt 1, 2, …; `status connected` follows on success.
    case reconnecting(attempt: Int)
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
    // @unchecked: `ended` and `pings` only under `lock`; the rest is immutable or thread-safe.
    /// Every event, in order, for one consumer.
    public let events: AsyncStream<WebCallEvent>
    /// The HTTP side (session id, `retryAfter`).
    public let client: WebCallClient
    /// The media engine of this call (stats, received audio, data channels).
    public let engine: GStreamerMediaEngine

    private let continuation: AsyncStream<WebCallEvent>.Continuation
    private let lock = NSLock()
    private var ended = false
    private var forwarding: Task<Void, Never>?
    /// Numbers the peer connections; reports of a replaced one are ignored.
    private var generation = 0
    private var grace: Task<Void, Never>?
    private var reconnecting = false
    /// Set when the call ends: the connection's last statistics, read before it is closed.
    private var closing: Task<PeerMediaStats?, Never>?
    /// How long lost media may take to come back before a reconnect (docs/sdk.md "Media").
    public var disconnectGrace: TimeInterval = 5
    /// Waits before reconnect attempt 1, 2, 3; the call ends as `disconnected` after the last.
    public var reconnectDelays: [TimeInterval] = [0, 1, 2, 4]
    /// The peer connection's name inside the engine.
    static let peer = PeerID("session")

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
        forwarding?.cancel()
        engine.close(peer: Self.peer)
        continuation.finish()
    }

    /// Creates the peer connection, posts its offer and applies the agent's answer. Throws the
    /// `CallingError` of a refused POST (503 `no_answering_peer` with `client.retryAfter`…).
    public func start() async throws {
        await engine.warmUp()
        let media = engine.events
        forwarding = Task { [weak self] in
            for await event in media { self?.forward(event) }
        }
        do {
            try await negotiate(first: true)
        } catch {
            finish("failed")
            throw error
        }
    }

    /// A new peer connection, its offer posted (`start` the first time, `reconnect` after).
    private func negotiate(first: Bool) async throws {
        let mine = lock.withLock { () -> Int in
            generation += 1
            return generation
        }
        try await engine.createPeerConnection(for: Self.peer, onCandidate: { _ in }, onStateChange: { [weak self] state in
            self?.stateChanged(state, generation: mine)
        })
        let offer = try await engine.createOffer(for: Self.peer)
        let answer = first ? try await client.start(offerSDP: offer.sdp) : try await client.reconnect(offerSDP: offer.sdp)
        try await engine.setRemoteDescription(SessionDescription(kind: .answer, sdp: answer), for: Self.peer)
    }

    /// After the grace period: new peer connections with backoff until one is answered.
    private func reconnect() async {
        guard lock.withLock({ () -> Bool in
            defer { reconnecting = true }
            return !reconnecting && !ended
        }) else { return }
        defer { lock.withLock { reconnecting = false } }
        for (index, delay) in reconnectDelays.enumerated() {
            if delay > 0 { try? await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            guard !lock.withLock({ ended }) else { return }
            continuation.yield(.reconnecting(attempt: index + 1))
            do {
                try await negotiate(first: false)
                return
            } catch {
                continue  // the network may still be down; the next attempt waits longer
            }
        }
        finish("disconnected")
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
        guard !lock.withLock({ ended }) else { return }
        if (try? control(.hangup)) != nil { try? await Task.sleep(nanoseconds: 200_000_000) }
        try? await client.hangup()
        finish("hangup")
    }

    /// Statistics of the call's peer connection (packets, audio levels, the tone heard); after
    /// the call ended, what it had measured when it ended.
    public func stats() async -> PeerMediaStats? {
        if let closing = lock.withLock({ closing }) { return await closing.value }
        return await engine.stats(for: Self.peer)
    }

    private func control(_ message: ControlMessage) throws {
        try engine.send(message.text, label: "control", to: Self.peer)
    }

    private func forward(_ event: MediaEvent) {
        guard case .control(_, let message) = event else { return }
        switch message {
        case .status(let state):
            continuation.yield(.status(state))
            if state == "ended" || state == "replaced" { finish(state) }
        case .pong(let ts):
            continuation.yield(.pong(rttMilliseconds: max(0, Int64(Date().timeIntervalSince1970 * 1000) - ts)))
        default:
            break
        }
    }

    private func stateChanged(_ state: PeerConnectionState, generation: Int) {
        guard lock.withLock({ generation == self.generation && !ended }) else { return }
        continuation.yield(.connectionState(state))
        switch state {
        case .connected:
            lock.withLock { grace?.cancel() }
        case .disconnected:
            let wait = disconnectGrace
            lock.withLock {
                grace?.cancel()
                grace = Task { [weak self] in
                    try? await Task.sleep(nanoseconds: UInt64(wait * 1e9))
                    guard !Task.isCancelled else { return }
                    await self?.reconnect()
                }
            }
        case .failed:
            lock.withLock { grace?.cancel() }
            Task { [weak self] in await self?.reconnect() }
        default:
            break
        }
    }

    private func finish(_ reason: String) {
        guard lock.withLock({ () -> Bool in
            defer { ended = true }
            return !ended
        }) else { return }
        // Closing the connection discards its statistics, and an app asks for them once the
        // call is over (`.ended`): read them first, then close.
        let engine = engine
        let closing = Task { () -> PeerMediaStats? in
            let last = await engine.stats(for: Self.peer)
            engine.close(peer: Self.peer)
            return last
        }
        lock.withLock {
            grace?.cancel()
            self.closing = closing
        }
        continuation.yield(.ended(reason: reason))
    }
}
