import CSQLite

/// Why a `ChatStore` operation failed.
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// SQLite refused: disk full, I/O error, another process holding the lock past the busy timeout, …
    case sqlite(SQLiteError)
    /// The store was closed before the operation ran.
    case closed

    /// Whether the same request may succeed later (lock contention, a full disk that gets cleaned up),
    /// as opposed to never (store closed, broken database). Maps to a temporary wire error.
    public var isRetryable: Bool {
        switch self {
        case .sqlite(let error):
            error.isBusy || error.code == SQLITE_FULL || error.code == SQLITE_IOERR || error.code == SQLITE_NOMEM
        case .closed:
            false
        }
    }

    public var description: String {
        switch self {
        case .sqlite(let error): "store: \(error)"
        case .closed: "store: closed"
        }
    }

    /// Everything the repositories throw is a `SQLiteError` or a `StoreError`; anything else would be a
    /// programmer error, reported as a generic SQLite error rather than crashing the server.
    init(_ error: any Error) {
        switch error {
        case let error as StoreError: self = error
        case let error as SQLiteError: self = .sqlite(error)
        default: self = .sqlite(SQLiteError(code: SQLITE_ERROR, message: String(describing: error)))
        }
    }
}
