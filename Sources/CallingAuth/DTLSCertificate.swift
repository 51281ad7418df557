import COpenSSL

/// A self-signed ECDSA P-256 certificate for the DTLS handshake of a WebRTC peer connection.
///
/// WebRTC authenticates DTLS by the certificate's fingerprint carried in the SDP
/// (`a=fingerprint:sha-256 …`), not by a CA, so a fresh self-signed certificate per process is
/// what browsers do too. ECDSA rather than RSA because aiortc (and other peers that offer only
/// ECDHE-ECDSA suites) answer an RSA certificate with "no shared cipher", and because an EC key
/// is generated in microseconds where a 2048-bit RSA key takes hundreds of milliseconds.
public struct DTLSCertificate: Sendable {
    /// The certificate followed by its unencrypted PKCS#8 private key, both PEM: the form
    /// GStreamer's DTLS elements take in their `pem` property.
    public let pem: String
    /// SHA-256 of the certificate's DER encoding as upper-case hex pairs joined by `:`, the form
    /// of an SDP `a=fingerprint:sha-256` value.
    public let sha256Fingerprint: String

    public enum Failure: Error, CustomStringConvertible {
        case openssl(String)
        public var description: String {
            switch self {
            case .openssl(let detail): return "could not make a DTLS certificate: \(detail)"
            }
        }
    }

    /// Generates a key and a certificate valid from one day ago (clock skew) for `validDays`.
    public static func generate(commonName: String = "calling-server", validDays: Int = 30) throws(Failure) -> DTLSCertificate {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw .openssl(Crypto.drainErrorQueue()) }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &key) == 1, let key
        else { throw .openssl(Crypto.drainErrorQueue()) }
        defer { EVP_PKEY_free(key) }

        guard let certificate = X509_new() else { throw .openssl(Crypto.drainErrorQueue()) }
        defer { X509_free(certificate) }
        // A random positive serial: two certificates of one subject must not share one.
        let serialNumber = SecureRandom.bytes(7).reduce(Int(0)) { $0 << 8 | Int($1) }
        let day = 24 * 3600
        guard X509_set_version(certificate, 2) == 1,
              ASN1_INTEGER_set(X509_get_serialNumber(certificate), serialNumber) == 1,
              X509_gmtime_adj(X509_getm_notBefore(certificate), -day) != nil,
              X509_gmtime_adj(X509_getm_notAfter(certificate), validDays * day) != nil,
              X509_set_pubkey(certificate, key) == 1,
              let name = X509_get_subject_name(certificate),
              X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0) == 1,
              X509_set_issuer_name(certificate, name) == 1,
              X509_sign(certificate, key, EVP_sha256()) > 0
        else { throw .openssl(Crypto.drainErrorQueue()) }

        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var digestLength: UInt32 = 0
        guard X509_digest(certificate, EVP_sha256(), &digest, &digestLength) == 1 else {
            throw .openssl(Crypto.drainErrorQueue())
        }
        let fingerprint = Crypto.hex(Array(digest.prefix(Int(digestLength)))).uppercased()
            .chunked(2).joined(separator: ":")

        guard let bio = BIO_new(BIO_s_mem()) else { throw .openssl(Crypto.drainErrorQueue()) }
        defer { BIO_free(bio) }
        guard PEM_write_bio_X509(bio, certificate) == 1, PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else {
            throw .openssl(Crypto.drainErrorQueue())
        }
        let pending = BIO_ctrl_pending(bio)
        var pem = [UInt8](repeating: 0, count: pending)
        let read = pem.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
        guard read == Int32(pending) else { throw .openssl("short read of the PEM buffer") }
        return DTLSCertificate(pem: String(decoding: pem, as: UTF8.self), sha256Fingerprint: fingerprint)
    }
}

private extension String {
    func chunked(_ size: Int) -> [Substring] {
        var parts: [Substring] = []
        var start = startIndex
        while start < endIndex {
            let end = index(start, offsetBy: size, limitedBy: endIndex) ?? endIndex
            parts.append(self[start..<end])
            start = end
        }
        return parts
    }
}
