// The client's URL, TLS and failure types live in CallingEndpoints so the SDK can use them without
// libwebsockets (Apple platforms); every user of this adapter keeps seeing them here.
@_exported import CallingEndpoints
