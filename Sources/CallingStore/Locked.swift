import Foundation

/// A value that several threads touch, guarded by a lock.
///
/// NSLock rather than `Synchronization.Mutex`: Package.swift still declares macOS 14, where `Mutex` is
/// unavailable. The critical sections here are a few loads and stores, never I/O.
///
/// Not for a closure as `Value`: `withLock` passes it `inout` through the generic in its most general
/// form, and each `withLock { $0 }` wrote it back wrapped in two more reabstraction thunks, so a
/// closure read once per batch got a call chain one pair longer per batch. Keep the closure in a
/// class and lock the reference (`AfterAppendCompletions`).
public final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written inside `withLock`, i.e. while `lock` is held,
    // so no two threads ever access it at once; `Value: Sendable` makes whatever is copied out of the
    // critical section safe to use on any thread.
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access. `body` must not block or call back into the same lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
