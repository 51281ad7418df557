import CallingCore
import XCTest

/// The webhook queue's decisions as a receiver sees them: what is sent, in which order, when it is
/// retried and when it is given up. Time is a plain variable; the "store" is this test assigning seqs.
final class WebhookQueueTests: XCTestCase {
    private var now: Millis = 1_700_000_000_000
    private var nextSeq: Int64 = 1
    private let url = "http://hooks.example/a"
    private let other = "http://hooks.example/b"

    private func makeQueue(_ settings: WebhookQueueSettings = WebhookQueueSettings(retryBaseMs: 1_000, retryMaxMs: 8_000,
                                                                                   timeoutMs: 5_000, maxInFlight: 8))
        -> WebhookQueue
    {
        WebhookQueue(settings: settings)
    }

    private func draft(_ id: String, key: String = "room-1", url: String? = nil) -> WebhookDraft {
        WebhookDraft(id: id, url: url ?? self.url, key: key, eventType: "peer_joined", body: Array(id.utf8), createdAt: now)
    }

    /// Offers drafts and plays the store: every `persist` comes back `stored` with fresh seqs.
    /// Returns every effect except `persist`, including those of the `stored` input.
    @discardableResult
    private func offer(_ queue: inout WebhookQueue, _ drafts: [WebhookDraft]) -> [WebhookQueueEffect] {
        var out: [WebhookQueueEffect] = []
        for effect in queue.handle(.offer(drafts), now: now) {
            guard case .persist(let admitted) = effect else {
                out.append(effect)
                continue
            }
            let stored = admitted.map { draft -> WebhookDelivery in
                defer { nextSeq += 1 }
                return draft.delivery(seq: nextSeq)
            }
            out += queue.handle(.stored(stored), now: now)
        }
        return out
    }

    private func sent(_ effects: [WebhookQueueEffect]) -> [String] {
        effects.compactMap { if case .send(let delivery) = $0 { return delivery.id } else { return nil } }
    }

    private func seq(of id: String, in effects: [WebhookQueueEffect]) -> (Int64, Int)? {
        for case .send(let delivery) in effects where delivery.id == id { return (delivery.seq, delivery.attempts) }
        return nil
    }

    // MARK: - order

    func test_one_room_is_delivered_one_event_at_a_time_in_order() {
        var queue = makeQueue()
        let effects = offer(&queue, [draft("e1"), draft("e2"), draft("e3")])
        XCTAssertEqual(sent(effects), ["e1"], "only the head of a room's lane is in flight")
        let first = queue.handle(.completed(seq: 1, attempt: 1, nil), now: now)
        XCTAssertEqual(first.first, .delivered(WebhookDelivery(seq: 1, id: "e1", url: url, key: "room-1", eventType: "peer_joined",
                                                              body: Array("e1".utf8), attempts: 1, nextAttemptAt: now)))
        XCTAssertEqual(sent(first), ["e2"])
        XCTAssertEqual(sent(queue.handle(.completed(seq: 2, attempt: 1, nil), now: now)), ["e3"])
        XCTAssertEqual(sent(queue.handle(.completed(seq: 3, attempt: 1, nil), now: now)), [])
        XCTAssertEqual(queue.depth, 0)
        XCTAssertNil(queue.nextDeadline)
    }

    func test_drafts_handed_off_to_a_shared_outbox_free_their_room_and_come_back_when_claimed() {
        var queue = makeQueue(WebhookQueueSettings(maxQueued: 2, retryBaseMs: 1_000, retryMaxMs: 8_000, timeoutMs: 5_000, maxInFlight: 8))
        let admitted = queue.handle(.offer([draft("e1"), draft("e2")]), now: now)
        XCTAssertEqual(admitted.count, 1)
        XCTAssertEqual(queue.depth, 2)
        XCTAssertEqual(queue.handle(.handedOff(count: 2), now: now), [])
        XCTAssertEqual(queue.depth, 0, "the rows wait in the shared outbox, not here")
        let claimed = [draft("e1").delivery(seq: 7)]
        XCTAssertEqual(sent(queue.handle(.restore(claimed), now: now)), ["e1"])
        XCTAssertEqual(queue.handle(.restore(claimed), now: now), [], "a head claimed again is not sent twice")
    }

