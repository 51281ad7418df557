import CallingEndpoints
import CallingServer
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

@testable import CallingClient

/// The URLSession transport's pure mapping (URL errors, close codes, the `problem-code` header,
/// the requests it builds), without a network.
final class URLSessionTransportMappingTests: XCTestCase {
    typealias Transport = URLSessionWebSocketTransport

    func test_upgrade_requests_carry_scheme_host_port_path_and_headers() throws {
        let plain = try Transport.upgradeRequest(host: "127.0.0.1", port: 8080, path: "/v1/ws?x=1",
                                                 headers: ["Authorization": "Bearer t"], tls: nil).get()
        XCTAssertEqual(plain.url?.absoluteString, "ws://127.0.0.1:8080/v1/ws?x=1")
        XCTAssertEqual(plain.value(forHTTPHeaderField: "Authorization"), "Bearer t")
        let secure = try Transport.upgradeRequest(host: "::1", port: 443, path: "v1/presence", headers: [:],
                                                  tls: TLSClientOptions()).get()
        XCTAssertEqual(secure.url?.absoluteString, "wss://[::1]:443/v1/presence")
        let rest = try Transport.httpRequest("POST", host: "calls.example.org", port: 8443, path: "/v1/calls",
                                             headers: [:], body: Array("{}".utf8), tls: TLSClientOptions(), timeout: 3).get()
        XCTAssertEqual(rest.url?.absoluteString, "https://calls.example.org:8443/v1/calls")
        XCTAssertEqual(rest.httpMethod, "POST")
        XCTAssertEqual(rest.httpBody, Data("{}".utf8))
        XCTAssertEqual(rest.timeoutInterval, 3)
    }

    func test_tls_options_it_cannot_honour_and_injected_headers_are_refused() {
        for tls in [TLSClientOptions(caFile: "/etc/ssl/certs/ca-certificates.crt"),
                    TLSClientOptions(insecureSkipVerification: true)]
        {
            guard case .failure(let error) = Transport.upgradeRequest(host: "h", port: 1, path: "/", headers: [:], tls: tls) else {
                return XCTFail("\(tls) must be refused")
            }
            XCTAssertEqual(error.code, ClientFailureCode.tlsOptionsUnsupported)
            XCTAssertEqual(CallingError.transportFailed(message: error.message, code: error.code, host: "h", port: 1).kind,
                           .invalidConfiguration(error.message))
        }
        guard case .failure(let injected) = Transport.upgradeRequest(host: "h", port: 1, path: "/",
                                                                     headers: ["Authorization": "Bearer t\r\nX: y"], tls: nil)
        else { return XCTFail("a header with CRLF must be refused") }
        XCTAssertNil(injected.code)
    }

    func test_a_refused_upgrade_keeps_its_status_and_problem_code_whatever_the_header_case() {
        for (status, name, code) in [(401, "Problem-Code", "token_expired"), (403, "problem-code", "token_wrong_scope"),
                                     (409, "PROBLEM-CODE", "peer_id_in_use")]
        {
            let event = Transport.refusal(status: status, headers: [name: code], error: URLError(.badServerResponse))
            XCTAssertEqual(event, .failed(status: status, code: code,
                                          message: "the server answered the upgrade with HTTP \(status)"))
        }
        XCTAssertEqual(Transport.refusal(status: 503, headers: [:], error: nil),
                       .failed(status: 503, code: nil, message: "the server answered the upgrade with HTTP 503"))
    }

    func test_url_errors_map_to_failure_codes() {
        let cases: [(URLError.Code, String?)] = [
            (.serverCertificateUntrusted, ClientFailureCode.untrustedIssuer),
            (.serverCertificateHasUnknownRoot, ClientFailureCode.untrustedIssuer),
            (.serverCertificateHasBadDate, ClientFailureCode.certificateExpired),
            (.serverCertificateNotYetValid, ClientFailureCode.certificateNotYetValid),
            (.secureConnectionFailed, ClientFailureCode.certificateInvalid),
            (.unsupportedURL, ClientFailureCode.transportUnsupported),
            (.cannotConnectToHost, nil), (.timedOut, nil), (.networkConnectionLost, nil), (.cannotFindHost, nil),
        ]
        for (urlCode, expected) in cases {
            let event = Transport.refusal(status: nil, headers: [:], error: URLError(urlCode))
            guard case .failed(nil, let code, let message) = event else { return XCTFail("\(urlCode): \(event)") }
            XCTAssertEqual(code, expected, "\(urlCode)")
            XCTAssertTrue(message.contains("NSURLErrorDomain \(urlCode.rawValue)"), message)
        }
        // What the SDK makes of them: certificates are rejected, not retried; the rest is the network.
        XCTAssertEqual(CallingError.transportFailed(message: "m", code: ClientFailureCode.certificateExpired, host: "h", port: 1).kind,
                       .certificateRejected(host: "h", port: 1, failure: .expired, reason: "m"))
        let unreachable = CallingError.transportFailed(message: "m", code: nil, host: "h", port: 1)
        XCTAssertEqual(unreachable.kind, .network(host: "h", port: 1, reason: "m"))
        XCTAssertTrue(unreachable.isRetryable)
        XCTAssertFalse(CallingError.transportFailed(message: "m", code: ClientFailureCode.transportUnsupported, host: "h",
                                                    port: 1).isRetryable)
    }

