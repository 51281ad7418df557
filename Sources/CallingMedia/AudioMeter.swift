import Foundation

/// Measures received audio without keeping it: frames, RMS level and the dominant frequency of a
/// tone (from zero crossings, which for the sine a test sends is exact to a few Hz after Opus).
public struct AudioLevels: Sendable, Equatable {
    /// 20 ms frames received (48 kHz mono).
    public var frames: Int = 0
    /// Samples received (48 kHz mono).
    public var samples: Int = 0
    /// RMS over everything received, in dBFS (−∞ for silence is reported as −120).
    public var rmsDBFS: Double = -120
    /// Estimated frequency (Hz) over the non-silent audio, or 0.
    public var dominantHz: Double = 0
}

struct AudioMeter {
    static let sampleRate = 48_000.0
    /// Samples quieter than this (about −50 dBFS) do not count towards the frequency estimate:
    /// Opus comfort noise and the first silent frames would otherwise add crossings.
    private static let voicedThreshold = 100.0

    private var sumOfSquares = 0.0
    private var sampleCount = 0
    private var voicedSamples = 0
    private var crossings = 0
    private var previous: Int16 = 0
    private var frames = 0

    mutating func add(_ samples: UnsafeBufferPointer<Int16>) {
        frames += 1
        var frameSquares = 0.0
        for sample in samples { frameSquares += Double(sample) * Double(sample) }
        sumOfSquares += frameSquares
        sampleCount += samples.count
        guard !samples.isEmpty, (frameSquares / Double(samples.count)).squareRoot() >= Self.voicedThreshold else {
            previous = samples.last ?? 0
            return
        }
        voicedSamples += samples.count
        var last = previous
        for sample in samples {
            if (last < 0) != (sample < 0) { crossings += 1 }
            last = sample
        }
        previous = last
    }

    var levels: AudioLevels {
        var levels = AudioLevels(frames: frames, samples: sampleCount)
        if sampleCount > 0, sumOfSquares > 0 {
            levels.rmsDBFS = max(-120, 20 * log10((sumOfSquares / Double(sampleCount)).squareRoot() / 32768))
        }
        if voicedSamples > 0 {
            // A sine crosses zero twice per period.
            levels.dominantHz = Double(crossings) / 2 / (Double(voicedSamples) / Self.sampleRate)
        }
        return levels
    }
}
