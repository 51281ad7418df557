import CallingCore
import CallingPostgres
import CallingStore
import Foundation
import Synchronization

/// `calling-bench chat-ops`: the chat store with operations (docs/protocol.md, "Chat operations"),
/// measured at the `ChatPersistence` boundary (no sockets: what the store costs, the part that
/// changed), on a fresh SQLite file or an empty PostgreSQL database:
/// - acked appends per second with a window of appends in flight, plain sends against a mix of
///   sends, edits and reactions (half, a quarter, a quarter);
/// - the p50/p99 of a `before_seq` page (50 messages, folded) at random points of one room of
///   `historyRows` rows (a tenth of them edits, a tenth reactions);
/// - the p50/p99 of an inbox page (50 rooms) for a peer in `inboxRooms` rooms.
public enum ChatOperationsBenchmark {
    public struct Options: Sendable {
        public var seconds = 5.0
        /// Appends in flight in the throughput phases.
        public var window = 1_024
        public var historyRows = 1_000_000
        public var inboxRooms = 1_000
        /// Reads per latency phase.
        public var reads = 1_000
        /// `postgres://…`: an empty PostgreSQL database instead of a fresh SQLite file.
        public var databaseURL = ""

        public init() {}
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var store: String
        public var plainPerSecond: Double
        public var mixedPerSecond: Double
        public var historyRows: Int
        public var historyP50Ms: Double
        public var historyP99Ms: Double
        public var inboxRooms: Int
        public var inboxP50Ms: Double
        public var inboxP99Ms: Double

        public var description: String {
            String(format: """
                chat-ops bench (%@, at the store):
                  acked appends: plain sends %.0f/s; mix of sends, edits, reactions (2:1:1) %.0f/s
                  before_seq page of 50 in a room of %d rows: p50 %.2f ms, p99 %.2f ms
                  inbox page of 50 for a peer in %d rooms: p50 %.2f ms, p99 %.2f ms
                """, store, plainPerSecond, mixedPerSecond, historyRows, historyP50Ms, historyP99Ms, inboxRooms,
                inboxP50Ms, inboxP99Ms)
        }
    }

    public static func run(_ options: Options) throws -> Report {
        let folder = NSTemporaryDirectory() + "calling-bench-ops-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let store: any ChatPersistence
        let name: String
        if options.databaseURL.isEmpty {
            store = try ChatStore.open(path: folder + "/chat.sqlite")
            name = "SQLite"
        } else {
            store = try PostgresChatStore.open(url: options.databaseURL)
            name = "PostgreSQL"
        }
        defer { store.close() }
        let plain = try throughput(store, seconds: options.seconds, window: options.window, room: "plain", mixed: false)
        let mixed = try throughput(store, seconds: options.seconds, window: options.window, room: "mixed", mixed: true)
        try fill(store, room: "history", rows: options.historyRows, window: options.window)
        let history = try latencies(reads: options.reads) { index in
            let before = Int64.random(in: 2...Int64(options.historyRows))
            _ = try awaitPage { store.messages(room: "history", query: MessageQuery(.before(before), limit: 50), completion: $0) }
            _ = index
        }
        try fillInbox(store, peer: "owner", rooms: options.inboxRooms, window: options.window)
        let inbox = try latencies(reads: options.reads) { _ in
            _ = try awaitPage { store.inbox(peer: "owner", query: InboxQuery(limit: 50), completion: $0) }
        }
        return Report(store: name, plainPerSecond: plain, mixedPerSecond: mixed, historyRows: options.historyRows,
                      historyP50Ms: history.p50, historyP99Ms: history.p99, inboxRooms: options.inboxRooms,
                      inboxP50Ms: inbox.p50, inboxP99Ms: inbox.p99)
    }

