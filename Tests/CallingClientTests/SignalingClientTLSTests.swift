import CallingServer
import CallingTesting
import CallingTransport
import Foundation
import XCTest

@testable import CallingClient

/// The SDK against the real server serving TLS (tls_cert_file/tls_key_file) with certificates
/// made by the openssl CLI: wss:// and https:// verify, and what fails verification is refused.
final class SignalingClientTLSTests: ClientTestCase {
    // nonisolated(unsafe): written in `configure` (setUp) and read by the test that follows, on one task at a time.
    nonisolated(unsafe) private var pki: TestCertificates!

    override func configure(_ config: inout ServerConfig) {
        pki = try! TestCertificates()
        let (cert, key) = try! pki.issueServer("server")
        config.tlsCertFile = cert
        config.tlsKeyFile = key
    }

    override func tearDown() async throws {
        try await super.tearDown()
        pki?.remove()
    }

    private var secureURL: URL { URL(string: "wss://127.0.0.1:\(server.port)")! }

    private func client(_ peer: String, url: URL? = nil, configure: (inout SignalingOptions) -> Void = { _ in }) throws
        -> SignalingClient
    {
        var options = SignalingOptions()
        options.transport = server.loop
        options.maxReconnectAttempts = 0
        options.connectTimeout = 5
        configure(&options)
        return SignalingClient(url: url ?? secureURL, token: try server.token(peer: peer), options: options)
    }

    func test_wss_and_https_with_the_private_ca_carry_chat_history_and_ice() async throws {
        let alice = try client("alice") { $0.tlsCAFile = self.pki.caFile }
        let welcome = try await alice.connect()
        XCTAssertEqual(welcome.peerID.rawValue, "alice")
        let ack = try await alice.sendChat("over tls", clientID: "c1")
        XCTAssertEqual(ack.seq, 1)
        // REST goes over https:// with the same CA.
        let page = try await alice.fetchMessages()
        XCTAssertEqual(page.messages.map(\.text), ["over tls"])
        _ = try await alice.fetchIceServers()
        await alice.disconnect()
    }

    func test_a_certificate_from_a_ca_the_client_does_not_trust_is_refused() async throws {
        // Once against the system trust store, once against an unrelated private CA.
        for configure in [{ (_: inout SignalingOptions) in }, { $0.tlsCAFile = self.pki.otherCAFile }] {
            let alice = try client("alice", configure: configure)
            do {
                try await alice.connect()
                XCTFail("connected to a server whose certificate is not trusted")
            } catch let error as CallingError {
                try assertRejected(error, .untrustedIssuer, saying: "is not issued by a trusted CA")
            }
            do {
                _ = try await alice.fetchMessages()
                XCTFail("https accepted a certificate that is not trusted")
            } catch let error as CallingError {
                XCTAssertNil(error.httpStatus)
                try assertRejected(error, .untrustedIssuer, saying: "is not issued by a trusted CA")
            }
        }
    }

    func test_a_certificate_for_another_host_name_is_refused() async throws {
        // The server now serves a certificate from the trusted CA, but for calls.example.org
        // (swapped in with a SIGHUP-style reload); the client dials 127.0.0.1.
        let (cert, key) = try pki.issueServer("elsewhere", names: ["calls.example.org"])
        try FileManager.default.removeItem(atPath: server.config.tlsCertFile!)
        try FileManager.default.removeItem(atPath: server.config.tlsKeyFile!)
        try FileManager.default.copyItem(atPath: cert, toPath: server.config.tlsCertFile!)
        try FileManager.default.copyItem(atPath: key, toPath: server.config.tlsKeyFile!)
        try server.app.reloadTLSCertificate()
        let alice = try client("alice") { $0.tlsCAFile = self.pki.caFile }
        do {
            try await alice.connect()
            XCTFail("connected although the certificate is for calls.example.org")
        } catch let error as CallingError {
            try assertRejected(error, .hostNameMismatch, saying: "does not name the host 127.0.0.1")
        }
    }

    func test_an_expired_certificate_is_refused_as_expired_and_not_retried() async throws {
        let (cert, key) = try pki.issueExpiredServer("expired")
        try FileManager.default.removeItem(atPath: server.config.tlsCertFile!)
        try FileManager.default.removeItem(atPath: server.config.tlsKeyFile!)
        try FileManager.default.copyItem(atPath: cert, toPath: server.config.tlsCertFile!)
        try FileManager.default.copyItem(atPath: key, toPath: server.config.tlsKeyFile!)
        try server.app.reloadTLSCertificate()
        let alice = try client("alice") { $0.tlsCAFile = self.pki.caFile }
        do {
            try await alice.connect()
            XCTFail("connected although the certificate expired in 2020")
        } catch let error as CallingError {
            try assertRejected(error, .expired, saying: "has expired (OpenSSL: certificate has expired")
        }
        var options = WebCallOptions()
        options.tlsCAFile = pki.caFile
        options.loop = server.loop
        let call = WebCallClient(baseURL: URL(string: "https://127.0.0.1:\(server.port)")!, callID: "c", accessToken: "t",
                                 options: options)
        do {
            _ = try await call.start(offerSDP: "v=0\r\n")
            XCTFail("https accepted an expired certificate")
        } catch let error as CallingError {
            try assertRejected(error, .expired, saying: "has expired")
        }
    }

