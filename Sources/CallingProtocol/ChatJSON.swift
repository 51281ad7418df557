/// A stored chat message's JSON, the one place its fields are written: the `chat` frame's payload
/// (`{client_id, meta, seq, text, ts}`), and with `from` the history API's message and the
/// `chat_message` webhook's data (docs/protocol.md, "Chat"). A new field is added here once and
/// reaches all three.
///
/// The hub's plain-chat fast path (`Frame.writePlainChat`, a chat without `meta` whose strings
/// need no escaping) sizes and copies the same bytes from literal pieces; the golden tests hold it
/// to `encoded()`, which writes through this type.
public struct ChatJSON: Sendable, Equatable {
    public var clientID: String
    /// The sender's peer id; nil in a `chat` frame's payload, where the envelope carries it.
    public var from: String?
    /// JSON null on the wire when absent.
    public var meta: JSONValue?
    public var seq: Int64
    public var text: String
    /// The server time the message was stored, in milliseconds since the epoch (`ts`).
    public var timestamp: Int64

    public init(clientID: String, from: String? = nil, meta: JSONValue?, seq: Int64, text: String, timestamp: Int64) {
        self.clientID = clientID
        self.from = from
        self.meta = meta
        self.seq = seq
        self.text = text
        self.timestamp = timestamp
    }

    /// The members by wire name, for a caller that adds its own (the webhook adds `room_id`).
    public var fields: [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "client_id": .string(clientID), "meta": meta ?? .null, "seq": .int(seq), "text": .string(text), "ts": .int(timestamp),
        ]
        if let from { fields["from"] = .string(from) }
        return fields
    }

    /// The object as a value: what `write(into:)` writes.
    public var json: JSONValue { .object(fields) }

    /// `JSONWriter.write(json)`'s bytes (keys sorted), written directly: a history page writes one per
    /// message and the broadcast one per chat.
    public func write(into out: inout [UInt8]) {
        JSONWriter.writeRaw(#"{"client_id":"#, into: &out)
        JSONWriter.writeString(clientID, into: &out)
        if let from {
            JSONWriter.writeRaw(#","from":"#, into: &out)
            JSONWriter.writeString(from, into: &out)
        }
        JSONWriter.writeRaw(#","meta":"#, into: &out)
        JSONWriter.write(meta ?? .null, into: &out)
        JSONWriter.writeRaw(#","seq":"#, into: &out)
        JSONWriter.writeInteger(seq, into: &out)
        JSONWriter.writeRaw(#","text":"#, into: &out)
        JSONWriter.writeString(text, into: &out)
        JSONWriter.writeRaw(#","ts":"#, into: &out)
        JSONWriter.writeInteger(timestamp, into: &out)
        out.append(UInt8(ascii: "}"))
    }
}
