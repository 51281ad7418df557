/// SHA-256 for modules that may not import OpenSSL themselves (CallingAuth is its one adapter).
public enum Digest {
    /// The 32-byte SHA-256 of `data`, or nil if libcrypto fails (out of memory).
    public static func sha256(_ data: [UInt8]) -> [UInt8]? { Crypto.sha256(data) }
}
