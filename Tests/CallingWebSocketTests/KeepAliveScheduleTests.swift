import XCTest

import CallingTransport

/// The keep-alive's decisions against a manual clock (milliseconds): docs/protocol.md, "Keep-alive".
final class KeepAliveScheduleTests: XCTestCase {
    private let ping: Int64 = 30_000
    private let hangUp: Int64 = 75_000

    /// Advances in `step` ms steps from `from` to `to`, answering the PINGs of `answering` sockets
    /// `delay` ms after they went out; returns every action with its time.
    private func run(_ schedule: inout KeepAliveSchedule, from: Int64, to: Int64, step: Int64 = 10,
                     answering: (UInt64) -> Bool = { _ in true }, delay: Int64 = 5) -> [(at: Int64, action: KeepAliveSchedule.Action)] {
        var log: [(Int64, KeepAliveSchedule.Action)] = []
        var pongs: [(at: Int64, id: UInt64)] = []
        var actions: [KeepAliveSchedule.Action] = []
        var now = from
        while now <= to {
            while let first = pongs.first, first.at <= now {
                schedule.confirmed(first.id, at: first.at)
                pongs.removeFirst()
            }
            actions.removeAll()
            schedule.advance(to: now, into: &actions)
            for action in actions {
                log.append((now, action))
                if case .ping(let id) = action, answering(id) { pongs.append((now + delay, id)) }
            }
            now += step
        }
        return log
    }

    private func pings(_ log: [(at: Int64, action: KeepAliveSchedule.Action)], _ id: UInt64) -> [Int64] {
        log.compactMap { $0.action == .ping(id) ? $0.at : nil }
    }

    func test_first_pings_come_between_half_the_interval_and_the_interval_after_the_upgrade_spread_out() {
        var schedule = KeepAliveSchedule(pingAfter: ping, hangUpAfter: hangUp, now: 0, seed: 42)
        // A join storm: 2,000 sockets upgraded within the same 100 ms.
        for id in UInt64(1)...2_000 { schedule.opened(id, at: Int64(id % 100)) }
        var actions: [KeepAliveSchedule.Action] = []
        var firstPing: [UInt64: Int64] = [:]
        var now: Int64 = 0
        while now <= ping + 200 {
            actions.removeAll()
            schedule.advance(to: now, into: &actions)
            for case .ping(let id) in actions { firstPing[id] = firstPing[id] ?? now }
            now += 100
        }
        XCTAssertEqual(firstPing.count, 2_000, "every socket gets its first PING by idle_ping_seconds")
        for (id, at) in firstPing {
            let opened = Int64(id % 100)
            XCTAssertGreaterThanOrEqual(at - opened, ping / 2, "socket \(id)")
            XCTAssertLessThanOrEqual(at - opened, ping + 100, "socket \(id): at most one bucket late")
        }
        // Spread over the half interval, not one instant: no second holds more than a few percent.
        let perSecond = Dictionary(grouping: firstPing.values, by: { $0 / 1_000 }).mapValues(\.count)
        XCTAssertGreaterThanOrEqual(perSecond.count, 14, "\(perSecond.sorted { $0.key < $1.key })")
        XCTAssertLessThanOrEqual(perSecond.values.max() ?? 0, 200, "\(perSecond.sorted { $0.key < $1.key })")
    }

    func test_after_each_pong_the_next_ping_comes_the_interval_later_and_an_answering_socket_stays() {
        var schedule = KeepAliveSchedule(pingAfter: 1_000, hangUpAfter: 3_000, now: 0, seed: 7)
        schedule.opened(1, at: 0)
        let log = run(&schedule, from: 0, to: 20_000)
        XCTAssertFalse(log.contains { $0.action == .hangUp(1) }, "\(log)")
        let times = pings(log, 1)
        XCTAssertGreaterThanOrEqual(times.count, 18, "\(times)")
        // The PONG comes 5 ms after each PING; the next PING 1 s after that PONG, within a bucket.
        for (earlier, later) in zip(times, times.dropFirst()) {
            XCTAssertGreaterThanOrEqual(later - (earlier + 5), 1_000, "\(times)")
            XCTAssertLessThanOrEqual(later - (earlier + 5), 1_100, "\(times)")
        }
        XCTAssertEqual(schedule.count, 1)
    }

