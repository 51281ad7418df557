import CallingProtocol
import XCTest

@testable import CallingClient

/// What survives a drop (docs/sdk.md): peers in their reconnect grace, our own resume, ringing
/// that ends, `leave`, and ICE restart, on the pure session with a fake clock.
final class SignalingSessionDropTests: XCTestCase {
    private var session: SignalingSession = {
        var settings = SignalingSession.Settings()
        settings.hasMediaEngine = true
        settings.pingInterval = 0
        settings.statsInterval = 0
        return SignalingSession(token: "t", settings: settings)
    }()
    private var now: TimeInterval = 0
    private var timers: [SessionTimer: TimeInterval] = [:]

    @discardableResult
    private func input(_ input: SessionInput) -> [SessionAction] {
        let actions = session.handle(input)
        for action in actions {
            if case .arm(let timer, let delay) = action { timers[timer] = now + delay }
            if case .cancel(let timer) = action { timers[timer] = nil }
        }
        return actions
    }

    @discardableResult
    private func server(_ text: String) -> [SessionAction] { input(.socketText(session.socket, text)) }

    private func advance(by seconds: TimeInterval) -> [SessionAction] {
        let end = now + seconds
        var actions: [SessionAction] = []
        while let (timer, due) = timers.filter({ $0.value <= end }).min(by: { $0.value < $1.value }) {
            now = due
            timers[timer] = nil
            actions += input(.timerFired(timer))
        }
        now = end
        return actions
    }

    private func events(_ actions: [SessionAction]) -> [CallingEvent] {
        actions.compactMap { if case .emit(let event) = $0 { event } else { nil } }
    }

    private func sent(_ actions: [SessionAction]) -> [Frame] {
        actions.compactMap { if case .send(let frame) = $0 { frame } else { nil } }
    }

    private func welcome(_ peers: String = #"[{"peer_id":"bob"}]"#) -> String {
        #"{"type":"welcome","payload":{"peer_id":"alice","room_id":"r","peers":\#(peers)}}"#
    }

    /// Connected, with a call to bob started and its offer sent; returns its connection number.
    private func calling() -> UInt64 {
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        for case .media(.startCall(_, let connection, _, _)) in input(.call("bob", waiter: 2)) {
            input(.mediaOfferCreated("bob", connection: connection, SessionDescription(kind: .offer, sdp: "v=0"), waiter: 2))
            return connection
        }
        XCTFail("no call started")
        return 0
    }

    /// Connected, with bob's offer accepted; returns its connection number.
    private func answering() -> UInt64 {
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=0"}}"#)
        for case .media(.answerCall(_, let connection, _, _)) in input(.accept("bob", waiter: 2)) { return connection }
        XCTFail("no answer started")
        return 0
    }

    private func candidate(_ n: Int) -> IceCandidate { IceCandidate(candidate: "c\(n)", sdpMid: "0", sdpMLineIndex: 0) }

    // MARK: the peer's grace

