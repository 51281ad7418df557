import CallingEndpoints
import Foundation

/// What a client WebSocket reports, in order: `open`, any number of `text` messages, then exactly
/// one terminal event (`closed` or `failed`). Every transport reports the same cases for the same
/// wire events, so the session machines (`SignalingSession`, `PresenceSession`) never learn which
/// transport they run on. Binary messages are not reported: no client session reads them.
enum TransportEvent: Sendable, Equatable {
    /// The server accepted the upgrade (101).
    case open
    /// A complete text message.
    case text(String)
    /// The WebSocket ended after it was open. `code` is the close code of the closing handshake
    /// (the server's, or ours when we closed first), or nil when the connection ended without a
    /// close frame (a drop, `abort()`; what RFC 6455 calls 1006, which never travels on the wire).
    case closed(code: UInt16?, reason: String)
    /// The WebSocket never opened. `status` is the HTTP status of a refused upgrade (401, 403,
    /// 409…) and `code` its `problem-code` header when it had one; without a status, `code` is a
    /// `ClientFailureCode` when the transport knows the cause (a certificate check, an unusable
    /// CA file, a transport that cannot do WebSockets).
    case failed(status: Int?, code: String?, message: String)

    /// True for `closed` and `failed`, the events that end the socket.
    var isTerminal: Bool {
        switch self {
        case .closed, .failed: return true
        case .open, .text: return false
        }
    }
}

/// One client WebSocket of a `ClientTransport`. Every method may be called from any thread and
/// returns at once; their effects show as `TransportEvent`s.
protocol TransportSocket: AnyObject, Sendable {
    /// Sends a text message; queued until `open`, dropped after `close` or `abort`.
    func send(text: String)
    /// Starts the closing handshake after the queued messages; the terminal event is
    /// `closed(code:reason:)` with this code, or the server's if it closed first.
    func close(code: UInt16, reason: String)
    /// Drops the connection without a close frame; the terminal event is `closed(code: nil, …)`,
    /// or `failed` when it never opened.
    func abort()
    /// Stops reading: the server's messages back up on its side (tests make acks late with it).
    func pauseReading()
    /// Reads again after `pauseReading`.
    func resumeReading()
}

/// The seam between the client sessions and the network: WebSockets for `/v1/ws` and
/// `/v1/presence`, HTTP requests for REST. Linux runs on the libwebsockets client
/// (`WebSocketClientLoop`), Apple platforms on URLSession (`URLSessionWebSocketTransport`); both
/// keep the contract of `TransportEvent`.
protocol ClientTransport: AnyObject, Sendable {
    /// Opens `ws(s)://host:port/path` (the path may carry `?query`) with `headers` on the upgrade
    /// request (`Authorization: Bearer …`); `tls` non-nil means `wss://`, verified as it says.
    /// `onEvent` gets every event of the socket, in order, one call at a time, and must not block.
    func openSocket(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?,
                    onEvent: @escaping @Sendable (TransportEvent) -> Void) -> any TransportSocket

    /// One HTTP/1.1 request (`https://` when `tls` is non-nil). Redirects are returned, not
    /// followed. Throws `HTTPClientError` when no complete answer arrived within `timeout`.
    func request(_ method: String, host: String, port: Int, path: String, headers: [String: String], body: [UInt8],
                 tls: TLSClientOptions?, timeout: TimeInterval) async throws(HTTPClientError) -> HTTPClientResponse
}
