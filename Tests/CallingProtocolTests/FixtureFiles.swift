import Foundation
import XCTest

/// Golden files copied into the test bundle (`resources: [.copy("Fixtures")]`).
enum Fixtures {
    static func directory(_ subpath: String = "", file: StaticString = #filePath, line: UInt = #line) throws -> URL {
        let root = try XCTUnwrap(
            Bundle.module.url(forResource: "Fixtures", withExtension: nil), "Fixtures missing from the test bundle",
            file: file, line: line)
        return subpath.isEmpty ? root : root.appendingPathComponent(subpath, isDirectory: true)
    }

    /// Files in `subpath` ending in `suffix`, sorted by name so failures are reported in a stable order.
    static func files(in subpath: String, suffix: String, file: StaticString = #filePath, line: UInt = #line) throws -> [URL] {
        let folder = try directory(subpath, file: file, line: line)
        return try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { $0.lastPathComponent.hasSuffix(suffix) }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    static func bytes(_ url: URL) throws -> [UInt8] { Array(try Data(contentsOf: url)) }

    /// File contents without the one trailing newline editors add.
    static func line(_ url: URL) throws -> [UInt8] {
        var bytes = try bytes(url)
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        return bytes
    }

    /// `name` without `suffix`: `offer.json` → `offer`.
    static func name(of url: URL, dropping suffix: String) -> String {
        String(url.lastPathComponent.dropLast(suffix.count))
    }
}
