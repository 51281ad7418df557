import CSQLite
#if canImport(Glibc)
import Glibc
#endif

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
    /// The database file the failing connection had open, when known: an operator reading
    /// "unable to open database file" needs to know which one.
    public let path: String?
    /// The `errno` of the operating-system call behind an I/O, open or full-disk failure
    /// (`sqlite3_system_errno`: EACCES, EROFS, ENOSPC, …); 0 when SQLite did not fail in a system call.
    public let systemErrno: Int32

    public init(code: Int32, extendedCode: Int32? = nil, message: String, sql: String? = nil, path: String? = nil,
                systemErrno: Int32 = 0)
    {
        self.code = code & 0xFF
        self.extendedCode = extendedCode ?? code
        self.message = message
        self.sql = sql
        self.path = path
        self.systemErrno = systemErrno
    }

    /// Another connection (another process, e.g. `calling-server migrate`) held a lock for longer than
    /// the busy timeout. Trying again later can succeed.
    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }

    /// The same error naming `path`, unless it names a file already (a failed open has none yet).
    func naming(_ path: String) -> SQLiteError {
        guard self.path == nil, !SQLiteConnection.isInMemory(path) else { return self }
        return SQLiteError(code: extendedCode, extendedCode: extendedCode, message: message, sql: sql, path: path,
                           systemErrno: systemErrno)
    }

    /// The database file is damaged (`SQLITE_CORRUPT`) or is not a database (`SQLITE_NOTADB`).
    public var isDamage: Bool { code == SQLITE_CORRUPT || code == SQLITE_NOTADB }

    /// The operating system's cause, e.g. `EROFS (Read-only file system)`; nil without one.
    public var cause: String? {
        guard systemErrno != 0 else { return nil }
        let text = String(cString: strerror(systemErrno))
        guard let name = Self.errnoNames[systemErrno] else { return "errno \(systemErrno) (\(text))" }
        return "\(name) (\(text))"
    }

    /// A short stable name of the failure for logs and metrics: `disk_full`, `io_error`, `read_only`,
    /// `cannot_open`, `permission`, `damaged`, `busy`, `constraint`, `no_memory` or `other`.
    public var kind: String {
        switch code {
        case SQLITE_FULL: "disk_full"
        case SQLITE_IOERR: "io_error"
        case SQLITE_READONLY: "read_only"
        case SQLITE_CANTOPEN: "cannot_open"
        case SQLITE_PERM, SQLITE_AUTH: "permission"
        case SQLITE_CORRUPT, SQLITE_NOTADB: "damaged"
        case SQLITE_BUSY, SQLITE_LOCKED: "busy"
        case SQLITE_CONSTRAINT: "constraint"
        case SQLITE_NOMEM: "no_memory"
        default: "other"
        }
    }

    /// The errno values a store on a local disk meets, by their POSIX names.
    private static let errnoNames: [Int32: String] = [
        EACCES: "EACCES", EPERM: "EPERM", EROFS: "EROFS", ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", EIO: "EIO",
        ENOENT: "ENOENT", ENOTDIR: "ENOTDIR", EFBIG: "EFBIG", EISDIR: "EISDIR", ENOMEM: "ENOMEM", EMFILE: "EMFILE",
        ENFILE: "ENFILE", ELOOP: "ELOOP", ENAMETOOLONG: "ENAMETOOLONG", EAGAIN: "EAGAIN", EBUSY: "EBUSY",
    ]

    public var description: String {
        var text = "SQLite error \(extendedCode): \(message)"
        if let path { text += " (file \(path)" + (cause.map { ": " + $0 } ?? "") + ")" } else if let cause { text += " (\(cause))" }
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
        var path: String?
        var systemErrno: Int32 = 0
        if let db {
            // An empty name is a temporary or in-memory database: nothing an operator can look at.
            if let name = sqlite3_db_filename(db, "main"), name.pointee != 0 { path = String(cString: name) }
            // Only for the codes that come from a system call: for the others the value would be stale,
            // left by some earlier, unrelated failure.
            switch resultCode & 0xFF {
            case SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_FULL, SQLITE_READONLY, SQLITE_PERM:
                systemErrno = sqlite3_system_errno(db)
                // SQLite's unix VFS clears the errno of a short write ("not a system error") and
                // reports SQLITE_FULL, which it uses for nothing else on a file without a
                // max_page_count: the file system said ENOSPC.
                if resultCode & 0xFF == SQLITE_FULL, systemErrno == 0 { systemErrno = ENOSPC }
            default:
                break
            }
        }
        throw SQLiteError(code: resultCode, message: message, sql: sql, path: path, systemErrno: systemErrno)
    }
}
