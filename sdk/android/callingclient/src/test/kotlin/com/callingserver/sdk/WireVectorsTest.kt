package com.callingserver.sdk

import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Test
import java.io.File

/**
 * The Kotlin SDK's frames against the shared wire vectors (tests/vectors/client-frames.json), which
 * tests/js/vectors.test.mjs checks against the browser SDK: the same calls give the same bytes.
 */
class WireVectorsTest {
    private val file = File(System.getProperty("calling.vectors") ?: "tests/vectors/client-frames.json")

    private fun frameOf(op: String, args: JSONObject): String {
        val session = SignalingSession("tok")
        session.handle(SessionInput.Connect(1))
        session.handle(SessionInput.SocketText(session.currentSocketForTest(),
            """{"type":"welcome","payload":{"peer_id":"me","room_id":"r","call_id":null,"role":"peer","name":null,"peers":[{"peer_id":"bob","role":"peer","name":null}],"last_seq":0,"read_seq":0,"unread":0}}"""))
        fun num(key: String): Double? = if (args.isNull(key)) null else args.getDouble(key)
        val input = when (op) {
            "chat" -> SessionInput.SendChat(2, args.getString("client_id"), args.getString("text"), args.optJSONObject("meta")?.toString(),
                if (args.has("reply_to")) args.getLong("reply_to") else null)
            "chat-edit" -> SessionInput.EditChat(2, args.getString("client_id"), args.getLong("target"), args.getString("text"),
                args.optJSONObject("meta")?.toString())
            "chat-delete" -> SessionInput.DeleteChat(2, args.getString("client_id"), args.getLong("target"))
            "chat-react" -> SessionInput.React(2, args.getString("client_id"), args.getLong("target"), args.getString("key"),
                args.optBoolean("remove", false))
            "data" -> SessionInput.SendData(args.get("payload").toString(), if (args.has("to")) args.getString("to") else null)
            "typing" -> SessionInput.SetTyping(args.getBoolean("typing"))
            "read" -> SessionInput.MarkRead(args.getLong("seq"))
            "signal" -> SessionInput.SendSignal(args.getString("type"), args.getString("to"), args.getJSONObject("payload").toString())
            "candidate" -> SessionInput.SendSignal("candidate", args.getString("to"),
                if (args.isNull("candidate")) candidatePayload(null, null, null)
                else candidatePayload(args.getString("candidate"), args.getString("sdpMid"), args.getInt("sdpMLineIndex")))
            "stats" -> SessionInput.SendStats(StatsSample(num("rtt_ms"), num("jitter_ms"), num("packet_loss"), num("bitrate_kbps")))
            "rpc-request" -> SessionInput.PerformRpc(2, args.getString("id"), args.getString("to"), args.getString("method"),
                args.getString("payload"), args.getLong("timeout_ms"))
            "rpc-ack", "rpc-response" -> {
                session.handle(SessionInput.RegisterRpcMethod("m"))
                val request = JSONObject().put("type", "rpc-request").put("from", args.getString("from"))
                    .put("payload", JSONObject().put("id", args.getString("id")).put("method", "m"))
                val ack = session.handle(SessionInput.SocketText(session.currentSocketForTest(), request.toString()))
                if (op == "rpc-ack") return ack.filterIsInstance<SessionAction.Send>().single().text
                val data = ack.filterIsInstance<SessionAction.InvokeRpc>().single().data
                val error = args.optJSONObject("error")
                if (error != null) SessionInput.RpcHandled(data, null, RpcError(error.getInt("code"), error.getString("message"), error.optString("data")))
                else SessionInput.RpcHandled(data, args.getString("result"), null)
            }
            else -> throw AssertionError("unknown op $op")
        }
        return session.handle(input).filterIsInstance<SessionAction.Send>().single().text
    }

    @Test fun everyVectorIsWrittenByteForByteAsTheBrowserSdkWritesIt() {
        val cases = JSONObject(file.readText()).getJSONArray("cases")
        check(cases.length() >= 10) { "vectors missing from $file" }
        for (i in 0 until cases.length()) {
            val case = cases.getJSONObject(i)
            assertEquals(case.getString("name"), case.getString("frame"), frameOf(case.getString("op"), case.getJSONObject("args")))
        }
    }

    @Test fun aSlashIsWrittenPlainAndAnEscapedBackslashBeforeItStays() {
        assertEquals("""{"a":"x/y","b":"\\/"}""", jsonLikeJavaScript("""{"a":"x\/y","b":"\\\/"}"""))
    }
}
