/// A peer as rosters name it: `{name, peer_id, role}`, `name` null when the peer has none. The
/// payload of `peer-joined` and each entry of `welcome.peers` (docs/protocol.md, "welcome").
public struct RosterEntry: Sendable, Equatable {
    /// The peer's id.
    public var peerID: String
    /// The role its token gave it.
    public var role: String
    /// Its display name, if its token gave one.
    public var name: String?
    /// In its reconnect grace (docs/protocol.md, "Reconnect grace"): sent as `"reconnecting":
    /// true` in `welcome.peers`, and left out otherwise.
    public var reconnecting: Bool

    public init(peerID: String, role: String, name: String?, reconnecting: Bool = false) {
        self.peerID = peerID
        self.role = role
        self.name = name
        self.reconnecting = reconnecting
    }

    /// The entry as the JSON object it is sent as.
    public var json: JSONValue {
        var fields: [String: JSONValue] = ["name": name.map(JSONValue.string) ?? .null, "peer_id": .string(peerID), "role": .string(role)]
        if reconnecting { fields["reconnecting"] = .bool(true) }
        return .object(fields)
    }

    /// Appends `JSONWriter.bytes(json)`: the keys in sorted order.
    func write(into out: inout [UInt8]) {
        JSONWriter.writeRaw(#"{"name":"#, into: &out)
        JSONWriter.writeStringOrNull(name, into: &out)
        JSONWriter.writeRaw(#","peer_id":"#, into: &out)
        JSONWriter.writeString(peerID, into: &out)
        if reconnecting { JSONWriter.writeRaw(#","reconnecting":true"#, into: &out) }
        JSONWriter.writeRaw(#","role":"#, into: &out)
        JSONWriter.writeString(role, into: &out)
        out.append(UInt8(ascii: "}"))
    }
}

/// The payload of `welcome`, the first frame of every joined socket (docs/protocol.md, "welcome").
///
/// Typed, as a chat's payload is (`Frame.chat`): every join sends one, and its eleven to thirteen
/// members built into a dictionary (each key hashed), then sorted and written, were a sizeable
/// share of a join's work on the service thread. `Frame.welcome(_:)` keeps these fields and
/// writes them in sorted key order; `Frame.payload` builds the JSON value only when it is read.
public struct WelcomePayload: Sendable, Equatable {
    /// The joiner's own id.
    public var peerID: String
    public var roomID: String
    /// The business call, null when the token named none.
    public var callID: String?
    public var role: String
    /// The joiner's display name, null when the token gave none.
    public var name: String?
    /// Everyone else seated in the room.
    public var peers: [RosterEntry]
    /// How often the client should send an app-level `ping`.
    public var pingIntervalMs: Int64
    /// The server's clock, in milliseconds since the epoch.
    public var serverTime: Int64
    /// The room's newest chat seq, and the joiner's read marker.
    public var lastSeq: Int64
    public var readSeq: Int64
    /// Chats after the read marker that were not the joiner's own.
    public var unread: Int64
    /// When the joiner asked to resume (`last_seq` on the upgrade): whether every chat it missed
    /// follows, and how many do. Both members absent otherwise.
    public var resume: Resume?

    /// `recovered` and `replay_count`.
    public struct Resume: Sendable, Equatable {
        public var recovered: Bool
        public var replayCount: Int64

        public init(recovered: Bool, replayCount: Int64) {
            self.recovered = recovered
            self.replayCount = replayCount
        }
    }

    public init(peerID: String, roomID: String, callID: String?, role: String, name: String?, peers: [RosterEntry],
                pingIntervalMs: Int64, serverTime: Int64, lastSeq: Int64, readSeq: Int64, unread: Int64,
                resume: Resume?)
    {
        self.peerID = peerID
        self.roomID = roomID
        self.callID = callID
        self.role = role
        self.name = name
        self.peers = peers
        self.pingIntervalMs = pingIntervalMs
        self.serverTime = serverTime
        self.lastSeq = lastSeq
        self.readSeq = readSeq
        self.unread = unread
        self.resume = resume
    }

    /// The payload as the JSON object it is sent as.
    public var json: JSONValue {
        var fields: [String: JSONValue] = [
            "peer_id": .string(peerID),
            "room_id": .string(roomID),
            "call_id": callID.map(JSONValue.string) ?? .null,
            "role": .string(role),
            "name": name.map(JSONValue.string) ?? .null,
            "peers": .array(peers.map(\.json)),
            "ping_interval_ms": .int(pingIntervalMs),
            "server_time": .int(serverTime),
            "last_seq": .int(lastSeq),
            "read_seq": .int(readSeq),
            "unread": .int(unread),
        ]
        if let resume {
            fields["recovered"] = .bool(resume.recovered)
            fields["replay_count"] = .int(resume.replayCount)
        }
        return .object(fields)
    }

    /// Appends `JSONWriter.bytes(json)`: the keys in sorted order, written from the fields.
    func write(into out: inout [UInt8]) {
        JSONWriter.writeRaw(#"{"call_id":"#, into: &out)
        JSONWriter.writeStringOrNull(callID, into: &out)
        JSONWriter.writeRaw(#","last_seq":"#, into: &out)
        JSONWriter.writeInteger(lastSeq, into: &out)
        JSONWriter.writeRaw(#","name":"#, into: &out)
        JSONWriter.writeStringOrNull(name, into: &out)
        JSONWriter.writeRaw(#","peer_id":"#, into: &out)
        JSONWriter.writeString(peerID, into: &out)
        JSONWriter.writeRaw(#","peers":["#, into: &out)
        for (offset, peer) in peers.enumerated() {
            if offset > 0 { out.append(UInt8(ascii: ",")) }
            peer.write(into: &out)
        }
        JSONWriter.writeRaw(#"],"ping_interval_ms":"#, into: &out)
        JSONWriter.writeInteger(pingIntervalMs, into: &out)
        JSONWriter.writeRaw(#","read_seq":"#, into: &out)
        JSONWriter.writeInteger(readSeq, into: &out)
        if let resume {
            JSONWriter.writeRaw(resume.recovered ? #","recovered":true"# : #","recovered":false"#, into: &out)
            JSONWriter.writeRaw(#","replay_count":"#, into: &out)
            JSONWriter.writeInteger(resume.replayCount, into: &out)
        }
        JSONWriter.writeRaw(#","role":"#, into: &out)
        JSONWriter.writeString(role, into: &out)
        JSONWriter.writeRaw(#","room_id":"#, into: &out)
        JSONWriter.writeString(roomID, into: &out)
        JSONWriter.writeRaw(#","server_time":"#, into: &out)
        JSONWriter.writeInteger(serverTime, into: &out)
        JSONWriter.writeRaw(#","unread":"#, into: &out)
        JSONWriter.writeInteger(unread, into: &out)
        out.append(UInt8(ascii: "}"))
    }
}
