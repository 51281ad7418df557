import CallingProtocol
import Foundation
import XCTest

final class IdentifiersTests: XCTestCase {
    func test_identifiers_encode_as_plain_json_strings() throws {
        let encoded = try JSONEncoder().encode([PeerID("alice")])
        XCTAssertEqual(String(decoding: encoded, as: UTF8.self), #"["alice"]"#)
        XCTAssertEqual(try JSONDecoder().decode([RoomID].self, from: Data(#"["room-1"]"#.utf8)), [RoomID("room-1")])
        XCTAssertEqual(try JSONDecoder().decode(CallID.self, from: Data(#""call-9""#.utf8)), CallID("call-9"))
    }

    func test_identifiers_print_as_their_raw_value() {
        XCTAssertEqual("\(PeerID("alice"))", "alice")
        XCTAssertEqual("\(RoomID("room-1"))", "room-1")
        XCTAssertEqual("\(CallID("call-1"))", "call-1")
        XCTAssertEqual("\(ConnectionID(42))", "c42")
    }

    func test_literals_and_initialisers_agree() {
        let peer: PeerID = "alice"
        XCTAssertEqual(peer, PeerID("alice"))
        let room: RoomID = "r"
        XCTAssertEqual(room.rawValue, "r")
    }

    func test_identifiers_sort_by_raw_value() {
        XCTAssertEqual([PeerID("carol"), "alice", "bob"].sorted(), ["alice", "bob", "carol"])
        XCTAssertEqual([RoomID("b"), "a"].sorted(), ["a", "b"])
        XCTAssertEqual([ConnectionID(10), ConnectionID(9)].sorted(), [ConnectionID(9), ConnectionID(10)], "numeric, not textual")
    }

    func test_connection_id_spaces_never_meet() {
        let spaces: [ConnectionID.Space] = [.socket, .httpSession, .remoteSeat, .remotePresence, .restoredSeat]
        var seen = Set<ConnectionID>()
        for space in spaces {
            for serial in [UInt64(1), 2, 1 << 40] {
                let id = ConnectionID(space, serial: serial)
                XCTAssertEqual(id.space, space, "\(id)")
                XCTAssertEqual(id.isHTTPSession, space == .httpSession, "\(id)")
                XCTAssertEqual(id.isRemoteSeat, space == .remoteSeat, "\(id)")
                XCTAssertTrue(seen.insert(id).inserted, "\(id) is in two spaces")
            }
        }
        XCTAssertEqual(ConnectionID(.socket, serial: 7), ConnectionID(7), "a socket's id is the transport's count")
        XCTAssertEqual(ConnectionID(.httpSession, serial: 1).rawValue, 1 << 63 | 1)
        XCTAssertEqual(ConnectionID(.remoteSeat, serial: 1).rawValue, 1 << 62 | 1)
        XCTAssertEqual(ConnectionID(.remotePresence, serial: 1).rawValue, 1 << 61 | 1)
        XCTAssertEqual(ConnectionID(.restoredSeat, serial: 1).rawValue, 1 << 60 | 1)
    }

    func test_connection_ids_key_tables_by_value() {
        // The server's ids: consecutive, HTTP-session and other-node flag bits, and the extremes.
        var ids = (1...5_000).map { ConnectionID(UInt64($0)) }
        ids += (1...500).map { ConnectionID(UInt64($0) | 1 << 62) } + (1...500).map { ConnectionID(UInt64($0) | 1 << 61) }
        ids += [ConnectionID(0), ConnectionID(.max)]
        var table: [ConnectionID: UInt64] = [:]
        for id in ids { table[id] = id.rawValue }
        XCTAssertEqual(table.count, ids.count)
        for id in ids { XCTAssertEqual(table[ConnectionID(id.rawValue)], id.rawValue) }
        XCTAssertNil(table[ConnectionID(5_001)])
        for id in ids.prefix(2_500) { table[id] = nil }
        XCTAssertEqual(table.count, ids.count - 2_500)
        XCTAssertEqual(Set(ids).count, ids.count)
        // Equal ids hash alike in every table, whatever its seed.
        for seed in [0, 1, -1, 0x5EED] {
            XCTAssertEqual(ConnectionID(7)._rawHashValue(seed: seed), ConnectionID(7)._rawHashValue(seed: seed))
        }
        XCTAssertNotEqual(ConnectionID(7)._rawHashValue(seed: 0), ConnectionID(8)._rawHashValue(seed: 0))
    }

    func test_identifier_rule() {
        for ok in ["room1", "demo", "p0", "alice@example.com", "room-1.x_y~z", "é", String(repeating: "a", count: 128)] {
            XCTAssertNil(IdentifierRule.violation(of: ok, maxBytes: 128), ok)
        }
        XCTAssertEqual(IdentifierRule.violation(of: "A/B", maxBytes: 128), "must not contain '/' or control characters")
        XCTAssertEqual(IdentifierRule.violation(of: "a\u{1}b", maxBytes: 128), "must not contain '/' or control characters")
        XCTAssertEqual(IdentifierRule.violation(of: "a\u{7F}", maxBytes: 128), "must not contain '/' or control characters")
        XCTAssertEqual(IdentifierRule.violation(of: "a b", maxBytes: 128), "must not contain spaces")
        XCTAssertEqual(IdentifierRule.violation(of: "", maxBytes: 128), "must not be empty")
        XCTAssertEqual(IdentifierRule.violation(of: String(repeating: "a", count: 129), maxBytes: 128), "must be at most 128 bytes")
        XCTAssertEqual(IdentifierRule.violation(of: "éé", maxBytes: 3), "must be at most 3 bytes")
    }
}
