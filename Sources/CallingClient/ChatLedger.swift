import CallingProtocol
import Foundation

/// `SignalingSession`'s chat bookkeeping, pure: sends waiting for their `chat-ack` (resent with
/// the same `client_id` on timeout and after a reconnect), the seqs already reported (so a replay
/// overlapping live frames reports each message once), where a reconnect resumes from, and the REST
/// gap fill after a capped replay. It speaks the session's actions; the session decides when the
/// connection allows sending (`connected`) and numbers the gap fill by its socket. docs/sdk.md
/// "Chat" describes the behaviour; the browser SDK's `_PendingChats` and `_ResumeState` are the
/// same split.
struct ChatLedger {
    let ackTimeout: TimeInterval
    let maxSends: Int

    /// The highest seq seen: the room's seq at the first `welcome`, live and replayed chat, our acks.
    private(set) var lastSeq: Int64 = 0
    /// True once any connection got `welcome`: later connections resume with `last_seq`.
    private var resumable = false
    private var seenSeqs = Set<Int64>()
    /// Seqs at or below this were pruned from `seenSeqs` and count as seen.
    private var seenFloor: Int64 = 0
    private var pendingChats: [String: PendingChat] = [:]
    private var pendingOrder: [String] = []
    /// The pending operation of each frame type sent most recently: an `error` frame about a
    /// `chat` (or `chat-edit` …) names no client_id, and our own checks leave only the latest send
    /// of that type to be the refused one.
    private var lastSent: [String: String] = [:]
    /// Replayed `chat` frames still expected after a resumed `welcome`.
    private var replayRemaining = 0
    /// The resumed `welcome` said `recovered: false`: page the rest over REST after the replay.
    private var gapFillPending = false
    /// Where the REST gap fill has got to (nil when no gap is open). Reconnects resume from here,
    /// not from `lastSeq`, which live chats and acks move past the gap.
    private var gapCursor: Int64?
    /// The socket whose gap fill is running; pages of another are stale.
    private var gapGeneration: UInt64?
    /// Highest seq delivered by the current socket's resume replay.
    private var replayHigh: Int64 = 0
    private var out: [SessionAction] = []

    private struct PendingChat {
        var operation: ChatOutbound
        var waiter: Waiter
        var sends = 0
    }

    init(ackTimeout: TimeInterval, maxSends: Int) {
        self.ackTimeout = ackTimeout
        self.maxSends = maxSends
    }

    // MARK: entry points (each returns the actions it produced)

    /// A socket is opening: the `last_seq` it resumes from, nil before the first `welcome`.
    mutating func socketOpening() -> Int64? {
        replayHigh = 0
        return resumable ? min(lastSeq, gapCursor ?? .max) : nil
    }

    /// A `welcome` arrived. A fresh one (not `resumed`) makes the room's history so far history
    /// (`fetchMessages`), not live events.
    mutating func welcomed(resumed: Bool, recovered: Bool, replayCount: Int, roomLastSeq: Int64) {
        replayRemaining = resumed ? replayCount : 0
        gapFillPending = resumed && !recovered
        if !resumed {
            if roomLastSeq > lastSeq { lastSeq = roomLastSeq }
            seenFloor = max(seenFloor, roomLastSeq)
        }
        resumable = true
    }

    /// After `welcome`: retry everything not acked yet, oldest first, with the same client_ids.
    /// Frames sent now reach the server after the join, so the replay (which may already contain
    /// some of them) is ahead of the answers. Then the gap fill, if the replay is capped and empty.
    mutating func resume(socket: UInt64) -> (resend: [SessionAction], gapFill: [SessionAction]) {
        let resend = collect { ledger in for id in ledger.pendingOrder { ledger.transmit(id, counts: false) } }
        let gapFill = collect { ledger in
            if ledger.gapFillPending, ledger.replayRemaining == 0 { ledger.startGapFill(socket: socket) }
        }
        return (resend, gapFill)
    }

    /// `sendChat` (or another acked chat operation); `connected` sends it now, otherwise the next
    /// `welcome` does.
    mutating func send(_ id: String, _ operation: ChatOutbound, waiter: Waiter, connected: Bool) -> [SessionAction] {
        collect { ledger in
            guard ledger.pendingChats[id] == nil else {
                return ledger.out.append(.resume(waiter, .failure(CallingError(.invalidState("client_id \(id) is already pending")))))
            }
            ledger.pendingChats[id] = PendingChat(operation: operation, waiter: waiter)
            ledger.pendingOrder.append(id)
            if connected { ledger.transmit(id) }
        }
    }

    /// The ack timer of `id` fired (no ack, or a 503 ack's retry delay passed).
    mutating func ackTimedOut(_ id: String, connected: Bool) -> [SessionAction] {
        collect { ledger in
            guard let pending = ledger.pendingChats[id] else { return }
            if pending.sends >= ledger.maxSends {
                ledger.resolve(id, .failure(CallingError(.timedOut("chat-ack"))))
            } else if connected {
                ledger.transmit(id)
            }
            // Not connected: the next `welcome` resends it.
        }
    }

