import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import Foundation
import Testing

/// Frames on the calling thread's stack (Foundation stops counting at 128: a stack that grows past
/// it still reads as deeper than one that does not).
private func stackDepth() -> Int { Thread.callStackReturnAddresses.count }

private func draft(_ room: RoomID, _ sender: PeerID, _ clientID: String, text: String = "hi", ts: Int64 = 1_000) -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, meta: nil, timestampMs: ts)
}

/// The `ChatPersistence` contract, ONE suite run against both stores: the embedded SQLite `ChatStore`
/// and `PostgresChatStore` on a real PostgreSQL server that the suite starts itself (`TestPostgres`,
/// one server for the run, a fresh database per test). Group commit, concurrency, dedup, ordering,
/// close, history paging, read markers and unread counts. What only one store has (SQLite's WAL and
/// file, PostgreSQL's reconnects and several writers) is in ChatStoreTests and CallingPostgresTests.
@Suite(.serialized)
struct ChatPersistenceTests {
    @Test(arguments: ChatBackend.allCases)
    func testAppendAssignsSeq123PerRoomIndependently(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let a1 = try store.appendAndWait(draft("a", "p", "1"))
        let b1 = try store.appendAndWait(draft("b", "p", "1"))
        let a2 = try store.appendAndWait(draft("a", "p", "2"))
        let a3 = try store.appendAndWait(draft("a", "q", "1"))
        let b2 = try store.appendAndWait(draft("b", "q", "1"))
        #expect([a1, a2, a3].map(\.message.seq) == [1, 2, 3])
        #expect([b1, b2].map(\.message.seq) == [1, 2])
        #expect(!([a1, a2, a3, b1, b2].contains { $0.duplicate }))
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheAckCarriesTheStoredMessage(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let sent = ChatDraft(room: "r", sender: "alice", clientID: "c1", text: "hello 👋", meta: #"{"reply_to":3}"#, timestampMs: 42)
        let ack = try store.appendAndWait(sent)
        #expect(ack.message == ChatRecord(
            room: "r", seq: 1, sender: "alice", clientID: "c1", text: "hello 👋", meta: #"{"reply_to":3}"#, timestampMs: 42
        ))
        #expect(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10).messages == [ack.message])
    }

