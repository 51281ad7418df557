import Foundation
import XCTest

@testable import CallingBench

final class CallgrindTests: XCTestCase {
    func test_the_count_is_the_totals_line_and_else_the_summary() {
        let dump = """
            version: 1
            creator: callgrind-3.19.0
            events: Ir
            summary: 93060243
            fn=(1) ev_invoke_pending
            0 12
            totals: 93060250
            """
        XCTAssertEqual(Callgrind.instructions(inCounts: dump), 93_060_250, "totals, the last word of the file")
        XCTAssertEqual(Callgrind.instructions(inCounts: "events: Ir\nsummary: 42\n"), 42)
        XCTAssertNil(Callgrind.instructions(inCounts: "events: Ir\nfn=(1) main\n0 5\n"), "a file without either says nothing")
        XCTAssertNil(Callgrind.instructions(inFile: "/nonexistent/callgrind.out"))
    }

    func test_valgrind_is_looked_up_on_the_path_given_and_runs_the_target_in_its_own_process() throws {
        let folder = NSTemporaryDirectory() + "callgrind-tests-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        XCTAssertNil(Callgrind(directory: folder, path: folder), "no valgrind in an empty folder")
        let valgrind = folder + "/valgrind"
        XCTAssertTrue(FileManager.default.createFile(atPath: valgrind, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o755]))
        let callgrind = try XCTUnwrap(Callgrind(directory: "/tmp/out", path: "/nonexistent:" + folder))
        XCTAssertEqual(callgrind.valgrind, valgrind)
        let file = callgrind.file(for: .server)
        XCTAssertTrue(file.hasPrefix("/tmp/out/callgrind-server-") && file.hasSuffix(".out"), file)
        XCTAssertNotEqual(file, callgrind.file(for: .server), "each target its own file")
        XCTAssertEqual(callgrind.command("/bin/calling-server", writingTo: file), [
            valgrind, "--tool=callgrind", "--toggle-collect=ev_invoke_pending", "--callgrind-out-file=\(file)", "--dump-instr=no",
            "/bin/calling-server",
        ])
    }
}
