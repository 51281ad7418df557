import CallingProtocol
import Foundation

/// The actions every client session asks for in the same words, performed the same way by
/// `SessionClientCore`.
enum CommonSessionAction<Timer, Outcome, Event> {
    case openSocket(id: UInt64, path: String, token: String)
    case closeSocket(code: UInt16, reason: String)
    case abortSocket
    case send(Frame)
    case arm(Timer, after: TimeInterval)
    case cancel(Timer)
    case resume(Waiter, Result<Outcome, CallingError>)
    case emit(Event)
    case refreshToken(attempt: Int)
}

/// A pure client session (`SignalingSession`, `PresenceSession`) as `SessionClientCore` runs it.
protocol ClientSession: SendableMetatype {
    associatedtype Input: Sendable
    associatedtype Action
    associatedtype Timer: Hashable & Sendable
    associatedtype Outcome: Sendable
    associatedtype Event: Sendable

    /// The newest socket number: a terminal event of this socket leaves nothing to close.
    var socket: UInt64 { get }
    mutating func handle(_ input: Input) -> [Action]
    static func timerFired(_ timer: Timer) -> Input
    static func tokenRefreshed(attempt: Int, _ result: Result<String, CallingError>) -> Input
    /// The input for an event of socket `socket`; nil when the session has nothing to learn.
    static func socketInput(_ event: TransportEvent, socket: UInt64) -> Input?
    /// `action` in the common words, or nil for an action only this session's client performs.
    static func common(_ action: Action) -> CommonSessionAction<Timer, Outcome, Event>?
}

/// The driver glue both clients share: a `SessionDriver` around the session, its one socket, its
/// events, and the actions both perform alike (socket, timers, continuations, events, token
/// refresh). The client keeps its public API and performs only its session's own actions
/// (`perform` given to `start`).
final class SessionClientCore<Session: ClientSession>: @unchecked Sendable {
    // @unchecked: the closures and the sink are touched only under the driver's lock (set once
    // in `start` under it); `let`s are immutable.
    let driver: SessionDriver<Session, Session.Action, Session.Timer, Session.Outcome>
    let socket: SessionSocket
    /// The session's events; read and fed only under the driver's lock.
    let sink: EventSink<Session.Event>
    private let tokenProvider: (@Sendable () async throws -> String)?
    private var callback: (Session.Event) -> Void = { _ in }
    private var performOwn: (Session.Action) -> Void = { _ in }

    init(_ session: Session, socket: SessionSocket, eventBufferLimit: Int,
         tokenProvider: (@Sendable () async throws -> String)?)
    {
        driver = SessionDriver(session)
        self.socket = socket
        sink = EventSink(limit: eventBufferLimit)
        self.tokenProvider = tokenProvider
    }

    /// Installs the client's event callback (besides the stream) and its performer of the
    /// session's own actions; once, before the first input. Both run under the driver's lock and
    /// must not block.
    func start(callback: @escaping (Session.Event) -> Void, perform: @escaping (Session.Action) -> Void) {
        driver.withLock {
            self.callback = callback
            performOwn = perform
        }
        driver.start(perform: { [weak self] action in self?.perform(action) },
                     timerFired: { [weak self] timer in self?.submit(Session.timerFired(timer)) })
    }

    /// Every event, in order, for one consumer; created on first use.
    var events: AsyncStream<Session.Event> { driver.withLock { sink.events } }

    /// Any thread or task.
    func submit(_ input: Session.Input) {
        driver.run { $0.handle(input) }
    }

    /// The client is going away: close its socket and end its event stream.
    func shutdown() {
        socket.close(code: CloseCode.normal.rawValue, reason: "normal")
        sink.finish()
    }

    /// Under the driver's lock; never blocks.
    private func perform(_ action: Session.Action) {
        guard let common = Session.common(action) else { return performOwn(action) }
        switch common {
        case .openSocket(let id, let path, let token):
            // The transport's thread calls back: one input per event, in order.
            socket.open(path: path, token: token) { [weak self] event in self?.socketEvent(event, socket: id) }
        case .closeSocket(let code, let reason):
            socket.close(code: code, reason: reason)
        case .abortSocket:
            socket.abort()
        case .send(let frame):
            socket.send(frame)
        case .arm(let timer, let delay):
            driver.arm(timer, after: delay)
        case .cancel(let timer):
            driver.cancel(timer)
        case .resume(let waiter, let result):
            driver.resume(waiter, with: result)
        case .emit(let event):
            sink.yield(event)
            callback(event)
        case .refreshToken(let attempt):
            guard let provider = tokenProvider else { return }
            Task { [weak self] in
                let result: Result<String, CallingError>
                do {
                    result = .success(try await provider())
                } catch {
                    result = .failure(error as? CallingError ?? CallingError(.tokenProviderFailed("\(error)")))
                }
                self?.submit(Session.tokenRefreshed(attempt: attempt, result))
            }
        }
    }

    private func socketEvent(_ event: TransportEvent, socket id: UInt64) {
        guard let input = Session.socketInput(event, socket: id) else { return }
        driver.run { session in
            if event.isTerminal, session.socket == id { socket.ended() }
            return session.handle(input)
        }
    }
}
