/// Why a peer token was refused.
///
/// `code`, `httpStatus` and `message` go into HTTP `application/problem+json` bodies and the docs'
/// error table, so they are stable: rename a case if you like, never change its `code`.
/// Messages never echo the token, and claim values only by name.
public enum TokenError: Error, Equatable, Sendable {
    /// Not three base64url segments of JSON objects, over the size limit, a JOSE header that is
    /// unusable (no `alg`, a `typ` other than JWT, a `crit` extension), or header or claims JSON
    /// that breaks `TokenJSON`'s rules (a repeated member name, nesting too deep, an integer beyond
    /// 64 bits, U+0000 in a string).
    case malformed
    /// `alg` is not one this verifier is configured for (`none`, HS512, RS256 with no public key,
    /// ES256 when the key is RSA...). Carries the header's value, truncated and made printable.
    case unsupportedAlgorithm(String)
    /// The signature does not verify with the configured key.
    case badSignature
    /// `exp` is at or before now, beyond the leeway.
    case expired
    /// `nbf` is after now, beyond the leeway.
    case notYetValid
    /// The verifier expects an audience and the token's `aud` does not contain it (or is absent).
    case wrongAudience
    /// A required claim (`exp`, `sub`) is absent.
    case missingClaim(String)
    /// A claim is present with the wrong JSON type or an empty value (for example `exp` as a string),
    /// or a NumericDate beyond year 9999.
    case invalidClaim(String)
    /// libjwt or OpenSSL failed for a reason other than the token (out of memory). Carries an
    /// errno-style code (libjwt's, or `ENOMEM` when the HMAC could not be computed).
    case internalError(Int32)

    /// The status for an HTTP response refusing the request: 401 means "get a new token",
    /// 403 means "this token is genuine but not for this service", 500 is our fault.
    public var httpStatus: Int {
        switch self {
        case .malformed, .unsupportedAlgorithm, .badSignature, .expired, .notYetValid, .missingClaim,
             .invalidClaim:
            401
        case .wrongAudience:
            403
        case .internalError:
            500
        }
    }

    /// A stable machine-readable code, for problem+json `code` members and client switches.
    public var code: String {
        switch self {
        case .malformed: "token_malformed"
        case .unsupportedAlgorithm: "token_unsupported_algorithm"
        case .badSignature: "token_bad_signature"
        case .expired: "token_expired"
        case .notYetValid: "token_not_yet_valid"
        case .wrongAudience: "token_wrong_audience"
        case .missingClaim: "token_missing_claim"
        case .invalidClaim: "token_invalid_claim"
        case .internalError: "token_verification_failed"
        }
    }

    /// A sentence for humans reading a problem+json `detail`.
    public var message: String {
        switch self {
        case .malformed:
            "The token is not a well-formed JWT."
        case .unsupportedAlgorithm(let algorithm):
            "The token's signing algorithm \"\(algorithm)\" is not accepted."
        case .badSignature:
            "The token's signature is not valid."
        case .expired:
            "The token has expired."
        case .notYetValid:
            "The token is not valid yet."
        case .wrongAudience:
            "The token was not issued for this service."
        case .missingClaim(let name):
            "The token lacks the required claim \"\(name)\"."
        case .invalidClaim(let name):
            "The token's claim \"\(name)\" has an invalid value."
        case .internalError:
            "The token could not be verified because of a server error."
        }
    }

    /// Every code with its status, in table order, for generating docs.
    public static let documentedCodes: [(code: String, httpStatus: Int)] = [
        TokenError.malformed, .unsupportedAlgorithm(""), .badSignature, .expired, .notYetValid,
        .wrongAudience, .missingClaim(""), .invalidClaim(""), .internalError(0),
    ].map { ($0.code, $0.httpStatus) }
}
