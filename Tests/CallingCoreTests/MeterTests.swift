import CallingCore
import CallingTesting
import XCTest

/// The consultation meter with a manual clock: the pure `Meter`, then the hub hooks as a room hears them.
final class MeterTests: XCTestCase {
    private let clock = ManualClock()
    private var now: Millis { clock.now }

    /// 10 s budget, warning at 3 s left, announced every 2 s.
    private func meter(elapsedMs: Millis = 0, state: Meter.State = .running) -> Meter {
        Meter(limitMs: 10_000, warningMs: 3_000, intervalMs: 2_000, elapsedMs: elapsedMs,
              startedAt: elapsedMs > 0 ? 1 : nil, state: state)
    }

    private func payload(_ state: String, elapsed: Int64, remaining: Int64, limit: Int64 = 10) -> JSONValue {
        ["state": .string(state), "elapsed_s": .int(elapsed), "limit_s": .int(limit), "remaining_s": .int(remaining)]
    }

    // MARK: - Meter

    func testANewMeterCountsNothingUntilResumed() {
        var meter = meter()
        XCTAssertFalse(meter.isRunning)
        clock.advance(byMs: 60_000)
        XCTAssertNil(meter.advance(now: now))
        XCTAssertEqual(meter.elapsed(at: now), 0)
        XCTAssertNil(meter.pause(now: now), "pausing a paused meter persists nothing")
    }

    func testARunningMeterIsAnnouncedAtStartEveryIntervalAndOnEachStateChange() throws {
        var meter = meter()
        let start = try XCTUnwrap(meter.resume(now: now))
        XCTAssertEqual(start.frame.payload, payload("running", elapsed: 0, remaining: 10))
        XCTAssertEqual(start.startedAt, now)

        clock.advance(byMs: 1_999)
        XCTAssertNil(meter.advance(now: now), "not yet an interval")
        clock.advance(byMs: 1)
        XCTAssertEqual(meter.advance(now: now)?.frame.payload, payload("running", elapsed: 2, remaining: 8))

        clock.advance(byMs: 5_000)  // 7 s counted: 3 s left is the warning threshold, before the next interval
        XCTAssertEqual(meter.advance(now: now)?.frame.payload, payload("warning", elapsed: 7, remaining: 3))
        clock.advance(byMs: 1_000)
        XCTAssertNil(meter.advance(now: now))

        clock.advance(byMs: 2_500)  // past the limit: ended, clamped to it
        let ended = try XCTUnwrap(meter.advance(now: now))
        XCTAssertEqual(ended.frame.payload, payload("ended", elapsed: 10, remaining: 0))
        XCTAssertEqual(ended.elapsedMs, 10_000)
        XCTAssertFalse(meter.isRunning)
        clock.advance(byMs: 10_000)
        XCTAssertNil(meter.advance(now: now), "an ended meter says nothing more")
        XCTAssertNil(meter.resume(now: now), "and cannot start again")
    }

    func testAPausedMeterStopsCountingAndResumesWhereItStopped() throws {
        var meter = meter()
        _ = meter.resume(now: now)
        clock.advance(byMs: 4_500)
        let paused = try XCTUnwrap(meter.pause(now: now))
        XCTAssertEqual(paused.elapsedMs, 4_500)
        XCTAssertEqual(paused.state, .running)

        clock.advance(byMs: 600_000)
        XCTAssertNil(meter.advance(now: now))
        let resumed = try XCTUnwrap(meter.resume(now: now))
        XCTAssertEqual(resumed.elapsedMs, 4_500)
        XCTAssertEqual(resumed.frame.payload, payload("running", elapsed: 4, remaining: 6), "seconds: elapsed down, remaining up")
        XCTAssertNil(meter.resume(now: now), "resuming a running meter announces nothing")
    }

