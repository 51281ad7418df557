import CallingProtocol
import Foundation
import XCTest

@testable import CallingClient

/// The connection lifecycle both client sessions nest, on its own: inputs in, actions out, time
/// moved by hand.
final class ConnectionLifecycleTests: XCTestCase {
    private var machine = ConnectionLifecycle(token: "t1", settings: ConnectionLifecycle.Settings())
    private var now: TimeInterval = 0
    private var timers: [ConnectionLifecycle.Timer: TimeInterval] = [:]

    private func use(_ configure: (inout ConnectionLifecycle.Settings) -> Void) {
        var settings = ConnectionLifecycle.Settings()
        configure(&settings)
        machine = ConnectionLifecycle(token: "t1", settings: settings)
        timers = [:]
        now = 0
    }

    @discardableResult
    private func input(_ input: ConnectionLifecycle.Input) -> [ConnectionLifecycle.Action] {
        let actions = machine.handle(input)
        for action in actions {
            if case .arm(let timer, let delay) = action { timers[timer] = now + delay }
            if case .cancel(let timer) = action { timers[timer] = nil }
        }
        return actions
    }

    @discardableResult
    private func advance(by seconds: TimeInterval) -> [ConnectionLifecycle.Action] {
        let end = now + seconds
        var actions: [ConnectionLifecycle.Action] = []
        while let (timer, due) = timers.filter({ $0.value <= end }).min(by: { $0.value < $1.value }) {
            now = due
            timers[timer] = nil
            actions += input(.timerFired(timer))
        }
        now = end
        return actions
    }

    private func notices(_ actions: [ConnectionLifecycle.Action]) -> [ConnectionLifecycle.Notice] {
        actions.compactMap { if case .notify(let notice) = $0 { notice } else { nil } }
    }

    private func opened(_ actions: [ConnectionLifecycle.Action]) -> (id: UInt64, token: String)? {
        for case .openSocket(let id, let token) in actions { return (id, token) }
        return nil
    }

    /// connect() through the established session; returns its socket.
    @discardableResult
    private func established() -> UInt64 {
        let socket = opened(input(.connect(token: nil)))!.id
        XCTAssertEqual(input(.established), [.cancel(.connect)])
        XCTAssertEqual(machine.state, .open(socket: socket))
        return socket
    }

    private func drop() {
        input(.socketClosed(machine.currentSocket!, code: nil, reason: ""))
    }

    func test_backoff_follows_the_delays_and_repeats_the_last_one() {
        established()
        drop()
        XCTAssertEqual(machine.state, .backingOff(attempt: 1))
        var waited: [TimeInterval] = []
        for attempt in 1...5 {
            let start = now
            XCTAssertNil(opened(advance(by: 0)))
            var next: (id: UInt64, token: String)?
            while next == nil { next = opened(advance(by: 0.5)) }
            waited.append(now - start)
            XCTAssertEqual(machine.state, .connecting(attempt: attempt, socket: next!.id))
            if attempt < 5 { input(.socketFailed(next!.id, status: 503, code: nil, message: "at capacity")) }
        }
        XCTAssertEqual(waited, [1, 2, 4, 4, 4])
        // An established session starts the count again.
        input(.established)
        drop()
        XCTAssertEqual(machine.state, .backingOff(attempt: 1))
    }

    func test_attempts_run_out_into_failed_with_the_last_error() {
        use { $0.maxReconnectAttempts = 2 }
        established()
        drop()
        advance(by: 1)
        input(.socketFailed(machine.currentSocket!, status: nil, code: nil, message: "refused"))
        advance(by: 2)
        let last = input(.socketFailed(machine.currentSocket!, status: nil, code: nil, message: "refused"))
        let error = CallingError(.network(host: "", port: 0, reason: "refused"))
        XCTAssertEqual(notices(last), [.socketDown, .lost(error), .failed(error)])
        XCTAssertEqual(machine.state, .failed(error))
        XCTAssertNil(opened(advance(by: 60)))

        use { $0.maxReconnectAttempts = 0 }
        established()
        drop()
        XCTAssertEqual(machine.state, .failed(CallingError(.closed(code: nil, reason: ""))), "0 disables reconnecting")
    }

    func test_events_of_an_abandoned_or_ended_socket_are_ignored() {
        let first = established()
        drop()
        XCTAssertTrue(input(.socketClosed(first, code: nil, reason: "")).isEmpty, "an ended socket's second end")
        let second = opened(advance(by: 1))!.id
        XCTAssertNotEqual(second, first)
        // No session within the connect timeout: that socket is abandoned, and stays so.
        let timedOut = advance(by: 10)
        XCTAssertTrue(timedOut.contains(.abortSocket))
        XCTAssertEqual(machine.state, .backingOff(attempt: 2))
        XCTAssertFalse(machine.isCurrent(second))
        XCTAssertTrue(input(.socketFailed(second, status: 503, code: nil, message: "late")).isEmpty)
        XCTAssertTrue(input(.socketClosed(first, code: 1000, reason: "late")).isEmpty)
        XCTAssertEqual(machine.state, .backingOff(attempt: 2))
    }