    func test_close_codes_1005_1006_and_invalid_mean_no_close_frame() {
        for raw in [1000, 1001, 4000, 4400, 4401, 4409, 4999] {
            XCTAssertEqual(Transport.closeCode(raw: raw), UInt16(raw))
        }
        for raw in [0, 1005, 1006, 5000, -1] {
            XCTAssertNil(Transport.closeCode(raw: raw), "\(raw)")
        }
        XCTAssertEqual(Transport.closeReason(Data("token expired".utf8)), "token expired")
        XCTAssertEqual(Transport.closeReason(nil), "")
        XCTAssertEqual(Transport.sendableCloseCode(1000), .normalClosure)
        XCTAssertEqual(Transport.sendableCloseCode(1001), .goingAway)
    }

    func test_responses_keep_status_body_and_lower_cased_headers_and_no_response_is_an_error() throws {
        let url = URL(string: "http://h:1/x")!
        let http = HTTPURLResponse(url: url, statusCode: 503, httpVersion: "HTTP/1.1",
                                   headerFields: ["Retry-After": "2", "Content-Type": "application/problem+json"])
        let answer = try Transport.response(data: Data("{}".utf8), response: http, error: nil).get()
        XCTAssertEqual(answer.status, 503)
        XCTAssertEqual(answer.headers["retry-after"], "2")
        XCTAssertEqual(answer.headers["content-type"], "application/problem+json")
        XCTAssertEqual(answer.body, Array("{}".utf8))
        guard case .failure(let error) = Transport.response(data: nil, response: nil, error: URLError(.serverCertificateUntrusted))
        else { return XCTFail("no response is a failure") }
        XCTAssertEqual(error.code, ClientFailureCode.untrustedIssuer)
    }
}

/// The URLSession transport against the real server: REST for real (Foundation's URLSession does
/// HTTP on Linux), and the WebSocket failure this platform's URLSession reports.
final class URLSessionTransportLiveTests: ClientTestCase {
    override func configure(_ config: inout ServerConfig) {
        config.stunURLs = "stun:stun.example.org:3478"
    }

    private func urlSessionClient(_ peer: String, token: String? = nil) throws -> SignalingClient {
        try server.client(peer, token: token) { $0.transport = URLSessionWebSocketTransport() }
    }

    func test_ice_servers_and_history_over_urlsession() async throws {
        let alice = try server.client("alice")  // lws: the chat to read back
        try await alice.connect()
        for n in 1...3 { _ = try await alice.sendChat("m\(n)") }
        await alice.disconnect()

        let reader = try urlSessionClient("reader")
        let ice = try await reader.fetchIceServers()
        XCTAssertEqual(ice.servers, [IceServer(urls: ["stun:stun.example.org:3478"])])
        XCTAssertEqual(ice.ttl, 3600)
        let first = try await reader.fetchMessages(sinceSeq: 0, limit: 2)
        XCTAssertEqual(first.messages.map(\.text), ["m1", "m2"])
        XCTAssertTrue(first.hasMore)
        let second = try await reader.fetchMessages(sinceSeq: first.nextSinceSeq, limit: 2)
        XCTAssertEqual(second.messages.map(\.text), ["m3"])
        XCTAssertEqual(second.messages.first?.from, "alice")

        let forged = try urlSessionClient("x", token: "not-a-jwt")
        do {
            _ = try await forged.fetchIceServers()
            XCTFail("must be refused")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 401)
            XCTAssertFalse(error.isRetryable)
        }
    }

    func test_a_web_call_without_an_agent_is_a_503_with_retry_after_over_urlsession() async throws {
        let call = try await server.createCall()
        var options = WebCallOptions()
        options.loop = URLSessionWebSocketTransport()
        let web = WebCallClient(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, callID: CallID(call.id),
                                accessToken: call.token, options: options)
        do {
            _ = try await web.start(offerSDP: WebCallClientTests.offer)
            XCTFail("started without an agent")
        } catch let error as CallingError {
            guard case .http(503, "no_answering_peer", _) = error.kind else { return XCTFail("\(error)") }
            XCTAssertEqual(web.retryAfter, 2)
        }
    }

    func test_nothing_listening_is_a_retryable_network_error() async throws {
        let port = server.port
        server.app.stop()
        let client = try SignalingClient(url: URL(string: "ws://127.0.0.1:\(port)")!, token: server.token(peer: "a"),
                                         options: { var o = SignalingOptions(); o.transport = URLSessionWebSocketTransport(); return o }())
        do {
            _ = try await client.fetchIceServers()
            XCTFail("nothing listens")
        } catch let error as CallingError {
            guard case .network("127.0.0.1", port, _) = error.kind else { return XCTFail("\(error)") }
            XCTAssertTrue(error.isRetryable)
        }
    }

    #if os(Linux)
    /// The fact this transport is built around: swift-corelibs-foundation's URLSession cannot open
    /// a WebSocket (its libcurl has none). `connect()` says so instead of retrying for ever.
    func test_on_linux_a_urlsession_websocket_fails_as_unsupported_and_is_not_retried() async throws {
        let client = try urlSessionClient("alice")
        do {
            try await client.connect()
            XCTFail("URLSession on Linux opened a WebSocket: update docs/ios.md and this test")
        } catch let error as CallingError {
            guard case .invalidConfiguration(let message) = error.kind else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("NSURLErrorDomain -1002"), message)
            XCTAssertFalse(error.isRetryable)
        }
        guard case .failed = client.state else { return XCTFail("state \(client.state)") }
    }
    #endif
}
