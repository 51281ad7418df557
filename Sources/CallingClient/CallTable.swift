import CallingProtocol
import Foundation

/// `SignalingSession`'s calls, pure: offers waiting for `accept`, candidates queued until the
/// remote description is applied, which peer connection of each peer is current (so a replaced
/// one's late reports are ignored), the media connect timeout and disconnect grace, and the
/// `hangup`/`reject`/`replaced` frames that end a call. It speaks the session's actions; every
/// entry point is told whether the room connection is up (`connected`: frames may be sent) and our
/// peer id (`own`, for the stream ids of our descriptions). docs/sdk.md "Media" describes the
/// behaviour.
struct CallTable {
    let hasMediaEngine: Bool
    let connectTimeout: TimeInterval
    let disconnectGrace: TimeInterval
    /// ICE recovery timing (`SignalingOptions.iceRestartWindow` and friends).
    let ice: IceTiming

    /// How long a room call may be without ICE connectivity, and when its restarter restarts.
    struct IceTiming: Sendable {
        var window: TimeInterval = 15
        var debounce: TimeInterval = 2
        var retry: TimeInterval = 5
    }

    /// One room call's ICE recovery, the browser SDK's `_IceRecovery`: `disconnected` opens the
    /// give-up window and, after the debounce, asks for a restart; `failed` asks at once; while
    /// the window is open a restart is asked again every `retry`; `connected` closes it.
    private struct Recovery {
        /// We sent the call's first offer: only this side restarts (no glare).
        let restarter: Bool
        var windowOpen = false
        var debouncing = false
        var retrying = false
        var restarts = 0
        /// The latest state the engine reported.
        var state: PeerConnectionState = .new
    }

    private var activeCalls = Set<PeerID>()
    private var remoteDescriptionSet = Set<PeerID>()
    private var candidateQueue: [PeerID: [IceCandidate]] = [:]
    private var pendingOffers: [PeerID: SessionDescription] = [:]
    /// Peers whose latest offer came from an HTTP session (it carried `session_id`).
    private var sessionPeers = Set<PeerID>()
    /// The HTTP session each answered session call belongs to: a later offer naming the same
    /// session is its caller renegotiating (a `PATCH` with a new offer, e.g. after a media drop),
    /// answered on the same peer connection; another session id is a new connection.
    private var answeredSessions: [PeerID: String] = [:]
    /// Which peer connection of each peer is current (`call`/`accept` each create a new one). A
    /// replaced connection can still report while the engine tears it down; only the current
    /// one's reports count.
    private var currentConnection: [PeerID: UInt64] = [:]
    private var connectionCount: UInt64 = 0
    /// Calls whose media has connected at least once.
    private var mediaConnected = Set<PeerID>()
    /// ICE recovery of each room call (not of HTTP sessions' calls, whose caller restarts).
    private var recovery: [PeerID: Recovery] = [:]
    /// Peers in their reconnect grace (`peer-reconnecting` … `peer-resumed`/`peer-left`).
    private(set) var reconnecting = Set<PeerID>()
    /// The SDP session id (`o=` line) of each call's remote description, and of the last call
    /// with each peer that ended here: an ICE restart keeps it, a new connection draws a new one,
    /// so a late restart offer of an ended call is told from a new call.
    private var remoteOrigin: [PeerID: String] = [:]
    private var endedOrigin: [PeerID: String] = [:]

    /// The entry point's context, set by `collect`.
    private var connected = false
    private var own: PeerID?
    private var out: [SessionAction] = []

    init(hasMediaEngine: Bool, connectTimeout: TimeInterval, disconnectGrace: TimeInterval, ice: IceTiming = IceTiming()) {
        self.hasMediaEngine = hasMediaEngine
        self.connectTimeout = connectTimeout
        self.disconnectGrace = disconnectGrace
        self.ice = ice
    }

    // MARK: API calls

