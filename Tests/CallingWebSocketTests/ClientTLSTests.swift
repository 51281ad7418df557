import CallingCore
import CallingTesting
import CallingTransport
import Foundation
import XCTest

@testable import CallingWebSocket

/// URL → endpoint mapping, without a network.
final class ClientEndpointTests: XCTestCase {
    func test_secure_schemes_use_tls_and_port_443_by_default() throws {
        let wss = try ClientEndpoint(url: URL(string: "wss://calls.example.org/v1/ws?x=1")!)
        XCTAssertEqual(wss, ClientEndpoint(host: "calls.example.org", port: 443, usesTLS: true, pathAndQuery: "/v1/ws?x=1"))
        XCTAssertTrue(try ClientEndpoint(url: URL(string: "https://calls.example.org:8443")!).usesTLS)
        XCTAssertEqual(try ClientEndpoint(url: URL(string: "https://calls.example.org:8443")!).port, 8443)
    }

    func test_plain_schemes_use_port_80_by_default() throws {
        let ws = try ClientEndpoint(url: URL(string: "ws://127.0.0.1")!)
        XCTAssertEqual(ws, ClientEndpoint(host: "127.0.0.1", port: 80, usesTLS: false, pathAndQuery: "/"))
        XCTAssertEqual(try ClientEndpoint(url: URL(string: "http://[::1]:8080/a")!).host, "::1")
    }

    func test_schemes_it_cannot_serve_are_refused_not_downgraded() {
        XCTAssertThrowsError(try ClientEndpoint(url: URL(string: "ftp://calls.example.org")!)) { error in
            XCTAssertEqual(error as? ClientEndpointError, .unsupportedScheme("ftp"))
        }
        XCTAssertThrowsError(try ClientEndpoint(url: URL(string: "wss:///v1/ws")!))
    }
}

/// The lws client against the lws server over TLS, both real, on 127.0.0.1 with certificates the
/// test makes with the openssl CLI.
final class ClientTLSTests: XCTestCase {
    private var pki: TestCertificates!
    private var server: WebSocketServer!
    private var echo: EchoDelegate!
    private var loop: WebSocketClientLoop!
    private var logs: MemoryLogHandler!

    override func setUpWithError() throws {
        pki = try TestCertificates()
        let (cert, key) = try pki.issueServer("server")
        var settings = TransportSettings(host: "127.0.0.1", port: 0, eventLoop: .poll)
        settings.tls = TLSServerSettings(certificateChainFile: cert, privateKeyFile: key)
        server = WebSocketServer(settings: settings, logger: Logger(label: "server", level: .error))
        echo = EchoDelegate()
        server.delegate = echo
        try server.start()
        logs = MemoryLogHandler()
        loop = WebSocketClientLoop(logger: Logger(label: "client", level: .warning, handler: logs))
    }

    override func tearDown() {
        loop?.shutdown()
        server?.stop(grace: 1)
        pki?.remove()
    }

    /// Connects and returns the first terminal-or-open event, then the echo of "hello" if it opened.
    private func exchange(host: String = "127.0.0.1", tls: TLSClientOptions?) async -> (WebSocketClientEvent, String?) {
        let connection = loop.connect(host: host, port: server.port, path: "/", tls: tls)
        var iterator = connection.events.makeAsyncIterator()
        guard let first = await iterator.next() else { return (.failed(status: nil, message: "no event"), nil) }
        guard first == .open else { return (first, nil) }
        connection.send(text: "hello")
        var reply: String?
        if case .text(let text)? = await iterator.next() { reply = text }
        connection.close()
        return (first, reply)
    }

    func test_wss_with_the_private_ca_opens_and_echoes() async {
        let (event, reply) = await exchange(tls: TLSClientOptions(caFile: pki.caFile))
        XCTAssertEqual(event, .open)
        XCTAssertEqual(reply, "hello")
    }

    func test_a_name_the_certificate_does_not_carry_is_refused() async {
        // A certificate from the trusted CA, but for calls.example.org: connecting as 127.0.0.1
        // must fail the host-name (IP address) check even though the chain is fine.
        let (cert, key) = try! pki.issueServer("other-name", names: ["calls.example.org"])
        server.stop(grace: 1)
        var settings = server.settings
        settings.port = 0
        settings.tls = TLSServerSettings(certificateChainFile: cert, privateKeyFile: key)
        server = WebSocketServer(settings: settings, logger: Logger(label: "server", level: .error))
        server.delegate = echo
        try! server.start()
        let (event, _) = await exchange(tls: TLSClientOptions(caFile: pki.caFile))
        guard case .failed(nil, let code, let message) = event else { return XCTFail("opened with the wrong host name: \(event)") }
        XCTAssertEqual(code, ClientFailureCode.hostNameMismatch)
        XCTAssertTrue(message.hasPrefix("TLS: the server's certificate does not name the host 127.0.0.1 (OpenSSL: "), message)
    }

    func test_an_expired_certificate_is_refused_as_expired() async throws {
        let (cert, key) = try pki.issueExpiredServer("expired")
        server.stop(grace: 1)
        var settings = server.settings
        settings.port = 0
        settings.tls = TLSServerSettings(certificateChainFile: cert, privateKeyFile: key)
        server = WebSocketServer(settings: settings, logger: Logger(label: "server", level: .error))
        server.delegate = echo
        try server.start()
        let (event, _) = await exchange(tls: TLSClientOptions(caFile: pki.caFile))
        guard case .failed(nil, let code, let message) = event else { return XCTFail("opened with an expired certificate: \(event)") }
        XCTAssertEqual(code, ClientFailureCode.certificateExpired)
        XCTAssertEqual(message, "TLS: the server's certificate has expired (OpenSSL: certificate has expired, X509_V_ERR 10)")
        do {
            _ = try await loop.request("GET", host: "127.0.0.1", port: server.port, path: "/", tls: TLSClientOptions(caFile: pki.caFile))
            XCTFail("https accepted an expired certificate")
        } catch {
            XCTAssertEqual(error.code, ClientFailureCode.certificateExpired)
        }
    }

