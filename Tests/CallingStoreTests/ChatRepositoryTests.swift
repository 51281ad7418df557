import CallingCore
import CallingStore
import Dispatch
import XCTest

/// What the chat SQL computes (ChatRepository), exercised through the public ChatStore API that the
/// server uses: dedup, read markers, history paging and unread counts.
final class ChatRepositoryTests: XCTestCase {
    // MARK: Dedup

    func testARetriedClientIDGetsTheOriginalSeqAndTimestampAndNoSecondRow() throws {
        let store = try makeStore()
        let original = try store.appendAndWait(ChatDraft(
            room: "r", sender: "alice", clientID: "c1", text: "first", meta: #"{"a":1}"#, timestampMs: 100
        ))
        let retry = try store.appendAndWait(ChatDraft(
            room: "r", sender: "alice", clientID: "c1", text: "edited on retry", meta: nil, timestampMs: 999
        ))
        XCTAssertFalse(original.duplicate)
        XCTAssertTrue(retry.duplicate)
        XCTAssertEqual(retry.message, original.message, "same seq, same ts, same text and meta as the original")
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 1)
        // The retry did not consume a seq.
        let next = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c2", text: "second", timestampMs: 101))
        XCTAssertEqual(next.message.seq, 2)
    }

    func testTheSameClientIDFromAnotherSenderOrRoomIsADifferentMessage() throws {
        let store = try makeStore()
        let a = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c1", text: "x", timestampMs: 1))
        let b = try store.appendAndWait(ChatDraft(room: "r", sender: "bob", clientID: "c1", text: "x", timestampMs: 1))
        let c = try store.appendAndWait(ChatDraft(room: "s", sender: "alice", clientID: "c1", text: "x", timestampMs: 1))
        XCTAssertEqual([a, b, c].map(\.duplicate), [false, false, false])
        XCTAssertEqual([a, b, c].map(\.message.seq), [1, 2, 1])
    }

    func testTwoCopiesInTheSameBatchStoreOneRow() throws {
        let store = try makeStore()
        let release = DispatchSemaphore(value: 0)
        try store.holdQueue(until: release)
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
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(store.metrics.batchesCommitted, 1, "all three were in one batch")
        XCTAssertEqual(results.all.map(\.duplicate), [false, true, true])
        XCTAssertEqual(Set(results.all.map(\.message)).count, 1)
        XCTAssertEqual(results.all.first?.message.text, "one")
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 1)
    }

    func testARetryInABatchTakesNoSeqAndGetsTheOriginalAck() throws {
        let store = try makeStore()
        let earlier = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "old", text: "a", timestampMs: 1))
        let release = DispatchSemaphore(value: 0)
        try store.holdQueue(until: release)
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
        XCTAssertEqual(group.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(store.metrics.batchesCommitted, 2, "the four were in one batch")
        XCTAssertEqual(results.all.map(\.duplicate), [true, false, true, false])
        XCTAssertEqual(results.all.map(\.message.seq), [1, 2, 2, 3], "retries take no seq: seqs stay gap-free")
        XCTAssertEqual(results.all.map(\.message.timestampMs), [1, 51, 51, 53], "a retry carries the original ts")
        XCTAssertEqual(results.all[0].message, earlier.message)
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM chat_messages") }, 3)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").lastSeq, 3)
    }

    // MARK: Read markers

    func testTheReadMarkerOnlyMovesForward() throws {
        let store = try makeStore()
        try store.appendMany(5, room: "r", sender: "alice")

        let first = try store.markReadAndWait(room: "r", peer: "bob", seq: 3, nowMs: 10)
        XCTAssertTrue(first.moved)
        XCTAssertEqual(first.marker, ReadMarker(room: "r", peer: "bob", seq: 3, updatedMs: 10))

        let older = try store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 20)
        XCTAssertFalse(older.moved)
        XCTAssertEqual(older.marker, first.marker, "an older receipt returns the current marker untouched")

        let same = try store.markReadAndWait(room: "r", peer: "bob", seq: 3, nowMs: 30)
        XCTAssertFalse(same.moved)
        XCTAssertEqual(same.marker.updatedMs, 10)

        let newer = try store.markReadAndWait(room: "r", peer: "bob", seq: 4, nowMs: 40)
        XCTAssertTrue(newer.moved)
        XCTAssertEqual(newer.marker, ReadMarker(room: "r", peer: "bob", seq: 4, updatedMs: 40))
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").readSeq, 4)
    }

    func testAReadMarkerPastTheLastMessageIsClampedToIt() throws {
        let store = try makeStore()
        try store.appendMany(5, room: "r", sender: "alice")
        let clamped = try store.markReadAndWait(room: "r", peer: "bob", seq: 1_000, nowMs: 1)
        XCTAssertTrue(clamped.moved)
        XCTAssertEqual(clamped.marker.seq, 5)
        // So a new message is still unread.
        try store.appendMany(1, room: "r", sender: "alice", prefix: "later")
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").unreadCount, 1)
    }

    func testMarkingAnEmptyOrUnknownRoomStoresNothing() throws {
        let store = try makeStore()
        let result = try store.markReadAndWait(room: "nowhere", peer: "bob", seq: 3, nowMs: 1)
        XCTAssertFalse(result.moved)
        XCTAssertEqual(result.marker, ReadMarker(room: "nowhere", peer: "bob", seq: 0, updatedMs: nil))
        XCTAssertFalse(try store.markReadAndWait(room: "nowhere", peer: "bob", seq: -5, nowMs: 1).moved)
        XCTAssertEqual(try store.sync { try $0.count("SELECT count(*) FROM read_markers") }, 0)
    }

    func testMarkersArePerPeerAndPerRoom() throws {
        let store = try makeStore()
        try store.appendMany(3, room: "r", sender: "alice")
        try store.appendMany(3, room: "s", sender: "alice")
        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 2, nowMs: 1)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").readSeq, 2)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "carol").readSeq, 0)
        XCTAssertEqual(try store.summaryAndWait(room: "s", peer: "bob").readSeq, 0)
    }

    // MARK: History

    func testHistoryPagesThroughARoom() throws {
        let store = try makeStore()
        try store.appendMany(5, room: "r", sender: "alice")

        let all = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 100)
        XCTAssertEqual(all.messages.map(\.seq), [1, 2, 3, 4, 5])
        XCTAssertFalse(all.hasMore, "a limit larger than the rest returns the rest and says so")
        XCTAssertEqual(all.nextSinceSeq, 5)
        XCTAssertEqual(all.lastSeq, 5)

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
        XCTAssertEqual(seen, [1, 2, 3, 4, 5], "following nextSinceSeq visits every message once")
        XCTAssertEqual(pages, 3)

        let one = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 1)
        XCTAssertEqual(one.messages.map(\.seq), [1])
        XCTAssertTrue(one.hasMore)
        XCTAssertEqual(one.nextSinceSeq, 1)

        let exact = try store.historyAndWait(room: "r", sinceSeq: 3, limit: 2)
        XCTAssertEqual(exact.messages.map(\.seq), [4, 5])
        XCTAssertFalse(exact.hasMore, "a page ending exactly at the last message has no more")
    }

    func testHistoryEdges() throws {
        let store = try makeStore()
        try store.appendMany(3, room: "r", sender: "alice")

        let caughtUp = try store.historyAndWait(room: "r", sinceSeq: 3, limit: 10)
        XCTAssertEqual(caughtUp.messages, [])
        XCTAssertFalse(caughtUp.hasMore)
        XCTAssertEqual(caughtUp.nextSinceSeq, 3, "an empty page keeps the caller's position")
        XCTAssertEqual(caughtUp.lastSeq, 3)

        let ahead = try store.historyAndWait(room: "r", sinceSeq: 50, limit: 10)
        XCTAssertEqual(ahead.messages, [])
        XCTAssertEqual(ahead.nextSinceSeq, 50)
        XCTAssertEqual(ahead.lastSeq, 3)

        let empty = try store.historyAndWait(room: "unknown", sinceSeq: 0, limit: 10)
        XCTAssertEqual(empty, HistoryPage(room: "unknown", messages: [], hasMore: false, nextSinceSeq: 0, lastSeq: 0))

        let zero = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 0)
        XCTAssertEqual(zero.messages, [])
        XCTAssertTrue(zero.hasMore)
        XCTAssertEqual(zero.nextSinceSeq, 0)

        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: 0, limit: -1).messages, [], "negative limit counts as 0")
        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: 0, limit: .max).messages.count, 3, "no overflow")
        XCTAssertEqual(try store.historyAndWait(room: "r", sinceSeq: -10, limit: 10).messages.count, 3)
    }

    func testHistoryIsPerRoom() throws {
        let store = try makeStore()
        try store.appendMany(2, room: "r", sender: "alice")
        try store.appendMany(4, room: "s", sender: "alice")
        let page = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)
        XCTAssertEqual(page.messages.count, 2)
        XCTAssertTrue(page.messages.allSatisfy { $0.room == "r" })
    }

    // MARK: Summary

    func testUnreadCountsOthersMessagesAfterTheMarker() throws {
        let store = try makeStore()
        try store.appendMany(3, room: "r", sender: "alice")
        try store.appendMany(2, room: "r", sender: "bob")
        try store.appendMany(1, room: "r", sender: "alice", prefix: "again")

        XCTAssertEqual(
            try store.summaryAndWait(room: "r", peer: "bob"),
            RoomSummary(room: "r", peer: "bob", lastSeq: 6, readSeq: 0, unreadCount: 4),
            "bob's own two messages are never unread for him"
        )
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "alice").unreadCount, 2)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "carol").unreadCount, 6)

        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 4, nowMs: 1)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").unreadCount, 1, "only alice's seq 6 is after the marker")
        _ = try store.markReadAndWait(room: "r", peer: "bob", seq: 6, nowMs: 2)
        XCTAssertEqual(try store.summaryAndWait(room: "r", peer: "bob").unreadCount, 0)
    }

    func testSummaryOfAnEmptyRoomIsAllZero() throws {
        let store = try makeStore()
        XCTAssertEqual(
            try store.summaryAndWait(room: "quiet", peer: "bob"),
            RoomSummary(room: "quiet", peer: "bob", lastSeq: 0, readSeq: 0, unreadCount: 0)
        )
    }
}
