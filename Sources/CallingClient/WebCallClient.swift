import CallingEndpoints
import CallingLogging
import CallingProtocol
import Foundation

/// Settings of a `WebCallClient`.
public struct WebCallOptions: Sendable {
    /// A PEM file of CA certificates trusted instead of the system store for `https://`.
    public var tlsCAFile: String?
    /// DEVELOPMENT ONLY: accept any server certificate (see `SignalingOptions.insecureSkipTLSVerification`).
    public var insecureSkipTLSVerification = false
    var loop: (any ClientTransport)?

    public init() {}
}

/// A native web call over the webrtc-proxy session API (docs/protocol.md, "HTTP sessions"):
/// the app's WebRTC stack makes the offers, this client carries them to the server over HTTP(S)
/// and returns the answering agent's SDP. No WebSocket is involved. `https://` verifies the server's
/// certificate against the system trust store, or `tls.caFile`; a base URL that is not `http(s)`
/// or `ws(s)` makes every request throw `unsupportedURL`.
///
/// ```swift
/// let call = WebCallClient(baseURL: URL(string: "https://calls.example.org")!, callID: callID, accessToken: token)
/// let answer = try await call.start(offerSDP: offer)     // POST  → 201 {session_id, sdp}
/// try await call.addCandidate(candidate: c, sdpMid: "0", sdpMLineIndex: 0)  // PATCH → 204
/// let answer2 = try await call.reconnect(offerSDP: newOffer)  // after a network change
/// try await call.hangup()                                 // DELETE → 204
/// ```
///
/// Refusals throw `CallingError` `http(status:code:detail:)` with the problem `code`
/// (`isRetryable` for 429, 502, 503); network failures throw `network(host:port:reason:)`. The
/// `Retry-After` of the last refusal is in `retryAfter`; the client never retries on its own.
public final class WebCallClient: Sendable {
    /// What requests on several tasks share.
    private struct State {
        var currentSessionID: String?
        var lastRetryAfter: TimeInterval?
        /// Bumped by every POST and every hangup: a POST whose answer arrives after a later POST or
        /// hangup must not overwrite the session (docs/protocol.md, "Call and session rules": hanging
        /// up mid-connect).
        var generation = 0
        var latestPostGeneration = 0
    }

    private let state = Locked(State())

    /// `{base}/webrtc-proxy/{call_id}/v1/webrtc/sessions`; internal for tests.
    let sessionsURL: URL?
    private let accessToken: String
    private let loop: any ClientTransport
    private let tls: TLSClientOptions
    /// Longer than the server's answer timeout (10 s), so a slow agent surfaces as 502, not a local timeout.
    private let requestTimeout: TimeInterval = 30

