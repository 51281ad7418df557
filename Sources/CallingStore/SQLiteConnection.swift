import CSQLite
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// One SQLite database connection, owning its `sqlite3*` and closing it exactly once.
///
/// Opened in SQLite's multi-thread mode (`SQLITE_OPEN_NOMUTEX`): SQLite does no locking of its own on
/// the connection, so it must only be used from one thread or serial queue at a time. The type is not
/// `Sendable`, which lets the compiler enforce that; `ChatStore` keeps its connection on its own queue.
///
/// Every connection is configured the same way: WAL journal (readers never block the writer),
/// `synchronous=NORMAL` (in WAL mode a commit is durable against a process crash and only an OS crash or
/// power cut can lose the last transactions; FULL costs about 9x in insert rate here), a busy timeout
/// (another process such as `calling-server migrate` may hold the write lock briefly), and
/// `foreign_keys=ON` (SQLite's default is off, per connection).
public final class SQLiteConnection {
    public struct Options: Sendable, Equatable {
        /// How long a statement waits for another connection's lock before failing with `SQLITE_BUSY`.
        public var busyTimeoutMs: Int32
        /// Open without write access (and without creating the file), e.g. for inspection tools.
        public var readOnly: Bool

        public init(busyTimeoutMs: Int32 = 5_000, readOnly: Bool = false) {
            self.busyTimeoutMs = busyTimeoutMs
            self.readOnly = readOnly
        }
    }

    /// How a transaction takes its locks.
    public enum TransactionKind: String, Sendable {
        /// Takes the read snapshot at the first read and the write lock at the first write. Right for
        /// read-only transactions; a write after a read can fail with `SQLITE_BUSY` without waiting.
        case deferred = "BEGIN DEFERRED"
        /// Takes the write lock up front (waiting up to the busy timeout), so a read-then-write transaction
        /// such as "read last_seq, insert last_seq + 1" can never lose a race to another writer.
        case immediate = "BEGIN IMMEDIATE"
    }

    /// The path given at open.
    public let path: String
    /// `nil` once closed. Only `close()` releases it, and `close()` clears it, so it is closed exactly once.
    private var handle: OpaquePointer?
    /// Prepared statements by SQL text. Keys are the fixed SQL strings of the repositories (values are
    /// bound, never interpolated), so the cache stays as small as the set of queries in the code.
    private var statementCache: [String: Statement] = [:]
    /// Prepared statements by `SQLiteStatementKey` identity. The keys are long-lived (static) objects,
    /// so an identifier is never reused for another key while its statement is cached.
    private var keyedStatementCache: [ObjectIdentifier: Statement] = [:]
    /// Kept alive here while SQLite holds it, unretained, as the WAL hook's context.
    private var walHook: WALHook?

    /// Opens (creating if needed, unless read-only) the database at `path` and configures it.
    public init(path: String, options: Options = Options()) throws {
        self.path = path
        var db: OpaquePointer?
        let access = options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        _ = sqliteConfigured
        let resultCode = sqlite3_open_v2(path, &db, access | SQLITE_OPEN_NOMUTEX, nil)
        // Even a failed open usually returns a handle (so the message can be read); it must still be closed.
        handle = db
        guard let db else { throw SQLiteError(code: SQLITE_NOMEM, message: "out of memory opening \(path)") }
        do {
            try check(resultCode, db: db)
        } catch {
            throw Self.diagnosed(error, path: path, readOnly: options.readOnly)
        }
        // Report SQLITE_CONSTRAINT_UNIQUE rather than just SQLITE_CONSTRAINT, SQLITE_IOERR_FSYNC rather
        // than SQLITE_IOERR: the operator needs to know which.
        sqlite3_extended_result_codes(db, 1)
        do {
            try configure(options: options)
        } catch let error as SQLiteError {
            throw Self.diagnosed(error, path: path, readOnly: options.readOnly)
        }
        // If anything above threw, deinit runs (all stored properties are set) and closes the handle.
    }

