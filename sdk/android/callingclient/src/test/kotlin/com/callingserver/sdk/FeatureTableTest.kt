package com.callingserver.sdk

import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Test
import java.io.File
import java.lang.reflect.Modifier

/**
 * Holds docs/android.md's "Feature table" against the public API: every row whose Kotlin column
 * is not "no" must name, in backticks, the members that implement it, and each name must be a
 * public class, method or property of the SDK's public types (found by reflection).
 */
class FeatureTableTest {
    private val apiTypes: List<Class<*>> = listOf(
        CallingClient::class.java, Listener::class.java, SignalingSession.Settings::class.java,
        ConnectionLifecycle.Settings::class.java, CallingError::class.java, Welcome::class.java, ChatMessage::class.java,
        ChatAck::class.java, MessagesPage::class.java, PresenceClient::class.java, PresenceListener::class.java,
        PresenceSession.Settings::class.java, PresenceSnapshot::class.java, AgentPresence::class.java,
        IceServer::class.java, StatsSample::class.java, AcceptedCall::class.java, RingingRequest::class.java,
        RpcError::class.java, RpcInvocationData::class.java)

    /** Public method names, plus Kotlin property names for getters (`getRoomId` -> `roomId`). */
    private fun apiNames(): Set<String> {
        val names = HashSet<String>()
        for (type in apiTypes) {
            assertTrue("$type is public", Modifier.isPublic(type.modifiers))
            names.add(type.simpleName)
            for (method in type.methods) {
                if (!Modifier.isPublic(method.modifiers) || method.declaringClass == Any::class.java) continue
                names.add(method.name)
                if (method.name.startsWith("get") && method.name.length > 3 && method.parameterCount == 0) {
                    names.add(method.name[3].toLowerCase() + method.name.substring(4))
                }
            }
        }
        return names
    }

    private fun tableRows(): List<List<String>> {
        val doc = File(System.getProperty("calling.android.doc") ?: "docs/android.md")
        val lines = doc.readLines()
        val start = lines.indexOfFirst { it.trim() == "## Feature table" }
        assertTrue("docs/android.md has a \"## Feature table\" section", start >= 0)
        val section = lines.drop(start + 1).takeWhile { !it.startsWith("## ") }
        val table = section.filter { it.trimStart().startsWith("|") }
        assertEquals("| feature | JS | Swift | Kotlin (`sdk/android`) |", table.first().trim())
        // Cells split on `|` outside backticks (a cell may hold `a|b`-free code only, which the table keeps).
        return table.drop(2).map { row -> row.trim().removePrefix("|").removeSuffix("|").split("|").map { it.trim() } }
    }

    @Test fun everyFeatureMarkedPresentForAndroidNamesMembersThatExist() {
        val names = apiNames()
        val rows = tableRows()
        var checked = 0
        for (row in rows) {
            assertEquals("four columns: $row", 4, row.size)
            val kotlin = row[3]
            if (kotlin == "no" || kotlin.startsWith("no ")) continue
            val members = Regex("`([A-Za-z_][A-Za-z0-9_]*)`").findAll(kotlin).map { it.groupValues[1] }.toList()
            assertTrue("row \"${row[0]}\" is marked present for Kotlin but names no member: $kotlin", members.isNotEmpty())
            for (member in members) assertTrue("row \"${row[0]}\" names `$member`, which the public API lacks", member in names)
            checked += 1
        }
        assertTrue("only $checked rows checked", checked >= 10)
    }

    @Test fun theReflectionSeesTheApiAndNotMadeUpNames() {
        val names = apiNames()
        for (known in listOf("connect", "sendChat", "onChat", "reconnectDelaysMs", "isRetryable", "PresenceClient")) assertTrue(known, known in names)
        assertFalse("fetchHistory" in names)
    }
}
