import CallingCore
import CallingStore
import Dispatch
import Foundation
import XCTest

private func draft(_ room: RoomID, _ sender: PeerID, _ clientID: String, text: String = "hi", ts: Int64 = 1_000) -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, meta: nil, timestampMs: ts)
}

/// The facade: group commit, concurrency, commit-before-ack, close and durability.
/// (What the SQL computes — dedup, paging, markers, unread counts — is in ChatRepositoryTests.)
final class ChatStoreTests: XCTestCase {
    func testAppendAssignsSeq123PerRoomIndependently() throws {
        let store = try makeStore()
        let a1 = try store.appendAndWait(draft("a", "p", "1"))
        let b1 = try store.appendAndWait(draft("b", "p", "1"))
        let a2 = try store.appendAndWait(draft("a", "p", "2"))
        let a3 = try store.appendAndWait(draft("a", "q", "1"))
        let b2 = try store.appendAndWait(draft("b", "q", "1"))
        XCTAssertEqual([a1, a2, a3].map(\.message.seq), [1, 2, 3])
        XCTAssertEqual([b1, b2].map(\.message.seq), [1, 2])
        XCTAssertFalse([a1, a2, a3, b1, b2].contains { $0.duplicate })
    }

    func testTheAckCarriesTheStoredMessage() throws {
        let store = try makeStore()
        let sent = ChatDraft(room: "r", sender: "alice", clientID: "c1", text: "hello 👋", meta: #"{"reply_to":3}"#, timestampMs: 42)
        let ack = try store.appendAndWait(sent)
        XCTAssertEqual(ack.message, ChatRecord(
            room: "r", seq: 1, sender: "alice", clientID: "c1", text: "hello 👋", meta: #"{"reply_to":3}"#, timestampMs: 42
        ))
        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10).messages, [ack.message])
    }

    func testRetriesOfOneClientIDFromManyThreadsAtOnceStoreOneRow() throws {
        let store = try makeStore()
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 50) { attempt in
            group.enter()
            store.appendChat(draft("r", "alice", "same", text: "attempt \(attempt)", ts: Int64(attempt))) {
                results.append($0)
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        let acks = try results.all.map { try $0.get() }
        XCTAssertEqual(acks.count, 50)
        XCTAssertEqual(Set(acks.map(\.message)).count, 1, "every retry got the same original record")
        XCTAssertEqual(acks.first?.message.seq, 1)
        XCTAssertEqual(acks.filter { !$0.duplicate }.count, 1, "exactly one of them wrote the row")
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 1)
    }

    func testSeqIsGapFreePerRoomUnderConcurrentProducers() throws {
        let store = try makeStore()
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
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        let acks = try results.all.map { try $0.get() }
        XCTAssertEqual(acks.count, 1_600)
        XCTAssertFalse(acks.contains { $0.duplicate })

        for room in rooms {
            let acked = acks.filter { $0.message.room == room }.map(\.message.seq).sorted()
            XCTAssertEqual(acked, Array(1...Int64(acked.count)), "acks for \(room) are 1...N without gaps or repeats")
            let stored = try store.sync { db in
                try db.query("SELECT seq FROM chat_messages WHERE room_id = ?1 ORDER BY seq", [.text(room.rawValue)]) { $0.int64(0) }
            }
            XCTAssertEqual(stored, acked, "the table holds exactly the acked seqs for \(room)")
            let lastSeq = try store.sync { try $0.count("SELECT last_seq FROM rooms WHERE room_id = ?1", [.text(room.rawValue)]) }
            XCTAssertEqual(lastSeq, Int64(acked.count))
        }
        XCTAssertEqual(acks.count, rooms.reduce(0) { total, room in total + acks.filter { $0.message.room == room }.count })

        let metrics = store.metrics
        XCTAssertEqual(metrics.rowsInserted, 1_600)
        XCTAssertLessThan(metrics.batchesCommitted, metrics.rowsInserted, "concurrent appends shared transactions")
        XCTAssertGreaterThan(metrics.largestBatch, 1)
    }

    func testDraftsArrivingWhileTheWriterIsBusyAreCommittedInOneTransaction() throws {
        let store = try makeStore()
        let release = DispatchSemaphore(value: 0)
        try store.holdQueue(until: release)

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
        XCTAssertEqual(results.all.count, 0)
        release.signal()
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)

        XCTAssertEqual(try results.all.map { try $0.get().message.seq }.sorted(), Array(1...100))
        XCTAssertEqual(store.metrics.batchesCommitted, 1)
        XCTAssertEqual(store.metrics.largestBatch, 100)
    }

    func testMaxBatchSizeSplitsABacklogIntoTransactionsInOrder() throws {
        let store = try makeStore(options: .init(maxBatchSize: 10))
        let release = DispatchSemaphore(value: 0)
        try store.holdQueue(until: release)
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
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)

        XCTAssertEqual(results.all.map(\.message.clientID), (0..<95).map { "\($0)" }, "acked in submission order")
        XCTAssertEqual(results.all.map(\.message.seq), Array(1...95), "one sender's messages keep their order")
        XCTAssertEqual(page.all.first?.messages.count, 95)
        XCTAssertEqual(store.metrics.batchesCommitted, 10)
        XCTAssertEqual(store.metrics.largestBatch, 10)
    }

    func testAnOperationSubmittedAfterAnAppendSeesIt() throws {
        let store = try makeStore()
        for index in 0..<20 {
            store.appendChat(draft("r", "alice", "\(index)")) { _ in }
        }
        // No waiting for the acks: the read still comes after the writes.
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 100)
        XCTAssertEqual(page.messages.count, 20)
        let marker = try store.markReadAndWait(room: "r", peer: "bob", seq: 20, nowMs: 1)
        XCTAssertEqual(marker.marker.seq, 20)
    }

    func testTheAckComesOnlyAfterTheRowIsCommitted() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        defer { store.close() }
        let seenByAnotherConnection = Collector<Int64>()
        let done = DispatchSemaphore(value: 0)
        store.appendChat(draft("r", "alice", "c1")) { result in
            // A second, independent connection sees only committed data.
            do {
                let reader = try SQLiteConnection(path: path, options: .init(readOnly: true))
                let seq = try reader.count(
                    "SELECT seq FROM chat_messages WHERE room_id = 'r' AND sender = 'alice' AND client_id = 'c1'"
                )
                seenByAnotherConnection.append(seq)
                XCTAssertEqual(seq, try result.get().message.seq)
            } catch {
                XCTFail("\(error)")
            }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(seenByAnotherConnection.all, [1])
    }

    func testSyncFromInsideACompletionRunsInlineInsteadOfDeadlocking() throws {
        let store = try makeStore()
        let count = try awaitResult { (completion: @escaping @Sendable (Result<Int64, StoreError>) -> Void) in
            store.appendChat(draft("r", "alice", "c1")) { _ in
                completion(Result { try store.sync { try $0.count("SELECT count(*) FROM chat_messages") } }
                    .mapError { StoreError.sqlite($0 as? SQLiteError ?? SQLiteError(code: 1, message: "\($0)")) })
            }
        }
        XCTAssertEqual(count, 1)
    }

    func testCloseWritesAcceptedAppendsThenRefusesNewWork() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        let acks = Collector<Result<ChatAppendResult, StoreError>>()
        for index in 0..<30 {
            store.appendChat(draft("r", "alice", "\(index)")) { acks.append($0) }
        }
        store.close()
        XCTAssertEqual(try acks.all.map { try $0.get().message.seq }.sorted(), Array(1...30), "accepted before close, so written")

        XCTAssertThrowsError(try store.appendAndWait(draft("r", "alice", "late"))) {
            XCTAssertEqual($0 as? StoreError, .closed)
            XCTAssertFalse(($0 as? StoreError)?.isRetryable ?? true)
        }
        XCTAssertThrowsError(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 1)) {
            XCTAssertEqual($0 as? StoreError, .closed)
        }
        store.close()

        let reopened = try ChatStore.open(path: path)
        defer { reopened.close() }
        XCTAssertEqual(try reopened.historyAndWait(room: "r", sinceSeq: 0, limit: 100).messages.count, 30)
    }

    func testMessagesSurviveCloseAndReopen() throws {
        let path = try makeDatabasePath()
        var store = try ChatStore.open(path: path)
        let sent = try store.appendMany(3, room: "r", sender: "alice")
        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 5)
        store.close()

        store = try ChatStore.open(path: path)
        defer { store.close() }
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)
        XCTAssertEqual(page.messages, sent.map(\.message))
        XCTAssertEqual(page.lastSeq, 3)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").readSeq, 2)
        // And the next message continues the sequence rather than restarting it.
        XCTAssertEqual(try store.appendAndWait(draft("r", "alice", "next")).message.seq, 4)
    }

    func testCloseLeavesEveryMessageInTheDatabaseFileAndNoWAL() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        // Long texts, so the WAL passes the 1000 pages at which checkpoints are triggered.
        for index in 0..<500 {
            _ = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c\(index)",
                                                  text: String(repeating: "x", count: 4_000), meta: nil, timestampMs: 1))
        }
        store.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"))

        let reopened = try ChatStore.open(path: path)
        defer { reopened.close() }
        XCTAssertEqual(try reopened.summaryAndWait(room: "r", peer: "bob").lastSeq, 500)
    }

    func testTheWALStaysBoundedUnderSustainedLoad() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        defer { store.close() }
        let pageSize = try store.sync { try $0.count("PRAGMA page_size") }
        func walPages() -> Int64 {
            let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int64) ?? nil
            return (size ?? 0) / pageSize
        }
        // A few chats always in flight, so that commits follow each other without a pause, as at
        // saturation: the checkpoint connection never finds the writer idle.
        let window = DispatchSemaphore(value: 8)
        let group = DispatchGroup()
        var largestWAL: Int64 = 0
        for index in 0..<30_000 {
            window.wait()
            group.enter()
            store.appendChat(ChatDraft(room: RoomID("r\(index % 10)"), sender: "alice", clientID: "c\(index)",
                                       text: String(repeating: "x", count: 200), meta: nil, timestampMs: 1)) { _ in
                window.signal()
                group.leave()
            }
            if index % 500 == 0 { largestWAL = max(largestWAL, walPages()) }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        largestWAL = max(largestWAL, walPages())
        // The writer catches up at 16000 pages; left to grow, 30k chats take the WAL past 80,000.
        XCTAssertLessThan(largestWAL, 32_000, "the WAL was restarted, not left to grow")
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 30_000)
    }

    func testMetricsCountDuplicatesSeparately() throws {
        let store = try makeStore()
        _ = try store.appendAndWait(draft("r", "alice", "c1"))
        _ = try store.appendAndWait(draft("r", "alice", "c1"))
        let metrics = store.metrics
        XCTAssertEqual(metrics.rowsInserted, 1)
        XCTAssertEqual(metrics.duplicates, 1)
        XCTAssertEqual(metrics.batchesCommitted, 2)
        XCTAssertEqual(metrics.batchesFailed, 0)
    }

    func testAFailedBatchFailsEveryAppendInIt() throws {
        let store = try makeStore()
        // Simulate a broken database: without the rooms table every insert transaction fails.
        try store.sync { try $0.execute("PRAGMA foreign_keys = OFF; DROP TABLE rooms;") }
        let release = DispatchSemaphore(value: 0)
        try store.holdQueue(until: release)
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        for index in 0..<5 {
            group.enter()
            store.appendChat(draft("r", "alice", "\(index)")) {
                results.append($0)
                group.leave()
            }
        }
        release.signal()
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(results.all.count, 5)
        for result in results.all {
            guard case .failure(.sqlite) = result else { return XCTFail("\(result)") }
        }
        XCTAssertEqual(store.metrics.batchesFailed, 1)
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 0, "rolled back")
    }
}
