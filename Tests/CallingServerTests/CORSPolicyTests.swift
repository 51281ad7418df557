import CallingTransport
import XCTest

@testable import CallingServer

final class CORSPolicyTests: XCTestCase {
    private func request(origin: String?, host: String = "calls.example:8080") -> HTTPRequest {
        var headers = ["host": host]
        if let origin { headers["origin"] = origin }
        return HTTPRequest(method: .get, path: "/v1/ice", headers: headers)
    }

    func test_the_default_allows_any_page_without_credentials() {
        let policy = CORSPolicy(allowedOrigins: "*")
        XCTAssertEqual(policy.check(request(origin: "https://anyone.example")), .allowed(allowOrigin: "*"))
        XCTAssertEqual(policy.check(request(origin: "null")), .allowed(allowOrigin: "*"))
        let headers = CORSPolicy.responseHeaders(allowOrigin: "*")
        XCTAssertFalse(headers.contains { $0.0 == "access-control-allow-credentials" })
        XCTAssertFalse(headers.contains { $0.0 == "vary" })
    }

    func test_a_list_echoes_listed_origins_and_refuses_the_rest() {
        let policy = CORSPolicy(allowedOrigins: "https://app.example, HTTP://Localhost:5173/")
        XCTAssertEqual(policy.check(request(origin: "https://app.example")), .allowed(allowOrigin: "https://app.example"))
        XCTAssertEqual(policy.check(request(origin: "http://localhost:5173")), .allowed(allowOrigin: "http://localhost:5173"))
        XCTAssertEqual(policy.check(request(origin: "https://evil.example")), .refused)
        XCTAssertEqual(policy.check(request(origin: "null")), .refused)
        XCTAssertTrue(CORSPolicy.responseHeaders(allowOrigin: "https://app.example").contains { $0 == ("vary", "Origin") })
    }

    func test_requests_without_origin_and_pages_of_this_server_are_never_refused() {
        let policy = CORSPolicy(allowedOrigins: "https://app.example")
        XCTAssertEqual(policy.check(request(origin: nil)), .notCrossOrigin)
        XCTAssertEqual(policy.check(request(origin: "http://calls.example:8080")), .allowed(allowOrigin: "http://calls.example:8080"))
        XCTAssertEqual(policy.check(request(origin: "http://calls.example:9090")), .refused)
    }

    func test_a_preflight_names_methods_headers_and_a_max_age() {
        let answer = CORSPolicy.preflight(allowOrigin: "*", methods: ["PATCH", "DELETE"])
        XCTAssertEqual(answer.status, 204)
        XCTAssertEqual(answer.headers.first { $0.0 == "access-control-allow-methods" }?.1, "PATCH, DELETE, OPTIONS")
        XCTAssertTrue(answer.headers.first { $0.0 == "access-control-allow-headers" }?.1.contains("Authorization") ?? false)
        XCTAssertEqual(answer.headers.first { $0.0 == "access-control-max-age" }?.1, "600")
    }

    func test_static_files_carry_cors_headers_that_never_vary_unsaid() {
        let any = CORSPolicy(allowedOrigins: "*")
        // Under `*` the same headers with or without Origin, so a cached copy fits every page.
        for origin in [nil, "https://anyone.example"] {
            let headers = any.staticHeaders(for: any.check(request(origin: origin)))
            XCTAssertEqual(headers?.first { $0.0 == "access-control-allow-origin" }?.1, "*", origin ?? "no origin")
            XCTAssertFalse(headers?.contains { $0.0 == "vary" } ?? true)
        }
        let list = CORSPolicy(allowedOrigins: "https://app.example")
        let allowed = list.staticHeaders(for: list.check(request(origin: "https://app.example")))
        XCTAssertEqual(allowed?.first { $0.0 == "access-control-allow-origin" }?.1, "https://app.example")
        XCTAssertTrue(allowed?.contains { $0 == ("vary", "Origin") } ?? false)
        let without = list.staticHeaders(for: list.check(request(origin: nil)))
        XCTAssertEqual(without?.map(\.0), ["vary"])
        XCTAssertNil(list.staticHeaders(for: list.check(request(origin: "https://evil.example"))))
    }

    func test_a_refusal_is_readable_by_the_refused_page() {
        let refusal = CORSPolicy.refusal(origin: "https://evil.example")
        XCTAssertEqual(refusal.status, 403)
        XCTAssertEqual(refusal.headers.first { $0.0 == "access-control-allow-origin" }?.1, "https://evil.example")
        XCTAssertTrue(refusal.headers.contains { $0 == ("vary", "Origin") })
        XCTAssertTrue(String(decoding: refusal.body, as: UTF8.self).contains("origin_not_allowed"))
    }

    func test_values_that_are_not_origins_are_configuration_problems() {
        XCTAssertEqual(CORSPolicy.problems("*, https://a.example, null, http://b.example:81"), [])
        XCTAssertEqual(CORSPolicy.problems("https://a.example/path").count, 1)
        XCTAssertEqual(CORSPolicy.problems("a.example").count, 1)
        XCTAssertEqual(CORSPolicy.problems("ftp://a.example").count, 1)
        if case .failure(let problems) = ServerConfig.load(file: nil, environment: [:], flags: ["allowed_origins": "app.example"]) {
            XCTAssertTrue(problems.problems.first?.contains("allowed_origins") ?? false)
        } else {
            XCTFail("a bad origin list must be refused")
        }
    }
}
