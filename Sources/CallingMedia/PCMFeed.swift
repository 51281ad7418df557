import CGStreamer
import Foundation

/// The audio of the `appsrc` inputs (WAV file, app-pushed PCM, echo), cut into 20 ms frames.
/// Not thread-safe: the engine holds it under its lock.
struct PCMFeed {
    static let frameMilliseconds = 20
    /// 10 s of 48 kHz mono: an app pushing faster than real time loses its oldest audio.
    static let pushedCapacity = 480_000

    private let input: AudioInput
    private let wav: WAVFile.Audio?
    private var pushed: [Int16] = []

    init(input: AudioInput) throws {
        self.input = input
        if case .wav(let url) = input { wav = try WAVFile.read(url) } else { wav = nil }
    }

    var needsPacing: Bool {
        switch input {
        case .wav, .pcm, .echo: return true
        case .tone, .silence: return false
        }
    }

    /// Rate and channel count of the raw audio the `appsrc` of the input produces.
    var format: (rate: Int, channels: Int) {
        guard let wav else { return (48_000, 1) }
        return (wav.sampleRate, wav.channels)
    }

    mutating func push(_ samples: [Int16]) {
        pushed.append(contentsOf: samples)
        if pushed.count > Self.pushedCapacity { pushed.removeFirst(pushed.count - Self.pushedCapacity) }
    }

    /// For `.pcm`: the next frame every peer gets (so two peers hear the same thing at once).
    mutating func nextSharedFrame() -> [Int16]? {
        guard case .pcm = input else { return nil }
        let count = 48_000 * Self.frameMilliseconds / 1000
        let frame = Array(pushed.prefix(count))
        pushed.removeFirst(frame.count)
        return frame + [Int16](repeating: 0, count: count - frame.count)
    }

    /// The next frame for one peer connection: its place in the WAV file, its own echo, or the
    /// shared pushed frame. Silence fills whatever is missing, so the stream never stalls.
    func frame(for connection: PeerConnection, shared: [Int16]?) -> [Int16] {
        switch input {
        case .wav:
            guard let wav else { return [] }
            let count = wav.sampleRate * wav.channels * Self.frameMilliseconds / 1000
            let start = min(connection.wavPosition, wav.samples.count)
            let end = min(start + count, wav.samples.count)
            connection.wavPosition = end
            return Array(wav.samples[start..<end]) + [Int16](repeating: 0, count: count - (end - start))
        case .echo:
            let count = 48_000 * Self.frameMilliseconds / 1000
            let taken = connection.takeEcho(count)
            return taken + [Int16](repeating: 0, count: count - taken.count)
        default:
            return shared ?? []
        }
    }

    /// Hands one frame to an `appsrc` (which timestamps it on arrival: `do-timestamp=true`).
    static func push(_ frame: [Int16], to source: UnsafeMutablePointer<GstElement>) {
        guard !frame.isEmpty else { return }
        let size = frame.count * 2
        guard let buffer = gst_buffer_new_allocate(nil, gsize(size), nil) else { return }
        frame.withUnsafeBytes { _ = gst_buffer_fill(buffer, 0, $0.baseAddress, gsize(size)) }
        _ = gst_app_src_push_buffer(GStreamer.cast(UnsafeMutableRawPointer(source)), buffer)
    }
}
