import CallingValues
import COpenSSL
import Foundation

/// Time-limited TURN credentials for coturn's REST API mode (`use-auth-secret` with
/// `static-auth-secret`), per draft-uberti-behave-turn-rest-00.
///
/// coturn recomputes the credential from the username and its copy of the secret, and refuses the
/// username once its leading timestamp has passed; nothing has to be stored.
public struct TurnCredentials: Sendable, Equatable {
    /// `"<unix expiry>:<peer id>"`, for example `"1700003600:alice"`.
    public let username: String
    /// Standard (padded) base64 of HMAC-SHA1(secret, username), what coturn expects.
    public let credential: String
    /// When coturn starts refusing `username`: the expiry in it, as a date.
    public let expiresAt: Date

    /// Credentials for `peer`, valid for `ttl` seconds from `now`.
    ///
    /// The expiry is rounded down to whole seconds. A negative or NaN `ttl` counts as 0 and the
    /// result is clamped to the range of a 64-bit timestamp, so no input traps.
    /// - Parameter secret: coturn's `static-auth-secret`, used as the HMAC key as UTF-8 bytes.
    public static func make(secret: String, peer: PeerID, ttl: TimeInterval, now: Date) -> TurnCredentials {
        let lifetime = ttl.isNaN ? 0 : max(ttl, 0)
        let expirySeconds = (now.timeIntervalSince1970 + lifetime).rounded(.down)
        // ±2^62 is far beyond any real date and converts to Int64 exactly, unlike Int64.max.
        let bound = Double(1 << 62)
        let expiry = expirySeconds.isNaN ? 0 : Int64(min(max(expirySeconds, -bound), bound))
        let username = "\(expiry):\(peer.rawValue)"
        guard let mac = Crypto.hmac(EVP_sha1(), key: Array(secret.utf8), data: Array(username.utf8)) else {
            Crypto.unrecoverable("HMAC-SHA1")
        }
        return TurnCredentials(
            username: username,
            credential: Data(mac).base64EncodedString(),
            expiresAt: Date(timeIntervalSince1970: TimeInterval(expiry))
        )
    }
}
