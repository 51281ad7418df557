import CallingCore
import CallingStore
import XCTest

/// The webhook queue's table: what is inserted comes back in order after a reopen, with its retry state.
final class WebhookRepositoryTests: XCTestCase {
    private func draft(_ id: String, url: String = "http://h/a", key: String = "r1") -> WebhookDraft {
        WebhookDraft(id: id, url: url, key: key, eventType: "peer_joined", body: Array("{\"id\":\"\(id)\"}".utf8), createdAt: 1_000)
    }

    func test_queued_deliveries_survive_reopening_in_order_with_their_attempts() throws {
        let path = try makeDatabasePath()
        let first = try ChatStore.open(path: path)
        let stored = try first.sync { db -> [WebhookDelivery] in
            let repository = WebhookRepository(db: db)
            let stored = try repository.insert([draft("e1"), draft("e2"), draft("e1", url: "http://h/b")])
            try repository.reschedule(seq: stored[0].seq, attempts: 3, nextAttemptMs: 9_000)
            return stored
        }
        XCTAssertEqual(stored.map(\.seq), stored.map(\.seq).sorted())
        XCTAssertEqual(Set(stored.map(\.seq)).count, 3, "one row per event and URL")
        first.close()

        let reopened = try ChatStore.open(path: path)
        defer { reopened.close() }
        let all = try reopened.sync { try WebhookRepository(db: $0).all() }
        XCTAssertEqual(all.map(\.id), ["e1", "e2", "e1"])
        XCTAssertEqual(all[0].attempts, 3)
        XCTAssertEqual(all[0].nextAttemptAt, 9_000)
        XCTAssertEqual(all[1].attempts, 0)
        XCTAssertEqual(all[1].nextAttemptAt, 1_000)
        XCTAssertEqual(all[1].body, Array("{\"id\":\"e2\"}".utf8))
    }

    func test_inserting_the_same_event_for_the_same_url_twice_keeps_one_row() throws {
        let store = try makeStore()
        let (first, again, count) = try store.sync { db in
            let repository = WebhookRepository(db: db)
            return (try repository.insert([draft("e1")]), try repository.insert([draft("e1")]), try repository.count())
        }
        XCTAssertEqual(first.map(\.seq), again.map(\.seq))
        XCTAssertEqual(count, 1)
    }

    func test_deleted_rows_are_gone() throws {
        let store = try makeStore()
        let left = try store.sync { db -> [String] in
            let repository = WebhookRepository(db: db)
            let stored = try repository.insert([draft("e1"), draft("e2"), draft("e3")])
            try repository.delete(seqs: [stored[0].seq, stored[2].seq])
            return try repository.all().map(\.id)
        }
        XCTAssertEqual(left, ["e2"])
    }
}