    @Test(arguments: ChatBackend.allCases)
    func testRetriesOfOneClientIDFromManyThreadsAtOnceStoreOneRow(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 50) { attempt in
            group.enter()
            store.appendChat(draft("r", "alice", "same", text: "attempt \(attempt)", ts: Int64(attempt))) {
                results.append($0)
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 10) == .success)
        let acks = try results.all.map { try $0.get() }
        #expect(acks.count == 50)
        #expect(Set(acks.map(\.message)).count == 1, "every retry got the same original record")
        #expect(acks.first?.message.seq == 1)
        #expect(acks.filter { !$0.duplicate }.count == 1, "exactly one of them wrote the row")
        #expect(try sut.count("chat_messages") == 1)
    }

    @Test(arguments: ChatBackend.allCases)
    func testSeqIsGapFreePerRoomUnderConcurrentProducers(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let rooms: [RoomID] = ["r0", "r1", "r2"]
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 8) { producer in
            for index in 0..<200 {
                group.enter()
                let room = rooms[(producer + index) % rooms.count]
                store.appendChat(draft(room, PeerID("p\(producer)"), "\(index)")) {
                    results.append($0)
                    group.leave()
                }
            }
        }
        #expect(group.wait(timeout: .now() + 30) == .success)
        let acks = try results.all.map { try $0.get() }
        #expect(acks.count == 1_600)
        #expect(!(acks.contains { $0.duplicate }))

        for room in rooms {
            let acked = acks.filter { $0.message.room == room }.map(\.message.seq).sorted()
            #expect(acked == Array(1...Int64(acked.count)), "acks for \(room) are 1...N without gaps or repeats")
            #expect(try sut.storedSeqs(room) == acked, "the table holds exactly the acked seqs for \(room)")
            #expect(try sut.lastSeq(room) == Int64(acked.count))
        }
        #expect(acks.count == rooms.reduce(0) { total, room in total + acks.filter { $0.message.room == room }.count })

        let metrics = store.metrics
        #expect(metrics.rowsInserted == 1_600)
        #expect(metrics.batchesCommitted < metrics.rowsInserted, "concurrent appends shared transactions")
        #expect(metrics.largestBatch > 1)
    }

    @Test(arguments: ChatBackend.allCases)
    func testDraftsArrivingWhileTheWriterIsBusyAreCommittedInOneTransaction(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)

        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 4) { producer in
            for index in 0..<25 {
                group.enter()
                store.appendChat(draft("r", PeerID("p\(producer)"), "\(index)")) {
                    results.append($0)
                    group.leave()
                }
            }
        }
        // appendChat returned 100 times while the store was busy: it never waits for the disk.
        #expect(results.all.count == 0)
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)

        #expect(try results.all.map { try $0.get().message.seq }.sorted() == Array(1...100))
        #expect(store.metrics.batchesCommitted == 1)
        #expect(store.metrics.largestBatch == 100)
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheQueueWaitOfADrainIsHowLongItsOldestChatWaitedForTheQueue(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)
        let group = DispatchGroup()
        for index in 0..<3 {
            group.enter()
            store.appendChat(draft("r", "alice", "\(index)")) { _ in group.leave() }
        }
        Thread.sleep(forTimeInterval: 0.06)
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)
        let metrics = store.metrics
        #expect(metrics.queueWait.count == 1, "one drain took all three")
        #expect(metrics.queueWait.sumMicros >= 60_000, "the first chat waited at least as long as the queue was held")
        #expect(metrics.batchesCommitted == 1)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMaxBatchSizeSplitsABacklogIntoTransactionsInOrder(_ backend: ChatBackend) throws {
        let sut = try backend.open(maxBatchSize: 10)
        defer { sut.close() }
        let store = sut.store
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)
        let results = Collector<ChatAppendResult>()
        let group = DispatchGroup()
        for index in 0..<95 {
            group.enter()
            store.appendChat(draft("r", "alice", "\(index)")) { result in
                if case .success(let ack) = result { results.append(ack) }
                group.leave()
            }
        }
        // Submitted after the appends, so it must see all of them although they span 10 transactions.
        let page = Collector<HistoryPage>()
        group.enter()
        store.history(room: "r", sinceSeq: 0, limit: 1_000) { result in
            if case .success(let history) = result { page.append(history) }
            group.leave()
        }
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)

        #expect(results.all.map(\.message.clientID) == (0..<95).map { "\($0)" }, "acked in submission order")
        #expect(results.all.map(\.message.seq) == Array(1...95), "one sender's messages keep their order")
        #expect(page.all.first?.messages.count == 95)
        #expect(store.metrics.batchesCommitted == 10)
        #expect(store.metrics.largestBatch == 10)
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheAfterAppendCompletionsBodyRunsOncePerBatchAfterItsAcksAndBeforeLaterCompletions(_ backend: ChatBackend) throws {
        let sut = try backend.open(maxBatchSize: 10)
        defer { sut.close() }
        let store = sut.store
        // One log, written only on the store's queue (completions and the body both run there).
        let log = Collector<String>()
        store.afterAppendCompletions { log.append("batch") }
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)
        let group = DispatchGroup()
        for index in 0..<25 {
            group.enter()
            store.appendChat(draft("r", "alice", "\(index)")) { result in
                if case .success(let ack) = result { log.append("ack \(ack.message.seq)") }
                group.leave()
            }
        }
        group.enter()
        store.markRead(room: "r", peer: "bob", seq: 25, nowMs: 1) { result in
            if case .success(let marker) = result { log.append("read \(marker.marker.seq)") }
            group.leave()
        }
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)

        let acks = { (seqs: ClosedRange<Int>) in seqs.map { "ack \($0)" } }
        #expect(log.all == acks(1...10) + ["batch"] + acks(11...20) + ["batch"] + acks(21...25) + ["batch", "read 25"])

        // A refused append (after close) runs it too, after its failure.
        store.close()
        let refused = DispatchSemaphore(value: 0)
        store.afterAppendCompletions {
            log.append("batch")
            refused.signal()
        }
        store.appendChat(draft("r", "alice", "late")) { result in
            if case .failure(.closed) = result { log.append("closed") }
        }
        #expect(refused.wait(timeout: .now() + 10) == .success)
        #expect(log.all.suffix(2) == ["closed", "batch"])
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheAfterAppendCompletionsBodyIsCalledAtTheSameStackDepthEveryBatch(_ backend: ChatBackend) throws {
        // The stores once kept the body in a `Locked` and read it with `withLock { $0 }`, which wrote
        // it back wrapped in two more reabstraction thunks on every read: each batch called it through
        // a longer chain (one more pair of frames per batch so far), and at a paced 5k chats/s the ack
        // median tripled. A body reached directly is called from the same depth every batch.
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let depths = Collector<Int>()
        store.afterAppendCompletions { depths.append(stackDepth()) }
        for index in 0..<20 { _ = try store.appendAndWait(draft("r", "alice", "\(index)")) }
        // After the last batch's body: it runs before anything later on the queue.
        _ = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 1)
        #expect(depths.all.count == 20, "one body per batch of one")
        #expect(Set(depths.all).count == 1, "depths \(depths.all)")
    }

    @Test(arguments: ChatBackend.allCases)
    func testAnOperationSubmittedAfterAnAppendSeesIt(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        for index in 0..<20 {
            store.appendChat(draft("r", "alice", "\(index)")) { _ in }
        }
        // No waiting for the acks: the read still comes after the writes.
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 100)
        #expect(page.messages.count == 20)
        let marker = try store.markReadAndWait(room: "r", peer: "bob", seq: 20, nowMs: 1)
        #expect(marker.marker.seq == 20)
    }

    @Test(arguments: ChatBackend.allCases)
    func testCloseWritesAcceptedAppendsThenRefusesNewWork(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        let store = sut.store
        let acks = Collector<Result<ChatAppendResult, StoreError>>()
        for index in 0..<30 {
            store.appendChat(draft("r", "alice", "\(index)")) { acks.append($0) }
        }
        store.close()
        #expect(try acks.all.map { try $0.get().message.seq }.sorted() == Array(1...30), "accepted before close, so written")

        let late = #expect(throws: StoreError.self) { try store.appendAndWait(draft("r", "alice", "late")) }
        #expect(late == .closed)
        #expect(!(late?.isRetryable ?? true))
        #expect(throws: StoreError.closed) { try store.historyAndWait(room: "r", sinceSeq: 0, limit: 1) }
        store.close()

        let reopened = try sut.reopen()
        defer { reopened.close() }
        #expect(try reopened.store.historyAndWait(room: "r", sinceSeq: 0, limit: 100).messages.count == 30)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMessagesSurviveCloseAndReopen(_ backend: ChatBackend) throws {
        let first = try backend.open()
        let sent = try first.store.appendMany(3, room: "r", sender: "alice")
        _ = try first.store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 5)
        first.close()

        let sut = try first.reopen()
        defer { sut.close() }
        let store = sut.store
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)
        #expect(page.messages == sent.map(\.message))
        #expect(page.lastSeq == 3)
        #expect(try store.summaryAndWait(room: "r", peer: "bob").readSeq == 2)
        // And the next message continues the sequence rather than restarting it.
        #expect(try store.appendAndWait(draft("r", "alice", "next")).message.seq == 4)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMetricsCountDuplicatesSeparately(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        _ = try store.appendAndWait(draft("r", "alice", "c1"))
        _ = try store.appendAndWait(draft("r", "alice", "c1"))
        let metrics = store.metrics
        #expect(metrics.rowsInserted == 1)
        #expect(metrics.duplicates == 1)
        #expect(metrics.batchesCommitted == 2)
        #expect(metrics.batchesFailed == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testARetriedClientIDGetsTheOriginalSeqAndTimestampAndNoSecondRow(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let original = try store.appendAndWait(ChatDraft(
            room: "r", sender: "alice", clientID: "c1", text: "first", meta: #"{"a":1}"#, timestampMs: 100
        ))
        let retry = try store.appendAndWait(ChatDraft(
            room: "r", sender: "alice", clientID: "c1", text: "edited on retry", meta: nil, timestampMs: 999
        ))
        #expect(!original.duplicate)
        #expect(retry.duplicate)
        #expect(retry.message == original.message, "same seq, same ts, same text and meta as the original")
        #expect(try sut.count("chat_messages") == 1)
        // The retry did not consume a seq.
        let next = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c2", text: "second", timestampMs: 101))
        #expect(next.message.seq == 2)
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheSameClientIDFromAnotherSenderOrRoomIsADifferentMessage(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let a = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c1", text: "x", timestampMs: 1))
        let b = try store.appendAndWait(ChatDraft(room: "r", sender: "bob", clientID: "c1", text: "x", timestampMs: 1))
        let c = try store.appendAndWait(ChatDraft(room: "s", sender: "alice", clientID: "c1", text: "x", timestampMs: 1))
        #expect([a, b, c].map(\.duplicate) == [false, false, false])
        #expect([a, b, c].map(\.message.seq) == [1, 2, 1])
    }

    @Test(arguments: ChatBackend.allCases)
    func testTwoCopiesInTheSameBatchStoreOneRow(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)
        let results = Collector<ChatAppendResult>()
        let group = DispatchGroup()
        for text in ["one", "two", "three"] {
            group.enter()
            store.appendChat(ChatDraft(room: "r", sender: "alice", clientID: "same", text: text, timestampMs: 7)) {
                if case .success(let ack) = $0 { results.append(ack) }
                group.leave()
            }
        }
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)
        #expect(store.metrics.batchesCommitted == 1, "all three were in one batch")
        #expect(results.all.map(\.duplicate) == [false, true, true])
        #expect(Set(results.all.map(\.message)).count == 1)
        #expect(results.all.first?.message.text == "one")
        #expect(try sut.count("chat_messages") == 1)
    }

    @Test(arguments: ChatBackend.allCases)
    func testARetryInABatchTakesNoSeqAndGetsTheOriginalAck(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let earlier = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "old", text: "a", timestampMs: 1))
        let release = DispatchSemaphore(value: 0)
        try sut.holdQueue(until: release)
        let results = Collector<ChatAppendResult>()
        let group = DispatchGroup()
        // A retry of a committed message, a new one, its retry in the same batch, another new one.
        for (clientID, ts) in [("old", 50), ("c1", 51), ("c1", 52), ("c2", 53)] as [(String, Int64)] {
            group.enter()
            store.appendChat(ChatDraft(room: "r", sender: "alice", clientID: clientID, text: "t", timestampMs: ts)) {
                if case .success(let ack) = $0 { results.append(ack) }
                group.leave()
            }
        }
        release.signal()
        #expect(group.wait(timeout: .now() + 10) == .success)
        #expect(store.metrics.batchesCommitted == 2, "the four were in one batch")
        #expect(results.all.map(\.duplicate) == [true, false, true, false])
        #expect(results.all.map(\.message.seq) == [1, 2, 2, 3], "retries take no seq: seqs stay gap-free")
        #expect(results.all.map(\.message.timestampMs) == [1, 51, 51, 53], "a retry carries the original ts")
        #expect(results.all[0].message == earlier.message)
        #expect(try sut.count("chat_messages") == 3)
        #expect(try store.summaryAndWait(room: "r", peer: "bob").lastSeq == 3)
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheReadMarkerOnlyMovesForward(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(5, room: "r", sender: "alice")

        let first = try store.markReadAndWait(room: "r", peer: "bob", seq: 3, nowMs: 10)
        #expect(first.moved)
        #expect(first.marker == ReadMarker(room: "r", peer: "bob", seq: 3, updatedMs: 10))

        let older = try store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 20)
        #expect(!older.moved)
        #expect(older.marker == first.marker, "an older receipt returns the current marker untouched")

        let same = try store.markReadAndWait(room: "r", peer: "bob", seq: 3, nowMs: 30)
        #expect(!same.moved)
        #expect(same.marker.updatedMs == 10)

        let newer = try store.markReadAndWait(room: "r", peer: "bob", seq: 4, nowMs: 40)
        #expect(newer.moved)
        #expect(newer.marker == ReadMarker(room: "r", peer: "bob", seq: 4, updatedMs: 40))
        #expect(try store.summaryAndWait(room: "r", peer: "bob").readSeq == 4)
    }

    @Test(arguments: ChatBackend.allCases)
    func testAReadMarkerPastTheLastMessageIsClampedToIt(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(5, room: "r", sender: "alice")
        let clamped = try store.markReadAndWait(room: "r", peer: "bob", seq: 1_000, nowMs: 1)
        #expect(clamped.moved)
        #expect(clamped.marker.seq == 5)
        // So a new message is still unread.
        try store.appendMany(1, room: "r", sender: "alice", prefix: "later")
        #expect(try store.summaryAndWait(room: "r", peer: "bob").unreadCount == 1)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMarkingAnEmptyOrUnknownRoomStoresNothing(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let result = try store.markReadAndWait(room: "nowhere", peer: "bob", seq: 3, nowMs: 1)
        #expect(!result.moved)
        #expect(result.marker == ReadMarker(room: "nowhere", peer: "bob", seq: 0, updatedMs: nil))
        #expect(try !(store.markReadAndWait(room: "nowhere", peer: "bob", seq: -5, nowMs: 1).moved))
        #expect(try sut.count("read_markers") == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMarkersArePerPeerAndPerRoom(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(3, room: "r", sender: "alice")
        try store.appendMany(3, room: "s", sender: "alice")
        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 1)
        #expect(try store.summaryAndWait(room: "r", peer: "bob").readSeq == 2)
        #expect(try store.summaryAndWait(room: "r", peer: "carol").readSeq == 0)
        #expect(try store.summaryAndWait(room: "s", peer: "bob").readSeq == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testHistoryPagesThroughARoom(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(5, room: "r", sender: "alice")

        let all = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 100)
        #expect(all.messages.map(\.seq) == [1, 2, 3, 4, 5])
        #expect(!all.hasMore, "a limit larger than the rest returns the rest and says so")
        #expect(all.nextSinceSeq == 5)
        #expect(all.lastSeq == 5)

        var seen: [Int64] = []
        var since: Int64 = 0
        var pages = 0
        while true {
            let page = try store.historyAndWait(room: "r", sinceSeq: since, limit: 2)
            seen += page.messages.map(\.seq)
            since = page.nextSinceSeq
            pages += 1
            if !page.hasMore { break }
        }
        #expect(seen == [1, 2, 3, 4, 5], "following nextSinceSeq visits every message once")
        #expect(pages == 3)

        let one = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 1)
        #expect(one.messages.map(\.seq) == [1])
        #expect(one.hasMore)
        #expect(one.nextSinceSeq == 1)

        let exact = try store.historyAndWait(room: "r", sinceSeq: 3, limit: 2)
        #expect(exact.messages.map(\.seq) == [4, 5])
        #expect(!exact.hasMore, "a page ending exactly at the last message has no more")
    }

    @Test(arguments: ChatBackend.allCases)
    func testHistoryEdges(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(3, room: "r", sender: "alice")

        let caughtUp = try store.historyAndWait(room: "r", sinceSeq: 3, limit: 10)
        #expect(caughtUp.messages == [])
        #expect(!caughtUp.hasMore)
        #expect(caughtUp.nextSinceSeq == 3, "an empty page keeps the caller's position")
        #expect(caughtUp.lastSeq == 3)

        let ahead = try store.historyAndWait(room: "r", sinceSeq: 50, limit: 10)
        #expect(ahead.messages == [])
        #expect(ahead.nextSinceSeq == 50)
        #expect(ahead.lastSeq == 3)

        let empty = try store.historyAndWait(room: "unknown", sinceSeq: 0, limit: 10)
        #expect(empty == HistoryPage(room: "unknown", messages: [], hasMore: false, nextSinceSeq: 0, lastSeq: 0))

        let zero = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 0)
        #expect(zero.messages == [])
        #expect(zero.hasMore)
        #expect(zero.nextSinceSeq == 0)

        #expect(try store.historyAndWait(room: "r", sinceSeq: 0, limit: -1).messages == [], "negative limit counts as 0")
        #expect(try store.historyAndWait(room: "r", sinceSeq: 0, limit: .max).messages.count == 3, "no overflow")
        #expect(try store.historyAndWait(room: "r", sinceSeq: -10, limit: 10).messages.count == 3)
    }

    @Test(arguments: ChatBackend.allCases)
    func testHistoryIsPerRoom(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(2, room: "r", sender: "alice")
        try store.appendMany(4, room: "s", sender: "alice")
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)
        #expect(page.messages.count == 2)
        #expect(page.messages.allSatisfy { $0.room == "r" })
    }

    @Test(arguments: ChatBackend.allCases)
    func testUnreadCountsOthersMessagesAfterTheMarker(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        try store.appendMany(3, room: "r", sender: "alice")
        try store.appendMany(2, room: "r", sender: "bob")
        try store.appendMany(1, room: "r", sender: "alice", prefix: "again")

        #expect(try store.summaryAndWait(room: "r", peer: "bob") == RoomSummary(room: "r", peer: "bob", lastSeq: 6, readSeq: 0, unreadCount: 4), "bob's own two messages are never unread for him")
        #expect(try store.summaryAndWait(room: "r", peer: "alice").unreadCount == 2)
        #expect(try store.summaryAndWait(room: "r", peer: "carol").unreadCount == 6)

        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 4, nowMs: 1)
        #expect(try store.summaryAndWait(room: "r", peer: "bob").unreadCount == 1, "only alice's seq 6 is after the marker")
        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 6, nowMs: 2)
        #expect(try store.summaryAndWait(room: "r", peer: "bob").unreadCount == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testSummaryOfAnEmptyRoomIsAllZero(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        #expect(try store.summaryAndWait(room: "quiet", peer: "bob") == RoomSummary(room: "quiet", peer: "bob", lastSeq: 0, readSeq: 0, unreadCount: 0))
    }
}
