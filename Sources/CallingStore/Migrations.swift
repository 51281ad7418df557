import Foundation

/// One schema migration: a numbered SQL file `NNN_name.sql`.
public struct Migration: Sendable, Equatable {
    /// The number NNN; migrations run in this order and `PRAGMA user_version` records the last one applied.
    public let version: Int
    /// The file name without `.sql`, e.g. `001_chat`.
    public let name: String
    /// The SQL script. It must not contain BEGIN/COMMIT: the migrator wraps it in a transaction.
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// Parses `NNN_name.sql` (three or more digits, an underscore, a non-empty name); `nil` otherwise.
    static func version(ofFileName fileName: String) -> (version: Int, name: String)? {
        guard fileName.hasSuffix(".sql") else { return nil }
        let name = String(fileName.dropLast(4))
        let digits = name.prefix { $0.isASCII && $0.isNumber }
        guard digits.count >= 3, let version = Int(digits),
              name.dropFirst(digits.count).first == "_", name.count > digits.count + 1
        else { return nil }
        return (version, name)
    }
}

/// Why the schema could not be brought up to date.
public enum MigrationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The `schema` resource folder is not in the bundle (an install that copied the binary without its
    /// `CallingServer_CallingStore.resources` folder, for example).
    case resourcesMissing(String)
    /// A `.sql` file whose name is not `NNN_name.sql`.
    case invalidFileName(String)
    /// Two files with the same number.
    case duplicateVersion(Int)
    /// The numbers are not 1, 2, 3, … without gaps: a missing file would otherwise be skipped for good,
    /// because `user_version` only records the highest number applied.
    case missingVersion(Int)
    /// The database was migrated by a newer build than this one; running on it could corrupt it.
    case databaseNewer(databaseVersion: Int, latestKnown: Int)
    /// A migration failed and was rolled back; earlier ones stay applied. The second value is the
    /// database's error, as text (SQLite's or PostgreSQL's).
    case failed(migration: String, String)
    /// A file could not be read.
    case unreadable(String)

    public var description: String {
        switch self {
        case .resourcesMissing(let detail): "schema migrations not found: \(detail)"
        case .invalidFileName(let name): "migration file name is not NNN_name.sql: \(name)"
        case .duplicateVersion(let version): "two migrations numbered \(version)"
        case .missingVersion(let version): "migration \(version) is missing"
        case .databaseNewer(let database, let known):
            "database schema version \(database) is newer than this build knows (\(known))"
        case .failed(let migration, let error): "migration \(migration) failed: \(error)"
        case .unreadable(let detail): "migration file unreadable: \(detail)"
        }
    }
}

/// Applies numbered migrations in order, each in its own transaction, tracking progress in the
/// target's schema version (`PRAGMA user_version` for SQLite; see `MigrationTarget`).
///
/// The SQL files live in `Sources/CallingStore/schema/` and are shipped as a resource (`Bundle.module`).
/// The top-level `schema/` folder is a symlink to that folder, not the other way round: SwiftPM on Linux
/// copies a symlinked resource folder as a dangling symlink, so the real files must live under the
/// target (checked with swift 6.3.1: built binary, `swift test`, and a binary moved with its
/// `.resources` folder all find them this way).
public struct Migrator: Sendable {
    /// Sorted by version, numbered 1...n without gaps.
    public let migrations: [Migration]

    public init(migrations: [Migration]) throws(MigrationError) {
        let sorted = migrations.sorted { $0.version < $1.version }
        for (index, migration) in sorted.enumerated() {
            if index > 0, sorted[index - 1].version == migration.version {
                throw .duplicateVersion(migration.version)
            }
            if migration.version != index + 1 { throw .missingVersion(index + 1) }
        }
        self.migrations = sorted
    }

