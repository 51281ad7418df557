import CallingClient
import CallingProtocol

/// The SDP facts the media engine reads and the one line it rewrites.
enum MediaSDP {
    /// Opus's payload type in the first audio section of `offer`, which the answer must reuse
    /// (aiortc offers 96, Chromium 111); nil when the offer has no Opus.
    static func opusPayloadType(_ offer: String) -> Int? {
        var inAudio = false
        for line in SDPText.lines(offer) {
            if line.hasPrefix("m=") {
                if inAudio { return nil }
                inAudio = line.hasPrefix("m=audio ")
            } else if inAudio, line.hasPrefix("a=rtpmap:") {
                let fields = line.dropFirst("a=rtpmap:".count).split(separator: " ", maxSplits: 1)
                if fields.count == 2, fields[1].lowercased().hasPrefix("opus/48000"), let type = Int(fields[0]) { return type }
            }
        }
        return nil
    }

    static func hasAudio(_ sdp: String) -> Bool { SDPText.lines(sdp).contains { $0.hasPrefix("m=audio ") } }

    /// Every `a=fingerprint` replaced by `sha-256 <fingerprint>`. GStreamer 1.22 computes the
    /// line from the certificate *and* key when given a PEM, so the far end would reject the DTLS
    /// handshake; the certificate's own digest is what RFC 8122 asks for.
    static func replacingFingerprints(_ sdp: String, sha256 fingerprint: String) -> String {
        let lines = SDPText.lines(sdp).map { line -> String in
            line.hasPrefix("a=fingerprint:") ? "a=fingerprint:sha-256 " + fingerprint : String(line)
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// The candidate lines (`a=candidate:…`) of `sdp`: how many a gathered answer carries.
    static func candidateCount(_ sdp: String) -> Int { SDPText.lines(sdp).filter { $0.hasPrefix("a=candidate:") }.count }

    /// `sdp` with the gathered `candidates` (webrtcbin's `candidate:…` strings by m-line index)
    /// appended to their media sections, skipping any already there, and `a=end-of-candidates`
    /// when gathering completed: the answer to a caller that cannot receive trickled candidates.
    static func addingCandidates(_ candidates: [(mline: Int, candidate: String)], complete: Bool, to sdp: String) -> String {
        var sections: [[String]] = [[]]
        for line in SDPText.lines(sdp) {
            if line.hasPrefix("m=") { sections.append([]) }
            sections[sections.count - 1].append(String(line))
        }
        for (mline, candidate) in candidates {
            let index = mline + 1
            guard mline >= 0, index < sections.count else { continue }
            let line = candidate.hasPrefix("a=") ? candidate : "a=" + candidate
            if !sections[index].contains(line) { sections[index].append(line) }
        }
        if complete {
            for index in sections.indices.dropFirst() where !sections[index].contains("a=end-of-candidates") {
                sections[index].append("a=end-of-candidates")
            }
        }
        return sections.joined().joined(separator: "\r\n") + "\r\n"
    }

    /// A TURN server as webrtcbin takes it: `turn://user:password@host:port`, user and password
    /// percent-encoded (REST credentials contain `:`), transport kept as a query. Nil for a URL
    /// that is not `turn:`/`turns:` or has no credentials.
    static func webrtcbinTurnURI(_ url: String, username: String?, credential: String?) -> String? {
        guard let username, let credential else { return nil }
        let scheme: String
        var rest: Substring
        if url.hasPrefix("turns:") {
            scheme = "turns"
            rest = url.dropFirst("turns:".count)
        } else if url.hasPrefix("turn:") {
            scheme = "turn"
            rest = url.dropFirst("turn:".count)
        } else { return nil }
        while rest.hasPrefix("/") { rest = rest.dropFirst() }
        return "\(scheme)://\(percentEncoded(username)):\(percentEncoded(credential))@\(rest)"
    }

    /// `stun:host:port` → `stun://host:port`, the form webrtcbin's `stun-server` takes.
    static func webrtcbinStunURI(_ url: String) -> String? {
        guard url.hasPrefix("stun:") else { return nil }
        var rest = url.dropFirst("stun:".count)
        while rest.hasPrefix("/") { rest = rest.dropFirst() }
        if let query = rest.firstIndex(of: "?") { rest = rest[..<query] }
        return "stun://" + rest
    }

    private static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }
}
