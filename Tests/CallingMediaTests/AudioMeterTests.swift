@testable import CallingMedia
import Foundation
import XCTest

/// What a peer's received-audio meter reports: tests and operators rely on it to say "the far end
/// heard a 440 Hz tone at about −13 dBFS", without keeping the audio.
final class AudioMeterTests: XCTestCase {
    /// 20 ms at 48 kHz, the frame size the receive branch delivers.
    static let frame = 960

    func test_a_440_hz_sine_is_measured_within_one_percent() {
        var meter = AudioMeter()
        Self.feed(&meter, Self.sine(hz: 440, amplitude: 0.316, frames: 50))
        XCTAssertEqual(meter.levels.dominantHz, 440, accuracy: 4.4)
    }

    func test_other_tones_are_measured_too() {
        for hz in [300.0, 1000.0, 2500.0] {
            var meter = AudioMeter()
            Self.feed(&meter, Self.sine(hz: hz, amplitude: 0.5, frames: 50))
            XCTAssertEqual(meter.levels.dominantHz, hz, accuracy: hz / 100, "\(hz) Hz")
        }
    }

    func test_rms_of_a_sine_at_0_316_of_full_scale_is_about_minus_13_dbfs() {
        var meter = AudioMeter()
        Self.feed(&meter, Self.sine(hz: 440, amplitude: 0.316, frames: 50))
        // 20·log10(0.316/√2) = −13.02
        XCTAssertEqual(meter.levels.rmsDBFS, -13, accuracy: 0.5)
    }

    func test_silence_is_minus_120_dbfs_and_no_frequency() {
        var meter = AudioMeter()
        Self.feed(&meter, [Int16](repeating: 0, count: 10 * Self.frame))
        let levels = meter.levels
        XCTAssertEqual(levels.rmsDBFS, -120)
        XCTAssertEqual(levels.dominantHz, 0)
        XCTAssertEqual(levels.frames, 10)
        XCTAssertEqual(levels.samples, 10 * Self.frame)
    }

    func test_nothing_received_reports_nothing() {
        XCTAssertEqual(AudioMeter().levels, AudioLevels(frames: 0, samples: 0, rmsDBFS: -120, dominantHz: 0))
    }

    func test_frames_and_samples_are_counted() {
        var meter = AudioMeter()
        Self.feed(&meter, Self.sine(hz: 440, amplitude: 0.316, frames: 7))
        [Int16](repeating: 0, count: 480).withUnsafeBufferPointer { meter.add($0) }
        XCTAssertEqual(meter.levels.frames, 8)
        XCTAssertEqual(meter.levels.samples, 7 * Self.frame + 480)
    }

    /// Comfort noise and the silent start of a call must not pull the frequency down, though they
    /// do count towards the level.
    func test_quiet_frames_do_not_skew_the_frequency() {
        var meter = AudioMeter()
        Self.feed(&meter, [Int16](repeating: 0, count: 25 * Self.frame))
        // Low-level noise (about −60 dBFS), crossing zero at every sample.
        Self.feed(&meter, (0..<(10 * Self.frame)).map { $0 % 2 == 0 ? 30 : -30 })
        Self.feed(&meter, Self.sine(hz: 440, amplitude: 0.316, frames: 50))
        let levels = meter.levels
        XCTAssertEqual(levels.dominantHz, 440, accuracy: 4.4)
        XCTAssertEqual(levels.frames, 85)
        // 50 of 85 frames carry the sine: 10·log10(50/85) lower than the sine alone.
        XCTAssertEqual(levels.rmsDBFS, -13.02 + 10 * log10(50.0 / 85.0), accuracy: 0.5)
    }

    // MARK: helpers

    /// A continuous sine (phase carried across frames) at 48 kHz, `frames` × 20 ms long.
    static func sine(hz: Double, amplitude: Double, frames: Int) -> [Int16] {
        (0..<(frames * frame)).map { index in
            Int16((amplitude * 32767 * sin(2 * Double.pi * hz * Double(index) / 48_000)).rounded())
        }
    }

    /// Hands `samples` to the meter in 960-sample frames, as the appsink does.
    static func feed(_ meter: inout AudioMeter, _ samples: [Int16]) {
        samples.withUnsafeBufferPointer { all in
            var start = 0
            while start < all.count {
                let end = min(start + frame, all.count)
                meter.add(UnsafeBufferPointer(rebasing: all[start..<end]))
                start = end
            }
        }
    }
}
