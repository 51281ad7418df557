import CallingCore
import CallingStore
import XCTest

@testable import CallingServer

/// The history page written directly must be the bytes the generic JSON writer makes of it.
final class HTTPRoutesTests: XCTestCase {
    func test_history_body_is_the_generic_encoding_of_the_page() {
        let room = RoomID("room \"α\"")
        let records = [
            ChatRecord(room: room, seq: 1, sender: PeerID("alice"), clientID: "c-1", text: "hello", meta: nil, timestampMs: 1_700_000_000_000),
            ChatRecord(room: room, seq: 2, sender: PeerID("bob\\ö"), clientID: "c\"2", text: "line\nbreak\t\u{1}, 😀",
                       meta: #"{"z":1,"a":[true,null,2.5],"big":123456789012345678901234567890}"#, timestampMs: -5),
            ChatRecord(room: room, seq: 3, sender: PeerID("carol"), clientID: "c-3", text: "", meta: "{}", timestampMs: 0),
        ]
        for page in [
            HistoryPage(room: room, messages: records, hasMore: true, nextSinceSeq: 3, lastSeq: 9),
            HistoryPage(room: room, messages: [], hasMore: false, nextSinceSeq: 7, lastSeq: 7),
        ] {
            XCTAssertEqual(String(decoding: HTTPRoutes.historyBody(page, limit: 3), as: UTF8.self),
                           JSONWriter.string(HTTPRoutes.historyJSON(page, limit: 3)))
        }
    }
}
