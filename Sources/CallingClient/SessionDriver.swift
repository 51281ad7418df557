import Dispatch
import Foundation

/// Runs a pure session (`SignalingSession`, `PresenceSession`) for a client: one lock around the
/// session, its timers and the continuations of pending `async` calls; nothing else.
///
/// Every input is handled under the lock and its actions are performed in order, still under it,
/// by `perform` (which must not block: it posts to the socket loop, starts tasks, resumes
/// continuations, yields events). An action that feeds an input back synchronously (a socket
/// that fails while being opened) is handled at once and its actions queue behind the remaining
/// ones: the lock is recursive for that, and only for that. API methods take the lock briefly;
/// no caller ever waits for another thread's work.
final class SessionDriver<Session, Action, Timer: Hashable & Sendable, Outcome: Sendable>: @unchecked Sendable {
    // @unchecked: every `var` is touched only under `lock`.
    private let lock = NSRecursiveLock()
    private var session: Session
    private var outbox: [Action] = []
    private var draining = false
    private var timers: [Timer: (serial: UInt64, item: DispatchWorkItem)] = [:]
    private var timerSerial: UInt64 = 0
    private var waiters: [Waiter: CheckedContinuation<Outcome, any Error>] = [:]
    private var nextWaiter: Waiter = 0
    private var perform: (Action) -> Void = { _ in }
    private var timerFired: (Timer) -> Void = { _ in }

    init(_ session: Session) {
        self.session = session
    }

    /// Installs the action performer and the timer callback; once, before the first input.
    func start(perform: @escaping (Action) -> Void, timerFired: @escaping (Timer) -> Void) {
        lock.withLock {
            self.perform = perform
            self.timerFired = timerFired
        }
    }

    /// Reads the session.
    func read<T>(_ body: (Session) -> T) -> T {
        lock.withLock { body(session) }
    }

    /// Runs `body` on the session and performs the actions it returns.
    func run(_ body: (inout Session) -> [Action]) {
        lock.withLock {
            outbox.append(contentsOf: body(&session))
            drain()
        }
    }

    /// Like `run`, for synchronous API calls that can refuse.
    func run<T>(_ body: (inout Session) throws(CallingError) -> (T, [Action])) throws(CallingError) -> T {
        lock.lock()
        defer { lock.unlock() }
        let (value, actions) = try body(&session)
        outbox.append(contentsOf: actions)
        drain()
        return value
    }

    /// Registers a continuation, hands its number to `body`, and suspends until an action
    /// resumes it (`resume`).
    func wait(_ body: (inout Session, Waiter) -> [Action]) async throws -> Outcome {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Outcome, any Error>) in
            lock.withLock {
                nextWaiter += 1
                let waiter = nextWaiter
                waiters[waiter] = continuation
                outbox.append(contentsOf: body(&session, waiter))
                drain()
            }
        }
    }

    /// Resumes a continuation registered by `wait`. Called from `perform`.
    func resume(_ waiter: Waiter, with result: Result<Outcome, CallingError>) {
        lock.withLock {
            waiters.removeValue(forKey: waiter)?.resume(with: result.mapError { $0 as any Error })
        }
    }

    /// Arms (or re-arms) `timer`. Called from `perform`. The fire is handed to `timerFired` under
    /// the lock, and only while this arming is the current one.
    func arm(_ timer: Timer, after delay: TimeInterval) {
        lock.withLock {
            timers[timer]?.item.cancel()
            timerSerial += 1
            let serial = timerSerial
            let item = DispatchWorkItem { [weak self] in self?.fire(timer, serial: serial) }
            timers[timer] = (serial, item)
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, delay), execute: item)
        }
    }

    /// Cancels `timer` if armed. Called from `perform`.
    func cancel(_ timer: Timer) {
        lock.withLock {
            timers.removeValue(forKey: timer)?.item.cancel()
        }
    }

    /// Runs `body` under the lock, for the client's own I/O state that `perform` also touches.
    func withLock<T>(_ body: () -> T) -> T {
        lock.withLock(body)
    }

    private func fire(_ timer: Timer, serial: UInt64) {
        lock.withLock {
            guard timers[timer]?.serial == serial else { return }
            timers[timer] = nil
            timerFired(timer)
        }
    }

    private func drain() {
        guard !draining else { return }
        draining = true
        while !outbox.isEmpty { perform(outbox.removeFirst()) }
        draining = false
    }

    deinit {
        for (_, timer) in timers { timer.item.cancel() }
    }
}

/// Delivers a client's events: to the delegate callback when there is one, and to an
/// `AsyncStream` only once the app has asked for it, holding at most `limit` undelivered events
/// (the oldest are dropped beyond that and counted in `dropped`). Not thread-safe on its own:
/// the client calls it under its driver's lock.
final class EventSink<Event: Sendable>: @unchecked Sendable {
    // @unchecked: touched only under the owning driver's lock.
    private let limit: Int
    private var stream: AsyncStream<Event>?
    private var continuation: AsyncStream<Event>.Continuation?
    /// Events the stream's buffer had no room for.
    private(set) var dropped = 0

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// The stream, created on first use; every later call returns the same one.
    var events: AsyncStream<Event> {
        if let stream { return stream }
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        self.stream = stream
        self.continuation = continuation
        return stream
    }

    func yield(_ event: Event) {
        guard let continuation else { return }
        if case .dropped = continuation.yield(event) { dropped += 1 }
    }

    func finish() {
        continuation?.finish()
    }
}
