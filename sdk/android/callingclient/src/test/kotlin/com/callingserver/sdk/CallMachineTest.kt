package com.callingserver.sdk

import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Test

/**
 * The media layer's call logic, pure: the test plays the engine (it answers the actions with the
 * inputs an engine would post) and fires timers by hand.
 */
class CallMachineTest {
    private val machine = CallMachine()
    private val stun = listOf(IceServer(listOf("stun:s.example:3478")))

    private fun h(input: CallInput) = machine.handle(input)
    private inline fun <reified T : CallAction> of(actions: List<CallAction>) = actions.filterIsInstance<T>()
    private fun events(actions: List<CallAction>) = of<CallAction.Emit>(actions).map { it.event }

    /** alice calls bob up to the sent offer; returns the call's generation. */
    private fun outgoing(peer: String = "bob"): Long {
        val fetch = of<CallAction.FetchIce>(h(CallInput.Call(peer))).single()
        val setup = h(CallInput.IceServers(peer, fetch.generation, stun))
        assertEquals(CallAction.CreatePeerConnection(peer, fetch.generation, stun), of<CallAction.CreatePeerConnection>(setup).single())
        assertEquals(CallAction.CreateOffer(peer, fetch.generation, iceRestart = false, servers = null), of<CallAction.CreateOffer>(setup).single())
        val sent = of<CallAction.SendSignal>(h(CallInput.LocalDescription(peer, fetch.generation, "offer", "v=0 offer"))).single()
        assertEquals(CallAction.SendSignal("offer", peer, """{"type":"offer","sdp":"v=0 offer"}"""), sent)
        return fetch.generation
    }

    @Test fun aCallFetchesIceServersForItselfThenOffersAndTakesTheAnswer() {
        val gen = outgoing()
        val answer = h(CallInput.Signal("answer", "bob", """{"type":"answer","sdp":"v=0 answer"}"""))
        assertEquals(listOf(CallAction.SetRemote("bob", gen, "answer", "v=0 answer")), answer)
        // A second call fetches again: TURN credentials are per call.
        h(CallInput.Hangup("bob"))
        assertEquals(1, of<CallAction.FetchIce>(h(CallInput.Call("bob"))).size)
    }

    @Test fun candidatesWaitForTheRemoteDescription() {
        val gen = outgoing()
        val early = h(CallInput.Signal("candidate", "bob", """{"candidate":"candidate:1","sdpMid":"0","sdpMLineIndex":0}"""))
        assertTrue("queued, not added", of<CallAction.AddCandidate>(early).isEmpty())
        h(CallInput.Signal("candidate", "bob", """{"candidate":"","sdpMid":null,"sdpMLineIndex":null}""")) // end of candidates
        h(CallInput.Signal("answer", "bob", """{"type":"answer","sdp":"a"}"""))
        assertEquals(listOf(CallAction.AddCandidate("bob", "candidate:1", "0", 0)), of<CallAction.AddCandidate>(h(CallInput.RemoteDescriptionSet("bob", gen))))
        assertEquals(listOf(CallAction.AddCandidate("bob", "candidate:2", null, 1)),
            h(CallInput.Signal("candidate", "bob", """{"candidate":"candidate:2","sdpMid":null,"sdpMLineIndex":1}""")))
        val local = h(CallInput.LocalCandidate("bob", gen, "candidate:9", "0", 0))
        assertEquals(CallAction.SendSignal("candidate", "bob", """{"candidate":"candidate:9","sdpMid":"0","sdpMLineIndex":0}"""), local.single())
    }

