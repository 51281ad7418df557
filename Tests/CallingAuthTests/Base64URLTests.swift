@testable import CallingAuth
import Foundation
import XCTest

final class Base64URLTests: XCTestCase {
    /// Foundation's encoder with the RFC 4648 §5 substitutions, as an independent reference.
    private func reference(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    func testEncodingAndDecodingAgreeWithFoundationForEveryLengthAndByte() {
        var generator = SplitMix64(seed: 0xB64)
        for length in 0..<70 {
            for _ in 0..<20 {
                let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                let text = Base64URL.encode(bytes)
                XCTAssertEqual(text, reference(bytes))
                XCTAssertEqual(Base64URL.decode(Array(text.utf8)), bytes)
            }
        }
        XCTAssertEqual(Base64URL.encode([0xFB, 0xFF]), "-_8", "the two characters base64url replaces")
    }

    func testDecodingRefusesForeignCharactersAndImpossibleLengths() {
        // A foreign byte in each position of a full group and of a two- and three-character tail.
        for text in ["QQ==", "QUI=", "QU+D", "QU/D", "QU D", "A", "AAAAA", "é", "QUJ+", "+UJD", "AAAAQ@", "AAAA@B", "QU+",
                     "AAAAQ@B", "AAAAQB="] {
            XCTAssertNil(Base64URL.decode(Array(text.utf8)), text)
        }
        XCTAssertEqual(Base64URL.decode([UInt8]()), [])
    }

    /// As with Foundation's decoder before: nonzero unused bits of a final partial group are ignored.
    func testUnusedLowBitsOfTheLastGroupAreIgnored() {
        XCTAssertEqual(Base64URL.decode(Array("QR".utf8)), [0x41])
        XCTAssertEqual(Base64URL.decode(Array("QUJ".utf8)), [0x41, 0x42])
    }
}
