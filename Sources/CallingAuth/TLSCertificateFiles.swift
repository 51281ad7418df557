import COpenSSL
import Foundation

/// Why a server certificate and key cannot be used. Raised at startup (the process exits with the
/// message) and on a SIGHUP reload (the old certificate stays in use and the message is logged).
public enum TLSCertificateError: Error, Equatable, Sendable, CustomStringConvertible {
    /// `role` is "tls_cert_file", "tls_key_file" or "tls_chain_file".
    case missing(role: String, path: String)
    case unreadable(role: String, path: String)
    /// The file holds no PEM certificate (or, for the key, no unencrypted PEM private key).
    case notPEM(role: String, path: String, detail: String)
    /// The private key is not the key of the certificate's public key.
    case keyMismatch(certFile: String, keyFile: String)
    /// Only one of `tls_cert_file` and `tls_key_file` was given.
    case incomplete(String)

    public var description: String {
        switch self {
        case .missing(let role, let path): return "\(role) \(path) does not exist"
        case .unreadable(let role, let path): return "\(role) \(path) cannot be read (permissions?)"
        case .notPEM(let role, let path, let detail): return "\(role) \(path) is not usable PEM: \(detail)"
        case .keyMismatch(let cert, let key): return "tls_key_file \(key) is not the private key of the certificate in \(cert)"
        case .incomplete(let detail): return detail
        }
    }
}

/// What a validated certificate says about itself, for the startup and reload log lines.
public struct TLSCertificateSummary: Sendable, Equatable {
    /// The leaf's subject, one line (`CN=calls.example.org`).
    public var subject: String
    /// The leaf's `notAfter` as Unix seconds.
    public var notAfter: Int64
    /// Certificates after the leaf (from the cert file itself and from the chain file).
    public var intermediates: Int
    /// True when `notAfter` is in the past: served anyway (the operator may be mid-renewal), but
    /// every client will refuse it, so it is logged as an error.
    public var isExpired: Bool
}

/// Checks the server's certificate files with OpenSSL before libwebsockets sees them. lws 4.1.6
/// checks neither that the key matches the certificate (its file path skips
/// `SSL_CTX_check_private_key`) nor, on a reload, that the new files load at all: a bad reload
/// would leave its SSL_CTX with half a certificate and fail every later handshake.
public enum TLSCertificateFiles {
    /// Validates `certFile` (PEM: the leaf, optionally followed by intermediates), `keyFile` (an
    /// unencrypted PEM private key) and the optional `chainFile` (PEM intermediates).
    public static func validate(certFile: String, keyFile: String, chainFile: String?)
        throws(TLSCertificateError) -> TLSCertificateSummary
    {
        defer { ERR_clear_error() }
        let certPEM = try read(certFile, role: "tls_cert_file")
        let keyPEM = try read(keyFile, role: "tls_key_file")
        let certificates = certificatesIn(certPEM)
        defer { for certificate in certificates { X509_free(certificate) } }
        guard let leaf = certificates.first else {
            throw .notPEM(role: "tls_cert_file", path: certFile, detail: "no PEM certificate found")
        }
        var intermediates = certificates.count - 1
        if let chainFile {
            let chainPEM = try read(chainFile, role: "tls_chain_file")
            let chain = certificatesIn(chainPEM)
            defer { for certificate in chain { X509_free(certificate) } }
            guard !chain.isEmpty else {
                throw .notPEM(role: "tls_chain_file", path: chainFile, detail: "no PEM certificate found")
            }
            intermediates += chain.count
        }
        guard let key = privateKey(in: keyPEM) else {
            throw .notPEM(role: "tls_key_file", path: keyFile,
                          detail: "no unencrypted PEM private key found (\(Crypto.drainErrorQueue()))")
        }
        defer { EVP_PKEY_free(key) }
        guard X509_check_private_key(leaf, key) == 1 else {
            throw .keyMismatch(certFile: certFile, keyFile: keyFile)
        }
        return TLSCertificateSummary(subject: subject(of: leaf), notAfter: notAfter(of: leaf),
                                     intermediates: intermediates, isExpired: X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0)
    }

    /// The leaf followed by the chain file's certificates, as one PEM text: what lws is given when
    /// a separate chain file is configured, since it reads the whole chain from one file
    /// (`SSL_CTX_use_certificate_chain_file`).
    public static func combinedChainPEM(certFile: String, chainFile: String) throws(TLSCertificateError) -> [UInt8] {
        var leaf = try read(certFile, role: "tls_cert_file")
        if leaf.last != UInt8(ascii: "\n") { leaf.append(UInt8(ascii: "\n")) }
        return leaf + (try read(chainFile, role: "tls_chain_file"))
    }

    private static func read(_ path: String, role: String) throws(TLSCertificateError) -> [UInt8] {
        guard FileManager.default.fileExists(atPath: path) else { throw .missing(role: role, path: path) }
        guard let data = FileManager.default.contents(atPath: path) else { throw .unreadable(role: role, path: path) }
        return Array(data)
    }

    /// Every PEM certificate in `pem`, in order. The caller frees each with `X509_free`.
    private static func certificatesIn(_ pem: [UInt8]) -> [OpaquePointer] {
        guard !pem.isEmpty, pem.count <= Int(Int32.max) else { return [] }
        return pem.withUnsafeBytes { buffer -> [OpaquePointer] in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return [] }
            defer { BIO_free(bio) }
            var found: [OpaquePointer] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { found.append(certificate) }
            return found
        }
    }

    /// The first unencrypted PEM private key in `pem`; the caller frees it with `EVP_PKEY_free`.
    private static func privateKey(in pem: [UInt8]) -> OpaquePointer? {
        guard !pem.isEmpty, pem.count <= Int(Int32.max) else { return nil }
        return pem.withUnsafeBytes { buffer -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            // Never prompt on the server's terminal for a passphrase: an encrypted key fails here.
            let noPassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in 0 }
            return PEM_read_bio_PrivateKey(bio, nil, noPassphrase, nil)
        }
    }

    /// The subject as OpenSSL's one-line form (`/CN=calls.example.org`).
    private static func subject(of certificate: OpaquePointer) -> String {
        guard let name = X509_get_subject_name(certificate) else { return "" }
        var buffer = [CChar](repeating: 0, count: 512)
        guard buffer.withUnsafeMutableBufferPointer({ X509_NAME_oneline(name, $0.baseAddress, Int32($0.count)) }) != nil else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func notAfter(of certificate: OpaquePointer) -> Int64 {
        guard let time = X509_get0_notAfter(certificate) else { return 0 }
        var parsed = tm()
        guard ASN1_TIME_to_tm(time, &parsed) == 1 else { return 0 }
        return Int64(timegm(&parsed))
    }
}
