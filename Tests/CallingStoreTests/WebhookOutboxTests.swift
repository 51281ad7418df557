import CallingCore
import CallingLogging
import CallingStore
import Foundation
import Testing

private func draft(_ id: String, url: String = "http://h/a", key: String = "r1", at: Int64 = 1_000) -> WebhookDraft {
    WebhookDraft(id: id, url: url, key: key, eventType: "peer_joined", body: Array("{\"id\":\"\(id)\"}".utf8), createdAt: at)
}

/// The `WebhookOutbox` contract, ONE suite run against both stores: the embedded SQLite `ChatStore`
/// (one node's queue) and `PostgresChatStore` on a real PostgreSQL server (`TestPostgres`, a fresh
/// database per test), which every node of a cluster shares. What only SQLite has (its file after
/// a reopen) stays in WebhookRepositoryTests.
@Suite(.serialized)
struct WebhookOutboxTests {
    @Test(arguments: ChatBackend.allCases)
    func testEnqueuedRowsComeBackInOrderOnceEach(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let outbox = sut.outbox
        let stored = try outbox.wait { outbox.enqueueWebhooks([draft("e1"), draft("e2"), draft("e1", url: "http://h/b")], completion: $0) }
        #expect(stored.map(\.seq) == stored.map(\.seq).sorted())
        #expect(Set(stored.map(\.seq)).count == 3)
        let again = try outbox.wait { outbox.enqueueWebhooks([draft("e1")], completion: $0) }
        #expect(again.map(\.seq) == [stored[0].seq], "the same event for the same URL is one row")
        let pending = try outbox.wait { outbox.pendingWebhooks(completion: $0) }
        #expect(pending.map(\.id) == ["e1", "e2", "e1"])
        #expect(pending[1].body == Array("{\"id\":\"e2\"}".utf8))
        #expect(try outbox.wait { outbox.webhookCount(completion: $0) } == 3)
    }

    @Test(arguments: ChatBackend.allCases)
    func testOnlyLaneHeadsAreClaimedAndTheNextOnlyOnceTheHeadIsRemoved(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let outbox = sut.outbox
        let stored = try outbox.wait {
            outbox.enqueueWebhooks([draft("a1"), draft("a2"), draft("b1", key: "r2"), draft("a1", url: "http://h/b")], completion: $0)
        }
        let first = try outbox.wait { outbox.claimWebhooks(node: "n1", nowMs: 2_000, leaseMs: 10_000, limit: 10, completion: $0) }
        #expect(first.map(\.seq) == [stored[0].seq, stored[2].seq, stored[3].seq], "one head per (url, key), oldest first")
        #expect(try outbox.wait { outbox.claimWebhooks(node: "n2", nowMs: 2_000, leaseMs: 10_000, limit: 10, completion: $0) }.isEmpty,
                "heads under a live lease and rows behind them are nobody else's")
        try outbox.wait { outbox.removeWebhooks(seqs: [stored[0].seq], completion: $0) }
        let next = try outbox.wait { outbox.claimWebhooks(node: "n2", nowMs: 2_000, leaseMs: 10_000, limit: 10, completion: $0) }
        #expect(next.map(\.id) == ["a2"], "the lane's next row, once its head is gone")
        let limited = try outbox.wait { outbox.enqueueWebhooks([draft("c1", key: "r3"), draft("d1", key: "r4")], completion: $0) }
        #expect(try outbox.wait { outbox.claimWebhooks(node: "n3", nowMs: 2_000, leaseMs: 1, limit: 1, completion: $0) }.map(\.seq)
                == [limited[0].seq])
    }

    @Test(arguments: ChatBackend.allCases)
    func testAHeadWhoseLeaseRanOutIsTakenOverWithItsAttemptsAndRenewalKeepsIt(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let outbox = sut.outbox
        let stored = try outbox.wait { outbox.enqueueWebhooks([draft("a1"), draft("b1", key: "r2")], completion: $0) }
        _ = try outbox.wait { outbox.claimWebhooks(node: "dead", nowMs: 1_000, leaseMs: 5_000, limit: 10, completion: $0) }
        try outbox.wait { outbox.rescheduleWebhook(seq: stored[0].seq, attempts: 2, nextAttemptMs: 3_000, completion: $0) }
        #expect(try outbox.wait { outbox.renewWebhookClaims(node: "live", nowMs: 1_000, leaseMs: 5_000, completion: $0) } == 0)
        #expect(try outbox.wait { outbox.renewWebhookClaims(node: "dead", nowMs: 2_000, leaseMs: 5_000, completion: $0) } == 2)
        #expect(try outbox.wait { outbox.claimWebhooks(node: "live", nowMs: 6_500, leaseMs: 5_000, limit: 10, completion: $0) }.isEmpty,
                "renewed until 7000")
        let taken = try outbox.wait { outbox.claimWebhooks(node: "live", nowMs: 7_001, leaseMs: 5_000, limit: 10, completion: $0) }
        #expect(taken.map(\.id) == ["a1", "b1"])
        #expect(taken[0].attempts == 2 && taken[0].nextAttemptAt == 3_000, "the retry state travels with the row")
    }

    @Test(arguments: ChatBackend.allCases)
    func testARetryIsNotClaimedBeforeItIsDueAndReleasedClaimsAreFree(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let outbox = sut.outbox
        let stored = try outbox.wait { outbox.enqueueWebhooks([draft("a1")], completion: $0) }
        try outbox.wait { outbox.rescheduleWebhook(seq: stored[0].seq, attempts: 1, nextAttemptMs: 9_000, completion: $0) }
        #expect(try outbox.wait { outbox.claimWebhooks(node: "n1", nowMs: 8_999, leaseMs: 60_000, limit: 10, completion: $0) }.isEmpty)
        #expect(try outbox.wait { outbox.claimWebhooks(node: "n1", nowMs: 9_000, leaseMs: 60_000, limit: 10, completion: $0) }.count == 1)
        #expect(try outbox.wait { outbox.releaseWebhookClaims(node: "n1", completion: $0) } == 1)
        #expect(try outbox.wait { outbox.claimWebhooks(node: "n2", nowMs: 9_001, leaseMs: 60_000, limit: 10, completion: $0) }.count == 1,
                "a released claim is free at once")
    }

    @Test(arguments: ChatBackend.allCases)
    func testRowsForURLsNoLongerConfiguredAreDiscarded(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let outbox = sut.outbox
        _ = try outbox.wait { outbox.enqueueWebhooks([draft("a1"), draft("a1", url: "http://old/x"), draft("a2", url: "http://old/x")], completion: $0) }
        #expect(try outbox.wait { outbox.discardWebhooks(keepingURLs: ["http://h/a"], completion: $0) } == 2)
        #expect(try outbox.wait { outbox.pendingWebhooks(completion: $0) }.map(\.url) == ["http://h/a"])
    }
}

