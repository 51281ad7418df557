import CallingLogging
import Foundation
import Synchronization

/// The service loop's inbox and the lws context it wakes: the one part of the server other
/// threads touch. `post` appends a closure and, when the inbox was empty, wakes the loop with
/// `lws_cancel_service`, the one lws call that is safe from another thread; the service thread
/// takes everything posted in one go (`take`) on LWS_CALLBACK_EVENT_WAIT_CANCELLED.
///
/// Both locks are `Locked` (docs/architecture.md, "Locks"). The inbox's value is the array of
/// closures, not a closure: an array's elements are stored in the generic form whether or not the
/// array goes through `withLock`'s `inout`, so reading and writing it there wraps nothing.
final class ServiceInbox: Sendable {
    /// The loop's handle and state, set by `start` and the loop itself, read by any thread.
    struct Lifecycle: @unchecked Sendable {
        // @unchecked: the context pointer is only handed to lws from the service thread, except
        // for `lws_cancel_service`, which lws makes safe from any thread (and which is made under
        // this lock, so the context cannot be destroyed under it: `runLoop` clears it here first).
        // `Thread` is only asked whether it has finished.
        var context: OpaquePointer?
        var port = 0
        var running = false
        var thread: Thread?
    }

    private let work = Locked<[@Sendable () -> Void]>([])
    private let lifecycle = Locked(Lifecycle())
    /// Increments each time the service thread takes its inbox; the watchdog reads it.
    let progress = Atomic<Int64>(0)

    /// Reads or changes the lifecycle under its lock.
    func withLifecycle<T>(_ body: (inout Lifecycle) -> T) -> T { lifecycle.withLock(body) }

    /// Queues `item` after what was posted before it, and wakes the loop unless a wake-up is
    /// already pending. Any thread.
    func post(_ item: @escaping @Sendable () -> Void) {
        let wasEmpty = work.withLock { items in
            items.append(item)
            return items.count == 1
        }
        guard wasEmpty else { return }  // a wake-up is already pending
        wake()
    }

    /// Wakes the loop without work (the watchdog's liveness probe, and `post`). Any thread.
    func wake() {
        lifecycle.withLock { life in
            if let context = life.context { LWS.cancelService(context) }
        }
    }

    /// Everything posted so far, in order, swapped into `items` (empty on entry, so that its
    /// storage is the next inbox's and a drain allocates nothing). Service thread.
    func take(into items: inout [@Sendable () -> Void]) {
        progress.add(1, ordering: .relaxed)
        work.withLock { swap(&$0, &items) }
    }
}
