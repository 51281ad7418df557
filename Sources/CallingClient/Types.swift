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

/// A committed chat message (live, replayed or from history).
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
    /// The seq of the message this one answers (`reply_to`), nil when none.
    public var replyTo: Int64?
    /// A tombstone: the message was deleted and its content erased (`text` "", `meta` nil).
    public var deleted: Bool
    /// History only: the last edit's ts (the text and meta are the edited ones).
    public var editedTS: Int64?
    /// History only: when the message was deleted.
    public var deletedTS: Int64?
    /// History only: the reactions by key, sorted by key (empty when none).
    public var reactions: [ChatReactionCount]
    /// History with `includeEdits` only: every edit, oldest first.
    public var edits: [ChatEditEntry]?

    init?(_ payload: JSONValue?, from: String?) {
        guard let payload, let seq = payload["seq"]?.int64Value,
              let sender = from ?? payload["from"]?.stringValue else { return nil }
        self.seq = seq
        self.from = PeerID(sender)
        clientID = payload["client_id"]?.stringValue ?? ""
        text = payload["text"]?.stringValue ?? ""
        meta = payload["meta"].flatMap(JSONValue.nonNull)
        ts = payload["ts"]?.int64Value ?? 0
        replyTo = payload["reply_to"]?.int64Value
        deleted = payload["deleted"]?.boolValue ?? false
        editedTS = payload["edited_ts"]?.int64Value
        deletedTS = payload["deleted_ts"]?.int64Value
        reactions = (payload["reactions"]?.arrayValue ?? []).compactMap(ChatReactionCount.init)
        edits = payload["edits"]?.arrayValue.map { $0.compactMap(ChatEditEntry.init) }
    }
}

/// One reaction key on a message, as history reports it.
public struct ChatReactionCount: Sendable, Equatable {
    /// The reaction (an emoji or a short word).
    public var key: String
    /// How many peers reacted with it.
    public var count: Int
    /// Who did.
    public var peers: [PeerID]

    init?(_ json: JSONValue) {
        guard let key = json["key"]?.stringValue else { return nil }
        self.key = key
        count = Int(json["count"]?.int64Value ?? 0)
        peers = (json["peers"]?.arrayValue ?? []).compactMap { $0.stringValue.map { PeerID($0) } }
    }
}

/// One edit of a message (history with `includeEdits`).
public struct ChatEditEntry: Sendable, Equatable {
    /// The edit's own seq.
    public var seq: Int64
    /// When it was made, ms since the Unix epoch.
    public var ts: Int64
    /// The text it set ("" once the message was deleted).
    public var text: String
    /// The meta it set.
    public var meta: JSONValue?

    init?(_ json: JSONValue) {
        guard let seq = json["seq"]?.int64Value else { return nil }
        self.seq = seq
        ts = json["ts"]?.int64Value ?? 0
        text = json["text"]?.stringValue ?? ""
        meta = json["meta"].flatMap(JSONValue.nonNull)
    }
}

/// A peer edited message `target` (`chat-edit`); `seq` is the edit's own position in the room.
public struct ChatEdit: Sendable, Equatable {
    /// Who edited (the message's author).
    public var from: PeerID
    /// The edit's own seq.
    public var seq: Int64
    /// Server receive time of the edit, ms since the Unix epoch.
    public var ts: Int64
    /// The edit's `client_id`.
    public var clientID: String
    /// The seq of the edited message.
    public var target: Int64
    /// The new text.
    public var text: String
    /// The new meta.
    public var meta: JSONValue?
    /// A replayed edit of a message deleted since: `text` "" and `meta` nil.
    public var deleted: Bool

    init?(_ payload: JSONValue?, from: String?) {
        guard let payload, let seq = payload["seq"]?.int64Value, let target = payload["target"]?.int64Value,
              let sender = from ?? payload["from"]?.stringValue else { return nil }
        self.from = PeerID(sender)
        self.seq = seq
        ts = payload["ts"]?.int64Value ?? 0
        clientID = payload["client_id"]?.stringValue ?? ""
        self.target = target
        text = payload["text"]?.stringValue ?? ""
        meta = payload["meta"].flatMap(JSONValue.nonNull)
        deleted = payload["deleted"]?.boolValue ?? false
    }
}

/// Message `target` was deleted (`chat-delete`): its author, or a moderator.
public struct ChatDeletion: Sendable, Equatable {
    /// Who deleted it.
    public var from: PeerID
    /// The delete's own seq.
    public var seq: Int64
    /// Server receive time, ms since the Unix epoch.
    public var ts: Int64
    /// The delete's `client_id`.
    public var clientID: String
    /// The seq of the deleted message.
    public var target: Int64

    init?(_ payload: JSONValue?, from: String?) {
        guard let payload, let seq = payload["seq"]?.int64Value, let target = payload["target"]?.int64Value,
              let sender = from ?? payload["from"]?.stringValue else { return nil }
        self.from = PeerID(sender)
        self.seq = seq
        ts = payload["ts"]?.int64Value ?? 0
        clientID = payload["client_id"]?.stringValue ?? ""
        self.target = target
    }
}

