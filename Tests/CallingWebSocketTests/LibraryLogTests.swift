@testable import CallingWebSocket
import CallingTesting
import Foundation
import XCTest

final class LibraryLogTests: XCTestCase {
    func testARoutedSinkIsCalledAtTheSameStackDepthForEveryLine() {
        // Kept as an optional closure in a lock and read with `withLock { $0 }`, the sink came back
        // wrapped in two more reabstraction thunks on every line: one more pair of frames per line.
        let depths = Collector<Int>()
        let texts = Collector<String>()
        let marker = "library-log-depth-test"
        WebSocketClientLoop.routeLibraryLog { isError, text in
            // lws may log on its own threads meanwhile; only this test's lines count.
            guard text.hasPrefix(marker) else { return }
            texts.append(isError ? "E " + text : text)
            depths.append(Thread.callStackReturnAddresses.count)
        }
        defer { WebSocketClientLoop.routeLibraryLog(nil) }
        for index in 0..<30 {
            "[2026/12/02 06:00:00:0000] E: \(marker) \(index)\n".withCString {
                WebSocketClientLoop.libraryLine(level: 1, $0)  // LLL_ERR
            }
        }
        XCTAssertEqual(texts.all.count, 30)
        XCTAssertEqual(texts.all.first, "E \(marker) 0", "timestamp and level prefix stripped")
        XCTAssertEqual(Set(depths.all).count, 1, "depths \(depths.all)")
    }
}
