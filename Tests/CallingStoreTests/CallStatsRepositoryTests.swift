import CallingCore
import CallingStore
import XCTest

/// Quality samples on a real SQLite file: attribution to a call, and the aggregates the stats API serves.
final class CallStatsRepositoryTests: XCTestCase {
    func testSamplesAreStoredPerPeerWithAggregatesThatSkipMissingFields() throws {
        let store = try makeStore()
        let report = try store.sync { db in
            let stats = CallStatsRepository(db: db)
            let stored = try stats.insert([
                StatsDraft(room: "r1", call: "c1", peer: "bob", sample: StatsSample(rttMs: 40, jitterMs: 2, packetLoss: 0.1), timestampMs: 2),
                StatsDraft(room: "r1", call: "c1", peer: "alice", sample: StatsSample(rttMs: 20, jitterMs: 4, packetLoss: 0.0,
                                                                                       bitrateKbps: 800), timestampMs: 1),
                StatsDraft(room: "r1", call: "c1", peer: "alice", sample: StatsSample(rttMs: 30, packetLoss: 0.02), timestampMs: 6),
                StatsDraft(room: "r1", call: "other", peer: "alice", sample: StatsSample(rttMs: 999), timestampMs: 7),
            ])
            XCTAssertEqual(stored, 4)
            return try stats.report(call: "c1")
        }
        XCTAssertEqual(report.peers.map(\.peer), ["alice", "bob"])
        let alice = report.peers[0]
        XCTAssertEqual(alice.samples.map(\.timestampMs), [1, 6], "oldest first")
        XCTAssertEqual(alice.samples[1].sample, StatsSample(rttMs: 30, packetLoss: 0.02), "absent fields read back absent")
        XCTAssertEqual(alice.aggregate, StatsAggregate(samples: 2, avgRTTMs: 25, maxRTTMs: 30, avgJitterMs: 4, maxPacketLoss: 0.02,
                                                       avgBitrateKbps: 800))
        XCTAssertEqual(report.overall.samples, 3, "another call's samples are not counted")
        XCTAssertEqual(report.overall.maxRTTMs, 40)
        XCTAssertEqual(report.overall.maxPacketLoss, 0.1)
        XCTAssertEqual(try XCTUnwrap(report.overall.avgRTTMs), 30, accuracy: 1e-9)
    }

    func testASampleWithoutACallGoesToTheRoomsLiveCallOrIsDropped() throws {
        let store = try makeStore()
        let (stored, report) = try store.sync { db in
            try CallRepository(db: db).insert(CallRecord(call: "live", room: "r1", createdMs: 1, expiresMs: 2))
            let stored = try CallStatsRepository(db: db).insert([
                StatsDraft(room: "r1", call: nil, peer: "alice", sample: StatsSample(rttMs: 10), timestampMs: 5),
                StatsDraft(room: "no-call", call: nil, peer: "bob", sample: StatsSample(rttMs: 10), timestampMs: 5),
            ])
            return (stored, try CallStatsRepository(db: db).report(call: "live"))
        }
        XCTAssertEqual(stored, 1)
        XCTAssertEqual(report.peers.map(\.peer), ["alice"])
    }

    func testACallWithoutSamplesHasAnEmptyReport() throws {
        let store = try makeStore()
        let report = try store.sync { try CallStatsRepository(db: $0).report(call: "none") }
        XCTAssertEqual(report, CallStatsReport(call: "none", peers: [], overall: StatsAggregate(samples: 0)))
    }
}
