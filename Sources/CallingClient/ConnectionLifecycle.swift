import CallingProtocol
import Foundation

/// The connection lifecycle both client sessions share, as a pure machine (no sockets, threads
/// or clocks): connect and its timeout, reconnect with backoff after a drop, a fresh token before
/// each attempt when there is a provider (so a 4401 close is worth a retry), terminal closes, the
/// close grace of `disconnect()`, and the socket numbers that make a dropped socket's late events
/// ignorable. `SignalingSession` and `PresenceSession` nest it: they hand it the socket, timer and
/// API inputs that concern the connection, translate its actions into their own, and react to its
/// notices with their own concerns (chat, calls, presence snapshot). docs/sdk.md "Reconnect"
/// describes the behaviour; the browser SDK's `ReconnectingSocket` (sdk/js/calling-client.js) is
/// the same split.
struct ConnectionLifecycle {
    struct Settings: Sendable {
        /// Where the socket goes, for errors that name it.
        var host = ""
        var port = 0
        var connectTimeout: TimeInterval = 10
        var reconnectDelays: [TimeInterval] = [1, 2, 4]
        var maxReconnectAttempts = 5
        var closeGrace: TimeInterval = 2
        var hasTokenProvider = false
        /// The frame that establishes a session (`welcome`, `connected`), named by the connect
        /// timeout's error.
        var establishedBy = "welcome"
    }

    /// The lifecycle's timers. The owner arms and cancels them as the actions say and feeds their
    /// fires back; a cancelled or replaced timer must never fire (`SessionDriver` guarantees it).
    enum Timer: Hashable, Sendable {
        /// No established session within `connectTimeout` of opening the socket.
        case connect
        /// The backoff before the next reconnect attempt.
        case reconnect
        /// `disconnect()` waiting for the server's close echo.
        case closeGrace
    }

    /// Where the connection is. Each socket-holding state names its socket: events of any other
    /// socket are stale.
    enum State: Sendable, Equatable {
        case idle
        /// Socket `socket` is opening and no session is established on it yet. Attempt 0 is the
        /// app's `connect()`, which is never retried on its own; 1… are reconnect attempts.
        case connecting(attempt: Int, socket: UInt64)
        /// The session is established on `socket`.
        case open(socket: UInt64)
        /// Waiting `reconnectDelays[attempt - 1]` before reconnect attempt `attempt`.
        case backingOff(attempt: Int)
        /// Waiting for the token provider before reconnect attempt `attempt`.
        case refreshingToken(attempt: Int)
        /// `disconnect()` closed `socket` and waits for its end or the close grace.
        case closing(socket: UInt64, established: Bool)
        /// `disconnect()` completed.
        case closed
        /// Ended without `disconnect()`: a terminal close, a refusal, or attempts ran out.
        case failed(CallingError)
    }

    /// What the owning session has to react to, in the order it happens.
    enum Notice: Sendable, Equatable {
        /// `connect()` was accepted: the first socket is opening.
        case connecting
        /// The current socket ended (closed, failed, timed out or dropped), before the outcome
        /// below: per-socket work stops.
        case socketDown
        /// The connection was lost without `disconnect()` (`retrying` or `failed` follows).
        case lost(CallingError)
        /// Reconnect attempt `attempt` is scheduled.
        case retrying(attempt: Int)
        /// Terminal: no reconnect.
        case failed(CallingError)
        /// `disconnect()` completed.
        case closed
    }

    /// What the lifecycle asks of its owner, in order.
    enum Action: Sendable, Equatable {
        /// Open socket `id` with `token` (any previous one is already closed or abandoned).
        case openSocket(id: UInt64, token: String)
        /// Close the current socket with a close frame; its end follows as an input.
        case closeSocket(code: UInt16, reason: String)
        /// Drop the current socket without a close frame; its later events are stale.
        case abortSocket
        case arm(Timer, after: TimeInterval)
        case cancel(Timer)
        /// Ask the token provider for a fresh token: `.tokenRefreshed(attempt:)`.
        case refreshToken(attempt: Int)
        case notify(Notice)
    }