    /// `baseURL` is `http(s)://host:port[/prefix]` (`ws`/`wss` are mapped); `callID` and
    /// `accessToken` come from `POST /v1/calls` (through the app's backend).
    public init(baseURL: URL, callID: CallID, accessToken: String, options: WebCallOptions = WebCallOptions()) {
        self.accessToken = accessToken
        self.loop = options.loop ?? SignalingClient.defaultTransport
        self.tls = TLSClientOptions(caFile: options.tlsCAFile, insecureSkipVerification: options.insecureSkipTLSVerification)
        var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false)
        if components?.scheme == "ws" { components?.scheme = "http" }
        if components?.scheme == "wss" { components?.scheme = "https" }
        var prefix = components?.percentEncodedPath ?? ""
        while prefix.hasSuffix("/") { prefix.removeLast() }
        components?.percentEncodedPath = prefix + "/webrtc-proxy/\(queryEncoded(callID.rawValue))/v1/webrtc/sessions"
        components?.query = nil
        components?.fragment = nil
        sessionsURL = components?.url
    }

    /// The live session's id (from the last successful `start`/`reconnect`), nil before and after `hangup`.
    public var sessionID: String? {
        state.withLock { $0.currentSessionID }
    }

    /// The `Retry-After` seconds of the most recent refused request (e.g. 2 on 503
    /// `no_answering_peer`), nil when it had none. Reset by every request.
    public var retryAfter: TimeInterval? {
        state.withLock { $0.lastRetryAfter }
    }

    // MARK: requests

    /// Posts the offer (`{"identity":"client","sdp":…}`) and returns the agent's answer SDP; the
    /// session id is kept in `sessionID`. Throws `invalidState` while a session is live (use
    /// `reconnect` or `renegotiate`).
    public func start(offerSDP: String) async throws -> String {
        if sessionID != nil { throw CallingError(.invalidState("a session is live; use reconnect or renegotiate")) }
        return try await post(offerSDP: offerSDP)
    }

    /// After a network change: posts a new offer with the same token. The server hands the seat to
    /// the new session (the agent gets `data {kind:"replaced"}`); the old session id answers 404
    /// from then on. Works without a previous `start` too.
    public func reconnect(offerSDP: String) async throws -> String {
        try await post(offerSDP: offerSDP)
    }

    /// Sends one trickled ICE candidate (`""` = end of candidates). Throws `invalidState` without a
    /// session: queue candidates gathered before `start` returns and send them afterwards, in order.
    public func addCandidate(candidate: String, sdpMid: String?, sdpMLineIndex: Int?) async throws {
        let id = try liveSessionID()
        var fields: [String: JSONValue] = ["candidate": .string(candidate)]
        if let sdpMid { fields["sdpMid"] = .string(sdpMid) }
        if let sdpMLineIndex { fields["sdpMLineIndex"] = .int(Int64(sdpMLineIndex)) }
        let body = JSONWriter.bytes(["candidate": .object(fields)])
        _ = try await send("PATCH", sessionID: id, contentType: "application/json", body: Data(body), expect: [204])
    }

    /// Sends a new offer on the live session (`Content-Type: application/sdp`) and returns the
    /// answer. 409 `renegotiation_in_progress` while a previous one is unanswered; 404
    /// `session_not_found` once the session is gone (POST a new one with `reconnect`). An ICE
    /// restart after a media drop goes this way first (docs/protocol.md "Call and session rules").
    /// `timeout` bounds the request (nil: 30 s, longer than the server's answer wait): a restart
    /// that must fall back to a new session in time passes its own.
    public func renegotiate(offerSDP: String, timeout: TimeInterval? = nil) async throws -> String {
        let id = try liveSessionID()
        let (_, data) = try await send("PATCH", sessionID: id, contentType: "application/sdp", body: Data(offerSDP.utf8),
                                       expect: [200], timeout: timeout)
        return String(decoding: data, as: UTF8.self)
    }

    /// Ends the session (`DELETE`; the agent gets `data {kind:"hangup"}`). Idempotent: without a
    /// session it does nothing, and a session or call that is already gone (404) counts as done.
    /// A `start`/`reconnect` still in flight is abandoned: its session is deleted when it arrives.
    public func hangup() async throws {
        let id: String? = state.withLock { state in
            state.generation += 1
            return state.currentSessionID
        }
        guard let id else { return }
        try await delete(id)
        state.withLock { state in
            if state.currentSessionID == id { state.currentSessionID = nil }
        }
    }

    // MARK: internals

    private func liveSessionID() throws -> String {
        guard let id = sessionID else { throw CallingError(.invalidState("no session; call start first")) }
        return id
    }

    private func post(offerSDP: String) async throws -> String {
        let mine: Int = state.withLock { state in
            state.generation += 1
            state.latestPostGeneration = state.generation
            return state.generation
        }
        let body = JSONWriter.bytes(["identity": "client", "sdp": .string(offerSDP)])
        let (status, data) = try await send("POST", sessionID: nil, contentType: "application/json", body: Data(body),
                                            expect: [201])
        let json = try? JSONParser.parse([UInt8](data))
        guard let id = json?["session_id"]?.stringValue, let answer = json?["sdp"]?.stringValue else {
            throw CallingError(.http(status: status, code: nil, detail: "answer without session_id or sdp"))
        }
        let (current, hungUp): (Bool, Bool) = state.withLock { state in
            let current = state.generation == mine
            if current { state.currentSessionID = id }
            return (current, !current && state.latestPostGeneration == mine)  // only a hangup came after this POST
        }
        if current { return answer }
        if hungUp { try? await delete(id) }
        throw CallingError(.invalidState("superseded by a later reconnect or hangup"))
    }

    private func delete(_ id: String) async throws {
        do {
            _ = try await send("DELETE", sessionID: id, contentType: nil, body: nil, expect: [200, 204])
        } catch let error as CallingError where error.httpStatus == 404 {
            return  // session or call already gone
        }
    }

    /// One request; returns status and body when the status is in `expect`, else throws the
    /// problem as `CallingError.http`.
    private func send(_ method: String, sessionID: String?, contentType: String?, body: Data?, expect: Set<Int>,
                      timeout: TimeInterval? = nil) async throws -> (Int, Data)
    {
        guard var url = sessionsURL else { throw CallingError(.http(status: 0, code: nil, detail: "bad base URL")) }
        if let sessionID { url.appendPathComponent(sessionID) }
        let endpoint = try REST.endpoint(for: url)
        var headers = ["Authorization": "Bearer \(accessToken)"]
        if let contentType { headers["Content-Type"] = contentType }
        let response = try await REST.send(transport: loop, endpoint: endpoint, tls: tls, method: method, target: endpoint.pathAndQuery,
                                           headers: headers, body: body.map { Array($0) } ?? [], timeout: timeout ?? requestTimeout)
        let status = response.status
        let data = Data(response.body)
        let retryAfter = response.headers["retry-after"].flatMap { TimeInterval($0.trimmingCharacters(in: .whitespaces)) }
        state.withLock { $0.lastRetryAfter = expect.contains(status) ? nil : retryAfter }
        guard expect.contains(status) else {
            let problem = try? JSONParser.parse([UInt8](data))
            let detail = problem?["detail"]?.stringValue ?? problem?["title"]?.stringValue ?? "HTTP \(status)"
            throw CallingError(.http(status: status, code: problem?["code"]?.stringValue, detail: detail))
        }
        return (status, data)
    }
}
