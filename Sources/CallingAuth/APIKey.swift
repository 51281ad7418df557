/// Server API keys: shown to their owner once in plaintext, stored only as a SHA-256 hash.
///
/// A fast hash is enough (no salt, no KDF) because the plaintext is 256 random bits, not a
/// password: there is no dictionary to attack, and a lookup by hash stays a plain index scan.
public enum APIKey {
    /// Every key starts with this, so a leaked key is recognisable by secret scanners and in logs.
    public static let prefix = "csk_"

    /// A new plaintext key: `prefix` followed by 32 random bytes as base64url (47 characters).
    public static func generate() -> String {
        prefix + SecureRandom.token(bytes: 32)
    }

    /// The value to store: lower-case hex SHA-256 of the key's UTF-8 bytes (64 characters).
    public static func hash(_ plaintext: String) -> String {
        guard let digest = Crypto.sha256(Array(plaintext.utf8)) else { Crypto.unrecoverable("SHA-256") }
        return Crypto.hex(digest)
    }

    /// True if `plaintext` hashes to `storedHash` (hex, either case). The comparison runs in
    /// constant time for equal lengths.
    public static func matches(_ plaintext: String, storedHash: String) -> Bool {
        constantTimeEquals(hash(plaintext), storedHash.lowercased())
    }

    /// Compares two strings' UTF-8 bytes without an early exit. Only the lengths are compared in
    /// variable time, so use it on values of a public fixed length (hashes, MACs, tokens).
    public static func constantTimeEquals(_ lhs: String, _ rhs: String) -> Bool {
        Crypto.constantTimeEquals(Array(lhs.utf8), Array(rhs.utf8))
    }
}
