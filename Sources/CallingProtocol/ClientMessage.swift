/// A client frame after envelope and payload validation: everything the hub acts on is typed.
public enum ClientMessage: Sendable, Equatable {
    /// offer / answer / candidate / data, relayed with `from` stamped by the server. The payload
    /// is its text as the sender wrote it, which the relayed frame carries unchanged.
    case relay(RelayKind, to: PeerID?, payload: RawJSON?)
    case chat(ChatSubmission)
    /// `chat-edit`, `chat-delete` or `chat-react`: an operation on a stored message.
    case chatOperation(ChatOperation)
    case typing(Bool)
    case read(seq: Int64)
    case stats(StatsSample)
    /// Answered with a `pong` that echoes the payload, as a relayed frame does: the sender's text.
    case ping(payload: RawJSON?)
    /// The peer leaves the room now: its seat ends without a reconnect grace.
    case leave

    public var frameType: FrameType {
        switch self {
        case .relay(let kind, _, _): return kind.frameType
        case .chat: return .chat
        case .chatOperation(let operation): return operation.action.frameType
        case .typing: return .typing
        case .read: return .read
        case .stats: return .stats
        case .ping: return .ping
        case .leave: return .leave
        }
    }
}

public enum RelayKind: String, Sendable, Equatable {
    case offer, answer, candidate, data
    /// The RPC frames (docs/protocol.md, "RPC"): addressed relays whose payload the hub checks
    /// (`Hub.rpcRefusal`) before routing them as it routes `data`.
    case rpcRequest = "rpc-request", rpcAck = "rpc-ack", rpcResponse = "rpc-response"

    /// Whether this is one of the RPC frames, which always need `to`.
    public var isRPC: Bool {
        switch self {
        case .rpcRequest, .rpcAck, .rpcResponse: return true
        case .offer, .answer, .candidate, .data: return false
        }
    }

    public var frameType: FrameType {
        switch self {
        case .offer: return .offer
        case .answer: return .answer
        case .candidate: return .candidate
        case .data: return .data
        case .rpcRequest: return .rpcRequest
        case .rpcAck: return .rpcAck
        case .rpcResponse: return .rpcResponse
        }
    }

    /// `frameType.rawValue` as a literal, for the writers of relayed frames: the bytes are copied
    /// without a `String` being made (FrameTests compare every kind's written frame with its encoding).
    var typeName: StaticString {
        switch self {
        case .offer: return "offer"
        case .answer: return "answer"
        case .candidate: return "candidate"
        case .data: return "data"
        case .rpcRequest: return "rpc-request"
        case .rpcAck: return "rpc-ack"
        case .rpcResponse: return "rpc-response"
        }
    }
}

/// `chat` as sent by a client. Text and meta limits are checked by the hub, which answers with a
/// `chat-ack` carrying the error so the sender's pending `sendChat` settles.
public struct ChatSubmission: Sendable, Equatable {
    public var clientID: String
    public var text: String
    public var meta: JSONValue?
    /// The seq of the message this one answers (`reply_to`); the store checks that it names a
    /// message of the room.
    public var replyTo: Int64?

    public init(clientID: String, text: String, meta: JSONValue? = nil, replyTo: Int64? = nil) {
        self.clientID = clientID
        self.text = text
        self.meta = meta
        self.replyTo = replyTo
    }
}

/// `chat-edit`, `chat-delete` or `chat-react` as sent by a client: an operation on the message
/// stored at `target`, with its own `client_id` in the same dedupe namespace as `chat`.
public struct ChatOperation: Sendable, Equatable {
    /// What the operation does to its target.
    public enum Action: Sendable, Equatable {
        /// New text and meta (checked as a chat's are).
        case edit(text: String, meta: JSONValue?)
        /// A tombstone: the message's content is erased.
        case delete
        /// Adds the sender's reaction `key`, or removes it when `remove`.
        case react(key: String, remove: Bool)

