import CallingCore
import CallingStore
import CallingTesting
import Foundation
import XCTest

@testable import CallingServer

/// Chat through the real server and SQLite: acks, dedup, ordering, typing, read markers,
/// history and resume.
final class ChatTests: ServerTestCase {

    private func chat(_ clientID: String, _ text: String = "hello") -> JSONValue {
        ["type": "chat", "payload": ["client_id": .string(clientID), "text": .string(text)]]
    }

    func test_ack_follows_commit_and_others_receive_the_message_with_its_seq() async throws {
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        alice.send(["type": "chat", "payload": ["client_id": "c1", "text": "hi", "meta": ["lang": "en"]]])
        let ack = try await alice.next(type: "chat-ack")
        XCTAssertEqual(ack.payloadObject["client_id"], "c1")
        XCTAssertEqual(ack.payloadObject["seq"], 1)
        // The row is visible to an independent SQLite connection the moment the ack is seen.
        let probe = try SQLiteConnection(path: server.config.databasePath)
        defer { probe.close() }
        let rows = try probe.query("SELECT text FROM chat_messages WHERE room_id = 'room-1' AND seq = 1") { $0.text(0) }
        XCTAssertEqual(rows, ["hi"])

        let message = try await bob.next(type: "chat")
        XCTAssertEqual(message.from, "alice")
        XCTAssertEqual(message.payloadObject["seq"], 1)
        XCTAssertEqual(message.payloadObject["meta"], ["lang": "en"])
        XCTAssertEqual(message.payloadObject["ts"], ack.payloadObject["ts"])
    }

    func test_retried_client_id_gets_the_original_ack_and_no_second_broadcast() async throws {
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        for _ in 0..<5 { alice.send(chat("same-id")) }
        var acks: [Frame] = []
        for _ in 0..<5 { acks.append(try await alice.next(type: "chat-ack")) }
        XCTAssertEqual(Set(acks.map { $0.payloadObject["seq"] }), [1])
        XCTAssertEqual(Set(acks.map { $0.payloadObject["ts"] }).count, 1)
        _ = try await bob.next(type: "chat")
        try await bob.expectNoFrame(within: 0.3)
    }

    func test_seq_is_gap_free_per_room_under_concurrent_senders() async throws {
        let rooms = ["r-a", "r-b", "r-c"]
        var peers: [(String, TestPeer)] = []
        for room in rooms {
            for index in 0..<3 { peers.append((room, try await server.join("p\(index)", room: room))) }
        }
        for (offset, (_, peer)) in peers.enumerated() {
            for n in 0..<30 { peer.send(chat("m\(offset)-\(n)")) }
        }
        for (_, peer) in peers {
            var acked = 0
            while acked < 30 { if try await peer.next()?.type == "chat-ack" { acked += 1 } }
        }
        for room in rooms {
            let token = try server.token(peer: "reader", room: room)
            let (status, body) = try await server.http("GET", "/v1/rooms/\(room)/messages?limit=200", bearer: token)
            XCTAssertEqual(status, 200)
            let page = try JSONParser.parse(Array(body))
            let seqs = page["messages"]?.arrayValue?.compactMap { $0["seq"]?.int64Value } ?? []
            XCTAssertEqual(seqs, Array(1...90), room)
        }
    }

    func test_typing_expires_after_its_ttl_and_clears_on_chat() async throws {
        try restart {
            $0.typingTTLMs = 600
            $0.tickMs = 50
        }
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        alice.send(["type": "typing", "payload": ["typing": true]])
        let typingOn = try await bob.next(type: "typing").payloadObject["typing"]
        XCTAssertEqual(typingOn, true)
        let started = Date()
        let typingOff = try await bob.next(type: "typing", timeout: 3).payloadObject["typing"]
        XCTAssertEqual(typingOff, false)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.4)

