import CJWT
import COpenSSL
import Foundation

// The libjwt 1.10.2 boundary. Nothing outside this file calls a `jwt_*` function, and nothing outside
// this module sees a libjwt return code: they become `LibJWTError` here, and `TokenVerifier` turns
// those into `TokenError`s.

/// A libjwt call returned a non-zero code.
///
/// libjwt reports errno-style codes (`EINVAL`, `ENOMEM`, `EEXIST`). `EINVAL` from `jwt_decode` also
/// means "the signature did not verify"; 1.10.2 does not tell the two apart.
public struct LibJWTError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The libjwt function that failed, for example `"jwt_set_alg"`.
    public let operation: String
    /// The code libjwt returned.
    public let code: Int32

    /// A short reading of `code`. A fixed table rather than `strerror`, whose buffer is shared.
    public var message: String {
        switch code {
        case EINVAL: "invalid argument, malformed token or signature mismatch"
        case ENOMEM: "out of memory"
        case EEXIST: "value already set"
        default: "error code \(code)"
        }
    }

    public var description: String { "\(operation) failed: \(message) (\(code))" }
}

/// The one place a libjwt `int` return code is interpreted: 0 is success, anything else throws.
func check(_ code: Int32, _ operation: String) throws(LibJWTError) {
    guard code == 0 else { throw LibJWTError(operation: operation, code: code) }
}

/// Owns one `jwt_t*` and frees it exactly once, in `deinit`.
///
/// `~Copyable` so the pointer cannot end up with two owners (a double `jwt_free`) and cannot escape
/// the function that made it. `jwt_free` also scrubs the key copy libjwt keeps inside the handle.
struct JWTHandle: ~Copyable {
    private let raw: OpaquePointer

    /// An empty token to add grants to and sign (`jwt_new`).
    init() throws(LibJWTError) {
        var made: OpaquePointer?
        try check(jwt_new(&made), "jwt_new")
        guard let made else { throw LibJWTError(operation: "jwt_new", code: ENOMEM) }
        raw = made
    }

    /// Decodes and verifies `token` with `key` (`jwt_decode`).
    ///
    /// Callers must have chosen `key` from the token's `alg` already: libjwt picks the algorithm from
    /// the token itself, so this alone would accept an HS256 token MAC'd with a public key.
    init(decoding token: String, key: [UInt8]) throws(LibJWTError) {
        // An empty key makes libjwt treat the call as "no key", which accepts alg=none tokens.
        guard !key.isEmpty, key.count <= Int(Int32.max) else {
            throw LibJWTError(operation: "jwt_decode", code: EINVAL)
        }
        var decoded: OpaquePointer?
        let code = key.withUnsafeBufferPointer { keyBytes in
            token.withCString { jwt_decode(&decoded, $0, keyBytes.baseAddress, Int32(keyBytes.count)) }
        }
        // A failed RSA/EC verification leaves entries on this thread's OpenSSL error queue. Left
        // there they would be reported by the next unrelated OpenSSL user on the thread (for
        // example a TLS read's SSL_get_error), so drain it whatever happened.
        ERR_clear_error()
        try check(code, "jwt_decode")
        guard let decoded else { throw LibJWTError(operation: "jwt_decode", code: EINVAL) }
        raw = decoded
    }

    deinit { jwt_free(raw) }

    /// The algorithm libjwt itself read from the header.
    var algorithm: jwt_alg_t { jwt_get_alg(raw) }

    /// Sets the signing algorithm and key; libjwt copies the key.
    func setAlgorithm(_ algorithm: jwt_alg_t, key: [UInt8]) throws(LibJWTError) {
        guard !key.isEmpty, key.count <= Int(Int32.max) else {
            throw LibJWTError(operation: "jwt_set_alg", code: EINVAL)
        }
        let code = key.withUnsafeBufferPointer { jwt_set_alg(raw, algorithm, $0.baseAddress, Int32($0.count)) }
        try check(code, "jwt_set_alg")
    }

    func addGrant(_ name: String, _ value: String) throws(LibJWTError) {
        try check(jwt_add_grant(raw, name, value), "jwt_add_grant")
    }

    func addGrant(_ name: String, _ value: Int) throws(LibJWTError) {
        try check(jwt_add_grant_int(raw, name, value), "jwt_add_grant_int")
    }

    func addGrant(_ name: String, _ value: Bool) throws(LibJWTError) {
        try check(jwt_add_grant_bool(raw, name, value ? 1 : 0), "jwt_add_grant_bool")
    }

    /// Signs and serialises the token (`jwt_encode_str`).
    func encode() throws(LibJWTError) -> String {
        let encoded = jwt_encode_str(raw)
        // jwt_encode_str reports its failure code only through errno; read it before anything else runs.
        let failure = errno
        // A failed RSA/EC signature leaves OpenSSL errors behind; see init(decoding:).
        ERR_clear_error()
        guard let encoded else { throw LibJWTError(operation: "jwt_encode_str", code: failure == 0 ? EINVAL : failure) }
        defer { cs_jwt_free_string(encoded) }
        return String(cString: encoded)
    }
}

extension JWTAlgorithm {
    /// The libjwt constant for this algorithm.
    var libjwt: jwt_alg_t {
        switch self {
        case .hs256: JWT_ALG_HS256
        case .rs256: JWT_ALG_RS256
        case .es256: JWT_ALG_ES256
        }
    }
}