    /// A `chat-ack` frame.
    mutating func ack(_ json: JSONValue, payload: JSONValue?) -> [SessionAction] {
        collect { ledger in
            guard let id = payload?["client_id"]?.stringValue else { return }
            if let wire = json["error"].flatMap(JSONValue.nonNull) {
                let code = Int(wire["code"]?.int64Value ?? 0)
                let error = CallingError(.server(code: code, message: wire["message"]?.stringValue ?? ""))
                ledger.out.append(.emit(.error(error)))
                guard ledger.pendingChats[id] != nil else { return }
                if error.isRetryable {
                    // 503: not stored; the timer resends the same client_id a little later.
                    ledger.out.append(.arm(.chatAck(id), after: min(1, ledger.ackTimeout)))
                } else {
                    ledger.resolve(id, .failure(error))
                }
                return
            }
            guard let seq = payload?["seq"]?.int64Value else { return }
            ledger.markSeen(seq)
            ledger.resolve(id, .success(ChatAck(clientID: id, seq: seq, ts: payload?["ts"]?.int64Value ?? 0)))
        }
    }

    /// An `error` frame refused a frame of type `frameType` (`chat`, `chat-edit` …) for good (not
    /// a refused operation, which comes as a `chat-ack` with an error): the latest send of that type
    /// throws it instead of waiting out every ack timeout.
    mutating func chatFrameRefused(_ frameType: String, _ error: CallingError) -> [SessionAction] {
        collect { ledger in
            if let id = ledger.lastSent[frameType], ledger.pendingChats[id] != nil { ledger.resolve(id, .failure(error)) }
        }
    }

    /// A live or replayed `chat`, `chat-edit`, `chat-delete` or `chat-react` frame; `own` is our
    /// peer id. Operations have seqs of their own: the same dedupe, and the replay counts them.
    mutating func received(_ item: ChatInbound, own: PeerID?, socket: UInt64) -> [SessionAction] {
        collect { ledger in ledger.handle(item, replayed: ledger.replayRemaining > 0, own: own, socket: socket) }
    }

    /// A page of the gap fill numbered `generation`.
    mutating func gapPage(_ generation: UInt64, _ page: MessagesPage, own: PeerID?, socket: UInt64) -> [SessionAction] {
        collect { ledger in
            guard generation == ledger.gapGeneration, generation == socket, let cursor = ledger.gapCursor else { return }
            // Messages as they are now: operations in the gap are folded into them (edited text,
            // tombstone, reactions), not reported one by one.
            for message in page.messages { ledger.handle(.message(message), replayed: false, own: own, socket: socket) }
            if page.hasMore, page.nextSinceSeq > cursor {
                ledger.gapCursor = page.nextSinceSeq
                ledger.out.append(.fetchGap(since: page.nextSinceSeq, generation: generation))
            } else {
                ledger.gapCursor = nil
                ledger.gapGeneration = nil
            }
        }
    }

    /// The gap fill numbered `generation` failed: reported once; a reconnect resumes the gap.
    mutating func gapFailed(_ generation: UInt64, _ error: CallingError) -> [SessionAction] {
        guard generation == gapGeneration else { return [] }
        gapGeneration = nil
        return [.emit(.error(error))]
    }

    /// Every pending send throws `error`, oldest first.
    mutating func rejectAll(_ error: CallingError) -> [SessionAction] {
        collect { ledger in for id in ledger.pendingOrder { ledger.resolve(id, .failure(error)) } }
    }

    // MARK: inside

    private mutating func collect(_ body: (inout ChatLedger) -> Void) -> [SessionAction] {
        out = []
        body(&self)
        defer { out = [] }
        return out
    }

    private mutating func handle(_ item: ChatInbound, replayed: Bool, own: PeerID?, socket: UInt64) {
        defer {
            if replayed, replayRemaining > 0 {
                replayRemaining -= 1
                if replayRemaining == 0, gapFillPending { startGapFill(socket: socket) }
            }
        }
        let (seq, from, clientID, ts) = item.identity
        if replayed { replayHigh = max(replayHigh, seq) }
        guard seq > seenFloor, !seenSeqs.contains(seq) else { return }  // replay overlap
        markSeen(seq)
        if from == own, pendingChats[clientID] != nil {
            // Our own message or operation in a resume replay: committed, its ack was lost with the socket.
            resolve(clientID, .success(ChatAck(clientID: clientID, seq: seq, ts: ts)))
            return
        }
        out.append(.emit(item.event))
    }

    private mutating func markSeen(_ seq: Int64) {
        seenSeqs.insert(seq)
        if seq > lastSeq { lastSeq = seq }
        if seenSeqs.count > 4096 {
            // Never above an open gap: its messages are still to come.
            let floor = min(lastSeq - 1024, gapCursor ?? .max)
            seenSeqs = seenSeqs.filter { $0 > floor }
            seenFloor = max(seenFloor, floor)
        }
    }

