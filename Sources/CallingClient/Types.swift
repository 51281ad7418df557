// Apps see the shared value types and this module, nothing of the protocol or transport internals.
@_exported import CallingValues
import CallingProtocol
import Foundation

/// The call state machine of the SDKs (docs/sdk.md, "Client SDK compatibility"):
/// `idle → connecting → connected ⇄ reconnecting → ended | failed`.
///
/// - `ended` is reached only by the app (`disconnect()`) or a server close the app asked for.
/// - `failed` carries the terminal error: a refused upgrade (401/403), a terminal close
///   (4400 `replaced`, 4401 `token expired`, 4400–4999), or reconnect attempts exhausted.
public enum CallState: Sendable, Equatable, CustomStringConvertible {
    case idle
    case connecting
    case connected
    /// The socket dropped; `attempt` (1-based) is the reconnect being waited for or tried.
    case reconnecting(attempt: Int)
    case ended
    case failed(CallingError)

    /// True for `ended` and `failed`: nothing happens until the app calls `connect()` again.
    public var isTerminal: Bool {
        switch self {
        case .ended, .failed: return true
        default: return false
        }
    }

    /// The state as a short word (`reconnecting(2)`).
    public var description: String {
        switch self {
        case .idle: return "idle"
        case .connecting: return "connecting"
        case .connected: return "connected"
        case .reconnecting(let attempt): return "reconnecting(\(attempt))"
        case .ended: return "ended"
        case .failed(let error): return "failed(\(error))"
        }
    }
}

/// Another member of the room, as listed in `welcome.peers` and `peer-joined`.
public struct PeerInfo: Sendable, Equatable {
    /// The peer's id (its token's `sub`).
    public var peerID: PeerID
    /// The role its token gives (`peer`, `agent`, `caller`…).
    public var role: String
    /// The display name from its token.
    public var name: String?
    /// The peer's socket dropped and the server holds its seat for it (`peer-reconnecting`, or
    /// `welcome.peers[].reconnecting`).
    public var reconnecting: Bool

    /// A roster entry (for tests and fakes).
    public init(peerID: PeerID, role: String = "peer", name: String? = nil, reconnecting: Bool = false) {
        self.peerID = peerID
        self.role = role
        self.name = name
        self.reconnecting = reconnecting
    }

    init?(_ json: JSONValue?) {
        guard let id = json?["peer_id"]?.stringValue else { return nil }
        self.init(peerID: PeerID(id), role: json?["role"]?.stringValue ?? "peer", name: json?["name"]?.stringValue,
                  reconnecting: json?["reconnecting"]?.boolValue ?? false)
    }
}

/// What `welcome` said, delivered with `CallingEvent.connected` on every (re)connect.
public struct Welcome: Sendable, Equatable {
    /// Our own peer id (the token's `sub`).
    public var peerID: PeerID
    /// The room we joined.
    public var roomID: RoomID
    /// The call the room belongs to, if any.
    public var callID: CallID?
    /// Our role (the token's `role`).
    public var role: String
    /// Our display name (the token's `name`).
    public var name: String?
    /// The other peers, in join order.
    public var peers: [PeerInfo]
    /// The room's latest chat seq when this connection joined.
    public var lastSeq: Int64
    /// Our read marker in this room.
    public var readSeq: Int64
    /// Messages after our read marker.
    public var unread: Int64
    /// True when this connection resumed a previous one (`last_seq` was sent).
    public var resumed: Bool
    /// Only meaningful when `resumed`: every missed message is in the replay that follows.
    /// When false, page the gap with `fetchMessages(sinceSeq:)`.
    public var recovered: Bool
    /// Number of replayed `chat` frames that follow (0 when not resumed).
    public var replayCount: Int
    /// The raw payload, for fields this SDK does not model.
    public var raw: JSONValue
}

/// A committed chat message (live or replayed).
public struct ChatMessage: Sendable, Equatable {
    /// The message's position in the room (1, 2, 3… per room).
    public var seq: Int64
    /// Who sent it.
    public var from: PeerID
    /// The sender's `client_id` (the key of retries).
    public var clientID: String
    /// The message text.
    public var text: String
    /// The sender's metadata object, nil when it sent none.
    public var meta: JSONValue?
    /// Server receive time, ms since the Unix epoch.
    public var ts: Int64

    init?(_ payload: JSONValue?, from: String?) {
        guard let payload, let seq = payload["seq"]?.int64Value,
              let sender = from ?? payload["from"]?.stringValue else { return nil }
        self.seq = seq
        self.from = PeerID(sender)
        clientID = payload["client_id"]?.stringValue ?? ""
        text = payload["text"]?.stringValue ?? ""
        meta = payload["meta"].flatMap(JSONValue.nonNull)
        ts = payload["ts"]?.int64Value ?? 0
    }
}

/// The server's acknowledgement of `sendChat`: the message is committed at `seq`.
public struct ChatAck: Sendable, Equatable {
    /// The `client_id` the message was sent with.
    public var clientID: String
    /// The message's position in the room (1, 2, 3… per room).
    public var seq: Int64
    /// Server receive time, ms since the Unix epoch.
    public var ts: Int64
}

