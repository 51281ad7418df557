/// The wire envelope shared by every SDK: `{type, from?, to?, payload?, error?}`.
public struct Frame: Sendable, Equatable {
    public var type: String
    public var from: String?
    public var to: String?
    /// The payload as JSON. Chat, chat-ack, welcome and peer-joined frames (`Frame.chat`,
    /// `Frame.chatAck`, `Frame.welcome`, `Frame.peerJoined`) keep their fields typed, and relayed frames (`init(_:from:to:rawPayload:)`) the sender's bytes; both
    /// build this value only when it is read: `encoded()` writes them directly.
    public var payload: JSONValue? {
        get { body.json }
        set { body = .json(newValue) }
    }
    public var error: WireError?
    private var body: Body

    /// Every chat costs one ack and one broadcast; building a dictionary for each, then sorting and
    /// looking its keys up again to encode it, was a fifth of the service thread's time at saturation.
    private enum Body: Sendable {
        case json(JSONValue?)
        /// A relayed payload as its sender wrote it (docs/protocol.md, "Envelope").
        case raw(RawJSON)
        case chatAck(clientID: String, seq: Int64, timestamp: Int64)
        case chat(clientID: String, meta: JSONValue?, seq: Int64, text: String, timestamp: Int64)
        /// Boxed: held inline, the welcome's thirteen fields would widen every frame, relayed ones too.
        indirect case welcome(WelcomePayload)
        case roster(RosterEntry)

        var json: JSONValue? {
            switch self {
            case .json(let value):
                return value
            case .raw(let raw):
                return raw.value
            case .chatAck(let clientID, let seq, let timestamp):
                return ["client_id": .string(clientID), "seq": .int(seq), "ts": .int(timestamp)]
            case .chat(let clientID, let meta, let seq, let text, let timestamp):
                return ChatJSON(clientID: clientID, meta: meta, seq: seq, text: text, timestamp: timestamp).json
            case .welcome(let welcome):
                return welcome.json
            case .roster(let entry):
                return entry.json
            }
        }
    }

    public init(type: String, from: String? = nil, to: String? = nil, payload: JSONValue? = nil, error: WireError? = nil) {
        self.type = type
        self.from = from
        self.to = to
        self.body = .json(payload)
        self.error = error
    }

    public init(_ type: FrameType, from: String? = nil, to: String? = nil, payload: JSONValue? = nil, error: WireError? = nil) {
        self.init(type: type.rawValue, from: from, to: to, payload: payload, error: error)
    }

    /// A relayed frame: `payload`'s bytes go out as they are, inside the envelope the server writes.
    public init(_ type: FrameType, from: String? = nil, to: String? = nil, rawPayload: RawJSON?) {
        // Every field once: going through `init(type:…)` and then replacing `body` cost a second
        // construction per relayed frame.
        self.type = type.rawValue
        self.from = from
        self.to = to
        self.error = nil
        self.body = rawPayload.map(Body.raw) ?? .json(nil)
    }

    /// A successful `chat-ack`: payload `{client_id, seq, ts}`.
    public static func chatAck(clientID: String, seq: Int64, timestamp: Int64) -> Frame {
        Frame(type: FrameType.chatAck.rawValue, from: nil, body: .chatAck(clientID: clientID, seq: seq, timestamp: timestamp))
    }

    /// A stored `chat` from `from`: payload `{client_id, meta, seq, text, ts}` (`meta` null when absent).
    public static func chat(from: String, clientID: String, text: String, meta: JSONValue?, seq: Int64,
                            timestamp: Int64) -> Frame
    {
        Frame(type: FrameType.chat.rawValue, from: from,
              body: .chat(clientID: clientID, meta: meta, seq: seq, text: text, timestamp: timestamp))
    }

    /// The `welcome` a joiner is sent first, its payload kept typed (`WelcomePayload`).
    public static func welcome(_ payload: WelcomePayload) -> Frame {
        Frame(type: FrameType.welcome.rawValue, from: nil, body: .welcome(payload))
    }

    /// A `welcome`'s payload as the hub made it, nil for any other frame (and for a welcome built
    /// from JSON): read without building the JSON value, as a cluster's catch-up does on every join.
    public var welcomePayload: WelcomePayload? {
        if case .welcome(let payload) = body { return payload }
        return nil
    }

