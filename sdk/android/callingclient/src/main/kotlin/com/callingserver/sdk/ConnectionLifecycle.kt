package com.callingserver.sdk

/**
 * The connection lifecycle as a pure machine (no sockets, threads or clock): connect and its
 * timeout, reconnect with backoff after a drop, a fresh token before each reconnect when there is
 * a provider (so a 4401 close is worth a retry), terminal closes (4400-4999), the close grace of
 * `disconnect()`, and socket numbers that make an abandoned socket's late events ignorable.
 * It mirrors `ConnectionLifecycle` of the Swift SDK (Sources/CallingClient/ConnectionLifecycle.swift)
 * and the browser SDK's `ReconnectingSocket`; docs/sdk.md "Reconnect" describes the behaviour.
 * Every input returns the actions the owner performs in order.
 */
class ConnectionLifecycle(token: String, val settings: Settings) {
    /** Times in milliseconds. */
    data class Settings(
        val connectTimeoutMs: Long = 10_000,
        val reconnectDelaysMs: List<Long> = listOf(1_000, 2_000, 4_000),
        val maxReconnectAttempts: Int = 5,
        val closeGraceMs: Long = 2_000,
        val hasTokenProvider: Boolean = false
    )

    enum class Timer { CONNECT, RECONNECT, CLOSE_GRACE }

    sealed class State {
        object Idle : State()
        /** Attempt 0 is the app's `connect()`, never retried on its own; 1... are reconnects. */
        data class Connecting(val attempt: Int, val socket: Long) : State()
        data class Open(val socket: Long) : State()
        data class BackingOff(val attempt: Int) : State()
        data class RefreshingToken(val attempt: Int) : State()
        data class Closing(val socket: Long, val established: Boolean) : State()
        object Closed : State()
        data class Failed(val error: CallingError) : State()
    }

    sealed class Notice {
        object Connecting : Notice()
        /** The current socket ended; per-socket work stops. */
        object SocketDown : Notice()
        /** Lost without `disconnect()`; `Retrying` or `Failed` follows. */
        data class Lost(val error: CallingError) : Notice()
        data class Retrying(val attempt: Int) : Notice()
        data class Failed(val error: CallingError) : Notice()
        object Closed : Notice()
    }

    sealed class Action {
        data class OpenSocket(val id: Long, val token: String) : Action()
        /** Close the current socket with a close frame (the clean leave: 1000). */
        data class CloseSocket(val code: Int, val reason: String) : Action()
        /**
         * Drop the current socket without leaving: the driver closes it with 4000 `abandoned`, never
         * 1000 (which the server reads as a clean leave, docs/protocol.md "What SDKs do with it").
         */
        object AbortSocket : Action()
        data class Arm(val timer: Timer, val afterMs: Long) : Action()
        data class Cancel(val timer: Timer) : Action()
        data class RefreshToken(val attempt: Int) : Action()
        data class Notify(val notice: Notice) : Action()
    }

    sealed class Input {
        data class Connect(val token: String? = null) : Input()
        object Disconnect : Input()
        data class SocketClosed(val socket: Long, val code: Int?, val reason: String) : Input()
        data class SocketFailed(val socket: Long, val error: CallingError) : Input()
        /** The session's first frame (`welcome`) arrived on the current socket. */
        object Established : Input()
        /** The owner found the current socket dead: drop it, go on as after any drop. */
        data class Dropped(val error: CallingError) : Input()
        /** The server refused the first `connect()` before `welcome` (an `error` frame). */
        data class Refused(val error: CallingError) : Input()
        data class TimerFired(val timer: Timer) : Input()
        data class TokenRefreshed(val attempt: Int, val token: String?, val error: CallingError?) : Input()
    }

    var state: State = State.Idle
        private set
    var token: String = token
        private set
    /** The newest socket number; opening or abandoning a socket moves it on. */
    var socket: Long = 0
        private set
    private var out = ArrayList<Action>()

    val currentSocket: Long?
        get() = when (val s = state) {
            is State.Connecting -> s.socket
            is State.Open -> s.socket
            is State.Closing -> s.socket
            else -> null
        }

    fun isCurrent(id: Long): Boolean = currentSocket == id

    val isEstablished: Boolean
        get() = state is State.Open || (state as? State.Closing)?.established == true

