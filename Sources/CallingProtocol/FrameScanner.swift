/// A validating scan of one client frame that builds nothing: it accepts exactly the documents
/// `JSONParser.parse` accepts (same grammar, the same depth limit of `JSONParser.maxDepth`, UTF-8
/// checked, numbers that overflow a double refused) and records where the envelope members and
/// the payload members the relay rules and `chat` read lie in the buffer. `ClientFrameDecoder`
/// decodes from these positions, so a relayed payload is checked once and forwarded as its bytes
/// (docs/protocol.md, "Envelope"), and a chat's strings are taken without a tree of its payload.
///
/// Every refusal is a plain `nil`, with no reason: the decoder then parses the frame with
/// `JSONParser`, whose error (code, message, byte offset) is the one the client gets. The scan
/// is the fast path for valid frames only.
struct FrameScanner {
    /// Where one value lies: `start..<end` in the frame, its first byte to its last.
    /// Positions are stored as `Int32` (`scan` refuses a frame of 2 GiB or more): the result of a
    /// scan is ten of these, set up and read once per frame, and half the width is half of that.
    struct Token {
        private var first: Int32
        private var last: Int32
        var kind: Kind

        init(start: Int, end: Int, kind: Kind) {
            first = Int32(truncatingIfNeeded: start)
            last = Int32(truncatingIfNeeded: end)
            self.kind = kind
        }

        var start: Int { Int(first) }
        var end: Int { Int(last) }
    }

    enum Kind: Equatable {
        /// `escaped`: the text has a backslash escape, so its bytes are not its characters.
        case string(escaped: Bool)
        case null, bool, object, array
        /// An integer literal of at most 18 digits: always an `Int64`.
        case integer
        /// Any other number (a fraction, an exponent, or 19 digits and more).
        case number
    }

    /// What a scan found. Duplicate keys: the last one wins, as in `JSONParser.parse`.
    struct Result {
        var type: Token?
        var to: Token?
        var payload: Token?
        /// Members of `payload` when it is an object (of the last `payload`, if repeated).
        var sdp: Token?
        var candidate: Token?
        var sdpMid: Token?
        var sdpMLineIndex: Token?
        /// The members a `chat` reads.
        var clientID: Token?
        var text: Token?
        var meta: Token?
        /// The payload object has a member besides those noted here (a chat's `reply_to`).
        var payloadHasOtherMembers = false

        fileprivate mutating func forgetPayloadMembers() {
            payloadHasOtherMembers = false
            sdp = nil
            candidate = nil
            sdpMid = nil
            sdpMLineIndex = nil
            clientID = nil
            text = nil
            meta = nil
        }
    }

    private let base: UnsafePointer<UInt8>
    private let count: Int
    private var index = 0
    /// Whether a string held a byte above 0x7F (nowhere else can one pass the scan).
    private var hasNonASCII = false

    private init(base: UnsafePointer<UInt8>, count: Int) {
        self.base = base
        self.count = count
    }

    /// The envelope of `buffer` when it is one valid JSON object; nil for anything else.
    /// Inlined into its caller with the envelope and payload loops: the scanner's state and the
    /// result are then the caller's locals rather than memory reached through `self`.
    @inline(__always)
    static func scan(_ buffer: UnsafeBufferPointer<UInt8>) -> Result? {
        guard let base = buffer.baseAddress, buffer.count > 0, buffer.count < Int(Int32.max) else { return nil }
        var scanner = FrameScanner(base: base, count: buffer.count)
        scanner.skipWhitespace()
        guard scanner.index < scanner.count, base[scanner.index] == UInt8(ascii: "{") else { return nil }
        var result = Result()
        guard scanner.scanEnvelope(into: &result) else { return nil }
        scanner.skipWhitespace()
        guard scanner.index == scanner.count else { return nil }
        // Bytes above 0x7F can only be inside strings here (anywhere else the scan refused them),
        // and the string scan noted whether there was one: an all-ASCII frame is not read again.
        if scanner.hasNonASCII, !UTF8Check.isValid(buffer) { return nil }
        return result
    }

    // MARK: the envelope and the payload

    private enum Member {
        case other, type, to, payload, sdp, candidate, sdpMid, sdpMLineIndex, clientID, text, meta
    }

