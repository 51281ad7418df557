import CallingProtocol
import XCTest

/// `ChatJSON` is the one writer of a chat message's JSON (the chat frame's payload, the history
/// API's message, the `chat_message` webhook's data): its direct bytes are its value's.
final class ChatJSONTests: XCTestCase {
    func testDirectBytesAreTheValuesWithAndWithoutFrom() {
        let meta: JSONValue = ["kind": .string("note"), "n": .int(3)]
        for from in [nil, "alice", "a\"b"] as [String?] {
            for message in [ChatJSON(clientID: "c1", from: from, meta: nil, seq: 7, text: "hi", timestamp: 1_700_000_000_123),
                            ChatJSON(clientID: "c\\2", from: from, meta: meta, seq: -1, text: "line\nü", timestamp: 0)]
            {
                var out: [UInt8] = []
                message.write(into: &out)
                XCTAssertEqual(String(decoding: out, as: UTF8.self), JSONWriter.string(message.json))
                XCTAssertEqual(message.fields["from"]?.stringValue, from)
            }
        }
    }

    func testTheChatFramesPayloadIsTheMessageWithoutFrom() {
        let frame = Frame.chat(from: "bob", clientID: "c1", text: "hi", meta: nil, seq: 4, timestamp: 9)
        let expected = ChatJSON(clientID: "c1", meta: nil, seq: 4, text: "hi", timestamp: 9)
        XCTAssertEqual(frame.payload, expected.json)
        XCTAssertEqual(String(decoding: frame.encoded(), as: UTF8.self), #"{"from":"bob","payload":{"client_id":"c1","meta":null,"seq":4,"text":"hi","ts":9},"type":"chat"}"#)
    }
}