    /// Busy timeout, WAL, synchronous and foreign keys; see the type's comment.
    private func configure(options: Options) throws {
        guard let db = handle else { throw SQLiteError.misuse("connection to \(path) is closed") }
        // Busy timeout first: switching to WAL needs a lock that another process may hold.
        try check(sqlite3_busy_timeout(db, options.busyTimeoutMs), db: db)
        if !options.readOnly {
            let mode = try switchToWAL(timeoutMs: options.busyTimeoutMs)
            // An in-memory database reports "memory" and cannot use WAL; any file database must.
            if mode?.lowercased() != "wal", !Self.isInMemory(path) {
                throw SQLiteError(code: SQLITE_CANTOPEN, message: "could not enable WAL (journal_mode is \(mode ?? "?"))",
                                  path: path)
            }
        }
        try execute("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
    }

    /// A failure to set up a file the process cannot write says why. SQLite opens a file it may not
    /// write read-only without complaint, and then fails to create its `-wal` file with an errno of
    /// its last attempt (often ENOENT), so the cause is asked of the file system: EROFS for a
    /// read-only mount, EACCES for missing permissions.
    private static func diagnosed(_ error: SQLiteError, path: String, readOnly: Bool) -> SQLiteError {
        guard !readOnly, !isInMemory(path),
              [SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_IOERR, SQLITE_PERM].contains(error.code) else { return error.naming(path) }
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        var message = error.message
        var cause = error.systemErrno
        if access(path, W_OK) != 0, errno != ENOENT {
            cause = errno
            message += "; the file is not writable"
        } else if access(directory.isEmpty ? "/" : directory, W_OK) != 0 {
            cause = errno
            message += "; its directory \(directory) is not writable"
        }
        return SQLiteError(code: error.extendedCode, message: message, sql: error.sql, path: path, systemErrno: cause)
    }

    deinit { close() }

    /// `PRAGMA journal_mode = WAL`, retried while it reports SQLITE_BUSY. Two processes opening a
    /// fresh database at once (a `migrate` beside a starting server) can both hold a shared lock and
    /// both need an exclusive one to switch; SQLite then answers BUSY at once, without calling the
    /// busy handler, since waiting could deadlock. One of them has switched a moment later.
    private func switchToWAL(timeoutMs: Int32) throws -> String? {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeoutMs)) * 1_000_000
        while true {
            do {
                return try queryFirst("PRAGMA journal_mode = WAL") { $0.text(0) }
            } catch let error as SQLiteError where error.code == SQLITE_BUSY && DispatchTime.now().uptimeNanoseconds < deadline {
                usleep(2_000)
            }
        }
    }

    static func isInMemory(_ path: String) -> Bool {
        path.isEmpty || path == ":memory:" || path.hasPrefix("file::memory:")
    }

    /// `false` after `close()`.
    public var isOpen: Bool { handle != nil }

    /// Finalizes cached statements and closes the connection. Idempotent.
    ///
    /// Uses `sqlite3_close_v2`: if a caller still holds an uncached `Statement`, the connection becomes a
    /// zombie that SQLite frees when that statement is finalized, instead of the close failing and leaking.
    public func close() {
        guard let db = handle else { return }
        for statement in statementCache.values { statement.finalize() }
        statementCache.removeAll()
        for statement in keyedStatementCache.values { statement.finalize() }
        keyedStatementCache.removeAll()
        if walHook != nil { sqlite3_wal_hook(db, nil, nil) }
        walHook = nil
        handle = nil
        // close_v2 only fails for a handle that is not a connection, which `handle` cannot be.
        sqlite3_close_v2(db)
    }

    private func live() throws(SQLiteError) -> OpaquePointer {
        guard let handle else { throw .misuse("connection to \(path) is closed") }
        return handle
    }

    // MARK: Statements

    /// Compiles a statement owned by the caller (not cached). For one-off queries.
    public func prepare(_ sql: String) throws(SQLiteError) -> Statement {
        try Statement(db: live(), sql: sql, persistent: false)
    }

    /// The cached statement for `sql`, compiled on first use, reset and with bindings cleared.
    ///
    /// Do not nest two uses of the same SQL (e.g. run a query inside the row loop of the same query):
    /// they share one statement, and the inner use would reset the outer.
    public func cachedStatement(_ sql: String) throws(SQLiteError) -> Statement {
        let db = try live()
        if let statement = statementCache[sql] {
            statement.reset()
            return statement
        }
        let statement = try Statement(db: db, sql: sql, persistent: true)
        statementCache[sql] = statement
        return statement
    }

    /// The cached statement for `key`, like `cachedStatement(_:)` but found by the key's identity
    /// instead of by hashing its SQL text: for long generated SQL (the multi-row chat insert), where
    /// hashing the text on every lookup was a visible share of each row's cost.
    public func cachedStatement(_ key: SQLiteStatementKey) throws(SQLiteError) -> Statement {
        let db = try live()
        if let statement = keyedStatementCache[ObjectIdentifier(key)] {
            // Reset, but its bindings left for the caller to overwrite: the multi-row chat insert
            // binds every parameter, resets (and clears) after its step, and clearing its hundreds
            // of parameters a second time here was pure waste.
            statement.rewind()
            return statement
        }
        let statement = try Statement(db: db, sql: key.sql, persistent: true)
        keyedStatementCache[ObjectIdentifier(key)] = statement
        return statement
    }

    /// Number of statements in the cache; for tests and diagnostics.
    public var cachedStatementCount: Int { statementCache.count }

    /// Runs one statement that returns no rows (INSERT, UPDATE, DELETE, DDL) through the cache.
    public func run(_ sql: String, _ values: [SQLiteValue] = []) throws(SQLiteError) {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        while try statement.step() {}
    }

    /// Runs one query through the cache and maps every row.
    public func query<Row>(
        _ sql: String, _ values: [SQLiteValue] = [], row: (Statement) throws -> Row
    ) throws -> [Row] {
        let statement = try cachedStatement(sql)
        // Reset even when `row` throws half-way: an unfinished SELECT holds a read transaction open.
        defer { statement.reset() }
        try statement.bind(values)
        var rows: [Row] = []
        while try statement.step() { rows.append(try row(statement)) }
        return rows
    }

    /// Runs one query through the cache and maps its first row, if any.
    public func queryFirst<Row>(
        _ sql: String, _ values: [SQLiteValue] = [], row: (Statement) throws -> Row
    ) throws -> Row? {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        return try statement.step() ? row(statement) : nil
    }

    /// Runs a script of zero or more statements without bindings (migrations, pragmas).
    public func execute(_ script: String) throws(SQLiteError) {
        let db = try live()
        try check(sqlite3_exec(db, script, nil, nil, nil), db: db)
    }

    /// Rows changed by every INSERT, UPDATE and DELETE since the connection opened: an operation that
    /// moved it has written.
    public var totalChanges: Int64 {
        handle.map { sqlite3_total_changes64($0) } ?? 0
    }

    /// `PRAGMA quick_check`: SQLite's check of every page and b-tree of the file, without the index
    /// cross-checks of `integrity_check`. Reads the whole file once (its cost at start:
    /// docs/operations.md, "Integrity check at start"). Returns SQLite's findings, empty when the
    /// file is sound; at most `limit` of them.
    public func quickCheck(limit: Int = 20) throws -> [String] {
        // PRAGMA takes no bound parameters; `limit` is an Int, so interpolation cannot inject SQL.
        let statement = try prepare("PRAGMA quick_check(\(max(1, limit)))")
        defer { statement.finalize() }
        var lines: [String] = []
        // One finding can span lines ("*** in database main ***\nOn tree page 268 …"); one per line,
        // so that a log line made of them stays one line.
        while try statement.step() {
            lines += statement.text(0).split(whereSeparator: \.isNewline).map(String.init).filter { !$0.hasPrefix("***") }
        }
        return lines == ["ok"] ? [] : lines
    }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE.
    public var changes: Int64 {
        handle.map { sqlite3_changes64($0) } ?? 0
    }

    // MARK: Transactions

    /// `true` while a transaction is open.
    public var isInTransaction: Bool {
        handle.map { sqlite3_get_autocommit($0) == 0 } ?? false
    }

    /// Runs `body` in a transaction: COMMIT if it returns, ROLLBACK if it (or the COMMIT) throws.
    /// Not reentrant: SQLite has no nested BEGIN (use SAVEPOINT for that).
    public func transaction<Result>(_ kind: TransactionKind = .deferred, _ body: () throws -> Result) throws -> Result {
        // BEGIN and COMMIT as cached statements: `execute` (sqlite3_exec) parses them anew each
        // time, and a join's room summary runs two.
        try run(kind.rawValue)
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            // Some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, a failed COMMIT) make SQLite roll back
            // on its own; a second ROLLBACK would then fail and hide the original error.
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    // MARK: WAL

    /// Replaces SQLite's automatic checkpoint, which runs inside the COMMIT that takes the WAL past
    /// `wal_autocheckpoint` pages (with two fsyncs, on the committing thread), with `handler`. It is
    /// called right after every commit on this connection, on the committing thread, with the WAL's
    /// size in pages; it must be quick.
    public func onCommitToWAL(_ handler: @escaping (Int) -> Void) throws(SQLiteError) {
        let db = try live()
        let hook = WALHook(handler: handler)
        walHook = hook
        sqlite3_wal_hook(db, walHookEntry, Unmanaged.passUnretained(hook).toOpaque())
    }

    /// A PASSIVE checkpoint: copies what it can from the WAL into the database file without waiting
    /// for, or blocking, the writer or any reader. What it cannot copy yet stays for the next one.
    public func checkpointPassive() throws(SQLiteError) {
        let db = try live()
        try check(sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil), db: db)
    }

    // MARK: Online backup

    /// Copies this database into a new file at `path` with SQLite's online backup API
    /// (`sqlite3_backup_init/step/finish`, https://sqlite.org/backup.html) while other connections,
    /// in this process or another, keep writing.
    ///
    /// All pages are copied in one `sqlite3_backup_step(-1)`, i.e. inside one read transaction: in WAL
    /// mode that snapshot does not block writers, and it cannot be restarted by their commits (which
    /// a step-by-step copy would be, over and over, on a busy server). The copy is therefore exactly
    /// the database as of one commit. It is written to `path + ".partial"`, fsynced, and renamed over
    /// `path`, so `path` is never a half-written database.
    /// - Returns: the number of pages copied.
    @discardableResult
    public func backup(to path: String) throws -> Int {
        let source = try live()
        let partial = path + ".partial"
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(partial + suffix) }
        var opening: OpaquePointer?
        let opened = sqlite3_open_v2(partial, &opening, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard let target = opening else { throw SQLiteError(code: SQLITE_NOMEM, message: "out of memory opening \(partial)") }
        var targetOpen = true
        defer { if targetOpen { sqlite3_close_v2(target) } }
        try check(opened, db: target)
        guard let backup = sqlite3_backup_init(target, "main", source, "main") else {
            try check(sqlite3_errcode(target), db: target)
            throw SQLiteError(code: SQLITE_ERROR, message: "sqlite3_backup_init failed for \(partial)")
        }
        var step: Int32
        repeat {
            step = sqlite3_backup_step(backup, -1)
            // Only with a busy_timeout of 0 elsewhere; the source's busy handler is not used by backup_step.
            if step == SQLITE_BUSY || step == SQLITE_LOCKED { usleep(10_000) }
        } while step == SQLITE_BUSY || step == SQLITE_LOCKED
        let pages = Int(sqlite3_backup_pagecount(backup))
        let finished = sqlite3_backup_finish(backup)
        if step != SQLITE_DONE {
            unlink(partial)
            try check(step, db: target)
        }
        try check(finished, db: target)
        // The copy carries the source's WAL flag; a rollback-journal file is one self-contained file
        // that opens read-only anywhere (the server switches it back to WAL when it opens it).
        try check(sqlite3_exec(target, "PRAGMA journal_mode = DELETE", nil, nil, nil), db: target)
        sqlite3_close_v2(target)
        targetOpen = false
        let fd = open(partial, O_RDONLY)
        if fd >= 0 {
            fsync(fd)
            Glibc.close(fd)
        }
        for suffix in ["-wal", "-shm"] { unlink(partial + suffix) }
        guard rename(partial, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(partial)
            throw SQLiteError(code: SQLITE_CANTOPEN, message: "cannot rename \(partial) to \(path): \(reason)")
        }
        return pages
    }

    // MARK: Pragmas

    /// `PRAGMA user_version`: the number of the last schema migration applied (see `Migrator`).
    public func userVersion() throws -> Int {
        Int(try queryFirst("PRAGMA user_version") { $0.int64(0) } ?? 0)
    }

    /// Sets `PRAGMA user_version`. Transactional: rolled back with the transaction it runs in.
    public func setUserVersion(_ version: Int) throws(SQLiteError) {
        // PRAGMA takes no bound parameters; `version` is an Int, so interpolation cannot inject SQL.
        try execute("PRAGMA user_version = \(version)")
    }
}

