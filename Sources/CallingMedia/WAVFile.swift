import Foundation

/// 16-bit PCM RIFF/WAVE, the one format the engine reads and writes.
enum WAVFile {
    struct Audio {
        var sampleRate: Int
        var channels: Int
        /// Interleaved little-endian 16-bit samples.
        var samples: [Int16]
    }

    enum Failure: Error, CustomStringConvertible {
        case unreadable(String)
        var description: String {
            switch self {
            case .unreadable(let why): return "not a 16-bit PCM WAV file: \(why)"
            }
        }
    }

    static func read(_ url: URL) throws -> Audio {
        let bytes = [UInt8](try Data(contentsOf: url))
        return try parse(bytes)
    }

    static func parse(_ bytes: [UInt8]) throws(Failure) -> Audio {
        func u32(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 24 }
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        guard bytes.count >= 12, bytes[0..<4].elementsEqual("RIFF".utf8), bytes[8..<12].elementsEqual("WAVE".utf8) else {
            throw .unreadable("no RIFF/WAVE header")
        }
        var offset = 12
        var format: (rate: Int, channels: Int)?
        while offset + 8 <= bytes.count {
            let id = bytes[offset..<offset + 4]
            let size = u32(offset + 4)
            let body = offset + 8
            guard body + size <= bytes.count || id.elementsEqual("data".utf8) else { throw .unreadable("truncated chunk") }
            if id.elementsEqual("fmt ".utf8) {
                guard size >= 16 else { throw .unreadable("short fmt chunk") }
                let tag = u16(body)
                // 1 = PCM; 0xFFFE = WAVE_FORMAT_EXTENSIBLE, which sox and ffmpeg write for PCM too.
                guard tag == 1 || tag == 0xFFFE else { throw .unreadable("format tag \(tag) is not PCM") }
                guard u16(body + 14) == 16 else { throw .unreadable("\(u16(body + 14)) bits per sample; 16 needed") }
                let channels = u16(body + 2)
                let rate = u32(body + 4)
                guard (1...8).contains(channels), (8000...192_000).contains(rate) else { throw .unreadable("\(channels) channels at \(rate) Hz") }
                format = (rate, channels)
            } else if id.elementsEqual("data".utf8) {
                guard let format else { throw .unreadable("data before fmt") }
                let end = min(bytes.count, body + size)
                var samples = [Int16]()
                samples.reserveCapacity((end - body) / 2)
                var at = body
                while at + 1 < end {
                    samples.append(Int16(bitPattern: UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8))
                    at += 2
                }
                return Audio(sampleRate: format.rate, channels: format.channels, samples: samples)
            }
            offset = body + size + (size & 1)
        }
        throw .unreadable("no data chunk")
    }

    /// Writes 48 kHz mono as it arrives and fixes the sizes in the header on `close()`, so a
    /// recording cut short by a crash still has every sample (readers take a zero size as
    /// "until the end" only sometimes; the header is rewritten every second too).
    final class Writer: @unchecked Sendable {
        // @unchecked: `lock` guards every field. An NSLock, not a `Locked`: it is held across the
        // file writes, which must stay in order (a header rewrite seeks back to the start, writes,
        // and seeks to the end between two appends), and a `Locked` body must not block on I/O
        // (docs/architecture.md, "Locks").
        private let lock = NSLock()
        private let handle: FileHandle
        private var dataBytes = 0
        private var lastHeaderUpdate = 0
        private let sampleRate: Int

        init(url: URL, sampleRate: Int = 48_000) throws {
            self.sampleRate = sampleRate
            guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
                throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: url.path])
            }
            handle = try FileHandle(forWritingTo: url)
            try handle.write(contentsOf: Self.header(sampleRate: sampleRate, dataBytes: 0))
        }

        func append(_ samples: UnsafeBufferPointer<Int16>) {
            lock.withLock {
                let raw = UnsafeRawBufferPointer(samples)
                try? handle.write(contentsOf: Data(raw))
                dataBytes += raw.count
                if dataBytes - lastHeaderUpdate >= sampleRate * 2 { rewriteHeader() }
            }
        }

        func close() {
            lock.withLock {
                rewriteHeader()
                try? handle.close()
            }
        }

        private func rewriteHeader() {
            lastHeaderUpdate = dataBytes
            guard let end = try? handle.offset() else { return }
            try? handle.seek(toOffset: 0)
            try? handle.write(contentsOf: Self.header(sampleRate: sampleRate, dataBytes: dataBytes))
            try? handle.seek(toOffset: end)
        }

        static func header(sampleRate: Int, dataBytes: Int) -> Data {
            var out = [UInt8]()
            func text(_ s: String) { out += Array(s.utf8) }
            func u32(_ v: Int) { out += [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24 & 0xFF)] }
            func u16(_ v: Int) { out += [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF)] }
            text("RIFF"); u32(36 + dataBytes); text("WAVE")
            text("fmt "); u32(16); u16(1); u16(1); u32(sampleRate); u32(sampleRate * 2); u16(2); u16(16)
            text("data"); u32(dataBytes)
            return Data(out)
        }
    }
}
