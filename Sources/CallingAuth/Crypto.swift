import COpenSSL
import CallingLogging

// Small libcrypto (OpenSSL 3) helpers shared by the verifier, TURN credentials and API keys.
// They use only non-deprecated one-shot calls (HMAC, EVP_Digest, RAND_bytes, CRYPTO_memcmp), so
// they hold no OpenSSL handle that would need an owner.

enum Crypto {
    /// HMAC of `data` under `key` with the digest `md` (for example `EVP_sha1()`), or nil if
    /// libcrypto fails, which with an in-memory key and a built-in digest means it is out of memory.
    static func hmac(_ md: OpaquePointer?, key: [UInt8], data: [UInt8]) -> [UInt8]? {
        hmac(md, key: key, data: data[...])
    }

    /// The same over part of an array (a token's signing input, without copying it out).
    static func hmac(_ md: OpaquePointer?, key: [UInt8], data: ArraySlice<UInt8>) -> [UInt8]? {
        guard let md, key.count <= Int(Int32.max) else { return nil }
        // HMAC() wants a non-NULL key pointer even for an empty key; an empty Array may have none.
        let keyBytes = key.isEmpty ? [0] : key
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var outLength: UInt32 = 0
        let ok = keyBytes.withUnsafeBufferPointer { keyBuffer in
            data.withUnsafeBufferPointer { dataBuffer in
                out.withUnsafeMutableBufferPointer { outBuffer in
                    HMAC(md, keyBuffer.baseAddress, Int32(key.count), dataBuffer.baseAddress, dataBuffer.count,
                         outBuffer.baseAddress, &outLength) != nil
                }
            }
        }
        guard ok else {
            ERR_clear_error()
            return nil
        }
        return Array(out.prefix(Int(outLength)))
    }

    /// SHA-256 of `data`, or nil if libcrypto fails (out of memory).
    static func sha256(_ data: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var outLength: UInt32 = 0
        let ok = data.withUnsafeBufferPointer { dataBuffer in
            out.withUnsafeMutableBufferPointer { outBuffer in
                EVP_Digest(dataBuffer.baseAddress, dataBuffer.count, outBuffer.baseAddress, &outLength,
                           EVP_sha256(), nil) == 1
            }
        }
        guard ok else {
            ERR_clear_error()
            return nil
        }
        return Array(out.prefix(Int(outLength)))
    }

    /// Compares without an early exit, so the time taken does not reveal how long a prefix of a
    /// guess was right. Only the lengths are compared in variable time; callers compare values of a
    /// public, fixed length (MACs, hashes).
    static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard !lhs.isEmpty else { return true }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, left.count) == 0 }
        }
    }

    /// Stops the process when libcrypto fails at something that cannot fail on valid in-memory
    /// input (a one-shot digest, the CSPRNG). There is no safe value to return instead: a
    /// predictable "random" token or an empty MAC would be worse than not running, and no caller
    /// input can reach this.
    static func unrecoverable(_ what: String) -> Never {
        fatalError("libcrypto failed in \(what); refusing to continue without working cryptography")
    }

    /// The newest message on this thread's OpenSSL error queue, after which the queue is emptied
    /// (left there, it would be misreported by the thread's next OpenSSL user).
    static func drainErrorQueue() -> String {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return "no OpenSSL error recorded" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Lower-case hex.
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// An HMAC-SHA-256 key set up once, for MACing many messages with it: the verifier checks every
/// HS256 token with the same secret. `HMAC()` fetches the algorithm, builds and configures a
/// context and hashes the key's pads again on every call (about half of its cost per token
/// under callgrind). Here the pads are hashed once, into `template`, and a MAC reuses a
/// spare context that `EVP_MAC_init` without a key resets to them (OpenSSL's HMAC keeps the keyed
/// state for exactly that); copying the template for each MAC and freeing the copy was a
/// further allocation and copy per token.
///
/// `@unchecked Sendable`: `template` is initialised in `init` and only read afterwards
/// (`EVP_MAC_CTX_dup` takes it `const`; the digest it shares is reference-counted atomically), and a
/// spare context belongs to one caller at a time: it is taken out of `spares` under the lock and
/// put back after. So any number of threads may call `mac(_:)` at once; those that find no spare
/// copy the template, and the spares they leave behind are kept up to `maximumSpares`.
final class HMACKey: @unchecked Sendable {
    private let template: OpaquePointer
    private let spares = Locked<[Context]>([])
    /// A context in `spares`: owned by the list while it is in it, by one `mac(_:)` call while not.
    private struct Context: @unchecked Sendable { let pointer: OpaquePointer }
    /// As many as threads that verify at the same moment, in practice; the rest are freed.
    static let maximumSpares = 8

    /// Nil if libcrypto cannot set the key up, which for a built-in digest means out of memory.
    init?(sha256Key key: [UInt8]) {
        guard let algorithm = EVP_MAC_fetch(nil, "HMAC", nil) else {
            ERR_clear_error()
            return nil
        }
        defer { EVP_MAC_free(algorithm) }
        guard let context = EVP_MAC_CTX_new(algorithm) else {
            ERR_clear_error()
            return nil
        }
        // EVP_MAC_init wants a non-NULL key pointer even for an empty key; an empty Array may have none.
        let keyBytes = key.isEmpty ? [0] : key
        let ok = "digest".withCString { name in
            "SHA256".withCString { digest in
                // OSSL_PARAM_construct_utf8_string takes `char *` but only reads it here.
                var parameters = [OSSL_PARAM_construct_utf8_string(name, UnsafeMutablePointer(mutating: digest), 0),
                                  OSSL_PARAM_construct_end()]
                return keyBytes.withUnsafeBufferPointer { keyBuffer in
                    EVP_MAC_init(context, keyBuffer.baseAddress, key.count, &parameters) == 1
                }
            }
        }
        guard ok else {
            EVP_MAC_CTX_free(context)
            ERR_clear_error()
            return nil
        }
        template = context
    }

    deinit {
        EVP_MAC_CTX_free(template)
        spares.withLock { spares in
            for context in spares { EVP_MAC_CTX_free(context.pointer) }
        }
    }

    /// The MAC of `data`, or nil if libcrypto fails (out of memory).
    func mac(_ data: ArraySlice<UInt8>) -> [UInt8]? {
        let context: OpaquePointer
        if let spare = spares.withLock({ $0.popLast() })?.pointer {
            // No key: back to the keyed state the context was made with (its last MAC is finished).
            guard EVP_MAC_init(spare, nil, 0, nil) == 1 else {
                EVP_MAC_CTX_free(spare)
                ERR_clear_error()
                return nil
            }
            context = spare
        } else {
            guard let copy = EVP_MAC_CTX_dup(template) else {
                ERR_clear_error()
                return nil
            }
            context = copy
        }
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var outLength = 0
        let ok = data.withUnsafeBufferPointer { dataBuffer in
            out.withUnsafeMutableBufferPointer { outBuffer in
                EVP_MAC_update(context, dataBuffer.baseAddress, dataBuffer.count) == 1
                    && EVP_MAC_final(context, outBuffer.baseAddress, &outLength, outBuffer.count) == 1
            }
        }
        guard ok else {
            // A context libcrypto failed on is not kept: its state is not known.
            EVP_MAC_CTX_free(context)
            ERR_clear_error()
            return nil
        }
        let returned = Context(pointer: context)
        let kept = spares.withLock { spares in
            guard spares.count < Self.maximumSpares else { return false }
            spares.append(returned)
            return true
        }
        if !kept { EVP_MAC_CTX_free(context) }
        out.removeSubrange(outLength...)
        return out
    }
}