    /// The top-level object (depth 1), from its `{`.
    @inline(__always)
    private mutating func scanEnvelope(into result: inout Result) -> Bool {
        index += 1
        skipWhitespace()
        if index < count, base[index] == UInt8(ascii: "}") {
            index += 1
            return true
        }
        while true {
            guard let member = key(envelope: true) else { return false }
            let start = index
            let kind: Kind
            if member == .payload, index < count, base[index] == UInt8(ascii: "{") {
                result.forgetPayloadMembers()
                guard scanPayload(into: &result) else { return false }
                kind = .object
            } else {
                guard let value = memberValue(depth: 1) else { return false }
                kind = value
                if member == .payload { result.forgetPayloadMembers() }
            }
            let token = Token(start: start, end: index, kind: kind)
            switch member {
            case .type: result.type = token
            case .to: result.to = token
            case .payload: result.payload = token
            default: break
            }
            guard let more = endOfMember(closing: UInt8(ascii: "}")) else { return false }
            if !more { return true }
        }
    }

    /// The payload object (depth 2), from its `{`, noting the members the relay rules and `chat` read.
    @inline(__always)
    private mutating func scanPayload(into result: inout Result) -> Bool {
        guard 2 <= JSONParser.maxDepth else { return false }
        index += 1
        skipWhitespace()
        if index < count, base[index] == UInt8(ascii: "}") {
            index += 1
            return true
        }
        while true {
            guard let member = key(envelope: false) else { return false }
            let start = index
            guard let kind = memberValue(depth: 2) else { return false }
            let token = Token(start: start, end: index, kind: kind)
            switch member {
            case .sdp: result.sdp = token
            case .candidate: result.candidate = token
            case .sdpMid: result.sdpMid = token
            case .sdpMLineIndex: result.sdpMLineIndex = token
            case .clientID: result.clientID = token
            case .text: result.text = token
            case .meta: result.meta = token
            case .other: result.payloadHasOtherMembers = true
            default: break
            }
            guard let more = endOfMember(closing: UInt8(ascii: "}")) else { return false }
            if !more { return true }
        }
    }

