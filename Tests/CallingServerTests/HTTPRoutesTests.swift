import CallingCore
import CallingStore
import XCTest

@testable import CallingServer

/// A history page's message is the chat frame's payload plus `from` (one writer, `ChatJSON`), with
/// the fields only history has added to it.
final class HTTPRoutesTests: XCTestCase {
    func test_a_history_message_is_the_chat_payload_plus_from_and_its_history_fields() throws {
        let plain = MessageView(seq: 2, sender: PeerID("bob\\ö"), clientID: "c\"2", text: "line\nbreak\t\u{1}, 😀",
                                meta: #"{"z":1,"a":[true,null,2.5]}"#, timestampMs: -5)
        let chat = ChatJSON(clientID: "c\"2", from: "bob\\ö", meta: try JSONParser.parse(#"{"z":1,"a":[true,null,2.5]}"#), seq: 2,
                            text: "line\nbreak\t\u{1}, 😀", timestamp: -5)
        var expected = chat.fields
        expected["reactions"] = .array([])
        XCTAssertEqual(HTTPRoutes.messageJSON(plain), .object(expected))

        let changed = MessageView(seq: 3, sender: PeerID("carol"), clientID: "c-3", text: "", meta: nil, timestampMs: 10, replyTo: 1,
                                  editedTs: 20, deletedTs: 30,
                                  reactions: [MessageReaction(key: "👍", peers: [PeerID("alice"), PeerID("bob")])],
                                  edits: [MessageEdit(seq: 4, timestampMs: 20, text: "", meta: nil)])
        guard case .object(let object) = HTTPRoutes.messageJSON(changed) else { return XCTFail("not an object") }
        let base = ChatJSON(clientID: "c-3", from: "carol", meta: nil, seq: 3, text: "", timestamp: 10).fields
        XCTAssertEqual(object.filter { base.keys.contains($0.key) }, base)
        XCTAssertEqual(object["reply_to"], .int(1))
        XCTAssertEqual(object["edited_ts"], .int(20))
        XCTAssertEqual(object["deleted"], .bool(true))
        XCTAssertEqual(object["deleted_ts"], .int(30))
        XCTAssertEqual(object["reactions"], .array([["key": .string("👍"), "count": .int(2), "peers": .array([.string("alice"), .string("bob")])]]))
        XCTAssertEqual(object["edits"], .array([["seq": .int(4), "ts": .int(20), "text": .string(""), "meta": .null]]))
    }
}
