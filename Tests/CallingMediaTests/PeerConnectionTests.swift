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
    private func makeConnection(_ peer: PeerID = "b") throws -> PeerConnection {
        let certificate = try DTLSCertificate.generate()
        var options = MediaOptions()
        options.input = .silence
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