    /// Reads every `NNN_name.sql` in `directory`; other files (a README) are ignored.
    public init(directory: URL) throws(MigrationError) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw .resourcesMissing("\(directory.path): \(error.localizedDescription)")
        }
        var migrations: [Migration] = []
        for fileName in names.sorted() where fileName.hasSuffix(".sql") {
            guard let (version, name) = Migration.version(ofFileName: fileName) else {
                throw .invalidFileName(fileName)
            }
            let sql: String
            do {
                sql = try String(contentsOf: directory.appendingPathComponent(fileName), encoding: .utf8)
            } catch {
                throw .unreadable("\(fileName): \(error.localizedDescription)")
            }
            migrations.append(Migration(version: version, name: name, sql: sql))
        }
        try self.init(migrations: migrations)
    }

    /// The migrations shipped with this build for `dialect`: `schema/*.sql` for SQLite,
    /// `schema/postgres/*.sql` for PostgreSQL.
    ///
    /// Note for packaging: `Bundle.module` stops the process (SwiftPM's generated accessor calls
    /// `fatalError`) when the `CallingServer_CallingStore.resources` folder is neither next to the
    /// executable nor in the build folder, so an install must copy that folder alongside the binary.
    public static func bundled(_ dialect: SQLDialect = .sqlite) throws(MigrationError) -> Migrator {
        guard let schema = Bundle.module.url(forResource: "schema", withExtension: nil) else {
            throw .resourcesMissing("no schema folder in \(Bundle.module.bundlePath)")
        }
        switch dialect {
        case .sqlite: return try Migrator(directory: schema)
        case .postgres: return try Migrator(directory: schema.appendingPathComponent("postgres", isDirectory: true))
        }
    }

    /// The version the schema has once every migration is applied.
    public var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies every migration newer than the database's recorded version, in order, each in its own
    /// transaction that also records its version (for SQLite `BEGIN IMMEDIATE` and `user_version`).
    /// Returns the names applied (empty when already up to date).
    ///
    /// Safe against a second process migrating the same database at the same time: the version is
    /// re-read after taking the target's migration lock, so each migration runs exactly once.
    @discardableResult
    public func migrate(_ target: some MigrationTarget) throws -> [String] {
        let current = try target.schemaVersion()
        if current > latestVersion {
            throw MigrationError.databaseNewer(databaseVersion: current, latestKnown: latestVersion)
        }
        var applied: [String] = []
        for migration in migrations where migration.version > current {
            do {
                let ran = try target.inMigrationTransaction { () throws -> Bool in
                    guard try target.schemaVersion() < migration.version else { return false }
                    try target.executeScript(migration.sql)
                    try target.setSchemaVersion(migration.version)
                    return true
                }
                if ran { applied.append(migration.name) }
            } catch let error as MigrationError {
                throw error
            } catch {
                throw MigrationError.failed(migration: migration.name, String(describing: error))
            }
        }
        return applied
    }
}

/// Which SQL dialect a set of migrations is written in.
public enum SQLDialect: String, Sendable, CaseIterable {
    case sqlite
    case postgres
}

/// A database `Migrator` can bring up to date. SQLite records the version in `PRAGMA user_version`;
/// PostgreSQL (CallingPostgres) in a one-row table, under an advisory lock.
public protocol MigrationTarget {
    /// The version of the last migration applied; 0 for a fresh database.
    func schemaVersion() throws -> Int
    /// Runs `body` in one write transaction that no other migrator of the same database runs
    /// concurrently with; commits when it returns, rolls back when it throws.
    func inMigrationTransaction<Result>(_ body: () throws -> Result) throws -> Result
    /// Runs a migration script (several statements, no BEGIN/COMMIT).
    func executeScript(_ sql: String) throws
    /// Records `version` inside the current transaction.
    func setSchemaVersion(_ version: Int) throws
}

extension SQLiteConnection: MigrationTarget {
    public func schemaVersion() throws -> Int { try userVersion() }

    public func inMigrationTransaction<Result>(_ body: () throws -> Result) throws -> Result {
        try transaction(.immediate, body)
    }

    public func executeScript(_ sql: String) throws { try execute(sql) }

    public func setSchemaVersion(_ version: Int) throws { try setUserVersion(version) }
}
