import CallingEndpoints
import CallingProtocol

/// The one WebSocket a client session has at a time, opened, written and closed as the session's
/// actions say. `SignalingClient` and `PresenceClient` each own one and touch it only under their
/// driver's lock, as they touch the session.
final class SessionSocket {
    private let transport: any ClientTransport
    private let endpoint: Result<ClientEndpoint, CallingError>
    private let tls: TLSClientOptions
    private(set) var connection: (any TransportSocket)?

    init(transport: any ClientTransport, endpoint: Result<ClientEndpoint, CallingError>, tls: TLSClientOptions) {
        self.transport = transport
        self.endpoint = endpoint
        self.tls = tls
    }

    /// Aborts the current socket and opens one to `path` with `token`. `onEvent` runs on the
    /// transport's thread, one call per event, in order. An endpoint the SDK cannot serve opens
    /// nothing: `connect()` has thrown that already.
    func open(path: String, token: String, onEvent: @escaping @Sendable (TransportEvent) -> Void) {
        abort()
        guard case .success(let endpoint) = endpoint else { return }
        connection = transport.openSocket(host: endpoint.host, port: endpoint.port, path: path,
                                          headers: ["Authorization": "Bearer \(token)"],
                                          tls: endpoint.usesTLS ? tls : nil, onEvent: onEvent)
    }

    func close(code: UInt16, reason: String) {
        connection?.close(code: code, reason: reason)
    }

    func abort() {
        connection?.abort()
        connection = nil
    }

    func send(_ frame: Frame) {
        // The writer's JSON is valid UTF-8, so the text is the frame's bytes unchanged.
        connection?.send(text: String(decoding: frame.encoded(), as: UTF8.self))
    }

    /// The socket ended by itself (closed or failed): nothing is left to close.
    func ended() {
        connection = nil
    }
}
