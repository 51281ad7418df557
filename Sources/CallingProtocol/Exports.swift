// The value types the wire protocol and the SDK share (docs/architecture.md): every user of the
// protocol sees them as its own.
@_exported import CallingValues