    func test_a_missing_or_unusable_ca_file_is_a_configuration_error_raised_before_connecting() async throws {
        let missing = pki.directory + "/no-such-ca.pem"
        let alice = try client("alice") { $0.tlsCAFile = missing }
        do {
            try await alice.connect()
            XCTFail("connected without its CA file")
        } catch let error as CallingError {
            XCTAssertEqual(error.kind, .invalidConfiguration("tlsCAFile: \(missing) does not exist"))
            XCTAssertFalse(error.isRetryable)
        }
        XCTAssertEqual(alice.state, .idle, "nothing was dialled")
        do {
            _ = try await alice.fetchMessages()
            XCTFail("fetched without its CA file")
        } catch let error as CallingError {
            XCTAssertEqual(error.kind, .invalidConfiguration("tlsCAFile: \(missing) does not exist"))
        }
        var presenceOptions = server.presenceOptions { $0.tlsCAFile = missing }
        presenceOptions.transport = server.loop
        let ann = PresenceClient(url: secureURL, token: try server.presenceToken("ann", role: "agent"), options: presenceOptions)
        do {
            try await ann.connect()
            XCTFail("presence connected without its CA file")
        } catch let error as CallingError {
            XCTAssertEqual(error.kind, .invalidConfiguration("tlsCAFile: \(missing) does not exist"))
        }
        // A file that exists but holds no certificate would trust nothing: refused the same way.
        let garbage = pki.directory + "/garbage.pem"
        try "not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        let bob = try client("bob") { $0.tlsCAFile = garbage }
        do {
            try await bob.connect()
            XCTFail("connected with a CA file that holds no certificate")
        } catch let error as CallingError {
            XCTAssertEqual(error.kind, .invalidConfiguration("tlsCAFile: \(garbage) holds no PEM certificate"))
            XCTAssertFalse(error.isRetryable)
        }
    }

    /// `error` is a refused certificate for `failure`, not retryable, saying `words`.
    private func assertRejected(_ error: CallingError, _ failure: CertificateFailure, saying words: String,
                                file: StaticString = #filePath, line: UInt = #line) throws
    {
        guard case .certificateRejected(let host, let port, let got, let reason) = error.kind else {
            return XCTFail("not a rejected certificate: \(error)", file: file, line: line)
        }
        XCTAssertEqual(host, "127.0.0.1", file: file, line: line)
        XCTAssertEqual(port, server.port, file: file, line: line)
        XCTAssertEqual(got, failure, file: file, line: line)
        XCTAssertTrue(reason.contains(words), reason, file: file, line: line)
        XCTAssertFalse(error.isRetryable, file: file, line: line)
    }

    func test_insecure_skip_verification_connects_to_an_untrusted_certificate() async throws {
        let alice = try client("alice") { $0.insecureSkipTLSVerification = true }
        try await alice.connect()
        let ack = try await alice.sendChat("dev only")
        XCTAssertEqual(ack.seq, 1)
        await alice.disconnect()
    }

    func test_plaintext_urls_are_refused_by_a_tls_server_and_unknown_schemes_by_the_sdk() async throws {
        let plain = try client("alice", url: URL(string: "ws://127.0.0.1:\(server.port)")!)
        do {
            try await plain.connect()
            XCTFail("a TLS server answered plaintext")
        } catch let error as CallingError {
            XCTAssertNil(error.httpStatus)
        }
        let unknown = try client("bob", url: URL(string: "ftp://127.0.0.1:\(server.port)")!)
        do {
            try await unknown.connect()
            XCTFail("connected with an ftp:// URL")
        } catch let error as CallingError {
            XCTAssertFalse(error.isRetryable)
            XCTAssertTrue(error.description.contains("unsupported URL scheme 'ftp'"), error.description)
        }
    }

    func test_web_calls_over_https_verify_the_certificate() async throws {
        let base = URL(string: "https://127.0.0.1:\(server.port)")!
        // A verified connection reaches the server, which refuses the token: an HTTP answer.
        var options = WebCallOptions()
        options.tlsCAFile = pki.caFile
        options.loop = server.loop
        let trusted = WebCallClient(baseURL: base, callID: "no-such-call", accessToken: "not-a-token", options: options)
        do {
            _ = try await trusted.start(offerSDP: "v=0\r\n")
            XCTFail("started with a bad token")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 401, error.description)
        }
        options.tlsCAFile = nil
        let untrusted = WebCallClient(baseURL: base, callID: "no-such-call", accessToken: "not-a-token", options: options)
        do {
            _ = try await untrusted.start(offerSDP: "v=0\r\n")
            XCTFail("https accepted a certificate that is not trusted")
        } catch let error as CallingError {
            XCTAssertNil(error.httpStatus)
            try assertRejected(error, .untrustedIssuer, saying: "is not issued by a trusted CA")
        }
    }

    func test_libwebsockets_log_lines_go_to_the_calling_log_handler() async throws {
        let lines = LogLines()
        CallingLog.setHandler(level: .warning) { level, line in lines.add(level, line) }
        defer { CallingLog.setHandler(nil) }
        // No CA for the server's certificate: lws logs OpenSSL's reason.
        let alice = try client("alice")
        _ = try? await alice.connect()
        try await eventually { lines.all.contains { $0.1.hasPrefix("libwebsockets: ") } }
        let line = try XCTUnwrap(lines.all.first { $0.1.hasPrefix("libwebsockets: ") })
        XCTAssertEqual(line.0, .error)
        XCTAssertTrue(line.1.contains("SSL error"), line.1)
        XCTAssertFalse(line.1.contains("] E:"), "lws's timestamp and level prefix are stripped: \(line.1)")
    }
}

/// Collects `CallingLog` lines.
final class LogLines: @unchecked Sendable {
    // @unchecked: `lines` only under `lock`.
    private let lock = NSLock()
    private var lines: [(CallingLogLevel, String)] = []
    func add(_ level: CallingLogLevel, _ line: String) { lock.withLock { lines.append((level, line)) } }
    var all: [(CallingLogLevel, String)] { lock.withLock { lines } }
}