    /// The `peer-joined` the others in a room are sent: from the joiner, its roster entry as payload.
    public static func peerJoined(_ entry: RosterEntry) -> Frame {
        Frame(type: FrameType.peerJoined.rawValue, from: entry.peerID, body: .roster(entry))
    }

    /// Every field once, as `init(_:from:to:rawPayload:)` does: a frame made and then given its
    /// body cost a second construction for each chat's ack and broadcast.
    private init(type: String, from: String?, body: Body) {
        self.type = type
        self.from = from
        self.to = nil
        self.error = nil
        self.body = body
    }

    /// Equal when they encode the same JSON, however the payload is held.
    public static func == (lhs: Frame, rhs: Frame) -> Bool {
        lhs.type == rhs.type && lhs.from == rhs.from && lhs.to == rhs.to && lhs.error == rhs.error
            && lhs.payload == rhs.payload
    }

    /// An `error` frame answering a bad client frame.
    public static func error(_ code: ErrorCode, _ message: String, inReplyTo type: String? = nil) -> Frame {
        var payload: JSONValue? = nil
        if let type { payload = ["type": .string(type)] }
        return Frame(.error, payload: payload, error: WireError(code, message))
    }

    public var json: JSONValue {
        var fields: [String: JSONValue] = ["type": .string(type)]
        if let from { fields["from"] = .string(from) }
        if let to { fields["to"] = .string(to) }
        if let payload { fields["payload"] = payload }
        if let error { fields["error"] = error.json }
        return .object(fields)
    }

