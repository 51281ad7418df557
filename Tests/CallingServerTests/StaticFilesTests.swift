import CallingTransport
import Foundation
import XCTest

@testable import CallingServer

final class StaticFilesTests: XCTestCase {
    private var root = ""
    private var outside = ""

    override func setUpWithError() throws {
        let base = NSTemporaryDirectory() + "static-\(UUID().uuidString)"
        root = base + "/web"
        outside = base + "/secret.txt"
        try FileManager.default.createDirectory(atPath: root + "/demo", withIntermediateDirectories: true)
        try "export const x = 1;\n".write(toFile: root + "/calling-client.js", atomically: true, encoding: .utf8)
        try "export declare const x: number;\n".write(toFile: root + "/calling-client.d.ts", atomically: true, encoding: .utf8)
        try "<!doctype html><title>demo</title>".write(toFile: root + "/demo/index.html", atomically: true, encoding: .utf8)
        try "<!doctype html><title>dash</title>".write(toFile: root + "/demo/dashboard.html", atomically: true, encoding: .utf8)
        try "key".write(toFile: outside, atomically: true, encoding: .utf8)
        try "hidden".write(toFile: root + "/.env.js", atomically: true, encoding: .utf8)
        try "no type".write(toFile: root + "/notes.bin", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: root + "/linked.js", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: root + "/up", withDestinationPath: base)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: (root as NSString).deletingLastPathComponent)
    }

    private func get(_ files: StaticFiles, _ path: String, headers: [String: String] = [:]) -> HTTPResponse? {
        files.response(for: HTTPRequest(method: .get, path: path, headers: headers))
    }

    func test_the_sdk_and_the_pages_are_served_with_their_types_and_validators() throws {
        let files = try StaticFiles(root: root, pagesEnabled: true)
        let sdk = try XCTUnwrap(get(files, "/sdk/calling-client.js"))
        XCTAssertEqual(sdk.status, 200)
        XCTAssertEqual(String(decoding: sdk.body, as: UTF8.self), "export const x = 1;\n")
        XCTAssertEqual(sdk.headers.first { $0.0 == "content-type" }?.1, "text/javascript; charset=utf-8")
        XCTAssertEqual(sdk.headers.first { $0.0 == "cache-control" }?.1, "no-cache")
        let etag = try XCTUnwrap(sdk.headers.first { $0.0 == "etag" }?.1)
        XCTAssertTrue(etag.hasPrefix("\"") && etag.count == 34, etag)

        XCTAssertEqual(get(files, "/")?.status, 200)
        XCTAssertTrue(get(files, "/")?.headers.contains { $0.0 == "content-security-policy" } ?? false)
        XCTAssertEqual(String(decoding: get(files, "/dashboard")?.body ?? [], as: UTF8.self), "<!doctype html><title>dash</title>")
        XCTAssertEqual(get(files, "/sdk/demo/index.html")?.status, 200)
    }

    func test_a_module_with_typings_names_them_and_typings_are_typescript() throws {
        let files = try StaticFiles(root: root, pagesEnabled: true)
        let sdk = try XCTUnwrap(get(files, "/sdk/calling-client.js"))
        XCTAssertEqual(sdk.headers.first { $0.0 == "x-typescript-types" }?.1, "./calling-client.d.ts")
        let typings = try XCTUnwrap(get(files, "/sdk/calling-client.d.ts"))
        XCTAssertEqual(typings.headers.first { $0.0 == "content-type" }?.1, "application/typescript; charset=utf-8")
        XCTAssertNil(typings.headers.first { $0.0 == "x-typescript-types" })
        // A module without typings beside it names none.
        try "export {};\n".write(toFile: root + "/demo/common.js", atomically: true, encoding: .utf8)
        let reloaded = try StaticFiles(root: root, pagesEnabled: true)
        XCTAssertEqual(get(reloaded, "/sdk/demo/common.js")?.status, 200)
        XCTAssertNil(get(reloaded, "/sdk/demo/common.js")?.headers.first { $0.0 == "x-typescript-types" })
    }

    func test_a_matching_if_none_match_gets_304_without_a_body() throws {
        let files = try StaticFiles(root: root, pagesEnabled: true)
        let etag = try XCTUnwrap(get(files, "/sdk/calling-client.js")?.headers.first { $0.0 == "etag" }?.1)
        let cached = try XCTUnwrap(get(files, "/sdk/calling-client.js", headers: ["if-none-match": "\"other\", W/\(etag)"]))
        XCTAssertEqual(cached.status, 304)
        XCTAssertTrue(cached.body.isEmpty)
        XCTAssertEqual(get(files, "/sdk/calling-client.js", headers: ["if-none-match": "\"stale\""])?.status, 200)
    }

    func test_nothing_outside_the_folder_is_served_whatever_the_path_spells() throws {
        let files = try StaticFiles(root: root, pagesEnabled: true)
        for path in ["/sdk/../secret.txt", "/sdk/%2e%2e/secret.txt", "/sdk/%252e%252e/secret.txt", "/sdk/linked.js",
                     "/sdk/up/secret.txt", "/sdk/.env.js", "/sdk/notes.bin", "/sdk/calling-client.js\u{0}.html",
                     "/sdk//calling-client.js", "/sdk/", "/sdk/demo\\index.html"]
        {
            XCTAssertEqual(get(files, path)?.status, 404, path)
        }
        XCTAssertFalse(files.assets.keys.contains { $0.contains("secret") || $0.contains("linked") || $0.hasPrefix("up") })
    }

    func test_other_paths_are_left_to_the_other_routes_and_writes_are_refused() throws {
        let files = try StaticFiles(root: root, pagesEnabled: true)
        XCTAssertNil(get(files, "/v1/ice"))
        XCTAssertNil(get(files, "/sdkx/calling-client.js"))
        let post = files.response(for: HTTPRequest(method: .post, path: "/sdk/calling-client.js"))
        XCTAssertEqual(post?.status, 405)
        XCTAssertEqual(post?.headers.first { $0.0 == "allow" }?.1, "GET, HEAD")
    }

    func test_with_pages_off_only_the_sdk_is_served() throws {
        let files = try StaticFiles(root: root, pagesEnabled: false)
        XCTAssertNil(get(files, "/"))
        XCTAssertNil(get(files, "/dashboard"))
        XCTAssertEqual(get(files, "/sdk/demo/index.html")?.status, 404)
        XCTAssertEqual(get(files, "/sdk/calling-client.js")?.status, 200)
    }

    func test_an_unreadable_root_is_a_start_up_error() {
        XCTAssertThrowsError(try StaticFiles(root: root + "/missing", pagesEnabled: true))
    }

    func test_the_default_root_is_found_beside_an_installed_binary_or_above_a_build_folder() throws {
        let base = (root as NSString).deletingLastPathComponent
        let installed = base + "/prefix/share/calling-server/sdk"
        try FileManager.default.createDirectory(atPath: installed, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/prefix/bin", withIntermediateDirectories: true)
        try "x".write(toFile: installed + "/calling-client.js", atomically: true, encoding: .utf8)
        XCTAssertEqual(StaticFiles.defaultRoot(executable: base + "/prefix/bin/calling-server", workingDirectory: "/nonexistent"),
                       installed)

        let checkout = base + "/repo"
        try FileManager.default.createDirectory(atPath: checkout + "/sdk/js", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: checkout + "/.build/debug", withIntermediateDirectories: true)
        try "x".write(toFile: checkout + "/sdk/js/calling-client.js", atomically: true, encoding: .utf8)
        XCTAssertEqual(StaticFiles.defaultRoot(executable: checkout + "/.build/debug/calling-server", workingDirectory: "/nonexistent"),
                       checkout + "/sdk/js")
        XCTAssertNil(StaticFiles.defaultRoot(executable: "/nonexistent/bin/x", workingDirectory: "/nonexistent"))
    }
}
