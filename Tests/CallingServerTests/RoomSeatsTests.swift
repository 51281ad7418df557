import CallingCore
import CallingRedis
import CallingTesting
import Foundation
import XCTest

@testable import CallingServer

/// The cluster's shared seat count (`RoomSeats`): its scripts against a real redis-server.
final class RoomSeatsTests: XCTestCase {
    var redis: RedisServer!
    let prefix = "calling:"

    override func setUpWithError() throws {
        guard RedisServer.binary != nil else { throw XCTSkip("redis-server is not installed (deploy/install-deps.sh --test)") }
        redis = try RedisServer()
    }

    override func tearDown() { redis = nil }

    func connect() throws -> RedisConnection { try RedisConnection.connect(try RedisEndpoint(url: redis.url), timeoutMs: 2_000) }

    func identity(_ peer: String, room: String = "r") -> PeerIdentity {
        PeerIdentity(peer: PeerID(peer), room: RoomID(room), role: "peer")
    }

    func admit(_ connection: RedisConnection, _ peer: String, node: String, limit: Int, room: String = "r") throws -> SeatAdmission {
        RoomSeats.admission(from: try connection.command(bytes: RoomSeats.admitCommand(prefix: prefix, node: node, identity(peer, room: room),
                                                                                        limit: limit)))
    }

    func holders(_ connection: RedisConnection, room: String = "r") throws -> [String: String] {
        let items = try connection.command(["HGETALL", prefix + "roomseats:" + room]).array ?? []
        var out: [String: String] = [:]
        var index = 0
        while index + 1 < items.count {
            out[items[index].text ?? ""] = items[index + 1].text
            index += 2
        }
        return out
    }

    func alive(_ connection: RedisConnection, _ nodes: String...) throws {
        for node in nodes { try connection.command(["SET", prefix + "alive:" + node, "1"]) }
    }

    func test_the_limit_counts_distinct_peer_ids_of_every_live_node_and_a_seated_peer_id_is_not_a_new_seat() throws {
        let redis = try connect()
        try alive(redis, "a", "b")
        XCTAssertEqual(try admit(redis, "p1", node: "a", limit: 2), .admitted(added: true))
        XCTAssertEqual(try admit(redis, "p2", node: "b", limit: 2), .admitted(added: true))
        XCTAssertEqual(try admit(redis, "p3", node: "a", limit: 2), .refused)
        XCTAssertEqual(try admit(redis, "p3", node: "b", limit: 2), .refused)
        // p1 reconnecting through the other node: the seat it holds, not a third.
        XCTAssertEqual(try admit(redis, "p1", node: "b", limit: 2), .admitted(added: false))
        XCTAssertEqual(try holders(redis), ["p1": "a", "p2": "b"])
        // Another room is counted apart; 0 is no limit.
        XCTAssertEqual(try admit(redis, "p3", node: "a", limit: 2, room: "other"), .admitted(added: true))
        XCTAssertEqual(try admit(redis, "p4", node: "a", limit: 0), .admitted(added: true))
    }

    func test_seats_of_a_node_whose_heartbeat_is_gone_do_not_count_and_are_removed() throws {
        let redis = try connect()
        try alive(redis, "a")
        XCTAssertEqual(try admit(redis, "p1", node: "dead", limit: 2), .admitted(added: true), "a node's own seats count without its heartbeat")
        XCTAssertEqual(try admit(redis, "p2", node: "dead", limit: 2), .admitted(added: true))
        XCTAssertEqual(try admit(redis, "p3", node: "a", limit: 2), .admitted(added: true))
        XCTAssertEqual(try holders(redis), ["p3": "a"])
    }

    func test_a_release_frees_only_the_holders_seat_and_reset_replaces_or_forgets_a_nodes_seats() throws {
        let redis = try connect()
        try alive(redis, "a", "b")
        _ = try admit(redis, "p1", node: "a", limit: 2)
        _ = try admit(redis, "p2", node: "a", limit: 2)
        _ = try admit(redis, "q1", node: "a", limit: 5, room: "q")
        // b took p2 over (its join claims the seat); a's later drop of p2 must leave b's seat.
        for command in RoomSeats.claimCommands(prefix: prefix, node: "b", room: RoomID("r"), peer: PeerID("p2")) { try redis.command(bytes: command) }
        try redis.command(bytes: RoomSeats.releaseCommand(prefix: prefix, node: "a", room: RoomID("r"), peer: PeerID("p2")))
        XCTAssertEqual(try holders(redis), ["p1": "a", "p2": "b"])
        try redis.command(bytes: RoomSeats.releaseCommand(prefix: prefix, node: "a", room: RoomID("r"), peer: PeerID("p1")))
        XCTAssertEqual(try holders(redis), ["p2": "b"])
        XCTAssertEqual(Set(try redis.command(["SMEMBERS", prefix + "noderooms:a"]).array?.compactMap(\.text) ?? []), ["q"],
                       "a holds no seat in r any more")
        // a registers again with exactly these seats.
        try redis.command(bytes: RoomSeats.resetCommand(prefix: prefix, node: "a", seats: [(RoomID("r"), PeerID("p9"))]))
        XCTAssertEqual(try holders(redis), ["p2": "b", "p9": "a"])
        XCTAssertEqual(try holders(redis, room: "q"), [:])
        // The node that forgets b (gone) gives back every seat of b's.
        try redis.command(bytes: RoomSeats.resetCommand(prefix: prefix, node: "b", seats: []))
        XCTAssertEqual(try holders(redis), ["p9": "a"])
        XCTAssertEqual(try redis.command(["EXISTS", prefix + "noderooms:b"]).integer, 0)
    }

    func test_joins_on_many_connections_at_once_never_fill_more_than_the_limit() throws {
        let endpoint = try RedisEndpoint(url: redis.url)
        try alive(try connect(), "a", "b", "c")
        for trial in 0..<20 {
            let joiners = 6
            let connections = try (0..<joiners).map { _ in try RedisConnection.connect(endpoint, timeoutMs: 2_000) }
            let results = Locked<[SeatAdmission]>([])
            let start = DispatchSemaphore(value: 0)
            let group = DispatchGroup()
            for index in 0..<joiners {
                let connection = UncheckedBox(connections[index])
                DispatchQueue.global().async(group: group) {
                    start.wait()
                    let command = RoomSeats.admitCommand(prefix: "calling:", node: ["a", "b", "c"][index % 3],
                                                         PeerIdentity(peer: PeerID("p\(index)"), room: RoomID("t\(trial)"), role: "peer"),
                                                         limit: 2)
                    let reply = (try? connection.value.command(bytes: command)) ?? .null
                    results.withLock { $0.append(RoomSeats.admission(from: reply)) }
                }
            }
            for _ in 0..<joiners { start.signal() }
            group.wait()
            let all = results.withLock { $0 }
            XCTAssertEqual(all.filter { $0 == .admitted(added: true) }.count, 2, "trial \(trial): \(all)")
            XCTAssertEqual(all.filter { $0 == .refused }.count, joiners - 2, "trial \(trial)")
        }
    }
}

/// Hands a connection to one other thread (each connection is used by one thread at a time).
private struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

private final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
