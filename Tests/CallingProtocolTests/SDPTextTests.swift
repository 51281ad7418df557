import CallingProtocol
import XCTest

/// The SDP reading the HTTP session bridge relies on: mids give sdpMLineIndex, fragments give
/// candidates, an ICE restart rewrites only the credentials.
final class SDPTextTests: XCTestCase {
    let offer = "v=0\r\ns=-\r\nm=audio 9 RTP/AVP 0\r\na=mid:a\r\na=ice-ufrag:u1\r\na=ice-pwd:p1\r\nm=video 9 RTP/AVP 96\r\na=mid:v\r\n"

    func test_mids_follow_m_line_order() {
        XCTAssertEqual(SDPText.mids(offer), ["a", "v"])
        XCTAssertEqual(SDPText.mids("v=0\nm=audio 9 RTP/AVP 0\n"), [nil])
    }

    func test_fragment_candidates_take_their_index_from_the_offer_mids() {
        let fragment = SDPText.Fragment.parse(
            "a=ice-ufrag:u1\r\na=ice-pwd:p1\r\nm=video 9 RTP/AVP 0\r\na=mid:v\r\na=candidate:1 1 udp 1 192.0.2.1 9 typ host\r\na=end-of-candidates\r\n",
            mids: SDPText.mids(offer))
        XCTAssertEqual(fragment.ufrag, "u1")
        XCTAssertEqual(fragment.pwd, "p1")
        XCTAssertEqual(fragment.candidates, [.init(candidate: "candidate:1 1 udp 1 192.0.2.1 9 typ host", mid: "v", mLineIndex: 1)])
        XCTAssertTrue(fragment.endOfCandidates)
    }

    func test_ice_restart_rewrites_only_credentials() {
        let restarted = SDPText.replacingICECredentials(offer, ufrag: "u2", pwd: "p2")
        XCTAssertEqual(SDPText.iceCredentials(restarted)?.ufrag, "u2")
        XCTAssertEqual(SDPText.iceCredentials(restarted)?.pwd, "p2")
        XCTAssertEqual(SDPText.mids(restarted), ["a", "v"])
        XCTAssertEqual(restarted.replacingOccurrences(of: "u2", with: "u1").replacingOccurrences(of: "p2", with: "p1"), offer)
    }

    func test_restart_answer_fragment_carries_new_credentials_and_candidates() {
        let answer = "v=0\r\na=ice-ufrag:A\r\na=ice-pwd:B\r\nm=audio 9 RTP/AVP 0\r\na=mid:a\r\na=rtpmap:0 PCMU/8000\r\na=candidate:9 1 udp 1 192.0.2.2 9 typ host\r\n"
        XCTAssertEqual(SDPText.restartFragment(fromAnswer: answer),
                       "m=audio 9 RTP/AVP 0\r\na=ice-ufrag:A\r\na=ice-pwd:B\r\na=mid:a\r\na=candidate:9 1 udp 1 192.0.2.2 9 typ host\r\n")
    }
}
