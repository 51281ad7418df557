import CallingClient
@testable import CallingMedia
import Dispatch
import Foundation
import Glibc
import XCTest

/// Negotiation on real GStreamer between two engines in this process. Nothing here needs ICE to
/// connect (no network): offers and answers are complete once webrtcbin has created them.
final class GStreamerMediaEngineTests: XCTestCase {
    private var engines: [(GStreamerMediaEngine, [PeerID])] = []

    override func tearDown() {
        for (engine, peers) in engines {
            for peer in peers { engine.close(peer: peer) }
        }
        engines = []
        super.tearDown()
    }

    /// An engine whose `peers` are closed after the test, whatever it asserted.
    private func engine(closing peers: [PeerID], gatherTimeout: TimeInterval = 0.5, stun: String? = nil) throws -> GStreamerMediaEngine {
        var options = MediaOptions()
        options.sessionGatherTimeout = gatherTimeout
        if let stun { options.iceServers = [IceServer(urls: [stun])] }
        let engine = try GStreamerMediaEngine(options: options)
        engines.append((engine, peers))
        return engine
    }

    func test_offer_carries_opus_111_data_channels_and_the_engines_own_fingerprint() async throws {
        let a = try engine(closing: ["b"])
        try await a.createPeerConnection(for: "b", onCandidate: { _ in }, onStateChange: { _ in })
        let offer = try await within(5, "createOffer") { try await a.createOffer(for: "b") }

        XCTAssertEqual(offer.kind, .offer)
        let sections = MediaSDPTests.sections(offer.sdp)
        let audio = try XCTUnwrap(sections.first { $0.first?.hasPrefix("m=audio ") == true }, offer.sdp)
        XCTAssertTrue(audio.contains { $0.lowercased() == "a=rtpmap:111 opus/48000/2" }, offer.sdp)
        XCTAssertEqual(MediaSDP.opusPayloadType(offer.sdp), 111)
        XCTAssertTrue(sections.contains { $0.first?.hasPrefix("m=application ") == true }, "data channels: \(offer.sdp)")
        Self.assertFingerprints(offer.sdp, are: a.certificateFingerprint)
        MediaSDPTests.assertCRLF(offer.sdp)
    }

    func test_call_media_chooses_what_the_offer_sends() async throws {
        let a = try engine(closing: ["listener", "data"])
        a.useMedia(.receiveOnly, for: "listener")
        try await a.createPeerConnection(for: "listener", onCandidate: { _ in }, onStateChange: { _ in })
        let listening = try await within(5, "createOffer") { try await a.createOffer(for: "listener") }
        let audio = try XCTUnwrap(MediaSDPTests.sections(listening.sdp).first { $0.first?.hasPrefix("m=audio ") == true },
                                  listening.sdp)
        XCTAssertTrue(audio.contains("a=recvonly"), listening.sdp)
        XCTAssertTrue(audio.contains { $0.lowercased() == "a=rtpmap:111 opus/48000/2" }, listening.sdp)

        a.useMedia(.dataOnly, for: "data")
        try await a.createPeerConnection(for: "data", onCandidate: { _ in }, onStateChange: { _ in })
        let data = try await within(5, "createOffer") { try await a.createOffer(for: "data") }
        let sections = MediaSDPTests.sections(data.sdp)
        XCTAssertFalse(sections.contains { $0.first?.hasPrefix("m=audio ") == true }, data.sdp)
        XCTAssertTrue(sections.contains { $0.first?.hasPrefix("m=application ") == true }, data.sdp)
    }

    func test_answer_reuses_the_offers_opus_payload_type_111() async throws {
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"]))
        let offer = try await offer(from: a, to: "b")
        let answer = try await answer(from: b, to: "a", offer: offer)
        XCTAssertEqual(Self.audioFormats(answer.sdp), ["111"], answer.sdp)
        XCTAssertTrue(MediaSDPTests.lines(answer.sdp).contains { $0.lowercased() == "a=rtpmap:111 opus/48000/2" }, answer.sdp)
        XCTAssertEqual(MediaSDP.opusPayloadType(answer.sdp), 111)
        XCTAssertNotEqual(a.certificateFingerprint, b.certificateFingerprint)
        Self.assertFingerprints(answer.sdp, are: b.certificateFingerprint)
        XCTAssertTrue(MediaSDPTests.sections(answer.sdp).contains { $0.first?.hasPrefix("m=application ") == true },
                      "the data channels are accepted: \(answer.sdp)")

        // The offerer takes the answer: its own negotiation completes.
        try await within(5, "setRemoteDescription(answer)") { try await a.setRemoteDescription(answer, for: "b") }
    }