        /// The frame type that carries this action.
        public var frameType: FrameType {
            switch self {
            case .edit: return .chatEdit
            case .delete: return .chatDelete
            case .react: return .chatReact
            }
        }
    }

    public var clientID: String
    /// The seq of a message (a `chat` row) in the sender's room.
    public var target: Int64
    public var action: Action

    public init(clientID: String, target: Int64, action: Action) {
        self.clientID = clientID
        self.target = target
        self.action = action
    }
}

/// Why a client frame was refused: becomes an `error` frame; the connection stays open.
public struct FrameError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    /// The frame's `type`, when it could be read, echoed so clients can match the error.
    public var type: String?

    public init(_ code: ErrorCode, _ message: String, type: String? = nil) {
        self.code = code
        self.message = message
        self.type = type
    }

    public var frame: Frame { Frame.error(code, message, inReplyTo: type) }
}

/// Limits applied while decoding. Each is a configuration key (docs/configuration.md).
public struct FrameLimits: Sendable, Equatable {
    /// Longest `client_id` accepted on `chat`.
    public var maxClientIDBytes: Int
    /// Longest peer id accepted in `to`.
    public var maxPeerIDBytes: Int

    public init(maxClientIDBytes: Int = 128, maxPeerIDBytes: Int = 128) {
        self.maxClientIDBytes = maxClientIDBytes
        self.maxPeerIDBytes = maxPeerIDBytes
    }
}

/// What every frame decoder shares: the text must be JSON, and an object with a string `type`.
public enum FrameEnvelope {
    /// Parses a text frame; bad UTF-8 anywhere is 416, other malformed JSON 400.
    public static func parse(_ bytes: [UInt8]) throws(FrameError) -> JSONValue {
        do {
            return try JSONParser.parse(bytes)
        } catch {
            throw frameError(error, bytes)
        }
    }

    /// The envelope members of a text frame that is an object, without building a dictionary of
    /// them (every inbound frame goes through here); nil when the frame is valid JSON but not an
    /// object. Errors are those of `parse`.
    static func parseMembers(_ bytes: [UInt8]) throws(FrameError) -> Members? {
        var members = Members()
        do {
            guard try JSONParser.parseMembers(bytes, { members.take($0, $1) }) else { return nil }
        } catch {
            throw frameError(error, bytes)
        }
        return members
    }

    private static func frameError(_ error: JSONParseError, _ bytes: [UInt8]) -> FrameError {
        // A parse failure may be caused by bad UTF-8 outside any string; tell the two apart
        // only on this cold path (a successful parse implies valid UTF-8).
        if error == .invalidUTF8 || String(validating: bytes, as: UTF8.self) == nil {
            return FrameError(.invalidUTF8, JSONParseError.invalidUTF8.message)
        }
        return FrameError(.badJSON, error.message)
    }

    /// The members of a frame object the decoders read; the others are ignored.
    struct Members {
        var type: JSONValue?
        var to: JSONValue?
        var payload: JSONValue?

        init() {}

        init(_ fields: [String: JSONValue]) {
            type = fields["type"]
            to = fields["to"]
            payload = fields["payload"]
        }

        /// Duplicate keys: the last one wins, as in the dictionary `JSONParser.parse` builds.
        mutating func take(_ key: String, _ value: JSONValue) {
            switch key {
            case "type": type = value
            case "to": to = value
            case "payload": payload = value
            default: break
            }
        }

        /// The frame's `type`, or 401 when it has none that is a string.
        func typeName() throws(FrameError) -> String {
            guard let type else { throw FrameError(.badFrame, "missing field 'type'") }
            guard let name = type.stringValue else { throw FrameError(.badFrame, "field 'type' must be a string") }
            return name
        }
    }