    /// A key spelt as the SDKs write it, its colon right after it: told by one or two 8-byte loads
    /// instead of `key`'s scan of a string, its colon and its name (a visible share of a relayed frame's
    /// scan under callgrind). Any other spelling, whitespace or escape is nil here
    /// and goes on to the rest of `key`, which accepts every key this does. Leaves `index` on the value.
    @inline(__always)
    private mutating func literalKey(envelope: Bool) -> Member? {
        // Both loads in bounds; a key this close to the end is left to `key`.
        guard index &+ 16 <= count else { return nil }
        let raw = UnsafeRawPointer(base + index)
        let head = UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self))
        let member: Member
        let length: Int
        if envelope {
            if head & 0x00FF_FFFF_FFFF_FFFF == 0x3A_2265_7079_7422 /* "type": */ {
                (member, length) = (.type, 7)
            } else if head & 0xFF_FFFF_FFFF == 0x3A_226F_7422 /* "to": */ {
                (member, length) = (.to, 5)
            } else if head == 0x6461_6F6C_7961_7022 /* "payload */,
                UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt16.self)) == 0x3A22 /* ": */ {
                (member, length) = (.payload, 10)
            } else {
                return nil
            }
        } else {
            if head == 0x6164_6964_6E61_6322 /* "candida */,
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt32.self)) == 0x3A22_6574 /* te": */ {
                (member, length) = (.candidate, 12)
            } else if head == 0x2264_694D_7064_7322 /* "sdpMid" */, base[index &+ 8] == UInt8(ascii: ":") {
                (member, length) = (.sdpMid, 9)
            } else if head == 0x6E69_4C4D_7064_7322 /* "sdpMLin */,
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) == 0x3A22_7865_646E_4965 /* eIndex": */ {
                (member, length) = (.sdpMLineIndex, 16)
            } else if head & 0xFFFF_FFFF_FFFF == 0x3A22_7064_7322 /* "sdp": */ {
                (member, length) = (.sdp, 6)
            } else if head == 0x5F74_6E65_696C_6322 /* "client_ */,
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt32.self)) == 0x3A22_6469 /* id": */ {
                (member, length) = (.clientID, 12)
            } else if head & 0x00FF_FFFF_FFFF_FFFF == 0x3A_2274_7865_7422 /* "text": */ {
                (member, length) = (.text, 7)
            } else if head & 0x00FF_FFFF_FFFF_FFFF == 0x3A_2261_7465_6D22 /* "meta": */ {
                (member, length) = (.meta, 7)
            } else if head & 0x00FF_FFFF_FFFF_FFFF == 0x3A_2265_7079_7422 /* "type": (an offer's or answer's payload) */ {
                (member, length) = (.other, 7)
            } else {
                return nil
            }
        }
        index &+= length
        skipWhitespace()
        return member
    }

    /// A member's key and its colon, leaving `index` on the value; which member it names.
    @inline(__always)
    private mutating func key(envelope: Bool) -> Member? {
        if let member = literalKey(envelope: envelope) { return member }
        skipWhitespace()
        guard index < count, base[index] == UInt8(ascii: "\"") else { return nil }
        let start = index
        guard let escaped = skipString() else { return nil }
        let end = index
        skipWhitespace()
        guard index < count, base[index] == UInt8(ascii: ":") else { return nil }
        index += 1
        skipWhitespace()
        if escaped {
            // A key spelt with escapes ("typ\u0065") names the same member; rare, so decoded.
            guard case .string(let name)? = try? JSONParser.parse(UnsafeBufferPointer(start: base + start, count: end - start))
            else { return nil }
            var utf8 = Array(name.utf8)
            return utf8.withUnsafeMutableBufferPointer { Self.member(UnsafeBufferPointer($0), envelope: envelope) }
        }
        return Self.member(UnsafeBufferPointer(start: base + start + 1, count: end - start - 2), envelope: envelope)
    }

    /// Which member a key's bytes name: told apart by length, then compared as one or two
    /// little-endian loads (this runs for every key of every frame, so no comparison chains).
    @inline(__always)
    private static func member(_ name: UnsafeBufferPointer<UInt8>, envelope: Bool) -> Member {
        guard let bytes = name.baseAddress else { return .other }
        let raw = UnsafeRawPointer(bytes)
        if envelope {
            switch name.count {
            case 2: return UInt16(littleEndian: raw.loadUnaligned(as: UInt16.self)) == 0x6f74 /* "to" */ ? .to : .other
            case 4: return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x6570_7974 /* "type" */ ? .type : .other
            case 7:
                return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x6c79_6170 /* "payl" */
                    && UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 3, as: UInt32.self)) == 0x6461_6f6c /* "load" */ ? .payload : .other
            default: return .other
            }
        }
        switch name.count {
        case 3: return UInt16(littleEndian: raw.loadUnaligned(as: UInt16.self)) == 0x6473 /* "sd" */ && bytes[2] == UInt8(ascii: "p") ? .sdp : .other
        case 4:
            let word = UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self))
            if word == 0x7478_6574 /* "text" */ { return .text }
            return word == 0x6174_656d /* "meta" */ ? .meta : .other
        case 6:
            return UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)) == 0x4d70_6473 /* "sdpM" */
                && UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 2, as: UInt32.self)) == 0x6469_4d70 /* "pMid" */ ? .sdpMid : .other
        case 9:
            let head = UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self))
            if head == 0x7461_6469_646e_6163 /* "candidat" */ { return bytes[8] == UInt8(ascii: "e") ? .candidate : .other }
            return head == 0x695f_746e_6569_6c63 /* "client_i" */ && bytes[8] == UInt8(ascii: "d") ? .clientID : .other
        case 13:
            return UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self)) == 0x656e_694c_4d70_6473 /* "sdpMLine" */
                && UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 5, as: UInt64.self)) == 0x7865_646e_4965_6e69 /* "ineIndex" */ ? .sdpMLineIndex : .other
        default: return .other
        }
    }

    /// Whether `bytes` are exactly `literal`.
    static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
        let length = literal.utf8CodeUnitCount
        guard bytes.count == length else { return false }
        let expected = literal.utf8Start
        for offset in 0..<length where bytes[offset] != expected[offset] { return false }
        return true
    }

    /// After a member's value: true after a `,`, false after `closing`, nil for anything else.
    private mutating func endOfMember(closing: UInt8) -> Bool? {
        skipWhitespace()
        guard index < count else { return nil }
        let byte = base[index]
        index += 1
        if byte == UInt8(ascii: ",") { return true }
        if byte == closing { return false }
        return nil
    }

    // MARK: values (JSONParser's grammar)

    /// Frames from the SDKs have no whitespace between tokens, so the common case is one
    /// comparison: every byte that can start or end a token is above 0x20.
    @inline(__always)
    private mutating func skipWhitespace() {
        if index < count, base[index] > 0x20 { return }
        skipWhitespaceRun()
    }

    private mutating func skipWhitespaceRun() {
        while index < count {
            switch base[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// A member value of the envelope or the payload: a string, the common case, inline.
    @inline(__always)
    private mutating func memberValue(depth: Int) -> Kind? {
        guard index < count else { return nil }
        let first = base[index]
        if first == UInt8(ascii: "\"") { return skipString().map { .string(escaped: $0) } }
        // One digit right before the member's end (a candidate's `sdpMLineIndex`) is an integer
        // as `skipNumber` would find it, without its call and its checks for a sign, a fraction
        // and an exponent.
        if first &- UInt8(ascii: "0") < 10, index &+ 1 < count, base[index &+ 1] == UInt8(ascii: ",") || base[index &+ 1] == UInt8(ascii: "}") {
            index &+= 1
            return .integer
        }
        return skipValue(depth: depth)
    }

    /// One value at `depth` (containers inside it are at `depth + 1`, as in `JSONParser`).
    private mutating func skipValue(depth: Int) -> Kind? {
        guard index < count else { return nil }
        switch base[index] {
        case UInt8(ascii: "{"): return skipObject(depth: depth + 1) ? .object : nil
        case UInt8(ascii: "["): return skipArray(depth: depth + 1) ? .array : nil
        case UInt8(ascii: "\""): return skipString().map { .string(escaped: $0) }
        case UInt8(ascii: "t"): return literal("true") ? .bool : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return skipNumber()
        default: return nil
        }
    }

    private mutating func literal(_ text: StaticString) -> Bool {
        let length = text.utf8CodeUnitCount
        guard index + length <= count, Self.equals(UnsafeBufferPointer(start: base + index, count: length), text) else { return false }
        index += length
        return true
    }

    private mutating func skipObject(depth: Int) -> Bool {
        guard depth <= JSONParser.maxDepth else { return false }
        index += 1
        skipWhitespace()
        if index < count, base[index] == UInt8(ascii: "}") {
            index += 1
            return true
        }
        while true {
            skipWhitespace()
            guard index < count, base[index] == UInt8(ascii: "\""), skipString() != nil else { return false }
            skipWhitespace()
            guard index < count, base[index] == UInt8(ascii: ":") else { return false }
            index += 1
            skipWhitespace()
            guard skipValue(depth: depth) != nil else { return false }
            guard let more = endOfMember(closing: UInt8(ascii: "}")) else { return false }
            if !more { return true }
        }
    }

    private mutating func skipArray(depth: Int) -> Bool {
        guard depth <= JSONParser.maxDepth else { return false }
        index += 1
        skipWhitespace()
        if index < count, base[index] == UInt8(ascii: "]") {
            index += 1
            return true
        }
        while true {
            skipWhitespace()
            guard skipValue(depth: depth) != nil else { return false }
            guard let more = endOfMember(closing: UInt8(ascii: "]")) else { return false }
            if !more { return true }
        }
    }

    /// A string from its opening quote; whether it has an escape, or nil when it is malformed.
    /// The common string (ASCII, no escape) ends at the first special byte it meets, inline;
    /// anything else goes on in `skipStringRest`.
    @inline(__always)
    private mutating func skipString() -> Bool? {
        let position = PlainRun.end(in: base, from: index + 1, to: count, stoppingAtNonASCII: true)
        if position < count, base[position] == UInt8(ascii: "\"") {
            index = position + 1
            return false
        }
        return skipStringRest(from: position)
    }

    /// The rest of a string from its first byte that is not plain ASCII. Bytes above 0x7F pass
    /// here and are noted in `hasNonASCII`: `scan` then checks the frame's UTF-8 once at the end.
    @inline(never)
    private mutating func skipStringRest(from start: Int) -> Bool? {
        var position = start
        var escaped = false
        while true {
            guard position < count else { return nil }
            let byte = base[position]
            if byte == UInt8(ascii: "\"") {
                index = position + 1
                return escaped
            }
            if byte >= 0x80 {
                hasNonASCII = true
                position = plainRunEnd(from: position + 1)
                continue
            }
            guard byte == UInt8(ascii: "\\") else { return nil }  // a control character
            escaped = true
            index = position
            guard skipEscape() else { return nil }
            position = plainRunEnd(from: index)
        }
    }

    /// Where the string's plain run from `start` ends; at the first byte above 0x7F too until
    /// `hasNonASCII` notes one (from then on the frame's UTF-8 is checked whole anyway).
    private func plainRunEnd(from start: Int) -> Int {
        hasNonASCII
            ? PlainRun.end(in: base, from: start, to: count, stoppingAtNonASCII: false)
            : PlainRun.end(in: base, from: start, to: count, stoppingAtNonASCII: true)
    }

    /// One escape from its backslash, with `JSONParser`'s rules for `\u` surrogates.
    private mutating func skipEscape() -> Bool {
        index += 1
        guard index < count else { return false }
        let escape = base[index]
        index += 1
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
             UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            return true
        case UInt8(ascii: "u"):
            guard let code = hex4() else { return false }
            if (0xD800...0xDBFF).contains(code) {
                guard index + 1 < count, base[index] == UInt8(ascii: "\\"), base[index + 1] == UInt8(ascii: "u") else { return false }
                index += 2
                guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return false }
                return true
            }
            return !(0xDC00...0xDFFF).contains(code)
        default:
            return false
        }
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = JSONParser.hexDigit(base[index]) else { return nil }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private func isDigit(_ offset: Int) -> Bool {
        offset < count && base[offset] >= UInt8(ascii: "0") && base[offset] <= UInt8(ascii: "9")
    }

    /// RFC 8259 number syntax; like `JSONParser`, a non-integer that overflows a double is refused.
    private mutating func skipNumber() -> Kind? {
        let start = index
        if base[index] == UInt8(ascii: "-") { index += 1 }
        guard index < count else { return nil }
        let integerStart = index
        if base[index] == UInt8(ascii: "0") {
            index += 1
        } else if isDigit(index) {
            while isDigit(index) { index += 1 }
        } else {
            return nil
        }
        // Digits before the point that count towards the magnitude ("0.5" has none).
        let integerDigits = base[integerStart] == UInt8(ascii: "0") ? 0 : index - integerStart
        var isInteger = true
        if index < count, base[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while isDigit(index) { index += 1 }
            guard index > digits else { return nil }
        }
        var exponent = 0
        if index < count, base[index] == UInt8(ascii: "e") || base[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            var negative = false
            if index < count, base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-") {
                negative = base[index] == UInt8(ascii: "-")
                index += 1
            }
            let digits = index
            while isDigit(index) {
                if exponent < 1_000_000 { exponent = exponent * 10 + Int(base[index] - UInt8(ascii: "0")) }
                index += 1
            }
            guard index > digits else { return nil }
            if negative { exponent = -exponent }
        }
        if isInteger { return index - integerStart <= 18 ? .integer : .number }
        // Below 10^308 a double is finite (an underflow to 0 is too); only a literal near or past
        // the limit is converted to find out, as `JSONParser` does for every one.
        if integerDigits + exponent <= 308 { return .number }
        let text = String(decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { return nil }
        return .number
    }
}

/// UTF-8 well-formedness as Unicode 15 §3.9 table 3-7 defines it (no overlong forms, no surrogates,
/// nothing past U+10FFFF): what `String(validating:)` accepts, without making a string.
enum UTF8Check {
    static func isValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        let count = bytes.count
        while index < count {
            let lead = bytes[index]
            if lead < 0x80 {
                index += 1
                continue
            }
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; high = 0x9F
            case 0xF0: length = 4; low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; high = 0x8F
            default: return false
            }
            guard index + length <= count else { return false }
            let second = bytes[index + 1]
            guard second >= low, second <= high else { return false }
            for offset in 2..<length where bytes[index + offset] & 0xC0 != 0x80 { return false }
            index += length
        }
        return true
    }
}
