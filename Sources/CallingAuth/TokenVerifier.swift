import CJWT
import COpenSSL
import CallingValues
import Foundation

/// Verifies peer tokens: HS256 MACs with OpenSSL here, RS256/ES256 signatures with libjwt, and
/// everything libjwt 1.10 does not check in Swift.
///
/// libjwt 1.10.2 trusts the token's own `alg` header and validates no claims. Handing it "the key"
/// would let an attacker pick the algorithm: an HS256 token MAC'd with the (public!) RSA key PEM
/// verifies if that PEM is passed as the key. So the header is parsed here first, the key is chosen
/// by `alg` — HS256 gets only the secret, RS256/ES256 only a public key of the matching type — and
/// anything else is refused before a signature is looked at. Header and claims are parsed once, by
/// `TokenJSON` (repeated member names refused). `exp`, `nbf`, `aud` and `sub` are checked after.
///
/// A value type; `verify` allocates and frees its own libjwt handle and HMAC context (copied from
/// the immutable `HMACKey`), so one verifier can be shared by any number of threads.
public struct TokenVerifier: Sendable {
    /// Longer inputs are refused unparsed: libjwt decodes each segment into a stack buffer
    /// (`alloca`) as long as the segment, so an unbounded token is a stack overflow.
    public static let maximumTokenLength = 8192

    /// The `aud` value a token must carry, if any.
    public let audience: String?
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    public let leeway: TimeInterval
    /// Algorithms this verifier has a key for.
    public var acceptedAlgorithms: Set<JWTAlgorithm> {
        var algorithms = Set<JWTAlgorithm>()
        if secret != nil { algorithms.insert(.hs256) }
        if let publicKey { algorithms.insert(publicKey.algorithm) }
        return algorithms
    }

    private let secret: [UInt8]?
    /// `secret` set up for HMAC-SHA-256 once; shared and immutable, so the verifier stays a value
    /// that any number of threads may use (see `HMACKey`).
    private let hmacKey: HMACKey?
    private let publicKey: InspectedKey?
    private let clock: @Sendable () -> Date

    /// - Parameters:
    ///   - hs256Secret: accept HS256 tokens MAC'd with this secret (at least 32 bytes); nil to refuse
    ///     HS256 altogether.
    ///   - publicKeyPEM: accept RS256 tokens (an RSA key of at least 2048 bits) or ES256 tokens (an EC
    ///     P-256 key), decided by the key's type. The other asymmetric algorithm stays refused.
    ///   - audience: if set, tokens must carry it in `aud` (a string, or an array containing it).
    ///   - leeway: seconds of clock skew allowed on `exp` and `nbf`.
    ///   - clock: the time `verify(_:)` checks against.
    /// - Throws: if no key is given, a key is unusable, the leeway is negative or the audience empty.
    public init(
        hs256Secret: [UInt8]?,
        publicKeyPEM: String? = nil,
        audience: String? = nil,
        leeway: TimeInterval = 30,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) throws(AuthConfigurationError) {
        if let hs256Secret, hs256Secret.count < TokenIssuer.minimumSecretLength {
            throw .secretTooShort(minimumBytes: TokenIssuer.minimumSecretLength, actualBytes: hs256Secret.count)
        }
        guard hs256Secret != nil || publicKeyPEM != nil else { throw .noVerificationKey }
        guard leeway.isFinite, leeway >= 0 else { throw .invalidLeeway(leeway) }
        if audience?.isEmpty == true { throw .emptyAudience }
        secret = hs256Secret
        hmacKey = hs256Secret.flatMap { HMACKey(sha256Key: $0) }
        publicKey = try publicKeyPEM.map { pem throws(AuthConfigurationError) in try PEMKeys.inspectPublicKey(pem) }
        self.audience = audience
        self.leeway = leeway
        self.clock = clock
    }

    /// Verifies `token` at the injected clock's current time.
    public func verify(_ token: String) throws(TokenError) -> PeerTokenClaims {
        try verify(token, now: clock())
    }

