/// What `ClientFrameDecoder.decodeFrame` read from one text frame.
public enum ClientFrame: Sendable, Equatable {
    /// An addressed relay with a plain `to`, the most frequent frame of all (ICE candidates),
    /// left where it is in the frame's bytes.
    case relay(ScannedRelay)
    /// Any other frame, decoded.
    case message(ClientMessage)
}

/// An addressed relay (`offer`, `answer`, `candidate` or `data` with a `to`) that passed every
/// rule of `ClientFrameDecoder.decode`, as positions in the bytes it was decoded from: nothing is
/// copied out of the frame. Its `to` is spelt without escapes, so its bytes are the peer id; a
/// relay whose `to` has escapes is decoded into a `ClientMessage` instead.
public struct ScannedRelay: Sendable, Equatable {
    /// Which relayed type the frame is.
    public let kind: RelayKind
    /// The `to` string's contents (between its quotes): 1 to `FrameLimits.maxPeerIDBytes` bytes.
    public let to: Range<Int>
    /// The payload value's bytes; nil when it is absent or `null`.
    public let payload: Range<Int>?

    /// The relay as `ClientFrameDecoder.decode` returns it, its parts copied out of `bytes` (the
    /// frame it was scanned from): for a frame that has to wait, such as one that arrives while
    /// its sender's join is still completing.
    public func message(in bytes: [UInt8]) -> ClientMessage {
        .relay(kind, to: PeerID(String(decoding: bytes[to], as: UTF8.self)), payload: payload.map { RawJSON(validated: bytes[$0]) })
    }

    /// `body` with the relay's parts lent from `bytes`, the frame it was scanned from (or a copy).
    @inline(__always)
    public func withParts<T>(in bytes: [UInt8], _ body: (RelayParts) -> T) -> T {
        bytes.withUnsafeBufferPointer { withParts(in: $0, body) }
    }

    /// `withParts(in:_:)` for a frame lent as a buffer (`ClientFrameDecoder.decodeFrame(lent:limits:)`).
    @inline(__always)
    public func withParts<T>(in bytes: UnsafeBufferPointer<UInt8>, _ body: (RelayParts) -> T) -> T {
        let base = bytes.baseAddress!
        return body(RelayParts(kind: kind, to: UnsafeBufferPointer(start: base + to.lowerBound, count: to.count),
                               payload: payload.map { UnsafeBufferPointer(start: base + $0.lowerBound, count: $0.count) }))
    }
}

/// An addressed relay's `to` and payload as bytes, lent for one call: straight from the frame
/// they arrived in (`ScannedRelay.withParts(in:_:)`), or from a decoded relay's values
/// (`with(_:to:payload:_:)`). The relay path finds the target and writes the relayed frame from
/// these: a `String` for `to` and a slice of the frame for its payload were a measurable share of
/// a relayed frame's instructions (docs/benchmarks.md, "Instructions per relayed frame").
/// Valid only inside the call that lends it.
public struct RelayParts {
    /// Which relayed type the frame is.
    public let kind: RelayKind
    /// The peer id the sender addressed, as UTF-8.
    public let to: UnsafeBufferPointer<UInt8>
    /// One complete, valid JSON value (the decoder checked it), or nil when the frame had none.
    public let payload: UnsafeBufferPointer<UInt8>?

    /// `to` as a peer id (a copy).
    public var toPeer: PeerID { PeerID(String(decoding: to, as: UTF8.self)) }

    /// The relay sent by `from` as a value that owns its parts (copies of them).
    public func relayed(from: PeerID) -> RelayedFrame {
        RelayedFrame(kind, from: from, to: toPeer, payload: payload.map { RawJSON(validated: ArraySlice($0)) })
    }

    /// `body` with the parts of a relay decoded into values.
    public static func with<T>(_ kind: RelayKind, to: PeerID, payload: RawJSON?, _ body: (RelayParts) -> T) -> T {
        var id = to.rawValue
        return id.withUTF8 { to in
            guard let payload else { return body(RelayParts(kind: kind, to: to, payload: nil)) }
            return payload.bytes.withUnsafeBufferPointer { body(RelayParts(kind: kind, to: to, payload: $0)) }
        }
    }
}
