@_exported import CallingProtocol
