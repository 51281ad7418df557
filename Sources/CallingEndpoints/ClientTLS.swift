import Foundation

/// How a client checks the server's certificate on `wss://` and `https://`.
///
/// By default the certificate must chain to the system trust store (Debian: `/etc/ssl/certs`)
/// and name the host of the URL (DNS name or IP address in its subjectAltName). TLS 1.2 is the
/// oldest version offered.
public struct TLSClientOptions: Sendable, Hashable {
    /// A PEM file of CA certificates trusted *instead of* the system store, for a private PKI. The
    /// host name is still verified. A file that cannot be read fails the connection.
    public var caFile: String?
    /// Accepts any certificate for any host name, expired or self-signed. For development against a
    /// throwaway certificate only: the connection is encrypted but anyone on the path can read it.
    /// Every connection made with it logs a warning.
    public var insecureSkipVerification: Bool

    public init(caFile: String? = nil, insecureSkipVerification: Bool = false) {
        self.caFile = caFile
        self.insecureSkipVerification = insecureSkipVerification
    }
}

/// A URL the client can serve, split for lws: `ws://` and `http://` connect in plaintext (default
/// port 80), `wss://` and `https://` over TLS (default port 443). Every other scheme is refused,
/// so a TLS URL is never silently sent as plaintext.
public struct ClientEndpoint: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var usesTLS: Bool
    /// The URL's percent-encoded path and query, `/` when it has none.
    public var pathAndQuery: String

    public init(host: String, port: Int, usesTLS: Bool, pathAndQuery: String = "/") {
        self.host = host
        self.port = port
        self.usesTLS = usesTLS
        self.pathAndQuery = pathAndQuery
    }

    public init(url: URL) throws(ClientEndpointError) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            throw .invalid(url.absoluteString)
        }
        switch components.scheme?.lowercased() {
        case "ws", "http": usesTLS = false
        case "wss", "https": usesTLS = true
        default: throw .unsupportedScheme(components.scheme ?? "")
        }
        guard let host = components.host, !host.isEmpty else { throw .missingHost(url.absoluteString) }
        // URLComponents keeps IPv6 literals bracketed on Linux; lws wants the bare address.
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        port = components.port ?? (usesTLS ? 443 : 80)
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        pathAndQuery = components.percentEncodedQuery.map { path + "?" + $0 } ?? path
    }

    /// `https://host:port` or `http://host:port`, without a path.
    public var httpOrigin: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(usesTLS ? "https" : "http")://\(shownHost):\(port)"
    }
}

public enum ClientEndpointError: Error, Equatable, Sendable, CustomStringConvertible {
    case unsupportedScheme(String)
    case missingHost(String)
    case invalid(String)

    public var description: String {
        switch self {
        case .unsupportedScheme(let scheme):
            return "unsupported URL scheme '\(scheme)': use ws://, wss://, http:// or https://"
        case .missingHost(let url): return "URL \(url) has no host"
        case .invalid(let url): return "\(url) is not a valid URL"
        }
    }
}

/// Why a connection or request failed before the server answered, when the client can say more
/// than "connection failed": the `code` of `WebSocketClientEvent.failed` (its `status` is nil) and
/// of `HTTPClientError`. The strings are stable; the failure's message says the same for people,
/// with OpenSSL's own words for a certificate.
public enum ClientFailureCode {
    /// `TLSClientOptions.caFile` cannot be loaded: missing, unreadable, or no PEM certificate in it.
    public static let caFileUnusable = "tls_ca_file_unusable"
    /// The certificate does not name the host that was dialled (DNS name or IP address).
    public static let hostNameMismatch = "tls_host_name_mismatch"
    /// The certificate's chain does not end at a trusted CA (unknown issuer, self-signed).
    public static let untrustedIssuer = "tls_untrusted_issuer"
    /// The certificate's notAfter has passed.
    public static let certificateExpired = "tls_certificate_expired"
    /// The certificate's notBefore is still ahead (often a clock that is wrong on one side).
    public static let certificateNotYetValid = "tls_certificate_not_yet_valid"
    /// Any other verification failure (bad signature, wrong key usage…); the message has OpenSSL's reason.
    public static let certificateInvalid = "tls_certificate_invalid"
    /// The transport cannot open WebSockets at all (Foundation's URLSession on Linux, whose libcurl
    /// has no WebSocket support).
    public static let transportUnsupported = "transport_unsupported"
    /// The transport cannot verify as `TLSClientOptions` asks (the URLSession transport takes
    /// neither `caFile` nor `insecureSkipVerification`).
    public static let tlsOptionsUnsupported = "tls_options_unsupported"
}
