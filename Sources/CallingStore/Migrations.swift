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
    /// A migration failed and was rolled back; earlier ones stay applied.
    case failed(migration: String, SQLiteError)
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

/// Applies numbered migrations in order, each in its own transaction, tracking progress in
/// `PRAGMA user_version`.
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

    /// The migrations shipped with this build.
    ///
    /// Note for packaging: `Bundle.module` stops the process (SwiftPM's generated accessor calls
    /// `fatalError`) when the `CallingServer_CallingStore.resources` folder is neither next to the
    /// executable nor in the build folder, so an install must copy that folder alongside the binary.
    public static func bundled() throws(MigrationError) -> Migrator {
        guard let directory = Bundle.module.url(forResource: "schema", withExtension: nil) else {
            throw .resourcesMissing("no schema folder in \(Bundle.module.bundlePath)")
        }
        return try Migrator(directory: directory)
    }

    /// The version the schema has once every migration is applied.
    public var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies every migration newer than the database's `user_version`, in order, each in its own
    /// `BEGIN IMMEDIATE` transaction that also sets `user_version`. Returns the names applied (empty when
    /// already up to date).
    ///
    /// Safe against a second process migrating the same file at the same time: the version is re-read
    /// after taking the write lock, so each migration runs exactly once.
    @discardableResult
    public func migrate(_ connection: SQLiteConnection) throws -> [String] {
        let current = try connection.userVersion()
        if current > latestVersion {
            throw MigrationError.databaseNewer(databaseVersion: current, latestKnown: latestVersion)
        }
        var applied: [String] = []
        for migration in migrations where migration.version > current {
            do {
                let ran = try connection.transaction(.immediate) { () throws -> Bool in
                    guard try connection.userVersion() < migration.version else { return false }
                    try connection.execute(migration.sql)
                    try connection.setUserVersion(migration.version)
                    return true
                }
                if ran { applied.append(migration.name) }
            } catch let error as SQLiteError {
                throw MigrationError.failed(migration: migration.name, error)
            }
        }
        return applied
    }
}
