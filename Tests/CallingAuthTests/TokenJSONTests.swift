@testable import CallingAuth
import CallingProtocol
import XCTest

final class TokenJSONTests: XCTestCase {
    private func object(_ text: String) -> [String: JSONValue]? {
        TokenJSON.object(from: Array(text.utf8))?.dictionary
    }

    func testAnObjectIsReadWithIntegerFidelity() {
        XCTAssertEqual(object(#"{"alg":"HS256","n":1700003600,"f":0.5,"b":true,"z":null,"a":[1,"x"],"o":{"k":"v"}}"#),
                       ["alg": "HS256", "n": .int(1_700_003_600), "f": .double(0.5), "b": true, "z": .null,
                        "a": [1, "x"], "o": ["k": "v"]])
        XCTAssertEqual(object(" {} "), [:])
    }

    func testRepeatedTopLevelNamesAreRefused() {
        XCTAssertNil(object(#"{"alg":"RS256","alg":"HS256"}"#))
        XCTAssertNil(object(#"{"a":1,"b":2,"a":1}"#), "even with the same value")
        // Swift compares strings by canonical equivalence, so two spellings of "é" count as one name.
        XCTAssertNil(object("{\"\u{E9}\":1,\"e\u{301}\":2}"))
        XCTAssertEqual(object(#"{"o":{"a":1,"a":2}}"#), ["o": ["a": 2]], "nested objects keep the parser's rule")
    }

    func testNumbersAndStringsJanssonRefusesAreRefused() {
        XCTAssertNil(object(#"{"big":9223372036854775808}"#))
        XCTAssertNil(object(#"{"a":[{"big":-9223372036854775809}]}"#))
        XCTAssertEqual(object(#"{"min":-9223372036854775808}"#), ["min": .int(.min)])
        XCTAssertNil(object(#"{"inf":1e400}"#))
        XCTAssertNil(object(#"{"s":"a\u0000"}"#))
        XCTAssertNil(object(#"{"a\u0000":1}"#))
        XCTAssertNil(object(#"{"o":{"a\u0000":1}}"#))
    }

    func testNonObjectsAndBrokenJSONAreRefused() {
        for text in ["", "[]", #""alg""#, "null", "{", #"{"a":1}x"#, #"{"a":1,}"#, #"{'a':1}"#] {
            XCTAssertNil(object(text), text)
        }
        XCTAssertNil(TokenJSON.object(from: [0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D]), "invalid UTF-8")
    }

    func testMembersKeepTheDocumentsOrderAndAreFoundByName() throws {
        let read = try XCTUnwrap(TokenJSON.object(from: Array(#"{"typ":"JWT","alg":"HS256","kid":7}"#.utf8)))
        XCTAssertEqual(read.members.map(\.name), ["typ", "alg", "kid"])
        XCTAssertEqual(read["alg"], "HS256")
        XCTAssertEqual(read["kid"], .int(7))
        XCTAssertNil(read["crit"])
        XCTAssertNil(read["ALG"], "names are case-sensitive")
        // A name is found by canonical equivalence, as a dictionary key would be.
        let accented = try XCTUnwrap(TokenJSON.object(from: Array("{\"\u{E9}\":1}".utf8)))
        XCTAssertEqual(accented["e\u{301}"], .int(1))
    }

    /// Past `TokenJSON.linearNames` members the names seen go into a set: a repeated name is still
    /// refused wherever the two stand, by canonical equivalence as before, and hundreds of distinct
    /// members still read.
    func testRepeatedNamesAreRefusedAmongManyMembers() throws {
        let many = (0..<800).map { #""m\#($0)":\#($0)"# }
        let read = try XCTUnwrap(TokenJSON.object(from: Array(("{" + many.joined(separator: ",") + "}").utf8)))
        XCTAssertEqual(read.members.count, 800)
        XCTAssertEqual(read["m799"], .int(799))
        for (first, second) in [(3, 700), (TokenJSON.linearNames - 1, TokenJSON.linearNames), (2, TokenJSON.linearNames + 5)] {
            var members = many
            members[second] = #""m\#(first)":0"#
            XCTAssertNil(object("{" + members.joined(separator: ",") + "}"), "m\(first) again at \(second)")
        }
        var accented = many
        accented[1] = "\"\u{E9}\":1"
        accented[600] = "\"e\u{301}\":2"
        XCTAssertNil(object("{" + accented.joined(separator: ",") + "}"), "two spellings of é, far apart")
    }

    func testDepthIsLimited() {
        XCTAssertEqual(TokenJSON.maximumDepth, 16)
        let fits = #"{"d":"# + String(repeating: "[", count: 15) + String(repeating: "]", count: 15) + "}"
        XCTAssertNotNil(object(fits))
        let tooDeep = #"{"d":"# + String(repeating: "[", count: 16) + String(repeating: "]", count: 16) + "}"
        XCTAssertNil(object(tooDeep))
    }
}