    func test_rooms_and_urls_are_independent_lanes() {
        var queue = makeQueue()
        let effects = offer(&queue, [draft("a1", key: "room-a"), draft("b1", key: "room-b"), draft("a2", key: "room-a"),
                                     draft("x1", key: "room-a", url: other)])
        XCTAssertEqual(sent(effects), ["a1", "b1", "x1"], "oldest first, one per lane")
        // room-b failing does not hold up room-a.
        _ = queue.handle(.completed(seq: 2, attempt: 1, .status(500)), now: now)
        XCTAssertEqual(sent(queue.handle(.completed(seq: 1, attempt: 1, nil), now: now)), ["a2"])
    }

    func test_a_failed_head_blocks_its_lane_until_it_is_delivered() {
        var queue = makeQueue()
        offer(&queue, [draft("e1"), draft("e2")])
        let failed = queue.handle(.completed(seq: 1, attempt: 1, .status(503)), now: now)
        XCTAssertEqual(sent(failed), [], "e2 must not overtake e1")
        now += 1_000
        XCTAssertEqual(sent(queue.handle(.tick, now: now)), ["e1"])
        XCTAssertEqual(sent(queue.handle(.completed(seq: 1, attempt: 2, nil), now: now)), ["e2"])
    }

    // MARK: - retries

