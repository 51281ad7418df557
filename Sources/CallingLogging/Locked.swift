import Foundation

/// A value that several threads touch, guarded by a lock: the project's one lock type
/// (docs/architecture.md, "Threading model", "Locks").
///
/// It lives in CallingLogging because that is the lowest module every module with shared state
/// links: the SDK (CallingClient, CallingWebSocket, CallingWebRTC, CallingMedia) as well as the
/// server and store modules (CallingCore re-exports it). CallingValues must stay import-free.
///
/// NSLock (a pthread mutex) rather than `Synchronization.Mutex`: Package.swift declares iOS 15 and
/// macOS 14, where `Mutex` is unavailable (it needs iOS 18 and macOS 15), and on Linux
/// ThreadSanitizer does not see the futex `Mutex` parks on, so it reports every contended
/// `withLock` as a race (`make test-tsan`). The critical sections are a few loads and stores.
///
/// Not for a closure as `Value`: `withLock` passes it `inout` through the generic in its most general
/// form, and each `withLock { $0 }` wrote it back wrapped in two more reabstraction thunks, so a
/// closure read once per batch got a call chain one pair longer per batch. Keep the closure in a
/// class and lock the reference (`AfterAppendCompletions` in CallingStore).
public final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written inside `withLock`, i.e. while `lock` is held,
    // so no two threads ever access it at once; `Value: Sendable` makes whatever is copied out of the
    // critical section safe to use on any thread.
    private let lock = NSLock()
    private var value: Value

    /// Guards `value`, which from now on is reachable only through `withLock`.
    public init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access. `body` must not block or call back into the same lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
