import Foundation
import XCTest

@testable import CallingClient

/// JWT claim reading and URL mapping, without a server.
final class RESTTests: XCTestCase {
    private func jwt(payload: String) -> String {
        let segment = Data(payload.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return "eyJhbGciOiJIUzI1NiJ9.\(segment).sig"
    }

    func test_room_id_is_read_from_the_unpadded_base64url_payload() {
        // "??>" encodes to "Pz8-" in base64url: exercises the '-' mapping; lengths vary the padding.
        for room in ["r", "room-1", "??>", "ünïcode-room"] {
            XCTAssertEqual(TokenClaims.roomId(of: jwt(payload: #"{"sub":"a","room_id":"\#(room)"}"#)), RoomID(room))
        }
    }

    func test_tokens_without_a_room_or_not_jwts_give_no_room() {
        XCTAssertNil(TokenClaims.roomId(of: jwt(payload: #"{"sub":"a"}"#)))
        XCTAssertNil(TokenClaims.roomId(of: "not-a-jwt"))
        XCTAssertNil(TokenClaims.roomId(of: "a.%%%.c"))
    }

    func test_websocket_urls_map_to_http_bases() {
        XCTAssertEqual(REST.httpBase(for: URL(string: "ws://127.0.0.1:8080")!)?.absoluteString, "http://127.0.0.1:8080")
        XCTAssertEqual(REST.httpBase(for: URL(string: "wss://calls.example.org/v1/ws")!)?.absoluteString,
                       "https://calls.example.org")
    }
}