    enum Input: Sendable {
        /// `connect()`; the owner has checked that no session is under way. `token` replaces the
        /// token when given.
        case connect(token: String?)
        /// `disconnect()`; the owner has checked that a session is under way.
        case disconnect
        case socketClosed(UInt64, code: UInt16?, reason: String)
        case socketFailed(UInt64, status: Int?, code: String?, message: String)
        /// The session's first frame (`welcome`, `connected`) arrived on the current socket.
        case established
        /// The owner found the current socket dead (an unanswered ping): drop it and go on as
        /// after any drop.
        case dropped(CallingError)
        /// The server refused the first `connect()` before establishing it (an `error` frame):
        /// drop the socket and fail without retrying.
        case refused(CallingError)
        case timerFired(Timer)
        case tokenRefreshed(attempt: Int, Result<String, CallingError>)
    }

    let settings: Settings
    private(set) var state: State = .idle
    private(set) var token: String
    /// The newest socket number: opening a socket and abandoning one move it on, so the
    /// abandoned socket's late events no longer match.
    private(set) var socket: UInt64 = 0
    private var out: [Action] = []

    init(token: String, settings: Settings) {
        self.token = token
        self.settings = settings
    }

    /// The socket the current state holds, if any.
    var currentSocket: UInt64? {
        switch state {
        case .connecting(_, let socket), .open(let socket), .closing(let socket, _): return socket
        default: return nil
        }
    }

    /// Whether an event of socket `id` is about the current socket.
    func isCurrent(_ id: UInt64) -> Bool { currentSocket == id }

    /// The current socket has its session (`welcome`/`connected` arrived).
    var isEstablished: Bool {
        switch state {
        case .open, .closing(_, true): return true
        default: return false
        }
    }

    /// `disconnect()` is closing the socket.
    var isClosing: Bool {
        if case .closing = state { return true }
        return false
    }

    mutating func handle(_ input: Input) -> [Action] {
        out = []
        switch input {
        case .connect(let newToken):
            switch state {
            case .idle, .closed, .failed: break
            default: return out
            }
            if let newToken { token = newToken }
            out.append(.notify(.connecting))
            openSocket(attempt: 0)
        case .disconnect:
            switch state {
            case .connecting(_, let socket), .open(let socket), .closing(let socket, _):
                state = .closing(socket: socket, established: isEstablished)
                out.append(.closeSocket(code: CloseCode.normal.rawValue, reason: "normal"))
                // A server that never echoes the close must not hold us up.
                out.append(.arm(.closeGrace, after: settings.closeGrace))
            case .backingOff, .refreshingToken:
                out.append(.cancel(.reconnect))
                finish()
            case .idle, .closed, .failed:
                break
            }
        case .socketClosed(let id, let code, let reason):
            guard isCurrent(id) else { break }
            socketEnded(from: state, CallingError(.closed(code: code, reason: reason)))
        case .socketFailed(let id, let status, let code, let message):
            guard isCurrent(id) else { break }
            socketEnded(from: state, CallingError.socketFailed(status: status, message: message, host: settings.host,
                                                               port: settings.port, code: code))
        case .established:
            switch state {
            case .connecting(_, let socket): state = .open(socket: socket)
            case .closing(let socket, _): state = .closing(socket: socket, established: true)
            default: break
            }
            out.append(.cancel(.connect))
        case .dropped(let error):
            guard currentSocket != nil else { break }
            let before = state
            abandonSocket()
            socketEnded(from: before, error)
        case .refused(let error):
            guard currentSocket != nil else { break }
            abandonSocket()
            state = .failed(error)  // socketless; `fail` settles it
            out.append(.cancel(.connect))
            out.append(.notify(.lost(error)))
            fail(error)
        case .timerFired(let timer):
            timerFired(timer)
        case .tokenRefreshed(let attempt, let result):
            guard case .refreshingToken(attempt) = state else { break }
            switch result {
            case .success(let fresh):
                token = fresh
                openSocket(attempt: attempt)
            case .failure(let failure):
                if failure.isRetryable { scheduleReconnect(attempt: attempt + 1, after: failure) } else { fail(failure) }
            }
        }
        return out
    }

