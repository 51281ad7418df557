import CallingAuth
import Foundation
import XCTest

@testable import CallingClient

/// Chat operations (issue 43) through the real server and SQLite: a reply, an edit, reactions
/// added and removed, a delete, the server's refusals, the operations replayed once each on a
/// resume, history backward with the edit log, and the inbox with a user token.
final class SignalingClientChatOperationsTests: ClientTestCase {
    func test_reply_edit_react_delete_resume_history_and_inbox() async throws {
        let alice = try server.client("alice")
        let bob = try server.client("bob")
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()

        let question = try await alice.sendChat("lunch at 12?")
        let answer = try await bob.sendChat("yes", replyTo: question.seq)
        let reply = try await aliceEvents.first { $0.chatMessage.flatMap { $0.seq == answer.seq ? $0 : nil } }
        XCTAssertEqual(reply.replyTo, question.seq)

        let edit = try await bob.editChat(answer.seq, text: "yes, at 12:30")
        XCTAssertGreaterThan(edit.seq, answer.seq, "an edit has a seq of its own")
        let edited = try await aliceEvents.first { event -> ChatEdit? in if case .chatEdited(let edit) = event { edit } else { nil } }
        XCTAssertEqual([edited.target, edited.seq], [answer.seq, edit.seq])
        XCTAssertEqual(edited.text, "yes, at 12:30")
        XCTAssertEqual(edited.from, "bob")

        _ = try await alice.react(answer.seq, key: "👍")
        _ = try await alice.unreact(answer.seq, key: "👍")
        try await bobEvents.waitCount(2) { if case .chatReaction = $0 { true } else { false } }
        let reactions = bobEvents.all.compactMap { event -> ChatReaction? in if case .chatReaction(let r) = event { r } else { nil } }
        XCTAssertEqual(reactions.map(\.removed), [false, true])
        XCTAssertEqual(reactions.map(\.key), ["👍", "👍"])

        for (attempt, code) in [(0, 444), (1, 443), (2, 445)] {
            do {
                switch attempt {
                case 0: _ = try await bob.deleteChat(question.seq)
                case 1: _ = try await alice.editChat(9999, text: "nothing there")
                default: _ = try await alice.react(question.seq, key: "two words")
                }
                XCTFail("must be refused with \(code)")
            } catch let error as CallingError {
                XCTAssertEqual(error.serverCode, code)
                XCTAssertFalse(error.isRetryable)
            }
        }

        let deleted = try await bob.deleteChat(answer.seq)
        let deletion = try await aliceEvents.first { event -> ChatDeletion? in if case .chatDeleted(let d) = event { d } else { nil } }
        XCTAssertEqual([deletion.target, deletion.seq], [answer.seq, deleted.seq])

        // bob away: alice's edit and reaction come back to him once each in the resume replay.
        await bob.disconnect()
        _ = try await alice.editChat(question.seq, text: "lunch at 12:30?")
        _ = try await alice.react(question.seq, key: "🎉")
        let welcome = try await bob.connect()
        XCTAssertTrue(welcome.resumed)
        XCTAssertEqual(welcome.replayCount, 2)
        try await bobEvents.waitCount(1) { if case .chatEdited = $0 { true } else { false } }
        try await bobEvents.waitCount(3) { if case .chatReaction = $0 { true } else { false } }
        XCTAssertEqual(bob.lastSeq, alice.lastSeq)

        let page = try await bob.fetchMessages(beforeSeq: bob.lastSeq + 1, limit: 10, includeEdits: true)
        XCTAssertEqual(page.messages.map(\.seq), [answer.seq, question.seq], "newest first, messages only")
        XCTAssertFalse(page.hasMore)
        let tomb = page.messages[0], first = page.messages[1]
        XCTAssertTrue(tomb.deleted)
        XCTAssertEqual(tomb.text, "")
        XCTAssertEqual(tomb.replyTo, question.seq)
        XCTAssertEqual(first.text, "lunch at 12:30?")
        XCTAssertNotNil(first.editedTS)
        XCTAssertEqual(first.edits?.map(\.text), ["lunch at 12:30?"])
        XCTAssertEqual(first.reactions.map(\.key), ["🎉"])
        XCTAssertEqual(first.reactions.first?.peers, ["alice"])
        let forward = try await bob.fetchMessages()
        XCTAssertEqual(forward.messages.map(\.seq), [question.seq, answer.seq])

        let userToken = try server.issuer.issue(PeerTokenClaims(
            sub: "bob", role: "peer", name: nil, scope: ["user"], audience: server.config.jwtAudience, issuedAt: Date(),
            expiresAt: Date().addingTimeInterval(600)))
        let inbox = try await server.client("bob", token: userToken).inbox(limit: 10)
        XCTAssertEqual(inbox.rooms.map(\.roomID), ["room-1"])
        XCTAssertEqual(inbox.rooms.first?.lastMessage?.seq, question.seq)
        XCTAssertEqual(inbox.rooms.first?.lastSeq, alice.lastSeq)
        XCTAssertFalse(inbox.hasMore)
        await alice.disconnect()
        await bob.disconnect()
    }
}
