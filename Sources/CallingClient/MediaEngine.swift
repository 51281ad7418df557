/// The seam between signaling and media. `SignalingClient` drives it: it creates one peer
/// connection per remote peer, relays the SDP and candidates it produces, queues remote candidates
/// until the remote description is set, and closes connections on hangup.
///
/// A signaling-only client passes no engine: offers then surface as `CallingEvent.incoming`,
/// answers and candidates as `CallingEvent.signal`, and `sendOffer/sendAnswer/sendCandidate`
/// relay SDP produced elsewhere.
///
/// Threading: methods are called from arbitrary tasks, never on the client's state queue, and
/// never concurrently for the same peer. The callbacks given to `createPeerConnection` may be
/// called from any thread; they hop onto the client's queue.
public protocol MediaEngine: AnyObject, Sendable {
    /// Creates the peer connection for `peer`. `onCandidate` is called for every local ICE
    /// candidate; `onStateChange` when the connection state changes: `closed` ends the call at
    /// once; `disconnected` and `failed` start ICE recovery, which ends the call after
    /// `SignalingOptions.iceRestartWindow` without `connected` (an HTTP session's call: `failed`
    /// at once, `disconnected` after `mediaDisconnectGrace`); a call not `connected` within
    /// `mediaConnectTimeout` ends too.
    func createPeerConnection(for peer: PeerID, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
                              onStateChange: @escaping @Sendable (PeerConnectionState) -> Void) async throws
    func createOffer(for peer: PeerID) async throws -> SessionDescription
    /// An ICE-restart offer on the existing peer connection with `peer` (new ICE credentials,
    /// RFC 8445 §9), set as its local description; `iceServers` are fresh `GET /v1/ice` servers
    /// the engine may apply first (TURN passwords expire). `SignalingClient` sends it when the
    /// call's ICE stays `disconnected` or `failed` (docs/sdk.md "What survives a drop"). Default:
    /// throws, and the call ends when its `iceRestartWindow` runs out.
    func createIceRestartOffer(for peer: PeerID, iceServers: [IceServer]) async throws -> SessionDescription
    func createAnswer(for peer: PeerID) async throws -> SessionDescription
    func setRemoteDescription(_ description: SessionDescription, for peer: PeerID) async throws
    func addCandidate(_ candidate: IceCandidate, for peer: PeerID) async throws
    /// Closes and forgets the peer connection; idempotent.
    func close(peer: PeerID)
    /// Like `close(peer:)`, saying why: an engine answering an HTTP session tells its caller
    /// (`status ended` or `replaced`; docs/protocol.md, "The control channel"). Defaults to
    /// `close(peer:)`.
    func close(peer: PeerID, reason: CallEndReason)
    /// The STUN/TURN servers for the next `createPeerConnection` with `peer`: `SignalingClient`
    /// fetches them from `GET /v1/ice` right before each call (TURN credentials expire), or uses
    /// `SignalingOptions.iceServers`. Default: ignored.
    func useIceServers(_ servers: [IceServer], for peer: PeerID)
    /// What the next call to `peer` sends (`SignalingClient.call(_:media:)`), before its
    /// `createPeerConnection`. Default: ignored (the engine's own choice).
    func useMedia(_ media: CallMedia, for peer: PeerID)
    /// Registers where the engine reports the remote tracks of its connections
    /// (`CallingEvent.track`). `SignalingClient` calls it once, at init. Default: never reported.
    func observeTracks(_ handler: @escaping @Sendable (PeerID, RemoteTrack) -> Void)
    /// Sends silence instead of the input on every connection, present and later ones (`true`);
    /// the calls go on. Default: ignored.
    func setMuted(_ muted: Bool)
    /// A quality sample over all peer connections (`rtt_ms`, `jitter_ms`, `packet_loss` 0–1,
    /// `bitrate_kbps`), or nil when there is nothing to measure. Polled every `statsInterval`.
    func stats() async -> StatsSample?
}

extension MediaEngine {
    /// Default: `close(peer:)`, whatever the reason.
    public func close(peer: PeerID, reason: CallEndReason) { close(peer: peer) }
    /// Default: no ICE restart (the call ends when its `iceRestartWindow` runs out).
    public func createIceRestartOffer(for peer: PeerID, iceServers: [IceServer]) async throws -> SessionDescription {
        throw CallingError(.media("this MediaEngine cannot restart ICE"))
    }
    /// Default: the engine keeps its own ICE configuration.
    public func useIceServers(_ servers: [IceServer], for peer: PeerID) {}
    /// Default: the engine offers what it always offers.
    public func useMedia(_ media: CallMedia, for peer: PeerID) {}
    /// Default: tracks are not reported.
    public func observeTracks(_ handler: @escaping @Sendable (PeerID, RemoteTrack) -> Void) {}
    /// Default: an engine without mute ignores it.
    public func setMuted(_ muted: Bool) {}
}

/// A track the other side of a call sends, as the engine received it.
public struct RemoteTrack: Sendable, Equatable {
    /// `audio` (or `video` for engines that carry it).
    public var kind: String
    /// The engine's id of the track, unique within the call.
    public var id: String

    /// A track of `kind` named `id`.
    public init(kind: String, id: String) {
        self.kind = kind
        self.id = id
    }
}

/// What a call offers (the mobile SDKs' `call(peerId, media)`).
public struct CallMedia: Sendable, Equatable {
    /// How audio flows.
    public enum Audio: Sendable, Equatable {
        /// Both ways (the default).
        case sendReceive
        /// Hear the other side, send nothing (a listener, a recorder).
        case receiveOnly
        /// No audio at all (a data-only call).
        case none
    }

    /// How audio flows.
    public var audio: Audio
    /// Whether the offer opens the engine's data channels.
    public var dataChannels: Bool

    /// `audio` and `dataChannels` as given.
    public init(audio: Audio = .sendReceive, dataChannels: Bool = true) {
        self.audio = audio
        self.dataChannels = dataChannels
    }

    /// Audio both ways and the engine's data channels: what `call(_:)` offers.
    public static let standard = CallMedia()
    /// Hear the other side only.
    public static let receiveOnly = CallMedia(audio: .receiveOnly)
    /// Data channels only.
    public static let dataOnly = CallMedia(audio: .none)
}

/// Why signaling ends the media of a call.
public enum CallEndReason: Sendable, Equatable {
    /// Hung up by either side, the peer left, or this client disconnected.
    case ended
    /// An HTTP session's caller posted a new session with the same token; its next offer is a
    /// new peer connection.
    case replaced
}

/// The states of a peer connection that matter to signaling.
public enum PeerConnectionState: String, Sendable {
    case new, connecting, connected, disconnected, failed, closed
}