    /// The same bytes as `JSONWriter.bytes(json)` (keys in sorted order), written directly: the
    /// envelope is encoded for every frame sent, so it skips building and sorting a dictionary.
    /// A raw payload (a relayed frame's) is the exception: its bytes are written as they are.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        encode(into: &out)
        return out
    }

    /// For a frame with a raw payload (`init(_:from:to:rawPayload:)`: a relayed frame, or a `pong`
    /// echoing its ping, which has no `from`) whose `from`, `to` and `type` need no escaping, which
    /// is every one the hub makes from a peer id: the exact length of `encoded()`. Nil for any
    /// other frame. With `writePlainRelayed(to:)` the router writes such a frame straight into the
    /// message it sends, in one pass, without an intermediate buffer.
    public var plainRelayedLength: Int? {
        guard case .raw(let raw) = body, error == nil, let typeCount = Self.plainCount(type) else { return nil }
        var fromCount: Int?
        if let from {
            guard let count = Self.plainCount(from) else { return nil }
            fromCount = count
        }
        var toCount: Int?
        if let to {
            guard let count = Self.plainCount(to) else { return nil }
            toCount = count
        }
        return Self.relayedLength(fromCount: fromCount, payloadCount: raw.bytes.count, toCount: toCount, typeCount: typeCount)
    }

    /// Writes `encoded()`'s bytes to `destination`, which holds `plainRelayedLength` bytes; only
    /// for a frame whose `plainRelayedLength` is not nil.
    public func writePlainRelayed(to destination: UnsafeMutablePointer<UInt8>) {
        guard case .raw(let raw) = body else { preconditionFailure("not a plain frame with a raw payload") }
        Self.writeRelayed(from: from, payload: raw, to: to, type: type, at: destination)
    }

    /// The length of `{["from":"…",]"payload":…[,"to":"…"],"type":"…"}` from the lengths of its
    /// plain strings and payload; `fromCount` and `toCount` nil without them. `writeRelayed`
    /// writes those bytes.
    @inline(__always)
    fileprivate static func relayedLength(fromCount: Int?, payloadCount: Int, toCount: Int?, typeCount: Int) -> Int {
        typealias P = RelayedPieces
        var length = payloadCount + P.type.utf8CodeUnitCount + typeCount + P.end.utf8CodeUnitCount
        if let fromCount {
            length += P.from.utf8CodeUnitCount + fromCount + P.payload.utf8CodeUnitCount
        } else {
            length += P.payloadFirst.utf8CodeUnitCount
        }
        if let toCount { length += P.to.utf8CodeUnitCount + toCount + P.toEnd.utf8CodeUnitCount }
        return length
    }

    /// Writes a relayed frame's bytes (`encode(into:)`'s, for plain strings) to `destination`.
    @inline(__always)
    fileprivate static func writeRelayed(from: String?, payload: RawJSON, to: String?, type: String,
                                         at destination: UnsafeMutablePointer<UInt8>) {
        payload.bytes.withUnsafeBufferPointer { payload in
            withUTF8(to) { to in
                var cursor = destination
                writeRelayedHead(from: from, payload: payload, to: to, at: &cursor)
                put(type, at: &cursor)
                put(RelayedPieces.end, at: &cursor)
            }
        }
    }

    /// `writeRelayed` for an addressed relay's parts lent as bytes (`RelayParts`), with the type
    /// name as a literal (`RelayKind.typeName`): no `String` made for it and no contiguous-storage
    /// call to copy it, per relayed frame.
    @inline(__always)
    static func writeRelayed(from: String, payload: UnsafeBufferPointer<UInt8>, to: UnsafeBufferPointer<UInt8>,
                             type: StaticString, at destination: UnsafeMutablePointer<UInt8>) {
        var cursor = destination
        writeRelayedHead(from: from, payload: payload, to: to, at: &cursor)
        put(type, at: &cursor)
        put(RelayedPieces.end, at: &cursor)
    }

    /// A relayed frame's bytes up to its type's name, from `cursor` on.
    @inline(__always)
    private static func writeRelayedHead(from: String?, payload: UnsafeBufferPointer<UInt8>, to: UnsafeBufferPointer<UInt8>?,
                                         at cursor: inout UnsafeMutablePointer<UInt8>) {
        typealias P = RelayedPieces
        // A cursor passed along rather than captured by nested functions: a captured `var` is a
        // box whose every access is checked for exclusivity (seven `swift_beginAccess` per
        // frame).
        if let from {
            put(P.from, at: &cursor)
            put(from, at: &cursor)
            put(P.payload, at: &cursor)
        } else {
            put(P.payloadFirst, at: &cursor)
        }
        put(payload, at: &cursor)
        if let to {
            put(P.to, at: &cursor)
            put(to, at: &cursor)
            put(P.toEnd, at: &cursor)
        }
        put(P.type, at: &cursor)
    }

    /// `body` with `string`'s UTF-8 bytes, or nil without a string. Contiguous: the callers'
    /// lengths (`plainRelayedLength`) counted it only then.
    @inline(__always)
    private static func withUTF8<T>(_ string: String?, _ body: (UnsafeBufferPointer<UInt8>?) -> T) -> T {
        guard let string, let result = string.utf8.withContiguousStorageIfAvailable({ body($0) }) else { return body(nil) }
        return result
    }

    @inline(__always)
    fileprivate static func put(_ bytes: UnsafeBufferPointer<UInt8>, at cursor: inout UnsafeMutablePointer<UInt8>) {
        guard let base = bytes.baseAddress else { return }
        copy(base, count: bytes.count, to: cursor)
        cursor += bytes.count
    }

    @inline(__always)
    fileprivate static func put(_ literal: StaticString, at cursor: inout UnsafeMutablePointer<UInt8>) {
        copy(literal.utf8Start, count: literal.utf8CodeUnitCount, to: cursor)
        cursor += literal.utf8CodeUnitCount
    }

    @inline(__always)
    fileprivate static func put(_ string: String, at cursor: inout UnsafeMutablePointer<UInt8>) {
        // Contiguous: `plainRelayedLength` counted it only then.
        string.utf8.withContiguousStorageIfAvailable { put($0, at: &cursor) }
    }

    /// Copies `count` bytes. The short runs a frame is written from (its literals, peer ids,
    /// type names) take one or two overlapping unaligned moves: as `memcpy` calls they were ten
    /// calls per relayed frame. Longer ones (payloads) `memcpy`.
    @inline(__always)
    static func copy(_ source: UnsafePointer<UInt8>, count: Int, to destination: UnsafeMutablePointer<UInt8>) {
        let from = UnsafeRawPointer(source)
        let to = UnsafeMutableRawPointer(destination)
        switch count {
        case 8...16:
            to.storeBytes(of: from.loadUnaligned(as: UInt64.self), as: UInt64.self)
            to.storeBytes(of: from.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self), toByteOffset: count - 8, as: UInt64.self)
        case 4..<8:
            to.storeBytes(of: from.loadUnaligned(as: UInt32.self), as: UInt32.self)
            to.storeBytes(of: from.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self), toByteOffset: count - 4, as: UInt32.self)
        case 2..<4:
            to.storeBytes(of: from.loadUnaligned(as: UInt16.self), as: UInt16.self)
            to.storeBytes(of: from.loadUnaligned(fromByteOffset: count - 2, as: UInt16.self), toByteOffset: count - 2, as: UInt16.self)
        case 1:
            destination.pointee = source.pointee
        case ...0:
            break
        default:
            destination.update(from: source, count: count)
        }
    }

    /// `value` in decimal: the digits `encode(into:)` writes for it.
    @inline(__always)
    private static func put(_ value: Int64, at cursor: inout UnsafeMutablePointer<UInt8>) {
        cursor += decimalCount(value)
        var end = cursor
        var magnitude = value.magnitude
        // Two digits per division: a timestamp has thirteen.
        while magnitude >= 10 {
            let pair = Int(magnitude % 100)
            magnitude /= 100
            end -= 2
            end[0] = digitPairs[2 * pair]
            end[1] = digitPairs[2 * pair + 1]
        }
        if magnitude > 0 || end == cursor {
            end -= 1
            end.pointee = UInt8(ascii: "0") + UInt8(magnitude)
        }
        if value < 0 { (end - 1).pointee = UInt8(ascii: "-") }
    }

    /// For a `chat-ack` (`chatAck(clientID:seq:timestamp:)`) or a stored `chat` without `meta`
    /// (`chat(from:…)`) whose strings need no escaping, which is nearly every one: the exact length
    /// of `encoded()`. Nil for any other frame. With `writePlainChat(to:)` the router writes such a
    /// frame straight into the message it sends (every chat costs an ack and a broadcast).
    public var plainChatLength: Int? {
        guard error == nil, let envelope = Self.plainChatEnvelopeLength(type: type, from: from, to: to) else { return nil }
        switch body {
        case .chatAck(let clientID, let seq, let timestamp):
            return Self.plainAckPayloadLength(clientID: clientID, seq: seq, timestamp: timestamp).map { envelope + $0 }
        case .chat(let clientID, nil, let seq, let text, let timestamp):
            return Self.plainChatPayloadLength(clientID: clientID, text: text, seq: seq, timestamp: timestamp).map { envelope + $0 }
        default:
            return nil
        }
    }

    /// Writes `encoded()`'s bytes to `destination`, which holds `plainChatLength` bytes; only for
    /// a frame whose `plainChatLength` is not nil.
    public func writePlainChat(to destination: UnsafeMutablePointer<UInt8>) {
        // The cursor passed along, as in `writePlainRelayed`.
        var cursor = destination
        // `encode(into:)`'s order: `{`, from, payload, to, type.
        Self.putChatHead(from: from, at: &cursor)
        switch body {
        case .chatAck(let clientID, let seq, let timestamp):
            Self.putAckPayload(clientID: clientID, seq: seq, timestamp: timestamp, at: &cursor)
        case .chat(let clientID, _, let seq, let text, let timestamp):
            Self.putChatPayload(clientID: clientID, text: text, seq: seq, timestamp: timestamp, at: &cursor)
        default:
            preconditionFailure("not a plain chat frame")
        }
        Self.putChatTail(to: to, type: type, at: &cursor)
    }

    /// `chatAck(clientID:seq:timestamp:).plainChatLength`, from the ack's fields: the router
    /// writes a stored chat's ack without building its frame (a `Frame` made, copied into an
    /// effect and destroyed per chat).
    public static func plainChatAckLength(clientID: String, seq: Int64, timestamp: Int64) -> Int? {
        plainAckPayloadLength(clientID: clientID, seq: seq, timestamp: timestamp).map { chatAckEnvelopeLength + $0 }
    }

    /// `chatAck(clientID:seq:timestamp:).writePlainChat(to:)`, from the ack's fields, into
    /// `plainChatAckLength` bytes.
    public static func writePlainChatAck(clientID: String, seq: Int64, timestamp: Int64, to destination: UnsafeMutablePointer<UInt8>) {
        var cursor = destination
        putChatHead(from: nil, at: &cursor)
        putAckPayload(clientID: clientID, seq: seq, timestamp: timestamp, at: &cursor)
        putChatTail(to: nil, type: FrameType.chatAck.rawValue, at: &cursor)
    }

    /// `chat(from:clientID:text:meta: nil,seq:timestamp:).plainChatLength`, from the chat's
    /// fields (a chat with `meta` is never plain), as `plainChatAckLength` is for its ack.
    public static func plainChatLength(from: String, clientID: String, text: String, seq: Int64, timestamp: Int64) -> Int? {
        guard let fromCount = plainCount(from),
              let payload = plainChatPayloadLength(clientID: clientID, text: text, seq: seq, timestamp: timestamp)
        else { return nil }
        return chatEnvelopeLength + fromCount + payload
    }

    /// `chat(from:clientID:text:meta: nil,seq:timestamp:).writePlainChat(to:)`, from the chat's
    /// fields, into `plainChatLength(from:clientID:text:seq:timestamp:)` bytes.
    public static func writePlainChat(from: String, clientID: String, text: String, seq: Int64, timestamp: Int64,
                                      to destination: UnsafeMutablePointer<UInt8>)
    {
        var cursor = destination
        putChatHead(from: from, at: &cursor)
        putChatPayload(clientID: clientID, text: text, seq: seq, timestamp: timestamp, at: &cursor)
        putChatTail(to: nil, type: FrameType.chat.rawValue, at: &cursor)
    }

    /// The bytes of a plain chat or chat-ack outside its payload's values: `{` or `from`, the
    /// payload's closing `},`, `to`, `type`, the closing `"}`. Nil when one of them needs escaping.
    private static func plainChatEnvelopeLength(type: String, from: String?, to: String?) -> Int? {
        typealias P = PlainChatPieces
        guard let typeCount = plainCount(type) else { return nil }
        var length = P.type.utf8CodeUnitCount + typeCount + P.end.utf8CodeUnitCount + P.payloadEnd.utf8CodeUnitCount
        if let from {
            guard let fromCount = plainCount(from) else { return nil }
            length += P.from.utf8CodeUnitCount + fromCount + P.stringEnd.utf8CodeUnitCount
        } else {
            length += P.open.utf8CodeUnitCount
        }
        if let to {
            guard let toCount = plainCount(to) else { return nil }
            length += P.to.utf8CodeUnitCount + toCount + P.stringEnd.utf8CodeUnitCount
        }
        return length
    }

    /// `plainChatEnvelopeLength` of a hub's chat-ack (no `from`, no `to`).
    private static let chatAckEnvelopeLength = plainChatEnvelopeLength(type: FrameType.chatAck.rawValue, from: nil, to: nil)!
    /// `plainChatEnvelopeLength` of a hub's chat (no `to`) with an empty `from`: add the sender's length.
    private static let chatEnvelopeLength = plainChatEnvelopeLength(type: FrameType.chat.rawValue, from: "", to: nil)!

    private static func plainAckPayloadLength(clientID: String, seq: Int64, timestamp: Int64) -> Int? {
        typealias P = PlainChatPieces
        guard let clientIDCount = plainCount(clientID) else { return nil }
        return P.clientID.utf8CodeUnitCount + clientIDCount + P.ackSeq.utf8CodeUnitCount + decimalCount(seq)
            + P.ts.utf8CodeUnitCount + decimalCount(timestamp)
    }

    private static func plainChatPayloadLength(clientID: String, text: String, seq: Int64, timestamp: Int64) -> Int? {
        typealias P = PlainChatPieces
        guard let clientIDCount = plainCount(clientID), let textCount = plainCount(text) else { return nil }
        return P.clientID.utf8CodeUnitCount + clientIDCount + P.chatSeq.utf8CodeUnitCount + decimalCount(seq)
            + P.text.utf8CodeUnitCount + textCount + P.textEnd.utf8CodeUnitCount + decimalCount(timestamp)
    }

    @inline(__always)
    private static func putChatHead(from: String?, at cursor: inout UnsafeMutablePointer<UInt8>) {
        typealias P = PlainChatPieces
        if let from {
            put(P.from, at: &cursor)
            put(from, at: &cursor)
            put(P.stringEnd, at: &cursor)
        } else {
            put(P.open, at: &cursor)
        }
    }

    @inline(__always)
    private static func putAckPayload(clientID: String, seq: Int64, timestamp: Int64, at cursor: inout UnsafeMutablePointer<UInt8>) {
        typealias P = PlainChatPieces
        put(P.clientID, at: &cursor)
        put(clientID, at: &cursor)
        put(P.ackSeq, at: &cursor)
        put(seq, at: &cursor)
        put(P.ts, at: &cursor)
        put(timestamp, at: &cursor)
    }

    @inline(__always)
    private static func putChatPayload(clientID: String, text: String, seq: Int64, timestamp: Int64,
                                       at cursor: inout UnsafeMutablePointer<UInt8>)
    {
        typealias P = PlainChatPieces
        put(P.clientID, at: &cursor)
        put(clientID, at: &cursor)
        put(P.chatSeq, at: &cursor)
        put(seq, at: &cursor)
        put(P.text, at: &cursor)
        put(text, at: &cursor)
        put(P.textEnd, at: &cursor)
        put(timestamp, at: &cursor)
    }

    @inline(__always)
    private static func putChatTail(to: String?, type: String, at cursor: inout UnsafeMutablePointer<UInt8>) {
        typealias P = PlainChatPieces
        put(P.payloadEnd, at: &cursor)
        if let to {
            put(P.to, at: &cursor)
            put(to, at: &cursor)
            put(P.stringEnd, at: &cursor)
        }
        put(P.type, at: &cursor)
        put(type, at: &cursor)
        put(P.end, at: &cursor)
    }

    /// The literal bytes of `encode(into:)` around a chat's or chat-ack's values. `from`, `to`
    /// and `payload` each start with what precedes them (`{`, or the `,` after a string).
    private enum PlainChatPieces {
        static let open: StaticString = "{"
        static let from: StaticString = #"{"from":""#
        static let stringEnd: StaticString = #"","#
        static let clientID: StaticString = #""payload":{"client_id":""#
        static let ackSeq: StaticString = #"","seq":"#
        static let chatSeq: StaticString = #"","meta":null,"seq":"#
        static let text: StaticString = #","text":""#
        static let textEnd: StaticString = #"","ts":"#
        static let ts: StaticString = #","ts":"#
        static let payloadEnd: StaticString = "},"
        static let to: StaticString = #""to":""#
        static let type: StaticString = #""type":""#
        static let end: StaticString = #""}"#
    }

    /// The number of bytes `JSONWriter.writeInteger` writes for `value`.
    private static func decimalCount(_ value: Int64) -> Int {
        var count = value < 0 ? 2 : 1
        var magnitude = value.magnitude
        while magnitude >= 10_000 {
            magnitude /= 10_000
            count += 4
        }
        while magnitude >= 10 {
            magnitude /= 10
            count += 1
        }
        return count
    }

    /// "00" to "99", two bytes each.
    private static let digitPairs: [UInt8] = (0..<100).flatMap { [UInt8(ascii: "0") + UInt8($0 / 10), UInt8(ascii: "0") + UInt8($0 % 10)] }

    /// The UTF-8 length of `string` when JSON carries it as it is (no `"`, `\` or control
    /// character) and its bytes are contiguous; else nil.
    fileprivate static func plainCount(_ string: String) -> Int? {
        string.utf8.withContiguousStorageIfAvailable { bytes -> Int? in
            guard let base = bytes.baseAddress else { return 0 }
            return PlainRun.end(in: base, from: 0, to: bytes.count, stoppingAtNonASCII: false) == bytes.count ? bytes.count : nil
        } ?? nil
    }

    /// Appends `encoded()`'s bytes to `out`, so a caller can encode straight into the buffer it sends.
    public func encode(into out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        if let error {
            JSONWriter.writeRaw(#""error":"#, into: &out)
            JSONWriter.write(error.json, into: &out)
            out.append(UInt8(ascii: ","))
        }
        if let from {
            JSONWriter.writeRaw(#""from":"#, into: &out)
            JSONWriter.writeString(from, into: &out)
            out.append(UInt8(ascii: ","))
        }
        switch body {
        case .json(nil):
            break
        case .json(let payload?):
            JSONWriter.writeRaw(#""payload":"#, into: &out)
            JSONWriter.write(payload, into: &out)
            out.append(UInt8(ascii: ","))
        case .raw(let raw):
            JSONWriter.writeRaw(#""payload":"#, into: &out)
            out.append(contentsOf: raw.bytes)
            out.append(UInt8(ascii: ","))
        case .chatAck(let clientID, let seq, let timestamp):
            JSONWriter.writeRaw(#""payload":{"client_id":"#, into: &out)
            JSONWriter.writeString(clientID, into: &out)
            JSONWriter.writeRaw(#","seq":"#, into: &out)
            JSONWriter.writeInteger(seq, into: &out)
            JSONWriter.writeRaw(#","ts":"#, into: &out)
            JSONWriter.writeInteger(timestamp, into: &out)
            JSONWriter.writeRaw("},", into: &out)
        case .chat(let clientID, let meta, let seq, let text, let timestamp):
            JSONWriter.writeRaw(#""payload":"#, into: &out)
            ChatJSON(clientID: clientID, meta: meta, seq: seq, text: text, timestamp: timestamp).write(into: &out)
            out.append(UInt8(ascii: ","))
        case .welcome(let welcome):
            JSONWriter.writeRaw(#""payload":"#, into: &out)
            welcome.write(into: &out)
            out.append(UInt8(ascii: ","))
        case .roster(let entry):
            JSONWriter.writeRaw(#""payload":"#, into: &out)
            entry.write(into: &out)
            out.append(UInt8(ascii: ","))
        }
        if let to {
            JSONWriter.writeRaw(#""to":"#, into: &out)
            JSONWriter.writeString(to, into: &out)
            out.append(UInt8(ascii: ","))
        }
        JSONWriter.writeRaw(#""type":"#, into: &out)
        JSONWriter.writeString(type, into: &out)
        out.append(UInt8(ascii: "}"))
    }
}

/// `{code, message}` as sent in a frame's `error` field.
public struct WireError: Sendable, Hashable, Error {
    public var code: Int
    public var message: String

    public init(_ code: ErrorCode, _ message: String) {
        self.code = code.rawValue
        self.message = message
    }

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    public var json: JSONValue { ["code": .int(Int64(code)), "message": .string(message)] }
}

/// An addressed relay (`offer`, `answer`, `candidate`, `data` with `to`) as the hub decided it:
/// the parts of the frame `frame` builds, kept apart so that a router can write the frame straight
/// into the message it sends without building a `Frame` first (its construction, copy and
/// destruction were a visible share of a relayed frame under callgrind). The bytes
/// written are `frame.encoded()`'s.
public struct RelayedFrame: Sendable, Equatable {
    public var kind: RelayKind
    /// The sender: the `from` the server stamps.
    public var from: PeerID
    public var to: PeerID
    public var payload: RawJSON?

    public init(_ kind: RelayKind, from: PeerID, to: PeerID, payload: RawJSON?) {
        self.kind = kind
        self.from = from
        self.to = to
        self.payload = payload
    }

    /// The frame this relay sends: `{"from":…,"payload":…,"to":…,"type":…}`.
    public var frame: Frame { Frame(kind.frameType, from: from.rawValue, to: to.rawValue, rawPayload: payload) }

    /// `frame.plainRelayedLength`: the exact length of `frame.encoded()` when there is a payload
    /// and neither peer id needs escaping (every id the hub seats); nil otherwise.
    public var plainLength: Int? {
        guard payload != nil, Self.isPlain(from), Self.isPlain(to) else { return nil }
        return RelayParts.with(kind, to: to, payload: payload) { $0.plainLength(plainFrom: from) }
    }

    /// Writes `frame.encoded()`'s bytes to `destination`, which holds `plainLength` bytes; only
    /// for a relay whose `plainLength` is not nil.
    public func writePlain(to destination: UnsafeMutablePointer<UInt8>) {
        guard payload != nil else { preconditionFailure("not a plain relayed frame") }
        RelayParts.with(kind, to: to, payload: payload) { $0.writePlain(from: from, at: destination) }
    }

    /// Whether JSON carries `id` as it is (no `"`, `\` or control character) and its bytes are
    /// contiguous: what a relayed frame needs to be written from its parts.
    public static func isPlain(_ id: PeerID) -> Bool { Frame.plainCount(id.rawValue) != nil }
}

extension RelayParts {
    /// The exact length of the relayed frame `writePlain(from:at:)` writes, for a relay with a
    /// payload whose `to` and sender `from` are both known to be plain (`RelayedFrame.isPlain`):
    /// from the parts' byte counts, without checking them again. The type names are the
    /// protocol's own literals, plain by construction. Nil without a payload.
    public func plainLength(plainFrom from: PeerID) -> Int? {
        guard let payload else { return nil }
        return Frame.relayedLength(fromCount: from.rawValue.utf8.count, payloadCount: payload.count, toCount: to.count,
                                   typeCount: kind.typeName.utf8CodeUnitCount)
    }

    /// Writes the frame `relayed(from: from).frame.encoded()` would be to `destination`, which
    /// holds `plainLength(plainFrom: from)` bytes; only when that is not nil.
    public func writePlain(from: PeerID, at destination: UnsafeMutablePointer<UInt8>) {
        guard let payload else { preconditionFailure("not a plain relayed frame") }
        Frame.writeRelayed(from: from.rawValue, payload: payload, to: to, type: kind.typeName, at: destination)
    }
}

/// The literals around the strings of `{"from":"…","payload":…,"to":"…","type":"…"}`, as computed
/// properties: a `static let` is read through its lazy initializer's check.
private enum RelayedPieces {
    static var from: StaticString { #"{"from":""# }
    static var payload: StaticString { #"","payload":"# }
    /// Where a frame without `from` (a `pong`) starts.
    static var payloadFirst: StaticString { #"{"payload":"# }
    static var to: StaticString { #","to":""# }
    static var toEnd: StaticString { #"""# }
    static var type: StaticString { #","type":""# }
    static var end: StaticString { #""}"# }
}

/// Every frame type in the protocol. `clientSendable` is what a client may send on `/v1/ws`.
public enum FrameType: String, Sendable, CaseIterable {
    case welcome
    case peerJoined = "peer-joined"
    case peerLeft = "peer-left"
    case offer
    case answer
    case candidate
    case data
    case chat
    case chatAck = "chat-ack"
    /// New text and meta for a stored message (docs/protocol.md, "Chat operations").
    case chatEdit = "chat-edit"
    /// A tombstone for a stored message: its content is erased from storage.
    case chatDelete = "chat-delete"
    /// A reaction key added to (or removed from) a stored message.
    case chatReact = "chat-react"
    case typing
    case read
    case meter
    case stats
    case ping
    case pong
    case error
    /// A peer's socket ended without a clean leave; its seat is held for its reconnect grace.
    case peerReconnecting = "peer-reconnecting"
    /// A peer in its reconnect grace is back on a new socket.
    case peerResumed = "peer-resumed"
    /// From a client: its seat ends now (a deliberate hang-up), not after a reconnect grace.
    case leave
    /// A remote procedure call to the peer in `to` (docs/protocol.md, "RPC"), relayed like `data`.
    case rpcRequest = "rpc-request"
    /// The callee's SDK received an `rpc-request` and has a handler running for it.
    case rpcAck = "rpc-ack"
    /// The callee's answer to an `rpc-request`: its result or its error.
    case rpcResponse = "rpc-response"

    public var isClientSendable: Bool {
        switch self {
        case .offer, .answer, .candidate, .data, .chat, .chatEdit, .chatDelete, .chatReact, .typing, .read, .stats, .ping, .leave, .rpcRequest, .rpcAck, .rpcResponse:
            return true
        default: return false
        }
    }
}