    func test_the_first_connect_is_never_retried() {
        let socket = opened(input(.connect(token: "t0")))!
        XCTAssertEqual(socket.token, "t0")
        let failed = input(.socketFailed(socket.id, status: 503, code: nil, message: "busy"))
        guard case .failed = machine.state else { return XCTFail("\(machine.state)") }
        XCTAssertEqual(notices(failed).count, 3)  // socketDown, lost, failed
        XCTAssertNil(opened(advance(by: 60)))
        // Nor a connect timeout, which names the frame it waited for.
        use { $0.establishedBy = "connected" }
        input(.connect(token: nil))
        advance(by: 10)
        XCTAssertEqual(machine.state, .failed(CallingError(.timedOut("connected"))))
    }

    func test_token_expired_refreshes_the_token_before_the_next_attempt() {
        use { $0.hasTokenProvider = true }
        established()
        input(.socketClosed(machine.currentSocket!, code: 4401, reason: "token expired"))
        XCTAssertEqual(machine.state, .backingOff(attempt: 1))
        let due = advance(by: 1)
        XCTAssertEqual(due, [.refreshToken(attempt: 1)])
        XCTAssertEqual(machine.state, .refreshingToken(attempt: 1))
        XCTAssertTrue(input(.tokenRefreshed(attempt: 7, .success("stale"))).isEmpty)
        XCTAssertEqual(opened(input(.tokenRefreshed(attempt: 1, .success("t2"))))?.token, "t2")
        XCTAssertEqual(machine.token, "t2")
        // A provider that fails for a while backs off again; one that refuses is terminal.
        drop()
        advance(by: 2)
        input(.tokenRefreshed(attempt: 2, .failure(CallingError(.tokenProviderFailed("offline")))))
        XCTAssertEqual(machine.state, .backingOff(attempt: 3))
        advance(by: 4)
        input(.tokenRefreshed(attempt: 3, .failure(CallingError(.invalidToken("revoked")))))
        XCTAssertEqual(machine.state, .failed(CallingError(.invalidToken("revoked"))))

        use { $0.hasTokenProvider = false }
        established()
        input(.socketClosed(machine.currentSocket!, code: 4401, reason: "token expired"))
        XCTAssertEqual(machine.state, .failed(.tokenExpired), "no provider: 4401 is terminal")
    }

    func test_terminal_closes_do_not_reconnect() {
        for code: UInt16 in [4400, 4401, 4410] {
            use { _ in }
            established()
            let ended = input(.socketClosed(machine.currentSocket!, code: code, reason: "bye"))
            guard case .failed(let error) = machine.state else { return XCTFail("\(code) not terminal") }
            XCTAssertFalse(error.isRetryable)
            XCTAssertEqual(notices(ended).last, .failed(error))
            XCTAssertNil(opened(advance(by: 60)))
        }
    }

    func test_disconnect_closes_and_gives_up_on_a_silent_server_after_the_grace() {
        use { $0.closeGrace = 3 }
        let socket = established()
        XCTAssertEqual(input(.disconnect), [.closeSocket(code: 1000, reason: "normal"), .arm(.closeGrace, after: 3)])
        XCTAssertEqual(machine.state, .closing(socket: socket, established: true))
        XCTAssertTrue(advance(by: 2.9).isEmpty)
        let late = advance(by: 0.1)
        XCTAssertTrue(late.contains(.abortSocket))
        XCTAssertEqual(notices(late), [.closed])
        XCTAssertEqual(machine.state, .closed)
        XCTAssertTrue(input(.socketClosed(socket, code: 1000, reason: "normal")).isEmpty, "the late echo is stale")

        // An echo within the grace finishes at once, and no reconnect follows.
        let next = established()
        input(.disconnect)
        XCTAssertEqual(notices(input(.socketClosed(next, code: 1000, reason: "normal"))), [.socketDown, .closed])
        XCTAssertNil(timers[.closeGrace])
        XCTAssertNil(opened(advance(by: 60)))
    }

    func test_disconnect_during_backoff_or_token_refresh_ends_at_once() {
        established()
        drop()
        let during = input(.disconnect)
        XCTAssertTrue(during.contains(.cancel(.reconnect)))
        XCTAssertEqual(notices(during), [.closed])
        XCTAssertEqual(machine.state, .closed)
        XCTAssertNil(opened(advance(by: 60)), "the backoff timer is cancelled")

        use { $0.hasTokenProvider = true }
        established()
        drop()
        advance(by: 1)
        XCTAssertEqual(notices(input(.disconnect)), [.closed])
        XCTAssertTrue(input(.tokenRefreshed(attempt: 1, .success("t2"))).isEmpty, "the refresh's answer is stale")
        XCTAssertEqual(machine.state, .closed)
    }

    func test_a_refusal_before_the_first_session_fails_and_a_dead_socket_reconnects() {
        let socket = opened(input(.connect(token: nil)))!.id
        let refused = input(.refused(CallingError(.server(code: 403, message: "forbidden"))))
        XCTAssertEqual(refused.first, .abortSocket)
        XCTAssertEqual(notices(refused), [.lost(CallingError(.server(code: 403, message: "forbidden"))),
                                          .failed(CallingError(.server(code: 403, message: "forbidden")))])
        XCTAssertFalse(machine.isCurrent(socket))

        established()
        let dead = input(.dropped(CallingError(.closed(code: nil, reason: "no pong"))))
        XCTAssertEqual(dead.first, .abortSocket)
        XCTAssertEqual(machine.state, .backingOff(attempt: 1))
        XCTAssertNotNil(opened(advance(by: 1)))
    }
}
