import CallingProtocol

/// Relays to peers in their reconnect grace (`peer-reconnecting` … `peer-resumed` or
/// `peer-left`), pure: the browser SDK's `_RelayHold` (sdk/js/calling-client.js). While a peer is
/// held, frames to it are queued here instead of sent. Frames sent just before the
/// `peer-reconnecting` arrived are refused by the server, one `error` 480 each, which names only
/// the refused frame's type: the server answers one connection's frames in order, so each 480 is
/// counted against the earliest frame of that type to a held peer sent after the one the previous
/// 480 was counted against. Exact with one held peer; two held peers sent the same type in the
/// same instants can be mixed up (the error carries nothing to tell them apart). At most `limit`
/// frames per peer are logged or queued; one more is refused (`push` returns false).
struct RelayHold {
    /// The relayed types a peer in its grace refuses.
    static let types: Set<String> = ["offer", "answer", "candidate", "data"]

    private struct Sent {
        let seq: UInt64
        let frame: Frame
        var refused = false
    }

    private struct Entry {
        var log: [Sent] = []
        var held: [Frame]?
    }

    let limit: Int
    private var peers: [PeerID: Entry] = [:]
    private var seq: UInt64 = 0
    /// `seq` of the frame the latest 480 was counted against.
    private var cursor: UInt64 = 0

    init(limit: Int) { self.limit = max(1, limit) }

    func isHeld(_ peer: PeerID) -> Bool { peers[peer]?.held != nil }

    var heldPeers: [PeerID] { peers.filter { $0.value.held != nil }.map(\.key).sorted { $0.rawValue < $1.rawValue } }

    /// Frames waiting for `peer` (refused plus queued).
    func waiting(_ peer: PeerID) -> Int {
        guard let entry = peers[peer], let held = entry.held else { return 0 }
        return entry.log.filter(\.refused).count + held.count
    }

    /// A relay went out to `peer`: remembered in case the server refuses it.
    mutating func sent(_ peer: PeerID, _ frame: Frame) {
        seq += 1
        peers[peer, default: Entry()].log.append(Sent(seq: seq, frame: frame))
        if peers[peer]!.log.count > limit { peers[peer]!.log.removeFirst() }
    }

    /// Hold later frames to `peer`.
    mutating func hold(_ peer: PeerID) {
        if peers[peer]?.held == nil { peers[peer, default: Entry()].held = [] }
    }

    /// Queues a frame for a held peer; false when `limit` frames already wait (it is dropped).
    mutating func push(_ peer: PeerID, _ frame: Frame) -> Bool {
        hold(peer)
        guard waiting(peer) < limit else { return false }
        peers[peer]!.held!.append(frame)
        return true
    }

    /// An `error` 480 for a frame of `type`: the held peer it was counted against, or nil when no
    /// such frame is left to refuse (the error is then reported).
    mutating func refused(_ type: String) -> PeerID? {
        var best: (peer: PeerID, index: Int, seq: UInt64)?
        for (peer, entry) in peers where entry.held != nil {
            guard let index = entry.log.firstIndex(where: { $0.seq > cursor && !$0.refused && $0.frame.type == type }) else { continue }
            let seq = entry.log[index].seq
            if best == nil || seq < best!.seq { best = (peer, index, seq) }
        }
        guard let best else { return nil }
        peers[best.peer]!.log[best.index].refused = true
        cursor = best.seq
        return best.peer
    }

    /// The peer is back: the frames to send again, oldest first.
    mutating func release(_ peer: PeerID) -> [Frame] {
        guard let entry = peers[peer], let held = entry.held else { return [] }
        peers[peer] = nil
        return entry.log.filter(\.refused).map(\.frame) + held
    }

    /// `peer-left`: forgets everything for `peer`; returns how many frames were dropped.
    @discardableResult
    mutating func drop(_ peer: PeerID) -> Int {
        let count = waiting(peer)
        peers[peer] = nil
        return count
    }

    mutating func clear() { peers.removeAll() }
}
