package com.callingserver.sdk

import kotlinx.coroutines.CompletableDeferred
import okhttp3.Call
import okhttp3.Callback
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.Response
import org.json.JSONObject
import java.io.IOException

/**
 * The SDK's REST calls (docs/openapi.yaml) over OkHttp's asynchronous `enqueue`, so no thread
 * blocks. [base] is the server's `ws://`/`wss://` origin; it becomes `http://`/`https://`.
 */
internal object Rest {
    fun httpBase(base: String): String {
        val trimmed = base.trimEnd('/')
        return when {
            trimmed.startsWith("wss://") -> "https://" + trimmed.removePrefix("wss://")
            trimmed.startsWith("ws://") -> "http://" + trimmed.removePrefix("ws://")
            else -> trimmed
        }
    }

    /**
     * GET [path] with `Authorization: Bearer [token]`; the JSON object of a 200. Anything else
     * throws a [CallingError]: the problem+json `code` (`http_error` without one) and `status`,
     * retryable for 429 and 5xx, as the browser SDK's `problemError`; `closed` for no answer.
     */
    suspend fun getJson(http: OkHttpClient, base: String, path: String, token: String): JSONObject {
        val request = Request.Builder().url(httpBase(base) + path).header("Authorization", "Bearer $token").get().build()
        val answer = CompletableDeferred<JSONObject>()
        http.newCall(request).enqueue(object : Callback {
            override fun onFailure(call: Call, e: IOException) {
                answer.completeExceptionally(CallingError("closed", "GET $path failed: ${e.message}", isRetryable = true))
            }

            override fun onResponse(call: Call, response: Response) {
                response.use {
                    val status = OkHttpCompat.statusOf(it)
                    val text = try { OkHttpCompat.bodyOf(it) ?: "" } catch (e: IOException) { "" }
                    val json = try { JSONObject(text) } catch (e: Exception) { null }
                    if (status == 200 && json != null) {
                        answer.complete(json)
                    } else {
                        val code = json?.let { j -> stringOrNull(j, "code") } ?: "http_error"
                        val detail = json?.let { j -> stringOrNull(j, "detail") ?: stringOrNull(j, "title") } ?: "HTTP $status"
                        answer.completeExceptionally(CallingError(code, detail, status = status, problemCode = json?.let { j -> stringOrNull(j, "code") },
                            isRetryable = status == 429 || status >= 500))
                    }
                }
            }
        })
        return answer.await()
    }
}
