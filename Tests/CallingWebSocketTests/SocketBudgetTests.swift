import Foundation
import XCTest

import CallingTransport

/// The socket budget's decisions with integer sockets and a manual clock (docs/architecture.md,
/// "Socket budget"): what is refused, which socket is evicted and in what order, what frees a slot.
final class SocketBudgetTests: XCTestCase {
    private typealias Eviction = SocketBudget<Int>.Eviction

    private func budget(limit: Int, capacity: Int) -> SocketBudget<Int> {
        let budget = SocketBudget<Int>()
        budget.limit = limit
        budget.capacity = capacity
        return budget
    }

    func test_admits_below_the_limit_and_refuses_at_it_evicting_the_oldest_waiting() {
        let budget = budget(limit: 3, capacity: 3)
        XCTAssertEqual(budget.admit(), .accept)
        for socket in 1...3 {
            XCTAssertEqual(budget.adopt(socket, now: UInt64(socket)), [])
        }
        XCTAssertEqual(budget.openSockets, 3)
        // Full: the next accept is refused, and the socket that waited longest for its request goes.
        XCTAssertEqual(budget.admit(), .refuse(evicting: Eviction(socket: 1, readingBody: false)))
        XCTAssertEqual(budget.refusedCount, 1)
        XCTAssertEqual(budget.evictedCount, 1)
        // Still counted until lws destroys it, but no longer live.
        XCTAssertEqual(budget.openSockets, 3)
        XCTAssertEqual(budget.liveSockets, 2)
        XCTAssertEqual(budget.admit(), .refuse(evicting: Eviction(socket: 2, readingBody: false)))
        budget.destroyed(1, wasWebSocket: false)
        budget.destroyed(2, wasWebSocket: false)
        XCTAssertEqual(budget.openSockets, 1)
        XCTAssertEqual(budget.liveSockets, 1)
        XCTAssertEqual(budget.admit(), .accept)
        XCTAssertEqual(budget.pressure.refused, 2)
        XCTAssertEqual(budget.pressure.evicted, 2)
    }

    func test_adopting_into_the_headroom_evicts_the_oldest_waiting_but_never_the_new_socket() {
        let budget = budget(limit: 10, capacity: 2)
        XCTAssertEqual(budget.adopt(1, now: 1), [])
        XCTAssertEqual(budget.adopt(2, now: 2), [])
        XCTAssertEqual(budget.adopt(3, now: 3), [Eviction(socket: 1, readingBody: false)])
        // The evicted socket's close is under way: it does not count against the headroom again.
        XCTAssertEqual(budget.adopt(4, now: 4), [Eviction(socket: 2, readingBody: false)])
        XCTAssertEqual(budget.liveSockets, 2)
        XCTAssertEqual(budget.evictedOpen, 2)
        // Only the new socket waits: nothing may go, and it stays over the headroom.
        let alone = self.budget(limit: 10, capacity: 0)
        XCTAssertEqual(alone.adopt(7, now: 1), [])
        XCTAssertEqual(alone.liveSockets, 1)
    }

    func test_a_busy_socket_is_not_evicted_and_a_body_being_read_is() {
        let budget = budget(limit: 10, capacity: 2)
        _ = budget.adopt(1, now: 1)
        _ = budget.adopt(2, now: 2)
        // 1's request arrived (busy), 2's head arrived and its body is being read.
        budget.socket(1)!.idle = false
        let reading = budget.socket(2)!
        reading.idle = false
        budget.markEvictable(2, reading)
        reading.readingBody = true
        XCTAssertEqual(budget.adopt(3, now: 3), [Eviction(socket: 2, readingBody: true)])
        XCTAssertTrue(reading.evicted)
        XCTAssertFalse(reading.readingBody)
        XCTAssertFalse(budget.socket(1)!.evicted)
    }

    func test_a_socket_idle_again_waits_from_its_new_place_in_the_order() {
        let budget = budget(limit: 10, capacity: 10)
        _ = budget.adopt(1, now: 1)
        _ = budget.adopt(2, now: 2)
        // 1 served a request and is idle again: now it has waited less than 2.
        let first = budget.socket(1)!
        first.idle = false
        first.served += 1
        budget.markIdle(1, first, now: 5, bytesReceived: 300)
        XCTAssertEqual(first.bytesAtIdle, 300)
        XCTAssertEqual(first.idleSince, 5)
        XCTAssertEqual(budget.evictOldestWaiting(except: nil), Eviction(socket: 2, readingBody: false))
        XCTAssertEqual(budget.evictOldestWaiting(except: nil), Eviction(socket: 1, readingBody: false))
        XCTAssertNil(budget.evictOldestWaiting(except: nil))
    }