    /// The frame's fields and its `type`, or 401 when it is not a frame object.
    public static func fields(_ value: JSONValue) throws(FrameError) -> (fields: [String: JSONValue], type: String) {
        guard let fields = value.objectValue else { throw FrameError(.badFrame, "a frame must be a JSON object") }
        guard let typeValue = fields["type"] else { throw FrameError(.badFrame, "missing field 'type'") }
        guard let typeName = typeValue.stringValue else { throw FrameError(.badFrame, "field 'type' must be a string") }
        return (fields, typeName)
    }
}

public enum ClientFrameDecoder {
    /// Parses and validates one text frame. `from` in the input is ignored: the server stamps it.
    public static func decode(_ bytes: [UInt8], limits: FrameLimits = FrameLimits()) throws(FrameError)
        -> ClientMessage
    {
        switch try decodeFrame(bytes, limits: limits) {
        case .relay(let relay): return relay.message(in: bytes)
        case .message(let message): return message
        }
    }

    /// `decode(_:limits:)`, with an addressed relay whose `to` is plain left in `bytes`
    /// (`ScannedRelay`): the server relays it from there (`RelayParts`). Same rules, same errors.
    public static func decodeFrame(_ bytes: [UInt8], limits: FrameLimits = FrameLimits()) throws(FrameError) -> ClientFrame {
        let scanned = bytes.withUnsafeBufferPointer { FrameScanner.scan($0) }
        return try decodeFrame(scanned, in: bytes, limits: limits)
    }

    /// `decodeFrame(_:limits:)` for a frame lent for the call (the transport's read buffer): a
    /// relay it leaves in the frame points into `bytes`, which are copied only for any other
    /// frame (whose message keeps parts of them). The frame is scanned once either way.
    public static func decodeFrame(lent bytes: UnsafeBufferPointer<UInt8>, limits: FrameLimits = FrameLimits()) throws(FrameError)
        -> ClientFrame
    {
        let scanned = FrameScanner.scan(bytes)
        if let scanned, let typeToken = scanned.type, case .string(false) = typeToken.kind,
           let kind = relayKind(UnsafeBufferPointer(rebasing: bytes[(typeToken.start + 1)..<(typeToken.end - 1)])),
           let relay = plainRelay(kind, scanned, in: bytes, limits: limits) {
            return .relay(relay)
        }
        // Anything else from a copy, at the same offsets (a relay whose type is escaped is found there).
        return try decodeFrame(scanned, in: Array(bytes), limits: limits)
    }

    /// The frame `scanned` (nil when the scan refused it) found in `bytes`.
    private static func decodeFrame(_ scanned: FrameScanner.Result?, in bytes: [UInt8], limits: FrameLimits) throws(FrameError)
        -> ClientFrame
    {
        if let scanned, let frame = try decodeScanned(scanned, in: bytes, limits: limits) { return frame }
        // Refused by the scan (or by a relay rule): the parser's path, which says why.
        guard let members = try FrameEnvelope.parseMembers(bytes) else {
            return .message(try decode(FrameEnvelope.parse(bytes), limits: limits))  // not an object: refused there
        }
        return .message(try decode(members, limits: limits))
    }

    /// The addressed relay of `kind` with a plain `to` that `scanned` is, if it meets the relay
    /// rules: what `decodeScanned` leaves in the frame, found without copying anything out of
    /// `bytes`. Its positions hold in any copy of the frame.
    @inline(__always)
    private static func plainRelay(_ kind: RelayKind, _ scanned: FrameScanner.Result, in bytes: UnsafeBufferPointer<UInt8>,
                                   limits: FrameLimits) -> ScannedRelay?
    {
        guard let token = scanned.to, case .string(false) = token.kind else { return nil }
        let length = token.end - token.start - 2
        guard length > 0, length <= limits.maxPeerIDBytes, relayRulesHold(kind, scanned, in: bytes) else { return nil }
        var payload: Range<Int>?
        if let token = scanned.payload, token.kind != .null { payload = token.start..<token.end }
        return ScannedRelay(kind: kind, to: (token.start + 1)..<(token.end - 1), payload: payload)
    }

