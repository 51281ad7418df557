import CallingTransport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

@testable import CallingServer

/// The route table of a running server against the two documents that list its routes:
/// docs/protocol.md's "Routes" table (every row, in order, with its auth, CORS and rate limit) and
/// docs/openapi.yaml's paths (every plain-HTTP row, its methods and its credentials).
final class RouteTableTests: ServerTestCase {
    private static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    private func document(_ name: String) throws -> [Substring] {
        let text = try String(contentsOf: Self.repository.appendingPathComponent("docs/\(name)"), encoding: .utf8)
        return text.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// A row as docs/protocol.md's "Routes" table writes it.
    static func markdown(_ route: Route) -> String {
        let methods = "`" + route.methods.map(\.rawValue).joined(separator: ", ") + "`" + (route.isWebSocket ? " (WebSocket)" : "")
        var auth: String
        switch route.auth {
        case .none:
            auth = "none"
        case .apiKey(let scope):
            auth = "API key, scope `\(scope)`"
        case .peerToken(let scope, let binding):
            auth = "peer token"
            switch scope {
            case .ifListed(let name)?: auth += ", scope `\(name)` (when the token lists scopes)"
            case .required(let name)?: auth += ", scope `\(name)`"
            case nil: break
            }
            switch binding {
            case .room(let parameter)?: auth += ", `{\(parameter)}` is the token's `room_id`"
            case .call(let parameter)?: auth += ", `{\(parameter)}` is the token's `call_id`"
            case nil: break
            }
        }
        let browsers = route.isWebSocket ? "`Origin` checked" : route.browser ? "CORS" : "no"
        let limit = route.rateLimited ? "`signaling_requests_per_minute`" : "no"
        return "| \(methods) | `\(route.pattern)` | \(auth) | \(browsers) | \(limit) |"
    }

    func test_protocol_md_lists_every_route_of_the_table_in_order() throws {
        let lines = try document("protocol.md")
        guard let start = lines.firstIndex(of: "## Routes") else { return XCTFail("docs/protocol.md has no '## Routes' section") }
        let section = lines[(start + 1)...].prefix { !$0.hasPrefix("## ") }
        let documented = section.filter { $0.hasPrefix("| `") }.map(String.init)
        let expected = server.app.routeTable.routes.map(Self.markdown)
        XCTAssertEqual(documented, expected, "docs/protocol.md 'Routes' should read:\n" + expected.joined(separator: "\n"))
    }

    /// Paths, methods and credentials of docs/openapi.yaml: `[path: [method: security schemes]]`.
    private func openAPIOperations() throws -> [String: [String: Set<String>]] {
        let methods: Set<String> = ["get", "head", "post", "put", "patch", "delete", "options"]
        var operations: [String: [String: Set<String>]] = [:]
        var path: String?
        var method: String?
        var inSecurity = false
        for line in try document("openapi.yaml") {
            if line.hasPrefix("components:") { break }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
                method = nil
                operations[path!] = [:]
            } else if let path, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":"),
                      methods.contains(String(line.dropFirst(4).dropLast()))
            {
                method = String(line.dropFirst(4).dropLast())
                operations[path]![method!] = []
                inSecurity = false
            } else if let path, let method {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed == "security:" {
                    inSecurity = true
                } else if inSecurity, trimmed.hasPrefix("- "), let name = trimmed.dropFirst(2).split(separator: ":").first {
                    operations[path]![method]!.insert(String(name))
                } else {
                    inSecurity = false
                }
            }
        }
        return operations
    }

    func test_openapi_yaml_lists_every_http_route_with_its_methods_and_credentials() throws {
        let operations = try openAPIOperations()
        // Served by StaticFiles in front of the route table (docs/protocol.md, "Static files").
        let staticPaths: Set<String> = ["/", "/dashboard", "/sdk/{path}"]
        let routes = server.app.routeTable.routes.filter { !$0.isWebSocket }
        XCTAssertEqual(Set(operations.keys).subtracting(staticPaths), Set(routes.map(\.pattern.description)),
                       "docs/openapi.yaml's paths against the route table's plain-HTTP rows")
        for path in staticPaths { XCTAssertNotNil(operations[path], "docs/openapi.yaml should list the static \(path)") }
        for route in routes {
            let documented = operations[route.pattern.description] ?? [:]
            for method in route.methods {
                guard let security = documented[method.rawValue.lowercased()] else {
                    XCTFail("docs/openapi.yaml has no \(method.rawValue) \(route.pattern)")
                    continue
                }
                let expected: Set<String>
                switch route.auth {
                case .none: expected = []
                case .peerToken: expected = ["peerToken", "peerTokenQuery"]
                case .apiKey: expected = ["apiKey", "apiKeyBearer"]
                }
                XCTAssertEqual(security, expected, "credentials of \(method.rawValue) \(route.pattern) in docs/openapi.yaml")
            }
        }
        // Nothing documented that the table does not answer; an `options` of a browser path is its CORS preflight.
        for (path, methods) in operations where !staticPaths.contains(path) {
            let rows = routes.filter { $0.pattern.description == path }
            for method in methods.keys {
                let answered = rows.contains { $0.methods.map { $0.rawValue.lowercased() }.contains(method) }
                let preflight = method == "options" && rows.contains(where: \.browser)
                XCTAssertTrue(answered || preflight, "docs/openapi.yaml documents \(method.uppercased()) \(path), which no row answers")
            }
        }
    }

    /// 404, 405 with `Allow`, the preflight's methods and the 426 all come from the table.
    func test_the_front_door_derives_404_405_preflight_and_426_from_the_table() async throws {
        let (missing, missingBody) = try await server.http("GET", "/v1/nothing-here")
        XCTAssertEqual(missing, 404)
        XCTAssertTrue(String(decoding: missingBody, as: UTF8.self).contains("not_found"))
        for (path, allow) in [("/v1/admin/drain", "GET, POST"), ("/whip/r1", "POST, OPTIONS"), ("/whip/r1/x", "PATCH, DELETE, OPTIONS"),
                              ("/healthz", "GET, HEAD"), ("/v1/calls/c1", "GET")]
        {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)\(path)")!)
            request.httpMethod = "PUT"
            let (_, response) = try await URLSession.shared.data(for: request)
            let http = response as! HTTPURLResponse
            XCTAssertEqual(http.statusCode, 405, path)
            XCTAssertEqual(http.value(forHTTPHeaderField: "allow"), allow, path)
        }
        var preflight = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)/whip/r1/x")!)
        preflight.httpMethod = "OPTIONS"
        preflight.setValue("https://app.example", forHTTPHeaderField: "Origin")
        preflight.setValue("PATCH", forHTTPHeaderField: "Access-Control-Request-Method")
        let (_, answer) = try await URLSession.shared.data(for: preflight)
        XCTAssertEqual((answer as! HTTPURLResponse).statusCode, 204)
        XCTAssertEqual((answer as! HTTPURLResponse).value(forHTTPHeaderField: "access-control-allow-methods"), "PATCH, DELETE, OPTIONS")
        for path in ["/v1/ws", "/v1/presence"] {
            let (status, body) = try await server.http("POST", path)
            XCTAssertEqual(status, 426, path)
            XCTAssertTrue(String(decoding: body, as: UTF8.self).contains("\(path) is a WebSocket endpoint"), path)
        }
    }
}