    func testAMeterRestoredFromTheStoreContinuesFromItsElapsedTime() throws {
        var restored = meter(elapsedMs: 8_000, state: .warning)
        let resumed = try XCTUnwrap(restored.resume(now: now))
        XCTAssertEqual(resumed.frame.payload, payload("warning", elapsed: 8, remaining: 2))
        XCTAssertEqual(resumed.startedAt, 1, "the first start time survives")
        clock.advance(byMs: 2_000)
        XCTAssertEqual(restored.advance(now: now)?.state, .ended)

        var spent = meter(elapsedMs: 10_000, state: .warning)
        XCTAssertEqual(spent.resume(now: now)?.state, .ended, "persisted at its limit: ends as soon as it resumes")
    }

    func testAWarningThresholdAboveTheLimitWarnsFromTheStart() {
        var meter = Meter(limitMs: 30_000, warningMs: 60_000, intervalMs: 15_000)
        XCTAssertEqual(meter.resume(now: now)?.state, .warning)
    }

    // MARK: - Hub

    private var hub = Hub()
    private let room: RoomID = "consult"
    private let patient = ConnectionID(1)
    private let doctor = ConnectionID(2)
    private let nurse = ConnectionID(3)

    @discardableResult
    private func join(_ connection: ConnectionID, _ peer: PeerID) -> [HubEffect] {
        hub.handle(.join(connection, PeerIdentity(peer: peer, room: room), ChatResume()), now: now)
    }

    private func meterFrames(_ effects: [HubEffect], to connection: ConnectionID) -> [JSONValue] {
        effects.compactMap { effect in
            guard case .send(let targets, let frame) = effect, frame.type == "meter", targets.contains(connection) else { return nil }
            return frame.payload
        }
    }

    private func stored(_ effects: [HubEffect]) -> [MeterSnapshot] {
        effects.compactMap { if case .storeMeter(_, let snapshot) = $0 { return snapshot } else { return nil } }
    }

    private func closes(_ effects: [HubEffect]) -> [ConnectionID: CloseCode] {
        Dictionary(uniqueKeysWithValues: effects.compactMap { if case .close(let c, let code) = $0 { return (c, code) } else { return nil } })
    }

    func testTheMeterStartsWhenTheSecondParticipantJoinsAndEndsByClosingEveryone() {
        join(patient, "patient")
        XCTAssertEqual(hub.handle(.attachMeter(room, meter()), now: now), [], "one participant: nothing counts yet")
        clock.advance(byMs: 30_000)

        let started = join(doctor, "doctor")
        XCTAssertEqual(meterFrames(started, to: patient), [payload("running", elapsed: 0, remaining: 10)])
        XCTAssertEqual(meterFrames(started, to: doctor), [payload("running", elapsed: 0, remaining: 10)])
        XCTAssertEqual(stored(started).map(\.state), [.running])

        clock.advance(byMs: 2_000)
        let interval = hub.handle(.tick, now: now)
        XCTAssertEqual(meterFrames(interval, to: doctor), [payload("running", elapsed: 2, remaining: 8)])
        XCTAssertEqual(stored(interval).map(\.elapsedMs), [2_000], "every announcement is persisted")

        clock.advance(byMs: 5_000)
        XCTAssertEqual(meterFrames(hub.handle(.tick, now: now), to: patient), [payload("warning", elapsed: 7, remaining: 3)])

        clock.advance(byMs: 3_000)
        let ended = hub.handle(.tick, now: now)
        XCTAssertEqual(meterFrames(ended, to: patient), [payload("ended", elapsed: 10, remaining: 0)])
        XCTAssertEqual(stored(ended).map(\.state), [.ended])
        XCTAssertEqual(closes(ended), [patient: .consultationEnded, doctor: .consultationEnded])
        XCTAssertTrue(CloseCode.consultationEnded.isTerminal)
        // The ended frame is queued before the closes, so clients read it before the socket goes.
        let firstClose = ended.firstIndex { if case .close = $0 { return true } else { return false } }
        let endedFrame = ended.firstIndex { if case .send(_, let frame) = $0 { return frame.type == "meter" } else { return false } }
        XCTAssertLessThan(try XCTUnwrap(endedFrame), try XCTUnwrap(firstClose))
    }

