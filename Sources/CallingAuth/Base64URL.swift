/// Unpadded base64url (RFC 4648 §5), as JWS uses it for all three segments.
///
/// Written out rather than through Foundation's `Data` base64 (plus two `replacingOccurrences` and a
/// padding loop): every join and every authenticated request decodes three segments and encodes one
/// MAC, and Foundation's route cost several thousand instructions each.
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The 6-bit value of each base64url character; 0xFF for every other byte.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in alphabet.enumerated() { table[Int(character)] = UInt8(value) }
        return table
    }()

    /// `bytes` as unpadded base64url text.
    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        String(decoding: encodedBytes(Array(bytes)), as: UTF8.self)
    }

    /// `input` as the bytes of its unpadded base64url text: what a MAC is compared as.
    static func encodedBytes(_ input: [UInt8]) -> [UInt8] {
        let count = (input.count * 4 + 2) / 3
        return input.withUnsafeBufferPointer { input in
            alphabet.withUnsafeBufferPointer { alphabet in
                [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
                    var index = 0
                    var written = 0
                    while index + 3 <= input.count {
                        let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                        out[written] = alphabet[Int(group >> 18)]
                        out[written + 1] = alphabet[Int(group >> 12 & 0x3F)]
                        out[written + 2] = alphabet[Int(group >> 6 & 0x3F)]
                        out[written + 3] = alphabet[Int(group & 0x3F)]
                        index += 3
                        written += 4
                    }
                    switch input.count - index {
                    case 1:
                        let group = UInt32(input[index]) << 16
                        out[written] = alphabet[Int(group >> 18)]
                        out[written + 1] = alphabet[Int(group >> 12 & 0x3F)]
                        written += 2
                    case 2:
                        let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
                        out[written] = alphabet[Int(group >> 18)]
                        out[written + 1] = alphabet[Int(group >> 12 & 0x3F)]
                        out[written + 2] = alphabet[Int(group >> 6 & 0x3F)]
                        written += 3
                    default:
                        break
                    }
                    initialized = written
                }
            }
        }
    }

    /// Decodes unpadded base64url, or nil if `text` holds anything outside the alphabet (padding
    /// included) or has an impossible length (a remainder of one character). As Foundation's decoder
    /// did before, the unused low bits of a final partial group are ignored rather than refused.
    ///
    /// Four characters at a time into an array of the exact size: appending byte by byte cost a
    /// capacity check per character, and a join decodes a token's header and claims.
    static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        if let decoded = text.withContiguousStorageIfAvailable({ decode(contiguous: $0) }) { return decoded }
        return Array(text).withUnsafeBufferPointer { decode(contiguous: $0) }
    }

    private static func decode(contiguous text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let remainder = text.count % 4
        guard remainder != 1 else { return nil }
        // 3 bytes per full group, then 1 for a remainder of 2 characters and 2 for 3.
        let count = text.count / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        return values.withUnsafeBufferPointer { values -> [UInt8]? in
            var valid = true
            let out = [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
                var index = 0
                var written = 0
                while index + 4 <= text.count {
                    let a = values[Int(text[index])], b = values[Int(text[index + 1])]
                    let c = values[Int(text[index + 2])], d = values[Int(text[index + 3])]
                    // Every value is below 64 and 0xFF marks a foreign byte.
                    guard (a | b | c | d) & 0xC0 == 0 else {
                        valid = false
                        return
                    }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[written] = UInt8(truncatingIfNeeded: group >> 16)
                    out[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    out[written + 2] = UInt8(truncatingIfNeeded: group)
                    index += 4
                    written += 3
                }
                if remainder > 0 {
                    var group: UInt32 = 0
                    for offset in 0..<remainder {
                        let value = values[Int(text[index + offset])]
                        guard value & 0xC0 == 0 else {
                            valid = false
                            return
                        }
                        group = group << 6 | UInt32(value)
                    }
                    if remainder == 2 {
                        out[written] = UInt8(truncatingIfNeeded: group >> 4)
                    } else {
                        out[written] = UInt8(truncatingIfNeeded: group >> 10)
                        out[written + 1] = UInt8(truncatingIfNeeded: group >> 2)
                    }
                }
                initialized = count
            }
            return valid ? out : nil
        }
    }

    /// True for the 64 base64url characters. Compared rather than looked up in `values`: every
    /// byte of every token goes through here, and each access to a global table checks that it has
    /// been initialised.
    @inline(__always)
    static func isAlphabet(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }
}