    func test_an_untrusted_ca_is_refused_by_the_system_store_and_by_another_ca_file() async {
        for tls in [TLSClientOptions(), TLSClientOptions(caFile: pki.otherCAFile)] {
            let (event, _) = await exchange(tls: tls)
            guard case .failed(nil, let code, let message) = event else { return XCTFail("opened with an untrusted CA: \(event)") }
            XCTAssertEqual(code, ClientFailureCode.untrustedIssuer)
            XCTAssertTrue(message.hasPrefix("TLS: the server's certificate is not issued by a trusted CA (OpenSSL: "), message)
        }
    }

    func test_insecure_skip_verification_connects_and_warns_every_time() async {
        for _ in 0..<2 {
            let (event, reply) = await exchange(tls: TLSClientOptions(insecureSkipVerification: true))
            XCTAssertEqual(event, .open)
            XCTAssertEqual(reply, "hello")
        }
        XCTAssertEqual(logs.all.filter { $0.level == .warning && $0.message.contains("verification is OFF") }.count, 2)
    }

    func test_a_missing_ca_file_fails_the_connection() async {
        let (event, _) = await exchange(tls: TLSClientOptions(caFile: pki.directory + "/nope.pem"))
        XCTAssertEqual(event, .failed(status: nil, code: ClientFailureCode.caFileUnusable,
                                      message: "cannot load the CA file \(pki.directory)/nope.pem (missing, unreadable, or no PEM certificate)"))
    }

    func test_plaintext_to_the_tls_port_is_refused_and_counted() async {
        let (event, _) = await exchange(tls: nil)
        guard case .failed = event else { return XCTFail("plaintext was served on the TLS port: \(event)") }
        // The server counts it when it destroys the connection, which may come just after.
        var failures = 0
        for _ in 0..<100 {
            failures = await counters().tlsHandshakeFailures
            if failures > 0 { break }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertEqual(failures, 1)
    }

    func test_https_requests_verify_and_carry_body_and_headers() async throws {
        let response = try await loop.request("POST", host: "127.0.0.1", port: server.port, path: "/echo?x=1",
                                              headers: ["Content-Type": "text/plain"], body: Array("payload".utf8),
                                              tls: TLSClientOptions(caFile: pki.caFile))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(String(decoding: response.body, as: UTF8.self), "POST /echo payload")
        XCTAssertEqual(response.headers["retry-after"], "7")
        do {
            _ = try await loop.request("GET", host: "127.0.0.1", port: server.port, path: "/", tls: TLSClientOptions())
            XCTFail("https accepted a certificate of an untrusted CA")
        } catch {
            XCTAssertEqual(error.code, ClientFailureCode.untrustedIssuer)
            XCTAssertTrue(error.message.hasPrefix("TLS: the server's certificate is not issued by a trusted CA"), error.message)
        }
    }

    func test_reload_serves_the_new_certificate_to_new_connections_while_old_ones_keep_working() async throws {
        let connection = loop.connect(host: "127.0.0.1", port: server.port, path: "/", tls: TLSClientOptions(caFile: pki.caFile))
        var iterator = connection.events.makeAsyncIterator()
        let opened = await iterator.next()
        XCTAssertEqual(opened, .open)
        // The same paths now hold a certificate for a different name: new clients must see it.
        let (cert, key) = try pki.issueServer("renamed", names: ["calls.example.org"])
        let served = server.settings.tls!
        try FileManager.default.removeItem(atPath: served.certificateChainFile)
        try FileManager.default.removeItem(atPath: served.privateKeyFile)
        try FileManager.default.copyItem(atPath: cert, toPath: served.certificateChainFile)
        try FileManager.default.copyItem(atPath: key, toPath: served.privateKeyFile)
        try server.reloadTLSCertificate()
        let (event, _) = await exchange(tls: TLSClientOptions(caFile: pki.caFile))
        guard case .failed = event else { return XCTFail("a new connection still got the old certificate: \(event)") }
        connection.send(text: "still here")
        let echoed = await iterator.next()
        XCTAssertEqual(echoed, .text("still here"))
        connection.close()
    }

    private func counters() async -> TransportCounters {
        await withCheckedContinuation { continuation in
            server.post { [server] in continuation.resume(returning: server!.counters) }
        }
    }
}

/// Echoes every text message and answers HTTP with the method, path and body it got.
private final class EchoDelegate: WebSocketServerDelegate, @unchecked Sendable {
    // @unchecked: only the server's service thread calls it.
    func server(_ server: WebSocketServer, shouldUpgrade request: HTTPRequest) -> UpgradeDecision { .accept(context: 0) }
    func server(_ server: WebSocketServer, didOpen connection: ConnectionID, context: any Sendable) {}
    func server(_ server: WebSocketServer, didReceive message: InboundMessage, on connection: ConnectionID) {
        if case .text(let bytes) = message { server.send(OutboundMessage(bytes), to: connection) }
    }
    func server(_ server: WebSocketServer, didClose connection: ConnectionID) {}
    func server(_ server: WebSocketServer, handle request: HTTPRequest, responder: HTTPResponder) {
        let text = "\(request.method.rawValue) \(request.path) \(String(decoding: request.body, as: UTF8.self))"
        responder.respond(HTTPResponse(status: 200, headers: [("retry-after", "7")], body: Array(text.utf8)))
    }
}
