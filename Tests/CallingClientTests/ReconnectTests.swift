import CallingServer
import Foundation
import XCTest

@testable import CallingClient

/// Automatic reconnect: backoff, resume with `last_seq`, exactly-once chat across an outage,
/// and terminal refusals.
final class ReconnectTests: ClientTestCase {
    func test_a_server_restart_reconnects_and_chat_is_delivered_exactly_once_both_ways() async throws {
        let gate = Gate()
        let aliceToken = try server.token(peer: "alice")
        let alice = try server.client("alice", token: aliceToken) {
            // Hold alice's reconnect until the test has produced traffic during her outage.
            $0.tokenProvider = { await gate.wait(); return aliceToken }
        }
        let bob = try server.client("bob")
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        _ = try await alice.sendChat("before", clientID: "a0")
        _ = try await bobEvents.first { $0.chatMessage?.clientID == "a0" ? true : nil }

        try await server.restart()
        _ = try await aliceEvents.first { if case .reconnecting = $0.state { true } else { nil } }
        let dropped = try await aliceEvents.first { if case .disconnected(let error?) = $0 { error } else { nil } }
        XCTAssertEqual(dropped.closeCode, 1001)

        // While alice is away: bob reconnects on his own and talks; alice queues a message.
        try await eventually { bob.state == .connected }
        let b1 = try await bob.sendChat("while you were away 1", clientID: "b1")
        let b2 = try await bob.sendChat("while you were away 2", clientID: "b2")
        let aliceSending = Task { try await alice.sendChat("sent during the outage", clientID: "a1") }
        try await Task.sleep(nanoseconds: 200_000_000)
        XCTAssertEqual(alice.state, .reconnecting(attempt: 1))

        await gate.open()
        let ack = try await aliceSending.value
        XCTAssertEqual(ack.seq, b2.seq + 1)
        XCTAssertEqual(alice.state, .connected)

        // alice got bob's two messages once each, through the resume replay.
        try await aliceEvents.waitCount(2) { $0.chatMessage?.from == "bob" }
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertEqual(aliceEvents.all.compactMap(\.chatMessage).map(\.seq), [b1.seq, b2.seq])
        // bob got alice's queued message once.
        _ = try await bobEvents.first { $0.chatMessage?.clientID == "a1" ? true : nil }
        XCTAssertEqual(bobEvents.all.compactMap(\.chatMessage).map(\.clientID), ["a0", "a1"])
        // The store holds each message once.
        let page = try await alice.fetchMessages()
        XCTAssertEqual(page.messages.map(\.clientID), ["a0", "b1", "b2", "a1"])
        XCTAssertEqual(alice.lastSeq, 4)

        let welcome = try await aliceEvents.first { if case .connected(let w) = $0, w.resumed { w } else { nil } }
        XCTAssertTrue(welcome.recovered)
        XCTAssertEqual(welcome.replayCount, 2)
        XCTAssertEqual(aliceEvents.all.compactMap(\.state),
                       [.connecting, .connected, .reconnecting(attempt: 1), .connected])
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_a_dropped_socket_reconnects_and_resends_an_unacked_chat_once() async throws {
        let alice = try server.client("alice")
        let bob = try server.client("bob")
        let bobEvents = EventLog(bob.events)
        let aliceEvents = EventLog(alice.events)
        try await alice.connect()
        try await bob.connect()
        // The ack is lost with the socket: the server stored the message, alice never heard.
        alice.pauseReadingForTesting()
        let sending = Task { try await alice.sendChat("ack lost", clientID: "lost-ack") }
        _ = try await bobEvents.first { $0.chatMessage?.clientID == "lost-ack" ? true : nil }
        alice.dropConnectionForTesting()
        let ack = try await sending.value
        XCTAssertEqual(ack.seq, 1)
        XCTAssertEqual(alice.state, .connected)
        let dropped = try await aliceEvents.first { if case .disconnected(let error?) = $0 { error } else { nil } }
        XCTAssertNil(dropped.closeCode, "no close frame")
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertEqual(bobEvents.all.compactMap(\.chatMessage).map(\.clientID), ["lost-ack"])
        XCTAssertTrue(aliceEvents.all.compactMap(\.chatMessage).isEmpty, "own message resolved, not echoed")
        await alice.disconnect()
        await bob.disconnect()
    }

    func test_an_unanswered_ping_drops_the_connection_and_reconnects() async throws {
        let alice = try server.client("alice") { $0.pingInterval = 0.2 }
        let events = EventLog(alice.events)
        try await alice.connect()
        // Pongs answered: nothing happens over several intervals.
        try await Task.sleep(nanoseconds: 700_000_000)
        XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected])
        // Pongs lost (a half-open connection): the client drops the socket and comes back.
        alice.setInboundFilterForTesting { type, _ in type != "pong" }
        _ = try await events.first { if case .reconnecting = $0.state { true } else { nil } }
        alice.setInboundFilterForTesting(nil)
        // Wait on the event stream, not `state`: the property changes before the event is delivered.
        try await eventually { events.all.compactMap(\.state).last == .connected && events.all.compactMap(\.state).count >= 4 }
        XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected, .reconnecting(attempt: 1), .connected])
        await alice.disconnect()
    }

    func test_a_401_on_reconnect_is_terminal_and_not_retried() async throws {
        let calls = Counter()
        let alice = try server.client("alice") {
            $0.tokenProvider = {
                calls.increment()
                return "not-a-jwt"
            }
        }
        let events = EventLog(alice.events)
        try await alice.connect()
        let pending = Task { try await alice.sendChat("never", clientID: "n1") }
        try await server.restart()
        let failure = try await events.first { if case .failed(let error) = $0.state { error } else { nil } }
        XCTAssertEqual(failure.httpStatus, 401)
        do {
            _ = try await pending.value
        } catch {
            // Either refused before the drop (no server) or failed with the terminal error.
        }
        try await Task.sleep(nanoseconds: 800_000_000)
        XCTAssertEqual(calls.value, 1, "the token provider is asked once: no retry after 401")
        XCTAssertEqual(events.all.compactMap(\.state).filter { if case .reconnecting = $0 { true } else { false } }.count, 1)
    }

    func test_disconnect_while_reconnecting_ends_the_session_and_fails_pending_chats() async throws {
        let alice = try server.client("alice") { $0.reconnectDelays = [0.2] }
        let events = EventLog(alice.events)
        try await alice.connect()
        server.stopServer()
        _ = try await events.first { if case .reconnecting = $0.state { true } else { nil } }
        let pending = Task { try await alice.sendChat("never sent", clientID: "p1") }
        try await Task.sleep(nanoseconds: 100_000_000)
        await alice.disconnect()
        XCTAssertEqual(alice.state, .ended)
        do {
            _ = try await pending.value
            XCTFail("a pending chat must fail on disconnect")
        } catch let error as CallingError {
            XCTAssertEqual(error, .notConnected)
        }
        try await Task.sleep(nanoseconds: 500_000_000)
        XCTAssertEqual(alice.state, .ended, "no reconnect after disconnect()")
    }

    func test_reconnect_gives_up_after_max_attempts() async throws {
        let alice = try server.client("alice") {
            $0.reconnectDelays = [0.05]
            $0.maxReconnectAttempts = 2
            $0.connectTimeout = 1
        }
        let events = EventLog(alice.events)
        try await alice.connect()
        server.stopServer()
        let failure = try await events.first { if case .failed(let error) = $0.state { error } else { nil } }
        XCTAssertTrue(failure.isRetryable, "a network failure: the app may offer a retry")
        XCTAssertEqual(events.all.compactMap(\.state),
                       [.connecting, .connected, .reconnecting(attempt: 1), .reconnecting(attempt: 2), .failed(failure)])
    }
}

