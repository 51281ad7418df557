package com.callingserver.sdk

import java.io.File
import java.net.HttpURLConnection
import java.net.URL
import java.nio.file.Files
import java.util.concurrent.TimeUnit

/**
 * A real `calling-server serve` on loopback with its own data dir, for the live tests. The binary
 * is `.build/debug/calling-server` under the working directory (the repository root when run by
 * `make test-android`), or the `calling.server.bin` system property.
 */
class ServerProcess(private val extraArgs: List<String> = emptyList(), private val env: Map<String, String> = emptyMap()) {
    private val binary = File(System.getProperty("calling.server.bin") ?: ".build/debug/calling-server").absoluteFile
    val dataDir: File = Files.createTempDirectory("calling-android-test").toFile()
    private var process: Process? = null
    var port = 0
        private set
    private var runs = 0

    /** Starts the server; on port 0 the first time, then on the same port (a restart). */
    fun start(): ServerProcess {
        check(binary.canExecute()) { "$binary is missing: run `swift build` first" }
        runs += 1
        val log = File(dataDir.parentFile, "${dataDir.name}.out.$runs")
        val builder = ProcessBuilder(binary.path, "serve", "--host", "127.0.0.1", "--port", port.toString(),
            "--data-dir", dataDir.path, *extraArgs.toTypedArray()).redirectErrorStream(true).redirectOutput(log)
        builder.environment().keys.removeAll { it.startsWith("CALLING_") }
        builder.environment().putAll(env)
        val started = builder.start()
        process = started
        val banner = Regex("calling-server listening on https?://[^\\s:]+:(\\d+)")
        val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15)
        while (true) {
            val match = banner.find(if (log.exists()) log.readText() else "")
            if (match != null) { port = match.groupValues[1].toInt(); break }
            check(started.isAlive) { "server exited before listening: ${log.readText()}" }
            check(System.nanoTime() < deadline) { "no banner: ${log.readText()}" }
            Thread.sleep(20)
        }
        while (true) {
            try {
                val connection = URL("http://127.0.0.1:$port/healthz").openConnection() as HttpURLConnection
                connection.connectTimeout = 1000
                if (connection.responseCode == 200) return this
            } catch (e: java.io.IOException) {
                // not up yet
            }
            check(System.nanoTime() < deadline) { "/healthz never answered" }
            Thread.sleep(20)
        }
    }

    /** SIGTERM (graceful: close 1001) or SIGKILL (sockets just drop), and wait for the exit. */
    fun stop(kill: Boolean = false) {
        val running = process ?: return
        if (kill) running.destroyForcibly() else running.destroy()
        running.waitFor(10, TimeUnit.SECONDS)
        process = null
    }

    fun token(room: String, peer: String): String = mint("--room", room, "--peer", peer)

    /** A room token that expires after [ttlSeconds]. */
    fun shortToken(room: String, peer: String, ttlSeconds: Int): String = mint("--room", room, "--peer", peer, "--ttl", ttlSeconds.toString())

    /** A presence token (`--scope presence`) for [role] `agent`, `dashboard` or `caller`. */
    fun presenceToken(peer: String, role: String): String = mint("--peer", peer, "--role", role, "--scope", "presence")

    /** A user token (`--scope user`, no room) for `GET /v1/me/rooms`. */
    fun userToken(peer: String): String = mint("--peer", peer, "--scope", "user")

    private fun mint(vararg args: String): String {
        val cli = ProcessBuilder(binary.path, "token", "--data-dir", dataDir.path, *args)
            .redirectError(ProcessBuilder.Redirect.INHERIT).start()
        val out = cli.inputStream.bufferedReader().readText().trim()
        check(cli.waitFor() == 0 && out.count { it == '.' } == 2) { "token CLI failed: $out" }
        return out
    }

    val wsBase: String get() = "ws://127.0.0.1:$port"

    fun close() {
        stop(kill = true)
        dataDir.deleteRecursively()
    }
}