    mutating func call(_ peer: PeerID, _ media: CallMedia, _ waiter: Waiter, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.hasMediaEngine else { return table.out.append(.resume(waiter, .failure(CallingError(.media("no MediaEngine"))))) }
            guard connected else { return table.out.append(.resume(waiter, .failure(CallingError.notConnected))) }
            table.activeCalls.insert(peer)
            table.armMediaConnect(peer)
            table.recovery[peer] = Recovery(restarter: true)
            table.out.append(.media(.startCall(peer, connection: table.newConnection(peer), media: media, waiter: waiter)))
        }
    }

    mutating func accept(_ peer: PeerID, _ waiter: Waiter, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.hasMediaEngine else { return table.out.append(.resume(waiter, .failure(CallingError(.media("no MediaEngine"))))) }
            guard let offer = table.pendingOffers.removeValue(forKey: peer) else {
                return table.out.append(.resume(waiter, .failure(CallingError(.invalidState("no incoming call from \(peer)")))))
            }
            table.activeCalls.insert(peer)
            table.armMediaConnect(peer)
            table.recovery[peer] = table.sessionPeers.contains(peer) ? nil : Recovery(restarter: false)
            if let session = offer.sessionID { table.answeredSessions[peer] = session }
            table.out.append(.media(.answerCall(peer, connection: table.newConnection(peer), offer: offer, waiter: waiter)))
        }
    }

    /// `hangup(_:notify:)`.
    mutating func hangup(_ peer: PeerID, notify: Bool, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            table.endCall(peer)
            if notify, connected { table.send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"])) }
        }
    }

    /// `reject(_:)`, once the session has checked that it is connected.
    mutating func reject(_ peer: PeerID) -> [SessionAction] {
        collect(connected: true) { table in
            table.endCall(peer)
            table.send(Frame(.data, to: peer.rawValue, payload: ["kind": "reject"]))
        }
    }

    /// Every call ends (`disconnect()`, a terminal failure); `notify` tells each peer.
    mutating func endAll(notify: Bool) -> [SessionAction] {
        collect(connected: false) { table in
            for peer in table.activeCalls.sorted(by: { $0.rawValue < $1.rawValue }) {
                table.endCall(peer)
                if notify { table.send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"])) }
            }
            table.pendingOffers.removeAll()
            table.candidateQueue.removeAll()
        }
    }

    // MARK: media engine results

    /// The engine created our offer or answer (`type`) on `connection`.
    mutating func descriptionCreated(_ type: FrameType, _ peer: PeerID, connection: UInt64, _ description: SessionDescription,
                                     waiter: Waiter, connected: Bool, own: PeerID?) -> [SessionAction]
    {
        collect(connected: connected, own: own) { table in
            // Not after the call ended: a peer that left and offered again must not get this
            // connection's answer to its new offer.
            if table.currentConnection[peer] == connection, connected {
                table.send(Frame(type, to: peer.rawValue, payload: table.onTheWire(description).json))
            }
            table.out.append(.resume(waiter, .success(.done)))
        }
    }

    mutating func callFailed(_ peer: PeerID, connection: UInt64, _ message: String, waiter: Waiter) -> [SessionAction] {
        collect(connected: false) { table in
            if table.currentConnection[peer] == connection { table.endCall(peer) }
            table.out.append(.resume(waiter, .failure(CallingError(.media(message)))))
        }
    }

    mutating func remoteDescriptionApplied(_ peer: PeerID) -> [SessionAction] {
        collect(connected: false) { table in
            guard table.activeCalls.contains(peer), table.hasMediaEngine else { return }
            table.remoteDescriptionSet.insert(peer)
            for candidate in table.candidateQueue.removeValue(forKey: peer) ?? [] {
                table.out.append(.media(.addCandidate(peer, candidate)))
            }
        }
    }

    mutating func localCandidate(_ peer: PeerID, connection: UInt64, _ candidate: IceCandidate, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            // A replaced connection's late candidates would reach the peer's new one.
            if table.activeCalls.contains(peer), table.currentConnection[peer] == connection, connected {
                table.send(Frame(.candidate, to: peer.rawValue, payload: candidate.json))
            }
        }
    }

    mutating func remoteTrack(_ peer: PeerID, _ track: RemoteTrack) -> [SessionAction] {
        activeCalls.contains(peer) ? [.emit(.track(peerID: peer, track: track))] : []
    }

    mutating func connectionState(_ peer: PeerID, connection: UInt64, _ state: PeerConnectionState,
                                  connected: Bool) -> [SessionAction]
    {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer), table.currentConnection[peer] == connection else { return }
            table.emit(.connectionState(peerID: peer, state: state))
            if state != .closed, table.recovery[peer] != nil {
                if state == .connected {
                    table.mediaConnected.insert(peer)
                    table.out.append(.cancel(.mediaConnect(peer)))
                }
                return table.iceState(peer, state)
            }
            switch state {
            case .connected:
                table.mediaConnected.insert(peer)
                table.out.append(.cancel(.mediaConnect(peer)))
                table.out.append(.cancel(.mediaGrace(peer)))
            case .disconnected:
                // ICE may recover on its own (a brief network drop): the call ends only if it
                // stays disconnected for the grace period.
                table.out.append(.arm(.mediaGrace(peer), after: table.disconnectGrace))
            case .failed:
                table.mediaEnded(peer, failure: CallingError(.disconnected("the media connection failed")), reason: .failed)
            case .closed:
                table.mediaEnded(peer, failure: nil, reason: .closed)
            case .new, .connecting:
                break
            }
        }
    }

    /// The `mediaConnect` timer of `peer` fired.
    mutating func mediaConnectTimedOut(_ peer: PeerID, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer), !table.mediaConnected.contains(peer) else { return }
            table.mediaEnded(peer, failure: CallingError(.timedOut("the media connection (\(Int(table.connectTimeout)) s)")),
                             reason: .failed)
        }
    }

    /// The `mediaGrace` timer of `peer` fired.
    mutating func mediaGraceEnded(_ peer: PeerID, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer) else { return }
            table.mediaEnded(peer, failure: CallingError(.disconnected(
                "no media for \(Int(table.disconnectGrace)) s after the connection was lost")), reason: .disconnected)
        }
    }

    /// An ICE recovery timer of `peer` fired.
    mutating func iceTimerFired(_ timer: SessionTimer, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            switch timer {
            case .iceDebounce(let peer):
                guard table.recovery[peer]?.debouncing == true else { return }
                table.recovery[peer]?.debouncing = false
                table.attemptRestart(peer)
            case .iceRetry(let peer):
                guard table.recovery[peer]?.retrying == true else { return }
                table.recovery[peer]?.retrying = false
                table.attemptRestart(peer)
            case .iceWindow(let peer):
                guard table.activeCalls.contains(peer), table.recovery[peer]?.windowOpen == true else { return }
                table.recovery[peer]?.windowOpen = false
                // The server's grace bounds a reconnecting peer's absence; its `peer-left` ends the call.
                if table.reconnecting.contains(peer) { return table.openWindow(peer) }
                if connected { table.send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"])) }
                table.endCall(peer)
                table.emit(.callFailed(peerID: peer, error: CallingError(.disconnected(
                    "no ICE connectivity for \(Int(table.ice.window)) s"))))
                table.emit(.hangup(peer, reason: .disconnected))
            default:
                break
            }
        }
    }

    /// Signaling is back for `peer`'s call (our own resume, or its `peer-resumed`): restart ICE
    /// if its media is not connected, or if a recovery window is still open.
    mutating func signalingResumed(_ peer: PeerID, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer), let recovery = table.recovery[peer] else { return }
            if recovery.state == .connected {
                if recovery.windowOpen { table.attemptRestart(peer) }
                return
            }
            // A call still connecting for the first time has its connect timeout instead.
            guard table.mediaConnected.contains(peer) else { return }
            table.openWindow(peer)
            table.attemptRestart(peer)
        }
    }

    /// The engine made our ICE-restart offer, or our answer to the peer's renewed offer.
    mutating func renewed(_ peer: PeerID, connection: UInt64, _ description: SessionDescription,
                          connected: Bool, own: PeerID?) -> [SessionAction]
    {
        collect(connected: connected, own: own) { table in
            guard table.activeCalls.contains(peer), table.currentConnection[peer] == connection, connected else { return }
            let type: FrameType = description.kind == .offer ? .offer : .answer
            table.send(Frame(type, to: peer.rawValue, payload: table.onTheWire(description).json))
        }
    }

    /// `peer-reconnecting`: the call is kept; no restart is sent to it until it is back.
    mutating func peerReconnecting(_ peer: PeerID) { reconnecting.insert(peer) }

    /// `peer-resumed` (or the roster lists the peer without `reconnecting`).
    mutating func peerResumed(_ peer: PeerID) { reconnecting.remove(peer) }

    // MARK: frames

    mutating func offer(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        guard let sdp = payload?["sdp"]?.stringValue else { return [] }
        let offer = SessionDescription(kind: .offer, sdp: sdp, sessionID: payload?["session_id"]?.stringValue)
        let origin = Self.sdpSessionID(sdp)
        if offer.sessionID == nil, !activeCalls.contains(from), pendingOffers[from] == nil, let origin,
           endedOrigin[from] == origin
        {
            // A renegotiation (an ICE restart) of the call with this peer that already ended here,
            // delivered late (it waited in a stalled socket while the network was down): not a
            // new call. Tell the other side again that the call is over, in case it still tries.
            return [.send(Frame(.data, to: from.rawValue, payload: ["kind": "hangup"]))]
        }
        let renewed = offer.sessionID.map { $0 == answeredSessions[from] } ?? (recovery[from]?.restarter == false)
        if hasMediaEngine, renewed, activeCalls.contains(from), let connection = currentConnection[from] {
            // A renewed offer on a call we answered (the caller's ICE restart, or an HTTP session's
            // renegotiation on the same session): answered on the same peer connection, with no
            // `incoming`.
            return [.media(.renegotiate(from, connection: connection, offer: offer))]
        }
        if offer.sessionID != nil { sessionPeers.insert(from) } else { sessionPeers.remove(from) }
        pendingOffers[from] = offer
        remoteOrigin[from] = origin
        return [.emit(.incoming(IncomingCall(from: from, offer: offer)))]
    }

    mutating func answer(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        if hasMediaEngine, activeCalls.contains(from), let sdp = payload?["sdp"]?.stringValue {
            remoteOrigin[from] = Self.sdpSessionID(sdp)
            return [.media(.applyAnswer(from, SessionDescription(kind: .answer, sdp: sdp)))]
        }
        return [.emit(.signal(type: FrameType.answer.rawValue, from: from, payload: payload))]
    }

    mutating func candidate(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        guard hasMediaEngine, activeCalls.contains(from) || pendingOffers[from] != nil, let candidate = IceCandidate(payload) else {
            return [.emit(.signal(type: FrameType.candidate.rawValue, from: from, payload: payload))]
        }
        if remoteDescriptionSet.contains(from) { return [.media(.addCandidate(from, candidate))] }
        candidateQueue[from, default: []].append(candidate)
        return []
    }

    /// A `data` frame: `hangup`, `reject` and `replaced` end the call with `from`.
    mutating func data(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        collect(connected: false) { table in
            switch payload?["kind"]?.stringValue {
            case "hangup":
                // Before our answer it is the caller giving up: the ringing ends as `cancelled`.
                let ringing = !table.activeCalls.contains(from) && table.pendingOffers[from] != nil
                table.endCall(from)
                table.emit(.hangup(from, reason: ringing ? .cancelled : .remote))
            case "reject":
                table.endCall(from)
                table.emit(.rejected(from))
            case "replaced":
                // An HTTP session's caller posted again: its next offer is a new peer connection
                // from the same peer id, so the old one ends now (docs/protocol.md "HTTP sessions").
                table.endCall(from, reason: .replaced)
                table.emit(.data(from: from, payload: payload))
            default:
                table.emit(.data(from: from, payload: payload))
            }
        }
    }

    /// The peer left the room: its call ends with `hangup` `peer-left`, a ringing offer of it
    /// with `cancelled`.
    mutating func peerGone(_ peer: PeerID) -> [SessionAction] {
        collect(connected: false) { table in
            table.sessionPeers.remove(peer)
            table.reconnecting.remove(peer)
            table.currentConnection[peer] = nil
            defer { table.endedOrigin[peer] = nil }
            let hadCall = table.activeCalls.contains(peer)
            let ringing = table.pendingOffers[peer] != nil
            table.endCall(peer)
            if hadCall { table.emit(.hangup(peer, reason: .peerLeft)) } else if ringing { table.emit(.hangup(peer, reason: .cancelled)) }
        }
    }

    /// Peers with a call or a ringing offer, for the reconciliation after our own resume.
    var peersInCalls: Set<PeerID> { activeCalls.union(pendingOffers.keys) }
    /// Peers with a call.
    var callPeers: Set<PeerID> { activeCalls }

    // MARK: inside

    private mutating func collect(connected: Bool, own: PeerID? = nil, _ body: (inout CallTable) -> Void) -> [SessionAction] {
        self.connected = connected
        self.own = own
        out = []
        body(&self)
        defer { out = [] }
        return out
    }

    private mutating func send(_ frame: Frame) { out.append(.send(frame)) }
    private mutating func emit(_ event: CallingEvent) { out.append(.emit(event)) }

    private mutating func armMediaConnect(_ peer: PeerID) {
        mediaConnected.remove(peer)
        out.append(.cancel(.mediaGrace(peer)))
        if connectTimeout > 0 { out.append(.arm(.mediaConnect(peer), after: connectTimeout)) }
    }

    /// Numbers the peer connection about to be created for `peer` and makes it current.
    private mutating func newConnection(_ peer: PeerID) -> UInt64 {
        connectionCount += 1
        currentConnection[peer] = connectionCount
        return connectionCount
    }

    /// A description as sent: our tracks under the stream id `local-<peerID>`.
    private func onTheWire(_ description: SessionDescription) -> SessionDescription {
        guard let own else { return description }
        var sent = description
        sent.sdp = LocalStreamID.rewrite(description.sdp, peer: own)
        return sent
    }

    /// The engine's connection ended the call: `callFailed` (when it failed) then `hangup`.
    private mutating func mediaEnded(_ peer: PeerID, failure: CallingError?, reason: HangupReason) {
        // An HTTP session is ended by the server only when told: without this, a caller
        // that hung up over its control channel would keep its seat until the token expires.
        if sessionPeers.contains(peer), connected {
            send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"]))
        }
        endCall(peer)
        if let failure { emit(.callFailed(peerID: peer, error: failure)) }
        emit(.hangup(peer, reason: reason))
    }

    // MARK: ICE recovery

    private mutating func iceState(_ peer: PeerID, _ state: PeerConnectionState) {
        recovery[peer]?.state = state
        guard let current = recovery[peer] else { return }
        switch state {
        case .connected:
            clearRecoveryTimers(peer)
        case .disconnected:
            openWindow(peer)
            if !current.debouncing, !current.retrying {
                recovery[peer]?.debouncing = true
                out.append(.arm(.iceDebounce(peer), after: ice.debounce))
            }
        case .failed:
            openWindow(peer)
            // Unless a restart is already on its retry clock: one restart, not one per report.
            if !current.retrying { attemptRestart(peer) }
        case .new, .connecting, .closed:
            break
        }
    }

    private mutating func openWindow(_ peer: PeerID) {
        guard recovery[peer]?.windowOpen == false else { return }
        recovery[peer]?.windowOpen = true
        out.append(.arm(.iceWindow(peer), after: ice.window))
    }

    /// The restarter sends an ICE-restart offer (not while our socket or the peer's is down: the
    /// resume asks again), and asks again after `retry` while the window is open.
    private mutating func attemptRestart(_ peer: PeerID) {
        guard let current = recovery[peer], current.restarter else { return }
        if current.debouncing { out.append(.cancel(.iceDebounce(peer))) }
        recovery[peer]?.debouncing = false
        recovery[peer]?.restarts += 1
        if connected, !reconnecting.contains(peer), let connection = currentConnection[peer] {
            emit(.iceRestart(peerID: peer, attempt: current.restarts + 1))
            out.append(.media(.restartIce(peer, connection: connection)))
        }
        if current.windowOpen {
            recovery[peer]?.retrying = true
            out.append(.arm(.iceRetry(peer), after: ice.retry))
        } else if current.retrying {
            recovery[peer]?.retrying = false
            out.append(.cancel(.iceRetry(peer)))
        }
    }

    private mutating func clearRecoveryTimers(_ peer: PeerID) {
        guard let current = recovery[peer] else { return }
        if current.windowOpen { out.append(.cancel(.iceWindow(peer))) }
        if current.debouncing { out.append(.cancel(.iceDebounce(peer))) }
        if current.retrying { out.append(.cancel(.iceRetry(peer))) }
        recovery[peer]?.windowOpen = false
        recovery[peer]?.debouncing = false
        recovery[peer]?.retrying = false
    }

    /// The session id of an SDP: the second field of its `o=` line (RFC 8866 §5.2).
    static func sdpSessionID(_ sdp: String) -> String? {
        guard let line = SDPText.lines(sdp).first(where: { $0.hasPrefix("o=") }) else { return nil }
        let fields = line.dropFirst(2).split(separator: " ")
        return fields.count > 1 ? String(fields[1]) : nil
    }

    private mutating func endCall(_ peer: PeerID, reason: CallEndReason = .ended) {
        if activeCalls.contains(peer) { endedOrigin[peer] = remoteOrigin[peer] }
        remoteOrigin[peer] = nil
        pendingOffers[peer] = nil
        candidateQueue[peer] = nil
        remoteDescriptionSet.remove(peer)
        answeredSessions[peer] = nil
        guard activeCalls.remove(peer) != nil, hasMediaEngine else { return }
        clearRecoveryTimers(peer)
        recovery[peer] = nil
        mediaConnected.remove(peer)
        out.append(.cancel(.mediaConnect(peer)))
        out.append(.cancel(.mediaGrace(peer)))
        out.append(.media(.close(peer, reason)))
    }
}