/// One page of `GET /v1/rooms/{room}/messages`.
public struct MessagesPage: Sendable, Equatable {
    /// The room.
    public var roomID: RoomID
    /// The messages, in seq order.
    public var messages: [ChatMessage]
    /// Pass as `sinceSeq` for the next page.
    public var nextSinceSeq: Int64
    /// More messages follow after `nextSinceSeq`.
    public var hasMore: Bool
    /// The room's latest seq when the page was read.
    public var lastSeq: Int64
}

/// The consultation meter (`meter` frame): typed fields plus the raw payload.
public struct MeterUpdate: Sendable, Equatable {
    /// `running`, `warning` or `ended`.
    public var state: String
    /// Seconds counted so far.
    public var elapsedSeconds: Int64?
    /// The budget in seconds.
    public var limitSeconds: Int64?
    /// Seconds left.
    public var remainingSeconds: Int64?
    /// The raw payload, for fields this SDK does not model.
    public var raw: JSONValue
}

/// An offer waiting for `accept(_:)` or `reject(_:)`.
public struct IncomingCall: Sendable, Equatable {
    /// Who sent it.
    public var from: PeerID
    /// Its offer (`sessionID` set when it comes from an HTTP session).
    public var offer: SessionDescription
}

/// Every event a `SignalingClient` reports, in the order they happened.
public enum CallingEvent: Sendable, Equatable {
    /// `welcome` arrived (first connect or a reconnect; see `Welcome.resumed`).
    case connected(Welcome)
    case stateChanged(CallState)
    case peerJoined(PeerInfo)
    case peerLeft(PeerID)
    /// A peer sent an offer; `accept` (with a `MediaEngine`) or `reject` it.
    case incoming(IncomingCall)
    /// A call or a ringing offer with this peer ended, and why (`callFailed` comes first when
    /// its media failed). The reasons are the browser SDK's (docs/sdk.md "What survives a drop").
    case hangup(PeerID, reason: HangupReason)
    /// The peer's socket dropped and the server holds its seat (`peer-reconnecting`): its call is
    /// kept and relays to it are held until `peerResumed` (or dropped on `peerLeft`).
    case peerReconnecting(PeerID)
    /// The peer is back on a new socket (`peer-resumed`); relays held for it were sent again.
    case peerResumed(PeerID)
    /// This side (the one that sent the call's first offer) sends an ICE-restart offer;
    /// `attempt` counts the restarts of the call.
    case iceRestart(peerID: PeerID, attempt: Int)
    /// The peer connection of a call changed state (`MediaEngine`'s report).
    case connectionState(peerID: PeerID, state: PeerConnectionState)
    /// A remote track of a call arrived (the engine plays or records it; `MediaEngine.observeTracks`).
    case track(peerID: PeerID, track: RemoteTrack)
    /// A call's media failed: `timedOut` (no media within `mediaConnectTimeout`) or
    /// `disconnected` (no ICE connectivity for `iceRestartWindow`, or for `mediaDisconnectGrace`
    /// on an HTTP session's call). Both are retryable: call again. `hangup` follows.
    case callFailed(peerID: PeerID, error: CallingError)
    /// The peer rejected our offer (`data {kind:"reject"}`).
    case rejected(PeerID)
    /// An application `data` payload (not `hangup`/`reject`).
    case data(from: PeerID, payload: JSONValue?)
    /// An `answer` or `candidate` that no `MediaEngine` consumed (signaling-only clients).
    case signal(type: String, from: PeerID, payload: JSONValue?)
    case meter(MeterUpdate)
    /// A meter in state `ended`: the consultation is over.
    case consultationEnded(MeterUpdate)
    /// A media quality sample, also sent to the server as `stats`.
    case stats(StatsSample)
    /// A refused frame (`error` frame or failed `chat-ack`), or a media engine failure.
    case error(CallingError)
    /// The socket ended; `error` nil after `disconnect()`. A reconnect may follow (see `state`).
    case disconnected(CallingError?)
    /// A chat message from another peer (or our own from another session), exactly once per seq.
    case chat(ChatMessage)
    case typing(from: PeerID, isTyping: Bool)
    /// A peer's read marker moved to `seq`.
    case read(from: PeerID, seq: Int64)
}

/// Why a call or a ringing offer ended (`CallingEvent.hangup`); the raw values are the browser
/// SDK's `hangup` reasons.
public enum HangupReason: String, Sendable, Equatable {
    /// The peer hung up (`data {kind:"hangup"}`).
    case remote
    /// The peer left the room (`peer-left`, or missing from the roster after our resume).
    case peerLeft = "peer-left"
    /// A ringing offer ended before it was accepted: the caller hung up or left.
    case cancelled
    /// No ICE connectivity for `iceRestartWindow` (retryable: call again).
    case disconnected
    /// The media failed (no connection within `mediaConnectTimeout`).
    case failed
    /// The peer connection closed without a hangup of ours: usually the peer's hangup, when the
    /// DTLS close of its connection arrives before its `data {kind:"hangup"}` relayed by the server.
    case closed
}

