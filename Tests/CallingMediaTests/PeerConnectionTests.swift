import CGStreamer
import CallingAuth
import CallingClient
@testable import CallingMedia
import Dispatch
import Foundation
import XCTest

/// A peer connection's life at the C boundary: whatever is still in flight when it is torn down
/// (a stats poll, a data-channel send, the PCM pacer) must find its GStreamer objects alive and
/// every promise answered. Real GStreamer, no network.
final class PeerConnectionTests: XCTestCase {
    private func makeConnection(_ peer: PeerID = "b", input: AudioInput = .silence) throws -> PeerConnection {
        let certificate = try DTLSCertificate.generate()
        var options = MediaOptions()
        options.input = input
        let settings = PeerConnection.Settings(
            options: options, certificate: DTLSCertificateValue(pem: certificate.pem, fingerprint: certificate.sha256Fingerprint),
            recording: nil, pcmFormat: (48_000, 1))
        try GStreamer.initialize()
        return try PeerConnection(peer: peer, settings: settings, onCandidate: { _ in }, onStateChange: { _ in }, onEvent: { _ in })
    }

    private static func tearDownOffThread(_ connection: PeerConnection) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                connection.tearDown()
                done.resume()
            }
        }
    }

    /// Whoever still holds a connection (a stats poll, a send, the pacer) uses its `webrtc`,
    /// `pipeline` and `appsrc` pointers: teardown stops them, and they are freed only with the
    /// last reference to the connection, then without fail: an agent answering call after call
    /// must not keep every pipeline (its ICE sockets, its elements) it ever made.
    func test_teardown_stops_the_pipeline_and_the_last_reference_frees_it() async throws {
        let location = UnsafeMutablePointer<gpointer?>.allocate(capacity: 1)
        var connection: PeerConnection? = try makeConnection()
        _ = try await within(5, "createOffer") { [connection] in try await connection!.createOffer() }
        location.pointee = UnsafeMutableRawPointer(connection!.webrtc)
        g_object_add_weak_pointer(GStreamer.cast(UnsafeMutableRawPointer(connection!.webrtc)), location)

        await Self.tearDownOffThread(connection!)
        XCTAssertNotNil(location.pointee, "webrtcbin freed while its connection is still referenced")

        connection = nil
        let deadline = Date().addingTimeInterval(5)
        while location.pointee != nil, Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        XCTAssertNil(location.pointee, "the pipeline outlives its last reference")
        if location.pointee == nil { location.deallocate() }
    }

    /// The engine's stats poll takes its connections, then awaits each: a call that ends in
    /// between is torn down under it. That poll must still get an answer, not touch freed memory.
    func test_stats_of_a_torn_down_connection_answer_empty() async throws {
        let connection = try makeConnection()
        _ = try await within(5, "createOffer") { try await connection.createOffer() }
        await Self.tearDownOffThread(connection)

        let stats = try await within(5, "stats after teardown") { await connection.stats() }
        XCTAssertEqual(stats.packetsSent, 0)
        XCTAssertEqual(stats.packetsReceived, 0)
        XCTAssertThrowsError(try connection.send("hi", on: "chat")) { error in
            XCTAssertEqual(error as? MediaError, .noDataChannel("chat"))
        }
    }

    /// webrtcbin drops the promises still queued on its thread when it stops (it unrefs them
    /// unanswered): a stats poll racing a hangup must resume anyway, or the poller hangs for good.
    func test_stats_polls_racing_a_teardown_all_resume() async throws {
        for round in 0..<5 {
            let connection = try makeConnection()
            _ = try await within(5, "createOffer") { try await connection.createOffer() }
            let polls = (0..<20).map { _ in Task { await connection.stats() } }
            await Self.tearDownOffThread(connection)
            for poll in polls {
                _ = try await within(5, "stats poll \(round) racing a teardown") { await poll.value }
            }
        }
    }

    /// The pacer feeds an appsrc input (WAV, PCM, echo) through `playingPCMSource`, and the
    /// appsrc stamps each frame as it is pushed. A frame pushed while the pipeline was starting
    /// was stamped with the clock's absolute time (the machine's uptime) instead of the
    /// stream's running time; webrtcbin syncs what it sends to the clock, so it held that frame
    /// and everything behind it: the call connected, audio came in, and not one RTP packet went
    /// out (once in about a hundred calls, when a 20 ms tick fell into that moment). Here a
    /// feeder pushes as fast as it can while the offer starts the pipeline, so it cannot miss
    /// that moment, and every frame it fed must carry a time the stream has already reached.
    func test_frames_fed_while_the_pipeline_starts_are_stamped_with_the_streams_running_time() async throws {
        for round in 0..<5 {
            let connection = try makeConnection("a", input: .echo)
            let feeder = Feeder(connection)
            feeder.start()
            _ = try await within(5, "createOffer") { try await connection.createOffer() }
            let pushed = feeder.stop()
            XCTAssertGreaterThan(pushed, 0, "round \(round): the pacer never got the appsrc of a playing pipeline")
            // The probe drops every frame, so the appsrc drains at once; wait until it has.
            var stamps = feeder.stamps
            let deadline = Date().addingTimeInterval(5)
            repeat {
                try await Task.sleep(nanoseconds: 50_000_000)
                let previous = stamps.count
                stamps = feeder.stamps
                if stamps.count == previous { break }
            } while Date() < deadline
            let clock = try XCTUnwrap(gst_element_get_clock(connection.pipeline))
            let runningTime = gst_clock_get_time(clock) - gst_element_get_base_time(connection.pipeline)
            gst_object_unref(UnsafeMutableRawPointer(clock))
            XCTAssertFalse(stamps.isEmpty, "round \(round): no frame left the appsrc")
            let ahead = stamps.filter { $0 == GstClockTime.max || $0 > runningTime }
            XCTAssertEqual(ahead.count, 0, "round \(round): \(ahead.count) of \(stamps.count) frames stamped ahead of the "
                + "running time \(runningTime) ns, e.g. \(ahead.first ?? 0) ns: webrtcbin would hold them until then")
            await Self.tearDownOffThread(connection)
        }
    }

    /// An offer whose promise webrtcbin drops fails; it does not hang and does not succeed.
    func test_a_negotiation_step_on_a_closed_connection_throws() async throws {
        let connection = try makeConnection()
        _ = try await within(5, "createOffer") { try await connection.createOffer() }
        await Self.tearDownOffThread(connection)
        do {
            _ = try await within(5, "createAnswer after teardown") { try await connection.createAnswer() }
            XCTFail("an answer from a closed connection")
        } catch let error as MediaError {
            guard case .negotiation = error else { return XCTFail("\(error)") }
        }
    }
}

