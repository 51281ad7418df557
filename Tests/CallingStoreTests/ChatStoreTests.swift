import CallingCore
import CallingStore
import CallingTesting
import Dispatch
import Foundation
import XCTest

private func draft(_ room: RoomID, _ sender: PeerID, _ clientID: String, text: String = "hi", ts: Int64 = 1_000) -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, meta: nil, timestampMs: ts)
}

/// What only the SQLite store has: commit-before-ack seen from a second connection, `sync` from a
/// completion, the database file and its WAL, a failed batch. The contract both stores keep (group
/// commit, concurrency, dedup, paging, markers, unread counts, close) is in ChatPersistenceTests.
final class ChatStoreTests: XCTestCase {
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

    /// One batch of 101 drafts goes in as multi-row INSERTs of 64, 16 and 4 rows and single rows. A
    /// retry of a stored message and a second copy inside a chunk make that chunk fall back to one
    /// row at a time; either way seqs stay gap-free and every duplicate gets its original.
    func testALargeBatchWithRetriesInsideChunksKeepsSeqsGapFreeAndFindsOriginals() throws {
        let store = try makeStore()
        let first = try store.appendAndWait(draft("r", "alice", "old", text: "original"))
        XCTAssertEqual(first.message.seq, 1)
        // Hold the queue so that every draft below is pending when the drain takes its batch.
        let release = DispatchSemaphore(value: 0)
        store.perform({ _ in release.wait() }, completion: { _ in })
        var drafts: [ChatDraft] = []
        for index in 0..<101 {
            let room: RoomID = index % 3 == 0 ? "s" : "r"
            switch index {
            case 10: drafts.append(draft("r", "alice", "old"))  // a retry of the stored row, in the 64-row chunk
            case 70: drafts.append(draft(room, "bob", "b65"))  // a second copy inside the first 16-row chunk
            default: drafts.append(draft(room, "bob", "b\(index)", text: "t\(index)", ts: Int64(index)))
            }
        }
        drafts[95] = ChatDraft(room: "r", sender: "bob", clientID: "m95", text: "with meta", meta: #"{"k":[1]}"#, timestampMs: 95)
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let done = DispatchGroup()
        for item in drafts {
            done.enter()
            store.appendChat(item) {
                results.append($0)
                done.leave()
            }
        }
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        let acks = try results.all.map { try $0.get() }
        XCTAssertEqual(acks.count, 101)
        XCTAssertEqual(store.metrics.largestBatch, 101, "one batch")
        XCTAssertEqual(acks[10].duplicate, true)
        XCTAssertEqual(acks[10].message.seq, 1)
        XCTAssertEqual(acks[10].message.text, "original")
        XCTAssertEqual(acks[70].duplicate, true)
        XCTAssertEqual(acks[70].message, acks[65].message)
        XCTAssertEqual(acks[95].message.meta, #"{"k":[1]}"#)
        for room: RoomID in ["r", "s"] {
            let fresh = acks.filter { !$0.duplicate && $0.message.room == room }.map(\.message.seq)
            let expected = room == "r" ? Array(Int64(2)...Int64(fresh.count + 1)) : Array(Int64(1)...Int64(fresh.count))
            XCTAssertEqual(fresh, expected, "gap-free, in submission order, in \(room)")
        }
        try store.sync { db in
            XCTAssertEqual(try db.count("SELECT count(*) FROM chat_messages"), 100)
            XCTAssertEqual(try db.count("SELECT last_seq FROM rooms WHERE room_id = 'r'"), 66)
            XCTAssertEqual(try db.count("SELECT last_seq FROM rooms WHERE room_id = 's'"), 34)
            XCTAssertEqual(try db.count("SELECT count(*) FROM chat_messages WHERE room_id = 'r' AND seq = 50 AND text LIKE 't%'"), 1)
            XCTAssertEqual(try db.queryFirst("SELECT meta FROM chat_messages WHERE client_id = 'm95'") { $0.text(0) }, #"{"k":[1]}"#)
        }
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

    func testCloseLeavesEveryMessageInTheDatabaseFileAndNoWAL() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        // Long texts, so the WAL passes the 250 pages at which checkpoints are triggered, several times.
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
