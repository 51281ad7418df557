@testable import CallingMedia
import Foundation
import XCTest

/// The SDP the engine reads (the Opus payload type its answer must reuse) and writes (the real
/// certificate fingerprint, gathered candidates for callers that cannot trickle), and the ICE
/// server URLs it hands to webrtcbin.
final class MediaSDPTests: XCTestCase {
    // MARK: fixtures

    /// What Chromium offers: Opus as 111 among other audio codecs, then a data channel section.
    static let chromiumOffer = crlf("""
        v=0
        o=- 4611731400430051336 2 IN IP4 127.0.0.1
        s=-
        t=0 0
        a=group:BUNDLE 0 1
        a=fingerprint:sha-256 11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF:11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF
        a=msid-semantic: WMS
        m=audio 9 UDP/TLS/RTP/SAVPF 63 111 9 0 8 13 110 126
        c=IN IP4 0.0.0.0
        a=ice-ufrag:cHr1
        a=ice-pwd:o0Bq5k2g7xIh5iQ0cTFbYcvd
        a=fingerprint:sha-256 11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF:11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF
        a=setup:actpass
        a=mid:0
        a=sendrecv
        a=rtpmap:63 red/48000/2
        a=fmtp:63 111/111
        a=rtpmap:111 opus/48000/2
        a=rtcp-fb:111 transport-cc
        a=fmtp:111 minptime=10;useinbandfec=1
        a=rtpmap:9 G722/8000
        a=rtpmap:0 PCMU/8000
        a=rtpmap:8 PCMA/8000
        a=rtpmap:13 CN/8000
        a=rtpmap:110 telephone-event/48000
        a=rtpmap:126 telephone-event/8000
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        c=IN IP4 0.0.0.0
        a=ice-ufrag:cHr1
        a=ice-pwd:o0Bq5k2g7xIh5iQ0cTFbYcvd
        a=fingerprint:sha-256 11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF:11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF
        a=setup:actpass
        a=mid:1
        a=sctp-port:5000
        """)

    /// What aiortc offers: Opus as 96, LF line endings as aiortc's own parser accepts them.
    static let aiortcOffer = """
        v=0
        o=- 3913456789 3913456789 IN IP4 0.0.0.0
        s=-
        t=0 0
        a=group:BUNDLE 0 1
        a=msid-semantic:WMS *
        m=audio 9 UDP/TLS/RTP/SAVPF 96 0 8
        c=IN IP4 0.0.0.0
        a=sendrecv
        a=mid:0
        a=rtcp:9 IN IP4 0.0.0.0
        a=rtcp-mux
        a=rtpmap:96 opus/48000/2
        a=rtpmap:0 PCMU/8000
        a=rtpmap:8 PCMA/8000
        a=ice-ufrag:Ab1c
        a=ice-pwd:9wJ0n3fVxYzU2kQp7tLmRsE4
        a=fingerprint:sha-256 AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA
        a=fingerprint:sha-384 BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB
        a=setup:actpass
        m=application 9 DTLS/SCTP 5000
        c=IN IP4 0.0.0.0
        a=mid:1
        a=sctpmap:5000 webrtc-datachannel 65535
        a=ice-ufrag:Ab1c
        a=ice-pwd:9wJ0n3fVxYzU2kQp7tLmRsE4
        a=fingerprint:sha-256 AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA
        a=setup:actpass

        """

    static let dataOnlyOffer = crlf("""
        v=0
        o=- 1 1 IN IP4 0.0.0.0
        s=-
        t=0 0
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=mid:0
        a=sctp-port:5000
        """)

    static let newFingerprint = "0F:1E:2D:3C:4B:5A:69:78:87:96:A5:B4:C3:D2:E1:F0:0F:1E:2D:3C:4B:5A:69:78:87:96:A5:B4:C3:D2:E1:F0"

    // MARK: opusPayloadType

    func test_opus_payload_type_of_a_chromium_offer_is_111() {
        XCTAssertEqual(MediaSDP.opusPayloadType(Self.chromiumOffer), 111, "red (63) is listed first but is not Opus")
    }

    func test_opus_payload_type_of_an_aiortc_offer_is_96_with_either_line_ending() {
        XCTAssertEqual(MediaSDP.opusPayloadType(Self.aiortcOffer), 96)
        XCTAssertEqual(MediaSDP.opusPayloadType(Self.crlf(Self.aiortcOffer)), 96)
        XCTAssertEqual(MediaSDP.opusPayloadType(Self.aiortcOffer.replacingOccurrences(of: "\n", with: "\r")), 96, "bare CR")
    }