    private mutating func timerFired(_ timer: Timer) {
        switch timer {
        case .connect:
            switch state {
            case .connecting, .closing(_, false):
                let before = state
                abandonSocket()
                socketEnded(from: before, CallingError(.timedOut(settings.establishedBy)))
            default:
                break
            }
        case .reconnect:
            guard case .backingOff(let attempt) = state else { return }
            if settings.hasTokenProvider {
                state = .refreshingToken(attempt: attempt)
                out.append(.refreshToken(attempt: attempt))
            } else {
                openSocket(attempt: attempt)
            }
        case .closeGrace:
            guard isClosing else { return }
            abandonSocket()
            finish()
        }
    }

    private mutating func openSocket(attempt: Int) {
        socket += 1
        state = .connecting(attempt: attempt, socket: socket)
        out.append(.openSocket(id: socket, token: token))
        out.append(.arm(.connect, after: settings.connectTimeout))
    }

    /// Drops the current socket; its later events are stale. The state is the caller's to set.
    private mutating func abandonSocket() {
        out.append(.abortSocket)
        socket += 1
    }

    /// The socket of state `before` is gone (closed, failed, timed out, dropped): finished,
    /// failed, or a reconnect.
    private mutating func socketEnded(from before: State, _ error: CallingError) {
        out.append(.cancel(.connect))
        out.append(.cancel(.closeGrace))
        out.append(.notify(.socketDown))
        let attempt: Int
        switch before {
        case .closing:
            return finish()
        case .connecting(0, _):
            // The app's `connect()` never got its session: no automatic retry, the app decides.
            state = .failed(error)  // socketless; `fail` settles it
            out.append(.notify(.lost(error)))
            return fail(error)
        case .connecting(let current, _):
            attempt = current + 1
        default:
            attempt = 1
        }
        state = .backingOff(attempt: attempt)  // no socket any more; settled just below
        out.append(.notify(.lost(error)))
        if isRetryableEnd(error) { scheduleReconnect(attempt: attempt, after: error) } else { fail(error) }
    }

    /// A 4401 `token expired` close is worth a reconnect when a token provider can supply a new
    /// token (as the browser SDK does with `refreshToken`); every other end as `isRetryable` says.
    private func isRetryableEnd(_ error: CallingError) -> Bool {
        if settings.hasTokenProvider, error.closeCode == CloseCode.tokenExpired.rawValue { return true }
        return error.isRetryable
    }

    private mutating func scheduleReconnect(attempt: Int, after error: CallingError) {
        guard attempt <= settings.maxReconnectAttempts else { return fail(error) }
        state = .backingOff(attempt: attempt)
        out.append(.notify(.retrying(attempt: attempt)))
        let delays = settings.reconnectDelays
        out.append(.arm(.reconnect, after: delays.isEmpty ? 0 : delays[min(attempt - 1, delays.count - 1)]))
    }

    /// Terminal: no reconnect.
    private mutating func fail(_ error: CallingError) {
        if currentSocket != nil { abandonSocket() }
        out.append(.cancel(.reconnect))
        state = .failed(error)
        out.append(.notify(.failed(error)))
    }

    /// `disconnect()` completed (or raced the socket's end).
    private mutating func finish() {
        socket += 1
        state = .closed
        out.append(.cancel(.connect))
        out.append(.cancel(.closeGrace))
        out.append(.notify(.closed))
    }
}
