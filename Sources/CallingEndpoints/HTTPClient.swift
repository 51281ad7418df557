import Foundation

/// The answer to an HTTP request of a client transport (`WebSocketClientLoop.request`, or
/// URLSession in the SDK).
public struct HTTPClientResponse: Sendable, Equatable {
    /// The HTTP status code.
    public var status: Int
    /// Lower-cased names. The lws client fills in only the headers of its `capturedTokens` (lws
    /// 4.1.6 reads a client response's headers by known token only).
    public var headers: [String: String]
    /// The body, as received.
    public var body: [UInt8]

    /// A response as a transport read it.
    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// An HTTP request that got no complete answer.
public struct HTTPClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What happened, for people.
    public var message: String
    /// A `ClientFailureCode` when the client knows the cause (a certificate check, the CA file).
    public var code: String?
    /// A failure with an optional `ClientFailureCode`.
    public init(message: String, code: String? = nil) {
        self.message = message
        self.code = code
    }
    /// The message.
    public var description: String { message }
}

