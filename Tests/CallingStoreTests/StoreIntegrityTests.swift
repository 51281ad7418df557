import CallingCore
import CallingStore
import Foundation
import XCTest

/// The integrity check at open, and errors that name the file and the operating system's cause.
final class StoreIntegrityTests: XCTestCase {
    func test_open_failure_names_the_file_and_the_cause() throws {
        let path = try makeTemporaryDirectory().appendingPathComponent("missing/chat.sqlite").path
        XCTAssertThrowsError(try SQLiteConnection(path: path)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains(path), text)
            XCTAssertTrue(text.contains("ENOENT (No such file or directory)"), text)
            XCTAssertEqual((error as? SQLiteError)?.kind, "cannot_open")
        }
    }

    func test_a_file_damaged_past_its_header_is_refused_by_the_check() throws {
        let path = try makeDatabasePath()
        let store = try ChatStore.open(path: path)
        store.close()
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        XCTAssertGreaterThan(size, 4 * 4096)
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: 4096)
        var generator = SystemRandomNumberGenerator()
        try handle.write(contentsOf: Data((0..<(size - 4096)).map { _ in UInt8.random(in: 0...255, using: &generator) }))
        try handle.close()

        XCTAssertThrowsError(try ChatStore.open(path: path, options: .init(quickCheckOnOpen: true))) { error in
            guard case StoreError.damaged(let damagedPath, let findings) = error else {
                return XCTFail("expected damaged, got \(error)")
            }
            XCTAssertEqual(damagedPath, path)
            XCTAssertFalse(findings.isEmpty)
            XCTAssertFalse(StoreError.damaged(path: path, findings: findings).isRetryable)
        }
    }

    func test_a_sound_file_passes_the_check() throws {
        let path = try makeDatabasePath()
        try ChatStore.open(path: path).close()
        let store = try ChatStore.open(path: path, options: .init(quickCheckOnOpen: true))
        store.close()
        let connection = try SQLiteConnection(path: path)
        XCTAssertEqual(try connection.quickCheck(), [])
    }
}