    fun handle(input: Input): List<Action> {
        out = ArrayList()
        when (input) {
            is Input.Connect -> {
                val s = state
                if (s is State.Idle || s is State.Closed || s is State.Failed) {
                    input.token?.let { token = it }
                    out.add(Action.Notify(Notice.Connecting))
                    openSocket(0)
                }
            }
            is Input.Disconnect -> when (val s = state) {
                is State.Connecting, is State.Open, is State.Closing -> {
                    state = State.Closing(currentSocket!!, isEstablished)
                    out.add(Action.CloseSocket(1000, "normal"))
                    // A server that never echoes the close must not hold us up.
                    out.add(Action.Arm(Timer.CLOSE_GRACE, settings.closeGraceMs))
                }
                is State.BackingOff, is State.RefreshingToken -> {
                    out.add(Action.Cancel(Timer.RECONNECT))
                    finish()
                }
                else -> Unit
            }
            is Input.SocketClosed -> if (isCurrent(input.socket)) socketEnded(state, CallingError.closed(input.code, input.reason))
            is Input.SocketFailed -> if (isCurrent(input.socket)) socketEnded(state, input.error)
            is Input.Established -> {
                when (val s = state) {
                    is State.Connecting -> state = State.Open(s.socket)
                    is State.Closing -> state = State.Closing(s.socket, true)
                    else -> Unit
                }
                out.add(Action.Cancel(Timer.CONNECT))
            }
            is Input.Dropped -> if (currentSocket != null) {
                val before = state
                abandonSocket()
                socketEnded(before, input.error)
            }
            is Input.Refused -> if (currentSocket != null) {
                abandonSocket()
                state = State.Failed(input.error)
                out.add(Action.Cancel(Timer.CONNECT))
                out.add(Action.Notify(Notice.Lost(input.error)))
                fail(input.error)
            }
            is Input.TimerFired -> timerFired(input.timer)
            is Input.TokenRefreshed -> {
                val s = state
                if (s is State.RefreshingToken && s.attempt == input.attempt) {
                    if (input.token != null) {
                        token = input.token
                        openSocket(input.attempt)
                    } else {
                        val failure = input.error ?: CallingError("refresh_failed", "the token provider gave no token", isRetryable = true)
                        if (failure.isRetryable) scheduleReconnect(input.attempt + 1, failure) else fail(failure)
                    }
                }
            }
        }
        return out
    }

    private fun timerFired(timer: Timer) {
        when (timer) {
            Timer.CONNECT -> {
                val s = state
                if (s is State.Connecting || (s is State.Closing && !s.established)) {
                    abandonSocket()
                    socketEnded(s, CallingError.timeout("welcome within ${settings.connectTimeoutMs} ms"))
                }
            }
            Timer.RECONNECT -> {
                val s = state as? State.BackingOff ?: return
                if (settings.hasTokenProvider) {
                    state = State.RefreshingToken(s.attempt)
                    out.add(Action.RefreshToken(s.attempt))
                } else {
                    openSocket(s.attempt)
                }
            }
            Timer.CLOSE_GRACE -> if (state is State.Closing) {
                abandonSocket()
                finish()
            }
        }
    }

    private fun openSocket(attempt: Int) {
        socket += 1
        state = State.Connecting(attempt, socket)
        out.add(Action.OpenSocket(socket, token))
        out.add(Action.Arm(Timer.CONNECT, settings.connectTimeoutMs))
    }

    private fun abandonSocket() {
        out.add(Action.AbortSocket)
        socket += 1
    }

    private fun socketEnded(before: State, error: CallingError) {
        out.add(Action.Cancel(Timer.CONNECT))
        out.add(Action.Cancel(Timer.CLOSE_GRACE))
        out.add(Action.Notify(Notice.SocketDown))
        val attempt = when (before) {
            is State.Closing -> return finish()
            is State.Connecting -> {
                if (before.attempt == 0) {
                    // The app's connect() never got its session: no automatic retry, the app decides.
                    state = State.Failed(error)
                    out.add(Action.Notify(Notice.Lost(error)))
                    return fail(error)
                }
                before.attempt + 1
            }
            else -> 1
        }
        state = State.BackingOff(attempt)
        out.add(Action.Notify(Notice.Lost(error)))
        if (isRetryableEnd(error)) scheduleReconnect(attempt, error) else fail(error)
    }

    /** A 4401 close is worth a reconnect when a token provider can supply a fresh token. */
    private fun isRetryableEnd(error: CallingError): Boolean =
        (settings.hasTokenProvider && error.closeCode == 4401) || error.isRetryable

    private fun scheduleReconnect(attempt: Int, error: CallingError) {
        if (attempt > settings.maxReconnectAttempts) return fail(error)
        state = State.BackingOff(attempt)
        out.add(Action.Notify(Notice.Retrying(attempt)))
        val delays = settings.reconnectDelaysMs
        out.add(Action.Arm(Timer.RECONNECT, if (delays.isEmpty()) 0 else delays[minOf(attempt - 1, delays.size - 1)]))
    }

    private fun fail(error: CallingError) {
        if (currentSocket != null) abandonSocket()
        out.add(Action.Cancel(Timer.RECONNECT))
        state = State.Failed(error)
        out.add(Action.Notify(Notice.Failed(error)))
    }

    private fun finish() {
        socket += 1
        state = State.Closed
        out.add(Action.Cancel(Timer.CONNECT))
        out.add(Action.Cancel(Timer.CLOSE_GRACE))
        out.add(Action.Notify(Notice.Closed))
    }
}