// The connection is opened in multi-thread mode and must stay on one thread or serial queue; see the type
// comment. Spelled out so that nobody adds a conformance by accident.
@available(*, unavailable)
extension SQLiteConnection: Sendable {}

/// The WAL hook's handler, owned by its connection.
private final class WALHook {
    let handler: (Int) -> Void
    init(handler: @escaping (Int) -> Void) { self.handler = handler }
}

/// The C entry point of `sqlite3_wal_hook`. SQLite calls it on the committing thread; the context is
/// the connection's `WALHook`, passed unretained: the connection keeps it alive and unregisters it
/// before it is released (`close`).
private func walHookEntry(
    _ context: UnsafeMutableRawPointer?, _ db: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ pages: Int32
) -> Int32 {
    if let context { Unmanaged<WALHook>.fromOpaque(context).takeUnretainedValue().handler(Int(pages)) }
    return SQLITE_OK
}

/// The identity of one SQL statement for `SQLiteConnection.cachedStatement(_:)`: keep it for the
/// life of the process (a `static let`), one per SQL text.
public final class SQLiteStatementKey: Sendable {
    /// The SQL it compiles.
    public let sql: String

    public init(_ sql: String) {
        self.sql = sql
    }
}

/// Process-wide SQLite settings, applied once before the first connection opens (a global is
/// initialized lazily and exactly once, also when two threads open at the same time).
///
/// Memory statistics off: nothing here reads `sqlite3_memory_used` or `sqlite3_status`, and with them
/// on every SQLite allocation takes a global mutex (several per stored chat,
/// with the allocations of a row insert). Failure (SQLite already initialized by someone else)
/// changes nothing and is harmless.
private let sqliteConfigured: Void = {
    _ = cs_sqlite_disable_memstatus()
}()
