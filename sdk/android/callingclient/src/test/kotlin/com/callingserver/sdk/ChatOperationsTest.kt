package com.callingserver.sdk

import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/**
 * Chat operations (issue 43, docs/protocol.md): reply_to, edits, deletes and reactions through the
 * one pending ledger (ack, retry with the same client_id, resend after a reconnect, a replayed own
 * operation settling the call), their events once per seq live and replayed, and the new page
 * fields. The pure session fed the spec's frames by hand.
 */
class ChatOperationsTest {
    private val session = SignalingSession("tok")

    private fun sentText(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Send>().map { it.text }
    private fun events(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Emit>().map { it.event }
    private fun resolved(actions: List<SessionAction>) = actions.filterIsInstance<SessionAction.Resolve>()
    private fun frame(text: String) = session.handle(SessionInput.SocketText(session.currentSocketForTest(), text))

    private fun connected(lastSeq: Long = 0) {
        session.handle(SessionInput.Connect(1))
        frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","call_id":null,"role":"peer","name":null,"peers":[],"last_seq":$lastSeq,"read_seq":0,"unread":0}}""")
    }

    @Test fun everyOperationSendsTheSpecFrameAndResolvesWithItsOwnAck() {
        connected(lastSeq = 4)
        val frames = listOf(
            SessionInput.SendChat(2, "c1", "yes", null, 3),
            SessionInput.EditChat(3, "c2", 3, "fixed", """{"k":1}"""),
            SessionInput.DeleteChat(4, "c3", 2),
            SessionInput.React(5, "c4", 3, "👍", false),
            SessionInput.React(6, "c5", 3, "👍", true)
        ).flatMap { sentText(session.handle(it)) }
        assertEquals(listOf(
            """{"type":"chat","payload":{"client_id":"c1","text":"yes","reply_to":3}}""",
            """{"type":"chat-edit","payload":{"client_id":"c2","target":3,"text":"fixed","meta":{"k":1}}}""",
            """{"type":"chat-delete","payload":{"client_id":"c3","target":2}}""",
            """{"type":"chat-react","payload":{"client_id":"c4","target":3,"key":"👍"}}""",
            """{"type":"chat-react","payload":{"client_id":"c5","target":3,"key":"👍","remove":true}}"""
        ), frames)
        val acks = (1..5).map { i -> resolved(frame("""{"type":"chat-ack","payload":{"client_id":"c$i","seq":${4 + i},"ts":${100 + i}}}""")).single() }
        assertEquals((1..5).map { ChatAck("c$it", 4L + it, 100L + it) }, acks.map { it.value })
        assertEquals((2L..6L).toList(), acks.map { it.waiter })
        assertEquals(9L, session.lastSeq)
    }

    @Test fun anOperationIsRetriedWithItsClientIdAndRefusalsFailOnlyThatType() {
        connected()
        session.handle(SessionInput.EditChat(2, "e1", 1, "again"))
        val retry = sentText(session.handle(SessionInput.TimerFired(SessionTimer.ChatAck("e1"))))
        assertEquals(listOf("""{"type":"chat-edit","payload":{"client_id":"e1","target":1,"text":"again"}}"""), retry)
        val forbidden = frame("""{"type":"chat-ack","payload":{"client_id":"e1"},"error":{"code":444,"message":"edit window passed"}}""")
        val error = resolved(forbidden).single().error!!
        assertEquals(444, error.serverCode)
        assertEquals("chat-edit", error.frameType)
        // An error frame about a chat-react frame fails the latest reaction, not the pending chat.
        session.handle(SessionInput.SendChat(3, "m1", "hi"))
        session.handle(SessionInput.React(4, "r1", 1, "ok", false))
        val refused = frame("""{"type":"error","error":{"code":422,"message":"bad frame"},"payload":{"type":"chat-react"}}""")
        assertEquals(listOf(4L), resolved(refused).map { it.waiter })
        assertEquals(1, resolved(frame("""{"type":"chat-ack","payload":{"client_id":"m1","seq":2,"ts":2}}""")).size)
    }

    @Test fun inboundOperationsAreReportedOncePerSeqAndAReplayedOwnOperationSettlesIt() {
        connected(lastSeq = 1)
        val reply = events(frame("""{"type":"chat","from":"bob","payload":{"client_id":"b2","seq":2,"ts":20,"text":"re","meta":null,"reply_to":1}}"""))
        assertEquals(2L, (reply.single() as CallingEvent.Chat).message.seq)
        assertEquals(1L, (reply.single() as CallingEvent.Chat).message.replyTo)
        val edit = events(frame("""{"type":"chat-edit","from":"bob","payload":{"client_id":"b3","seq":3,"ts":30,"target":2,"text":"re!","meta":{"m":1}}}"""))
        assertEquals(listOf(CallingEvent.ChatEdited(ChatEdit("bob", 3, 30, "b3", 2, "re!", """{"m":1}""", false))), edit)
        val react = """{"type":"chat-react","from":"bob","payload":{"client_id":"b4","seq":4,"ts":40,"target":2,"key":"🎉","remove":false}}"""
        assertEquals(listOf(CallingEvent.ChatReactionChanged(ChatReaction("bob", 4, 40, "b4", 2, "🎉", false))), events(frame(react)))
        assertTrue("once per seq", events(frame(react)).isEmpty())
        // Our delete goes out; its ack is lost with the socket.
        session.handle(SessionInput.DeleteChat(2, "a5", 2))
        session.handle(SessionInput.SocketClosed(session.currentSocketForTest(), 1001, "restart"))
        val open = session.handle(SessionInput.TimerFired(SessionTimer.Lifecycle(ConnectionLifecycle.Timer.RECONNECT)))
        assertEquals("/v1/ws?last_seq=4", open.filterIsInstance<SessionAction.OpenSocket>().single().path)
        val welcome = frame("""{"type":"welcome","payload":{"peer_id":"me","room_id":"r","peers":[],"last_seq":7,"recovered":false,"replay_count":4}}""")
        assertEquals(listOf("""{"type":"chat-delete","payload":{"client_id":"a5","target":2}}"""), sentText(welcome))
        // The replay counts operations: the overlap, our delete, bob's edit of the deleted message, his unreact.
        val replay = listOf(
            react,
            """{"type":"chat-delete","from":"me","payload":{"client_id":"a5","seq":5,"ts":50,"target":2}}""",
            """{"type":"chat-edit","from":"bob","payload":{"client_id":"b6","seq":6,"ts":60,"target":2,"text":"","meta":null,"deleted":true}}""",
            """{"type":"chat-react","from":"bob","payload":{"client_id":"b7","seq":7,"ts":70,"target":2,"key":"🎉","remove":true}}"""
        ).map { frame(it) }
        assertEquals(ChatAck("a5", 5, 50), resolved(replay[1]).single().value)
        assertEquals(listOf(
            CallingEvent.ChatEdited(ChatEdit("bob", 6, 60, "b6", 2, "", null, true)),
            CallingEvent.ChatReactionChanged(ChatReaction("bob", 7, 70, "b7", 2, "🎉", true))
        ), replay.flatMap { events(it) })
        // The replay was capped: the gap fill starts after its last frame, so every operation was counted.
        assertEquals(SessionAction.FetchGap(7, session.currentSocketForTest()), replay.last().filterIsInstance<SessionAction.FetchGap>().single())
        val deleted = events(frame("""{"type":"chat-delete","from":"carol","payload":{"client_id":"c8","seq":8,"ts":80,"target":2}}"""))
        assertEquals(listOf(CallingEvent.ChatDeleted(ChatDeletion("carol", 8, 80, "c8", 2))), deleted)
        val tomb = events(frame("""{"type":"chat","from":"bob","payload":{"client_id":"b9","seq":9,"ts":90,"text":"","meta":null,"deleted":true}}"""))
        assertTrue((tomb.single() as CallingEvent.Chat).message.deleted)
        assertEquals(9L, session.lastSeq)
    }

    @Test fun historyAndInboxPagesReadEveryField() {
        val page = MessagesPage.from(JSONObject("""{"room_id":"r1","messages":[
            {"seq":7,"from":"bob","client_id":"b7","text":"now","meta":null,"ts":70,"reply_to":3,"edited_ts":80,
             "reactions":[{"key":"👍","count":2,"peers":["alice","carol"]}],"edits":[{"seq":8,"ts":80,"text":"now","meta":null}]},
            {"seq":5,"from":"bob","client_id":"b5","text":"","meta":null,"ts":50,"deleted":true,"deleted_ts":60,"reactions":[]}],
            "next_before_seq":5,"has_more":true,"last_seq":9,"limit":2}"""), "r1", 0, 2)
        assertEquals(5L, page.nextBeforeSeq)
        assertEquals(ChatMessage(7, "bob", "b7", "now", 70, null, 3, false, 80, null, listOf(ReactionCount("👍", 2, listOf("alice", "carol"))),
            listOf(ChatEditEntry(8, 80, "now", null))), page.messages[0])
        assertEquals(ChatMessage(5, "bob", "b5", "", 50, null, null, true, null, 60, emptyList(), null), page.messages[1])
        assertNull(MessagesPage.from(JSONObject("""{"messages":[],"next_since_seq":0,"has_more":false}"""), "r1", 0, 50).nextBeforeSeq)
        val inbox = InboxPage.from(JSONObject("""{"rooms":[
            {"room_id":"r1","last_seq":9,"last_ts":90,"last_message":{"seq":7,"from":"bob","text":"now","ts":70},"read_seq":4,"unread":2},
            {"room_id":"r2","last_seq":1,"last_ts":10,"last_message":null,"read_seq":0,"unread":0}],"has_more":true,"next_cursor":"abc"}"""))
        assertEquals(InboxPage(listOf(InboxRoom("r1", 9, 90, InboxMessage(7, "bob", "now", 70), 4, 2), InboxRoom("r2", 1, 10, null, 0, 0)), true, "abc"), inbox)
    }
}