    /// The replay was capped (`recovered: false`): fetch everything after it over REST and feed it
    /// through the same seq dedupe as live frames. Live messages may arrive before older gap
    /// messages meanwhile; each seq is still reported exactly once.
    private mutating func startGapFill(socket: UInt64) {
        gapFillPending = false
        // After a reconnect in the middle of a gap, the replay covered gapCursor…replayHigh.
        let since = gapCursor.map { max($0, replayHigh) } ?? lastSeq
        gapCursor = since
        gapGeneration = socket
        out.append(.fetchGap(since: since, generation: socket))
    }

    /// `counts`: false for the resend after a reconnect, which is free (SignalingOptions, sdk.md).
    private mutating func transmit(_ id: String, counts: Bool = true) {
        guard var pending = pendingChats[id] else { return }
        if counts { pending.sends += 1 }
        pendingChats[id] = pending
        var body = pending.operation.body
        body["client_id"] = .string(id)
        out.append(.send(Frame(type: pending.operation.frameType, payload: .object(body))))
        lastSent[pending.operation.frameType] = id
        out.append(.arm(.chatAck(id), after: ackTimeout))
    }

    private mutating func resolve(_ id: String, _ result: Result<ChatAck, CallingError>) {
        guard let pending = pendingChats.removeValue(forKey: id) else { return }
        pendingOrder.removeAll { $0 == id }
        if lastSent[pending.operation.frameType] == id { lastSent[pending.operation.frameType] = nil }
        out.append(.cancel(.chatAck(id)))
        out.append(.resume(pending.waiter, result.map { .chatAck($0) }))
    }
}

/// An acked chat operation as the ledger holds it until its `chat-ack`: they all share the room's
/// `client_id` namespace, the ack and the resend rules (docs/protocol.md).
enum ChatOutbound: Sendable, Equatable {
    /// `chat {text, meta?, reply_to?}`.
    case message(text: String, meta: JSONValue?, replyTo: Int64? = nil)
    /// `chat-edit {target, text, meta?}`.
    case edit(target: Int64, text: String, meta: JSONValue?)
    /// `chat-delete {target}`.
    case delete(target: Int64)
    /// `chat-react {target, key, remove?}`.
    case react(target: Int64, key: String, remove: Bool)

    /// The frame types of the operations: an `error` frame refusing one of them fails its send.
    static let frameTypes: Set<String> = ["chat", "chat-edit", "chat-delete", "chat-react"]

    /// The frame's type.
    var frameType: String {
        switch self {
        case .message: return FrameType.chat.rawValue
        case .edit: return "chat-edit"
        case .delete: return "chat-delete"
        case .react: return "chat-react"
        }
    }

    /// The frame's payload, without `client_id`.
    var body: [String: JSONValue] {
        switch self {
        case .message(let text, let meta, let replyTo):
            var body: [String: JSONValue] = ["text": .string(text)]
            if let meta { body["meta"] = meta }
            if let replyTo { body["reply_to"] = .int(replyTo) }
            return body
        case .edit(let target, let text, let meta):
            var body: [String: JSONValue] = ["target": .int(target), "text": .string(text)]
            if let meta { body["meta"] = meta }
            return body
        case .delete(let target):
            return ["target": .int(target)]
        case .react(let target, let key, let remove):
            var body: [String: JSONValue] = ["target": .int(target), "key": .string(key)]
            if remove { body["remove"] = true }
            return body
        }
    }
}

/// What arrives with a seq of its own: a message or an operation on one, live or replayed.
enum ChatInbound: Sendable, Equatable {
    case message(ChatMessage)
    case edit(ChatEdit)
    case deletion(ChatDeletion)
    case reaction(ChatReaction)

    /// A `chat`, `chat-edit`, `chat-delete` or `chat-react` frame; nil for another type or a
    /// malformed payload.
    init?(type: String, payload: JSONValue?, from: String?) {
        switch type {
        case "chat": guard let message = ChatMessage(payload, from: from) else { return nil }; self = .message(message)
        case "chat-edit": guard let edit = ChatEdit(payload, from: from) else { return nil }; self = .edit(edit)
        case "chat-delete": guard let deletion = ChatDeletion(payload, from: from) else { return nil }; self = .deletion(deletion)
        case "chat-react": guard let reaction = ChatReaction(payload, from: from) else { return nil }; self = .reaction(reaction)
        default: return nil
        }
    }

    /// seq, sender, client_id, ts: what the dedupe and the ledger read.
    var identity: (seq: Int64, from: PeerID, clientID: String, ts: Int64) {
        switch self {
        case .message(let m): return (m.seq, m.from, m.clientID, m.ts)
        case .edit(let e): return (e.seq, e.from, e.clientID, e.ts)
        case .deletion(let d): return (d.seq, d.from, d.clientID, d.ts)
        case .reaction(let r): return (r.seq, r.from, r.clientID, r.ts)
        }
    }

    /// The event it raises.
    var event: CallingEvent {
        switch self {
        case .message(let m): return .chat(m)
        case .edit(let e): return .chatEdited(e)
        case .deletion(let d): return .chatDeleted(d)
        case .reaction(let r): return .chatReaction(r)
        }
    }
}
