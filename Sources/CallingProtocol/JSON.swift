/// Why a byte sequence is not a JSON document. Positions are byte offsets, for error messages.
public enum JSONParseError: Error, Equatable, Sendable {
    case invalidUTF8
    case unexpectedEnd
    case unexpectedByte(offset: Int)
    case invalidNumber(offset: Int)
    case invalidEscape(offset: Int)
    case tooDeep
    case trailingData(offset: Int)

    public var message: String {
        switch self {
        case .invalidUTF8: return "text is not valid UTF-8"
        case .unexpectedEnd: return "JSON ends early"
        case .unexpectedByte(let o): return "unexpected character at byte \(o)"
        case .invalidNumber(let o): return "invalid number at byte \(o)"
        case .invalidEscape(let o): return "invalid string escape at byte \(o)"
        case .tooDeep: return "JSON nesting is deeper than \(JSONParser.maxDepth)"
        case .trailingData(let o): return "unexpected data after the JSON value at byte \(o)"
        }
    }
}

/// RFC 8259 parser over UTF-8 bytes. Depth-limited so a hostile frame cannot exhaust the stack.
public struct JSONParser {
    public static let maxDepth = 64

    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in try parse(buffer) }
    }

    /// `parse` of part of a buffer (a relayed payload inside its frame); offsets in errors count
    /// from the slice's start.
    public static func parse(_ bytes: ArraySlice<UInt8>) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in try parse(buffer) }
    }

    static func parse(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: buffer)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.index != buffer.count { throw .trailingData(offset: parser.index) }
        return value
    }

    /// Parses `bytes` as one JSON document and, when its top level is an object, hands each member
    /// to `member` in document order (a repeated key is handed over again) instead of collecting the
    /// members in a dictionary. Returns false without calling `member` when the top-level value is not
    /// an object; the caller can parse such a document with `parse` for its error or its value.
    /// Errors are those `parse` throws for the same bytes; `maxDepth` (at most `JSONParser.maxDepth`)
    /// lowers the nesting limit, the top-level object counting as depth 1, for callers that accept
    /// only shallow documents (the verifier of peer tokens: 16).
    public static func parseMembers(
        _ bytes: [UInt8], maxDepth: Int = JSONParser.maxDepth, _ member: (String, JSONValue) -> Void
    ) throws(JSONParseError) -> Bool {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> Bool in
            var parser = JSONParser(bytes: buffer, depthLimit: min(maxDepth, Self.maxDepth))
            parser.skipWhitespace()
            guard parser.index < buffer.count, buffer[parser.index] == UInt8(ascii: "{") else { return false }
            try parser.parseMembers(depth: 1, member)
            parser.skipWhitespace()
            if parser.index != buffer.count { throw .trailingData(offset: parser.index) }
            return true
        }
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private let depthLimit: Int

    private init(bytes: UnsafeBufferPointer<UInt8>, depthLimit: Int = JSONParser.maxDepth) {
        self.bytes = bytes
        self.depthLimit = depthLimit
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw .unexpectedEnd }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw .unexpectedByte(offset: index)
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw .unexpectedEnd }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            throw .unexpectedByte(offset: index + offset)
        }
        index += count
    }

    private mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= depthLimit else { throw .tooDeep }
        if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "}") {
            index += 2
            return .object([:])  // no table allocated for `{}`
        }
        // Room for the few keys of a typical frame object up front: growing from empty to two or
        // three keys reallocated and rehashed the table twice.
        var fields = [String: JSONValue](minimumCapacity: 4)
        // Duplicate keys: the last one wins, as in JavaScript's JSON.parse.
        try parseMembers(depth: depth) { fields[$0] = $1 }
        return .object(fields)
    }

    /// The members of the object starting at `index` (its `{`), each handed to `member` in order.
    private mutating func parseMembers(depth: Int, _ member: (String, JSONValue) -> Void) throws(JSONParseError) {
        guard depth <= depthLimit else { throw .tooDeep }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw .unexpectedEnd }
            guard bytes[index] == UInt8(ascii: "\"") else { throw .unexpectedByte(offset: index) }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count else { throw .unexpectedEnd }
            guard bytes[index] == UInt8(ascii: ":") else { throw .unexpectedByte(offset: index) }
            index += 1
            skipWhitespace()
            member(key, try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw .unexpectedEnd }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return
            default: throw .unexpectedByte(offset: index)
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= depthLimit else { throw .tooDeep }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw .unexpectedEnd }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(elements)
            default: throw .unexpectedByte(offset: index)
            }
        }
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        var ascii = true
        // Plain ASCII eight bytes at a time; the loop below takes over at the first byte that is not.
        index = PlainRun.end(in: bytes.baseAddress!, from: index, to: bytes.count, stoppingAtNonASCII: true)
        // Fast path: no escapes, so the bytes can be validated and copied in one step.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                // ASCII is valid UTF-8 as it stands; `String(validating:)` is an unspecialized generic
                // (metadata lookups on every call) and was a tenth of the service thread's time.
                if ascii { return String(decoding: slice, as: UTF8.self) }
                guard let string = String(validating: slice, as: UTF8.self) else { throw .invalidUTF8 }
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw .unexpectedByte(offset: index) }
            if byte >= 0x80 { ascii = false }
            index += 1
        }
        var scalars: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: scalars, as: UTF8.self) else { throw .invalidUTF8 }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw .unexpectedEnd }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append(0x22)
                case UInt8(ascii: "\\"): scalars.append(0x5C)
                case UInt8(ascii: "/"): scalars.append(0x2F)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    if (0xD800...0xDBFF).contains(code) {
                        // A high surrogate must be followed by an escaped low surrogate.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw .invalidEscape(offset: index) }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw .invalidEscape(offset: index) }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw .invalidEscape(offset: index)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw .invalidEscape(offset: index) }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw .invalidEscape(offset: index - 1)
                }
            default:
                if byte < 0x20 { throw .unexpectedByte(offset: index) }
                scalars.append(byte)
                index += 1
            }
        }
        throw .unexpectedEnd
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw .unexpectedEnd }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Self.hexDigit(bytes[index]) else { throw .invalidEscape(offset: index) }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    /// The value of one hexadecimal digit of a `\u` escape (either case), or nil. Shared with
    /// `FrameScanner`, which must accept exactly the escapes this parser accepts.
    @inline(__always)
    static func hexDigit(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(byte - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw .invalidNumber(offset: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        } else {
            throw .invalidNumber(offset: start)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw .invalidNumber(offset: start) }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw .invalidNumber(offset: start) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger { return Int64(text).map(JSONValue.int) ?? .bigInteger(text) }
        guard let double = Double(text), double.isFinite else { throw .invalidNumber(offset: start) }
        return .double(double)
    }
}

