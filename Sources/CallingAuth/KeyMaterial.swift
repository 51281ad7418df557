import COpenSSL
import Foundation

/// A problem with the keys or settings handed to `TokenIssuer` or `TokenVerifier`.
///
/// These surface once, at startup, from configuration the operator controls; they are never caused
/// by a client's token.
public enum AuthConfigurationError: Error, Equatable, Sendable {
    /// RFC 7518 §3.2 requires an HS256 key at least as long as the hash output (32 bytes).
    case secretTooShort(minimumBytes: Int, actualBytes: Int)
    /// The PEM text holds no usable private key (unreadable, passphrase-protected, or a public key).
    case invalidPrivateKey(String)
    /// The PEM text holds no usable public key.
    case invalidPublicKey(String)
    /// A readable key that no accepted algorithm can use: not RSA or EC, an RSA key under 2048
    /// bits, or an EC key on a curve other than P-256.
    case unsupportedKeyType(String)
    /// A verifier was given neither an HS256 secret nor a public key.
    case noVerificationKey
    /// Leeway must be finite and not negative.
    case invalidLeeway(TimeInterval)
    /// An expected audience, when given, must not be empty.
    case emptyAudience
}

/// An asymmetric key that passed inspection: its algorithm, and the key re-exported by OpenSSL as
/// canonical PEM. libjwt is handed these exact bytes, so the key it parses on every call is the
/// one that was inspected here, not whatever else the operator's file also contained.
struct InspectedKey: Sendable, Equatable {
    let algorithm: JWTAlgorithm
    let pem: [UInt8]
}

/// Reads PEM keys with OpenSSL to decide which algorithm they can serve.
enum PEMKeys {
    static let minimumRSABits: Int32 = 2048

    static func inspectPublicKey(_ pem: String) throws(AuthConfigurationError) -> InspectedKey {
        try inspect(pem, isPrivate: false)
    }

    static func inspectPrivateKey(_ pem: String) throws(AuthConfigurationError) -> InspectedKey {
        try inspect(pem, isPrivate: true)
    }

    private static func inspect(_ pem: String, isPrivate: Bool) throws(AuthConfigurationError) -> InspectedKey {
        // OpenSSL 3's decoders can leave entries on the thread's error queue even when a key loads.
        defer { ERR_clear_error() }
        let unreadable: (String) -> AuthConfigurationError = isPrivate ? { .invalidPrivateKey($0) } : { .invalidPublicKey($0) }
        let outcome = withKey(pem, isPrivate: isPrivate) { key -> Result<InspectedKey, AuthConfigurationError> in
            do throws(AuthConfigurationError) {
                let algorithm = try algorithm(of: key)
                guard let exported = export(key, isPrivate: isPrivate) else {
                    return .failure(unreadable("cannot re-export key: \(Crypto.drainErrorQueue())"))
                }
                return .success(InspectedKey(algorithm: algorithm, pem: exported))
            } catch {
                return .failure(error)
            }
        }
        guard let outcome else {
            let wanted = isPrivate ? "unencrypted PEM private key" : "PEM public key"
            throw unreadable("no \(wanted) found: \(Crypto.drainErrorQueue())")
        }
        return try outcome.get()
    }

    /// Parses the first PEM key in `pem` and lends it to `body`, freeing the `EVP_PKEY` and the BIO
    /// when `body` returns. Nil if there is no key of the wanted kind.
    private static func withKey<R>(_ pem: String, isPrivate: Bool, _ body: (OpaquePointer) -> R) -> R? {
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty, bytes.count <= Int(Int32.max) else { return nil }
        return bytes.withUnsafeBytes { buffer -> R? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            // A passphrase callback that always supplies none: OpenSSL's default would prompt on the
            // server's terminal and block. An encrypted key therefore fails to load, as it should.
            let noPassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in 0 }
            let key = isPrivate
                ? PEM_read_bio_PrivateKey(bio, nil, noPassphrase, nil)
                : PEM_read_bio_PUBKEY(bio, nil, noPassphrase, nil)
            guard let key else { return nil }
            defer { EVP_PKEY_free(key) }
            return body(key)
        }
    }

    /// RSA of 2048 bits or more → RS256; EC on P-256 → ES256; anything else is refused.
    private static func algorithm(of key: OpaquePointer) throws(AuthConfigurationError) -> JWTAlgorithm {
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA:
            let bits = EVP_PKEY_get_bits(key)
            guard bits >= minimumRSABits else {
                throw .unsupportedKeyType("RSA key of \(bits) bits; at least \(minimumRSABits) required")
            }
            return .rs256
        case EVP_PKEY_EC:
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1 else {
                throw .unsupportedKeyType("EC key without a named curve: \(Crypto.drainErrorQueue())")
            }
            let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // ES256 is defined on P-256 only; libjwt would sign with any curve and emit a
            // signature no other verifier accepts as ES256.
            guard curve == "prime256v1" || curve == "P-256" else {
                throw .unsupportedKeyType("EC key on curve \(curve); ES256 needs P-256 (prime256v1)")
            }
            return .es256
        default:
            throw .unsupportedKeyType("only RSA (RS256) and EC P-256 (ES256) keys are supported")
        }
    }

    /// The key written back out as PEM (SubjectPublicKeyInfo, or unencrypted PKCS#8).
    private static func export(_ key: OpaquePointer, isPrivate: Bool) -> [UInt8]? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        let written = isPrivate
            ? PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil)
            : PEM_write_bio_PUBKEY(bio, key)
        guard written == 1 else { return nil }
        let pending = BIO_ctrl_pending(bio)
        guard pending > 0, pending <= Int(Int32.max) else { return nil }
        var out = [UInt8](repeating: 0, count: pending)
        let read = out.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
        guard read == Int32(pending) else { return nil }
        return out
    }
}