    /// webrtcbin 1.22 (the one this machine builds against) accepts the `ice-restart` option but
    /// does not act on it: the offer keeps its ICE credentials. What holds is the renegotiation
    /// on the live connections, which the SDK's restart rides on.
    func test_an_ice_restart_offer_is_made_on_the_live_connection_and_answered_on_the_same_one() async throws {
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"]))
        let offer = try await offer(from: a, to: "b")
        let answer = try await answer(from: b, to: "a", offer: offer)
        try await within(5, "setRemoteDescription(answer)") { try await a.setRemoteDescription(answer, for: "b") }

        let restart = try await within(5, "createIceRestartOffer") { try await a.createIceRestartOffer(for: "b", iceServers: []) }
        XCTAssertEqual(restart.kind, .offer)
        XCTAssertEqual(MediaSDP.opusPayloadType(restart.sdp), 111, restart.sdp)
        // What docs/media.md says of a Linux peer's "restart": same ICE credentials, so no ICE
        // restart in the sense of RFC 8445 §9. A GStreamer that honours the option fails this
        // line; the docs must then change with it.
        XCTAssertEqual(Self.iceCredentials(restart.sdp), Self.iceCredentials(offer.sdp), restart.sdp)
        XCTAssertFalse(Self.iceCredentials(offer.sdp).isEmpty, offer.sdp)
        Self.assertFingerprints(restart.sdp, are: a.certificateFingerprint)
        try await within(5, "renewed offer") { try await b.setRemoteDescription(restart, for: "a") }
        let renewed = try await within(5, "renewed answer") { try await b.createAnswer(for: "a") }
        XCTAssertEqual(renewed.kind, .answer)
        try await within(5, "apply renewed answer") { try await a.setRemoteDescription(renewed, for: "b") }
    }

    /// The `a=ice-ufrag` and `a=ice-pwd` lines of `sdp`, in order.
    static func iceCredentials(_ sdp: String) -> [String] {
        MediaSDPTests.lines(sdp).filter { $0.hasPrefix("a=ice-ufrag:") || $0.hasPrefix("a=ice-pwd:") }
    }

    /// aiortc offers Opus as 96; an answer with 111 would leave its audio undecoded.
    func test_answer_reuses_an_opus_payload_type_of_96() async throws {
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"]))
        var offer = try await offer(from: a, to: "b")
        offer.sdp = Self.renumberingOpus(offer.sdp, from: 111, to: 96)
        XCTAssertEqual(MediaSDP.opusPayloadType(offer.sdp), 96, "fixture: the offer now says 96")

        let answer = try await answer(from: b, to: "a", offer: offer)
        XCTAssertEqual(Self.audioFormats(answer.sdp), ["96"], answer.sdp)
        XCTAssertTrue(MediaSDPTests.lines(answer.sdp).contains { $0.lowercased() == "a=rtpmap:96 opus/48000/2" }, answer.sdp)
        XCTAssertEqual(MediaSDP.opusPayloadType(answer.sdp), 96)
        XCTAssertFalse(answer.sdp.contains("a=rtpmap:111"), answer.sdp)
        Self.assertFingerprints(answer.sdp, are: b.certificateFingerprint)
    }

    /// An HTTP session's caller cannot receive trickled candidates, so the answer waits for
    /// gathering, but never longer than `sessionGatherTimeout`. A STUN server that never replies
    /// (a bound local socket: nothing leaves the machine) keeps gathering going for seconds.
    func test_an_answer_to_a_session_offer_waits_at_most_the_gather_timeout() async throws {
        let stun = try SilentUDPServer()
        defer { stun.close() }
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"], gatherTimeout: 0.5, stun: "stun:127.0.0.1:\(stun.port)"))
        let offer = try await offer(from: a, to: "b", sessionID: "s-1")
        try await b.createPeerConnection(for: "a", onCandidate: { _ in }, onStateChange: { _ in })
        try await within(5, "setRemoteDescription(offer)") { try await b.setRemoteDescription(offer, for: "a") }

        let started = DispatchTime.now()
        let answer = try await within(5, "createAnswer") { try await b.createAnswer(for: "a") }
        let seconds = Self.seconds(since: started)
        XCTAssertLessThan(seconds, b.options.sessionGatherTimeout + 1)
        XCTAssertEqual(answer.kind, .answer)
        Self.assertFingerprints(answer.sdp, are: b.certificateFingerprint)
        MediaSDPTests.assertCRLF(answer.sdp)
        if !answer.sdp.contains("a=end-of-candidates") {
            // Cut off by the timeout: it did wait for the candidates it could.
            XCTAssertGreaterThan(seconds, b.options.sessionGatherTimeout * 0.9)
        }
    }

