import CSQLite

/// A value bound to a `?` parameter.
public enum SQLiteValue: Sendable, Hashable {
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
    case null

    /// `.text`, or `.null` for `nil`: the common shape of an optional column such as `meta`.
    public init(_ text: String?) {
        self = text.map(SQLiteValue.text) ?? .null
    }
}

/// One compiled SQL statement, owning its `sqlite3_stmt*` and finalizing it exactly once.
///
/// Not `Sendable`: a statement belongs to its connection, and a connection to one thread or serial queue.
public final class Statement {
    /// The SQL text it was compiled from (one statement).
    public let sql: String
    /// `nil` once finalized. Only `finalize()` and `deinit` release it, and both go through `finalize()`,
    /// which clears it, so it is released exactly once.
    private var handle: OpaquePointer?

    /// Compiles `sql`. `persistent` hints SQLite that the statement will be reused many times (the
    /// connection's statement cache), so it allocates from the heap instead of lookaside memory.
    init(db: OpaquePointer, sql: String, persistent: Bool) throws(SQLiteError) {
        self.sql = sql
        var compiled: OpaquePointer?
        var trailing = ""
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let resultCode = sql.withCString { text -> Int32 in
            var tail: UnsafePointer<CChar>?
            let resultCode = sqlite3_prepare_v3(db, text, -1, flags, &compiled, &tail)
            if resultCode == SQLITE_OK, let tail { trailing = String(cString: tail) }
            return resultCode
        }
        try check(resultCode, db: db, sql: sql)
        guard let compiled else {
            // SQLite compiles blank input or a lone comment to "no statement" without an error.
            throw .misuse("no SQL statement", sql: sql)
        }
        handle = compiled
        // sqlite3_prepare compiles only the first statement and silently ignores the rest; a second
        // statement here is a programmer error that would otherwise never run. Scripts go through
        // `SQLiteConnection.execute(_:)`.
        let rest = trailing.drop { $0.isWhitespace || $0 == ";" }
        if !rest.isEmpty {
            finalize()
            throw .misuse("more than one SQL statement; use execute(_:) for scripts", sql: sql)
        }
    }

    deinit { finalize() }

    /// Releases the compiled statement. Safe to call more than once; the statement is unusable afterwards.
    func finalize() {
        if let handle {
            // sqlite3_finalize repeats the error of the most recent step, which was already reported.
            sqlite3_finalize(handle)
            self.handle = nil
        }
    }

    private func live() throws(SQLiteError) -> OpaquePointer {
        guard let handle else { throw .misuse("statement used after its connection was closed", sql: sql) }
        return handle
    }

    /// Resets the statement so it can run again, and clears its bindings.
    ///
    /// Resetting also matters when a SELECT is abandoned before `SQLITE_DONE`: until it is reset, it keeps
    /// a read transaction open, which pins the WAL and stops checkpoints.
    public func reset() {
        guard let handle else { return }
        // sqlite3_reset repeats the error of the most recent step, which the caller already saw.
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Resets the statement so it can run again, keeping its bindings: for a caller that binds every
    /// parameter before the next step.
    func rewind() {
        guard let handle else { return }
        sqlite3_reset(handle)
    }

    /// Binds one value to parameter `index` (1-based), without the array `bind(_:)` takes: the batch
    /// insert binds seven values per chat.
    public func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
        try bind(value, at: index, live())
    }

