#if canImport(CallingWebSocket)
import CallingEndpoints
import CallingWebSocket
import Foundation

/// The Linux transport: the libwebsockets client loop. Its `request` already has the seam's
/// signature; sockets are its connections, their events mapped one to one.
extension WebSocketClientLoop: ClientTransport {
    func openSocket(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?,
                    onEvent: @escaping @Sendable (TransportEvent) -> Void) -> any TransportSocket
    {
        LWSTransportSocket(connect(host: host, port: port, path: path, headers: headers, tls: tls) { event in
            if let mapped = LWSTransportSocket.event(event) { onEvent(mapped) }
        })
    }
}

/// A `WebSocketClientConnection` as a `TransportSocket`.
final class LWSTransportSocket: TransportSocket {
    let connection: WebSocketClientConnection

    init(_ connection: WebSocketClientConnection) {
        self.connection = connection
    }

    /// The seam's event for an lws event; nil for binary messages, which no session reads.
    static func event(_ event: WebSocketClientEvent) -> TransportEvent? {
        switch event {
        case .open: .open
        case .text(let text): .text(text)
        case .binary: nil
        case .closed(let code, let reason): .closed(code: code, reason: reason)
        case .failed(let status, let code, let message): .failed(status: status, code: code, message: message)
        }
    }

    func send(text: String) { connection.send(text: text) }
    func close(code: UInt16, reason: String) { connection.close(code: code, reason: reason) }
    func abort() { connection.abort() }
    func pauseReading() { connection.pauseReading() }
    func resumeReading() { connection.resumeReading() }
}
#endif