    /// When gathering completes in time, the answer has every candidate and says it is complete.
    func test_an_answer_to_a_session_offer_carries_every_gathered_candidate() async throws {
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"], gatherTimeout: 3))
        let offer = try await offer(from: a, to: "b", sessionID: "s-2")
        let gathered = Collected<IceCandidate>()
        try await b.createPeerConnection(for: "a", onCandidate: { gathered.append($0) }, onStateChange: { _ in })
        try await within(5, "setRemoteDescription(offer)") { try await b.setRemoteDescription(offer, for: "a") }

        let started = DispatchTime.now()
        let answer = try await within(5, "createAnswer") { try await b.createAnswer(for: "a") }
        // No STUN or TURN server: host candidates are gathered in milliseconds, far inside 3 s.
        XCTAssertLessThan(Self.seconds(since: started), b.options.sessionGatherTimeout * 0.9, "gathering did not complete")
        let sections = MediaSDPTests.sections(answer.sdp)
        for section in sections.dropFirst() {
            XCTAssertEqual(section.filter { $0 == "a=end-of-candidates" }.count, 1, answer.sdp)
        }
        let candidates = gathered.all
        XCTAssertEqual(MediaSDP.candidateCount(answer.sdp), candidates.count, answer.sdp)
        for candidate in candidates {
            let index = try XCTUnwrap(candidate.sdpMLineIndex)
            XCTAssertEqual(candidate.sdpMid, SDPMids.of(answer.sdp)[index], "the mid of its m-line")
            XCTAssertTrue(sections[index + 1].contains("a=" + candidate.candidate), "\(candidate.candidate) in m-line \(index)")
        }
    }

    /// A WebSocket peer receives trickled candidates: its answer does not wait for any.
    func test_an_answer_to_an_ordinary_offer_does_not_wait_for_gathering() async throws {
        let stun = try SilentUDPServer()
        defer { stun.close() }
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"], gatherTimeout: 3, stun: "stun:127.0.0.1:\(stun.port)"))
        let offer = try await offer(from: a, to: "b")
        try await b.createPeerConnection(for: "a", onCandidate: { _ in }, onStateChange: { _ in })
        try await within(5, "setRemoteDescription(offer)") { try await b.setRemoteDescription(offer, for: "a") }
        let started = DispatchTime.now()
        let answer = try await within(5, "createAnswer") { try await b.createAnswer(for: "a") }
        XCTAssertLessThan(Self.seconds(since: started), 1)
        XCTAssertFalse(answer.sdp.contains("a=end-of-candidates"), answer.sdp)
    }

    /// Signaling relays `{candidate, sdpMid, sdpMLineIndex}`; aiortc finds the transport by
    /// sdpMid alone, so a candidate without it is lost. The first ones race the local description.
    func test_trickled_candidates_carry_the_mid_of_their_m_line() async throws {
        let (a, b) = try (engine(closing: ["b"]), engine(closing: ["a"]))
        let (offerCandidates, offerSink) = AsyncStream.makeStream(of: IceCandidate.self)
        try await a.createPeerConnection(for: "b", onCandidate: { offerSink.yield($0) }, onStateChange: { _ in })
        let offer = try await within(5, "createOffer") { try await a.createOffer(for: "b") }
        let (answerCandidates, answerSink) = AsyncStream.makeStream(of: IceCandidate.self)
        try await b.createPeerConnection(for: "a", onCandidate: { answerSink.yield($0) }, onStateChange: { _ in })
        try await within(5, "setRemoteDescription(offer)") { try await b.setRemoteDescription(offer, for: "a") }
        let answer = try await within(5, "createAnswer") { try await b.createAnswer(for: "a") }

        for (side, candidates, sdp) in [("offerer", offerCandidates, offer.sdp), ("answerer", answerCandidates, answer.sdp)] {
            let first: IceCandidate?
            do {
                first = try await within(3, "the \(side)'s first candidate") { await candidates.first { _ in true } }
            } catch is TimedOut {
                throw XCTSkip("no local candidates on this machine")
            }
            let candidate = try XCTUnwrap(first)
            let index = try XCTUnwrap(candidate.sdpMLineIndex, side)
            XCTAssertNotNil(candidate.sdpMid, "\(side): \(candidate.candidate)")
            XCTAssertEqual(candidate.sdpMid, SDPMids.of(sdp)[index], side)
        }
    }