    func test_opus_is_recognised_in_any_case_as_gstreamer_writes_it() {
        let offer = Self.crlf("v=0\nm=audio 9 UDP/TLS/RTP/SAVPF 101\na=rtpmap:101 OPUS/48000/2\n")
        XCTAssertEqual(MediaSDP.opusPayloadType(offer), 101)
    }

    func test_only_the_first_audio_section_counts() {
        let twoAudio = Self.crlf("""
            v=0
            m=audio 9 UDP/TLS/RTP/SAVPF 109
            a=rtpmap:109 opus/48000/2
            m=audio 9 UDP/TLS/RTP/SAVPF 111
            a=rtpmap:111 opus/48000/2
            """)
        XCTAssertEqual(MediaSDP.opusPayloadType(twoAudio), 109)

        let firstWithoutOpus = Self.crlf("""
            v=0
            m=audio 9 UDP/TLS/RTP/SAVPF 0
            a=rtpmap:0 PCMU/8000
            m=audio 9 UDP/TLS/RTP/SAVPF 111
            a=rtpmap:111 opus/48000/2
            """)
        XCTAssertNil(MediaSDP.opusPayloadType(firstWithoutOpus), "Opus of a second audio section is not the one answered")

        let opusOutsideAudio = Self.crlf("""
            v=0
            m=video 9 UDP/TLS/RTP/SAVPF 120
            a=rtpmap:120 opus/48000/2
            m=audio 9 UDP/TLS/RTP/SAVPF 97
            a=rtpmap:97 opus/48000/2
            """)
        XCTAssertEqual(MediaSDP.opusPayloadType(opusOutsideAudio), 97, "the audio section need not be the first section")
    }

    func test_no_opus_without_audio() {
        XCTAssertNil(MediaSDP.opusPayloadType(Self.dataOnlyOffer))
        XCTAssertNil(MediaSDP.opusPayloadType(Self.crlf("v=0\nm=audio 9 RTP/AVP 0 8\na=rtpmap:0 PCMU/8000\na=rtpmap:8 PCMA/8000\n")))
        XCTAssertNil(MediaSDP.opusPayloadType(Self.crlf("v=0\nm=audio 9 RTP/AVP 96\na=rtpmap:96 opus/16000/1\n")), "Opus is always 48000 in SDP")
        XCTAssertNil(MediaSDP.opusPayloadType(""))
    }

    // MARK: hasAudio

    func test_has_audio() {
        XCTAssertTrue(MediaSDP.hasAudio(Self.chromiumOffer))
        XCTAssertTrue(MediaSDP.hasAudio(Self.aiortcOffer))
        XCTAssertFalse(MediaSDP.hasAudio(Self.dataOnlyOffer))
        XCTAssertFalse(MediaSDP.hasAudio(Self.crlf("v=0\nm=video 9 UDP/TLS/RTP/SAVPF 96\na=x-note:m=audio 9\n")))
        XCTAssertFalse(MediaSDP.hasAudio(""))
    }

    // MARK: replacingFingerprints

    func test_every_fingerprint_line_is_replaced_and_nothing_else_changes() {
        for offer in [Self.chromiumOffer, Self.aiortcOffer] {
            let rewritten = MediaSDP.replacingFingerprints(offer, sha256: Self.newFingerprint)
            let before = Self.lines(offer)
            let after = Self.lines(rewritten)
            XCTAssertEqual(after.count, before.count)
            XCTAssertEqual(after.filter { $0.hasPrefix("a=fingerprint:") }.count, before.filter { $0.hasPrefix("a=fingerprint:") }.count)
            for (old, new) in zip(before, after) {
                if old.hasPrefix("a=fingerprint:") {
                    XCTAssertEqual(new, "a=fingerprint:sha-256 " + Self.newFingerprint)
                } else {
                    XCTAssertEqual(new, old)
                }
            }
            XCTAssertFalse(rewritten.contains("11:22:33"))
            XCTAssertFalse(rewritten.contains("AA:AA:AA"))
            Self.assertCRLF(rewritten)
        }
    }

