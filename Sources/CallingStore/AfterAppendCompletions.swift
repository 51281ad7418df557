import CallingLogging

/// The body a chat store runs on its queue after each batch's append completions
/// (`ChatPersistence.afterAppendCompletions`), shared by the SQLite and PostgreSQL stores.
///
/// The closure lives in a class of its own, and the lock guards only the reference to it. Kept as
/// `Locked<(@Sendable () -> Void)?>` and read with `withLock { $0 }`, the closure went through the
/// generic `inout` in its most general form and was written back wrapped in two reabstraction
/// thunks on every read: each batch called the body through one more pair of frames and kept three
/// more allocations. After the ~15k batches of a busy-room run the call took ~100-250 µs of the
/// store queue per batch, ahead of the batch's acks (calling-bench suite chat, docs/benchmarks.md).
package final class AfterAppendCompletions: Sendable {
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private let body = Locked<Body?>(nil)

    package init() {}

    /// Replaces the body. Any thread.
    package func set(_ run: @escaping @Sendable () -> Void) {
        let replacement = Body(run)
        body.withLock { $0 = replacement }
    }

    /// Runs the body, if one was set. On the store's queue, after a batch's completions.
    package func run() {
        body.withLock { $0 }?.run()
    }
}