    func testLeavingPausesTheMeterAndRejoiningResumesIt() {
        join(patient, "patient")
        join(doctor, "doctor")
        _ = hub.handle(.attachMeter(room, meter()), now: now)
        clock.advance(byMs: 4_000)
        let left = hub.handle(.disconnect(doctor), now: now)
        XCTAssertEqual(stored(left).map(\.elapsedMs), [4_000], "the pause is persisted")
        XCTAssertEqual(meterFrames(left, to: patient), [])

        clock.advance(byMs: 120_000)
        XCTAssertEqual(meterFrames(hub.handle(.tick, now: now), to: patient), [], "alone, nothing counts")
        let back = join(doctor, "doctor")
        XCTAssertEqual(meterFrames(back, to: patient), [payload("running", elapsed: 4, remaining: 6)])

        let third = join(nurse, "nurse")
        XCTAssertEqual(meterFrames(third, to: nurse), [payload("running", elapsed: 4, remaining: 6)], "a later joiner is told")
        XCTAssertEqual(meterFrames(third, to: patient), [], "the others heard nothing new")
        XCTAssertEqual(stored(third), [])
    }

    func testTheLastLeaveForgetsTheMeterAndASpentMeterClosesAnyoneWhoComesBack() {
        join(patient, "patient")
        join(doctor, "doctor")
        _ = hub.handle(.attachMeter(room, meter()), now: now)
        clock.advance(byMs: 1_000)
        _ = hub.handle(.disconnect(patient), now: now)
        _ = hub.handle(.disconnect(doctor), now: now)
        XCTAssertNil(hub.meter(of: room), "an empty room keeps nothing; the store has the meter")

        // After a restart the service attaches what it loaded: an ended meter.
        join(patient, "patient")
        let attached = hub.handle(.attachMeter(room, meter(elapsedMs: 10_000, state: .ended)), now: now)
        XCTAssertEqual(meterFrames(attached, to: patient), [payload("ended", elapsed: 10, remaining: 0)])
        XCTAssertEqual(closes(attached), [patient: .consultationEnded])
        XCTAssertEqual(stored(attached), [], "already stored as ended")

        let late = join(doctor, "doctor")
        XCTAssertEqual(meterFrames(late, to: doctor), [payload("ended", elapsed: 10, remaining: 0)])
        XCTAssertEqual(closes(late), [doctor: .consultationEnded])
    }

    func testASecondMeterForTheSameRoomAndAMeterForAnEmptyRoomAreIgnored() {
        XCTAssertEqual(hub.handle(.attachMeter(room, meter()), now: now), [])
        XCTAssertNil(hub.meter(of: room))
        join(patient, "patient")
        _ = hub.handle(.attachMeter(room, meter()), now: now)
        XCTAssertEqual(hub.handle(.attachMeter(room, meter(elapsedMs: 9_000)), now: now), [])
        XCTAssertEqual(hub.meter(of: room)?.elapsed(at: now), 0)
    }

    func testARoomWithoutAMeterNeverHearsOne() {
        join(patient, "patient")
        join(doctor, "doctor")
        clock.advance(byMs: 3_600_000)
        XCTAssertEqual(hub.handle(.tick, now: now), [])
    }
}

extension MeterTests {
    func testPersistingMetersStoresEveryCountingMetersTimeWithoutAnnouncingIt() {
        join(patient, "patient")
        XCTAssertEqual(hub.handle(.attachMeter(room, meter()), now: now), [])
        XCTAssertEqual(hub.persistMeters(now: now), [], "alone: not counting, nothing to store")
        join(doctor, "doctor")
        clock.advance(byMs: 1_500)
        let persisted = hub.persistMeters(now: now)
        XCTAssertEqual(stored(persisted).map(\.elapsedMs), [1_500])
        XCTAssertEqual(stored(persisted).map(\.state), [.running])
        XCTAssertEqual(persisted.count, 1, "no frame to anyone")
        XCTAssertEqual(meterFrames(hub.handle(.tick, now: now), to: patient), [], "the announcement schedule is unchanged")
    }
}