    public static func decode(_ value: JSONValue, limits: FrameLimits = FrameLimits()) throws(FrameError) -> ClientMessage {
        let (fields, _) = try FrameEnvelope.fields(value)
        return try decode(FrameEnvelope.Members(fields), limits: limits)
    }

    private static func decode(_ members: FrameEnvelope.Members, limits: FrameLimits) throws(FrameError) -> ClientMessage {
        let typeName = try members.typeName()
        guard let type = FrameType(rawValue: typeName), type.isClientSendable else {
            throw FrameError(.unknownType, "unknown frame type '\(typeName.prefix(64))'", type: typeName)
        }
        let to: PeerID?
        switch members.to {
        case nil, .null?: to = nil
        case .string(let s)?:
            guard !s.isEmpty, s.utf8.count <= limits.maxPeerIDBytes else {
                throw FrameError(.badFrame, "field 'to' must be a peer id of 1–\(limits.maxPeerIDBytes) bytes", type: typeName)
            }
            to = PeerID(s)
        default: throw FrameError(.badFrame, "field 'to' must be a string", type: typeName)
        }
        let payload = members.payload.flatMap(JSONValue.nonNull)
        func invalid(_ message: String) -> FrameError { FrameError(.invalidPayload, message, type: typeName) }
        // Only relayed frames are addressed; a `to` elsewhere would silently broadcast what the
        // client meant for one peer, so it is refused instead.
        if to != nil {
            switch type {
            case .offer, .answer, .candidate, .data, .rpcRequest, .rpcAck, .rpcResponse: break
            default: throw invalid("\(typeName) cannot be addressed; remove 'to'")
            }
        }

        switch type {
        case .offer, .answer:
            guard let to else { throw invalid("\(typeName) needs 'to'") }
            guard let sdp = payload?["sdp"]?.stringValue, !sdp.isEmpty else {
                throw invalid("\(typeName) payload needs a non-empty string 'sdp'")
            }
            return .relay(type == .offer ? .offer : .answer, to: to, payload: payload.map(RawJSON.init))
        case .candidate:
            guard let to else { throw invalid("candidate needs 'to'") }
            guard let body = payload?.objectValue, body["candidate"]?.stringValue != nil else {
                throw invalid("candidate payload needs a string 'candidate'")
            }
            if let mid = body["sdpMid"], mid.stringValue == nil, !mid.isNull {
                throw invalid("'sdpMid' must be a string or null")
            }
            if let index = body["sdpMLineIndex"], index.int64Value == nil, !index.isNull {
                throw invalid("'sdpMLineIndex' must be an integer or null")
            }
            return .relay(.candidate, to: to, payload: payload.map(RawJSON.init))
        case .data:
            return .relay(.data, to: to, payload: payload.map(RawJSON.init))
        case .rpcRequest, .rpcAck, .rpcResponse:
            // The payload's members are the hub's to check (`Hub.rpcRefusal`): its refusals name
            // the request id, which a decoding error could not always.
            guard let to else { throw invalid("\(typeName) needs 'to'") }
            let kind: RelayKind = type == .rpcRequest ? .rpcRequest : type == .rpcAck ? .rpcAck : .rpcResponse
            return .relay(kind, to: to, payload: payload.map(RawJSON.init))
        case .chat:
            guard let body = payload?.objectValue else { throw invalid("chat payload must be an object") }
            guard let clientID = body["client_id"]?.stringValue, !clientID.isEmpty,
                clientID.utf8.count <= limits.maxClientIDBytes
            else { throw invalid("chat needs a string 'client_id' of 1–\(limits.maxClientIDBytes) bytes") }
            guard let text = body["text"]?.stringValue else { throw invalid("chat needs a string 'text'") }
            let meta = body["meta"].flatMap(JSONValue.nonNull)
            var replyTo: Int64?
            if let value = body["reply_to"].flatMap(JSONValue.nonNull) {
                guard let seq = value.int64Value, seq >= 1 else { throw invalid("chat 'reply_to' must be an integer seq ≥ 1") }
                replyTo = seq
            }
            return .chat(ChatSubmission(clientID: clientID, text: text, meta: meta, replyTo: replyTo))
        case .chatEdit, .chatDelete, .chatReact:
            guard let body = payload?.objectValue else { throw invalid("\(typeName) payload must be an object") }
            guard let clientID = body["client_id"]?.stringValue, !clientID.isEmpty,
                clientID.utf8.count <= limits.maxClientIDBytes
            else { throw invalid("\(typeName) needs a string 'client_id' of 1–\(limits.maxClientIDBytes) bytes") }
            guard let target = body["target"]?.int64Value, target >= 1 else {
                throw invalid("\(typeName) needs an integer 'target' ≥ 1 (the seq of a message)")
            }
            let action: ChatOperation.Action
            switch type {
            case .chatEdit:
                guard let text = body["text"]?.stringValue else { throw invalid("chat-edit needs a string 'text'") }
                action = .edit(text: text, meta: body["meta"].flatMap(JSONValue.nonNull))
            case .chatDelete:
                action = .delete
            default:
                guard let key = body["key"]?.stringValue else { throw invalid("chat-react needs a string 'key'") }
                var remove = false
                if let value = body["remove"].flatMap(JSONValue.nonNull) {
                    guard let flag = value.boolValue else { throw invalid("chat-react 'remove' must be a boolean") }
                    remove = flag
                }
                action = .react(key: key, remove: remove)
            }
            return .chatOperation(ChatOperation(clientID: clientID, target: target, action: action))
        case .typing:
            guard let typing = payload?["typing"]?.boolValue else { throw invalid("typing needs a boolean 'typing'") }
            return .typing(typing)
        case .read:
            guard let seq = payload?["seq"]?.int64Value, seq >= 0 else {
                throw invalid("read needs a non-negative integer 'seq'")
            }
            return .read(seq: seq)
        case .stats:
            return .stats(try decodeStats(payload, typeName: typeName))
        case .ping:
            return .ping(payload: payload.map(RawJSON.init))
        case .leave:
            return .leave
        default:
            throw FrameError(.unknownType, "unknown frame type '\(typeName)'", type: typeName)
        }
    }

