import CallingServer
import Foundation
import XCTest

@testable import CallingClient

/// What survives a drop (docs/sdk.md), against the real server: two clients in a call, one
/// socket dropped without a close frame. The pure rules are in SignalingSessionDropTests; this
/// holds them against the server's reconnect grace (docs/protocol.md "Reconnect grace").
final class CallSurvivalTests: ClientTestCase {
    /// alice calls bob; both engines report `connected`. alice's reconnects wait for `gate`.
    private func inCall(gate: Gate) async throws
        -> (alice: SignalingClient, bob: SignalingClient, aliceEvents: EventLog<CallingEvent>,
            bobEvents: EventLog<CallingEvent>, aliceEngine: FakeMediaEngine, bobEngine: FakeMediaEngine)
    {
        let aliceEngine = FakeMediaEngine(name: "alice")
        let bobEngine = FakeMediaEngine(name: "bob")
        let aliceToken = try server.token(peer: "alice")
        let alice = try server.client("alice", token: aliceToken) {
            $0.mediaEngine = aliceEngine
            $0.tokenProvider = { await gate.wait(); return aliceToken }
        }
        let bob = try server.client("bob") { $0.mediaEngine = bobEngine }
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        try await alice.call("bob")
        _ = try await bobEvents.first { $0.incomingCall?.from }
        try await bob.accept("alice")
        try await eventually { aliceEngine.log.contains("setRemote bob answer answer-from-bob") }
        XCTAssertTrue(aliceEngine.fireState(.connected, for: "bob"))
        XCTAssertTrue(bobEngine.fireState(.connected, for: "alice"))
        return (alice, bob, aliceEvents, bobEvents, aliceEngine, bobEngine)
    }

    func test_a_dropped_socket_keeps_the_call_and_a_relay_during_the_grace_arrives_after_the_resume() async throws {
        let gate = Gate()
        let (alice, bob, aliceEvents, bobEvents, aliceEngine, bobEngine) = try await inCall(gate: gate)

        // bob does not read yet: his first relay goes out before he knows of the drop and is
        // refused with 480; the second is held because by then he knows.
        bob.pauseReadingForTesting()
        alice.dropConnectionForTesting()
        _ = try await aliceEvents.first { if case .reconnecting = $0.state { true } else { nil } }
        try await Task.sleep(nanoseconds: 300_000_000)  // the server has seen the socket end
        try bob.sendData(["n": 1], to: "alice")
        try await Task.sleep(nanoseconds: 300_000_000)  // the 480 is waiting in bob's socket
        bob.resumeReadingForTesting()
        _ = try await bobEvents.first { if case .peerReconnecting("alice") = $0 { true } else { nil } }
        try bob.sendData(["n": 2], to: "alice")
        try await Task.sleep(nanoseconds: 300_000_000)
        XCTAssertTrue(aliceEvents.all.allSatisfy { if case .data = $0 { false } else { true } })
        XCTAssertFalse(bobEvents.all.contains { if case .error = $0 { true } else { false } },
                       "the 480 is taken back into the hold, not reported: \(bobEvents.all)")

        await gate.open()
        _ = try await bobEvents.first { if case .peerResumed("alice") = $0 { true } else { nil } }
        try await aliceEvents.waitCount(2) { if case .data(from: "bob", _) = $0 { true } else { false } }
        let received = aliceEvents.all.compactMap { if case .data(_, let payload) = $0 { payload?["n"]?.int64Value } else { nil } }
        XCTAssertEqual(received, [1, 2])

        let resumed = try await aliceEvents.first { if case .connected(let welcome) = $0, welcome.resumed { welcome } else { nil } }
        XCTAssertEqual(resumed.peers.map(\.peerID), ["bob"])
        try await Task.sleep(nanoseconds: 300_000_000)
        for events in [aliceEvents, bobEvents] {
            XCTAssertFalse(events.all.contains { if case .hangup = $0 { true } else { false } }, "\(events.all)")
            XCTAssertFalse(events.all.contains { if case .peerLeft = $0 { true } else { false } }, "\(events.all)")
        }
        XCTAssertFalse(aliceEngine.log.contains { $0.hasPrefix("close") }, "\(aliceEngine.log)")
        XCTAssertFalse(bobEngine.log.contains { $0.hasPrefix("close") }, "\(bobEngine.log)")
        await alice.disconnect()
        _ = try await bobEvents.first { if case .hangup("alice", .peerLeft) = $0 { true } else { nil } }
        await bob.disconnect()
    }
}

/// A drop that outlasts the server's `reconnect_grace_ms` ends the call on the other side.
final class CallSurvivalGraceExpiryTests: ClientTestCase {
    override func configure(_ config: inout ServerConfig) {
        config.reconnectGraceMs = 400
        config.tickMs = 50
    }

    func test_a_drop_longer_than_the_grace_ends_the_call_as_peer_left() async throws {
        let gate = Gate()
        let aliceEngine = FakeMediaEngine(name: "alice")
        let bobEngine = FakeMediaEngine(name: "bob")
        let aliceToken = try server.token(peer: "alice")
        let alice = try server.client("alice", token: aliceToken) {
            $0.mediaEngine = aliceEngine
            $0.tokenProvider = { await gate.wait(); return aliceToken }
        }
        let bob = try server.client("bob") { $0.mediaEngine = bobEngine }
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        try await alice.call("bob")
        _ = try await bobEvents.first { $0.incomingCall?.from }
        try await bob.accept("alice")
        try await eventually { aliceEngine.log.contains("setRemote bob answer answer-from-bob") }
        XCTAssertTrue(bobEngine.fireState(.connected, for: "alice"))

        let dropped = Date()
        alice.dropConnectionForTesting()
        _ = try await bobEvents.first { if case .peerReconnecting("alice") = $0 { true } else { nil } }
        XCTAssertFalse(bobEvents.all.contains { $0.isHangup("alice") }, "the call waits out the grace")
        _ = try await bobEvents.first { if case .hangup("alice", .peerLeft) = $0 { true } else { nil } }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(dropped), 0.4, "not before the grace ran out")
        _ = try await bobEvents.first { if case .peerLeft("alice") = $0 { true } else { nil } }
        try await eventually { bobEngine.log.contains("close alice") }
        XCTAssertEqual(bobEvents.all.filter { $0.isHangup("alice") }.count, 1)
        await gate.open()
        await alice.disconnect()
        await bob.disconnect()
    }
}
