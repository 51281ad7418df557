import CallingCore
import XCTest

/// The rules of chat operations (`ChatRules`): who may edit or delete what, the edit window,
/// tombstones and the reaction limits; pure, no store.
final class ChatRulesTests: XCTestCase {
    private let limits = ChatOperationLimits(editWindowMs: 1_000, maxReactionKeys: 2, reactionKeyMaxBytes: 8)
    private let message = ChatTargetState(author: "alice", timestamp: 10_000)

    private func decide(_ kind: ChatRowKind, by sender: PeerID = "alice", moderator: Bool = false, on target: ChatTargetState?,
                        at now: Millis = 10_500) -> ChatOperationDecision {
        ChatRules.decide(kind, sender: sender, moderator: moderator, target: target, now: now, limits: limits)
    }

    private func code(_ decision: ChatOperationDecision) -> Int? {
        if case .refuse(let error) = decision { return error.code }
        return nil
    }

    func testEveryOperationNeedsAMessageAsItsTarget() {
        for kind in [ChatRowKind.message, .edit, .delete, .react, .unreact] {
            XCTAssertEqual(code(decide(kind, on: nil)), 443, "\(kind)")
        }
        XCTAssertEqual(decide(.message, by: "bob", on: message), .apply)  // a reply to anyone's message
    }

    func testOnlyTheAuthorEditsAndOnlyWithinTheWindow() {
        XCTAssertEqual(decide(.edit, on: message), .apply)
        XCTAssertEqual(decide(.edit, on: message, at: 11_000), .apply)
        XCTAssertEqual(code(decide(.edit, on: message, at: 11_001)), 444)
        XCTAssertEqual(code(decide(.edit, by: "bob", on: message)), 444)
        XCTAssertEqual(code(decide(.edit, by: "bob", moderator: true, on: message)), 444, "a moderator deletes, not edits")
        let always = ChatOperationLimits(editWindowMs: 0)
        XCTAssertEqual(ChatRules.decide(.edit, sender: "alice", moderator: false, target: message, now: 10_000_000, limits: always), .apply)
    }

    func testTheAuthorOrAModeratorDeletesAndASecondDeleteChangesNothing() {
        XCTAssertEqual(decide(.delete, on: message), .apply)
        XCTAssertEqual(code(decide(.delete, by: "bob", on: message)), 444)
        XCTAssertEqual(decide(.delete, by: "bob", moderator: true, on: message), .apply)
        var tombstone = message
        tombstone.deleted = true
        XCTAssertEqual(decide(.delete, on: tombstone), .storeOnly)
        XCTAssertEqual(code(decide(.delete, by: "bob", on: tombstone)), 444)
        XCTAssertEqual(code(decide(.edit, on: tombstone)), 444)
        XCTAssertEqual(code(decide(.react, by: "bob", on: tombstone)), 444)
        XCTAssertEqual(code(decide(.unreact, by: "bob", on: tombstone)), 444)
    }

    func testReactionsAreOncePerPeerPerKeyAndLimitedInKeys() {
        XCTAssertEqual(decide(.react, by: "bob", on: message), .apply)
        var state = message
        state.hasSendersReaction = true
        state.hasKey = true
        state.reactionKeys = 2
        XCTAssertEqual(decide(.react, by: "bob", on: state), .storeOnly)
        XCTAssertEqual(decide(.unreact, by: "bob", on: state), .apply)
        state.hasSendersReaction = false
        XCTAssertEqual(decide(.react, by: "carol", on: state), .apply, "a key the message has is not a new key")
        XCTAssertEqual(decide(.unreact, by: "carol", on: state), .storeOnly)
        state.hasKey = false
        XCTAssertEqual(code(decide(.react, by: "carol", on: state)), 445)
    }

    func testReactionKeys() {
        XCTAssertNil(ChatRules.reactionKeyError("👍", maxBytes: 8))
        XCTAssertNil(ChatRules.reactionKeyError(":+1:", maxBytes: 8))
        XCTAssertEqual(ChatRules.reactionKeyError("", maxBytes: 8)?.code, 445)
        XCTAssertEqual(ChatRules.reactionKeyError("123456789", maxBytes: 8)?.code, 445)
        XCTAssertEqual(ChatRules.reactionKeyError("a b", maxBytes: 8)?.code, 445)
        XCTAssertEqual(ChatRules.reactionKeyError("a\u{0007}", maxBytes: 8)?.code, 445)
        XCTAssertEqual(ChatRules.reactionKeyError("a\u{00A0}", maxBytes: 8)?.code, 445)
    }
}
