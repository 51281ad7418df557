import CallingAuth
import CallingCore
import CallingServer
import Foundation
import XCTest

@testable import CallingClient

/// Connecting, the roster, data, terminal closes and the MediaEngine seam, against the real server.
final class SignalingClientTests: ClientTestCase {
    func test_connect_waits_for_welcome_and_fills_peer_room_call_and_roster() async throws {
        let alice = try server.client("alice", token: server.token(peer: "alice", name: "Alice", call: "call-7"))
        let aliceEvents = EventLog(alice.events)
        XCTAssertEqual(alice.roomID, "room-1", "before connect the room comes from the token's room_id claim")
        let welcome = try await alice.connect()
        XCTAssertEqual(welcome.peerID, "alice")
        XCTAssertEqual(alice.peerID, "alice")
        XCTAssertEqual(alice.roomID, "room-1")
        XCTAssertEqual(alice.callID, "call-7")
        XCTAssertEqual(alice.state, .connected)
        XCTAssertEqual(alice.peers, [])

        let bob = try server.client("bob")
        try await bob.connect()
        XCTAssertEqual(bob.peers, [PeerInfo(peerID: "alice", role: "peer", name: "Alice")])
        let joined = try await aliceEvents.first { if case .peerJoined(let info) = $0 { info } else { nil } }
        XCTAssertEqual(joined.peerID, "bob")
        XCTAssertEqual(alice.peers.map(\.peerID), ["bob"])

        await bob.disconnect()
        XCTAssertEqual(bob.state, .ended)
        _ = try await aliceEvents.first { if case .peerLeft(let id) = $0, id == "bob" { id } else { nil } }
        XCTAssertEqual(alice.peers, [])
        let states = aliceEvents.all.compactMap(\.state)
        XCTAssertEqual(states, [.connecting, .connected])
        await alice.disconnect()
    }

    func test_data_goes_both_ways_addressed_and_broadcast() async throws {
        let alice = try server.client("alice")
        let bob = try server.client("bob")
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()
        try alice.sendData(["n": 1], to: "bob")
        try bob.sendData(["n": 2])
        let atBob = try await bobEvents.first { if case .data(let from, let payload) = $0 { (from, payload) } else { nil } }
        XCTAssertEqual(atBob.0, "alice")
        XCTAssertEqual(atBob.1, ["n": 1])
        let atAlice = try await aliceEvents.first { if case .data(let from, let payload) = $0 { (from, payload) } else { nil } }
        XCTAssertEqual(atAlice.0, "bob")
        XCTAssertEqual(atAlice.1, ["n": 2])

        try bob.reject("alice")
        _ = try await aliceEvents.first { if case .rejected(let id) = $0 { id } else { nil } }
        alice.hangup("bob")
        _ = try await bobEvents.first { if case .hangup(let id, _) = $0 { id } else { nil } }
        await alice.disconnect()
        await bob.disconnect()
        XCTAssertThrowsError(try alice.sendData(nil)) { XCTAssertEqual($0 as? CallingError, .notConnected) }
    }

