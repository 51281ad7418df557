import CPostgres
import CallingStore
import Foundation

/// Why a PostgreSQL call failed.
public struct PostgresError: Error, Equatable, Sendable, CustomStringConvertible {
    /// SQLSTATE (`23505` unique violation, `40P01` deadlock, …); empty when the server gave none
    /// (cannot connect, connection lost).
    public var sqlState: String
    public var message: String
    /// The connection is gone (refused, reset, server shut down); `PostgresConnection.reconnect` may help.
    public var connectionLost: Bool

    public init(sqlState: String, message: String, connectionLost: Bool) {
        self.sqlState = sqlState
        self.message = message
        self.connectionLost = connectionLost
    }

    /// Retrying may succeed: no connection, a deadlock or serialization failure (class 40), a server
    /// shutting down or starting (57P), resources exhausted (53), connection exceptions (08).
    public var isRetryable: Bool {
        connectionLost || sqlState.hasPrefix("40") || sqlState.hasPrefix("57P") || sqlState.hasPrefix("53")
            || sqlState.hasPrefix("08")
    }

    /// A deadlock or serialization failure: the transaction was rolled back and may simply be run again.
    var isTransactionConflict: Bool { sqlState == "40P01" || sqlState == "40001" }

    public var description: String {
        sqlState.isEmpty ? "postgres: \(message)" : "postgres: \(message) (SQLSTATE \(sqlState))"
    }

    /// The same failure for `StoreError`, whose module does not import libpq.
    public var storeError: StoreError {
        .server(DatabaseServerError(code: sqlState, message: message, isRetryable: isRetryable))
    }
}

/// Rows of one statement, read as text (the text result format: what psql shows).
public struct PostgresRows: Sendable {
    /// One array per row, one optional string per column (`nil` is SQL NULL).
    public var rows: [[String?]]

    public var isEmpty: Bool { rows.isEmpty }
    public var count: Int { rows.count }
    public subscript(row: Int) -> [String?] { rows[row] }
}

/// One libpq connection (`PGconn`), used synchronously.
///
/// Like `SQLiteConnection` it is not `Sendable`: it must stay on one thread or serial queue (libpq
/// allows one thread at a time per connection). `PostgresChatStore` keeps it on its queue.
///
/// Parameters are sent as text and typed by the SQL (`$1::bigint`); statements run repeatedly are
/// prepared once per connection (`prepared(_:)`), and prepared again after a reconnect.
public final class PostgresConnection {
    private var conn: OpaquePointer?
    /// The conninfo or `postgres://` URL it was opened with.
    public let url: String
    /// SQL text → prepared statement name, on this session. Cleared when the session is replaced.
    private var statements: [String: String] = [:]

    /// Connects (blocking; bounded by the URL's `connect_timeout`, default 5 s here) and sets the
    /// session up: UTF-8, `synchronous_commit = on` (an ack must follow a commit that is on disk,
    /// whatever the server's default), no notices on stderr.
    public init(url: String) throws(PostgresError) {
        self.url = url
        try connect()
    }

    deinit { PQfinish(conn) }

    private func connect() throws(PostgresError) {
        PQfinish(conn)
        conn = nil
        statements = [:]
        let opened = Self.withDefaultTimeout(url) { PQconnectdb($0) }
        conn = opened
        guard let opened, PQstatus(opened) == CONNECTION_OK else {
            throw PostgresError(sqlState: "", message: lastErrorMessage, connectionLost: true)
        }
        // libpq's default notice processor prints NOTICEs ("relation already exists, skipping") to stderr.
        PQsetNoticeProcessor(opened, { _, _ in }, nil)
        try execute("SET client_encoding = 'UTF8'; SET synchronous_commit = on; SET application_name = 'calling-server'")
    }

    /// Adds `connect_timeout=5` unless the URL or conninfo sets one: libpq's default is to wait forever.
    private static func withDefaultTimeout<T>(_ url: String, _ body: (UnsafePointer<CChar>) -> T) -> T {
        if url.contains("connect_timeout") { return body(url) }
        let isURL = url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
        let amended = isURL ? url + (url.contains("?") ? "&" : "?") + "connect_timeout=5" : url + " connect_timeout=5"
        return body(amended)
    }