/// What only the shared store does: several nodes on one outbox, and the rooms' calls counted
/// across nodes (`SharedCallLifecycle`), on a real PostgreSQL server.
@Suite(.serialized)
struct SharedWebhookTests {
    private func lifecycle(_ sut: StoreUnderTest) -> any SharedCallLifecycle {
        guard case .postgres(_, let store) = sut.location else { fatalError("PostgreSQL only") }
        return store
    }

    /// Event names and peers, as the drafts closure sees them; the drafts carry them as their type.
    private static let drafts: LifecycleDrafts = { events, now in
        events.enumerated().map { index, shared in
            let (type, room, peer): (String, RoomID, String) = switch shared.event {
            case .callStarted(let call): ("call_started", call.room, "")
            case .peerJoined(let identity, let call): ("peer_joined", call.room, identity.peer.rawValue)
            case .peerLeft(let identity, let call): ("peer_left", call.room, identity.peer.rawValue)
            case .callEnded(let call, _, let reason): ("call_ended:" + reason, call.room, "")
            }
            return WebhookDraft(id: UUID().uuidString, url: "http://h/a", key: room.rawValue, eventType: peer.isEmpty ? type : type + ":" + peer,
                                body: Array("{}".utf8), createdAt: now)
        }
    }

    private func peer(_ id: String, room: String = "r1") -> PeerIdentity { PeerIdentity(peer: PeerID(id), room: RoomID(room)) }

