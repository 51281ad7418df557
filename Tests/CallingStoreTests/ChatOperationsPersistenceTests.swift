import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Foundation
import Testing

private func message(_ room: RoomID, _ sender: PeerID, _ clientID: String, text: String = "hi", ts: Int64 = 1_000,
                     replyTo: Int64? = nil) -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, timestampMs: ts, replyTo: replyTo)
}

private func operation(_ kind: ChatRowKind, _ room: RoomID, _ sender: PeerID, _ clientID: String, target: Int64,
                       text: String = "", key: String? = nil, ts: Int64 = 2_000, moderator: Bool = false,
                       limits: ChatOperationLimits = ChatOperationLimits()) -> ChatDraft {
    ChatDraft(room: room, sender: sender, clientID: clientID, text: text, timestampMs: ts, kind: kind, target: target, key: key,
              moderator: moderator, limits: limits)
}

/// Chat operations (edit, delete, react, reply) as part of the `ChatPersistence` contract, ONE
/// suite run against both stores (SQLite and a PostgreSQL server the suite starts), like
/// ChatPersistenceTests: rows with their own seq, refusals that store nothing, a delete that erases
/// content, the folded message pages both ways and the inbox.
@Suite(.serialized)
struct ChatOperationsPersistenceTests {
    @Test(arguments: ChatBackend.allCases)
    func testOperationsTakeTheirOwnSeqAndRefusalsTakeNone(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        #expect(try store.appendAndWait(message("r", "alice", "m1")).message.seq == 1)
        let edit = try store.appendAndWait(operation(.edit, "r", "alice", "e1", target: 1, text: "edited"))
        #expect(edit.message.seq == 2 && edit.message.kind == .edit && edit.message.target == 1 && edit.refusal == nil)
        let notMine = try store.appendAndWait(operation(.edit, "r", "bob", "e2", target: 1, text: "x"))
        #expect(notMine.refusal?.code == ErrorCode.chatForbidden.rawValue)
        let missing = try store.appendAndWait(operation(.react, "r", "bob", "x1", target: 9, key: "k"))
        #expect(missing.refusal?.code == ErrorCode.chatTargetNotFound.rawValue)
        let onOperation = try store.appendAndWait(operation(.react, "r", "bob", "x2", target: 2, key: "k"))
        #expect(onOperation.refusal?.code == ErrorCode.chatTargetNotFound.rawValue)
        let reply = try store.appendAndWait(message("r", "bob", "m2", replyTo: 1))
        #expect(reply.message.seq == 3 && reply.message.replyTo == 1)
        #expect(try store.appendAndWait(message("r", "bob", "m3", replyTo: 7)).refusal?.code == ErrorCode.chatTargetNotFound.rawValue)
        // A retry of an operation is its original, also when the rules would refuse it now.
        let retry = try store.appendAndWait(operation(.edit, "r", "alice", "e1", target: 1, text: "edited", ts: 999_999_999,
                                                      limits: ChatOperationLimits(editWindowMs: 1)))
        #expect(retry.duplicate && retry.message.seq == 2 && retry.message.kind == .edit)
        let log = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10)
        #expect(log.messages.map(\.seq) == [1, 2, 3] && log.lastSeq == 3)
        #expect(log.messages.map(\.kind) == [.message, .edit, .message])
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheEditWindowAndTheModerator(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        _ = try store.appendAndWait(message("r", "alice", "m1", ts: 1_000))
        let window = ChatOperationLimits(editWindowMs: 500)
        #expect(try store.appendAndWait(operation(.edit, "r", "alice", "e1", target: 1, text: "a", ts: 1_500, limits: window)).refusal == nil)
        #expect(try store.appendAndWait(operation(.edit, "r", "alice", "e2", target: 1, text: "b", ts: 1_501, limits: window))
            .refusal?.code == ErrorCode.chatForbidden.rawValue)
        #expect(try store.appendAndWait(operation(.delete, "r", "bob", "d1", target: 1)).refusal?.code == ErrorCode.chatForbidden.rawValue)
        #expect(try store.appendAndWait(operation(.delete, "r", "mod", "d2", target: 1, moderator: true)).refusal == nil)
        // Deleting again is stored and changes nothing; editing or reacting to a tombstone is refused.
        #expect(try store.appendAndWait(operation(.delete, "r", "alice", "d3", target: 1)).refusal == nil)
        #expect(try store.appendAndWait(operation(.edit, "r", "alice", "e3", target: 1, text: "c", ts: 1_200))
            .refusal?.code == ErrorCode.chatForbidden.rawValue)
        #expect(try store.appendAndWait(operation(.react, "r", "bob", "k1", target: 1, key: "k")).refusal?.code
            == ErrorCode.chatForbidden.rawValue)
    }

    @Test(arguments: ChatBackend.allCases)
    func testADeleteErasesTheContentOfTheMessageAndItsEdits(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        _ = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "m1", text: "secret", meta: #"{"a":1}"#, timestampMs: 1_000))
        _ = try store.appendAndWait(operation(.edit, "r", "alice", "e1", target: 1, text: "secret 2"))
        _ = try store.appendAndWait(operation(.react, "r", "bob", "k1", target: 1, key: "k"))
        _ = try store.appendAndWait(operation(.delete, "r", "alice", "d1", target: 1, ts: 3_000))
        let log = try store.historyAndWait(room: "r", sinceSeq: 0, limit: 10).messages
        #expect(log.map(\.seq) == [1, 2, 3, 4])
        #expect(log[0].text == "" && log[0].meta == nil && log[0].deleted)
        #expect(log[1].text == "" && log[1].meta == nil && log[1].deleted)
        #expect(!log[2].deleted && !log[3].deleted)
        let page = try store.messagesAndWait(room: "r", MessageQuery(.after(0), limit: 10, includeEdits: true))
        #expect(page.messages.count == 1)
        let tombstone = page.messages[0]
        #expect(tombstone.deleted && tombstone.deletedTs == 3_000 && tombstone.text == "" && tombstone.meta == nil)
        #expect(tombstone.reactions.isEmpty && tombstone.edits == [MessageEdit(seq: 2, timestampMs: 2_000, text: "", meta: nil)])
        #expect(try store.summaryAndWait(room: "r", peer: "bob").unreadCount == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testReactionsCountOnePerPeerPerKeyUpToTheLimit(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        let limits = ChatOperationLimits(maxReactionKeys: 2)
        _ = try store.appendAndWait(message("r", "alice", "m1"))
        func react(_ kind: ChatRowKind, _ peer: PeerID, _ id: String, _ key: String) throws -> ChatAppendResult {
            try store.appendAndWait(operation(kind, "r", peer, id, target: 1, key: key, limits: limits))
        }
        #expect(try react(.react, "bob", "1", "b").refusal == nil)
        #expect(try react(.react, "bob", "2", "b").refusal == nil)  // again: stored, counts once
        #expect(try react(.react, "alice", "3", "b").refusal == nil)
        #expect(try react(.react, "alice", "4", "a").refusal == nil)
        #expect(try react(.react, "carol", "5", "c").refusal?.code == ErrorCode.chatReactionInvalid.rawValue)
        #expect(try react(.react, "carol", "6", "a").refusal == nil)  // an existing key is fine
        #expect(try react(.unreact, "alice", "7", "a").refusal == nil)
        #expect(try react(.unreact, "alice", "8", "zz").refusal == nil)  // absent: stored, changes nothing
        let page = try store.messagesAndWait(room: "r", MessageQuery(.after(0), limit: 10))
        #expect(page.messages[0].reactions == [MessageReaction(key: "a", peers: ["carol"]), MessageReaction(key: "b", peers: ["bob", "alice"])])
        #expect(page.messages[0].edits == nil)
        #expect(page.lastSeq == 8)
    }

    @Test(arguments: ChatBackend.allCases)
    func testMessagePagesFoldOperationsAndPageBothWays(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        for index in 1...6 {
            let seq = try store.appendAndWait(message("r", "alice", "m\(index)", text: "t\(index)")).message.seq
            _ = try store.appendAndWait(operation(.edit, "r", "alice", "e\(index)", target: seq, text: "t\(index)!"))
        }
        var forward: [Int64] = []
        var since: Int64 = 0
        while true {
            let page = try store.messagesAndWait(room: "r", MessageQuery(.after(since), limit: 4))
            forward += page.messages.map(\.seq)
            #expect(page.messages.allSatisfy { $0.text.hasSuffix("!") && $0.editedTs == 2_000 })
            since = page.next
            if !page.hasMore { break }
        }
        #expect(forward == [1, 3, 5, 7, 9, 11])
        var backward: [Int64] = []
        var before: Int64 = 1_000
        while true {
            let page = try store.messagesAndWait(room: "r", MessageQuery(.before(before), limit: 4))
            backward += page.messages.map(\.seq)
            before = page.next
            if !page.hasMore { break }
        }
        #expect(backward == [11, 9, 7, 5, 3, 1])
        let empty = try store.messagesAndWait(room: "other", MessageQuery(.before(5), limit: 4))
        #expect(empty.messages.isEmpty && !empty.hasMore && empty.next == 5 && empty.lastSeq == 0)
    }

    @Test(arguments: ChatBackend.allCases)
    func testTheInboxListsThePeersRoomsByActivity(_ backend: ChatBackend) throws {
        let sut = try backend.open()
        defer { sut.close() }
        let store = sut.store
        _ = try store.appendAndWait(message("a", "alice", "1", text: "in a", ts: 1_000))
        _ = try store.appendAndWait(message("b", "bob", "1", text: "in b", ts: 2_000))
        _ = try store.appendAndWait(message("c", "alice", "1", text: "in c", ts: 3_000))
        _ = try store.appendAndWait(message("c", "bob", "2", text: "reply", ts: 4_000))
        _ = try store.appendAndWait(operation(.edit, "c", "bob", "3", target: 2, text: "reply, edited", ts: 4_500))
        _ = try store.appendAndWait(message("d", "bob", "1", text: "not alice's", ts: 5_000))
        _ = try store.markReadAndWait(room: "b", peer: "alice", seq: 1, nowMs: 6_000)
        let first = try store.inboxAndWait(peer: "alice", InboxQuery(limit: 2))
        #expect(first.rooms.map(\.room) == ["c", "b"] && first.hasMore)
        let c = first.rooms[0]
        #expect(c.lastSeq == 3 && c.lastTs == 4_500 && c.unread == 1 && c.readSeq == 0)
        #expect(c.lastMessage == InboxMessage(seq: 2, sender: "bob", text: "reply, edited", timestampMs: 4_000))
        #expect(first.rooms[1].readSeq == 1 && first.rooms[1].unread == 0)
        let rest = try store.inboxAndWait(peer: "alice", InboxQuery(limit: 2, after: first.next))
        #expect(rest.rooms.map(\.room) == ["a"] && !rest.hasMore && rest.next == nil)
        #expect(try store.inboxAndWait(peer: "nobody", InboxQuery(limit: 5)).rooms.isEmpty)
    }
}
