import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import XCTest

private func draft(_ room: RoomID, _ sender: PeerID, _ clientID: String, text: String = "hi") -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, meta: nil, timestampMs: 1_000)
}

/// What only the PostgreSQL store has to get right: several stores (as several server processes
/// would) writing one room, a server that goes away and comes back, text PostgreSQL cannot hold.
/// The contract it shares with SQLite is in CallingStoreTests/ChatPersistenceTests.
final class PostgresChatStoreTests: XCTestCase {
    func testStoresOfSeveralServersWritingOneRoomShareOneGapFreeSeq() throws {
        let url = try SharedPostgres.database()
        let stores = try (0..<3).map { _ in try PostgresChatStore.open(url: url) }
        defer { for store in stores { store.close() } }
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 6) { producer in
            let store = stores[producer % stores.count]
            for index in 0..<100 {
                group.enter()
                // Two rooms, so batches of different stores lock overlapping sets of rooms.
                let room: RoomID = index % 2 == 0 ? "shared" : "other"
                store.appendChat(draft(room, PeerID("p\(producer)"), "\(index)")) {
                    results.append($0)
                    group.leave()
                }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        let acks = try results.all.map { try $0.get() }
        XCTAssertEqual(acks.count, 600)
        for room: RoomID in ["shared", "other"] {
            let seqs = acks.filter { $0.message.room == room }.map(\.message.seq).sorted()
            XCTAssertEqual(seqs, Array(1...300), "gap-free and unique in \(room) across three stores")
            let page = try stores[0].historyAndWait(room: room, sinceSeq: 0, limit: 1_000)
            XCTAssertEqual(page.messages.map(\.seq), Array(1...300))
            XCTAssertEqual(page.lastSeq, 300)
        }
    }

    func testTheAckComesOnlyAfterTheRowIsCommitted() throws {
        let url = try SharedPostgres.database()
        let store = try PostgresChatStore.open(url: url)
        defer { store.close() }
        let seenByAnotherSession = Collector<String?>()
        let done = DispatchSemaphore(value: 0)
        store.appendChat(draft("r", "alice", "c1")) { result in
            // A second, independent session sees only committed rows.
            do {
                let reader = try PostgresConnection(url: url)
                let rows = try reader.query(
                    "SELECT seq FROM chat_messages WHERE room_id = 'r' AND sender = 'alice' AND client_id = 'c1'")
                seenByAnotherSession.append(rows.rows.first?[0] ?? nil)
                XCTAssertEqual(rows.rows.first?[0], "\(try result.get().message.seq)")
            } catch {
                XCTFail("\(error)")
            }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(seenByAnotherSession.all, ["1"])
        XCTAssertEqual(try store.sync { try $0.query("SHOW synchronous_commit").rows }, [["on"]],
                       "the session commits to disk before COMMIT returns, whatever the server's default")
    }

    func testTheSameClientIDsSentThroughSeveralServersAtOnceAreStoredOnce() throws {
        // Retries racing their originals through other nodes: each batch looks for stored copies only
        // once it holds the room's lock, so it sees whatever another node committed before that.
        let url = try SharedPostgres.database()
        let stores = try (0..<3).map { _ in try PostgresChatStore.open(url: url) }
        defer { for store in stores { store.close() } }
        let results = Collector<Result<ChatAppendResult, StoreError>>()
        let group = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: 3) { node in
            for index in 0..<150 {
                group.enter()
                stores[node].appendChat(draft("r", "alice", "c\(index)", text: "via node \(node)")) {
                    results.append($0)
                    group.leave()
                }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        let acks = try results.all.map { try $0.get() }
        XCTAssertEqual(acks.count, 450)
        let byClientID = Dictionary(grouping: acks, by: \.message.clientID)
        XCTAssertEqual(byClientID.count, 150)
        for (clientID, copies) in byClientID {
            XCTAssertEqual(Set(copies.map(\.message)).count, 1, "\(clientID): every copy acked with the one stored record")
            XCTAssertEqual(copies.filter { !$0.duplicate }.count, 1, "\(clientID): exactly one copy wrote it")
        }
        XCTAssertEqual(Set(acks.map(\.message.seq)).sorted(), Array(1...150), "gap-free: duplicates took no seq")
        XCTAssertEqual(try stores[0].historyAndWait(room: "r", sinceSeq: 0, limit: 1_000).messages.count, 150)
    }

    func testARetryThroughAnotherServerGetsTheOriginalAck() throws {
        let url = try SharedPostgres.database()
        let first = try PostgresChatStore.open(url: url)
        let second = try PostgresChatStore.open(url: url)
        defer { first.close(); second.close() }
        let original = try first.appendAndWait(draft("r", "alice", "c1", text: "first"))
        let retry = try second.appendAndWait(draft("r", "alice", "c1", text: "retried"))
        XCTAssertTrue(retry.duplicate)
        XCTAssertEqual(retry.message, original.message)
        XCTAssertEqual(try second.appendAndWait(draft("r", "alice", "c2")).message.seq, 2)
    }

    func testTextThatNeedsEscapingInAnArrayComesBackAsSent() throws {
        let store = try PostgresChatStore.open(url: try SharedPostgres.database())
        defer { store.close() }
        let texts = [#"quote " backslash \ braces {} comma , NULL"#, "NULL", "", "  spaced  ", "emoji 👋 and ünïcode", "line\nbreak\ttab"]
        for (index, text) in texts.enumerated() {
            let meta = index == 0 ? #"{"k":"v \" \\"}"# : nil
            _ = try store.appendAndWait(ChatDraft(room: "r", sender: "a, b", clientID: "c\(index)", text: text, meta: meta,
                                                  timestampMs: Int64(index)))
        }
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 100)
        XCTAssertEqual(page.messages.map(\.text), texts)
        XCTAssertEqual(page.messages.first?.meta, #"{"k":"v \" \\"}"#)
        XCTAssertEqual(page.messages.dropFirst().map(\.meta), Array(repeating: nil, count: texts.count - 1), "NULL stays NULL")
        XCTAssertTrue(page.messages.allSatisfy { $0.sender == "a, b" })
    }

    func testANULCharacterFailsThatMessageAloneNotItsBatch() throws {
        let store = try PostgresChatStore.open(url: try SharedPostgres.database())
        defer { store.close() }
        let results = Collector<(String, Result<ChatAppendResult, StoreError>)>()
        let group = DispatchGroup()
        for (clientID, text) in [("ok1", "fine"), ("bad", "nul\u{0}inside"), ("ok2", "fine too")] {
            group.enter()
            store.appendChat(draft("r", "alice", clientID, text: text)) {
                results.append((clientID, $0))
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        let byID = Dictionary(uniqueKeysWithValues: results.all)
        XCTAssertEqual(try byID["ok1"]?.get().message.seq, 1)
        XCTAssertEqual(try byID["ok2"]?.get().message.seq, 2)
        guard case .failure(.server(let error))? = byID["bad"] else { return XCTFail("\(String(describing: byID["bad"]))") }
        XCTAssertEqual(error.code, "22021")
        XCTAssertFalse(error.isRetryable, "the same text will never fit")
    }

    func testWhileTheServerIsDownAppendsFailRetryablyAndAfterItIsBackTheyAreStored() throws {
        // A server of its own: this test kills it.
        let server = try TestPostgres()
        defer { server.stop() }
        let store = try PostgresChatStore.open(url: try server.createDatabase(), options: .init(reconnectIntervalMs: 100))
        defer { store.close() }
        XCTAssertEqual(try store.appendAndWait(draft("r", "alice", "before")).message.seq, 1)

        server.kill9()
        XCTAssertThrowsError(try store.appendAndWait(draft("r", "alice", "during"))) { error in
            guard case .server(let failure)? = error as? StoreError else { return XCTFail("\(error)") }
            XCTAssertTrue(failure.isRetryable, "\(failure)")
        }
        XCTAssertThrowsError(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)) {
            XCTAssertEqual(($0 as? StoreError)?.isRetryable, true)
        }
        XCTAssertGreaterThanOrEqual(store.metrics.batchesFailed, 1)

        try server.restart()
        var stored: ChatAppendResult?
        for _ in 0..<50 where stored == nil {
            stored = try? store.appendAndWait(draft("r", "alice", "during"))
            if stored == nil { usleep(100_000) }
        }
        XCTAssertEqual(stored?.message.seq, 2, "the retry is stored once the server is back, right after what was acked")
        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10).messages.map(\.clientID), ["before", "during"])
    }

    func testAServerRestartedWhileTheStoreWasIdleCostsNoFailedChat() throws {
        let server = try TestPostgres()
        defer { server.stop() }
        let store = try PostgresChatStore.open(url: try server.createDatabase())
        defer { store.close() }
        XCTAssertEqual(try store.appendAndWait(draft("r", "alice", "before")).message.seq, 1)
        // The store's connection is dead now, and it does not know until it uses it.
        server.kill9()
        try server.restart()
        XCTAssertEqual(try store.appendAndWait(draft("r", "alice", "after")).message.seq, 2,
                       "BEGIN failed on the dead connection, so the batch ran again on a new one")
        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10).messages.map(\.clientID), ["before", "after"])
        XCTAssertEqual(store.metrics.batchesFailed, 0)
    }
}