    func test_a_refused_token_fails_connect_with_401_and_is_not_retried() async throws {
        let forged = try TokenIssuer(hs256Secret: Array("another-secret-0123456789abcdef-xyz".utf8)).issue(PeerTokenClaims(
            sub: "mallory", roomID: "room-1", scope: ["room"], audience: server.config.jwtAudience,
            expiresAt: Date().addingTimeInterval(600)))
        let client = try server.client("mallory", token: forged)
        let events = EventLog(client.events)
        do {
            try await client.connect()
            XCTFail("connect must throw")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 401)
            XCTAssertEqual(error.code, "token_bad_signature", "the server's problem code, not lws text")
            XCTAssertEqual(error.kind, .connectFailed(status: 401, code: "token_bad_signature",
                                                      message: "the token's signature does not verify (another secret or key)"))
            XCTAssertFalse(error.isRetryable)
        }
        guard case .failed = client.state else { return XCTFail("state \(client.state)") }
        try await Task.sleep(nanoseconds: 500_000_000)
        XCTAssertFalse(events.all.contains { if case .reconnecting = $0.state { true } else { false } })
    }

    func test_replaced_is_terminal_and_never_reconnects() async throws {
        let token = try server.token(peer: "alice")
        let first = try server.client("alice", token: token)
        let firstEvents = EventLog(first.events)
        try await first.connect()
        let second = try server.client("alice", token: token)
        try await second.connect()
        let failure = try await firstEvents.first { if case .failed(let error) = $0.state { error } else { nil } }
        XCTAssertEqual(failure, .replaced)
        XCTAssertEqual(failure.closeCode, 4400)
        // Reconnecting would take the seat back and loop; the second connection must stay put.
        try await Task.sleep(nanoseconds: 800_000_000)
        XCTAssertEqual(second.state, .connected)
        XCTAssertFalse(firstEvents.all.contains { if case .reconnecting = $0.state { true } else { false } })
        await second.disconnect()
    }

    func test_meter_frames_raise_meter_and_consultation_ended() async throws {
        // This server build does not send `meter` yet (docs/protocol.md); the frame is injected.
        let alice = try server.client("alice")
        let events = EventLog(alice.events)
        try await alice.connect()
        alice.receiveForTesting(#"{"payload":{"elapsed_s":50,"limit_s":60,"remaining_s":10,"state":"warning"},"type":"meter"}"#)
        alice.receiveForTesting(#"{"payload":{"elapsed_s":60,"limit_s":60,"remaining_s":0,"state":"ended"},"type":"meter"}"#)
        let ended = try await events.first { if case .consultationEnded(let meter) = $0 { meter } else { nil } }
        XCTAssertEqual(ended.limitSeconds, 60)
        XCTAssertEqual(ended.remainingSeconds, 0)
        let meters = events.all.compactMap { if case .meter(let meter) = $0 { meter.state } else { nil } }
        XCTAssertEqual(meters, ["warning", "ended"])
        XCTAssertEqual(events.all.filter { if case .consultationEnded = $0 { true } else { false } }.count, 1)
        await alice.disconnect()
    }

    func test_media_engine_offer_answer_candidates_queue_until_remote_description_and_stats() async throws {
        let aliceEngine = FakeMediaEngine(name: "alice")
        let bobEngine = FakeMediaEngine(name: "bob")
        let alice = try server.client("alice") {
            $0.mediaEngine = aliceEngine
            $0.statsInterval = 0.2
        }
        let bob = try server.client("bob") { $0.mediaEngine = bobEngine }
        let aliceEvents = EventLog(alice.events)
        let bobEvents = EventLog(bob.events)
        try await alice.connect()
        try await bob.connect()

        try await alice.call("bob")
        let incoming = try await bobEvents.first { if case .incoming(let call) = $0 { call } else { nil } }
        XCTAssertEqual(incoming.from, "alice")
        XCTAssertEqual(incoming.offer.sdp, "offer-from-alice")
        // alice's candidate travels right behind the offer, before bob has a remote description.
        try await Task.sleep(nanoseconds: 200_000_000)
        XCTAssertFalse(bobEngine.log.contains { $0.hasPrefix("addCandidate") }, "queued until the offer is applied")

        try await bob.accept("alice")
        try await eventually { aliceEngine.log.contains("setRemote bob answer answer-from-bob") }
        try await eventually { bobEngine.log.contains("addCandidate alice cand-alice") }
        let bobLog = bobEngine.log
        XCTAssertLessThan(bobLog.firstIndex(of: "setRemote alice offer offer-from-alice")!,
                          bobLog.firstIndex(of: "addCandidate alice cand-alice")!)
        // bob's own candidate reaches alice after her remote description is set.
        try await eventually { aliceEngine.log.contains("addCandidate bob cand-bob") }
        // Each side's peer connection got the servers of a fresh GET /v1/ice, right before it.
        let fetched = try await alice.fetchIceServers().servers.map(\.urls)
        XCTAssertEqual(aliceEngine.iceServersUsed(for: "bob").map { $0.map(\.urls) }, [fetched])
        XCTAssertEqual(bobEngine.iceServersUsed(for: "alice").map { $0.map(\.urls) }, [fetched])
        // Local mute reaches the engine; the call goes on.
        XCTAssertFalse(alice.isMuted)
        alice.setMuted(true)
        XCTAssertTrue(alice.isMuted)
        XCTAssertTrue(aliceEngine.muted)

        let sample = try await aliceEvents.first { if case .stats(let sample) = $0 { sample } else { nil } }
        XCTAssertEqual(sample.rttMs, 20)
        XCTAssertFalse(aliceEvents.all.contains { if case .error = $0 { true } else { false } },
                       "the server accepts the stats frame")

        alice.hangup("bob")
        _ = try await bobEvents.first { if case .hangup(let id, _) = $0 { id } else { nil } }
        try await eventually { bobEngine.log.contains("close alice") && aliceEngine.log.contains("close bob") }
        await alice.disconnect()
        await bob.disconnect()
    }

    /// A peer leaves while its call's answer is still being made, comes back and offers again.
    /// The old call's close (by peer id) must not overtake the new call's connection and close
    /// it, and the old answer must not reach the new call.
    func test_a_peer_that_leaves_and_offers_again_waits_for_its_old_calls_close() async throws {
        let engine = FakeMediaEngine(name: "agent")
        let agent = try server.client("agent") { $0.mediaEngine = engine }
        let events = EventLog(agent.events)
        try await agent.connect()
        func offer(_ sdp: String) {
            agent.receiveForTesting(JSONWriter.string(["type": "offer", "from": "ghost", "payload": ["type": "offer", "sdp": .string(sdp)]]))
        }

        engine.holdAnswers()
        offer("first")
        _ = try await events.first { $0.incomingCall?.offer.sdp == "first" ? true : nil }
        let first = Task { try await agent.accept("ghost") }
        try await eventually { engine.log.contains("answer ghost") }

        agent.receiveForTesting(JSONWriter.string(["type": "peer-left", "payload": ["peer_id": "ghost"]]))
        _ = try await events.first { $0.isHangup("ghost") ? true : nil }
        offer("second")
        _ = try await events.first { $0.incomingCall?.offer.sdp == "second" ? true : nil }
        let second = Task { try await agent.accept("ghost") }
        try await Task.sleep(nanoseconds: 200_000_000)
        XCTAssertEqual(engine.log.filter { $0 == "create ghost" }.count, 1, "the new call waits for the old one: \(engine.log)")

        engine.releaseAnswers()
        try await first.value
        try await second.value
        XCTAssertEqual(engine.log, ["create ghost", "setRemote ghost offer first", "answer ghost", "close ghost",
                                    "create ghost", "setRemote ghost offer second", "answer ghost"])
        await agent.disconnect()
    }
}

/// A MediaEngine that records calls and produces fixed SDP, one candidate per connection and a
/// fixed stats sample. `fireState` plays the engine reporting a connection state.
final class FakeMediaEngine: MediaEngine, @unchecked Sendable {
    // @unchecked: `entries`, `candidateSinks` and `stateSinks` only under `lock`.
    let name: String
    private let lock = NSLock()
    private var entries: [String] = []
    private var candidateSinks: [PeerID: @Sendable (IceCandidate) -> Void] = [:]
    /// Every `onStateChange` given for a peer, oldest connection first.
    private var stateSinks: [PeerID: [@Sendable (PeerConnectionState) -> Void]] = [:]

    init(name: String) { self.name = name }

    private var iceServerLists: [PeerID: [[IceServer]]] = [:]
    private var mutedStorage = false

    /// Every `useIceServers` list handed over for `peer`, oldest first.
    func iceServersUsed(for peer: PeerID) -> [[IceServer]] { lock.withLock { iceServerLists[peer] ?? [] } }
    var muted: Bool { lock.withLock { mutedStorage } }

    func useIceServers(_ servers: [IceServer], for peer: PeerID) {
        lock.withLock { iceServerLists[peer, default: []].append(servers) }
    }

    func setMuted(_ muted: Bool) { lock.withLock { mutedStorage = muted } }

    var log: [String] {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }

    private func record(_ entry: String) {
        lock.lock()
        entries.append(entry)
        lock.unlock()
    }

    func createPeerConnection(for peer: PeerID, onCandidate: @escaping @Sendable (IceCandidate) -> Void,
                              onStateChange: @escaping @Sendable (PeerConnectionState) -> Void) async throws
    {
        record("create \(peer)")
        lock.withLock {
            candidateSinks[peer] = onCandidate
            stateSinks[peer, default: []].append(onStateChange)
        }
    }

    /// Reports `state` through the `onStateChange` of `peer`'s latest peer connection, or of its
    /// `connection`-th one (0 = the first created) to play a late report from an older one.
    /// Returns false when no such connection was created.
    @discardableResult
    func fireState(_ state: PeerConnectionState, for peer: PeerID, connection: Int? = nil) -> Bool {
        let sink = lock.withLock { () -> (@Sendable (PeerConnectionState) -> Void)? in
            let sinks = stateSinks[peer] ?? []
            guard let index = connection ?? sinks.indices.last, sinks.indices.contains(index) else { return nil }
            return sinks[index]
        }
        sink?(state)
        return sink != nil
    }

    private func emitCandidate(to peer: PeerID) {
        lock.lock()
        let sink = candidateSinks[peer]
        lock.unlock()
        sink?(IceCandidate(candidate: "cand-\(name)", sdpMid: "0", sdpMLineIndex: 0))
    }

    func createOffer(for peer: PeerID) async throws -> SessionDescription {
        record("offer \(peer)")
        // Like a real engine, gathering starts with the local description; the candidate is
        // sent after the offer because both hop through the client's queue in this order.
        let description = SessionDescription(kind: .offer, sdp: "offer-from-\(name)")
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { self.emitCandidate(to: peer) }
        return description
    }

    /// While held, `createAnswer` waits for `releaseAnswers()` (a real engine's answer to an HTTP
    /// session waits up to seconds for ICE gathering).
    private var heldAnswers: [CheckedContinuation<Void, Never>]?

    func holdAnswers() { lock.withLock { heldAnswers = heldAnswers ?? [] } }

    func releaseAnswers() {
        let held = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            defer { heldAnswers = nil }
            return heldAnswers ?? []
        }
        for waiter in held { waiter.resume() }
    }

    func createAnswer(for peer: PeerID) async throws -> SessionDescription {
        record("answer \(peer)")
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let held = lock.withLock { () -> Bool in
                guard heldAnswers != nil else { return false }
                heldAnswers?.append(waiter)
                return true
            }
            if !held { waiter.resume() }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { self.emitCandidate(to: peer) }
        return SessionDescription(kind: .answer, sdp: "answer-from-\(name)")
    }

    func setRemoteDescription(_ description: SessionDescription, for peer: PeerID) async throws {
        record("setRemote \(peer) \(description.kind.rawValue) \(description.sdp)")
    }

    func addCandidate(_ candidate: IceCandidate, for peer: PeerID) async throws {
        record("addCandidate \(peer) \(candidate.candidate)")
    }

    func close(peer: PeerID) { record("close \(peer)") }

    /// `close <peer>` for `.ended` (what `close(peer:)` records, so existing expectations hold),
    /// `close <peer> replaced` for `.replaced`.
    func close(peer: PeerID, reason: CallEndReason) {
        switch reason {
        case .ended: close(peer: peer)
        case .replaced: record("close \(peer) replaced")
        }
    }

    func stats() async -> StatsSample? { StatsSample(rttMs: 20, jitterMs: 3.5, packetLoss: 0.01, bitrateKbps: 850) }
}

/// `GET /v1/ice` through `fetchIceServers()`.
final class IceServersTests: ClientTestCase {
    override func configure(_ config: inout ServerConfig) {
        config.stunURLs = "stun:stun.example.org:3478"
    }

    func test_fetchIceServers_returns_the_configured_servers_and_refuses_bad_tokens() async throws {
        let client = try server.client("alice")
        let ice = try await client.fetchIceServers()
        XCTAssertEqual(ice.servers, [IceServer(urls: ["stun:stun.example.org:3478"])])
        XCTAssertEqual(ice.ttl, 3600)
        XCTAssertGreaterThan(ice.expiresAt, Int64(Date().timeIntervalSince1970))

        let forged = try server.client("x", token: "not-a-jwt")
        do {
            _ = try await forged.fetchIceServers()
            XCTFail("must be refused")
        } catch let error as CallingError {
            XCTAssertEqual(error.httpStatus, 401)
            XCTAssertFalse(error.isRetryable)
        }
    }
}
