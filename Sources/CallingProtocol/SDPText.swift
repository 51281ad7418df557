/// The few SDP facts the HTTP session bridge and CallingMedia need (RFC 8866 lines, RFC 8839 ICE
/// attributes, RFC 8840 `application/trickle-ice-sdpfrag`). The server relays SDP; it never
/// negotiates media, so this reads and rewrites lines and nothing more. It lives here, not in
/// CallingCore, so the media library links no server logic.
public enum SDPText {
    /// Lines without their CR/LF.
    public static func lines(_ sdp: String) -> [Substring] {
        sdp.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
            .map { $0.last == "\r" ? $0.dropLast() : $0 }
    }

    /// The `a=mid:` of each media section, in m-line order (nil for a section without one);
    /// a mid's index here is its `sdpMLineIndex`.
    public static func mids(_ sdp: String) -> [String?] {
        var result: [String?] = []
        for line in lines(sdp) {
            if line.hasPrefix("m=") {
                result.append(nil)
            } else if line.hasPrefix("a=mid:"), !result.isEmpty, result[result.count - 1] == nil {
                result[result.count - 1] = String(line.dropFirst("a=mid:".count))
            }
        }
        return result
    }

    /// The first `a=ice-ufrag` and `a=ice-pwd` (session or media level).
    public static func iceCredentials(_ sdp: String) -> (ufrag: String, pwd: String)? {
        var ufrag: String?
        var pwd: String?
        for line in lines(sdp) {
            if ufrag == nil, line.hasPrefix("a=ice-ufrag:") { ufrag = String(line.dropFirst("a=ice-ufrag:".count)) }
            if pwd == nil, line.hasPrefix("a=ice-pwd:") { pwd = String(line.dropFirst("a=ice-pwd:".count)) }
        }
        guard let ufrag, let pwd else { return nil }
        return (ufrag, pwd)
    }

    /// `sdp` with every `a=ice-ufrag`/`a=ice-pwd` replaced: the offer of an ICE restart.
    public static func replacingICECredentials(_ sdp: String, ufrag: String, pwd: String) -> String {
        lines(sdp).map { line -> String in
            if line.hasPrefix("a=ice-ufrag:") { return "a=ice-ufrag:" + ufrag }
            if line.hasPrefix("a=ice-pwd:") { return "a=ice-pwd:" + pwd }
            return String(line)
        }.joined(separator: "\r\n") + "\r\n"
    }

    /// A trickle-ice-sdpfrag body (RFC 8840 §4) as a WHIP client PATCHes it.
    public struct Fragment: Sendable, Equatable {
        public struct Candidate: Sendable, Equatable {
            /// `candidate:…`, without the `a=`, as `RTCIceCandidateInit.candidate` carries it.
            public var candidate: String
            public var mid: String?
            public var mLineIndex: Int?

            public init(candidate: String, mid: String?, mLineIndex: Int?) {
                self.candidate = candidate
                self.mid = mid
                self.mLineIndex = mLineIndex
            }
        }

        public var ufrag: String?
        public var pwd: String?
        public var candidates: [Candidate] = []
        public var endOfCandidates = false

        /// Reads candidates per media section; a section's index comes from its `a=mid` looked up
        /// in `mids` (the offer's), else from its position in the fragment.
        public static func parse(_ text: String, mids: [String?]) -> Fragment {
            var fragment = Fragment()
            var section = -1
            var mid: String?
            for line in SDPText.lines(text) {
                if line.hasPrefix("m=") {
                    section += 1
                    mid = nil
                } else if line.hasPrefix("a=mid:") {
                    mid = String(line.dropFirst("a=mid:".count))
                } else if line.hasPrefix("a=ice-ufrag:") {
                    fragment.ufrag = String(line.dropFirst("a=ice-ufrag:".count))
                } else if line.hasPrefix("a=ice-pwd:") {
                    fragment.pwd = String(line.dropFirst("a=ice-pwd:".count))
                } else if line.hasPrefix("a=candidate:") {
                    let index = mid.flatMap { mids.firstIndex(of: $0) } ?? (section >= 0 ? section : nil)
                    fragment.candidates.append(Candidate(candidate: String(line.dropFirst(2)), mid: mid, mLineIndex: index))
                } else if line == "a=end-of-candidates" {
                    fragment.endOfCandidates = true
                }
            }
            return fragment
        }
    }

    /// The sdpfrag answering an ICE restart: per media section of `answer`, its m-line, mid, the
    /// answer's new ICE credentials and its candidates.
    public static func restartFragment(fromAnswer answer: String) -> String {
        var out: [String] = []
        let credentials = iceCredentials(answer)
        var inMedia = false
        for line in lines(answer) {
            if line.hasPrefix("m=") {
                inMedia = true
                out.append(String(line))
                if let credentials {
                    out.append("a=ice-ufrag:" + credentials.ufrag)
                    out.append("a=ice-pwd:" + credentials.pwd)
                }
            } else if inMedia, line.hasPrefix("a=mid:") || line.hasPrefix("a=candidate:") || line == "a=end-of-candidates" {
                out.append(String(line))
            }
        }
        if out.isEmpty, let credentials {
            out = ["a=ice-ufrag:" + credentials.ufrag, "a=ice-pwd:" + credentials.pwd]
        }
        return out.joined(separator: "\r\n") + "\r\n"
    }
}
