package com.callingserver.sdk

import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.Response
import okhttp3.WebSocket
import okhttp3.WebSocketListener
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicLong

/**
 * The I/O half both clients share ([CallingClient], [PresenceClient]): one coroutine on the
 * driver's own thread drains every input (socket events from OkHttp's reader thread, timer fires,
 * the app's calls) in arrival order and hands it to [handle], so a pure machine behind it is never
 * touched from two threads. It owns the OkHttp WebSocket, the timers, the app's waiters and the
 * token refresh; what an input means is the machine's business.
 *
 * [handle] runs on the driver's thread only; timers come back to it as the input [timerInput]
 * made of the armed key, unless cancelled or re-armed meanwhile.
 */
internal class SocketDriver(
    threadName: String,
    private val http: OkHttpClient,
    private val baseUrl: String
) {
    /** How OkHttp's socket events become the machine's inputs; [id] is the socket's number. */
    interface SocketInputs {
        fun text(id: Long, text: String): Any
        fun closed(id: Long, code: Int?, reason: String): Any
        fun failed(id: Long, error: CallingError): Any
    }

    private val loopExecutor = Executors.newSingleThreadExecutor { r -> Thread(r, threadName).apply { isDaemon = true } }
    private val job = SupervisorJob()
    /** Coroutines launched here run on the driver's thread. */
    val scope = CoroutineScope(job + loopExecutor.asCoroutineDispatcher())
    private val inputs = Channel<Any>(Channel.UNLIMITED)
    private val waiters = ConcurrentHashMap<Long, CompletableDeferred<Any?>>()
    private val nextWaiter = AtomicLong(0)

    private class TimerFire(val key: Any, val generation: Long)
    private class Armed(val generation: Long, val job: Job)
    // Touched on the driver's thread only.
    private val timers = HashMap<Any, Armed>()
    private var timerGeneration = 0L
    private var socket: WebSocket? = null

    /** Starts draining; [handle] gets every input but timer fires, which arrive as [timerInput] of the key. */
    fun start(handle: (Any) -> Unit, timerInput: (Any) -> Any) {
        scope.launch {
            for (input in inputs) {
                if (input is TimerFire) {
                    val armed = timers[input.key]
                    if (armed == null || armed.generation != input.generation) continue // cancelled or replaced
                    timers.remove(input.key)
                    handle(timerInput(input.key))
                } else {
                    handle(input)
                }
            }
        }
    }

    /** Queues an input from any thread. */
    fun post(input: Any) { inputs.offer(input) }

    /** Posts the input [make] builds around a new waiter number and suspends until [resolve] settles it. */
    suspend fun call(make: (Long) -> Any): Any? {
        val id = nextWaiter.incrementAndGet()
        val deferred = CompletableDeferred<Any?>()
        waiters[id] = deferred
        post(make(id))
        return deferred.await()
    }

    fun resolve(waiter: Long, value: Any?, error: CallingError?) {
        val deferred = waiters.remove(waiter) ?: return
        if (error != null) deferred.completeExceptionally(error) else deferred.complete(value)
    }

    /** (Re-)arms the timer [key]; an older arming of the same key never fires. */
    fun arm(key: Any, afterMs: Long) {
        timers.remove(key)?.job?.cancel()
        val generation = ++timerGeneration
        timers[key] = Armed(generation, scope.launch {
            delay(afterMs)
            post(TimerFire(key, generation))
        })
    }

    fun cancel(key: Any) { timers.remove(key)?.job?.cancel() }

    fun send(text: String) { socket?.send(text) }

    fun closeSocket(code: Int, reason: String) { socket?.close(code, reason) }

    /** Drops the socket with 4000, not 1000: the server keeps our seat for its reconnect grace. */
    fun abortSocket() {
        socket?.let { if (!it.close(4000, "abandoned")) it.cancel() }
        socket = null
    }

    /** Asks [provider] for a token off the driver's thread's queue and posts [result] of it. */
    fun refreshToken(provider: suspend () -> String, result: (String?, CallingError?) -> Any) {
        scope.launch {
            try {
                post(result(provider(), null))
            } catch (e: CallingError) {
                post(result(null, e))
            } catch (e: Exception) {
                post(result(null, CallingError("refresh_failed", "token provider failed: ${e.message}", isRetryable = true)))
            }
        }
    }

    /** Opens `baseUrl + path` with `Authorization: Bearer token`; its events come back as [map] builds them. */
    fun open(id: Long, path: String, token: String, map: SocketInputs) {
        val request = Request.Builder()
            .url(baseUrl.trimEnd('/') + path)
            .header("Authorization", "Bearer $token")
            .build()
        socket = http.newWebSocket(request, object : WebSocketListener() {
            override fun onMessage(webSocket: WebSocket, text: String) { post(map.text(id, text)) }

            override fun onClosing(webSocket: WebSocket, code: Int, reason: String) {
                // Answer the server's close at once so it reports this code, not 1006.
                webSocket.close(code.takeIf { it in 1000..4999 && it != 1005 } ?: 1000, null)
                post(map.closed(id, code, reason))
            }

            override fun onClosed(webSocket: WebSocket, code: Int, reason: String) {
                post(map.closed(id, code, reason)) // stale after onClosing: ignored
            }

            override fun onFailure(webSocket: WebSocket, t: Throwable, response: Response?) {
                val error = if (response != null) {
                    val status = OkHttpCompat.statusOf(response)
                    val code = OkHttpCompat.headerOf(response, "problem-code")
                    CallingError.connectFailed(status, code, "upgrade refused: $status${code?.let { " $it" } ?: ""}")
                } else {
                    // No HTTP answer, or the socket dropped without a close frame.
                    CallingError("closed", "socket failed: ${t.message}", isRetryable = true)
                }
                post(map.failed(id, error))
            }
        })
    }

    /** Cancels the socket and stops the drain. */
    fun close() {
        socket?.cancel()
        job.cancel()
        loopExecutor.shutdown()
    }
}
