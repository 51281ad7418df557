import CallingServer
import CallingTesting
import Foundation
import XCTest

/// `calling-server apikey create|list|revoke`, run in-process on a temporary data directory.
final class APIKeyCommandTests: XCTestCase {
    private var dataDir = ""

    override func setUp() {
        dataDir = NSTemporaryDirectory() + "calling-apikey-test-\(UUID().uuidString)"
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dataDir)
    }

    func test_create_prints_the_key_once_list_shows_it_revoke_marks_it() throws {
        let (created, key) = try runCapturingOutput(["apikey", "create", "--name", "billing backend", "--data-dir", dataDir])
        XCTAssertEqual(created, 0)
        let plaintext = key.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(plaintext.hasPrefix("csk_"), plaintext)
        XCTAssertEqual(plaintext.count, 47)

        let (listed, table) = try runCapturingOutput(["apikey", "list", "--data-dir", dataDir])
        XCTAssertEqual(listed, 0)
        let rows = table.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        XCTAssertEqual(rows.first, ["ID", "NAME", "SCOPE", "CREATED", "REVOKED"])
        XCTAssertEqual(rows.count, 2)
        let row = rows[1]
        XCTAssertTrue(row[0].hasPrefix("ak_"))
        XCTAssertEqual(row[1], "billing backend")
        XCTAssertEqual(row[2], "calls", "a key without --scope creates calls")
        XCTAssertEqual(row[4], "-")
        XCTAssertFalse(table.contains(plaintext), "the key is never shown again")

        let (revoked, message) = try runCapturingOutput(["apikey", "revoke", "--id", row[0], "--data-dir", dataDir])
        XCTAssertEqual(revoked, 0)
        XCTAssertTrue(message.contains("revoked \(row[0])"), message)
        let (_, after) = try runCapturingOutput(["apikey", "list", "--data-dir", dataDir])
        XCTAssertNotEqual(after.split(separator: "\n")[1].split(separator: "\t").last, "-")
    }

    func test_scope_admin_is_stored_and_unknown_scopes_are_refused() throws {
        let (created, _) = try runCapturingOutput(["apikey", "create", "--name", "ops", "--scope", "admin", "--data-dir", dataDir])
        XCTAssertEqual(created, 0)
        let (both, _) = try runCapturingOutput(["apikey", "create", "--name", "both", "--scope", "calls admin", "--data-dir", dataDir])
        XCTAssertEqual(both, 0)
        let (_, table) = try runCapturingOutput(["apikey", "list", "--data-dir", dataDir])
        let scopes = table.split(separator: "\n").dropFirst().map { $0.split(separator: "\t").map(String.init)[2] }
        XCTAssertEqual(Set(scopes), ["admin", "calls admin"])
        XCTAssertEqual(try runCapturingOutput(["apikey", "create", "--name", "x", "--scope", "root", "--data-dir", dataDir]).0, 64)
    }

    func test_bad_invocations_fail_with_usage_codes() throws {
        XCTAssertEqual(try runCapturingOutput(["apikey", "create", "--data-dir", dataDir]).0, 64, "--name is required")
        XCTAssertEqual(try runCapturingOutput(["apikey", "revoke", "--data-dir", dataDir]).0, 64, "--id is required")
        XCTAssertEqual(try runCapturingOutput(["apikey", "rotate", "--data-dir", dataDir]).0, 64)
        XCTAssertEqual(try runCapturingOutput(["apikey", "revoke", "--id", "ak_missing", "--data-dir", dataDir]).0, 1)
    }
}

/// Runs `calling-server <arguments>` in-process with an empty environment and returns its exit code
/// and what it wrote to stdout.
func runCapturingOutput(_ arguments: [String]) throws -> (Int32, String) {
    try capturingStandardOutput { CallingCommand.run(["calling-server"] + arguments, environment: [:]) }
}