    func test_close_is_idempotent_and_forgets_the_peer() async throws {
        let a = try engine(closing: ["b"])
        try await a.createPeerConnection(for: "b", onCandidate: { _ in }, onStateChange: { _ in })
        _ = try await within(5, "createOffer") { try await a.createOffer(for: "b") }
        a.close(peer: "b")
        a.close(peer: "b")
        a.close(peer: "b", reason: .replaced)
        a.close(peer: "never-seen")
        await Self.assertNoPeerConnection("b") { _ = try await a.createOffer(for: "b") }
        let stats = await a.stats(for: "b")
        XCTAssertNil(stats)
        XCTAssertEqual(a.openDataChannels(with: "b"), [])
    }

    func test_calls_for_an_unknown_peer_throw_no_peer_connection() async throws {
        let a = try engine(closing: [])
        await Self.assertNoPeerConnection("nobody") { _ = try await a.createOffer(for: "nobody") }
        await Self.assertNoPeerConnection("nobody") { _ = try await a.createAnswer(for: "nobody") }
        await Self.assertNoPeerConnection("nobody") {
            try await a.setRemoteDescription(SessionDescription(kind: .offer, sdp: MediaSDPTests.chromiumOffer), for: "nobody")
        }
        await Self.assertNoPeerConnection("nobody") {
            try await a.addCandidate(IceCandidate(candidate: MediaSDPTests.hostCandidate, sdpMid: "0", sdpMLineIndex: 0), for: "nobody")
        }
        await Self.assertNoPeerConnection("nobody") { try a.send("hi", label: "chat", to: "nobody") }
        let sample = await a.stats()
        XCTAssertNil(sample, "nothing to measure without a peer connection")
    }

    func test_sending_before_a_data_channel_opens_throws() async throws {
        let a = try engine(closing: ["b"])
        try await a.createPeerConnection(for: "b", onCandidate: { _ in }, onStateChange: { _ in })
        _ = try await within(5, "createOffer") { try await a.createOffer(for: "b") }
        XCTAssertThrowsError(try a.send("hi", label: "chat", to: "b")) { error in
            XCTAssertEqual(error as? MediaError, .noDataChannel("chat"))
        }
    }

    // MARK: helpers

    private func offer(from engine: GStreamerMediaEngine, to peer: PeerID, sessionID: String? = nil) async throws -> SessionDescription {
        try await engine.createPeerConnection(for: peer, onCandidate: { _ in }, onStateChange: { _ in })
        var offer = try await within(5, "createOffer") { try await engine.createOffer(for: peer) }
        offer.sessionID = sessionID
        return offer
    }