/// A one-shot gate tests open to release a waiting task.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}

final class Counter: @unchecked Sendable {
    // @unchecked: `count` only under `lock`.
    private let lock = NSLock()
    private var count = 0
    func increment() {
        lock.lock()
        count += 1
        lock.unlock()
    }
    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }
}

/// A replay capped by `replay_cap` (`recovered: false`) is completed over REST.
final class CappedReplayTests: ClientTestCase {
    override func configure(_ config: inout ServerConfig) {
        config.replayCap = 2
    }

    func test_messages_beyond_the_replay_cap_are_fetched_and_reported_once_in_order() async throws {
        let gate = Gate()
        let aliceToken = try server.token(peer: "alice")
        let alice = try server.client("alice", token: aliceToken) {
            $0.tokenProvider = { await gate.wait(); return aliceToken }
        }
        let bob = try server.client("bob")
        let aliceEvents = EventLog(alice.events)
        try await alice.connect()
        try await bob.connect()
        _ = try await bob.sendChat("seen live", clientID: "b0")
        _ = try await aliceEvents.first { $0.chatMessage?.clientID == "b0" ? true : nil }

        try await server.restart()
        _ = try await aliceEvents.first { if case .reconnecting = $0.state { true } else { nil } }
        try await eventually { bob.state == .connected }
        for n in 1...5 { _ = try await bob.sendChat("missed \(n)", clientID: "b\(n)") }
        await gate.open()

        try await aliceEvents.waitCount(6) { $0.chatMessage != nil }
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertEqual(aliceEvents.all.compactMap(\.chatMessage).map(\.seq), [1, 2, 3, 4, 5, 6])
        let welcome = try await aliceEvents.first { if case .connected(let w) = $0, w.resumed { w } else { nil } }
        XCTAssertFalse(welcome.recovered)
        XCTAssertEqual(welcome.replayCount, 2)
        XCTAssertEqual(alice.lastSeq, 6)
        await alice.disconnect()
        await bob.disconnect()
    }
}

