import CallingCore
import CallingPostgres
import CallingStore
import CallingTesting
import Dispatch
import Foundation

/// One PostgreSQL server for this test target's run (stopped at exit by TestPostgres).
enum SharedPostgres {
    static let server: Result<TestPostgres, any Error> = Result { try TestPostgres() }

    /// A fresh database's URL.
    static func database() throws -> String { try server.get().createDatabase() }
}