/// Compact JSON output with keys sorted, so equal values always serialize to equal bytes.
public enum JSONWriter {
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        write(value, into: &out)
        return out
    }

    public static func string(_ value: JSONValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: writeRaw("null", into: &out)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): writeInteger(i, into: &out)
        case .bigInteger(let text): out.append(contentsOf: text.utf8)
        case .double(let d) where !d.isFinite:
            writeRaw("null", into: &out)  // JSON has no NaN or infinity
        case .double(let d):
            if d.rounded() == d && abs(d) < 1e15 {
                writeInteger(Int64(d), into: &out)
            } else {
                out.append(contentsOf: "\(d)".utf8)
            }
        case .string(let s): writeString(s, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            if fields.count <= smallObject {
                writeSmall(fields, into: &out)
            } else {
                // Sorting the pairs rather than the keys saves hashing every key a second time to
                // look its value up.
                for (offset, field) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
                    if offset > 0 { out.append(UInt8(ascii: ",")) }
                    writeMember(field.key, field.value, into: &out)
                }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Objects up to this many members are sorted on the stack (`writeSmall`).
    static let smallObject = 8

    /// The members of a small object in key order: their dictionary indices insertion-sorted in a
    /// stack buffer, so neither an array of pairs is allocated nor a key hashed again. Every frame's
    /// payload is such an object.
    private static func writeSmall(_ fields: [String: JSONValue], into out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: Dictionary<String, JSONValue>.Index.self, capacity: smallObject) { order in
            var count = 0
            for index in fields.indices {
                let key = fields[index].key
                var slot = count
                while slot > 0, key < fields[order[slot - 1]].key { slot -= 1 }
                if slot < count { (order.baseAddress! + slot + 1).moveInitialize(from: order.baseAddress! + slot, count: count - slot) }
                (order.baseAddress! + slot).initialize(to: index)
                count += 1
            }
            for offset in 0..<count {
                if offset > 0 { out.append(UInt8(ascii: ",")) }
                let field = fields[order[offset]]
                writeMember(field.key, field.value, into: &out)
            }
            order.baseAddress!.deinitialize(count: count)
        }
    }

    private static func writeMember(_ key: String, _ value: JSONValue, into out: inout [UInt8]) {
        writeString(key, into: &out)
        out.append(UInt8(ascii: ":"))
        write(value, into: &out)
    }

    /// Appends literal bytes with one copy (appending a `String.UTF8View` goes element by element).
    /// For writers that emit a fixed shape directly, keys in sorted order, instead of building a
    /// `JSONValue` to encode.
    public static func writeRaw(_ literal: StaticString, into out: inout [UInt8]) {
        literal.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    /// Decimal digits without going through `String(i)` (an allocation per number).
    public static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    /// A string, or `null` for nil.
    public static func writeStringOrNull(_ string: String?, into out: inout [UInt8]) {
        if let string { writeString(string, into: &out) } else { writeRaw("null", into: &out) }
    }

    public static func writeString(_ string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var string = string
        // Runs of bytes that need no escape (nearly all of them) are appended in one copy.
        string.withUTF8 { utf8 in
            guard let base = utf8.baseAddress else { return }
            var runStart = 0
            var index = 0
            while true {
                index = PlainRun.end(in: base, from: index, to: utf8.count, stoppingAtNonASCII: false)
                guard index < utf8.count else { break }
                let byte = utf8[index]
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                index += 1
                runStart = index
                switch byte {
                case 0x22: out.append(contentsOf: [0x5C, 0x22])
                case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
                case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
                case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
                case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// Finds where a run of bytes that JSON strings carry as they are ends: the first `"`, `\\` or
/// control character (below 0x20), optionally also the first non-ASCII byte. Eight bytes are tested
/// at a time with the usual bit tricks (a byte is zero exactly when `(x - 0x01) & ~x & 0x80` is set
/// in it, summed over the word; below 0x20 likewise with 0x20): string contents are most of the
/// bytes of every frame parsed and written. The word that holds the first special byte gives its
/// position directly; only a tail shorter than eight bytes is checked byte by byte.
enum PlainRun {
    @inline(__always)
    static func end(in base: UnsafePointer<UInt8>, from start: Int, to end: Int, stoppingAtNonASCII: Bool) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var index = start
        // The last position a whole word fits at, computed once: `index + 8 <= end` was an add
        // and an overflow check per word.
        let lastWord = end &- 8
        while index <= lastWord {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
            let control = (word &- 0x20 &* ones) & ~word & highs
            let quote = word ^ (0x22 &* ones)
            let backslash = word ^ (0x5C &* ones)
            var special = control | ((quote &- ones) & ~quote & highs) | ((backslash &- ones) & ~backslash & highs)
            if stoppingAtNonASCII { special |= word & highs }
            // A borrow can only mark bytes above a byte that really matches, so the lowest mark is
            // the first special byte: found without going through the word byte by byte.
            if special != 0 { return index &+ special.trailingZeroBitCount / 8 }
            index &+= 8
        }
        while index < end {
            let byte = base[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C || (stoppingAtNonASCII && byte >= 0x80) { break }
            index += 1
        }
        return index
    }
}
