import CallingClient
import Foundation

/// What a `GStreamerMediaEngine` sends as audio.
public enum AudioInput: Sendable, Equatable {
    /// A sine tone (Hz) at -10 dBFS: proves audio flows and lets the far end check it heard it.
    case tone(Double)
    /// A 16-bit PCM WAV file, played once at real-time pace, then silence.
    case wav(URL)
    /// PCM the app pushes with `GStreamerMediaEngine.push(pcm:)` (48 kHz mono Int16); silence when
    /// the app falls behind.
    case pcm
    /// Every peer hears itself: what arrives from a peer is sent back to it.
    case echo
    case silence
}

/// Where received audio goes, besides the level/frequency meters every peer keeps.
public enum AudioOutput: Sendable {
    case none
    /// A 48 kHz mono 16-bit WAV file. The first peer connection writes `url`; later ones write
    /// `<name>-<peer id>.wav` beside it.
    case wav(URL)
    /// 20 ms frames of 48 kHz mono Int16, called on a GStreamer streaming thread: copy and return.
    case pcm(@Sendable (PeerID, [Int16]) -> Void)
}

/// A data channel the offering side opens before its first offer (an answering side accepts
/// whatever the offer brings).
public struct DataChannelSpec: Sendable, Equatable {
    /// The channel label (`chat`, `state`, `control`…).
    public var label: String
    /// Reliable: ordered with unlimited retransmits. Unreliable: unordered, no retransmits
    /// (game state, cursor positions: a late message is worthless).
    public var reliable: Bool

    /// A channel to open.
    public init(label: String, reliable: Bool = true) {
        self.label = label
        self.reliable = reliable
    }
}

/// Settings of a `GStreamerMediaEngine`.
public struct MediaOptions: Sendable {
    /// STUN and TURN servers (`SignalingClient.fetchIceServers()`).
    public var iceServers: [IceServer] = []
    /// Only relayed (TURN) candidates: the peer's addresses never reach the other side.
    public var relayOnly = false
    /// Also gather ICE-TCP host candidates (RFC 6544). Off by default, as in Janus: they triple
    /// the candidates to check and help only where UDP is blocked, where TURN over TCP/TLS is the
    /// dependable fallback anyway.
    public var iceTCP = false
    /// What is sent as audio.
    public var input: AudioInput = .tone(440)
    /// Where received audio goes.
    public var output: AudioOutput = .none
    /// Channels an offer opens.
    public var dataChannels: [DataChannelSpec] = [DataChannelSpec(label: "chat"), DataChannelSpec(label: "state", reliable: false)]
    /// Opus target bitrate (bits/s). 32 kb/s is wideband voice with room to spare.
    public var opusBitrate = 32_000
    /// Opus encoder complexity, 0–10. 5 rather than libopus's 10: the encoder was a quarter of a
    /// streaming peer's CPU, and for speech at 32 kb/s the difference is not audible.
    public var opusComplexity = 5
    /// The longest an answer to an HTTP session waits for ICE gathering: the session's caller
    /// cannot receive trickled candidates, so they must be in the answer.
    public var sessionGatherTimeout: TimeInterval = 2
    /// A connected call from which no RTP packet has arrived for this long is reported
    /// `disconnected` (and `connected` again when packets return), so a dead network path is
    /// noticed in seconds rather than when ICE gives up. Only after the first packet (a peer that
    /// sends nothing is never flagged); 0 disables.
    public var mediaStallTimeout: TimeInterval = 2

    /// The defaults above.
    public init() {}
}

/// What a `GStreamerMediaEngine` reports besides the `MediaEngine` callbacks.
public enum MediaEvent: Sendable, Equatable {
    case dataChannelOpen(peer: PeerID, label: String)
    case dataChannelClosed(peer: PeerID, label: String)
    case dataMessage(peer: PeerID, label: String, text: String)
    /// The other side's audio arrived on a new pad and is being decoded.
    case track(peer: PeerID, track: RemoteTrack)
    /// A message on an HTTP session's `control` channel (docs/protocol.md, "The control channel"),
    /// already answered where the protocol says so (`ping` → `pong`, `hangup` → the call ends).
    case control(peer: PeerID, message: ControlMessage)
    case connected(peer: PeerID, milliseconds: Int)
    case stateChanged(peer: PeerID, state: PeerConnectionState)
    /// Something went wrong with one peer's media; its call ends.
    case failed(peer: PeerID, reason: String)
}