    static func seconds(since start: DispatchTime) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    }

    private func answer(from engine: GStreamerMediaEngine, to peer: PeerID, offer: SessionDescription) async throws -> SessionDescription {
        try await engine.createPeerConnection(for: peer, onCandidate: { _ in }, onStateChange: { _ in })
        try await within(5, "setRemoteDescription(offer)") { try await engine.setRemoteDescription(offer, for: peer) }
        let answer = try await within(5, "createAnswer") { try await engine.createAnswer(for: peer) }
        XCTAssertEqual(answer.kind, .answer)
        return answer
    }

    /// Every `a=fingerprint` of `sdp` is sha-256 of `fingerprint`, and there is at least one.
    static func assertFingerprints(_ sdp: String, are fingerprint: String, file: StaticString = #filePath, line: UInt = #line) {
        let lines = MediaSDPTests.lines(sdp).filter { $0.hasPrefix("a=fingerprint:") }
        XCTAssertFalse(lines.isEmpty, sdp, file: file, line: line)
        for found in lines {
            XCTAssertEqual(found, "a=fingerprint:sha-256 " + fingerprint, file: file, line: line)
        }
    }

    /// The payload types listed on the first `m=audio` line.
    static func audioFormats(_ sdp: String) -> [String] {
        guard let line = MediaSDPTests.lines(sdp).first(where: { $0.hasPrefix("m=audio ") }) else { return [] }
        return line.split(separator: " ").dropFirst(3).map(String.init)
    }

    /// `sdp` with payload type `old` renamed `new` on the m=audio line and in its attributes.
    static func renumberingOpus(_ sdp: String, from old: Int, to new: Int) -> String {
        let lines = MediaSDPTests.lines(sdp).map { line -> String in
            if line.hasPrefix("m=audio ") {
                var fields = line.split(separator: " ").map(String.init)
                for index in fields.indices.dropFirst(3) where fields[index] == "\(old)" { fields[index] = "\(new)" }
                return fields.joined(separator: " ")
            }
            for attribute in ["a=rtpmap:", "a=fmtp:", "a=rtcp-fb:"] where line.hasPrefix("\(attribute)\(old) ") {
                return "\(attribute)\(new) " + line.dropFirst("\(attribute)\(old) ".count)
            }
            return line
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    static func assertNoPeerConnection(_ peer: String, file: StaticString = #filePath, line: UInt = #line,
                                       _ body: () async throws -> Void) async
    {
        do {
            try await body()
            XCTFail("no error", file: file, line: line)
        } catch {
            XCTAssertEqual(error as? MediaError, .noPeerConnection(peer), file: file, line: line)
        }
    }
}

/// The `a=mid` of each m-section, in order.
enum SDPMids {
    static func of(_ sdp: String) -> [String?] {
        MediaSDPTests.sections(sdp).dropFirst().map { section in
            section.first { $0.hasPrefix("a=mid:") }.map { String($0.dropFirst("a=mid:".count)) }
        }
    }
}

/// Values appended from any thread (GStreamer's callbacks), read by the test.
final class Collected<T: Sendable>: @unchecked Sendable {
    // @unchecked: `lock` guards `values`.
    private let lock = NSLock()
    private var values: [T] = []
    func append(_ value: T) { lock.withLock { values.append(value) } }
    var all: [T] { lock.withLock { values } }
}

/// A UDP socket on 127.0.0.1 that reads nothing and answers nothing: a STUN server that never
/// replies, so ICE gathering stays incomplete until libnice gives up on it.
final class SilentUDPServer: @unchecked Sendable {
    // @unchecked: `descriptor` is only closed once, by the test that owns the server.
    let port: UInt16
    private var descriptor: Int32

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
            }
        }
        guard bound else {
            let error = errno
            Glibc.close(descriptor)
            throw POSIXError(.init(rawValue: error) ?? .EIO)
        }
        self.descriptor = descriptor
        port = UInt16(bigEndian: address.sin_port)
    }

    func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }
}

/// `body`'s result, or a failure after `seconds`: a promise webrtcbin never answers must fail
/// the test, not hang the suite. A body that hangs is left behind.
func within<T: Sendable>(_ seconds: TimeInterval, _ what: String,
                         _ body: @escaping @Sendable () async throws -> T) async throws -> T
{
    let outcome = FirstOutcome<T>()
    return try await withCheckedThrowingContinuation { continuation in
        outcome.install(continuation)
        Task {
            do { outcome.resume(.success(try await body())) } catch { outcome.resume(.failure(error)) }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            outcome.resume(.failure(TimedOut(what: what, seconds: seconds)))
        }
    }
}

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    let seconds: TimeInterval
    var description: String { "\(what) did not finish within \(seconds) s" }
}

/// Resumes a continuation with whichever outcome comes first.
private final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    // @unchecked: `lock` guards `continuation`, which is taken exactly once.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        lock.withLock { self.continuation = continuation }
    }

    func resume(_ result: Result<T, any Error>) {
        let taken = lock.withLock { () -> CheckedContinuation<T, any Error>? in
            defer { continuation = nil }
            return continuation
        }
        taken?.resume(with: result)
    }
}
