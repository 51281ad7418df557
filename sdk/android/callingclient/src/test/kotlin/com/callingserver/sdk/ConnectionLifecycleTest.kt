package com.callingserver.sdk

import com.callingserver.sdk.ConnectionLifecycle.Action
import com.callingserver.sdk.ConnectionLifecycle.Input
import com.callingserver.sdk.ConnectionLifecycle.Notice
import com.callingserver.sdk.ConnectionLifecycle.State
import com.callingserver.sdk.ConnectionLifecycle.Timer
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Test

/** The pure lifecycle: every timer is fired by hand, so nothing sleeps. */
class ConnectionLifecycleTest {
    private fun established(provider: Boolean = false): ConnectionLifecycle {
        val machine = ConnectionLifecycle("t0", ConnectionLifecycle.Settings(hasTokenProvider = provider))
        machine.handle(Input.Connect())
        machine.handle(Input.Established)
        return machine
    }

    @Test fun backoffIsOneTwoFourSecondsThenFailsAfterMaxAttempts() {
        val machine = established()
        var actions = machine.handle(Input.SocketClosed(1, 1001, "server shutting down"))
        val delays = ArrayList<Long>()
        var socket = 1L
        for (attempt in 1..5) {
            val arm = actions.filterIsInstance<Action.Arm>().single { it.timer == Timer.RECONNECT }
            delays.add(arm.afterMs)
            assertTrue(actions.contains(Action.Notify(Notice.Retrying(attempt))))
            actions = machine.handle(Input.TimerFired(Timer.RECONNECT))
            socket = actions.filterIsInstance<Action.OpenSocket>().single().id
            actions = machine.handle(Input.SocketFailed(socket, CallingError("closed", "refused", isRetryable = true)))
        }
        assertEquals(listOf(1_000L, 2_000L, 4_000L, 4_000L, 4_000L), delays)
        assertTrue(machine.state is State.Failed)
        assertTrue(actions.any { it is Action.Notify && it.notice is Notice.Failed })
    }

    @Test fun firstConnectTimeoutFailsWithoutRetryAndAbandonsTheSocket() {
        val machine = ConnectionLifecycle("t0", ConnectionLifecycle.Settings(connectTimeoutMs = 500))
        val opened = machine.handle(Input.Connect())
        assertEquals(Action.Arm(Timer.CONNECT, 500), opened.filterIsInstance<Action.Arm>().single())
        val actions = machine.handle(Input.TimerFired(Timer.CONNECT))
        assertTrue(actions.contains(Action.AbortSocket))
        assertTrue(actions.none { it is Action.Arm })
        val state = machine.state as State.Failed
        assertEquals("timeout", state.error.code)
        // The abandoned socket's late close changes nothing.
        assertTrue(machine.handle(Input.SocketClosed(1, 1000, "")).isEmpty())
    }

    @Test fun replacedCloseIsTerminal() {
        val machine = established()
        val actions = machine.handle(Input.SocketClosed(1, 4400, "replaced"))
        assertTrue(actions.none { it is Action.Arm || it is Action.OpenSocket })
        assertEquals(4400, (machine.state as State.Failed).error.closeCode)
    }

    @Test fun tokenExpiredCloseRefreshesTheTokenWhenThereIsAProvider() {
        assertTrue(established(provider = false).handle(Input.SocketClosed(1, 4401, "token expired"))
            .none { it is Action.Arm })
        val machine = established(provider = true)
        machine.handle(Input.SocketClosed(1, 4401, "token expired"))
        assertEquals(listOf(Action.RefreshToken(1)), machine.handle(Input.TimerFired(Timer.RECONNECT)))
        // A refresh answer for another attempt is stale.
        assertTrue(machine.handle(Input.TokenRefreshed(7, "x", null)).isEmpty())
        val actions = machine.handle(Input.TokenRefreshed(1, "t1", null))
        assertEquals(Action.OpenSocket(2, "t1"), actions.first())
    }

    @Test fun eventsOfAnOldSocketAreIgnored() {
        val machine = established()
        machine.handle(Input.SocketClosed(1, 1006, ""))
        machine.handle(Input.TimerFired(Timer.RECONNECT))
        assertEquals(2L, machine.currentSocket)
        assertTrue(machine.handle(Input.SocketClosed(1, 1000, "")).isEmpty())
        assertEquals(State.Connecting(1, 2), machine.state)
    }

    @Test fun disconnectClosesWith1000AndTheGraceEndsAWaitThatGetsNoEcho() {
        val machine = established()
        val actions = machine.handle(Input.Disconnect)
        assertEquals(listOf(Action.CloseSocket(1000, "normal"), Action.Arm(Timer.CLOSE_GRACE, 2_000)), actions)
        val end = machine.handle(Input.TimerFired(Timer.CLOSE_GRACE))
        assertTrue(end.contains(Action.AbortSocket))
        assertTrue(end.contains(Action.Notify(Notice.Closed)))
        assertEquals(State.Closed, machine.state)
    }
}
