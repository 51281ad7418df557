@testable import CallingMedia
import XCTest

final class PCMFeedTests: XCTestCase {
    func test_pushed_pcm_comes_out_in_20ms_frames_padded_with_silence() throws {
        var feed = try PCMFeed(input: .pcm)
        XCTAssertTrue(feed.needsPacing)
        feed.push((1...1000).map { Int16($0) })
        let first = try XCTUnwrap(feed.nextSharedFrame())
        XCTAssertEqual(first, (1...960).map { Int16($0) })
        let second = try XCTUnwrap(feed.nextSharedFrame())
        XCTAssertEqual(second.count, 960)
        XCTAssertEqual(Array(second.prefix(40)), (961...1000).map { Int16($0) })
        XCTAssertTrue(second.dropFirst(40).allSatisfy { $0 == 0 }, "an app that falls behind is heard as silence")
        XCTAssertEqual(feed.nextSharedFrame(), [Int16](repeating: 0, count: 960))
    }

    func test_pushing_more_than_ten_seconds_drops_the_oldest_audio() throws {
        var feed = try PCMFeed(input: .pcm)
        feed.push([Int16](repeating: 1, count: PCMFeed.pushedCapacity))
        feed.push([Int16](repeating: 2, count: 960))
        var last: [Int16] = []
        for _ in 0..<(PCMFeed.pushedCapacity / 960) { last = try XCTUnwrap(feed.nextSharedFrame()) }
        XCTAssertEqual(last, [Int16](repeating: 2, count: 960), "the newest frame survives, the oldest went")
    }

    func test_tone_and_silence_need_no_pacing_and_share_no_frames() throws {
        var tone = try PCMFeed(input: .tone(440))
        XCTAssertFalse(tone.needsPacing)
        XCTAssertNil(tone.nextSharedFrame())
        XCTAssertFalse(try PCMFeed(input: .silence).needsPacing)
        XCTAssertTrue(try PCMFeed(input: .echo).needsPacing)
    }

    func test_a_wav_input_reports_the_files_format_and_a_missing_file_throws() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("pcmfeed-\(UUID().uuidString).wav")
        defer { try? FileManager.default.removeItem(at: url) }
        var bytes = [UInt8](WAVFile.Writer.header(sampleRate: 16_000, dataBytes: 8))
        bytes += [1, 0, 2, 0, 3, 0, 4, 0]
        try Data(bytes).write(to: url)
        let feed = try PCMFeed(input: .wav(url))
        XCTAssertEqual(feed.format.rate, 16_000)
        XCTAssertEqual(feed.format.channels, 1)
        XCTAssertThrowsError(try PCMFeed(input: .wav(url.appendingPathExtension("missing"))))
    }
}
