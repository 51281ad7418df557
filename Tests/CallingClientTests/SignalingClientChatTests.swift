import Foundation
import XCTest

@testable import CallingClient

/// Chat through the real server and SQLite: acks, retries with the same client_id, typing,
/// read markers and history.
final class SignalingClientChatTests: ClientTestCase {
    func test_sendChat_returns_the_ack_and_the_other_peer_receives_the_message_once() async throws {
        let alice = try server.client("alice")
        let bob = try server.client("bob")
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        let ack = try await alice.sendChat("hi", meta: ["lang": "en"], clientID: "c1")
        XCTAssertEqual(ack.seq, 1)
        XCTAssertEqual(ack.clientID, "c1")
        XCTAssertEqual(alice.lastSeq, 1)
        let message = try await bobEvents.first { $0.chatMessage }
        XCTAssertEqual(message.from, "alice")
        XCTAssertEqual(message.text, "hi")
        XCTAssertEqual(message.meta, ["lang": "en"])
        XCTAssertEqual(message.ts, ack.ts)
        XCTAssertEqual(bob.lastSeq, 1)

        do {
            _ = try await alice.sendChat("   ")
            XCTFail("an empty chat must be refused")
        } catch let error as CallingError {
            XCTAssertEqual(error.serverCode, 440)
            XCTAssertFalse(error.isRetryable)
        }
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_an_ack_that_is_late_is_retried_with_the_same_client_id_and_stored_once() async throws {
        let alice = try server.client("alice") { $0.chatAckTimeout = 0.3 }
        let bob = try server.client("bob")
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        // alice stops reading: the server commits and acks, but the ack sits in the socket until
        // the timeout has fired and the same client_id has been sent again.
        alice.pauseReadingForTesting()
        let sending = Task { try await alice.sendChat("exactly once", clientID: "retry-me") }
        try await Task.sleep(nanoseconds: 800_000_000)
        alice.resumeReadingForTesting()
        let ack = try await sending.value
        XCTAssertEqual(ack.seq, 1)
        let duplicates = try await server.metric("calling_chat_duplicates_total")
        XCTAssertGreaterThanOrEqual(duplicates, 1, "the retry reached the server")

        let page = try await alice.fetchMessages()
        XCTAssertEqual(page.messages.map(\.clientID), ["retry-me"])
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertEqual(bobEvents.all.compactMap(\.chatMessage).map(\.seq), [1])
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_an_ack_that_never_comes_fails_after_the_configured_attempts() async throws {
        let alice = try server.client("alice") {
            $0.chatAckTimeout = 0.2
            $0.chatMaxAttempts = 2
        }
        try await alice.connect()
        alice.setInboundFilterForTesting { type, _ in type != "chat-ack" }
        do {
            _ = try await alice.sendChat("lost acks")
            XCTFail("must time out")
        } catch let error as CallingError {
            XCTAssertEqual(error, CallingError(.timedOut("chat-ack")))
            XCTAssertTrue(error.isRetryable)
        }
        await alice.disconnect()
    }

    func test_typing_turns_itself_off() async throws {
        let alice = try server.client("alice") { $0.typingTimeout = 0.3 }
        let bob = try server.client("bob")
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        alice.setTyping(true)
        alice.setTyping(true)  // a renewal is not sent again
        _ = try await bobEvents.first { if case .typing("alice", true) = $0 { true } else { nil } }
        // The server's own expiry is 6 s; an off within 2 s is the client's auto-off.
        _ = try await bobEvents.first(timeout: 2) { if case .typing("alice", false) = $0 { true } else { nil } }
        XCTAssertEqual(bobEvents.all.filter { if case .typing = $0 { true } else { false } }.count, 2)
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_markRead_reaches_the_other_peer() async throws {
        let alice = try server.client("alice")
        let bob = try server.client("bob")
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        _ = try await alice.sendChat("read me")
        let message = try await bobEvents.first { $0.chatMessage }
        try bob.markRead(message.seq)
        let read = try await aliceEvents.first { if case .read(let from, let seq) = $0 { (from, seq) } else { nil } }
        XCTAssertEqual(read.0, "bob")
        XCTAssertEqual(read.1, 1)
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_fetchMessages_pages_history_with_the_room_from_the_token() async throws {
        let alice = try server.client("alice")
        try await alice.connect()
        for n in 1...3 { _ = try await alice.sendChat("m\(n)") }
        await alice.disconnect()

        // A client that never connected reads the room id from its JWT.
        let reader = try server.client("reader")
        let first = try await reader.fetchMessages(sinceSeq: 0, limit: 2)
        XCTAssertEqual(first.roomID, "room-1")
        XCTAssertEqual(first.messages.map(\.text), ["m1", "m2"])
        XCTAssertTrue(first.hasMore)
        XCTAssertEqual(first.lastSeq, 3)
        let second = try await reader.fetchMessages(sinceSeq: first.nextSinceSeq, limit: 2)
        XCTAssertEqual(second.messages.map(\.seq), [3])
        XCTAssertFalse(second.hasMore)
        XCTAssertEqual(second.messages.first?.from, "alice")

        let other = try server.client("x", token: server.token(peer: "x", room: "room-2"))
        let empty = try await other.fetchMessages()
        XCTAssertEqual(empty.messages, [])
    }
}
