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

    private var activeCalls = Set<PeerID>()
    private var remoteDescriptionSet = Set<PeerID>()
    private var candidateQueue: [PeerID: [IceCandidate]] = [:]
    private var pendingOffers: [PeerID: SessionDescription] = [:]
    /// Peers whose latest offer came from an HTTP session (it carried `session_id`).
    private var sessionPeers = Set<PeerID>()
    /// Which peer connection of each peer is current (`call`/`accept` each create a new one). A
    /// replaced connection can still report while the engine tears it down; only the current
    /// one's reports count.
    private var currentConnection: [PeerID: UInt64] = [:]
    private var connectionCount: UInt64 = 0
    /// Calls whose media has connected at least once.
    private var mediaConnected = Set<PeerID>()

    /// The entry point's context, set by `collect`.
    private var connected = false
    private var own: PeerID?
    private var out: [SessionAction] = []

    init(hasMediaEngine: Bool, connectTimeout: TimeInterval, disconnectGrace: TimeInterval) {
        self.hasMediaEngine = hasMediaEngine
        self.connectTimeout = connectTimeout
        self.disconnectGrace = disconnectGrace
    }

    // MARK: API calls

    mutating func call(_ peer: PeerID, _ media: CallMedia, _ waiter: Waiter, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.hasMediaEngine else { return table.out.append(.resume(waiter, .failure(CallingError(.media("no MediaEngine"))))) }
            guard connected else { return table.out.append(.resume(waiter, .failure(CallingError.notConnected))) }
            table.activeCalls.insert(peer)
            table.armMediaConnect(peer)
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
                table.mediaEnded(peer, failure: CallingError(.disconnected("the media connection failed")))
            case .closed:
                table.mediaEnded(peer, failure: nil)
            case .new, .connecting:
                break
            }
        }
    }

    /// The `mediaConnect` timer of `peer` fired.
    mutating func mediaConnectTimedOut(_ peer: PeerID, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer), !table.mediaConnected.contains(peer) else { return }
            table.mediaEnded(peer, failure: CallingError(.timedOut("the media connection (\(Int(table.connectTimeout)) s)")))
        }
    }

    /// The `mediaGrace` timer of `peer` fired.
    mutating func mediaGraceEnded(_ peer: PeerID, connected: Bool) -> [SessionAction] {
        collect(connected: connected) { table in
            guard table.activeCalls.contains(peer) else { return }
            table.mediaEnded(peer, failure: CallingError(.disconnected(
                "no media for \(Int(table.disconnectGrace)) s after the connection was lost")))
        }
    }

    // MARK: frames

    mutating func offer(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        guard let sdp = payload?["sdp"]?.stringValue else { return [] }
        let offer = SessionDescription(kind: .offer, sdp: sdp, sessionID: payload?["session_id"]?.stringValue)
        if offer.sessionID != nil { sessionPeers.insert(from) } else { sessionPeers.remove(from) }
        pendingOffers[from] = offer
        return [.emit(.incoming(IncomingCall(from: from, offer: offer)))]
    }

    mutating func answer(from: PeerID, _ payload: JSONValue?) -> [SessionAction] {
        if hasMediaEngine, activeCalls.contains(from), let sdp = payload?["sdp"]?.stringValue {
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
                table.endCall(from)
                table.emit(.hangup(from))
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

    /// The peer left the room: its call (if any) ends with a `hangup` event.
    mutating func peerGone(_ peer: PeerID) -> [SessionAction] {
        collect(connected: false) { table in
            table.sessionPeers.remove(peer)
            table.currentConnection[peer] = nil
            let hadCall = table.activeCalls.contains(peer)
            table.endCall(peer)
            if hadCall { table.emit(.hangup(peer)) }
        }
    }

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
    private mutating func mediaEnded(_ peer: PeerID, failure: CallingError?) {
        // An HTTP session is ended by the server only when told: without this, a caller
        // that hung up over its control channel would keep its seat until the token expires.
        if sessionPeers.contains(peer), connected {
            send(Frame(.data, to: peer.rawValue, payload: ["kind": "hangup"]))
        }
        endCall(peer)
        if let failure { emit(.callFailed(peerID: peer, error: failure)) }
        emit(.hangup(peer))
    }

    private mutating func endCall(_ peer: PeerID, reason: CallEndReason = .ended) {
        pendingOffers[peer] = nil
        candidateQueue[peer] = nil
        remoteDescriptionSet.remove(peer)
        guard activeCalls.remove(peer) != nil, hasMediaEngine else { return }
        mediaConnected.remove(peer)
        out.append(.cancel(.mediaConnect(peer)))
        out.append(.cancel(.mediaGrace(peer)))
        out.append(.media(.close(peer, reason)))
    }
}
