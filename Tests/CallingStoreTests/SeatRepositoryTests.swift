import CallingCore
import CallingStore
import XCTest

/// The `seats` table (schema/008_seats.sql): what a restarted server seats again in their grace.
final class SeatRepositoryTests: XCTestCase {
    private func record(_ peer: PeerID, room: RoomID = "r1", joined: Int64, credential: TokenCredential? = nil,
                        name: String? = nil) -> SeatRecord {
        SeatRecord(identity: PeerIdentity(peer: peer, room: room, call: "c1", role: "agent", name: name, maxPeers: 2,
                                          credential: credential),
                   callStartedMs: 1_000, joinedMs: joined)
    }

    func testSeatsRoundTripInJoinOrderAndEndedOnesAreForgotten() throws {
        let store = try makeStore()
        let alice = record("alice", joined: 2_000, credential: TokenCredential(id: "jti-a", expiresAt: 9_000), name: "Alice")
        let bob = record("bob", joined: 1_500, credential: TokenCredential(issuedAt: 10, expires: 20, expiresAt: 21_000))
        let carol = record("carol", room: "r0", joined: 3_000)
        try store.sync { db in
            try SeatRepository(db: db).apply([.save(alice), .save(bob), .save(carol), .remove(room: "r0", peer: "carol")])
            XCTAssertEqual(try SeatRepository(db: db).all(), [bob, alice], "by room, then join time; carol forgotten")
        }
    }

    func testSavingASeatAgainKeepsItsJoinTimeAndCallStart() throws {
        let store = try makeStore()
        let first = record("alice", joined: 2_000, credential: TokenCredential(id: "old", expiresAt: 9_000))
        var again = record("alice", joined: 5_000, credential: TokenCredential(id: "new", expiresAt: 19_000), name: "A")
        again.callStartedMs = 4_000
        try store.sync { db in
            try SeatRepository(db: db).apply([.save(first)])
            try SeatRepository(db: db).apply([.save(again)])
            let saved = try XCTUnwrap(try SeatRepository(db: db).all().first)
            XCTAssertEqual(saved.identity, again.identity, "the newest token and name")
            XCTAssertEqual([saved.joinedMs, saved.callStartedMs], [2_000, 1_000], "the seat's first join and its call's start")
        }
    }
}