    /// The fast path: the frame scanned without building a tree (`FrameScanner`). A relayed
    /// frame's payload is checked in place and kept as its bytes; other types parse only their
    /// payload and go through the same rules as the parser's path. Nil when the scan refuses the
    /// frame or a relay rule fails: the parser's path then finds the same fault and reports it.
    static func decodeScanned(_ scanned: FrameScanner.Result, in bytes: [UInt8], limits: FrameLimits) throws(FrameError) -> ClientFrame? {
        guard let typeToken = scanned.type, case .string(let typeEscaped) = typeToken.kind else { return nil }
        func text(_ token: FrameScanner.Token) -> String? {
            if case .string(false) = token.kind {
                return String(decoding: bytes[(token.start + 1)..<(token.end - 1)], as: UTF8.self)
            }
            return (try? JSONParser.parse(bytes[token.start..<token.end]))?.stringValue
        }
        let kind: RelayKind?
        if typeEscaped {
            kind = text(typeToken).flatMap(RelayKind.init(rawValue:))
        } else {
            kind = bytes.withUnsafeBufferPointer { buffer in
                Self.relayKind(UnsafeBufferPointer(rebasing: buffer[(typeToken.start + 1)..<(typeToken.end - 1)]))
            }
        }
        guard let kind else {
            // A chat takes its strings from their positions: no tree of its payload. Whatever
            // this does not accept goes on to the general path below, which says why.
            if !typeEscaped, Self.isChat(bytes, typeToken), let submission = chat(scanned, in: bytes, text: text, limits: limits) {
                return .message(.chat(submission))
            }
            // A ping's payload is only echoed: its checked bytes, no tree (a tree and its re-encoding
            // were most of a ping's turn on the service thread). One with a
            // `to` goes on to the general path, which refuses it.
            if !typeEscaped, scanned.to == nil, Self.isPing(bytes, typeToken) {
                guard let token = scanned.payload, token.kind != .null else { return .message(.ping(payload: nil)) }
                return .message(.ping(payload: RawJSON(validated: bytes[token.start..<token.end])))
            }
            // Not relayed: the payload as a tree, then the rules every decoder shares.
            var members = FrameEnvelope.Members()
            members.type = text(typeToken).map(JSONValue.string)
            do {
                members.to = try scanned.to.map { token throws(JSONParseError) in try JSONParser.parse(bytes[token.start..<token.end]) }
                members.payload = try scanned.payload.map { token throws(JSONParseError) in
                    try JSONParser.parse(bytes[token.start..<token.end])
                }
            } catch {
                return nil  // not reached: the scan accepted these bytes
            }
            return .message(try decode(members, limits: limits))
        }
        // Left in the frame when its `to` is plain: its bytes are the peer id.
        if let relay = bytes.withUnsafeBufferPointer({ plainRelay(kind, scanned, in: $0, limits: limits) }) { return .relay(relay) }
        guard bytes.withUnsafeBufferPointer({ relayRulesHold(kind, scanned, in: $0) }) else { return nil }
        var payload: Range<Int>?
        if let token = scanned.payload, token.kind != .null { payload = token.start..<token.end }
        guard let token = scanned.to, token.kind != .null else {
            return .message(.relay(kind, to: nil, payload: payload.map { RawJSON(validated: bytes[$0]) }))
        }
        // An escaped `to` (a plain one that breaks a limit is refused below, as the parser's path refuses it).
        guard case .string = token.kind else { return nil }
        guard let name = text(token), !name.isEmpty, name.utf8.count <= limits.maxPeerIDBytes else { return nil }
        return .message(.relay(kind, to: PeerID(name), payload: payload.map { RawJSON(validated: bytes[$0]) }))
    }