/// A peer added (or, `removed`, took back) its reaction `key` on message `target` (`chat-react`).
public struct ChatReaction: Sendable, Equatable {
    /// Who reacted.
    public var from: PeerID
    /// The reaction's own seq.
    public var seq: Int64
    /// Server receive time, ms since the Unix epoch.
    public var ts: Int64
    /// The reaction's `client_id`.
    public var clientID: String
    /// The seq of the message.
    public var target: Int64
    /// The reaction (an emoji or a short word).
    public var key: String
    /// True when the peer removed it.
    public var removed: Bool

    init?(_ payload: JSONValue?, from: String?) {
        guard let payload, let seq = payload["seq"]?.int64Value, let target = payload["target"]?.int64Value,
              let key = payload["key"]?.stringValue, let sender = from ?? payload["from"]?.stringValue else { return nil }
        self.from = PeerID(sender)
        self.seq = seq
        ts = payload["ts"]?.int64Value ?? 0
        clientID = payload["client_id"]?.stringValue ?? ""
        self.target = target
        self.key = key
        removed = payload["remove"]?.boolValue ?? false
    }
}

extension MessagesPage {
    /// A `GET /v1/rooms/{room}/messages` body; `room` and `sinceSeq` stand in for absent fields.
    init(json body: JSONValue, room: RoomID, sinceSeq: Int64) {
        self.init(roomID: RoomID(body["room_id"]?.stringValue ?? room.rawValue),
                  messages: (body["messages"]?.arrayValue ?? []).compactMap { ChatMessage($0, from: $0["from"]?.stringValue) },
                  nextSinceSeq: body["next_since_seq"]?.int64Value ?? sinceSeq, hasMore: body["has_more"]?.boolValue ?? false,
                  lastSeq: body["last_seq"]?.int64Value ?? 0, nextBeforeSeq: body["next_before_seq"]?.int64Value)
    }
}

extension InboxPage {
    /// A `GET /v1/me/rooms` body.
    init(json body: JSONValue) {
        self.init(rooms: (body["rooms"]?.arrayValue ?? []).compactMap(InboxRoom.init), hasMore: body["has_more"]?.boolValue ?? false,
                  nextCursor: body["next_cursor"]?.stringValue)
    }
}

/// One room of `inbox()` (`GET /v1/me/rooms`).
public struct InboxRoom: Sendable, Equatable {
    /// The room.
    public var roomID: RoomID
    /// The room's highest seq (operations included).
    public var lastSeq: Int64
    /// When the room last had activity, ms since the Unix epoch.
    public var lastTS: Int64
    /// The newest message that is not deleted (text cut to 140 characters), nil when none.
    public var lastMessage: InboxMessage?
    /// The peer's read marker in the room.
    public var readSeq: Int64
    /// Messages from others after `readSeq`, deleted ones not counted.
    public var unread: Int64

    init?(_ json: JSONValue) {
        guard let room = json["room_id"]?.stringValue else { return nil }
        roomID = RoomID(room)
        lastSeq = json["last_seq"]?.int64Value ?? 0
        lastTS = json["last_ts"]?.int64Value ?? 0
        lastMessage = json["last_message"].flatMap(JSONValue.nonNull).flatMap(InboxMessage.init)
        readSeq = json["read_seq"]?.int64Value ?? 0
        unread = json["unread"]?.int64Value ?? 0
    }
}

/// The preview of a room's last message in `inbox()`.
public struct InboxMessage: Sendable, Equatable {
    /// Its seq.
    public var seq: Int64
    /// Its author.
    public var from: PeerID
    /// Its text, at most 140 characters.
    public var text: String
    /// Server receive time, ms since the Unix epoch.
    public var ts: Int64

    init?(_ json: JSONValue) {
        guard let seq = json["seq"]?.int64Value, let from = json["from"]?.stringValue else { return nil }
        self.seq = seq
        self.from = PeerID(from)
        text = json["text"]?.stringValue ?? ""
        ts = json["ts"]?.int64Value ?? 0
    }
}

/// One page of `inbox()`: the rooms, most recent activity first.
public struct InboxPage: Sendable, Equatable {
    /// The rooms of this page.
    public var rooms: [InboxRoom]
    /// More rooms follow: pass `nextCursor` as `cursor`.
    public var hasMore: Bool
    /// The cursor of the next page, nil on the last one.
    public var nextCursor: String?
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
    /// The messages: oldest first (`sinceSeq`), newest first (`beforeSeq`).
    public var messages: [ChatMessage]
    /// Pass as `sinceSeq` for the next page.
    public var nextSinceSeq: Int64
    /// More messages follow (after `nextSinceSeq`, or before `nextBeforeSeq` for a backward page).
    public var hasMore: Bool
    /// The room's latest seq when the page was read.
    public var lastSeq: Int64
    /// A backward page (`fetchMessages(beforeSeq:)`): the lowest seq it covered, to pass as the
    /// next `beforeSeq`; nil for a forward page.
    public var nextBeforeSeq: Int64? = nil
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
    /// A peer edited a message, exactly once per seq (the edit's), live or replayed.
    case chatEdited(ChatEdit)
    /// A message was deleted, exactly once per seq.
    case chatDeleted(ChatDeletion)
    /// A peer added or removed a reaction, exactly once per seq.
    case chatReaction(ChatReaction)
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
