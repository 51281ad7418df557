import CSQLite

/// A failed SQLite call: the result code plus SQLite's own explanation.
///
/// Only `SQLiteConnection`, `Statement` and `Migrator` produce it; domain code sees `StoreError`.
public struct SQLiteError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Primary result code (`SQLITE_BUSY`, `SQLITE_CONSTRAINT`, …).
    public let code: Int32
    /// Extended result code (`SQLITE_CONSTRAINT_UNIQUE`, `SQLITE_IOERR_FSYNC`, …); equals `code` when
    /// SQLite had nothing more specific to say.
    public let extendedCode: Int32
    /// `sqlite3_errmsg` at the time of the failure.
    public let message: String
    /// The statement that failed, when known. Safe to log: values are always bound, never interpolated.
    public let sql: String?

    public init(code: Int32, extendedCode: Int32? = nil, message: String, sql: String? = nil) {
        self.code = code & 0xFF
        self.extendedCode = extendedCode ?? code
        self.message = message
        self.sql = sql
    }

    /// Another connection (another process, e.g. `calling-server migrate`) held a lock for longer than
    /// the busy timeout. Trying again later can succeed.
    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }

    public var description: String {
        var text = "SQLite error \(extendedCode): \(message)"
        if let sql { text += " [\(sql)]" }
        return text
    }

    /// A misuse of this wrapper (use after close, wrong number of bindings), reported like SQLite
    /// reports its own misuse so callers have one error type to handle.
    static func misuse(_ message: String, sql: String? = nil) -> SQLiteError {
        SQLiteError(code: SQLITE_MISUSE, message: message, sql: sql)
    }
}

/// The single place where a SQLite result code becomes a Swift error.
///
/// `SQLITE_OK`, `SQLITE_ROW` and `SQLITE_DONE` are successes and are returned unchanged so callers of
/// `sqlite3_step` can tell a row from the end. Everything else throws, carrying `sqlite3_errmsg` of `db`
/// (which must be the connection the failing call ran on, and read before any other call on it, since
/// SQLite keeps only the most recent message), or `sqlite3_errstr` when there is no connection.
@discardableResult
func check(_ resultCode: Int32, db: OpaquePointer?, sql: String? = nil) throws(SQLiteError) -> Int32 {
    switch resultCode & 0xFF {
    case SQLITE_OK, SQLITE_ROW, SQLITE_DONE:
        return resultCode
    default:
        let message: String
        if let db, let text = sqlite3_errmsg(db) {
            message = String(cString: text)
        } else if let text = sqlite3_errstr(resultCode) {
            message = String(cString: text)
        } else {
            message = "unknown error"
        }
        throw SQLiteError(code: resultCode, message: message, sql: sql)
    }
}
