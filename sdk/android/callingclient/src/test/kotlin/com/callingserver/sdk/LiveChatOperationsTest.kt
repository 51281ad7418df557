package com.callingserver.sdk

import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Before
import org.junit.Test
import java.util.concurrent.Executors
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * Chat operations (issue 43) against a real `calling-server` this test starts on loopback: a
 * reply, an edit, reactions, a delete, the server's refusals, operations replayed once each on a
 * resume, history backward with the edit log, and the inbox with a user token.
 */
class LiveChatOperationsTest {
    private lateinit var server: ServerProcess
    private val clients = ArrayList<CallingClient>()
    private val callbacks = Executors.newSingleThreadExecutor()

    private class Recorder : Listener {
        val events = LinkedBlockingQueue<Any>()
        override fun onChat(message: ChatMessage) { events.add(message) }
        override fun onChatEdited(edit: ChatEdit) { events.add(edit) }
        override fun onChatDeleted(deletion: ChatDeletion) { events.add(deletion) }
        override fun onChatReaction(reaction: ChatReaction) { events.add(reaction) }

        fun <T> await(what: String, match: (Any) -> T?): T {
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10)
            while (true) {
                val left = deadline - System.nanoTime()
                val event = events.poll(maxOf(left, 0), TimeUnit.NANOSECONDS) ?: throw AssertionError("no $what within 10 s")
                match(event)?.let { return it }
            }
        }
    }

    private fun client(token: String, recorder: Recorder = Recorder()): CallingClient {
        val client = CallingClient(server.wsBase, token, recorder, callbacks)
        clients.add(client)
        return client
    }

    @Before fun startServer() { server = ServerProcess().start() }

    @After fun stopAll() {
        runBlocking { for (client in clients) try { withTimeout(3_000) { client.disconnect() } } catch (e: Exception) {} }
        clients.forEach { it.close() }
        callbacks.shutdown()
        server.close()
    }

    private suspend fun refused(code: Int, block: suspend () -> Unit) {
        try {
            block()
            fail("must be refused with $code")
        } catch (e: CallingError) {
            assertEquals(code, e.serverCode)
            assertFalse(e.isRetryable)
        }
    }

    @Test fun replyEditReactDeleteResumeHistoryAndInbox() = runBlocking<Unit> {
        val aliceEvents = Recorder()
        val bobEvents = Recorder()
        val alice = client(server.token("r", "alice"), aliceEvents)
        val bob = client(server.token("r", "bob"), bobEvents)
        alice.connect()
        bob.connect()

        val question = alice.sendChat("lunch at 12?")
        val answer = bob.sendChat("yes", replyTo = question.seq)
        assertEquals(question.seq, aliceEvents.await("the reply") { it as? ChatMessage }.replyTo)
        val edit = bob.editChat(answer.seq, "yes, at 12:30")
        val edited = aliceEvents.await("the edit") { it as? ChatEdit }
        assertEquals(ChatEdit("bob", edit.seq, edit.ts, edit.clientId, answer.seq, "yes, at 12:30", null, false), edited)
        alice.react(answer.seq, "👍")
        alice.unreact(answer.seq, "👍")
        assertFalse(bobEvents.await("the reaction") { it as? ChatReaction }.removed)
        assertTrue(bobEvents.await("its removal") { it as? ChatReaction }.removed)

        refused(444) { bob.deleteChat(question.seq) }
        refused(443) { alice.editChat(9999, "nothing there") }
        refused(445) { alice.react(question.seq, "two words") }

        val deleted = bob.deleteChat(answer.seq)
        assertEquals(ChatDeletion("bob", deleted.seq, deleted.ts, deleted.clientId, answer.seq), aliceEvents.await("the delete") { it as? ChatDeletion })

        // bob away: alice's edit and reaction come back to him once each when he resumes.
        bob.disconnect()
        alice.editChat(question.seq, "lunch at 12:30?")
        val last = alice.react(question.seq, "🎉")
        val welcome = bob.connect()
        assertTrue(welcome.resumed)
        assertEquals(2, welcome.replayCount)
        assertEquals(question.seq, bobEvents.await("the replayed edit") { it as? ChatEdit }.target)
        assertEquals("🎉", bobEvents.await("the replayed reaction") { it as? ChatReaction }.key)

        val page = bob.fetchMessages(beforeSeq = last.seq + 1, limit = 10, includeEdits = true)
        assertEquals(listOf(answer.seq, question.seq), page.messages.map { it.seq })
        assertFalse(page.hasMore)
        val tomb = page.messages[0]
        val first = page.messages[1]
        assertEquals(listOf(true, "", question.seq), listOf(tomb.deleted, tomb.text, tomb.replyTo))
        assertEquals("lunch at 12:30?", first.text)
        assertEquals(listOf("lunch at 12:30?"), first.edits?.map { it.text })
        assertEquals(listOf(ReactionCount("🎉", 1, listOf("alice"))), first.reactions)
        assertEquals(listOf(question.seq, answer.seq), bob.fetchMessages().messages.map { it.seq })

        val inbox = client(server.userToken("bob")).inbox(limit = 10)
        assertEquals(listOf("r"), inbox.rooms.map { it.roomId })
        assertEquals(question.seq, inbox.rooms[0].lastMessage?.seq)
        assertEquals(last.seq, inbox.rooms[0].lastSeq)
        assertFalse(inbox.hasMore)
    }
}