    func test_upgraded_sockets_keep_their_place_in_the_count_until_destroyed() {
        let budget = budget(limit: 2, capacity: 2)
        _ = budget.adopt(1, now: 1)
        budget.upgraded(1)
        XCTAssertNil(budget.socket(1))
        XCTAssertEqual(budget.openSockets, 1)
        _ = budget.adopt(2, now: 2)
        // The WebSocket is never evicted; the HTTP socket is.
        XCTAssertEqual(budget.admit(), .refuse(evicting: Eviction(socket: 2, readingBody: false)))
        XCTAssertEqual(budget.admit(), .refuse(evicting: nil))
        budget.destroyed(1, wasWebSocket: true)
        budget.destroyed(2, wasWebSocket: false)
        XCTAssertEqual(budget.openSockets, 0)
        XCTAssertEqual(budget.evictedOpen, 0)
    }

    func test_the_header_overflow_culprit_is_the_waiting_socket_with_the_most_bytes_past_the_limit() {
        let budget = budget(limit: 10, capacity: 10)
        for socket in 1...3 { _ = budget.adopt(socket, now: 0) }
        let received: [Int: UInt64] = [1: 9_000, 2: 12_000, 3: 20_000]
        budget.socket(3)!.answered = true  // already answered by the transport: not a candidate
        XCTAssertEqual(budget.headerOverflowCulprit(maxHeaderBytes: 8_192, bytesReceived: { received[$0]! }), 2)
        XCTAssertNil(budget.headerOverflowCulprit(maxHeaderBytes: 16_384, bytesReceived: { received[$0]! }))
    }

    func test_late_heads_and_idle_keep_alives_are_found() {
        let budget = budget(limit: 10, capacity: 10)
        let second: UInt64 = 1_000_000_000
        _ = budget.adopt(1, now: 0)  // never sent a head
        _ = budget.adopt(2, now: 0)  // served once, idle since 1 s, nothing since
        _ = budget.adopt(3, now: 0)  // served once, idle since 1 s, a new head begun
        for socket in [2, 3] {
            let record = budget.socket(socket)!
            record.served = 1
            budget.markIdle(socket, record, now: 1 * second, bytesReceived: 100)
        }
        let bytes: [Int: UInt64] = [1: 0, 2: 100, 3: 150]
        func late(at now: UInt64) -> [Int: Bool] {
            let found = budget.lateSockets(now: now, headerTimeout: 10 * second, keepAliveTimeout: 5 * second,
                                           bytesReceived: { bytes[$0]! })
            return Dictionary(uniqueKeysWithValues: found.map { ($0.socket, $0.headLate) })
        }
        XCTAssertEqual(late(at: 5 * second), [:])
        // Past the keep-alive time: the idle one goes (not a late head); the one whose head began waits.
        XCTAssertEqual(late(at: 7 * second), [2: false])
        XCTAssertEqual(late(at: 11 * second), [1: true, 2: false])
        // Past keep-alive plus header time, the begun head is late.
        XCTAssertEqual(late(at: 17 * second), [1: true, 2: false, 3: true])
    }

    func test_a_tls_socket_destroyed_before_its_handshake_completed_is_a_failure() {
        let budget = budget(limit: 10, capacity: 10)
        _ = budget.adopt(1, now: 0)
        _ = budget.adopt(2, now: 0)
        budget.tlsHandshake(1, started: true, done: false)
        budget.tlsHandshake(2, started: true, done: false)
        budget.tlsHandshake(2, started: false, done: true)
        // TLS 1.3's session tickets start again after the handshake: still done.
        budget.tlsHandshake(2, started: true, done: false)
        budget.destroyed(2, wasWebSocket: false)
        XCTAssertEqual(budget.tlsHandshakeFailures, 0)
        budget.destroyed(1, wasWebSocket: false)
        XCTAssertEqual(budget.tlsHandshakeFailures, 1)
    }

    func test_pressure_is_reported_once_per_interval() {
        let budget = budget(limit: 0, capacity: 0)
        let start = Date(timeIntervalSince1970: 1_000)
        XCTAssertEqual(budget.admit(), .refuse(evicting: nil))
        XCTAssertEqual(budget.pressureReport(now: start, interval: 10)?.refused, 1)
        XCTAssertEqual(budget.admit(), .refuse(evicting: nil))
        XCTAssertNil(budget.pressureReport(now: start + 5, interval: 10))
        XCTAssertEqual(budget.admit(), .refuse(evicting: nil))
        XCTAssertEqual(budget.pressureReport(now: start + 10, interval: 10)?.refused, 2)
    }
}