    @Test fun anIncomingCallRingsAndIsAnsweredAfterItsIceServersOrRejected() {
        val ring = h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"v=0 o"}"""))
        assertEquals(listOf(CallEvent.Incoming("carl")), events(ring))
        assertTrue(of<CallAction.FetchIce>(ring).isEmpty())
        h(CallInput.Signal("candidate", "carl", """{"candidate":"candidate:1","sdpMid":"0","sdpMLineIndex":0}"""))
        val fetch = of<CallAction.FetchIce>(h(CallInput.Accept("carl"))).single()
        val setup = h(CallInput.IceServers("carl", fetch.generation, stun))
        assertEquals(CallAction.SetRemote("carl", fetch.generation, "offer", "v=0 o"), of<CallAction.SetRemote>(setup).single())
        val set = h(CallInput.RemoteDescriptionSet("carl", fetch.generation))
        assertEquals(listOf(CallAction.AddCandidate("carl", "candidate:1", "0", 0), CallAction.CreateAnswer("carl", fetch.generation)),
            set.filter { it is CallAction.AddCandidate || it is CallAction.CreateAnswer })
        assertEquals(CallAction.SendSignal("answer", "carl", """{"type":"answer","sdp":"v=0 a"}"""),
            h(CallInput.LocalDescription("carl", fetch.generation, "answer", "v=0 a")).single())

        h(CallInput.Signal("offer", "dana", """{"type":"offer","sdp":"x"}"""))
        val rejected = h(CallInput.Reject("dana"))
        assertEquals(CallAction.SendData("dana", """{"kind":"hangup"}"""), of<CallAction.SendData>(rejected).single())
        assertTrue("no peer connection to close", of<CallAction.Close>(rejected).isEmpty())
        assertEquals(listOf(CallEvent.Hangup("dana", "rejected")), events(rejected))
    }

    @Test fun hangupsEndCallsWithTheBrowserSdksReasons() {
        outgoing("bob")
        val remote = h(CallInput.Data("bob", """{"kind":"hangup"}"""))
        assertEquals(listOf(CallEvent.Hangup("bob", "remote")), events(remote))
        assertEquals(listOf(CallAction.Close("bob")), of<CallAction.Close>(remote))
        assertTrue("the peer ended it: nothing sent back", of<CallAction.SendData>(remote).isEmpty())

        h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"x"}"""))
        assertEquals(listOf(CallEvent.Hangup("carl", "cancelled")), events(h(CallInput.Data("carl", """{"kind":"hangup"}"""))))
        outgoing("dana")
        assertEquals(listOf(CallEvent.Hangup("dana", "peer-left")), events(h(CallInput.PeerLeft("dana"))))
        outgoing("erin")
        val local = h(CallInput.Hangup("erin"))
        assertEquals(listOf(CallAction.SendData("erin", """{"kind":"hangup"}""")), of<CallAction.SendData>(local))
        assertEquals(listOf(CallEvent.Hangup("erin", "local")), events(local))
    }

    @Test fun callsSurviveOurReconnectAndAreReconciledWithTheResumedRoster() {
        outgoing("bob")
        outgoing("dana")
        h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"x"}"""))
        assertTrue("a socket drop ends nothing", h(CallInput.SocketDown).isEmpty())
        val resumed = h(CallInput.Welcomed(listOf("bob")))
        assertEquals(setOf(CallEvent.Hangup("dana", "peer-left"), CallEvent.Hangup("carl", "cancelled")), events(resumed).toSet())
        assertEquals(setOf("bob"), machine.peers)
    }

    @Test fun theOffererRestartsIceAfterTheDebounceOnFailedAndAfterAResumeWithinTheWindow() {
        val gen = outgoing()
        h(CallInput.IceState("bob", gen, "connected"))
        val down = h(CallInput.IceState("bob", gen, "disconnected"))
        assertEquals(setOf(CallAction.Arm(CallTimer.IceWindow("bob"), 15_000), CallAction.Arm(CallTimer.IceDebounce("bob"), 2_000)),
            of<CallAction.Arm>(down).toSet())
        val restart = h(CallInput.TimerFired(CallTimer.IceDebounce("bob")))
        assertEquals(listOf(CallEvent.IceRestart("bob", 1)), events(restart))
        assertEquals(CallAction.FetchIce("bob", gen), of<CallAction.FetchIce>(restart).single())
        assertEquals(CallAction.Arm(CallTimer.IceRetry("bob"), 5_000), of<CallAction.Arm>(restart).single())
        // Fresh servers for the restart offer, on the same peer connection.
        assertEquals(listOf(CallAction.CreateOffer("bob", gen, iceRestart = true, servers = stun)), h(CallInput.IceServers("bob", gen, stun)))
        // While the peer is away nothing is restarted; its resume restarts at once.
        h(CallInput.PeerReconnecting("bob"))
        assertTrue(events(h(CallInput.TimerFired(CallTimer.IceRetry("bob")))).isEmpty())
        assertEquals(listOf(CallEvent.IceRestart("bob", 2)), events(h(CallInput.PeerResumed("bob"))))
        // Connected again: the timers stop and the attempts start over.
        val up = h(CallInput.IceState("bob", gen, "connected"))
        assertEquals(3, of<CallAction.Cancel>(up).size)
        assertEquals(listOf(CallEvent.MediaConnected("bob")), events(up))
        assertEquals(listOf(CallEvent.IceRestart("bob", 1)), events(h(CallInput.IceState("bob", gen, "failed"))))
    }

    @Test fun theAnswererNeverRestartsAndAnswersARestartOfferWithoutRinging() {
        h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"o1"}"""))
        val fetch = of<CallAction.FetchIce>(h(CallInput.Accept("carl"))).single()
        h(CallInput.IceServers("carl", fetch.generation, stun))
        h(CallInput.RemoteDescriptionSet("carl", fetch.generation))
        val failed = h(CallInput.IceState("carl", fetch.generation, "failed"))
        assertTrue(events(failed).isEmpty())
        assertTrue(of<CallAction.FetchIce>(failed).isEmpty())
        val again = h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"o2"}"""))
        assertEquals(listOf(CallAction.SetRemote("carl", fetch.generation, "offer", "o2")), again)
        assertEquals(listOf(CallAction.CreateAnswer("carl", fetch.generation)), h(CallInput.RemoteDescriptionSet("carl", fetch.generation)))
    }

    @Test fun theWindowEndsTheCallAsDisconnectedButNotWhileThePeerIsAway() {
        val gen = outgoing()
        h(CallInput.IceState("bob", gen, "failed"))
        h(CallInput.PeerReconnecting("bob"))
        assertEquals(listOf(CallAction.Arm(CallTimer.IceWindow("bob"), 15_000)), h(CallInput.TimerFired(CallTimer.IceWindow("bob"))))
        h(CallInput.PeerResumed("bob"))
        val ended = h(CallInput.TimerFired(CallTimer.IceWindow("bob")))
        assertEquals(listOf(CallEvent.Hangup("bob", "disconnected")), events(ended))
        assertEquals(listOf(CallAction.SendData("bob", """{"kind":"hangup"}""")), of<CallAction.SendData>(ended))
        assertEquals(listOf(CallAction.Close("bob")), of<CallAction.Close>(ended))
    }

    @Test fun statsAreSampledEveryFiveSecondsPerCallAndStaleResultsAreIgnored() {
        val first = of<CallAction.FetchIce>(h(CallInput.Call("bob"))).single()
        assertTrue(of<CallAction.Arm>(h(CallInput.IceServers("bob", first.generation, stun))).contains(CallAction.Arm(CallTimer.Stats, 5_000)))
        val tick = h(CallInput.TimerFired(CallTimer.Stats))
        assertEquals(listOf(CallAction.GetStats("bob", first.generation)), of<CallAction.GetStats>(tick))
        assertEquals(listOf(CallAction.Arm(CallTimer.Stats, 5_000)), of<CallAction.Arm>(tick))
        val sample = StatsSample(20.0, 3.5, 0.0, 850.0)
        assertEquals(CallAction.SendStats(sample), of<CallAction.SendStats>(h(CallInput.StatsSampled("bob", first.generation, sample))).single())
        assertTrue("nothing known: not sent", h(CallInput.StatsSampled("bob", first.generation, StatsSample(null, null, null, null))).isEmpty())
        // The call is replaced: results of the old peer connection are ignored.
        h(CallInput.Call("bob"))
        assertTrue(h(CallInput.StatsSampled("bob", first.generation, sample)).isEmpty())
        assertTrue(h(CallInput.LocalDescription("bob", first.generation, "offer", "late")).isEmpty())
    }

    @Test fun theSessionsEndEndsEveryCallAsDisconnectWithoutSendingAnything() {
        outgoing("bob")
        h(CallInput.Signal("offer", "carl", """{"type":"offer","sdp":"x"}"""))
        val ended = h(CallInput.SessionEnded)
        assertEquals(setOf(CallEvent.Hangup("bob", "disconnect"), CallEvent.Hangup("carl", "disconnect")), events(ended).toSet())
        assertEquals(listOf(CallAction.Close("bob")), of<CallAction.Close>(ended))
        assertTrue(of<CallAction.SendData>(ended).isEmpty())
        assertTrue(machine.peers.isEmpty())
    }
}
