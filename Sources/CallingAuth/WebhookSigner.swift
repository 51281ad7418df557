import COpenSSL
import Foundation

/// Signs webhook deliveries as the Standard Webhooks specification does
/// (https://www.standardwebhooks.com, "Signature scheme"), so its published verifiers accept them:
///
///     webhook-id:        msg_…                      (the same on every retry)
///     webhook-timestamp: 1796015952                 (Unix seconds of this attempt)
///     webhook-signature: v1,<base64 HMAC-SHA256>    (standard base64, with padding)
///
/// The MAC is computed over the bytes `<webhook-id>.<webhook-timestamp>.<body>`: the id, a full
/// stop, the timestamp in decimal, a full stop, then the request body exactly as sent. The key is
/// the secret's bytes: for a secret written `whsec_<base64>` (the specification's format) the
/// base64-decoded bytes, for any other secret its UTF-8 bytes.
public struct WebhookSigner: Sendable {
    /// Shortest key accepted, in bytes (the specification asks for 24 to 64).
    public static let minimumKeyLength = 24

    private let key: [UInt8]

    public enum KeyError: Error, Equatable, CustomStringConvertible {
        case tooShort(Int)
        case badBase64

        public var description: String {
            switch self {
            case .tooShort(let count):
                return "the webhook secret is \(count) bytes; it needs at least \(WebhookSigner.minimumKeyLength)"
            case .badBase64: return "the webhook secret starts with whsec_ but the rest is not base64"
            }
        }
    }

    public init(secret: String) throws(KeyError) {
        var bytes = Array(secret.utf8)
        if secret.hasPrefix("whsec_") {
            guard let decoded = Data(base64Encoded: String(secret.dropFirst("whsec_".count))) else { throw .badBase64 }
            bytes = Array(decoded)
        }
        guard bytes.count >= Self.minimumKeyLength else { throw .tooShort(bytes.count) }
        key = bytes
    }

    /// The exact bytes the MAC covers.
    public static func signedContent(id: String, timestamp: Int64, body: [UInt8]) -> [UInt8] {
        Array("\(id).\(timestamp).".utf8) + body
    }

    /// The `webhook-signature` value: `v1,` followed by the base64 HMAC-SHA256.
    public func signature(id: String, timestamp: Int64, body: [UInt8]) -> String {
        guard let mac = Crypto.hmac(EVP_sha256(), key: key, data: Self.signedContent(id: id, timestamp: timestamp, body: body))
        else { Crypto.unrecoverable("HMAC-SHA256 of a webhook") }
        return "v1," + Data(mac).base64EncodedString()
    }

    /// The three headers of one attempt.
    public func headers(id: String, timestamp: Int64, body: [UInt8]) -> [(String, String)] {
        [("webhook-id", id), ("webhook-timestamp", String(timestamp)),
         ("webhook-signature", signature(id: id, timestamp: timestamp, body: body))]
    }

    /// What a receiver does: true when one of the space-separated `v1,` signatures matches and the
    /// timestamp is within `tolerance` seconds of `now`. Used by tests and `calling-server` tooling.
    public func verify(id: String, timestamp: Int64, body: [UInt8], signatureHeader: String, now: Int64,
                       tolerance: Int64 = 300) -> Bool
    {
        guard abs(now - timestamp) <= tolerance else { return false }
        let expected = Array(signature(id: id, timestamp: timestamp, body: body).utf8)
        return signatureHeader.split(separator: " ").contains { candidate in
            Crypto.constantTimeEquals(Array(candidate.utf8), expected)
        }
    }
}