    /// Binds `text` to parameter `index` without SQLite copying it, for the duration of `body` only:
    /// the bytes are the string's own storage, which lives just as long as this call, so `body` must
    /// step the statement and read what it needs of its rows. On return the statement is reset and
    /// the parameter set to NULL, so the statement never holds a dangling pointer (`changes` of the
    /// connection still reports the step).
    /// `bind(_:at:)` with `.text` instead copies the bytes into a buffer SQLite allocates and frees
    /// per bind, four times per chat row.
    public func withText<Result>(
        _ text: String, at index: Int32, _ body: () throws(SQLiteError) -> Result
    ) throws(SQLiteError) -> Result {
        let handle = try live()
        var text = text
        let outcome: Swift.Result<Result, SQLiteError> = text.withUTF8 { bytes in
            // SQLite refuses a bind (SQLITE_MISUSE) to a statement that has been stepped and not reset.
            defer {
                sqlite3_reset(handle)
                sqlite3_bind_null(handle, index)
            }
            do throws(SQLiteError) {
                try bindTextInPlace(bytes, at: index)
                return .success(try body())
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Binds `bytes` (UTF-8) to parameter `index` without SQLite copying them. The caller must keep
    /// the bytes alive and unchanged until it has stepped the statement and called `reset()` (which
    /// clears every binding): the multi-row chat insert binds many rows' text from one buffer this way.
    public func bindTextInPlace(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int32) throws(SQLiteError) {
        let handle = try live()
        let resultCode: Int32
        if let start = bytes.baseAddress, bytes.count > 0 {
            resultCode = start.withMemoryRebound(to: CChar.self, capacity: bytes.count) { chars in
                sqlite3_bind_text64(handle, index, chars, UInt64(bytes.count), cs_sqlite_static(), UInt8(SQLITE_UTF8))
            }
        } else {
            resultCode = sqlite3_bind_text64(handle, index, "", 0, cs_sqlite_transient(), UInt8(SQLITE_UTF8))
        }
        if resultCode != SQLITE_OK { try check(resultCode, db: sqlite3_db_handle(handle), sql: sql) }
    }

    /// Binds `values` to parameters 1...n. The count must match the statement's parameters exactly:
    /// a missing value would otherwise silently become NULL.
    public func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        let handle = try live()
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard values.count == expected else {
            throw .misuse("statement has \(expected) parameters, \(values.count) values given", sql: sql)
        }
        for (offset, value) in values.enumerated() {
            try bind(value, at: Int32(offset + 1), handle)
        }
    }

    private func bind(_ value: SQLiteValue, at index: Int32, _ handle: OpaquePointer) throws(SQLiteError) {
        let resultCode: Int32
        switch value {
        case .integer(let number):
            resultCode = sqlite3_bind_int64(handle, index, number)
        case .real(let number):
            resultCode = sqlite3_bind_double(handle, index, number)
        case .null:
            resultCode = sqlite3_bind_null(handle, index)
        case .text(var text):
            // Explicit byte count: a Swift string may contain NUL, which a C string would cut short.
            // SQLITE_TRANSIENT makes SQLite copy the bytes, because the buffer only lives for this call.
            resultCode = text.withUTF8 { bytes in
                // An empty string may have no storage, and a nil pointer would bind NULL instead of "".
                guard let start = bytes.baseAddress, bytes.count > 0 else {
                    return sqlite3_bind_text64(handle, index, "", 0, cs_sqlite_transient(), UInt8(SQLITE_UTF8))
                }
                return start.withMemoryRebound(to: CChar.self, capacity: bytes.count) { chars in
                    sqlite3_bind_text64(handle, index, chars, UInt64(bytes.count), cs_sqlite_transient(), UInt8(SQLITE_UTF8))
                }
            }
        case .blob(let bytes):
            resultCode = bytes.withUnsafeBytes { raw in
                guard let start = raw.baseAddress, raw.count > 0 else {
                    return sqlite3_bind_zeroblob(handle, index, 0)
                }
                return sqlite3_bind_blob64(handle, index, start, UInt64(raw.count), cs_sqlite_transient())
            }
        }
        if resultCode != SQLITE_OK { try check(resultCode, db: sqlite3_db_handle(handle), sql: sql) }
    }

    /// Advances to the next row. Returns `true` when a row is available, `false` when the statement is done.
    @discardableResult
    public func step() throws(SQLiteError) -> Bool {
        let handle = try live()
        return try check(sqlite3_step(handle), db: sqlite3_db_handle(handle), sql: sql) == SQLITE_ROW
    }

    /// Number of columns in the result.
    public var columnCount: Int32 {
        handle.map { sqlite3_column_count($0) } ?? 0
    }

    /// Column accessors read the current row; they are valid only after `step()` returned `true`.
    private var row: OpaquePointer {
        guard let handle else { preconditionFailure("column read on a finalized statement: \(sql)") }
        return handle
    }

    public func isNull(_ column: Int32) -> Bool {
        sqlite3_column_type(row, column) == SQLITE_NULL
    }

    public func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(row, column)
    }

    public func optionalInt64(_ column: Int32) -> Int64? {
        isNull(column) ? nil : int64(column)
    }

    public func double(_ column: Int32) -> Double {
        sqlite3_column_double(row, column)
    }

    /// The column as text; NULL reads as "". Use `optionalText` where NULL means something.
    public func text(_ column: Int32) -> String {
        optionalText(column) ?? ""
    }

    public func optionalText(_ column: Int32) -> String? {
        let handle = row
        // Order matters: sqlite3_column_text first (it may convert the value), then the byte count.
        guard let start = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)
    }

    public func blob(_ column: Int32) -> [UInt8] {
        let handle = row
        guard let start = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        return Array(UnsafeRawBufferPointer(start: start, count: count))
    }
}

// A statement must stay on the thread or queue of its connection (SQLite is opened in multi-thread
// mode, see SQLiteConnection). Spelled out so that nobody adds a conformance by accident.
@available(*, unavailable)
extension Statement: Sendable {}
