@testable import CallingMedia
import Foundation
import XCTest

/// WAV input (`AudioInput.wav`) takes what sox and ffmpeg write; WAV output (`AudioOutput.wav`)
/// is a file other tools can read, also when the process dies mid-call.
final class WAVFileTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("wavfile-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: parse

    func test_parses_plain_pcm() throws {
        let samples: [Int16] = [0, 1, -1, .max, .min, 12_345, -12_345]
        let audio = try WAVFile.parse(Self.wav(channels: 1, rate: 48_000, samples: samples))
        XCTAssertEqual(audio.sampleRate, 48_000)
        XCTAssertEqual(audio.channels, 1)
        XCTAssertEqual(audio.samples, samples)
    }

    func test_parses_wave_format_extensible_as_sox_and_ffmpeg_write_it() throws {
        let samples: [Int16] = [100, -100, 200, -200]
        let audio = try WAVFile.parse(Self.wav(tag: 0xFFFE, channels: 2, rate: 44_100, samples: samples))
        XCTAssertEqual(audio.sampleRate, 44_100)
        XCTAssertEqual(audio.channels, 2)
        XCTAssertEqual(audio.samples, samples, "interleaved, as stored")
    }

    func test_skips_other_chunks_including_odd_sized_ones() throws {
        // A LIST chunk of 5 bytes is followed by one pad byte (RIFF chunks are word aligned).
        let list = Array("LIST".utf8) + Self.le32(5) + Array("INFOx".utf8) + [0]
        let audio = try WAVFile.parse(Self.wav(channels: 1, rate: 16_000, samples: [7, -7], before: list))
        XCTAssertEqual(audio.sampleRate, 16_000)
        XCTAssertEqual(audio.samples, [7, -7])
    }

    func test_a_data_chunk_cut_short_yields_what_is_there() throws {
        // A recorder killed before it fixed its header: the data size claims more than the file has.
        var bytes = Self.wav(channels: 1, rate: 48_000, samples: [1, 2, 3, 4])
        bytes.replaceSubrange(40..<44, with: Self.le32(1_000_000))
        XCTAssertEqual(try WAVFile.parse(bytes).samples, [1, 2, 3, 4])
        // A trailing odd byte is not half a sample.
        XCTAssertEqual(try WAVFile.parse(bytes + [0x55]).samples, [1, 2, 3, 4])
    }

    func test_rejects_what_is_not_16_bit_pcm() {
        Self.assertUnreadable(Self.wav(channels: 1, rate: 48_000, bits: 8, samples: [1]), "8-bit")
        Self.assertUnreadable(Self.wav(channels: 1, rate: 48_000, bits: 24, samples: [1]), "24-bit")
        Self.assertUnreadable(Self.wav(tag: 3, channels: 1, rate: 48_000, bits: 32, samples: [1]), "float")
        Self.assertUnreadable(Self.wav(tag: 3, channels: 1, rate: 48_000, samples: [1]), "float tag with 16 bits")
        Self.assertUnreadable(Self.wav(tag: 6, channels: 1, rate: 8_000, samples: [1]), "A-law")
        Self.assertUnreadable(Self.wav(channels: 0, rate: 48_000, samples: [1]), "no channels")
        Self.assertUnreadable(Self.wav(channels: 1, rate: 0, samples: [1]), "no sample rate")
    }

    func test_rejects_files_without_the_chunks_it_needs() {
        let header = Array("RIFF".utf8) + Self.le32(4) + Array("WAVE".utf8)
        Self.assertUnreadable(header, "no chunks at all")
        let full = Self.wav(channels: 1, rate: 48_000, samples: [1, 2])
        Self.assertUnreadable(Array(full.prefix(36)), "fmt but no data chunk")
        var dataFirst = header + Array("data".utf8) + Self.le32(2) + [1, 0]
        dataFirst += Array(full[12..<36])
        Self.assertUnreadable(dataFirst, "data before fmt")
        var notWave = full
        notWave.replaceSubrange(8..<12, with: Array("AVI ".utf8))
        Self.assertUnreadable(notWave, "RIFF but not WAVE")
        Self.assertUnreadable(Array("not a wav file at all".utf8), "text")
        Self.assertUnreadable([], "empty")
    }

    func test_rejects_truncated_files() {
        let full = Self.wav(channels: 1, rate: 48_000, samples: [1, 2])
        for length in [0, 4, 11, 20, 30] {
            Self.assertUnreadable(Array(full.prefix(length)), "first \(length) bytes")
        }
        var shortFmt = full
        shortFmt.replaceSubrange(16..<20, with: Self.le32(14))
        Self.assertUnreadable(Array(shortFmt.prefix(34)), "fmt chunk smaller than 16 bytes")
    }

    // MARK: Writer

    func test_writer_output_reads_back_with_the_same_samples_and_header() throws {
        let url = directory.appendingPathComponent("out.wav")
        let writer = try WAVFile.Writer(url: url)
        let first: [Int16] = (0..<960).map { Int16(truncatingIfNeeded: $0 * 37 - 16_000) }
        let second: [Int16] = [.min, -1, 0, 1, .max]
        first.withUnsafeBufferPointer { writer.append($0) }
        second.withUnsafeBufferPointer { writer.append($0) }
        writer.close()

        let bytes = [UInt8](try Data(contentsOf: url))
        let dataBytes = (first.count + second.count) * 2
        XCTAssertEqual(bytes.count, 44 + dataBytes)
        Self.assertHeader(bytes, dataBytes: dataBytes, sampleRate: 48_000)
        let audio = try WAVFile.read(url)
        XCTAssertEqual(audio.sampleRate, 48_000)
        XCTAssertEqual(audio.channels, 1)
        XCTAssertEqual(audio.samples, first + second)
    }

    func test_writer_at_another_rate_says_so_in_its_header() throws {
        let url = directory.appendingPathComponent("16k.wav")
        let writer = try WAVFile.Writer(url: url, sampleRate: 16_000)
        [Int16](repeating: 3, count: 10).withUnsafeBufferPointer { writer.append($0) }
        writer.close()
        let bytes = [UInt8](try Data(contentsOf: url))
        Self.assertHeader(bytes, dataBytes: 20, sampleRate: 16_000)
        XCTAssertEqual(try WAVFile.read(url).sampleRate, 16_000)
    }

    func test_header_is_valid_before_close_once_a_second_was_written() throws {
        let url = directory.appendingPathComponent("live.wav")
        let writer = try WAVFile.Writer(url: url)
        defer { writer.close() }
        let frame: [Int16] = (0..<960).map { Int16($0) - 480 }
        for _ in 0..<51 { frame.withUnsafeBufferPointer { writer.append($0) } }  // 1.02 s

        // As a reader sees the file of a process that died now, without close().
        let bytes = [UInt8](try Data(contentsOf: url))
        XCTAssertEqual(bytes.count, 44 + 51 * 960 * 2, "every sample is on disk")
        let declared = Self.u32(bytes, 40)
        XCTAssertGreaterThanOrEqual(declared, 48_000 * 2, "the header covers at least the first second")
        XCTAssertLessThanOrEqual(declared, 51 * 960 * 2)
        Self.assertHeader(bytes, dataBytes: declared, sampleRate: 48_000)
        let audio = try WAVFile.parse(bytes)
        XCTAssertEqual(audio.samples.count, declared / 2)
        XCTAssertEqual(Array(audio.samples.prefix(960)), frame)
    }

    func test_writer_into_a_missing_directory_throws() {
        let url = directory.appendingPathComponent("missing/out.wav")
        XCTAssertThrowsError(try WAVFile.Writer(url: url))
    }

    // MARK: helpers

    static func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    static func le16(_ value: Int) -> [UInt8] { (0..<2).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    static func u32(_ bytes: [UInt8], _ at: Int) -> Int { (0..<4).reduce(0) { $0 | Int(bytes[at + $1]) << (8 * $1) } }
    static func u16(_ bytes: [UInt8], _ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }

    /// A RIFF/WAVE file built by hand: `fmt ` (plain, or the 40-byte extensible form for tag
    /// 0xFFFE), any `before` chunks, then `data` holding `samples` as 16-bit little endian.
    static func wav(tag: Int = 1, channels: Int, rate: Int, bits: Int = 16, samples: [Int16], before: [UInt8] = []) -> [UInt8] {
        let blockAlign = channels * bits / 8
        var fmt = le16(tag) + le16(channels) + le32(rate) + le32(rate * blockAlign) + le16(blockAlign) + le16(bits)
        if tag == 0xFFFE {
            // cbSize 22, valid bits, channel mask, KSDATAFORMAT_SUBTYPE_PCM.
            fmt += le16(22) + le16(bits) + le32(channels == 2 ? 3 : 4)
            fmt += [0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]
        }
        let data = samples.flatMap { le16(Int($0)) }
        let chunks = Array("fmt ".utf8) + le32(fmt.count) + fmt + before + Array("data".utf8) + le32(data.count) + data
        return Array("RIFF".utf8) + le32(4 + chunks.count) + Array("WAVE".utf8) + chunks
    }

    static func assertUnreadable(_ bytes: [UInt8], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try WAVFile.parse(bytes), what, file: file, line: line)
    }

    /// The canonical 44-byte header of 16-bit mono PCM holding `dataBytes`.
    static func assertHeader(_ bytes: [UInt8], dataBytes: Int, sampleRate: Int, file: StaticString = #filePath, line: UInt = #line) {
        guard bytes.count >= 44 else { return XCTFail("only \(bytes.count) bytes", file: file, line: line) }
        XCTAssertEqual(String(decoding: bytes[0..<4], as: UTF8.self), "RIFF", file: file, line: line)
        XCTAssertEqual(u32(bytes, 4), 36 + dataBytes, "RIFF size", file: file, line: line)
        XCTAssertEqual(String(decoding: bytes[8..<16], as: UTF8.self), "WAVEfmt ", file: file, line: line)
        XCTAssertEqual(u32(bytes, 16), 16, "fmt size", file: file, line: line)
        XCTAssertEqual(u16(bytes, 20), 1, "PCM", file: file, line: line)
        XCTAssertEqual(u16(bytes, 22), 1, "mono", file: file, line: line)
        XCTAssertEqual(u32(bytes, 24), sampleRate, "sample rate", file: file, line: line)
        XCTAssertEqual(u32(bytes, 28), sampleRate * 2, "byte rate", file: file, line: line)
        XCTAssertEqual(u16(bytes, 32), 2, "block align", file: file, line: line)
        XCTAssertEqual(u16(bytes, 34), 16, "bits per sample", file: file, line: line)
        XCTAssertEqual(String(decoding: bytes[36..<40], as: UTF8.self), "data", file: file, line: line)
        XCTAssertEqual(u32(bytes, 40), dataBytes, "data size", file: file, line: line)
    }
}