    func test_replacing_fingerprints_of_an_sdp_without_any_only_normalises_line_endings() {
        let rewritten = MediaSDP.replacingFingerprints(Self.dataOnlyOffer, sha256: Self.newFingerprint)
        XCTAssertEqual(rewritten, Self.dataOnlyOffer)
    }

    // MARK: addingCandidates

    static let answer = crlf("""
        v=0
        o=- 1 1 IN IP4 0.0.0.0
        s=-
        t=0 0
        a=group:BUNDLE 0 1
        m=audio 9 UDP/TLS/RTP/SAVPF 96
        a=mid:0
        a=rtpmap:96 OPUS/48000/2
        a=candidate:1 1 UDP 2015363327 192.0.2.10 40000 typ host
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=mid:1
        a=sctp-port:5000
        """)

    static let hostCandidate = "candidate:1 1 UDP 2015363327 192.0.2.10 40000 typ host"
    static let srflxCandidate = "candidate:2 1 UDP 1679819007 198.51.100.7 40000 typ srflx raddr 192.0.2.10 rport 40000"
    static let dataCandidate = "candidate:3 1 UDP 2015363327 192.0.2.10 40002 typ host"

    func test_candidates_go_to_the_media_section_of_their_index_once() {
        let candidates: [(mline: Int, candidate: String)] = [
            (0, Self.hostCandidate),  // already in the answer
            (0, Self.srflxCandidate),
            (1, "a=" + Self.dataCandidate),  // with the attribute prefix: not doubled
            (0, Self.srflxCandidate),  // gathered twice
            (2, "candidate:9 1 UDP 1 192.0.2.99 9 typ host"),  // no third section
            (-1, "candidate:8 1 UDP 1 192.0.2.98 9 typ host"),  // nor a section before the first
        ]
        let sdp = MediaSDP.addingCandidates(candidates, complete: false, to: Self.answer)
        let sections = Self.sections(sdp)
        XCTAssertEqual(sections.count, 3)
        XCTAssertFalse(sections[0].contains { $0.hasPrefix("a=candidate:") }, "nothing at session level")
        XCTAssertEqual(sections[1].filter { $0.hasPrefix("a=candidate:") }, ["a=" + Self.hostCandidate, "a=" + Self.srflxCandidate])
        XCTAssertEqual(sections[2].filter { $0.hasPrefix("a=candidate:") }, ["a=" + Self.dataCandidate])
        XCTAssertFalse(sdp.contains("192.0.2.99"))
        XCTAssertFalse(sdp.contains("192.0.2.98"))
        XCTAssertFalse(sdp.contains("a=end-of-candidates"), "gathering not complete: the far end may still get more")
        XCTAssertFalse(sdp.contains("a=a="))
        XCTAssertEqual(MediaSDP.candidateCount(sdp), 3)
        Self.assertCRLF(sdp)
        // The lines that were there stay in their order, ahead of the added ones.
        let original = Self.sections(Self.answer)
        for (index, section) in original.enumerated() {
            XCTAssertEqual(Array(sections[index].prefix(section.count)), section)
        }
    }

    func test_complete_gathering_ends_every_media_section_once() {
        let once = MediaSDP.addingCandidates([(1, Self.dataCandidate)], complete: true, to: Self.answer)
        let twice = MediaSDP.addingCandidates([(1, Self.dataCandidate)], complete: true, to: once)
        for sdp in [once, twice] {
            let sections = Self.sections(sdp)
            XCTAssertFalse(sections[0].contains("a=end-of-candidates"))
            XCTAssertEqual(sections[1].filter { $0 == "a=end-of-candidates" }.count, 1)
            XCTAssertEqual(sections[2].filter { $0 == "a=end-of-candidates" }.count, 1)
            XCTAssertEqual(sections[2].last, "a=end-of-candidates")
            Self.assertCRLF(sdp)
        }
        XCTAssertEqual(twice, once)
    }

    func test_no_candidates_and_incomplete_gathering_leave_the_sdp_as_it_was() {
        XCTAssertEqual(MediaSDP.addingCandidates([], complete: false, to: Self.answer), Self.answer)
    }

    // MARK: webrtcbinTurnURI

