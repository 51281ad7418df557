import CallingAuth
import Foundation
import XCTest

/// The DTLS certificate of a WebRTC peer: GStreamer takes its PEM, and the far end checks the
/// handshake against the fingerprint in the SDP, so that fingerprint must be the certificate's own.
final class DTLSCertificateTests: XCTestCase {
    func testPEMHoldsTheCertificateThenItsPrivateKey() throws {
        let certificate = try DTLSCertificate.generate()
        let pem = certificate.pem
        let certificateStart = try XCTUnwrap(pem.range(of: "-----BEGIN CERTIFICATE-----"))
        let certificateEnd = try XCTUnwrap(pem.range(of: "-----END CERTIFICATE-----"))
        let keyStart = try XCTUnwrap(pem.range(of: "-----BEGIN PRIVATE KEY-----"), "unencrypted PKCS#8, as GStreamer reads it")
        let keyEnd = try XCTUnwrap(pem.range(of: "-----END PRIVATE KEY-----"))
        XCTAssertTrue(certificateStart.upperBound <= certificateEnd.lowerBound)
        XCTAssertTrue(certificateEnd.upperBound <= keyStart.lowerBound)
        XCTAssertTrue(keyStart.upperBound <= keyEnd.lowerBound)
        XCTAssertFalse(pem.contains("ENCRYPTED"))
        XCTAssertFalse(pem.contains("\0"), "no trailing NUL from the C buffer")
    }

    func testFingerprintIsTheSHA256OfTheCertificateDER() throws {
        let certificate = try DTLSCertificate.generate()
        let fingerprint = certificate.sha256Fingerprint
        let pairs = fingerprint.split(separator: ":", omittingEmptySubsequences: false)
        XCTAssertEqual(pairs.count, 32)
        for pair in pairs {
            XCTAssertEqual(pair.count, 2, fingerprint)
            XCTAssertTrue(pair.allSatisfy { "0123456789ABCDEF".contains($0) }, "upper-case hex: \(fingerprint)")
        }

        let der = try Self.der(of: certificate.pem)
        let output = try OpenSSLCLI.run(["x509", "-inform", "DER", "-noout", "-fingerprint", "-sha256"], input: der)
        // "sha256 Fingerprint=AB:CD:…" (OpenSSL 3; 1.1 writes "SHA256").
        let line = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let expected = try XCTUnwrap(line.split(separator: "=", maxSplits: 1).last.map(String.init), line)
        XCTAssertEqual(fingerprint, expected.uppercased())
    }

    func testKeyIsP256AndBelongsToTheCertificate() throws {
        let certificate = try DTLSCertificate.generate()
        let text = String(decoding: try OpenSSLCLI.run(["x509", "-noout", "-text"], input: Array(certificate.pem.utf8)), as: UTF8.self)
        XCTAssertTrue(text.contains("id-ecPublicKey"), "ECDSA: aiortc refuses RSA")
        XCTAssertTrue(text.contains("prime256v1") || text.contains("P-256"), text)
        XCTAssertTrue(text.contains("CN = calling-server") || text.contains("CN=calling-server"), "subject")

        let fromCertificate = try OpenSSLCLI.run(["x509", "-noout", "-pubkey"], input: Array(certificate.pem.utf8))
        let fromKey = try OpenSSLCLI.run(["pkey", "-pubout"], input: Array(certificate.pem.utf8))
        XCTAssertEqual(fromCertificate, fromKey, "a mismatched key fails every DTLS handshake")
    }

    func testCertificateIsValidNowAndForValidDays() throws {
        let certificate = try DTLSCertificate.generate(validDays: 2)
        let pem = Array(certificate.pem.utf8)
        // -checkend N exits 0 when the certificate is still valid N seconds from now.
        XCTAssertNoThrow(try OpenSSLCLI.run(["x509", "-noout", "-checkend", "86400"], input: pem))
        XCTAssertThrowsError(try OpenSSLCLI.run(["x509", "-noout", "-checkend", "\(3 * 86_400)"], input: pem))
    }

    func testTwoGenerationsDiffer() throws {
        let first = try DTLSCertificate.generate()
        let second = try DTLSCertificate.generate()
        XCTAssertNotEqual(first.sha256Fingerprint, second.sha256Fingerprint)
        XCTAssertNotEqual(try Self.der(of: first.pem), try Self.der(of: second.pem))
        XCTAssertNotEqual(Self.privateKeyBlock(of: first.pem), Self.privateKeyBlock(of: second.pem))
    }

    // MARK: helpers

    /// The DER of the first CERTIFICATE block of `pem`, decoded with Foundation.
    static func der(of pem: String) throws -> [UInt8] {
        let begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----"
        guard let start = pem.range(of: begin), let stop = pem.range(of: end, range: start.upperBound..<pem.endIndex) else {
            throw Failure(message: "no CERTIFICATE block")
        }
        let base64 = pem[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: String(base64)) else { throw Failure(message: "CERTIFICATE block is not base64") }
        return Array(data)
    }

    static func privateKeyBlock(of pem: String) -> Substring? {
        guard let start = pem.range(of: "-----BEGIN PRIVATE KEY-----") else { return nil }
        return pem[start.upperBound...]
    }

    struct Failure: Error {
        let message: String
    }
}
