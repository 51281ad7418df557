import CallingCore
@testable import CallingStore
import CallingTesting
import Foundation
import XCTest

/// `ChatStore.Options.checkpointEveryPages` and `writerCatchUpPages` (`sqlite_checkpoint_pages`,
/// `sqlite_writer_catch_up_pages`) on a real SQLite file. The `-wal` file is never shortened when the
/// WAL restarts (it is overwritten from its start), so its size tells the most frames it ever held:
/// from the configured limit to that plus one commit's pages when the limit is what restarts it.
final class WALCheckpointLimitsTests: XCTestCase {
    /// Pages one append of a short chat can add to the WAL, b-tree splits included; far below the
    /// gaps between the limits compared here.
    private let oneAppendPages = 16

    /// A migrated file, closed (which checkpoints and removes the WAL), so that the store under test
    /// starts from an empty WAL and every frame in it is an append's.
    private func migratedDatabase() throws -> String {
        let path = try makeDatabasePath()
        try ChatStore.open(path: path).close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"))
        return path
    }

    /// Appends `count` chats one at a time; after each ack, `afterEach` runs. Returns the most frames
    /// the WAL held.
    private func largestWALFrames(path: String, options: ChatStore.Options, count: Int = 400,
                                  afterEach: (ChatStore) -> Void = { _ in }) throws -> Int64
    {
        let store = try ChatStore.open(path: path, options: options)
        defer { store.close() }
        XCTAssertTrue(store.migrationsAppliedAtOpen.isEmpty)
        for index in 0..<count {
            _ = try store.appendAndWait(ChatDraft(room: "r", sender: "alice", clientID: "c\(index)",
                                                  text: String(repeating: "x", count: 200), meta: nil, timestampMs: 1))
            afterEach(store)
        }
        let pageSize = try store.sync { try $0.count("PRAGMA page_size") }
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int64)
        // A 32-byte WAL header, then one 24-byte frame header per page.
        return (size - 32) / (pageSize + 24)
    }

    func testTheCheckpointConnectionCheckpointsAtTheConfiguredPageCount() throws {
        for everyPages in [8, 64] {
            let path = try migratedDatabase()
            // The writer's own catch-up far away, so that only the checkpoint connection restarts the WAL.
            let options = ChatStore.Options(checkpointEveryPages: everyPages, writerCatchUpPages: 100_000_000)
            // Each checkpoint done before the next append, so that the append finds the WAL copied and restarts it.
            let frames = try largestWALFrames(path: path, options: options) { $0.waitForScheduledCheckpoints() }
            XCTAssertGreaterThanOrEqual(frames, Int64(everyPages), "checkpointed before \(everyPages) pages")
            XCTAssertLessThanOrEqual(frames, Int64(everyPages + oneAppendPages), "not checkpointed at \(everyPages) pages")
        }
    }

    func testTheWriterCatchesUpAtTheConfiguredPageCount() throws {
        for catchUpPages in [40, 120] {
            let path = try migratedDatabase()
            // No checkpoint on the checkpoint connection: only the writer's catch-up restarts the WAL.
            let options = ChatStore.Options(checkpointEveryPages: 100_000_000, writerCatchUpPages: catchUpPages)
            let frames = try largestWALFrames(path: path, options: options)
            XCTAssertGreaterThanOrEqual(frames, Int64(catchUpPages), "caught up before \(catchUpPages) pages")
            XCTAssertLessThanOrEqual(frames, Int64(catchUpPages + oneAppendPages), "no catch-up at \(catchUpPages) pages")
        }
    }

    func testWithNeitherLimitReachedTheWALIsNeverRestarted() throws {
        let path = try migratedDatabase()
        let options = ChatStore.Options(checkpointEveryPages: 100_000_000, writerCatchUpPages: 100_000_000)
        // Every append added at least one page, and none was taken back.
        XCTAssertGreaterThan(try largestWALFrames(path: path, options: options), 400)
    }

    func testTheDefaultsAreTheDocumentedOnes() {
        let options = ChatStore.Options()
        XCTAssertEqual(options.checkpointEveryPages, 250)
        XCTAssertEqual(options.writerCatchUpPages, 16_000)
    }
}