/// The bridge from GstPromise to Swift continuations.
final class GStreamerPromiseTests: XCTestCase {
    override func setUp() {
        super.setUp()
        XCTAssertNoThrow(try GStreamer.initialize())
    }

    private static func name(_ outcome: GStreamer.PromiseReply) -> String {
        switch outcome {
        case .replied(let reply): return reply == nil ? "replied" : "replied with a structure"
        case .dropped: return "dropped"
        }
    }

    /// webrtcbin unrefs the promises still queued on its thread when it stops: a continuation
    /// waiting on one must still be resumed (once), or its task hangs for good.
    func test_a_promise_released_unanswered_reports_dropped_once() {
        let outcomes = Collected<String>()
        let promise = GStreamer.promise { outcomes.append(Self.name($0)) }
        gst_promise_unref(promise)
        XCTAssertEqual(outcomes.all, ["dropped"])
    }

    func test_an_interrupted_promise_reports_dropped_not_a_bare_success() {
        let outcomes = Collected<String>()
        let promise = GStreamer.promise { outcomes.append(Self.name($0)) }
        gst_promise_interrupt(promise)
        gst_promise_unref(promise)
        XCTAssertEqual(outcomes.all, ["dropped"])
    }

    /// set-local-description succeeds with a NULL reply: that is a reply, not a drop.
    func test_a_bare_reply_is_reported_once() {
        let outcomes = Collected<String>()
        let promise = GStreamer.promise { outcomes.append(Self.name($0)) }
        gst_promise_reply(promise, nil)
        gst_promise_unref(promise)
        XCTAssertEqual(outcomes.all, ["replied"])
    }
}

/// Pushes 20 ms of silence into a connection's appsrc in a tight loop on its own thread, the
/// pacer's way (`playingPCMSource`, `PCMFeed.push`), until stopped; every frame that leaves the
/// appsrc has its timestamp recorded and is dropped there.
private final class Feeder: @unchecked Sendable {
    // @unchecked: `lock` guards `stopped`, `count` and `seen`; `connection` is immutable.
    private let connection: PeerConnection
    private let lock = NSLock()
    private var stopped = false
    private var count = 0
    private var seen: [GstClockTime] = []
    private let done = DispatchSemaphore(value: 0)

    init(_ connection: PeerConnection) { self.connection = connection }

    /// Timestamps of the frames that left the appsrc, in order.
    var stamps: [GstClockTime] { lock.withLock { seen } }

    /// Feeds until stopped, or until 200 frames went in after the appsrc reached PLAYING.
    func start() {
        let frame = [Int16](repeating: 0, count: 960)
        Thread.detachNewThread { [self] in
            var watched = false
            var whilePlaying = 0
            while !lock.withLock({ stopped }), whilePlaying < 200 {
                guard let source = connection.playingPCMSource else { continue }
                if !watched {
                    watch(source)
                    watched = true
                }
                PCMFeed.push(frame, to: source)
                lock.withLock { count += 1 }
                if cs_element_is_playing(source) != 0 { whilePlaying += 1 }
            }
            done.signal()
        }
    }

    /// Stops feeding; returns how many frames were pushed.
    func stop() -> Int {
        lock.withLock { stopped = true }
        done.wait()
        return lock.withLock { count }
    }

    private func record(_ stamp: GstClockTime) { lock.withLock { seen.append(stamp) } }

    /// A probe on the appsrc's output, before the frames reach anything that waits for the clock.
    private func watch(_ source: UnsafeMutablePointer<GstElement>) {
        guard let pad = gst_element_get_static_pad(source, "src") else { return }
        // Retained by the probe and released with it (the pad lives as long as the connection).
        let box = Unmanaged.passRetained(self).toOpaque()
        gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, { _, info, data in
            guard let info, let data, let buffer = info.pointee.data else { return GST_PAD_PROBE_OK }
            let feeder = Unmanaged<Feeder>.fromOpaque(data).takeUnretainedValue()
            feeder.record(cs_buffer_pts(buffer.assumingMemoryBound(to: GstBuffer.self)))
            return GST_PAD_PROBE_DROP
        }, box, { data in Unmanaged<Feeder>.fromOpaque(data!).release() })
        gst_object_unref(UnsafeMutableRawPointer(pad))
    }
}