    func test_turn_credentials_are_percent_encoded() {
        XCTAssertEqual(
            MediaSDP.webrtcbinTurnURI("turn:turn.example.com:3478", username: "1700003600:alice", credential: "dwS2TxngVnY2VWSo8C+sy0bl/iks="),
            "turn://1700003600%3Aalice:dwS2TxngVnY2VWSo8C%2Bsy0bl%2Fiks%3D@turn.example.com:3478")
        XCTAssertEqual(MediaSDP.webrtcbinTurnURI("turn:h:3478", username: "zoë@x", credential: "a b"), "turn://zo%C3%AB%40x:a%20b@h:3478")
        XCTAssertEqual(MediaSDP.webrtcbinTurnURI("turn:h:3478", username: "A-z_0.9~", credential: "p"), "turn://A-z_0.9~:p@h:3478",
                       "unreserved characters stay as they are")
    }

    func test_turns_and_the_transport_query_are_kept() {
        XCTAssertEqual(MediaSDP.webrtcbinTurnURI("turn:turn.example.com:3478?transport=udp", username: "u", credential: "p"),
                       "turn://u:p@turn.example.com:3478?transport=udp")
        XCTAssertEqual(MediaSDP.webrtcbinTurnURI("turns:turn.example.com:5349?transport=tcp", username: "1:a", credential: "p/q"),
                       "turns://1%3Aa:p%2Fq@turn.example.com:5349?transport=tcp")
        XCTAssertEqual(MediaSDP.webrtcbinTurnURI("turn://turn.example.com:3478", username: "u", credential: "p"),
                       "turn://u:p@turn.example.com:3478", "slashes after the scheme are not doubled")
    }

    func test_no_turn_uri_without_a_turn_url_or_credentials() {
        XCTAssertNil(MediaSDP.webrtcbinTurnURI("stun:stun.example.com:3478", username: "u", credential: "p"))
        XCTAssertNil(MediaSDP.webrtcbinTurnURI("https://turn.example.com", username: "u", credential: "p"))
        XCTAssertNil(MediaSDP.webrtcbinTurnURI("turn:turn.example.com:3478", username: nil, credential: "p"))
        XCTAssertNil(MediaSDP.webrtcbinTurnURI("turn:turn.example.com:3478", username: "u", credential: nil))
    }

    // MARK: webrtcbinStunURI

    func test_stun_uri() {
        XCTAssertEqual(MediaSDP.webrtcbinStunURI("stun:stun.l.google.com:19302"), "stun://stun.l.google.com:19302")
        XCTAssertEqual(MediaSDP.webrtcbinStunURI("stun:stun.example.com:3478?transport=udp"), "stun://stun.example.com:3478")
        XCTAssertEqual(MediaSDP.webrtcbinStunURI("stun://stun.example.com"), "stun://stun.example.com")
        XCTAssertNil(MediaSDP.webrtcbinStunURI("turn:turn.example.com:3478"))
        XCTAssertNil(MediaSDP.webrtcbinStunURI("stuns:stun.example.com:5349"))
    }

    // MARK: helpers

    /// `text` with CRLF line endings and a final CRLF, as SDP is sent on the wire.
    static func crlf(_ text: String) -> String {
        let lines = text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: true)
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// Lines of `sdp`, any line ending. Foundation works on UTF-16 units, so "\r\n" (one Swift
    /// Character) is found by `replacingOccurrences`.
    static func lines(_ sdp: String) -> [String] {
        sdp.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
            .split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// The session section, then one array per m-section.
    static func sections(_ sdp: String) -> [[String]] {
        var sections: [[String]] = [[]]
        for line in lines(sdp) {
            if line.hasPrefix("m=") { sections.append([]) }
            sections[sections.count - 1].append(line)
        }
        return sections
    }

    /// Every line ends in CRLF, including the last one.
    static func assertCRLF(_ sdp: String, file: StaticString = #filePath, line: UInt = #line) {
        let bytes = Array(sdp.utf8)
        XCTAssertEqual(bytes.suffix(2), [13, 10], "ends with CRLF", file: file, line: line)
        for (index, byte) in bytes.enumerated() where byte == 10 {
            guard index > 0, bytes[index - 1] == 13 else {
                return XCTFail("bare LF at byte \(index)", file: file, line: line)
            }
        }
        for (index, byte) in bytes.enumerated() where byte == 13 {
            guard index + 1 < bytes.count, bytes[index + 1] == 10 else {
                return XCTFail("bare CR at byte \(index)", file: file, line: line)
            }
        }
        XCTAssertFalse(sdp.utf8.starts(with: [13, 10]), file: file, line: line)
    }
}
