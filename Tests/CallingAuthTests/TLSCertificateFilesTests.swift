import CallingTesting
import Foundation
import XCTest

@testable import CallingAuth

/// The checks that stand between the operator's certificate files and libwebsockets.
final class TLSCertificateFilesTests: XCTestCase {
    private var pki: TestCertificates!

    override func setUpWithError() throws { pki = try TestCertificates() }
    override func tearDown() { pki?.remove() }

    func test_a_matching_pair_is_accepted_and_summarised() throws {
        let (cert, key) = try pki.issueServer("server", days: 2)
        let summary = try TLSCertificateFiles.validate(certFile: cert, keyFile: key, chainFile: nil)
        XCTAssertEqual(summary.subject, "/CN=localhost")
        XCTAssertEqual(summary.intermediates, 0)
        XCTAssertFalse(summary.isExpired)
        XCTAssertEqual(Double(summary.notAfter), Date().timeIntervalSince1970 + 2 * 86_400, accuracy: 120)
    }

    func test_a_key_of_another_certificate_is_a_mismatch() throws {
        let (cert, _) = try pki.issueServer("server")
        let stray = try pki.strayKey("stray")
        XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: cert, keyFile: stray, chainFile: nil)) { error in
            XCTAssertEqual(error as? TLSCertificateError, .keyMismatch(certFile: cert, keyFile: stray))
        }
    }

    func test_missing_unreadable_and_non_pem_files_are_named() throws {
        let (cert, key) = try pki.issueServer("server")
        let missing = pki.directory + "/missing.pem"
        XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: missing, keyFile: key, chainFile: nil)) {
            XCTAssertEqual($0 as? TLSCertificateError, .missing(role: "tls_cert_file", path: missing))
        }
        let garbage = pki.directory + "/garbage.pem"
        try "not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: garbage, keyFile: key, chainFile: nil)) {
            guard case .notPEM(let role, let path, _)? = $0 as? TLSCertificateError else { return XCTFail("\($0)") }
            XCTAssertEqual([role, path], ["tls_cert_file", garbage])
        }
        // A certificate where the key should be is not a private key.
        XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: cert, keyFile: cert, chainFile: nil)) {
            guard case .notPEM(let role, _, _)? = $0 as? TLSCertificateError else { return XCTFail("\($0)") }
            XCTAssertEqual(role, "tls_key_file")
        }
        XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: cert, keyFile: key, chainFile: garbage)) {
            guard case .notPEM(let role, _, _)? = $0 as? TLSCertificateError else { return XCTFail("\($0)") }
            XCTAssertEqual(role, "tls_chain_file")
        }
        if getuid() != 0 {  // root reads anything
            let locked = pki.directory + "/locked.key"
            try FileManager.default.copyItem(atPath: key, toPath: locked)
            chmod(locked, 0)
            XCTAssertThrowsError(try TLSCertificateFiles.validate(certFile: cert, keyFile: locked, chainFile: nil)) {
                XCTAssertEqual($0 as? TLSCertificateError, .unreadable(role: "tls_key_file", path: locked))
            }
        }
    }

    func test_a_chain_file_is_counted_and_joined_after_the_leaf() throws {
        let (cert, key) = try pki.issueServer("server")
        let summary = try TLSCertificateFiles.validate(certFile: cert, keyFile: key, chainFile: pki.caFile)
        XCTAssertEqual(summary.intermediates, 1)
        let joined = String(decoding: try TLSCertificateFiles.combinedChainPEM(certFile: cert, chainFile: pki.caFile),
                            as: UTF8.self)
        XCTAssertEqual(joined, try String(contentsOfFile: cert, encoding: .utf8) + String(contentsOfFile: pki.caFile, encoding: .utf8))
    }
}
