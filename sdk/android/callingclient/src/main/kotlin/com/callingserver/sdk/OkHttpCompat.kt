package com.callingserver.sdk

import okhttp3.Response

/**
 * The one place where OkHttp 3.x and 4.x differ for this SDK. Kotlin callers of OkHttp 3.x call
 * `response.code()` and `response.header(...)`; OkHttp 4.x turned `code` into a property and
 * makes `code()` a compile error for Kotlin callers, and the same for `body()`. This build uses
 * 3.13 (Debian's); for 4.x, change [statusOf] to `response.code` and [bodyOf] to `response.body`. Everything else the SDK calls (`OkHttpClient`,
 * `Request.Builder`, `newWebSocket`, `newCall(...).enqueue`, `Callback`, `WebSocket.send/close/cancel`, `WebSocketListener`) is the
 * same in both.
 */
internal object OkHttpCompat {
    fun statusOf(response: Response): Int = response.code()

    fun bodyOf(response: Response): String? = response.body()?.string()

    fun headerOf(response: Response, name: String): String? = response.header(name)
}
