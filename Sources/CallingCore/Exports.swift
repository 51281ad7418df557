// CallingCore's users see the protocol and the logger as their own (docs/architecture.md).
@_exported import CallingLogging
@_exported import CallingProtocol
