import CallingProtocol
import XCTest

final class JSONTests: XCTestCase {
    // MARK: - Helpers

    private func parse(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> JSONValue? {
        parse(Array(text.utf8), file: file, line: line)
    }

    private func parse(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) -> JSONValue? {
        do {
            return try JSONParser.parse(bytes)
        } catch {
            XCTFail("expected \(String(decoding: bytes, as: UTF8.self).debugDescription) to parse, got \(error)", file: file, line: line)
            return nil
        }
    }

    private func parseError(_ bytes: [UInt8]) -> JSONParseError? {
        do {
            _ = try JSONParser.parse(bytes)
            return nil
        } catch {
            return error
        }
    }

    private func parseError(_ text: String) -> JSONParseError? { parseError(Array(text.utf8)) }

    private func assertRejected(
        _ text: String, _ expected: JSONParseError, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(parseError(text), expected, "for \(text.debugDescription)", file: file, line: line)
    }

    private func assertInvalidEscape(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case .invalidEscape? = parseError(text) else {
            XCTFail("expected \(text.debugDescription) to fail with invalidEscape, got \(String(describing: parseError(text)))",
                file: file, line: line)
            return
        }
    }

    // MARK: - Value kinds

    func test_every_value_kind_is_parsed() {
        let text = #"{"n":null,"t":true,"f":false,"i":-12,"d":1.5,"s":"x","a":[1,[],{}],"o":{"k":"v"}}"#
        let expected: JSONValue = [
            "n": nil, "t": true, "f": false, "i": -12, "d": 1.5, "s": "x", "a": [1, [], [:]], "o": ["k": "v"],
        ]
        XCTAssertEqual(parse(text), expected)
    }

    func test_top_level_scalars_are_documents() {
        XCTAssertEqual(parse("null"), .null)
        XCTAssertEqual(parse("true"), .bool(true))
        XCTAssertEqual(parse("false"), .bool(false))
        XCTAssertEqual(parse("42"), .int(42))
        XCTAssertEqual(parse(#""s""#), .string("s"))
    }

    func test_whitespace_around_and_between_tokens_is_accepted() {
        XCTAssertEqual(parse(" \t\r\n{ \"a\" :\n[ 1 , 2 ] }\r\n "), ["a": [1, 2]])
    }

    func test_only_json_whitespace_separates_tokens() {
        assertRejected("\u{0C}1", .unexpectedByte(offset: 0))  // form feed
        assertRejected("\u{0B}1", .unexpectedByte(offset: 0))  // vertical tab
        XCTAssertEqual(parseError([0xEF, 0xBB, 0xBF] + Array("{}".utf8)), .unexpectedByte(offset: 0), "a BOM is not whitespace")
    }

    func test_duplicate_keys_keep_the_last_value_like_javascript() {
        XCTAssertEqual(parse(#"{"type":"offer","type":"answer"}"#), ["type": "answer"])
    }

    // MARK: - Numbers

    func test_integers_keep_every_digit() {
        // 2^53 + 1 is not representable as a Double: a sequence number must survive exactly.
        XCTAssertEqual(parse("9007199254740993"), .int(9_007_199_254_740_993))
        XCTAssertEqual(parse("9223372036854775807"), .int(Int64.max))
        XCTAssertEqual(parse("-9223372036854775808"), .int(Int64.min))
        XCTAssertEqual(parse("0"), .int(0))
    }

    func test_integers_beyond_int64_are_kept_and_written_digit_for_digit() {
        for text in ["9223372036854775808", "-9223372036854775809", "123456789012345678901234567890"] {
            XCTAssertEqual(parse(text), .bigInteger(text))
            XCTAssertEqual(JSONWriter.string(parse(text) ?? .null), text)
        }
        XCTAssertEqual(parse("9223372036854775808")?.int64Value, nil)
        XCTAssertEqual(parse("9223372036854775808")?.doubleValue, 9_223_372_036_854_775_808)
        let payload = #"{"big":123456789012345678901234567890,"n":9007199254740993}"#
        XCTAssertEqual(JSONWriter.string(parse(payload) ?? .null), payload)
    }

    func test_fraction_or_exponent_makes_a_double() {
        XCTAssertEqual(parse("1.0"), .double(1))
        XCTAssertEqual(parse("1e2"), .double(100))
        XCTAssertEqual(parse("1E+2"), .double(100))
        XCTAssertEqual(parse("25e-1"), .double(2.5))
        XCTAssertEqual(parse("-0.125"), .double(-0.125))
    }

    func test_negative_zero() {
        XCTAssertEqual(parse("-0"), .int(0), "an integer zero has no sign")
        guard case .double(let d)? = parse("-0.0") else { return XCTFail("-0.0 is a double") }
        XCTAssertEqual(d, 0)
        XCTAssertEqual(d.sign, .minus)
    }

    func test_numbers_outside_double_range_are_rejected() {
        assertRejected("1e400", .invalidNumber(offset: 0))
        assertRejected("-1e400", .invalidNumber(offset: 0))
        assertRejected("[1, 1e309]", .invalidNumber(offset: 4))
    }

    func test_leading_zeros_are_rejected() {
        assertRejected("01", .trailingData(offset: 1))
        assertRejected("-01", .trailingData(offset: 2))
        assertRejected("[01]", .unexpectedByte(offset: 2))
        assertRejected(#"{"seq":007}"#, .unexpectedByte(offset: 8))
    }

    func test_malformed_numbers_are_rejected() {
        assertRejected("-", .invalidNumber(offset: 0))
        assertRejected("-x", .invalidNumber(offset: 0))
        assertRejected("1.", .invalidNumber(offset: 0))
        assertRejected("1.e5", .invalidNumber(offset: 0))
        assertRejected("1e", .invalidNumber(offset: 0))
        assertRejected("1e+", .invalidNumber(offset: 0))
        assertRejected(".5", .unexpectedByte(offset: 0))
        assertRejected("+1", .unexpectedByte(offset: 0))
        assertRejected("0x10", .trailingData(offset: 1))
        assertRejected("NaN", .unexpectedByte(offset: 0))
        assertRejected("Infinity", .unexpectedByte(offset: 0))
        assertRejected("-Infinity", .invalidNumber(offset: 0))
    }

    // MARK: - Strings

    func test_simple_escapes_are_decoded() {
        XCTAssertEqual(parse(#""\"\\\/\b\f\n\r\t""#), .string("\"\\/\u{08}\u{0C}\n\r\t"))
    }

    func test_unicode_escapes_are_decoded() {
        XCTAssertEqual(parse(#""caf\u00e9 \u20AC \u0000""#), .string("café € \u{0}"))
    }

    func test_surrogate_pair_escape_decodes_to_one_scalar() {
        XCTAssertEqual(parse(#""\ud83d\ude00""#), .string("😀"))
        XCTAssertEqual(parse(#""a\uD83D\uDE00b""#), .string("a😀b"), "hex digits are case-insensitive")
    }

    func test_raw_utf8_passes_through() {
        XCTAssertEqual(parse(#"{"text":"héllo 😀 日本"}"#), ["text": "héllo 😀 日本"])
        XCTAssertEqual(parse(#""before\nafter é""#), .string("before\nafter é"), "raw UTF-8 after an escape")
    }

    func test_invalid_escapes_are_rejected() {
        assertRejected(#""\x""#, .invalidEscape(offset: 2))
        assertRejected(#""\a""#, .invalidEscape(offset: 2))
        assertRejected(#""\U0041""#, .invalidEscape(offset: 2))
        assertRejected(#""\u12G4""#, .invalidEscape(offset: 5))
        assertRejected(#""\u12""#, .unexpectedEnd)
    }

    func test_lone_surrogates_are_rejected() {
        assertInvalidEscape(#""\ud800""#)
        assertInvalidEscape(#""\ud83dx""#)
        assertInvalidEscape(#""\ude00""#)
        assertInvalidEscape(#""\ud800\u0041""#)
        assertInvalidEscape(#""\ud800\ud800""#)
        assertInvalidEscape(#""\ud800\n""#)
    }

    func test_raw_control_characters_in_strings_are_rejected() {
        for byte in UInt8(0x00)...UInt8(0x1F) {
            // Both before any escape (fast path) and after one (escape path).
            XCTAssertEqual(parseError([0x22, 0x61, byte, 0x22]), .unexpectedByte(offset: 2), "byte \(byte)")
            XCTAssertEqual(parseError([0x22, 0x5C, 0x6E, byte, 0x22]), .unexpectedByte(offset: 3), "byte \(byte) after an escape")
        }
        XCTAssertEqual(parse([0x22, 0x7F, 0x22]), .string("\u{7F}"), "DEL is not a control character in JSON")
    }

    func test_invalid_utf8_inside_strings_is_reported_as_invalid_utf8() {
        let cases: [[UInt8]] = [
            [0xC3, 0x28],  // truncated two-byte sequence
            [0x80],  // lone continuation byte
            [0xC0, 0xAF],  // overlong "/"
            [0xED, 0xA0, 0x80],  // UTF-8 encoded surrogate
            [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
            [0xFF],
        ]
        for bad in cases {
            XCTAssertEqual(parseError([0x22] + bad + [0x22]), .invalidUTF8, "\(bad) in a plain string")
            XCTAssertEqual(parseError([0x22, 0x5C, 0x74] + bad + [0x22]), .invalidUTF8, "\(bad) after an escape")
            XCTAssertEqual(parseError([0x7B, 0x22] + bad + Array(#"":1}"#.utf8)), .invalidUTF8, "\(bad) in a key")
        }
    }

    func test_unterminated_input_is_reported_as_unexpected_end() {
        for text in ["", "   ", "[", "[1,", #"{"a""#, #"{"a":"#, #"{"a":1"#, #""abc"#, #""abc\"#, "tru", "nul", #"{"#] {
            assertRejected(text, .unexpectedEnd)
        }
    }

    func test_misplaced_tokens_are_reported_with_their_offset() {
        assertRejected("[1 2]", .unexpectedByte(offset: 3))
        assertRejected("[1,]", .unexpectedByte(offset: 3))
        assertRejected("[,1]", .unexpectedByte(offset: 1))
        assertRejected(#"{"a":1,}"#, .unexpectedByte(offset: 7))
        assertRejected(#"{a:1}"#, .unexpectedByte(offset: 1))
        assertRejected(#"{"a" 1}"#, .unexpectedByte(offset: 5))
        assertRejected("trux", .unexpectedByte(offset: 3))
        assertRejected("}", .unexpectedByte(offset: 0))
    }

    func test_trailing_data_after_the_document_is_rejected() {
        assertRejected("{} x", .trailingData(offset: 3))
        assertRejected("{}}", .trailingData(offset: 2))
        assertRejected("1 2", .trailingData(offset: 2))
        assertRejected(#"{"type":"ping"}{"type":"ping"}"#, .trailingData(offset: 15))
    }

    // MARK: - Depth

    private func nestedArrays(_ depth: Int) -> String {
        String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
    }

    func test_nesting_up_to_the_limit_is_accepted() {
        XCTAssertEqual(JSONParser.maxDepth, 64)
        XCTAssertNotNil(parse(nestedArrays(JSONParser.maxDepth)))
        let objects = String(repeating: #"{"a":"#, count: JSONParser.maxDepth - 1) + "{}" + String(repeating: "}", count: JSONParser.maxDepth - 1)
        XCTAssertNotNil(parse(objects))
    }

    func test_nesting_beyond_the_limit_is_rejected() {
        assertRejected(nestedArrays(JSONParser.maxDepth + 1), .tooDeep)
        let objects = String(repeating: #"{"a":"#, count: JSONParser.maxDepth) + "{}" + String(repeating: "}", count: JSONParser.maxDepth)
        assertRejected(objects, .tooDeep)
    }

    func test_members_can_be_read_with_a_lower_nesting_limit() throws {
        var names: [String] = []
        // The top-level object is depth 1, so with a limit of 3 two more levels fit.
        XCTAssertTrue(try JSONParser.parseMembers(Array(#"{"a":[[1]],"a":2}"#.utf8), maxDepth: 3) { name, _ in names.append(name) })
        XCTAssertEqual(names, ["a", "a"], "each member in order, repeats included")
        XCTAssertThrowsError(try JSONParser.parseMembers(Array(#"{"a":[[[1]]]}"#.utf8), maxDepth: 3) { _, _ in }) { error in
            XCTAssertEqual(error as? JSONParseError, .tooDeep)
        }
        // A limit above the parser's own is the parser's own.
        let deep = "{\"a\":" + nestedArrays(JSONParser.maxDepth) + "}"
        XCTAssertThrowsError(try JSONParser.parseMembers(Array(deep.utf8), maxDepth: 1000) { _, _ in }) { error in
            XCTAssertEqual(error as? JSONParseError, .tooDeep)
        }
    }

    func test_hostile_nesting_fails_fast_instead_of_exhausting_the_stack() {
        assertRejected(String(repeating: "[", count: 200_000), .tooDeep)
    }

    // MARK: - Accessors

    func test_integral_doubles_count_as_integers() {
        XCTAssertEqual(JSONValue.double(3.0).int64Value, 3)
        XCTAssertNil(JSONValue.double(3.5).int64Value)
        XCTAssertNil(JSONValue.double(1e300).int64Value)
        XCTAssertNil(JSONValue.string("3").int64Value)
        XCTAssertEqual(JSONValue.int(3).doubleValue, 3.0)
        XCTAssertNil(JSONValue.bool(true).doubleValue)
    }

    func test_field_lookup_on_a_non_object_is_nil() {
        XCTAssertNil(JSONValue.array(["a"])["a"])
        XCTAssertNil(JSONValue.string("a")["a"])
        XCTAssertEqual(JSONValue.object(["a": 1])["a"], .int(1))
        XCTAssertTrue(JSONValue.null.isNull)
        XCTAssertFalse(JSONValue.int(0).isNull)
    }

    func test_parse_error_messages_name_the_byte_offset() {
        XCTAssertEqual(JSONParseError.unexpectedByte(offset: 7).message, "unexpected character at byte 7")
        XCTAssertEqual(JSONParseError.tooDeep.message, "JSON nesting is deeper than 64")
        XCTAssertEqual(JSONParseError.invalidUTF8.message, "text is not valid UTF-8")
    }

    // MARK: - Writer

    func test_writer_sorts_keys_so_equal_values_give_equal_bytes() {
        let forwardPairs: [(String, JSONValue)] = [("b", 1), ("a", 2), ("c", ["z": 1, "y": 2])]
        let backwardPairs: [(String, JSONValue)] = [("c", ["y": 2, "z": 1]), ("a", 2), ("b", 1)]
        let forward = JSONValue.object(Dictionary(uniqueKeysWithValues: forwardPairs))
        let backward = JSONValue.object(Dictionary(uniqueKeysWithValues: backwardPairs))
        XCTAssertEqual(JSONWriter.string(forward), #"{"a":2,"b":1,"c":{"y":2,"z":1}}"#)
        XCTAssertEqual(JSONWriter.bytes(forward), JSONWriter.bytes(backward))
    }

    func test_writer_sorts_keys_by_code_point() {
        let value: JSONValue = ["peers": 1, "peer_id": 2, "Peer": 3, "é": 4, "ping": 5]
        XCTAssertEqual(JSONWriter.string(value), #"{"Peer":3,"peer_id":2,"peers":1,"ping":5,"é":4}"#)
    }

    func test_writer_output_is_compact() {
        XCTAssertEqual(JSONWriter.string([1, [], [:], nil, true, false, "s"]), #"[1,[],{},null,true,false,"s"]"#)
    }

    func test_writer_escapes_what_json_requires_and_nothing_else() {
        let value = JSONValue.string("q\" b\\ n\n r\r t\t nul\u{0} us\u{1F} bs\u{08} / é 😀 \u{7F}")
        XCTAssertEqual(
            JSONWriter.string(value), #""q\" b\\ n\n r\r t\t nul\u0000 us\u001f bs\u0008 / é 😀 "# + "\u{7F}\"")
    }

    func test_writer_escapes_each_character_wherever_it_falls_in_a_run() {
        // The escaping of one character at a time, as the writer did before it copied unescaped runs.
        func reference(_ string: String) -> [UInt8] {
            var out: [UInt8] = [0x22]
            for byte in string.utf8 {
                switch byte {
                case 0x22: out += [0x5C, 0x22]
                case 0x5C: out += [0x5C, 0x5C]
                case 0x0A: out += [0x5C, UInt8(ascii: "n")]
                case 0x0D: out += [0x5C, UInt8(ascii: "r")]
                case 0x09: out += [0x5C, UInt8(ascii: "t")]
                case 0x00..<0x20:
                    let hex = Array("0123456789abcdef".utf8)
                    out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
                default: out.append(byte)
                }
            }
            return out + [0x22]
        }
        var characters = (0 as UInt32..<0x80).map { String(Unicode.Scalar($0)!) }
        characters += ["é", "\u{2028}", "\u{2029}", "😀", "\u{FEFF}"]
        for character in characters {
            for string in [character, "ab" + character, character + "cd", "ab" + character + character + "cd"] {
                var out: [UInt8] = []
                JSONWriter.writeString(string, into: &out)
                XCTAssertEqual(out, reference(string), "\(string.debugDescription)")
            }
        }
        var empty: [UInt8] = []
        JSONWriter.writeString("", into: &empty)
        XCTAssertEqual(empty, [0x22, 0x22])
    }

    func test_writer_numbers() {
        XCTAssertEqual(JSONWriter.string(.int(Int64.min)), "-9223372036854775808")
        XCTAssertEqual(JSONWriter.string(.double(0.5)), "0.5")
        XCTAssertEqual(JSONWriter.string(.double(2.0)), "2", "integral doubles print like JSON.stringify")
        XCTAssertEqual(JSONWriter.string(.double(-0.0)), "0")
        XCTAssertEqual(JSONWriter.string(.double(999_999_999_999_999)), "999999999999999")
        XCTAssertEqual(JSONWriter.string(.double(0.1 + 0.2)), "0.30000000000000004", "shortest text that round-trips")
        // Large and tiny doubles use an exponent, still valid JSON.
        for value in [1e15, 1e20, -1.5e300, 1e-7, Double.leastNonzeroMagnitude] {
            let text = JSONWriter.string(.double(value))
            XCTAssertEqual(parse(text)?.doubleValue, value, "\(text)")
        }
    }

    func test_writer_appends_to_an_existing_buffer() {
        var out = Array("x=".utf8)
        JSONWriter.write(["a": true], into: &out)
        XCTAssertEqual(String(decoding: out, as: UTF8.self), #"x={"a":true}"#)
    }

    func test_written_values_parse_back_to_the_same_value() {
        var everyASCII = ""
        for scalar in (0 as UInt32)..<0x80 { everyASCII.unicodeScalars.append(Unicode.Scalar(scalar)!) }
        let value: JSONValue = [
            "ascii": .string(everyASCII), "emoji": "😀 ☃ 日本", "int": .int(Int64.max), "neg": -7,
            "double": 0.1, "exp": 1.5e-9, "nested": [["a": [nil, false]], []], "empty": "",
        ]
        XCTAssertEqual(parse(JSONWriter.bytes(value)), value)
    }

    func test_parsed_then_written_text_is_canonical() {
        let text = #" { "b" : [ 1 , 2.5 , "\u00e9\/" ] , "a" : null } "#
        let once = JSONWriter.string(parse(text) ?? .null)
        XCTAssertEqual(once, #"{"a":null,"b":[1,2.5,"é/"]}"#)
        XCTAssertEqual(JSONWriter.string(parse(once) ?? .null), once)
    }

    /// Strings are scanned eight bytes at a time: every special byte at every offset of runs
    /// around the word size must still be escaped (writer) and decoded (parser) byte for byte.
    func test_special_bytes_at_every_offset_are_escaped_and_parsed() {
        func reference(_ string: String) -> String {
            var out = "\""
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20: out += "\\u00" + String(scalar.value >> 4, radix: 16) + String(scalar.value & 0xF, radix: 16)
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        for length in 0...20 {
            for special in ["\"", "\\", "\n", "\u{1}", "\u{1f}", "é", "😀", " ", "~", "\u{7f}"] {
                for offset in 0...length {
                    let plain = String(repeating: "a", count: length)
                    let text = String(plain.prefix(offset)) + special + String(plain.dropFirst(offset))
                    let written = JSONWriter.string(.string(text))
                    XCTAssertEqual(written, reference(text), "length \(length), offset \(offset)")
                    XCTAssertEqual(parse(written), .string(text), "length \(length), offset \(offset)")
                }
            }
        }
        // A raw control character or invalid UTF-8 inside a long string is still refused.
        XCTAssertThrowsError(try JSONParser.parse(Array("\"aaaaaaaaaaaa\u{1}aaaa\"".utf8)))
        XCTAssertThrowsError(try JSONParser.parse([0x22] + Array(repeating: 0x61, count: 11) + [0xFF, 0x22]))
    }
}
