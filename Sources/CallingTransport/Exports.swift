// The server part of the transport builds on the lws adapter's shared pieces (messages, TLS
// options, the client loop); its users see them as its own (docs/architecture.md).
@_exported import CallingWebSocket
