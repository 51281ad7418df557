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