    /// Verifies `token` as of `now` and returns its claims.
    ///
    /// Any input, however broken, ends in a `TokenError` rather than a trap. Checks run in this
    /// order, so a forged token never learns more than `malformed`/`unsupportedAlgorithm`/
    /// `badSignature`: structure and header → algorithm and key → payload JSON → signature → claim
    /// presence and types → `exp` → `nbf` → `aud`.
    public func verify(_ token: String, now: Date) throws(TokenError) -> PeerTokenClaims {
        let parts = try Self.split(token)

        // The header, read by us, decides the key.
        guard let headerBytes = Base64URL.decode(parts.header), let header = TokenJSON.object(from: headerBytes) else {
            throw .malformed
        }
        let algorithm = try Self.algorithm(in: header)
        let key = try self.key(for: algorithm)
        // An unsecured JWS (`alg: none`) has an empty third segment; `split` lets that through
        // only so that it is refused for its algorithm above, as docs/protocol.md says.
        guard !parts.signature.isEmpty else { throw .malformed }

        // Parsed before the signature is checked so that a broken payload is reported as malformed
        // rather than as a bad signature. These are the claims acted on: the signed bytes, read once
        // under `TokenJSON`'s rules (no repeated member names), so no other parser could read them
        // differently.
        guard let payloadBytes = Base64URL.decode(parts.payload), let payload = TokenJSON.object(from: payloadBytes),
              Base64URL.decode(parts.signature) != nil
        else {
            throw .malformed
        }

        switch algorithm {
        case .hs256:
            // Checked here alone, in constant time (libjwt 1.10.2 compares HMACs with strcmp, whose
            // running time tells an attacker how many leading characters of a forged MAC are right).
            // libjwt's decode would only repeat this MAC and parse header and claims again.
            // Without a prepared key (libcrypto out of memory at start-up, or now) the one-shot HMAC.
            guard let mac = hmacKey?.mac(parts.signingInput) ?? Crypto.hmac(EVP_sha256(), key: key, data: parts.signingInput)
            else { throw .internalError(ENOMEM) }
            guard Crypto.constantTimeEquals(Base64URL.encodedBytes(mac), Array(parts.signature)) else {
                throw .badSignature
            }
        case .rs256, .es256:
            let decodedAlgorithm: jwt_alg_t
            do throws(LibJWTError) {
                let jwt = try JWTHandle(decoding: token, key: key)
                decodedAlgorithm = jwt.algorithm
            } catch let error {
                guard error.code == EINVAL else { throw .internalError(error.code) }
                throw .badSignature
            }
            // libjwt parses the header again, with jansson, and verifies with the algorithm it read.
            // With repeated names refused above the two readings agree; this check keeps that from
            // resting on one parser alone: had libjwt read another `alg`, the key we chose would have
            // been used with an algorithm we did not choose it for (an HMAC keyed with the RSA public
            // key PEM).
            guard decodedAlgorithm == algorithm.libjwt else { throw .malformed }
        }

        let read = ClaimValues(payload)
        var claims = try PeerTokenClaims(verified: read)
        let audiences = try PeerTokenClaims.audiences(read.audience)
        let nowSeconds = now.timeIntervalSince1970
        if nowSeconds >= claims.expiresAt.timeIntervalSince1970 + leeway { throw .expired }
        if let notBefore = claims.notBefore, nowSeconds + leeway < notBefore.timeIntervalSince1970 {
            throw .notYetValid
        }
        if let audience {
            guard audiences?.contains(audience) == true else { throw .wrongAudience }
            claims.audience = audience
        } else {
            claims.audience = audiences?.first
        }
        return claims
    }

    // MARK: - Steps

    private typealias Segment = ArraySlice<UInt8>

    /// A token cut at its two dots.
    private struct Parts {
        var header: Segment
        var payload: Segment
        var signature: Segment
        /// `header.payload`, the bytes the signature covers (JWS Signing Input, RFC 7515 §5.1).
        var signingInput: Segment
    }

    /// Three base64url segments, the first two non-empty, checked byte by byte before anything
    /// decodes them. Also what keeps NUL bytes and non-ASCII out of libjwt's C-string handling.
    private static func split(_ token: String) throws(TokenError) -> Parts {
        guard !token.isEmpty, token.utf8.count <= maximumTokenLength else { throw .malformed }
        let bytes = Array(token.utf8)
        var dots = (first: -1, second: -1)
        let clean = bytes.withUnsafeBufferPointer { bytes in
            for index in bytes.indices {
                let byte = bytes[index]
                if byte == UInt8(ascii: ".") {
                    if dots.first < 0 {
                        dots.first = index
                    } else if dots.second < 0 {
                        dots.second = index
                    } else {
                        return false
                    }
                } else if !Base64URL.isAlphabet(byte) {
                    return false
                }
            }
            return true
        }
        guard clean, dots.second >= 0, dots.first > 0, dots.second > dots.first + 1 else { throw .malformed }
        return Parts(
            header: bytes[..<dots.first],
            payload: bytes[(dots.first + 1)..<dots.second],
            signature: bytes[(dots.second + 1)...],
            signingInput: bytes[..<dots.second]
        )
    }

    /// The header's `alg`, if it is one we implement (exact, case-sensitive spelling).
    private static func algorithm(in header: TokenObject) throws(TokenError) -> JWTAlgorithm {
        // RFC 7515 §4.1.11: a recipient must reject critical extensions it does not understand,
        // and we understand none.
        if header["crit"] != nil { throw .malformed }
        // libjwt refuses a `typ` other than JWT (ASCII case-insensitively, `strcasecmp`); agree with
        // it, for HS256 too, which libjwt no longer reads.
        switch header["typ"] {
        case nil: break
        case .string(let type)? where type.utf8.count == 3 && type.utf8.elementsEqual("jwt".utf8, by: { $0 | 0x20 == $1 }): break
        default: throw .malformed
        }
        guard case .string(let name)? = header["alg"] else { throw .malformed }
        guard let algorithm = JWTAlgorithm(rawValue: name) else { throw .unsupportedAlgorithm(printable(name)) }
        return algorithm
    }

    /// The only key that may verify `algorithm`, or a refusal if this verifier has none for it.
    private func key(for algorithm: JWTAlgorithm) throws(TokenError) -> [UInt8] {
        switch algorithm {
        case .hs256:
            if let secret { return secret }
        case .rs256, .es256:
            if let publicKey, publicKey.algorithm == algorithm { return publicKey.pem }
        }
        throw .unsupportedAlgorithm(algorithm.rawValue)
    }

    /// An attacker-chosen `alg` made safe to put into an error body: at most 32 printable ASCII
    /// characters.
    private static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(32).map { scalar in
            (0x20..<0x7F).contains(scalar.value) ? scalar : "?"
        }))
    }
}