    /// The rules a relayed `kind` sets on its scanned members (the general path's, `decode(_:limits:)`);
    /// false for a frame that path refuses, which then says why.
    @inline(__always)
    private static func relayRulesHold(_ kind: RelayKind, _ scanned: FrameScanner.Result, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let addressed = scanned.to.map { $0.kind != .null } ?? false
        let isObject = scanned.payload?.kind == .object
        switch kind {
        case .offer, .answer:
            // A non-empty string: more than its two quotes (an escape is at least one character).
            guard addressed, isObject, let sdp = scanned.sdp, case .string = sdp.kind, sdp.end - sdp.start > 2 else { return false }
        case .candidate:
            guard addressed, isObject, let candidate = scanned.candidate, case .string = candidate.kind else { return false }
            if let mid = scanned.sdpMid {
                switch mid.kind {
                case .string, .null: break
                default: return false
                }
            }
            if let index = scanned.sdpMLineIndex {
                switch index.kind {
                case .integer, .null: break
                case .number:
                    // `3.0` counts as an integer, a 20-digit one does not: the parser's reading decides.
                    guard (try? JSONParser.parse(Array(bytes[index.start..<index.end])))?.int64Value != nil else { return false }
                default: return false
                }
            }
        case .data:
            break
        case .rpcRequest, .rpcAck, .rpcResponse:
            // Rare next to the others: the general path checks `to` and keeps the payload.
            return false
        }
        return true
    }

