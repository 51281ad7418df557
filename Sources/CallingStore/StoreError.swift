import CSQLite

/// Why a `ChatStore` operation failed.
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// SQLite refused: disk full, I/O error, another process holding the lock past the busy timeout, …
    case sqlite(SQLiteError)
    /// The store was closed before the operation ran.
    case closed
    /// A database server (PostgreSQL, `database_url`) refused the operation or could not be reached.
    case server(DatabaseServerError)
    /// The database file at `path` failed the integrity check at open (`PRAGMA quick_check`), or SQLite
    /// found it damaged or not a database while opening it. `findings` are SQLite's own lines. Never
    /// retryable: the file must be restored from a backup.
    case damaged(path: String, findings: [String])

    /// Whether the same request may succeed later (lock contention, a full disk that gets cleaned up),
    /// as opposed to never (store closed, broken database). Maps to a temporary wire error.
    public var isRetryable: Bool {
        switch self {
        case .sqlite(let error):
            error.isBusy || error.code == SQLITE_FULL || error.code == SQLITE_IOERR || error.code == SQLITE_NOMEM
        case .closed, .damaged:
            false
        case .server(let error):
            error.isRetryable
        }
    }

    /// A short stable name of the failure for logs: `SQLiteError.kind`, `closed`, `damaged` or `database_server`.
    public var kind: String {
        switch self {
        case .sqlite(let error): error.kind
        case .closed: "closed"
        case .damaged: "damaged"
        case .server: "database_server"
        }
    }

    public var description: String {
        switch self {
        case .sqlite(let error): "store: \(error)"
        case .closed: "store: closed"
        case .server(let error): "store: \(error)"
        case .damaged(let path, let findings): "store: \(path) is damaged: \(findings.joined(separator: "; "))"
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

/// What a database server said when it refused an operation, or why it could not be reached. Built by
/// the adapter of that server (CallingPostgres), so this module stays free of its C library.
public struct DatabaseServerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The server's error code (PostgreSQL's five-character SQLSTATE); empty when there was no answer
    /// (connection refused or lost).
    public var code: String
    public var message: String
    /// The same request may succeed later: the server is down or restarting, a deadlock or
    /// serialization failure, resources exhausted. False for a constraint or syntax error.
    public var isRetryable: Bool

    public init(code: String, message: String, isRetryable: Bool) {
        self.code = code
        self.message = message
        self.isRetryable = isRetryable
    }

    public var description: String {
        code.isEmpty ? "database server: \(message)" : "database server: \(message) (SQLSTATE \(code))"
    }
}