    func test_a_socket_that_never_answers_gets_one_ping_and_is_dropped_at_the_hang_up_time() {
        var schedule = KeepAliveSchedule(pingAfter: ping, hangUpAfter: hangUp, now: 1_000, seed: 1)
        schedule.opened(9, at: 1_000)
        let log = run(&schedule, from: 1_000, to: 200_000, answering: { _ in false })
        XCTAssertEqual(pings(log, 9).count, 1, "one PING per confirmation, as lws did: \(log)")
        let hangUps = log.filter { $0.action == .hangUp(9) }.map(\.at)
        XCTAssertEqual(hangUps.count, 1, "\(log)")
        XCTAssertGreaterThanOrEqual(hangUps[0] - 1_000, hangUp, "not before idle_hangup_seconds")
        XCTAssertLessThanOrEqual(hangUps[0] - 1_000, hangUp + 100)
        XCTAssertEqual(schedule.count, 0, "a dropped socket is no longer scheduled")
    }

    func test_a_pong_after_a_late_answer_window_does_not_revive_and_closed_sockets_get_nothing() {
        var schedule = KeepAliveSchedule(pingAfter: 1_000, hangUpAfter: 3_000, now: 0, seed: 3)
        schedule.opened(1, at: 0)
        schedule.opened(2, at: 0)
        schedule.closed(2)
        var log = run(&schedule, from: 0, to: 5_000, answering: { _ in false })
        XCTAssertEqual(log.map(\.action).filter { $0 == .ping(2) || $0 == .hangUp(2) }, [])
        XCTAssertEqual(log.last?.action, .hangUp(1))
        schedule.confirmed(1, at: 5_001)
        log = run(&schedule, from: 5_010, to: 10_000)
        XCTAssertTrue(log.isEmpty, "\(log)")
    }

    func test_a_pong_answering_the_ping_late_still_counts_and_an_unsolicited_pong_defers_the_ping() {
        var schedule = KeepAliveSchedule(pingAfter: 1_000, hangUpAfter: 3_000, now: 0, seed: 5)
        schedule.opened(1, at: 0)
        // Answered 1.9 s after each PING: still inside idle_hangup_seconds of the confirmation.
        let log = run(&schedule, from: 0, to: 15_000, delay: 1_900)
        XCTAssertFalse(log.contains { $0.action == .hangUp(1) }, "\(log)")
        // An unsolicited PONG (RFC 6455 §5.5.3: a heartbeat) confirms too.
        var schedule2 = KeepAliveSchedule(pingAfter: 1_000, hangUpAfter: 3_000, now: 0, seed: 5)
        schedule2.opened(1, at: 0)
        var actions: [KeepAliveSchedule.Action] = []
        for now in stride(from: Int64(0), through: 10_000, by: 10) {
            if now % 400 == 0 { schedule2.confirmed(1, at: now) }
            schedule2.advance(to: now, into: &actions)
        }
        XCTAssertEqual(actions, [], "a socket that sends a PONG every 0.4 s is never due a PING")
    }

    func test_a_clock_that_jumps_past_a_whole_lap_still_acts_once_per_socket_and_gives_a_late_ping_its_answer_time() {
        var schedule = KeepAliveSchedule(pingAfter: 1_000, hangUpAfter: 3_000, now: 0, seed: 11)
        for id in UInt64(1)...50 { schedule.opened(id, at: 0) }
        var actions: [KeepAliveSchedule.Action] = []
        // The service thread stalled for 10 s, longer than the wheel's lap.
        schedule.advance(to: 10_000, into: &actions)
        XCTAssertEqual(Set(actions), Set((1...50).map { KeepAliveSchedule.Action.ping($0) }), "each one PING, none dropped unasked")
        actions.removeAll()
        // idle_hangup_seconds - idle_ping_seconds after the late PING to answer it.
        schedule.advance(to: 11_990, into: &actions)
        XCTAssertEqual(actions, [])
        for id in UInt64(1)...25 { schedule.confirmed(id, at: 11_990) }
        schedule.advance(to: 12_100, into: &actions)
        XCTAssertEqual(Set(actions), Set((26...50).map { KeepAliveSchedule.Action.hangUp($0) }))
        XCTAssertEqual(schedule.count, 25)
    }

    /// The load the issue was about, as a function: 20,000 answering sockets through three rounds,
    /// each PINGed once per round and none dropped.
    func test_twenty_thousand_answering_sockets_each_get_one_ping_per_round() {
        var schedule = KeepAliveSchedule(pingAfter: 10_000, hangUpAfter: 25_000, now: 0, seed: 99)
        for id in UInt64(1)...20_000 { schedule.opened(id, at: Int64(id % 1_000)) }
        let log = run(&schedule, from: 0, to: 33_000, step: 100, delay: 20)
        var perSocket: [UInt64: Int] = [:]
        for entry in log {
            guard case .ping(let id) = entry.action else { return XCTFail("dropped: \(entry)") }
            perSocket[id, default: 0] += 1
        }
        XCTAssertEqual(perSocket.count, 20_000)
        // First PING within 5–11 s, then 10 s after each PONG: three by 33 s for every socket, never four.
        XCTAssertEqual(Set(perSocket.values), [3])
    }
}
