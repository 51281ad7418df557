import Foundation
import Glibc

/// Runs `body` with file descriptor 1 pointed at a temporary file and returns its result together
/// with everything it printed. For in-process CLI tests (`apikey create` prints its key on stdout).
/// Not for concurrent use: stdout is process-wide.
public func capturingStandardOutput<Result>(_ body: () throws -> Result) throws -> (Result, String) {
    let path = NSTemporaryDirectory() + "calling-stdout-\(UUID().uuidString)"
    let file = open(path, O_CREAT | O_RDWR | O_TRUNC, 0o600)
    guard file >= 0 else { throw POSIXError(.EIO) }
    defer { unlink(path) }
    fflush(nil)
    let saved = dup(STDOUT_FILENO)
    dup2(file, STDOUT_FILENO)
    let result: Result
    do {
        result = try body()
    } catch {
        fflush(nil)
        dup2(saved, STDOUT_FILENO)
        close(saved)
        close(file)
        throw error
    }
    fflush(nil)
    dup2(saved, STDOUT_FILENO)
    close(saved)
    close(file)
    return (result, try String(contentsOfFile: path, encoding: .utf8))
}