    func test_a_reconnecting_peer_keeps_its_call_and_its_relays_wait_for_peer_resumed_in_order() throws {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        // c1 is on its way when bob drops: the server refuses it with 480.
        XCTAssertEqual(sent(input(.localCandidate("bob", connection: connection, candidate(1)))).map(\.type), ["candidate"])
        let dropped = server(#"{"type":"peer-reconnecting","payload":{"peer_id":"bob"}}"#)
        XCTAssertEqual(events(dropped), [.peerReconnecting("bob")])
        XCTAssertEqual(session.peers.first?.reconnecting, true)
        let refused = server(#"{"type":"error","error":{"code":480,"message":"peer_reconnecting"},"payload":{"type":"candidate"}}"#)
        XCTAssertTrue(refused.isEmpty, "taken back into the hold, not reported: \(refused)")
        XCTAssertTrue(sent(input(.localCandidate("bob", connection: connection, candidate(2)))).isEmpty, "held")
        XCTAssertTrue(sent(try session.command(.sendData(["kind": "note"], to: "bob"))).isEmpty, "held")
        XCTAssertTrue(events(advance(by: 600)).isEmpty, "no hangup, no timeout")

        let back = server(#"{"type":"peer-resumed","payload":{"peer_id":"bob"}}"#)
        XCTAssertEqual(sent(back).map { $0.payload?["candidate"]?.stringValue ?? $0.type }, ["c1", "c2", "data"])
        XCTAssertTrue(sent(back).allSatisfy { $0.to == "bob" })
        XCTAssertEqual(events(back), [.peerResumed("bob")])
        XCTAssertEqual(session.peers.first?.reconnecting, false)
        XCTAssertEqual(sent(input(.localCandidate("bob", connection: connection, candidate(3)))).count, 1, "sent again at once")
        // A 480 with nothing of ours to take back is reported.
        XCTAssertEqual(events(server(#"{"type":"error","error":{"code":480,"message":"x"},"payload":{"type":"offer"}}"#)).count, 1)
    }

    func test_a_reconnecting_peer_that_leaves_drops_the_held_relays_and_ends_the_call_as_peer_left() throws {
        _ = calling()
        server(#"{"type":"peer-reconnecting","payload":{"peer_id":"bob"}}"#)
        _ = try session.command(.sendData(["kind": "note"], to: "bob"))
        let left = server(#"{"type":"peer-left","payload":{"peer_id":"bob"}}"#)
        XCTAssertEqual(events(left), [.hangup("bob", reason: .peerLeft), .peerLeft("bob")])
        XCTAssertTrue(sent(left).isEmpty)
        XCTAssertTrue(left.contains(.media(.close("bob", .ended))))
    }

    func test_held_relays_are_bounded() throws {
        var settings = SignalingSession.Settings()
        settings.heldRelayLimit = 2
        settings.pingInterval = 0
        session = SignalingSession(token: "t", settings: settings)
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        server(#"{"type":"peer-reconnecting","payload":{"peer_id":"bob"}}"#)
        XCTAssertTrue(try session.command(.sendData(1, to: "bob")).isEmpty)
        XCTAssertTrue(try session.command(.sendData(2, to: "bob")).isEmpty)
        let over = try session.command(.sendData(3, to: "bob"))
        guard case .emit(.error(let error))? = over.first else { return XCTFail("\(over)") }
        XCTAssertEqual(error.kind, .relayOverflow(peer: "bob", frameType: "data", limit: 2))
        XCTAssertEqual(error.code, "relay_overflow", "the browser SDK's code")
        XCTAssertFalse(error.isRetryable)
        XCTAssertEqual(error.localizedDescription, "data to bob dropped: bob is reconnecting and 2 frames already wait for it")
        XCTAssertEqual(sent(server(#"{"type":"peer-resumed","payload":{"peer_id":"bob"}}"#)).map(\.payload), [1, 2])
    }

    // MARK: our own resume

    func test_after_our_resume_calls_with_gone_peers_hang_up_and_ringing_offers_are_cancelled() {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        server(#"{"type":"peer-joined","payload":{"peer_id":"carol"}}"#)
        server(#"{"type":"peer-joined","payload":{"peer_id":"dave"}}"#)
        server(#"{"type":"offer","from":"carol","payload":{"type":"offer","sdp":"v=0"}}"#)
        input(.socketClosed(session.socket, code: nil, reason: ""))
        XCTAssertTrue(events(advance(by: 1)).allSatisfy { if case .hangup = $0 { false } else { true } }, "calls wait out the drop")
        let resumed = server(#"{"type":"welcome","payload":{"peer_id":"alice","room_id":"r","recovered":true,"peers":[{"peer_id":"dave","reconnecting":true}]}}"#)
        let hangups = events(resumed).filter { if case .hangup = $0 { true } else { false } }
        XCTAssertEqual(Set(hangups.map { "\($0)" }), Set([CallingEvent.hangup("bob", reason: .peerLeft), .hangup("carol", reason: .cancelled)].map { "\($0)" }))
        XCTAssertTrue(resumed.contains(.media(.close("bob", .ended))))
        // dave is in its grace: relays to it are held.
        XCTAssertTrue(sent(try! session.command(.sendData(1, to: "dave"))).isEmpty)
    }

    func test_after_our_resume_a_kept_call_without_media_restarts_ice() {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        input(.socketClosed(session.socket, code: nil, reason: ""))
        input(.connectionState("bob", connection: connection, .disconnected))
        let whileAway = advance(by: 1)
        XCTAssertFalse(whileAway.contains(.media(.restartIce("bob", connection: connection))), "not while our socket is down")
        let resumed = server(#"{"type":"welcome","payload":{"peer_id":"alice","room_id":"r","recovered":true,"peers":[{"peer_id":"bob"}]}}"#)
        XCTAssertTrue(resumed.contains(.media(.restartIce("bob", connection: connection))), "\(resumed)")
        XCTAssertTrue(events(resumed).contains(.iceRestart(peerID: "bob", attempt: 1)))
    }

    // MARK: ringing

    func test_a_ringing_offer_ends_as_cancelled_on_the_callers_hangup_or_its_peer_left() {
        input(.connect(token: nil, waiter: 1))
        server(welcome(#"[{"peer_id":"bob"},{"peer_id":"carol"}]"#))
        server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=0"}}"#)
        XCTAssertEqual(events(server(#"{"type":"data","from":"bob","payload":{"kind":"hangup"}}"#)), [.hangup("bob", reason: .cancelled)])
        let accept = input(.accept("bob", waiter: 3))
        guard case .resume(3, .failure(let error))? = accept.first, case .invalidState = error.kind else { return XCTFail("\(accept)") }
        server(#"{"type":"offer","from":"carol","payload":{"type":"offer","sdp":"v=0"}}"#)
        XCTAssertEqual(events(server(#"{"type":"peer-left","payload":{"peer_id":"carol"}}"#)),
                       [.hangup("carol", reason: .cancelled), .peerLeft("carol")])
    }

    // MARK: leaving

    func test_disconnect_says_leave_then_closes_1000() {
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        let actions = input(.disconnect(waiter: 2))
        let leave = actions.firstIndex { if case .send(let frame) = $0 { frame.type == "leave" } else { false } }
        let close = actions.firstIndex(of: .closeSocket(code: 1000, reason: "normal"))
        XCTAssertNotNil(leave, "\(actions)")
        XCTAssertNotNil(close)
        XCTAssertLessThan(leave ?? .max, close ?? .min)
    }

    func test_a_socket_the_sdk_abandons_is_never_closed_as_a_clean_leave() {
        // Connect timeout on a reconnect attempt, and an unanswered ping: the socket is dropped
        // without a close frame, so the server holds our seat (docs/protocol.md "Reconnect grace").
        var settings = SignalingSession.Settings()
        settings.pingInterval = 1
        session = SignalingSession(token: "t", settings: settings)
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        var actions = advance(by: 2.5)  // ping, no pong: dropped
        actions += advance(by: 1)       // reconnect attempt opens
        actions += advance(by: 10)      // no welcome: connect timeout
        XCTAssertGreaterThanOrEqual(actions.filter { $0 == .abortSocket }.count, 2, "\(actions)")
        XCTAssertFalse(actions.contains { if case .closeSocket = $0 { true } else { false } }, "\(actions)")
        XCTAssertFalse(sent(actions).contains { $0.type == "leave" })
    }

    // MARK: ICE restart

    func test_the_caller_restarts_ice_after_the_debounce_and_gives_up_after_the_window() {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        input(.connectionState("bob", connection: connection, .disconnected))
        XCTAssertTrue(events(advance(by: 1.9)).isEmpty)
        let first = advance(by: 0.1)
        XCTAssertEqual(events(first), [.iceRestart(peerID: "bob", attempt: 1)])
        XCTAssertTrue(first.contains(.media(.restartIce("bob", connection: connection))))
        let renewed = input(.mediaRenewed("bob", connection: connection, SessionDescription(kind: .offer, sdp: "v=2")))
        XCTAssertEqual(sent(renewed).map(\.type), ["offer"])
        XCTAssertEqual(events(advance(by: 5)), [.iceRestart(peerID: "bob", attempt: 2)], "retried while the window is open")
        let rest = advance(by: 8)
        let ended = events(rest)
        XCTAssertEqual(ended.filter { if case .iceRestart = $0 { true } else { false } }.count, 1, "at 12 s; the window ends at 15 s")
        guard case .callFailed("bob", let error)? = ended.dropLast().last, case .disconnected = error.kind else { return XCTFail("\(ended)") }
        XCTAssertEqual(ended.last, .hangup("bob", reason: .disconnected))
        XCTAssertEqual(sent(rest).last?.payload?["kind"], "hangup")
        XCTAssertTrue(rest.contains(.media(.close("bob", .ended))))
        XCTAssertTrue(events(advance(by: 60)).isEmpty, "no timers left")
    }

    func test_failed_restarts_at_once_and_connected_closes_the_window() {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        let failed = input(.connectionState("bob", connection: connection, .failed))
        XCTAssertTrue(failed.contains(.media(.restartIce("bob", connection: connection))))
        XCTAssertFalse(events(failed).contains { if case .hangup = $0 { true } else { false } })
        input(.connectionState("bob", connection: connection, .connected))
        XCTAssertTrue(events(advance(by: 60)).isEmpty, "recovered: no restart, no give-up")
    }

    func test_no_restart_to_a_reconnecting_peer_and_the_window_waits_for_its_grace() {
        let connection = calling()
        input(.connectionState("bob", connection: connection, .connected))
        server(#"{"type":"peer-reconnecting","payload":{"peer_id":"bob"}}"#)
        let failed = input(.connectionState("bob", connection: connection, .failed))
        XCTAssertFalse(failed.contains(.media(.restartIce("bob", connection: connection))))
        XCTAssertTrue(events(advance(by: 30)).isEmpty, "the window does not run out during the grace")
        let back = server(#"{"type":"peer-resumed","payload":{"peer_id":"bob"}}"#)
        XCTAssertTrue(back.contains(.media(.restartIce("bob", connection: connection))), "\(back)")
    }

    func test_the_answering_side_answers_a_renewed_offer_on_the_same_connection_and_never_restarts() {
        let connection = answering()
        input(.connectionState("bob", connection: connection, .connected))
        let failed = input(.connectionState("bob", connection: connection, .failed))
        XCTAssertFalse(failed.contains { if case .media(.restartIce) = $0 { true } else { false } })
        let offer = server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=restart"}}"#)
        XCTAssertEqual(offer, [.media(.renegotiate("bob", connection: connection, offer: SessionDescription(kind: .offer, sdp: "v=restart")))])
        let answered = input(.mediaRenewed("bob", connection: connection, SessionDescription(kind: .answer, sdp: "v=a")))
        XCTAssertEqual(sent(answered).map(\.type), ["answer"])
        input(.connectionState("bob", connection: connection, .connected))
        XCTAssertTrue(events(advance(by: 60)).isEmpty)
        // Without recovery the answerer gives up too, after the same window.
        input(.connectionState("bob", connection: connection, .disconnected))
        XCTAssertEqual(events(advance(by: 15)).last, .hangup("bob", reason: .disconnected))
    }
    func test_an_http_session_s_renewed_offer_is_answered_on_the_same_connection_and_another_session_is_a_new_call() {
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=0","session_id":"s1","transport":"http"}}"#)
        var connection: UInt64 = 0
        for case .media(.answerCall(_, let created, _, _)) in input(.accept("bob", waiter: 2)) { connection = created }
        XCTAssertNotEqual(connection, 0)
        // The caller's PATCH with a new offer on the same session: no `incoming`, the same connection.
        let renewed = server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=renew","session_id":"s1","transport":"http"}}"#)
        XCTAssertEqual(renewed, [.media(.renegotiate("bob", connection: connection,
                                                     offer: SessionDescription(kind: .offer, sdp: "v=renew", sessionID: "s1")))])
        let answered = input(.mediaRenewed("bob", connection: connection, SessionDescription(kind: .answer, sdp: "v=a", sessionID: "s1")))
        XCTAssertEqual(sent(answered).map(\.type), ["answer"])
        XCTAssertEqual(sent(answered).first?.payload?["session_id"], "s1", "the answer names the session, or the server ignores it")
        // A re-POST is a new session of the same peer: a new call, offered as `incoming`.
        let reposted = server(#"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=new","session_id":"s2","transport":"http"}}"#)
        XCTAssertTrue(events(reposted).contains { if case .incoming = $0 { true } else { false } }, "\(reposted)")
    }

    func test_a_late_restart_offer_of_an_ended_call_is_answered_with_hangup_and_a_new_connections_offer_rings() {
        input(.connect(token: nil, waiter: 1))
        server(welcome())
        // The o= line's session id is the connection's; an ICE restart only raises the version.
        func offer(_ session: String, _ version: Int) -> String {
            #"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=0\r\no=- \#(session) \#(version) IN IP4 127.0.0.1\r\ns=-\r\n"}}"#
        }
        server(offer("7563413199071111170", 2))
        var connection: UInt64 = 0
        for case .media(.answerCall(_, let number, _, _)) in input(.accept("bob", waiter: 2)) { connection = number }
        input(.connectionState("bob", connection: connection, .connected))
        input(.connectionState("bob", connection: connection, .failed))
        XCTAssertEqual(events(advance(by: 15)).last, .hangup("bob", reason: .disconnected))

        // bob's restart offer, held up while the network was down, arrives after our window ran out.
        let late = server(offer("7563413199071111170", 3))
        XCTAssertTrue(events(late).isEmpty, "not rung as a new call: \(late)")
        XCTAssertEqual(sent(late).map(\.type), ["data"])
        XCTAssertEqual(sent(late).first?.payload?["kind"], "hangup")

        // A new call from bob (a new connection: a new session id) rings as always.
        let fresh = server(offer("1111", 2))
        XCTAssertTrue(events(fresh).contains { if case .incoming = $0 { true } else { false } }, "\(fresh)")
    }
}