    func test_backoff_doubles_up_to_the_maximum() {
        let settings = WebhookQueueSettings(retryBaseMs: 1_000, retryMaxMs: 8_000)
        XCTAssertEqual((1...6).map { settings.backoff(afterAttempts: $0) }, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000])
        XCTAssertEqual(settings.backoff(afterAttempts: 500), 8_000, "no overflow for huge attempt counts")
    }

    func test_a_failure_is_retried_after_its_backoff_and_not_before() {
        var queue = makeQueue()
        offer(&queue, [draft("e1")])
        let failed = queue.handle(.completed(seq: 1, attempt: 1, .status(500)), now: now)
        guard case .attemptFailed(let delivery, .status(500), let retryAt)? = failed.first else {
            return XCTFail("\(failed)")
        }
        XCTAssertEqual(delivery.attempts, 1)
        XCTAssertEqual(retryAt, now + 1_000)
        XCTAssertEqual(queue.nextDeadline, now + 1_000)
        now += 999
        XCTAssertEqual(sent(queue.handle(.tick, now: now)), [])
        now += 1
        let retry = queue.handle(.tick, now: now)
        XCTAssertEqual(seq(of: "e1", in: retry)?.1, 2, "the second attempt")
        _ = queue.handle(.completed(seq: 1, attempt: 2, .transport("connection refused")), now: now)
        XCTAssertEqual(queue.nextDeadline, now + 2_000)
    }

    func test_an_attempt_without_an_answer_times_out_and_a_late_answer_is_ignored() {
        var queue = makeQueue()
        offer(&queue, [draft("e1"), draft("e2")])
        XCTAssertEqual(queue.nextDeadline, now + 5_000)
        now += 5_000
        let expired = queue.handle(.tick, now: now)
        XCTAssertEqual(expired.first, .cancel(seq: 1))
        guard case .attemptFailed(_, .timeout, let retryAt)? = expired.dropFirst().first else { return XCTFail("\(expired)") }
        XCTAssertEqual(retryAt, now + 1_000)
        XCTAssertEqual(queue.inFlight, 0)
        // The answer to the abandoned attempt arrives: it neither delivers e1 nor lets e2 go.
        XCTAssertEqual(queue.handle(.completed(seq: 1, attempt: 1, nil), now: now), [])
        XCTAssertEqual(queue.depth, 2)
        now += 1_000
        XCTAssertEqual(seq(of: "e1", in: queue.handle(.tick, now: now))?.1, 2)
    }

    func test_a_delivery_is_given_up_after_max_attempts_and_the_lane_moves_on() {
        var queue = makeQueue(WebhookQueueSettings(maxAttempts: 3, retryBaseMs: 10, retryMaxMs: 10))
        offer(&queue, [draft("e1"), draft("e2")])
        for attempt in 1...2 {
            let failed = queue.handle(.completed(seq: 1, attempt: attempt, .status(500)), now: now)
            guard case .attemptFailed(_, _, .some)? = failed.first else { return XCTFail("\(failed)") }
            now += 10
            XCTAssertEqual(seq(of: "e1", in: queue.handle(.tick, now: now))?.1, attempt + 1)
        }
        let last = queue.handle(.completed(seq: 1, attempt: 3, .status(500)), now: now)
        guard case .attemptFailed(let delivery, .status(500), nil)? = last.first else { return XCTFail("\(last)") }
        XCTAssertEqual(delivery.id, "e1")
        XCTAssertEqual(sent(last), ["e2"])
        XCTAssertEqual(queue.depth, 1)
    }

    func test_in_flight_attempts_are_capped() {
        var queue = makeQueue(WebhookQueueSettings(maxInFlight: 2))
        let effects = offer(&queue, (1...4).map { draft("e\($0)", key: "room-\($0)") })
        XCTAssertEqual(sent(effects), ["e1", "e2"])
        XCTAssertEqual(queue.inFlight, 2)
        XCTAssertEqual(sent(queue.handle(.completed(seq: 2, attempt: 1, nil), now: now)), ["e3"])
    }

    // MARK: - bounds and restarts

    func test_a_full_queue_drops_new_events() {
        var queue = makeQueue(WebhookQueueSettings(maxQueued: 2))
        let first = queue.handle(.offer([draft("e1"), draft("e2"), draft("e3")]), now: now)
        XCTAssertEqual(first, [.drop(draft("e3")), .persist([draft("e1"), draft("e2")])])
        XCTAssertEqual(queue.depth, 2, "admitted drafts count while they are being stored")
        XCTAssertEqual(queue.handle(.offer([draft("e4")]), now: now), [.drop(draft("e4"))])
        _ = queue.handle(.storeFailed(count: 2), now: now)
        XCTAssertEqual(queue.depth, 0, "a failed write frees its room")
    }

    func test_a_restored_queue_resumes_in_seq_order_with_its_attempt_counts() {
        var queue = makeQueue()
        let restored = [
            WebhookDelivery(seq: 7, id: "late", url: url, key: "room-1", eventType: "peer_left", body: [], attempts: 0,
                            nextAttemptAt: now),
            WebhookDelivery(seq: 5, id: "early", url: url, key: "room-1", eventType: "peer_joined", body: [], attempts: 4,
                            nextAttemptAt: now + 3_000),
        ]
        XCTAssertEqual(sent(queue.handle(.restore(restored), now: now)), [], "the head is still backing off")
        XCTAssertEqual(queue.depth, 2)
        now += 3_000
        let effects = queue.handle(.tick, now: now)
        XCTAssertEqual(sent(effects), ["early"])
        XCTAssertEqual(seq(of: "early", in: effects)?.1, 5, "attempts carry on from the stored count")
    }

    func test_a_long_lane_is_delivered_completely() {
        var queue = makeQueue()
        offer(&queue, (1...500).map { draft("e\($0)") })
        var delivered: [String] = []
        var seq: Int64 = 1
        while let effect = queue.handle(.completed(seq: seq, attempt: 1, nil), now: now).first {
            guard case .delivered(let delivery) = effect else { return XCTFail("\(effect)") }
            delivered.append(delivery.id)
            seq += 1
        }
        XCTAssertEqual(delivered, (1...500).map { "e\($0)" })
        XCTAssertEqual(queue.depth, 0)
    }

    func test_failure_labels_are_bounded() {
        XCTAssertEqual(WebhookFailure.status(503).label, "status_5xx")
        XCTAssertEqual(WebhookFailure.status(404).label, "status_4xx")
        XCTAssertEqual(WebhookFailure.timeout.label, "timeout")
        XCTAssertEqual(WebhookFailure.transport("connection refused").label, "transport")
    }
}