    /// Whether the unescaped `type` string at `token` is `ping`.
    private static func isPing(_ bytes: [UInt8], _ token: FrameScanner.Token) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            FrameScanner.equals(UnsafeBufferPointer(rebasing: buffer[(token.start + 1)..<(token.end - 1)]), "ping")
        }
    }

    /// Whether the unescaped `type` string at `token` is `chat`.
    private static func isChat(_ bytes: [UInt8], _ token: FrameScanner.Token) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            FrameScanner.equals(UnsafeBufferPointer(rebasing: buffer[(token.start + 1)..<(token.end - 1)]), "chat")
        }
    }

    /// A scanned `chat` that meets every rule of the general path (no `to`, an object payload, a
    /// `client_id` of 1–`maxClientIDBytes` bytes, a string `text`), decoded the same way; nil
    /// for anything else, which the general path then refuses with its error.
    private static func chat(_ scanned: FrameScanner.Result, in bytes: [UInt8], text: (FrameScanner.Token) -> String?,
                             limits: FrameLimits) -> ChatSubmission?
    {
        if let to = scanned.to, to.kind != .null { return nil }
        // A member the scan does not note (a `reply_to`) takes the general path, which reads it.
        guard !scanned.payloadHasOtherMembers, scanned.payload?.kind == .object,
            let clientIDToken = scanned.clientID, case .string = clientIDToken.kind, let clientID = text(clientIDToken),
            !clientID.isEmpty, clientID.utf8.count <= limits.maxClientIDBytes,
            let textToken = scanned.text, case .string = textToken.kind, let body = text(textToken)
        else { return nil }
        var meta: JSONValue?
        if let token = scanned.meta, token.kind != .null {
            // Rare next to a plain chat: parsed as a value, as the general path would.
            guard let value = try? JSONParser.parse(bytes[token.start..<token.end]) else { return nil }
            meta = value
        }
        return ChatSubmission(clientID: clientID, text: body, meta: meta)
    }

    /// The relayed type a `type` string's bytes spell, or nil.
    /// Told apart by length, then one or two little-endian loads, as `FrameScanner.member` does
    /// keys (every relayed frame comes here; `equals` went byte by byte through up to four literals).
    private static func relayKind(_ name: UnsafeBufferPointer<UInt8>) -> RelayKind? {
        guard let bytes = name.baseAddress else { return nil }
        let raw = UnsafeRawPointer(bytes)
        switch name.count {
        case 9:
            return UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self)) == 0x7461_6469_646e_6163 /* "candidat" */
                && bytes[8] == UInt8(ascii: "e") ? .candidate : nil
        case 5:
            return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x6566_666f /* "offe" */
                && bytes[4] == UInt8(ascii: "r") ? .offer : nil
        case 6:
            return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x7773_6e61 /* "answ" */
                && UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 4, as: UInt16.self)) == 0x7265 /* "er" */ ? .answer : nil
        case 4:
            return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x6174_6164 /* "data" */ ? .data : nil
        default:
            return nil
        }
    }

    /// Ranges are generous physical bounds: anything outside is a broken client, not a bad network.
    static func decodeStats(_ payload: JSONValue?, typeName: String) throws(FrameError) -> StatsSample {
        guard let body = payload?.objectValue else {
            throw FrameError(.invalidPayload, "stats payload must be an object", type: typeName)
        }
        func field(_ key: String, _ range: ClosedRange<Double>) throws(FrameError) -> Double? {
            guard let raw = body[key], !raw.isNull else { return nil }
            guard let number = raw.doubleValue else {
                throw FrameError(.invalidPayload, "stats '\(key)' must be a number", type: typeName)
            }
            guard range.contains(number) else {
                throw FrameError(
                    .invalidPayload, "stats '\(key)' must be within \(range.lowerBound)…\(range.upperBound)", type: typeName)
            }
            return number
        }
        let sample = StatsSample(
            rttMs: try field("rtt_ms", 0...60_000),
            jitterMs: try field("jitter_ms", 0...60_000),
            packetLoss: try field("packet_loss", 0...1),
            bitrateKbps: try field("bitrate_kbps", 0...1_000_000))
        guard sample != StatsSample() else {
            throw FrameError(.invalidPayload, "stats needs at least one of rtt_ms, jitter_ms, packet_loss, bitrate_kbps", type: typeName)
        }
        return sample
    }
}