    /// Acked appends per second for `seconds`, `window` in flight, into 10 rooms of two senders.
    private static func throughput(_ store: any ChatPersistence, seconds: Double, window: Int, room: String,
                                   mixed: Bool) throws -> Double {
        let slots = DispatchSemaphore(value: window)
        let acked = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
        // Each sender's operations name its own message of a few appends ago, so edits pass the
        // author rule and reactions land on messages that exist.
        let start = DispatchTime.now().uptimeNanoseconds
        let end = start + UInt64(seconds * 1e9)
        var sent = 0
        var lastOwn: [Int: Int64] = [:]
        let seqs = Mutex<[Int: Int64]>([:])
        while DispatchTime.now().uptimeNanoseconds < end {
            slots.wait()
            let sender = sent % 20
            let roomID = RoomID("\(room)-\(sender / 2)")
            let peer = PeerID("p\(sender)")
            let kind = mixed ? [ChatRowKind.message, .message, .edit, .react][sent % 4] : .message
            if let known = seqs.withLock({ $0[sender] }) { lastOwn[sender] = known }
            var draft = ChatDraft(room: roomID, sender: peer, clientID: "c\(sent)", text: "message \(sent)", timestampMs: 1_000 + Int64(sent))
            if kind != .message, let target = lastOwn[sender] {
                draft.kind = kind
                draft.target = target
                if kind == .react { draft.key = ["👍", "🎉", "ok"][sent % 3]; draft.text = "" }
            }
            let isMessage = draft.kind == .message
            sent += 1
            store.appendChat(draft) { result in
                switch result {
                case .success(let stored) where stored.refusal == nil:
                    acked.add(1, ordering: .relaxed)
                    if isMessage { seqs.withLock { $0[sender] = stored.message.seq } }
                default:
                    failed.add(1, ordering: .relaxed)
                }
                slots.signal()
            }
        }
        for _ in 0..<window { slots.wait() }
        // Back to its initial value: libdispatch traps on a semaphore disposed below it.
        for _ in 0..<window { slots.signal() }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        guard failed.load(ordering: .relaxed) == 0 else {
            throw BenchFailure("\(failed.load(ordering: .relaxed)) appends failed or were refused")
        }
        return Double(acked.load(ordering: .relaxed)) / elapsed
    }

    /// `rows` rows in `room`: messages, with an edit after every tenth and a reaction after the next.
    private static func fill(_ store: any ChatPersistence, room: RoomID, rows: Int, window: Int) throws {
        let slots = DispatchSemaphore(value: window)
        let failed = Atomic<Int>(0)
        for index in 0..<rows {
            slots.wait()
            var draft = ChatDraft(room: room, sender: PeerID("p\(index % 4)"), clientID: "h\(index)", text: "history \(index)",
                                  timestampMs: 1_000 + Int64(index))
            // Rows are numbered in order (one room, one writer), so the target of row i is known.
            if index % 10 == 1 {
                draft.kind = .edit
                draft.target = Int64(index)  // the row before: seq index
                draft.sender = PeerID("p\((index - 1) % 4)")
            } else if index % 10 == 2 {
                draft.kind = .react
                draft.target = Int64(index - 1)
                draft.key = "👍"
                draft.text = ""
            }
            store.appendChat(draft) { result in
                if case .success(let stored) = result, stored.refusal == nil {} else { failed.add(1, ordering: .relaxed) }
                slots.signal()
            }
        }
        for _ in 0..<window { slots.wait() }
        // Back to its initial value: libdispatch traps on a semaphore disposed below it.
        for _ in 0..<window { slots.signal() }
        guard failed.load(ordering: .relaxed) == 0 else { throw BenchFailure("\(failed.load(ordering: .relaxed)) history rows failed") }
    }

    /// `peer` sends one message in each of `rooms` rooms, and someone else one after it.
    private static func fillInbox(_ store: any ChatPersistence, peer: PeerID, rooms: Int, window: Int) throws {
        let slots = DispatchSemaphore(value: window)
        let failed = Atomic<Int>(0)
        for index in 0..<(rooms * 2) {
            slots.wait()
            let draft = ChatDraft(room: RoomID("inbox-\(index / 2)"), sender: index % 2 == 0 ? peer : "other", clientID: "i\(index)",
                                  text: "inbox \(index)", timestampMs: 1_000 + Int64(index))
            store.appendChat(draft) { result in
                if case .success = result {} else { failed.add(1, ordering: .relaxed) }
                slots.signal()
            }
        }
        for _ in 0..<window { slots.wait() }
        // Back to its initial value: libdispatch traps on a semaphore disposed below it.
        for _ in 0..<window { slots.signal() }
        guard failed.load(ordering: .relaxed) == 0 else { throw BenchFailure("inbox rows failed") }
    }

    /// p50 and p99 in milliseconds of `reads` calls of `read`, one after the other.
    private static func latencies(reads: Int, _ read: (Int) throws -> Void) throws -> (p50: Double, p99: Double) {
        var samples: [Double] = []
        samples.reserveCapacity(reads)
        for index in 0..<reads {
            let start = DispatchTime.now().uptimeNanoseconds
            try read(index)
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        samples.sort()
        func quantile(_ q: Double) -> Double { samples[min(samples.count - 1, Int(Double(samples.count) * q))] }
        return (quantile(0.5), quantile(0.99))
    }

    private static func awaitPage<Value: Sendable>(
        _ start: (@escaping @Sendable (Result<Value, StoreError>) -> Void) -> Void
    ) throws -> Value {
        let result = Mutex<Result<Value, StoreError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        start { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0 }!.get()
    }

    struct BenchFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
