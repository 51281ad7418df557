/// The JWS algorithms this module signs and accepts. Everything else (`none`, HS384/512, RS/ES384/512,
/// PS*, EdDSA) is refused by `TokenVerifier`.
public enum JWTAlgorithm: String, Sendable, CaseIterable, Hashable {
    /// HMAC-SHA256 with a shared secret of at least 32 bytes.
    case hs256 = "HS256"
    /// RSASSA-PKCS1-v1_5 with SHA-256; RSA key of at least 2048 bits.
    case rs256 = "RS256"
    /// ECDSA on P-256 with SHA-256; signature is the 64-byte R||S of RFC 7518 §3.4.
    case es256 = "ES256"
}