        alice.send(["type": "typing", "payload": ["typing": true]])
        let typingAgain = try await bob.next(type: "typing").payloadObject["typing"]
        XCTAssertEqual(typingAgain, true)
        alice.send(chat("c-typing"))
        let typingCleared = try await bob.next(type: "typing").payloadObject["typing"]
        XCTAssertEqual(typingCleared, false)
        let chatAfterTyping = try await bob.next(type: "chat").payloadObject["client_id"]
        XCTAssertEqual(chatAfterTyping, "c-typing")
    }

    func test_read_markers_only_move_forward() async throws {
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        for n in 0..<3 { alice.send(chat("c\(n)")) }
        for _ in 0..<3 { _ = try await alice.next(type: "chat-ack") }
        bob.send(["type": "read", "payload": ["seq": 2]])
        let read = try await alice.next(type: "read")
        XCTAssertEqual(read.from, "bob")
        XCTAssertEqual(read.payloadObject["seq"], 2)
        bob.send(["type": "read", "payload": ["seq": 1]])
        try await alice.expectNoFrame(within: 0.3)

        let again = try await server.join("bob")
        XCTAssertEqual(again.welcome.payloadObject["read_seq"], 2)
        XCTAssertEqual(again.welcome.payloadObject["last_seq"], 3)
        XCTAssertEqual(again.welcome.payloadObject["unread"], 1)
    }

    func test_resume_replays_exactly_what_was_missed_right_after_welcome() async throws {
        let alice = try await server.join("alice")
        for n in 1...5 { alice.send(chat("c\(n)", "message \(n)")) }
        for _ in 0..<5 { _ = try await alice.next(type: "chat-ack") }

        let bob = try await server.join("bob", query: ["last_seq": "2"])
        XCTAssertEqual(bob.welcome.payloadObject["recovered"], true)
        XCTAssertEqual(bob.welcome.payloadObject["replay_count"], 3)
        var replayed: [Int64] = []
        for _ in 0..<3 { replayed.append(try await bob.next().flatMap { $0.payloadObject["seq"]?.int64Value } ?? -1) }
        XCTAssertEqual(replayed, [3, 4, 5])
        alice.send(chat("c6"))
        let liveSeq = try await bob.next(type: "chat").payloadObject["seq"]
        XCTAssertEqual(liveSeq, 6)
    }

    func test_resume_beyond_the_replay_cap_says_not_recovered() async throws {
        try restart { $0.replayCap = 2 }
        let alice = try await server.join("alice")
        for n in 1...5 { alice.send(chat("c\(n)")) }
        for _ in 0..<5 { _ = try await alice.next(type: "chat-ack") }
        let bob = try await server.join("bob", query: ["last_seq": "0"])
        XCTAssertEqual(bob.welcome.payloadObject["recovered"], false)
        XCTAssertEqual(bob.welcome.payloadObject["replay_count"], 2)
    }

    func test_history_pages_and_refuses_bad_parameters_and_other_rooms() async throws {
        try restart { $0.historyMaxLimit = 3 }
        let alice = try await server.join("alice")
        for n in 1...5 { alice.send(chat("c\(n)")) }
        for _ in 0..<5 { _ = try await alice.next(type: "chat-ack") }
        let token = try server.token(peer: "alice")

        let (status, body) = try await server.http("GET", "/v1/rooms/room-1/messages?since_seq=1&limit=50", bearer: token)
        XCTAssertEqual(status, 200)
        let page = try JSONParser.parse(Array(body))
        XCTAssertEqual(page["messages"]?.arrayValue?.compactMap { $0["seq"]?.int64Value }, [2, 3, 4])
        XCTAssertEqual(page["has_more"], true)
        XCTAssertEqual(page["next_since_seq"], 4)

        let (lastStatus, lastBody) = try await server.http("GET", "/v1/rooms/room-1/messages?since_seq=4", bearer: token)
        XCTAssertEqual(lastStatus, 200)
        let last = try JSONParser.parse(Array(lastBody))
        XCTAssertEqual(last["messages"]?.arrayValue?.count, 1)
        XCTAssertEqual(last["has_more"], false)

        // The query's pairs as the transport cuts them: empty pairs skipped, a name without `=` read
        // as empty, the last of a repeated name kept, and a value holding `=` kept whole.
        let (cutStatus, cutBody) = try await server.http(
            "GET", "/v1/rooms/room-1/messages?&since_seq=9&&flag&since_seq=2&limit=1&note=a=b&", bearer: token)
        XCTAssertEqual(cutStatus, 200)
        XCTAssertEqual(try JSONParser.parse(Array(cutBody))["messages"]?.arrayValue?.compactMap { $0["seq"]?.int64Value }, [3])

        let (badStatus, badBody) = try await server.http("GET", "/v1/rooms/room-1/messages?limit=0", bearer: token)
        XCTAssertEqual(badStatus, 400)
        XCTAssertEqual(try JSONParser.parse(Array(badBody))["code"], "bad_parameter")
        let (otherStatus, _) = try await server.http("GET", "/v1/rooms/room-2/messages", bearer: token)
        XCTAssertEqual(otherStatus, 403)
        let (anonymous, _) = try await server.http("GET", "/v1/rooms/room-1/messages")
        XCTAssertEqual(anonymous, 401)
    }

    /// A chat the store cannot commit (another process holds the database's write lock past the
    /// busy timeout) is acked with `unavailable` and reaches nobody else; its retry with the same
    /// client_id is stored, and broadcast, once the lock is gone.
    func test_a_chat_the_store_cannot_commit_is_acked_with_an_error_and_its_retry_is_stored() async throws {
        try restart { $0.sqliteBusyTimeoutMs = 50 }
        let alice = try await server.join("alice")
        let bob = try await server.join("bob")
        let locker = try SQLiteConnection(path: server.config.databasePath)
        defer { locker.close() }
        try locker.execute("BEGIN IMMEDIATE")
        alice.send(chat("c1"))
        let refused = try await alice.next(type: "chat-ack")
        XCTAssertEqual(refused.payloadObject["client_id"], "c1")
        XCTAssertEqual(refused.error?.code, ErrorCode.unavailable.rawValue)
        XCTAssertNil(refused.payloadObject["seq"])
        try await bob.expectNoFrame(within: 0.2)
        try locker.execute("COMMIT")
        alice.send(chat("c1"))
        let ack = try await alice.next(type: "chat-ack")
        XCTAssertNil(ack.error)
        XCTAssertEqual(ack.payloadObject["seq"], 1)
        let message = try await bob.next(type: "chat")
        XCTAssertEqual(message.payloadObject["seq"], 1)
        XCTAssertEqual(message.payloadObject["client_id"], "c1")
    }

    func test_invalid_chat_gets_an_ack_with_error_and_is_not_stored() async throws {
        let alice = try await server.join("alice")
        alice.send(chat("blank", "   "))
        let ack = try await alice.next(type: "chat-ack")
        XCTAssertEqual(ack.payloadObject["client_id"], "blank")
        XCTAssertEqual(ack.error?.code, ErrorCode.chatEmpty.rawValue)
        alice.send(chat("ok"))
        let firstSeqAfterError = try await alice.next(type: "chat-ack").payloadObject["seq"]
        XCTAssertEqual(firstSeqAfterError, 1)
    }
}
