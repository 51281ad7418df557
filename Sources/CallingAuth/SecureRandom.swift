import COpenSSL

/// Bytes from OpenSSL's CSPRNG (`RAND_bytes`), for secrets, API keys and tokens.
public enum SecureRandom {
    /// `count` random bytes; an empty array for `count <= 0`.
    ///
    /// Stops the process if the CSPRNG reports failure (it is unseeded or broken): every caller
    /// uses these bytes as a secret, and there is no safe substitute to return.
    public static func bytes(_ count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        precondition(count <= Int(Int32.max), "SecureRandom.bytes: \(count) bytes requested in one call")
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        guard ok else { Crypto.unrecoverable("RAND_bytes") }
        return out
    }

    /// `bytes` random bytes as unpadded base64url: URL-, header- and file-name-safe. 32 bytes
    /// (the default) give 43 characters and 256 bits of entropy.
    public static func token(bytes count: Int = 32) -> String {
        Base64URL.encode(bytes(count))
    }
}