/// A token that expires while connected (4401): terminal, unless a token provider has a fresh one.
final class TokenExpiryTests: ClientTestCase {
    override func configure(_ config: inout ServerConfig) {
        config.jwtLeewaySeconds = 0
        config.tickMs = 100
    }

    func test_token_expired_without_a_token_provider_is_terminal() async throws {
        let fresh = try server.token(peer: "alice")
        let alice = try server.client("alice", token: server.token(peer: "alice", ttl: 2))
        let events = EventLog(alice.events)
        try await alice.connect()
        let failure = try await events.first(timeout: 6) { if case .failed(let error) = $0.state { error } else { nil } }
        XCTAssertEqual(failure, .tokenExpired)
        XCTAssertFalse(failure.isRetryable)
        XCTAssertThrowsError(try alice.markRead(1)) { XCTAssertEqual($0 as? CallingError, .notConnected) }

        // The app reconnects with a fresh token; the session resumes.
        let welcome = try await alice.connect(token: fresh)
        XCTAssertTrue(welcome.resumed)
        XCTAssertEqual(alice.state, .connected)
        await alice.disconnect()
    }

    func test_token_expired_asks_the_token_provider_and_resumes_with_the_fresh_token() async throws {
        let calls = Counter()
        let fresh = try server.token(peer: "alice")
        let alice = try server.client("alice", token: server.token(peer: "alice", ttl: 2)) {
            $0.tokenProvider = {
                calls.increment()
                return fresh
            }
        }
        let events = EventLog(alice.events)
        try await alice.connect()
        let dropped = try await events.first(timeout: 6) { if case .disconnected(let error?) = $0 { error } else { nil } }
        XCTAssertEqual(dropped, .tokenExpired)
        let welcome = try await events.first { if case .connected(let w) = $0, w.resumed { w } else { nil } }
        XCTAssertTrue(welcome.recovered)
        XCTAssertEqual(calls.value, 1)
        XCTAssertEqual(events.all.compactMap(\.state), [.connecting, .connected, .reconnecting(attempt: 1), .connected])
        _ = try await alice.sendChat("still here")
        await alice.disconnect()
    }
}

/// Delegate delivery mirrors the stream.
final class DelegateTests: ClientTestCase {
    final class Recorder: SignalingClientDelegate, @unchecked Sendable {
        // @unchecked: `events` only under `lock`.
        private let lock = NSLock()
        private var events: [CallingEvent] = []
        func signalingClient(_ client: SignalingClient, didReceive event: CallingEvent) {
            lock.withLock { events.append(event) }
        }
        var all: [CallingEvent] { lock.withLock { events } }
    }

    func test_the_delegate_gets_the_same_events_in_the_same_order() async throws {
        let recorder = Recorder()
        let alice = try server.client("alice")
        alice.delegate = recorder
        let stream = EventLog(alice.events)
        try await alice.connect()
        let bob = try server.client("bob")
        try await bob.connect()
        _ = try await bob.sendChat("to the delegate")
        try await stream.waitCount(1) { $0.chatMessage != nil }
        await bob.disconnect()
        await alice.disconnect()
        try await eventually { recorder.all.count == stream.all.count && recorder.all.last?.state == .ended }
        XCTAssertEqual(recorder.all, stream.all)
    }
}