    @Test func testOneRoomWithSeatsOnThreeNodesStartsAndEndsOnce() throws {
        let sut = try ChatBackend.postgres.open()
        defer { sut.close() }
        let store = lifecycle(sut)
        for (node, id) in [("a", "p1"), ("b", "p2"), ("c", "p3")] {
            _ = try store.wait { store.recordSeats([.joined(peer(id), transport: "websocket")], node: node, nowMs: 1_000, drafts: Self.drafts,
                                                  completion: $0) }
        }
        // A takeover of p2 by node c is no new seat; b's late leave of it changes nothing.
        _ = try store.wait { store.recordSeats([.joined(peer("p2"), transport: "websocket")], node: "c", nowMs: 1_500, drafts: Self.drafts,
                                              completion: $0) }
        _ = try store.wait { store.recordSeats([.left(peer("p2"), reason: "x")], node: "b", nowMs: 1_600, drafts: Self.drafts, completion: $0) }
        for (node, id) in [("a", "p1"), ("c", "p2"), ("c", "p3")] {
            _ = try store.wait { store.recordSeats([.left(peer(id), reason: "last_peer_left")], node: node, nowMs: 2_000, drafts: Self.drafts,
                                                  completion: $0) }
        }
        // A join that node b records late (after the room's last leave, within the settle time)
        // continues the call: no second call_started, no call_ended in between.
        #expect(try store.wait { store.endSettledCalls(nowMs: 2_999, settleMs: 1_000, drafts: Self.drafts, completion: $0) } == 0)
        _ = try store.wait { store.recordSeats([.joined(peer("p4"), transport: "websocket")], node: "b", nowMs: 2_500, drafts: Self.drafts,
                                              completion: $0) }
        #expect(try store.wait { store.endSettledCalls(nowMs: 9_000, settleMs: 1_000, drafts: Self.drafts, completion: $0) } == 0)
        _ = try store.wait { store.recordSeats([.left(peer("p4"), reason: "kicked")], node: "b", nowMs: 3_000, drafts: Self.drafts,
                                              completion: $0) }
        #expect(try store.wait { store.endSettledCalls(nowMs: 3_999, settleMs: 1_000, drafts: Self.drafts, completion: $0) } == 0)
        // Two nodes asking at once end it once.
        let other = try sut.reopen()
        defer { other.close() }
        let stores = [store, lifecycle(other)]
        let ended = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let target = stores[index]
            let count = (try? target.wait { target.endSettledCalls(nowMs: 4_000, settleMs: 1_000, drafts: Self.drafts, completion: $0) }) ?? -1
            ended.withLock { $0.append(count) }
        }
        #expect(ended.withLock { $0 }.sorted() == [0, 1])
        let outbox = sut.outbox
        #expect(try outbox.wait { outbox.pendingWebhooks(completion: $0) }.map(\.eventType) == [
            "call_started", "peer_joined:p1", "peer_joined:p2", "peer_joined:p3", "peer_left:p1", "peer_left:p2", "peer_left:p3",
            "peer_joined:p4", "peer_left:p4", "call_ended:kicked",
        ])
    }

    @Test func testADeadNodesSeatsAreEndedOnceWhenTwoNodesEndThemAtOnce() throws {
        let sut = try ChatBackend.postgres.open()
        defer { sut.close() }
        let store = lifecycle(sut)
        _ = try store.wait { store.recordSeats([.joined(peer("p1"), transport: "websocket"), .joined(peer("p2"), transport: "http"),
                                               .joined(peer("q1", room: "r2"), transport: "websocket")],
                                              node: "dead", nowMs: 1_000, drafts: Self.drafts, completion: $0) }
        _ = try store.wait { store.recordSeats([.joined(peer("p3"), transport: "websocket")], node: "live", nowMs: 1_000, drafts: Self.drafts,
                                              completion: $0) }
        let other = try sut.reopen()
        defer { other.close() }
        let second = lifecycle(other)
        let results = Locked<[[String]]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let target = index == 0 ? store : second
            let nodes = try? target.wait { target.endSeats(ofNodesNotIn: ["live"], node: "live", nowMs: 3_000, reason: "node_lost",
                                                          drafts: Self.drafts, completion: $0) }
            results.withLock { $0.append(nodes ?? ["failed"]) }
        }
        #expect(results.withLock { $0 }.sorted { $0.count < $1.count } == [[], ["dead"]])
        let outbox = sut.outbox
        #expect(try store.wait { store.endSettledCalls(nowMs: 3_000, settleMs: 0, drafts: Self.drafts, completion: $0) } == 1)
        let types = try outbox.wait { outbox.pendingWebhooks(completion: $0) }.map(\.eventType)
        #expect(types == ["call_started", "peer_joined:p1", "peer_joined:p2", "call_started", "peer_joined:q1", "peer_joined:p3",
                          "peer_left:p1", "peer_left:p2", "peer_left:q1", "call_ended:node_lost"])
        // A node starting again under its own id ends what its previous run left.
        #expect(try store.wait { store.endSeats(ofNodesNotIn: nil, node: "live", nowMs: 4_000, reason: "node_lost", drafts: Self.drafts,
                                               completion: $0) } == ["live"])
    }

    @Test func testTwoNodesClaimingAtOnceNeverShareARow() throws {
        let sut = try ChatBackend.postgres.open()
        defer { sut.close() }
        let outbox = sut.outbox
        _ = try outbox.wait { outbox.enqueueWebhooks((0..<200).map { draft("e\($0)", key: "room-\($0)") }, completion: $0) }
        let stores = try (0..<3).map { _ in try sut.reopen() }
        defer { for store in stores { store.close() } }
        let claimed = Locked<[Int64]>([])
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            let mine = stores[index].outbox
            while true {
                let got = (try? mine.wait { mine.claimWebhooks(node: "n\(index)", nowMs: 2_000, leaseMs: 60_000, limit: 7, completion: $0) }) ?? []
                if got.isEmpty { break }
                claimed.withLock { $0 += got.map(\.seq) }
            }
        }
        let all = claimed.withLock { $0 }
        #expect(all.count == 200 && Set(all).count == 200)
    }
}
