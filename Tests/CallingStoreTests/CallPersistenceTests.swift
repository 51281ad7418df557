import CallingCore
import CallingStore
import Foundation
import Testing

private func call(_ id: String, room: String = "r1", createdMs: Int64 = 1_000, meter: Int64? = 600) -> CallRecord {
    CallRecord(call: CallID(id), room: RoomID(room), agentID: "agent-7", metadata: #"{"order":42}"#,
               dynamicVariables: #"{"customer_name":"Ada"}"#, meterLimitS: meter, meterWarningS: 60,
               createdMs: createdMs, expiresMs: createdMs + 3_600_000, maxPeers: 3)
}

/// The `CallPersistence` contract (calls and their state, stats, meters), ONE suite run against both
/// stores: the embedded SQLite `ChatStore` and `PostgresChatStore` on a real PostgreSQL server
/// (`TestPostgres`, a fresh database per test), as ChatPersistenceTests does for chat. What only
/// SQLite has (its query plans) stays in CallRepositoryTests.
@Suite(.serialized)
struct CallPersistenceTests {
    @Test(arguments: ChatBackend.allCases)
    func testACallReadsBackAsStoredAndATakenIdIsRefused(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        let stored = call("c1")
        try store.wait { store.createCall(stored, completion: $0) }
        #expect(try store.wait { store.call("c1", completion: $0) } == stored)
        #expect(try store.wait { store.call("nope", completion: $0) } == nil)
        #expect(throws: StoreError.self) { try store.wait { store.createCall(call("c1", room: "r2"), completion: $0) } }
        #expect(try store.wait { store.call("c1", completion: $0) }?.room == "r1")
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheCreatingNodeIsKeptByTheSharedStoreOnlyAndEndsItsCallsOnLastLeave(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        var stored = call("c1")
        stored.node = "node-a"
        try store.wait { store.createCall(stored, completion: $0) }
        // SQLite is one node's store: which node made a call goes without saying there.
        #expect(try store.wait { store.call("c1", completion: $0) }?.node == (backend == .postgres ? "node-a" : nil))
        _ = try store.wait { store.markCallsJoined(room: "r1", nowMs: 2_000, createdAfterMs: 0, completion: $0) }
        // Another node's last leave ends another node's call only where the store does not know nodes.
        let byOther = try store.wait { store.endOngoingCalls(room: "r1", nowMs: 3_000, reason: "x", createdBy: "node-b", completion: $0) }
        #expect(byOther == (backend == .postgres ? [] : ["c1"]))
        if backend == .postgres {
            #expect(try store.wait { store.endOngoingCalls(room: "r1", nowMs: 3_000, reason: "x", createdBy: "node-a", completion: $0) } == ["c1"])
        }
    }

    @Test(arguments: ChatBackend.allCases)
    func testAJoinInsideTheWindowMakesTheRoomsRegisteredCallsOngoingOnce(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        try store.wait { store.createCall(call("c1", room: "r1"), completion: $0) }
        try store.wait { store.createCall(call("c2", room: "r2"), completion: $0) }
        #expect(try store.wait { store.markCallsJoined(room: "r1", nowMs: 5_000, createdAfterMs: 500, completion: $0) } == ["c1"])
        let joined = try store.wait { store.call("c1", completion: $0) }
        #expect(joined?.state == .ongoing)
        #expect(joined?.joinedMs == 5_000)
        #expect(try store.wait { store.call("c2", completion: $0) }?.state == .registered, "another room's call is untouched")
        #expect(try store.wait { store.markCallsJoined(room: "r1", nowMs: 6_000, createdAfterMs: 500, completion: $0) } == [])
        #expect(try store.wait { store.call("c1", completion: $0) }?.joinedMs == 5_000, "joined_ms is the first join")
    }

    @Test(arguments: ChatBackend.allCases)
    func testAnEmptiedRoomEndsItsOngoingCallsAndAnEndedRoomItsLiveOnes(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        try store.wait { store.createCall(call("live", createdMs: 1_000), completion: $0) }
        _ = try store.wait { store.markCallsJoined(room: "r1", nowMs: 2_000, createdAfterMs: 0, completion: $0) }
        try store.wait { store.createCall(call("later", createdMs: 3_000), completion: $0) }
        #expect(try store.wait { store.endOngoingCalls(room: "r1", nowMs: 4_000, reason: "last_peer_left", createdBy: nil, completion: $0) } == ["live"])
        let ended = try store.wait { store.call("live", completion: $0) }
        #expect(ended?.state == .ended)
        #expect(ended?.endReason == "last_peer_left")
        #expect(ended?.endedMs == 4_000)
        #expect(try store.wait { store.call("later", completion: $0) }?.state == .registered, "a registered call keeps its window")
        #expect(try store.wait { store.endLiveCalls(room: "r1", nowMs: 5_000, reason: "ended_by_admin", completion: $0) } == ["later"])
        #expect(try store.wait { store.call("later", completion: $0) }?.endReason == "ended_by_admin")
        #expect(try store.wait { store.endLiveCalls(room: "r1", nowMs: 6_000, reason: "x", completion: $0) } == [])
    }

    @Test(arguments: ChatBackend.allCases)
    func testNobodyJoiningInTimeEndsTheCallAndALateJoinCannotReviveIt(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        try store.wait { store.createCall(call("old", createdMs: 1_000), completion: $0) }
        try store.wait { store.createCall(call("fresh", createdMs: 9_000), completion: $0) }
        #expect(try store.wait { store.markCallsJoined(room: "r1", nowMs: 8_000, createdAfterMs: 3_000, completion: $0) } == ["fresh"])
        let expired = try store.wait {
            store.expireUnjoinedCalls(createdAtOrBeforeMs: 3_000, nowMs: 8_000, reason: "error_user_not_joined", completion: $0)
        }
        #expect(expired.map(\.call) == ["old"])
        #expect(expired.first?.state == .ended)
        #expect(expired.first?.endReason == "error_user_not_joined")
        #expect(try store.wait { store.call("fresh", completion: $0) }?.state == .ongoing, "an ongoing call never expires")
        #expect(try store.wait { store.expireUnjoinedCalls(createdAtOrBeforeMs: 20_000, nowMs: 20_000, reason: "x", completion: $0) } == [])
    }

    @Test(arguments: ChatBackend.allCases)
    func testStatsGoToTheNamedOrTheRoomsLiveCallWithAggregatesThatSkipMissingFields(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        try store.wait { store.createCall(call("c1"), completion: $0) }
        let stored = try store.wait { store.storeStats([
            StatsDraft(room: "r1", call: "c1", peer: "bob", sample: StatsSample(rttMs: 40, jitterMs: 2, packetLoss: 0.1), timestampMs: 2),
            StatsDraft(room: "r1", call: nil, peer: "alice", sample: StatsSample(rttMs: 20, jitterMs: 4, packetLoss: 0.0, bitrateKbps: 800),
                       timestampMs: 1),
            StatsDraft(room: "r1", call: "c1", peer: "alice", sample: StatsSample(rttMs: 30, packetLoss: 0.02), timestampMs: 6),
            StatsDraft(room: "r1", call: "other", peer: "alice", sample: StatsSample(rttMs: 999), timestampMs: 7),
            StatsDraft(room: "no-call", call: nil, peer: "carol", sample: StatsSample(rttMs: 1), timestampMs: 7),
        ], completion: $0) }
        #expect(stored == 4, "a sample without a call in a room without one is dropped")
        let page = try store.wait { store.callStats("c1", completion: $0) }
        #expect(page.call?.call == "c1")
        let report = page.report
        #expect(report.peers.map(\.peer) == ["alice", "bob"])
        #expect(report.peers[0].samples.map(\.timestampMs) == [1, 6], "oldest first")
        #expect(report.peers[0].samples[1].sample == StatsSample(rttMs: 30, packetLoss: 0.02), "absent fields read back absent")
        #expect(report.peers[0].aggregate == StatsAggregate(samples: 2, avgRTTMs: 25, maxRTTMs: 30, avgJitterMs: 4, maxPacketLoss: 0.02,
                                                           avgBitrateKbps: 800))
        #expect(report.overall.samples == 3, "another call's samples are not counted")
        #expect(report.overall.maxPacketLoss == 0.1)
        #expect(abs((report.overall.avgRTTMs ?? 0) - 30) < 1e-9)
        let none = try store.wait { store.callStats("none", completion: $0) }
        #expect(none == CallStatsPage(call: nil, report: CallStatsReport(call: "none", peers: [], overall: StatsAggregate(samples: 0))))
    }

    @Test(arguments: ChatBackend.allCases)
    func testAMeterIsSavedNeverMovesBackEndsTheLiveCallsAndANewCallForgetsIt(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.calls
        try store.wait { store.createCall(call("c1"), completion: $0) }
        let source = try store.wait { store.meterSource(room: "r1", completion: $0) }
        #expect(source == MeterSource(saved: nil, liveCall: call("c1")))
        let running = MeterRecord(room: "r1", startedMs: 1_000, elapsedMs: 5_000, limitS: 600, warningS: 60, state: .running)
        try store.wait { store.saveMeter(running, nowMs: 6_000, endReason: "consultation_ended", completion: $0) }
        var older = running
        older.elapsedMs = 2_000
        older.state = .warning
        try store.wait { store.saveMeter(older, nowMs: 7_000, endReason: "consultation_ended", completion: $0) }
        var expected = running
        expected.state = .warning
        #expect(try store.wait { store.meterSource(room: "r1", completion: $0) }.saved == expected, "elapsed never moves back")
        #expect(try store.wait { store.call("c1", completion: $0) }?.state == .registered)
        var ended = running
        ended.elapsedMs = 600_000
        ended.state = .ended
        try store.wait { store.saveMeter(ended, nowMs: 8_000, endReason: "consultation_ended", completion: $0) }
        let endedCall = try store.wait { store.call("c1", completion: $0) }
        #expect(endedCall?.state == .ended)
        #expect(endedCall?.endReason == "consultation_ended")
        #expect(try store.wait { store.meterSource(room: "r1", completion: $0) } == MeterSource(saved: ended, liveCall: nil))
        try store.wait { store.createCall(call("c2", createdMs: 9_000), completion: $0) }
        #expect(try store.wait { store.meterSource(room: "r1", completion: $0) }.saved == nil, "a new call starts the meter afresh")
    }
}
