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
            XCTAssertEqual(TokenClaims.roomID(of: jwt(payload: #"{"sub":"a","room_id":"\#(room)"}"#)), RoomID(room))
        }
    }

    func test_tokens_without_a_room_or_not_jwts_give_no_room() {
        XCTAssertNil(TokenClaims.roomID(of: jwt(payload: #"{"sub":"a"}"#)))
        XCTAssertNil(TokenClaims.roomID(of: "not-a-jwt"))
        XCTAssertNil(TokenClaims.roomID(of: "a.%%%.c"))
    }

    func test_urls_map_to_endpoints_and_schemes_it_cannot_serve_are_errors() throws {
        let plain = try REST.endpoint(for: URL(string: "ws://127.0.0.1:8080")!)
        XCTAssertEqual(plain.httpOrigin, "http://127.0.0.1:8080")
        XCTAssertFalse(plain.usesTLS)
        // A wss:// URL is TLS on 443, never plaintext to 443 (what the SDK used to do).
        let secure = try REST.endpoint(for: URL(string: "wss://calls.example.org/v1/ws")!)
        XCTAssertEqual(secure.httpOrigin, "https://calls.example.org:443")
        XCTAssertTrue(secure.usesTLS)
        for unsupported in ["ftp://calls.example.org", "calls.example.org:8080", "wss:///v1/ws"] {
            XCTAssertThrowsError(try REST.endpoint(for: URL(string: unsupported)!), unsupported) { error in
                XCTAssertFalse((error as? CallingError)?.isRetryable ?? true)
                XCTAssertTrue("\(error)".contains("unsupported URL"), "\(error)")
            }
        }
    }
}