    /// Whether the session is up (as far as libpq knows: a dead server is noticed on the next call).
    public var isConnected: Bool { conn.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// Whether the session is still up, including what the server said while it was idle: reads
    /// whatever arrived on the socket without waiting (libpq's socket is nonblocking), so a server
    /// that closed the connection (restart, `pg_terminate_backend`) is noticed before the next query.
    public func checkConnection() -> Bool {
        guard let conn, PQstatus(conn) == CONNECTION_OK else { return false }
        // More than one read: a backend that exits says so first (a FATAL message, which one read
        // takes in) and only then closes, which the next read sees. Reads that find nothing return
        // at once.
        for _ in 0..<3 where PQconsumeInput(conn) == 0 { return false }
        return PQstatus(conn) == CONNECTION_OK
    }

    /// Drops the session and opens a new one (server restarted, network back).
    public func reconnect() throws(PostgresError) { try connect() }

    /// Closes the session; later calls fail with `connectionLost`.
    public func close() {
        PQfinish(conn)
        conn = nil
        statements = [:]
    }

    private var lastErrorMessage: String {
        guard let conn, let text = PQerrorMessage(conn) else { return "no connection" }
        return String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Statements

    /// Runs one or more statements without parameters (a migration script, BEGIN/COMMIT).
    public func execute(_ script: String) throws(PostgresError) {
        let result = PQexec(try live(), script)
        defer { PQclear(result) }
        try check(result)
    }

    /// Runs one statement with `parameters` ($1, $2, …; nil is NULL) and returns its rows. Prepared on
    /// first use on this session and reused after.
    @discardableResult
    public func query(_ sql: String, _ parameters: [String?] = []) throws(PostgresError) -> PostgresRows {
        let conn = try live()
        let name = try prepared(sql, parameterCount: parameters.count, on: conn)
        let result = Self.withCStrings(parameters) { values in
            PQexecPrepared(conn, name, Int32(values.count), values, nil, nil, 0)
        }
        defer { PQclear(result) }
        try check(result)
        return Self.rows(of: result)
    }

    /// Runs `body` in a transaction: commits when it returns, rolls back when it throws.
    public func transaction<Result>(_ begin: String = "BEGIN", _ body: () throws -> Result) throws -> Result {
        try execute(begin)
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            // After a lost connection there is nothing to roll back; the server already has.
            if isConnected { try? execute("ROLLBACK") }
            throw error
        }
    }

    private func prepared(_ sql: String, parameterCount: Int, on conn: OpaquePointer) throws(PostgresError) -> String {
        if let name = statements[sql] { return name }
        let name = "s\(statements.count + 1)"
        let result = PQprepare(conn, name, sql, Int32(parameterCount), nil)
        defer { PQclear(result) }
        try check(result)
        statements[sql] = name
        return name
    }

    private func live() throws(PostgresError) -> OpaquePointer {
        guard let conn, PQstatus(conn) == CONNECTION_OK else {
            throw PostgresError(sqlState: "", message: "not connected: \(lastErrorMessage)", connectionLost: true)
        }
        return conn
    }

    private func check(_ result: OpaquePointer?) throws(PostgresError) {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY { return }
        let sqlState = result.flatMap { PQresultErrorField($0, calling_pg_diag_sqlstate) }.map { String(cString: $0) } ?? ""
        let message = result.flatMap { PQresultErrorMessage($0) }.map { String(cString: $0) } ?? ""
        let text = (message.isEmpty ? lastErrorMessage : message).trimmingCharacters(in: .whitespacesAndNewlines)
        throw PostgresError(sqlState: sqlState, message: text, connectionLost: !isConnected)
    }

    private static func rows(of result: OpaquePointer?) -> PostgresRows {
        guard let result else { return PostgresRows(rows: []) }
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        var rows: [[String?]] = []
        rows.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            var values: [String?] = []
            values.reserveCapacity(Int(columnCount))
            for column in 0..<columnCount {
                if PQgetisnull(result, row, column) == 1 {
                    values.append(nil)
                } else {
                    values.append(String(cString: PQgetvalue(result, row, column)))
                }
            }
            rows.append(values)
        }
        return PostgresRows(rows: rows)
    }

    /// NUL-terminated copies of `strings` for libpq's `const char * const *`, freed after `body`.
    private static func withCStrings<T>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> T) -> T {
        let copies: [UnsafeMutablePointer<CChar>?] = strings.map { $0.flatMap { strdup($0) } }
        defer { for copy in copies { free(copy) } }
        return body(copies.map { $0.map { UnsafePointer($0) } })
    }
}

// See the type comment: one thread at a time, so never shared.
@available(*, unavailable)
extension PostgresConnection: Sendable {}

/// The schema version lives in `calling_schema_version` (one row); migrations are serialized by a
/// transaction-scoped advisory lock, so several servers starting at once apply each one exactly once.
extension PostgresConnection: MigrationTarget {
    /// Key of the advisory lock (any constant; ASCII "calling" as a number).
    static let migrationLockKey: Int64 = 0x63_616C_6C69_6E67

    public func schemaVersion() throws -> Int {
        let rows = try query(
            "SELECT CASE WHEN to_regclass('calling_schema_version') IS NULL THEN 0 ELSE -1 END")
        guard rows.count == 1, rows[0][0] == "-1" else { return 0 }
        let version = try query("SELECT version FROM calling_schema_version")
        return version.isEmpty ? 0 : Int(version[0][0] ?? "0") ?? 0
    }

    public func inMigrationTransaction<Result>(_ body: () throws -> Result) throws -> Result {
        try transaction {
            try query("SELECT pg_advisory_xact_lock($1::bigint)", [String(Self.migrationLockKey)])
            try execute("""
                CREATE TABLE IF NOT EXISTS calling_schema_version (
                    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                    version  integer NOT NULL
                )
                """)
            return try body()
        }
    }

    public func executeScript(_ sql: String) throws { try execute(sql) }

    public func setSchemaVersion(_ version: Int) throws {
        try query("""
            INSERT INTO calling_schema_version (only_row, version) VALUES (true, $1::integer)
            ON CONFLICT (only_row) DO UPDATE SET version = excluded.version
            """, [String(version)])
    }
}