/// An SDP blob as relayed in `offer`/`answer` payloads (`{sdp, type, session_id?}`).
public struct SessionDescription: Sendable, Equatable {
    /// Offer or answer, as the frame type says.
    public enum Kind: String, Sendable { case offer, answer }
    /// Offer or answer.
    public var kind: Kind
    /// The SDP text.
    public var sdp: String
    /// Set on an offer from an HTTP session (webrtc-proxy or WHIP; docs/protocol.md "HTTP
    /// sessions"): the caller cannot receive trickled candidates, so the answer must carry them
    /// (a `MediaEngine` gathers before answering), and the answer echoes this id.
    public var sessionID: String?

    /// A description to relay or hand to an engine.
    public init(kind: Kind, sdp: String, sessionID: String? = nil) {
        self.kind = kind
        self.sdp = sdp
        self.sessionID = sessionID
    }

    var json: JSONValue {
        var fields: [String: JSONValue] = ["sdp": .string(sdp), "type": .string(kind.rawValue)]
        if let sessionID { fields["session_id"] = .string(sessionID) }
        return .object(fields)
    }
}

/// An ICE candidate as relayed in `candidate` payloads (`{candidate, sdpMid, sdpMLineIndex}`).
public struct IceCandidate: Sendable, Equatable {
    /// The `candidate:` line (`""`: end of candidates).
    public var candidate: String
    /// The media section id it belongs to.
    public var sdpMid: String?
    /// The index of that media section.
    public var sdpMLineIndex: Int?

    /// A candidate to relay or hand to an engine.
    public init(candidate: String, sdpMid: String? = nil, sdpMLineIndex: Int? = nil) {
        self.candidate = candidate
        self.sdpMid = sdpMid
        self.sdpMLineIndex = sdpMLineIndex
    }

    init?(_ json: JSONValue?) {
        guard let candidate = json?["candidate"]?.stringValue else { return nil }
        self.init(candidate: candidate, sdpMid: json?["sdpMid"]?.stringValue,
                  sdpMLineIndex: json?["sdpMLineIndex"]?.int64Value.map { Int($0) })
    }

    var json: JSONValue {
        ["candidate": .string(candidate), "sdpMid": sdpMid.map { .string($0) } ?? .null,
         "sdpMLineIndex": sdpMLineIndex.map { .int(Int64($0)) } ?? .null]
    }
}

/// One `RTCIceServer` entry from `GET /v1/ice`.
public struct IceServer: Sendable, Equatable {
    /// `stun:`/`turn:`/`turns:` URLs.
    public var urls: [String]
    /// TURN username (time-limited), nil for STUN.
    public var username: String?
    /// TURN password for `username`.
    public var credential: String?

    /// One server entry.
    public init(urls: [String], username: String? = nil, credential: String? = nil) {
        self.urls = urls
        self.username = username
        self.credential = credential
    }
}

/// `GET /v1/ice`: STUN/TURN servers with TURN credentials minted for this peer.
public struct IceServers: Sendable, Equatable {
    /// The servers, STUN first.
    public var servers: [IceServer]
    /// Seconds the answer may be used for.
    public var ttl: Int64
    /// Unix seconds when the TURN credential stops working; fetch again before an ICE restart after it.
    public var expiresAt: Int64
}

/// Local tracks go out under one stream id, `local-<our peer id>`, whatever the engine named the
/// stream (docs/sdk.md "Wire conventions"): the SDP sent in `offer`/`answer` frames has its
/// `a=msid:`, `a=ssrc:… msid:` and `a=msid-semantic:` stream ids rewritten. The engine keeps its
/// own description; only the copy on the wire changes.
enum LocalStreamID {
    static func rewrite(_ sdp: String, peer: PeerID) -> String {
        let stream = "local-\(peer.rawValue)"
        let ending = sdp.contains("\r\n") ? "\r\n" : "\n"
        let lines = sdp.components(separatedBy: ending).map { line -> String in
            if line.hasPrefix("a=msid-semantic:") {
                // "a=msid-semantic: WMS s1 s2" → one stream.
                let head = line.split(separator: " ", omittingEmptySubsequences: true).prefix(2).joined(separator: " ")
                return head.hasSuffix("WMS") ? "\(head) \(stream)" : line
            }
            if line.hasPrefix("a=msid:") {
                let rest = line.dropFirst("a=msid:".count).split(separator: " ", maxSplits: 1)
                return "a=msid:\(stream)" + (rest.count > 1 ? " \(rest[1])" : "")
            }
            if line.hasPrefix("a=ssrc:"), let range = line.range(of: " msid:") {
                let rest = line[range.upperBound...].split(separator: " ", maxSplits: 1)
                return line[..<range.upperBound] + stream + (rest.count > 1 ? " \(rest[1])" : "")
            }
            return line
        }
        return lines.joined(separator: ending)
    }
}
