import CallingProtocol
import Foundation
import XCTest

@testable import CallingClient

/// The SDK's decisions as a pure state machine, like `HubTests` for the server: inputs in,
/// actions out. Time is a variable; timers fire when the test moves it. No server, no sleeps.
final class SignalingSessionTests: XCTestCase {
    private var session = SignalingSession(token: "t1", settings: SignalingSession.Settings())
    private var now: TimeInterval = 0
    /// Armed timers and when they fire.
    private var timers: [SessionTimer: TimeInterval] = [:]
    /// Every action so far, in order.
    private var log: [SessionAction] = []
    private var resumed: [Waiter: Result<WaiterOutcome, CallingError>] = [:]
    private var nextWaiter: Waiter = 0

    // MARK: - Driving the session

    private func use(_ configure: (inout SignalingSession.Settings) -> Void) {
        var settings = SignalingSession.Settings()
        configure(&settings)
        session = SignalingSession(token: "t1", settings: settings)
    }

    @discardableResult
    private func input(_ input: SessionInput) -> [SessionAction] {
        record(session.handle(input))
    }

    @discardableResult
    private func record(_ actions: [SessionAction]) -> [SessionAction] {
        for action in actions {
            switch action {
            case .arm(let timer, let delay): timers[timer] = now + delay
            case .cancel(let timer): timers[timer] = nil
            case .resume(let waiter, let result): resumed[waiter] = result
            default: break
            }
        }
        log += actions
        return actions
    }

    @discardableResult
    private func command(_ command: SessionCommand) throws -> [SessionAction] {
        record(try session.command(command))
    }

    private func waiter() -> Waiter {
        nextWaiter += 1
        return nextWaiter
    }

    /// Moves time forward, firing due timers in deadline order (a fire may arm new ones).
    @discardableResult
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

    private func server(_ json: JSONValue) -> [SessionAction] {
        input(.socketText(session.socket, JSONWriter.string(json)))
    }

    private func welcome(peer: String = "alice", lastSeq: Int64 = 0, peers: [String] = [],
                         resumed: (recovered: Bool, replay: Int)? = nil) -> JSONValue
    {
        var payload: [String: JSONValue] = [
            "peer_id": .string(peer), "room_id": "room-1", "role": "peer", "last_seq": .int(lastSeq),
            "peers": .array(peers.map { ["peer_id": .string($0), "role": "peer"] }), "ping_interval_ms": 25_000,
        ]
        if let resumed {
            payload["recovered"] = .bool(resumed.recovered)
            payload["replay_count"] = .int(Int64(resumed.replay))
        }
        return ["type": "welcome", "payload": .object(payload)]
    }

    /// connect() through `welcome`; returns the connect waiter.
    @discardableResult
    private func connected(lastSeq: Int64 = 0, peers: [String] = []) -> Waiter {
        let w = waiter()
        input(.connect(token: nil, waiter: w))
        _ = server(welcome(lastSeq: lastSeq, peers: peers))
        XCTAssertEqual(session.state, .connected)
        return w
    }

    private func sent(_ actions: [SessionAction]) -> [Frame] {
        actions.compactMap { if case .send(let frame) = $0 { frame } else { nil } }
    }

    private func events(_ actions: [SessionAction]) -> [CallingEvent] {
        actions.compactMap { if case .emit(let event) = $0 { event } else { nil } }
    }

    private func opened(_ actions: [SessionAction]) -> (path: String, token: String)? {
        for case .openSocket(_, let path, let token) in actions { return (path, token) }
        return nil
    }

    private func chat(_ id: String, _ text: String = "hi") -> Frame {
        Frame(.chat, payload: ["client_id": .string(id), "text": .string(text)])
    }

    private func ack(_ id: String, seq: Int64) -> JSONValue {
        ["type": "chat-ack", "payload": ["client_id": .string(id), "seq": .int(seq), "ts": 5]]
    }

    private func outcome(_ waiter: Waiter) -> Result<WaiterOutcome, CallingError>? { resumed[waiter] }

    // MARK: - Connecting

    func test_connect_opens_the_socket_and_resolves_on_welcome() {
        let w = waiter()
        let actions = input(.connect(token: nil, waiter: w))
        XCTAssertEqual(opened(actions)?.path, "/v1/ws")
        XCTAssertEqual(opened(actions)?.token, "t1")
        XCTAssertEqual(session.state, .connecting)
        XCTAssertNil(outcome(w))
        let welcomed = server(welcome(lastSeq: 7, peers: ["bob"]))
        XCTAssertEqual(session.state, .connected)
        XCTAssertEqual(session.peerID, "alice")
        XCTAssertEqual(session.peers.map(\.peerID), ["bob"])
        XCTAssertEqual(session.lastSeq, 7)
        guard case .success(.welcome(let value))? = outcome(w) else { return XCTFail("connect not resolved") }
        XCTAssertFalse(value.resumed)
        XCTAssertEqual(events(welcomed).compactMap(\.state), [.connected])
        XCTAssertNil(timers[.connect], "the welcome timeout is cancelled")
        XCTAssertEqual(timers[.ping], 25, "keep-alive at welcome.ping_interval_ms")
    }

    func test_no_welcome_in_time_fails_connect_without_a_retry() {
        let w = waiter()
        input(.connect(token: nil, waiter: w))
        let actions = advance(by: 10)
        XCTAssertTrue(actions.contains(.abortSocket))
        XCTAssertEqual(outcome(w), .failure(CallingError(.timedOut("welcome"))))
        XCTAssertEqual(session.state, .failed(CallingError(.timedOut("welcome"))))
        XCTAssertNil(opened(advance(by: 60)), "the first connect is never retried on its own")
    }

    func test_an_error_frame_before_welcome_rejects_connect() {
        let w = waiter()
        input(.connect(token: nil, waiter: w))
        _ = server(["type": "error", "error": ["code": 403, "message": "forbidden"]])
        XCTAssertEqual(outcome(w), .failure(CallingError(.server(code: 403, message: "forbidden"))))
        XCTAssertEqual(session.state, .failed(CallingError(.server(code: 403, message: "forbidden"))))
    }

    func test_connect_twice_is_invalid_state() {
        connected()
        let w = waiter()
        input(.connect(token: nil, waiter: w))
        guard case .failure(let error)? = outcome(w) else { return XCTFail("not refused") }
        XCTAssertEqual(error, CallingError(.invalidState("connect() while connected")))
    }

    // MARK: - Reconnect

    func test_a_drop_reconnects_with_backoff_and_resumes_from_last_seq() {
        connected(lastSeq: 3)
        let dropped = input(.socketClosed(session.socket, code: nil, reason: ""))
        XCTAssertEqual(session.state, .reconnecting(attempt: 1))
        XCTAssertEqual(events(dropped).first, .disconnected(CallingError(.closed(code: nil, reason: ""))))
        XCTAssertNil(opened(advance(by: 0.9)))
        XCTAssertEqual(opened(advance(by: 0.1))?.path, "/v1/ws?last_seq=3")
        // Refused with 503: attempt 2 waits 2 s, attempt 3 4 s, attempt 4 4 s again.
        for (attempt, delay) in [(2, 2.0), (3, 4.0), (4, 4.0)] {
            input(.socketFailed(session.socket, status: 503, message: "at capacity"))
            XCTAssertEqual(session.state, .reconnecting(attempt: attempt))
            XCTAssertNil(opened(advance(by: delay - 0.01)))
            XCTAssertNotNil(opened(advance(by: 0.01)))
        }
        let back = server(welcome(lastSeq: 3, resumed: (true, 0)))
        XCTAssertEqual(session.state, .connected)
        guard case .connected(let value)? = events(back).last else { return XCTFail("no connected event") }
        XCTAssertTrue(value.resumed)
    }

    func test_reconnect_attempts_run_out_into_failed() {
        use { $0.maxReconnectAttempts = 2 }
        connected()
        input(.socketClosed(session.socket, code: 1001, reason: "server shutting down"))
        advance(by: 1)
        input(.socketFailed(session.socket, status: nil, message: "refused"))
        advance(by: 2)
        input(.socketFailed(session.socket, status: nil, message: "refused"))
        XCTAssertEqual(session.state, .failed(CallingError(.network(host: "", port: 0, reason: "refused"))))
        XCTAssertNil(opened(advance(by: 60)))
    }

    func test_terminal_closes_and_refusals_do_not_reconnect() {
        for (code, status) in [(UInt16?(4400), Int?.none), (4401, nil), (4410, nil), (nil, 401)] {
            session = SignalingSession(token: "t1", settings: SignalingSession.Settings())
            timers = [:]
            connected()
            if let status {
                input(.socketClosed(session.socket, code: nil, reason: ""))
                advance(by: 1)
                input(.socketFailed(session.socket, status: status, message: "unauthorized"))
            } else {
                input(.socketClosed(session.socket, code: code, reason: "bye"))
            }
            guard case .failed(let error) = session.state else { return XCTFail("\(String(describing: code)) \(String(describing: status)) not terminal") }
            XCTAssertFalse(error.isRetryable)
            XCTAssertNil(opened(advance(by: 60)))
        }
    }

    func test_token_expired_asks_the_token_provider_and_reconnects_with_the_new_token() {
        use { $0.hasTokenProvider = true }
        connected()
        input(.socketClosed(session.socket, code: 4401, reason: "token expired"))
        XCTAssertEqual(session.state, .reconnecting(attempt: 1))
        let due = advance(by: 1)
        XCTAssertTrue(due.contains(.refreshToken(attempt: 1)))
        XCTAssertNil(opened(due), "the socket waits for the fresh token")
        let actions = input(.tokenRefreshed(attempt: 1, .success("t2")))
        XCTAssertEqual(opened(actions)?.token, "t2")
        XCTAssertEqual(session.token, "t2")
    }

    func test_a_refused_token_refresh_is_terminal_and_a_stale_one_is_ignored() {
        use { $0.hasTokenProvider = true }
        connected()
        input(.socketClosed(session.socket, code: nil, reason: ""))
        advance(by: 1)
        XCTAssertNil(opened(input(.tokenRefreshed(attempt: 7, .success("stale")))))
        input(.tokenRefreshed(attempt: 1, .failure(CallingError(.invalidToken("revoked")))))
        XCTAssertEqual(session.state, .failed(CallingError(.invalidToken("revoked"))))
    }

    func test_an_unanswered_ping_drops_the_socket_and_reconnects() {
        use { $0.pingInterval = 5 }
        connected()
        XCTAssertEqual(sent(advance(by: 5)), [Frame(.ping)])
        _ = server(["type": "pong"])
        XCTAssertEqual(sent(advance(by: 5)), [Frame(.ping)])
        let dead = advance(by: 5)
        XCTAssertTrue(dead.contains(.abortSocket))
        XCTAssertEqual(session.state, .reconnecting(attempt: 1))
    }

    func test_disconnect_closes_and_gives_up_on_a_silent_server() {
        connected()
        let w = waiter()
        let actions = input(.disconnect(waiter: w))
        XCTAssertTrue(actions.contains(.closeSocket(code: 1000, reason: "normal")))
        XCTAssertNil(outcome(w))
        let late = advance(by: 2)
        XCTAssertTrue(late.contains(.abortSocket))
        XCTAssertEqual(outcome(w), .success(.done))
        XCTAssertEqual(session.state, .ended)
        XCTAssertEqual(events(late).first, .disconnected(nil))
    }

    func test_disconnect_while_waiting_to_reconnect_ends_at_once() {
        connected()
        input(.socketClosed(session.socket, code: nil, reason: ""))
        let w = waiter()
        input(.disconnect(waiter: w))
        XCTAssertEqual(outcome(w), .success(.done))
        XCTAssertEqual(session.state, .ended)
        XCTAssertNil(opened(advance(by: 60)), "the backoff timer is cancelled")
    }

    // MARK: - Chat

    func test_an_unacked_chat_is_resent_with_the_same_client_id_then_times_out() {
        use { $0.chatMaxAttempts = 3 }
        connected()
        let w = waiter()
        XCTAssertEqual(sent(input(.sendChat(clientID: "c1", text: "hi", meta: nil, waiter: w))), [chat("c1")])
        XCTAssertEqual(sent(advance(by: 10)), [chat("c1")])
        XCTAssertEqual(sent(advance(by: 10)), [chat("c1")])
        XCTAssertNil(outcome(w))
        advance(by: 10)
        XCTAssertEqual(outcome(w), .failure(CallingError(.timedOut("chat-ack"))))
    }

    func test_the_ack_resolves_the_chat_and_moves_last_seq() {
        connected(lastSeq: 4)
        let w = waiter()
        input(.sendChat(clientID: "c1", text: "hi", meta: nil, waiter: w))
        let acked = server(ack("c1", seq: 5))
        XCTAssertEqual(outcome(w), .success(.chatAck(ChatAck(clientID: "c1", seq: 5, ts: 5))))
        XCTAssertEqual(session.lastSeq, 5)
        XCTAssertTrue(acked.contains(.cancel(.chatAck("c1"))))
        XCTAssertTrue(sent(advance(by: 30)).filter { $0.type == "chat" }.isEmpty, "nothing resent after the ack")
    }

    func test_an_error_frame_about_a_chat_rejects_the_pending_send_at_once() {
        connected()
        let w = waiter()
        input(.sendChat(clientID: "c1", text: "hi", meta: nil, waiter: w))
        let refused = server(["type": "error", "error": ["code": 422, "message": "chat text must be a string"],
                              "payload": ["type": "chat"]])
        XCTAssertEqual(outcome(w), .failure(CallingError(.server(code: 422, message: "chat text must be a string"))))
        XCTAssertEqual(events(refused), [.error(CallingError(.server(code: 422, message: "chat text must be a string")))])
        XCTAssertTrue(sent(advance(by: 30)).filter { $0.type == "chat" }.isEmpty, "not retried")
    }

    func test_a_rate_limited_chat_frame_is_retried_by_the_ack_timer() {
        connected()
        let w = waiter()
        input(.sendChat(clientID: "c1", text: "hi", meta: nil, waiter: w))
        _ = server(["type": "error", "error": ["code": 429, "message": "slow down"], "payload": ["type": "chat"]])
        XCTAssertNil(outcome(w))
        XCTAssertEqual(sent(advance(by: 10)), [chat("c1")])
    }

    func test_a_refused_chat_ack_throws_and_a_busy_store_is_retried_after_a_second() {
        connected()
        let busy = waiter()
        input(.sendChat(clientID: "busy", text: "hi", meta: nil, waiter: busy))
        _ = server(["type": "chat-ack", "payload": ["client_id": "busy"], "error": ["code": 503, "message": "store busy"]])
        XCTAssertEqual(sent(advance(by: 1)), [chat("busy")])
        let empty = waiter()
        input(.sendChat(clientID: "empty", text: " ", meta: nil, waiter: empty))
        _ = server(["type": "chat-ack", "payload": ["client_id": "empty"], "error": ["code": 440, "message": "chat text is empty"]])
        XCTAssertEqual(outcome(empty), .failure(CallingError(.server(code: 440, message: "chat text is empty"))))
    }

    func test_chats_wait_out_a_reconnect_and_a_replayed_own_message_completes_the_send() {
        connected()
        input(.socketClosed(session.socket, code: nil, reason: ""))
        let w1 = waiter(), w2 = waiter()
        XCTAssertTrue(sent(input(.sendChat(clientID: "a1", text: "one", meta: nil, waiter: w1))).isEmpty)
        input(.sendChat(clientID: "a2", text: "two", meta: nil, waiter: w2))
        advance(by: 1)
        // The replay holds a1 (its ack was lost) and a message from bob.
        let back = server(welcome(lastSeq: 0, resumed: (true, 2)))
        XCTAssertEqual(sent(back).filter { $0.type == "chat" }, [chat("a1", "one"), chat("a2", "two")], "resent oldest first")
        _ = server(["type": "chat", "from": "alice", "payload": ["seq": 1, "client_id": "a1", "text": "one", "ts": 1]])
        let bob = server(["type": "chat", "from": "bob", "payload": ["seq": 2, "client_id": "b1", "text": "yo", "ts": 2]])
        XCTAssertEqual(outcome(w1), .success(.chatAck(ChatAck(clientID: "a1", seq: 1, ts: 1))))
        XCTAssertEqual(events(bob).compactMap(\.chatMessage).map(\.seq), [2])
        // The live duplicate of the replayed message is not reported twice.
        XCTAssertTrue(events(server(["type": "chat", "from": "bob", "payload": ["seq": 2, "client_id": "b1", "text": "yo", "ts": 2]])).isEmpty)
        _ = server(ack("a2", seq: 3))
        XCTAssertEqual(outcome(w2), .success(.chatAck(ChatAck(clientID: "a2", seq: 3, ts: 5))))
        XCTAssertEqual(session.lastSeq, 3)
    }

    func test_a_capped_replay_is_filled_over_rest_and_reported_once() {
        connected(lastSeq: 1)
        input(.socketClosed(session.socket, code: nil, reason: ""))
        advance(by: 1)
        var actions = server(welcome(lastSeq: 1, resumed: (false, 1)))
        XCTAssertFalse(actions.contains { if case .fetchGap = $0 { true } else { false } }, "after the replay")
        actions = server(["type": "chat", "from": "bob", "payload": ["seq": 2, "client_id": "b2", "text": "x", "ts": 2]])
        guard case .fetchGap(let since, let generation)? = actions.last else { return XCTFail("no gap fill") }
        XCTAssertEqual(since, 2)
        let message = ChatMessage(["seq": 3, "client_id": "b3", "text": "y", "ts": 3], from: "bob")!
        let page = MessagesPage(roomID: "room-1", messages: [message], nextSinceSeq: 3, hasMore: false, lastSeq: 3)
        XCTAssertEqual(events(input(.gapPage(generation: generation, page))).compactMap(\.chatMessage).map(\.seq), [3])
        XCTAssertEqual(session.lastSeq, 3)
    }

    func test_typing_turns_itself_off_and_only_changes_are_sent() throws {
        connected()
        XCTAssertEqual(sent(try command(.setTyping(true))), [Frame(.typing, payload: ["typing": true])])
        advance(by: 2)
        XCTAssertEqual(sent(try command(.setTyping(true))), [], "renewed, not resent")
        XCTAssertEqual(sent(advance(by: 2.9)), [])
        XCTAssertEqual(sent(advance(by: 0.1)), [Frame(.typing, payload: ["typing": false])])
        XCTAssertEqual(sent(try command(.setTyping(false))), [], "already off")
    }

    func test_senders_refuse_outside_connected() {
        XCTAssertThrowsError(try command(.sendData(nil, to: nil))) { XCTAssertEqual($0 as? CallingError, .notConnected) }
        let w = waiter()
        input(.sendChat(clientID: "c", text: "x", meta: nil, waiter: w))
        XCTAssertEqual(outcome(w), .failure(.notConnected))
    }

    // MARK: - Chat operations (issue 43: docs/protocol.md, wire frames exactly as there)

    private func operation(_ id: String, _ op: ChatOutbound) -> Waiter {
        let w = waiter()
        input(.chatOperation(clientID: id, op, waiter: w))
        return w
    }

    func test_each_chat_operation_sends_its_frame_and_resolves_with_its_own_ack() {
        connected(lastSeq: 4)
        let reply = operation("c1", .message(text: "yes", meta: nil, replyTo: 3))
        let edit = operation("c2", .edit(target: 3, text: "fixed", meta: ["k": 1]))
        let delete = operation("c3", .delete(target: 2))
        let add = operation("c4", .react(target: 3, key: "👍", remove: false))
        let remove = operation("c5", .react(target: 3, key: "👍", remove: true))
        XCTAssertEqual(sent(log), [
            Frame(.chat, payload: ["client_id": "c1", "text": "yes", "reply_to": 3]),
            Frame(type: "chat-edit", payload: ["client_id": "c2", "target": 3, "text": "fixed", "meta": ["k": 1]]),
            Frame(type: "chat-delete", payload: ["client_id": "c3", "target": 2]),
            Frame(type: "chat-react", payload: ["client_id": "c4", "target": 3, "key": "👍"]),
            Frame(type: "chat-react", payload: ["client_id": "c5", "target": 3, "key": "👍", "remove": true]),
        ])
        for (offset, id) in ["c1", "c2", "c3", "c4", "c5"].enumerated() { _ = server(ack(id, seq: 5 + Int64(offset))) }
        XCTAssertEqual([reply, edit, delete, add, remove].map(outcome), (5...9).map { seq -> Result<WaiterOutcome, CallingError>? in
            .success(.chatAck(ChatAck(clientID: "c\(seq - 4)", seq: Int64(seq), ts: 5)))
        })
        XCTAssertEqual(session.lastSeq, 9)
    }

    func test_an_operation_is_retried_with_its_client_id_and_refusals_fail_only_that_type() {
        use { $0.chatMaxAttempts = 2 }
        connected()
        let edit = operation("e1", .edit(target: 1, text: "again", meta: nil))
        let resent = sent(advance(by: 10))
        XCTAssertEqual(resent, [Frame(type: "chat-edit", payload: ["client_id": "e1", "target": 1, "text": "again"])])
        advance(by: 10)
        XCTAssertEqual(outcome(edit), .failure(CallingError(.timedOut("chat-ack"))))
        let forbidden = operation("d1", .delete(target: 1))
        _ = server(["type": "chat-ack", "payload": ["client_id": "d1"], "error": ["code": 444, "message": "not the author"]])
        XCTAssertEqual(outcome(forbidden), .failure(CallingError(.server(code: 444, message: "not the author"))))
        // An error frame about a chat-react frame fails the latest reaction, not the pending chat.
        let chat = waiter()
        input(.sendChat(clientID: "m1", text: "hi", meta: nil, waiter: chat))
        let react = operation("r1", .react(target: 1, key: "ok", remove: false))
        _ = server(["type": "error", "error": ["code": 422, "message": "bad frame"], "payload": ["type": "chat-react"]])
        XCTAssertEqual(outcome(react), .failure(CallingError(.server(code: 422, message: "bad frame"))))
        XCTAssertNil(outcome(chat))
    }

    func test_inbound_operations_are_reported_once_per_seq_and_a_replayed_own_operation_completes_it() {
        connected(lastSeq: 1)
        let live = server(["type": "chat", "from": "bob", "payload": ["client_id": "b2", "seq": 2, "ts": 20, "text": "re",
                                                                      "meta": nil, "reply_to": 1]])
        let message = events(live).compactMap(\.chatMessage).first
        XCTAssertEqual(message?.replyTo, 1)
        XCTAssertEqual(message?.deleted, false)
        let edited: JSONValue = ["type": "chat-edit", "from": "bob",
                                 "payload": ["client_id": "b3", "seq": 3, "ts": 30, "target": 2, "text": "re!", "meta": ["m": 1]]]
        XCTAssertEqual(events(server(edited)), [.chatEdited(ChatEdit(edited["payload"], from: "bob")!)])
        let reacted: JSONValue = ["type": "chat-react", "from": "bob",
                                  "payload": ["client_id": "b4", "seq": 4, "ts": 40, "target": 2, "key": "🎉", "remove": false]]
        XCTAssertEqual(events(server(reacted)).count, 1)
        XCTAssertTrue(events(server(reacted)).isEmpty, "once per seq")
        // Our delete is sent, and its ack lost with the socket.
        let delete = operation("a5", .delete(target: 2))
        input(.socketClosed(session.socket, code: nil, reason: ""))
        XCTAssertEqual(opened(advance(by: 1))?.path, "/v1/ws?last_seq=4")
        let back = server(welcome(lastSeq: 1, resumed: (true, 4)))
        XCTAssertEqual(sent(back), [Frame(type: "chat-delete", payload: ["client_id": "a5", "target": 2])], "resent after the welcome")
        // The replay counts operations: an overlap, our delete, bob's edit of the deleted message, his unreact.
        var replayed = server(reacted)
        replayed += server(["type": "chat-delete", "from": "alice", "payload": ["client_id": "a5", "seq": 5, "ts": 50, "target": 2]])
        replayed += server(["type": "chat-edit", "from": "bob", "payload": ["client_id": "b6", "seq": 6, "ts": 60, "target": 2,
                                                                            "text": "", "meta": nil, "deleted": true]])
        replayed += server(["type": "chat-react", "from": "bob", "payload": ["client_id": "b7", "seq": 7, "ts": 70, "target": 2,
                                                                             "key": "🎉", "remove": true]])
        XCTAssertEqual(outcome(delete), .success(.chatAck(ChatAck(clientID: "a5", seq: 5, ts: 50))))
        let kinds = events(replayed).map { event -> String in
            switch event {
            case .chatEdited(let edit): return "edit \(edit.seq) deleted=\(edit.deleted)"
            case .chatReaction(let reaction): return "react \(reaction.seq) \(reaction.key) removed=\(reaction.removed)"
            default: return "\(event)"
            }
        }
        XCTAssertEqual(kinds, ["edit 6 deleted=true", "react 7 🎉 removed=true"])
        let carol = server(["type": "chat-delete", "from": "carol", "payload": ["client_id": "c8", "seq": 8, "ts": 80, "target": 2]])
        XCTAssertEqual(events(carol), [.chatDeleted(ChatDeletion(["client_id": "c8", "seq": 8, "ts": 80, "target": 2], from: "carol")!)])
        let tombstone = events(server(["type": "chat", "from": "bob", "payload": ["client_id": "b9", "seq": 9, "ts": 90, "text": "",
                                                                                  "meta": nil, "deleted": true]]))
        XCTAssertEqual(tombstone.compactMap(\.chatMessage).map(\.deleted), [true])
        XCTAssertEqual(session.lastSeq, 9)
    }

    func test_history_and_inbox_pages_read_every_field() throws {
        let body = try JSONParser.parse(#"""
            {"room_id":"r1","messages":[
              {"seq":7,"from":"bob","client_id":"b7","text":"now","meta":null,"ts":70,"reply_to":3,"edited_ts":80,
               "reactions":[{"key":"👍","count":2,"peers":["alice","carol"]}],"edits":[{"seq":8,"ts":80,"text":"now","meta":null}]},
              {"seq":5,"from":"bob","client_id":"b5","text":"","meta":null,"ts":50,"deleted":true,"deleted_ts":60,"reactions":[]}],
             "next_before_seq":5,"has_more":true,"last_seq":9,"limit":2}
            """#)
        let page = MessagesPage(json: body, room: "r1", sinceSeq: 0)
        XCTAssertEqual(page.nextBeforeSeq, 5)
        XCTAssertTrue(page.hasMore)
        let newest = try XCTUnwrap(page.messages.first)
        XCTAssertEqual(newest.replyTo, 3)
        XCTAssertEqual(newest.editedTS, 80)
        XCTAssertEqual(newest.reactions.map(\.key), ["👍"])
        XCTAssertEqual(newest.reactions.first?.count, 2)
        XCTAssertEqual(newest.reactions.first?.peers, ["alice", "carol"])
        XCTAssertEqual(newest.edits?.map(\.seq), [8])
        let tomb = page.messages[1]
        XCTAssertEqual([tomb.deleted ? 1 : 0, Int(tomb.deletedTS ?? 0)], [1, 60])
        XCTAssertNil(tomb.edits)
        let inbox = InboxPage(json: try JSONParser.parse(#"""
            {"rooms":[{"room_id":"r1","last_seq":9,"last_ts":90,"last_message":{"seq":7,"from":"bob","text":"now","ts":70},
                       "read_seq":4,"unread":2},
                      {"room_id":"r2","last_seq":1,"last_ts":10,"last_message":null,"read_seq":0,"unread":0}],
             "has_more":true,"next_cursor":"abc"}
            """#))
        XCTAssertEqual(inbox.rooms.map(\.roomID), ["r1", "r2"])
        XCTAssertEqual(inbox.rooms[0].lastMessage?.text, "now")
        XCTAssertEqual(inbox.rooms[0].unread, 2)
        XCTAssertNil(inbox.rooms[1].lastMessage)
        XCTAssertEqual(inbox.nextCursor, "abc")
    }

    // MARK: - Media

    func test_candidates_wait_for_the_remote_description_and_a_dying_connection_hangs_up() {
        use { $0.hasMediaEngine = true }
        connected(peers: ["bob"])
        let offer: JSONValue = ["type": "offer", "from": "bob", "payload": ["type": "offer", "sdp": "v=0"]]
        XCTAssertEqual(events(server(offer)).count, 1)
        let candidate: JSONValue = ["type": "candidate", "from": "bob", "payload": ["candidate": "c1", "sdpMid": "0", "sdpMLineIndex": 0]]
        XCTAssertTrue(server(candidate).isEmpty, "queued")
        let w = waiter()
        let accept = input(.accept("bob", waiter: w))
        guard case .media(.answerCall(_, let connection, _, _))? = accept.last else { return XCTFail("no answer command") }
        XCTAssertEqual(input(.mediaRemoteApplied("bob")),
                       [.media(.addCandidate("bob", IceCandidate(candidate: "c1", sdpMid: "0", sdpMLineIndex: 0)))])
        let answered = input(.mediaAnswerCreated("bob", connection: connection, SessionDescription(kind: .answer, sdp: "v=1"), waiter: w))
        XCTAssertEqual(sent(answered).map(\.type), ["answer"])
        XCTAssertEqual(outcome(w), .success(.done))
        // A stale connection's report is ignored; the current one's `closed` ends the call.
        XCTAssertTrue(input(.connectionState("bob", connection: connection + 1, .closed)).isEmpty)
        let ended = input(.connectionState("bob", connection: connection, .closed))
        XCTAssertEqual(events(ended).last, .hangup("bob", reason: .closed))
        XCTAssertEqual(events(ended).first, .connectionState(peerID: "bob", state: .closed))
        XCTAssertTrue(ended.contains(.media(.close("bob", .ended))))
    }
}

/// Media timing of the mobile SDKs (docs/sdk.md "Media", call timing): 15 s to connect, 5 s to recover.
final class SignalingSessionMediaTests: XCTestCase {
    private var session: SignalingSession = {
        var settings = SignalingSession.Settings()
        settings.hasMediaEngine = true
        settings.pingInterval = 0
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

    /// Connected, with a call to bob started; returns its connection number.
    private func calling() -> UInt64 {
        input(.connect(token: nil, waiter: 1))
        input(.socketText(session.socket, #"{"type":"welcome","payload":{"peer_id":"alice","room_id":"r","peers":[{"peer_id":"bob"}]}}"#))
        for case .media(.startCall(_, let connection, _, _)) in input(.call("bob", waiter: 2)) { return connection }
        XCTFail("no call started")
        return 0
    }

    func test_a_call_whose_media_never_connects_fails_as_timed_out_after_15_s() {
        let connection = calling()
        XCTAssertEqual(events(input(.connectionState("bob", connection: connection, .connecting))),
                       [.connectionState(peerID: "bob", state: .connecting)])
        XCTAssertTrue(events(advance(by: 14.9)).isEmpty)
        let ended = advance(by: 0.1)
        guard case .callFailed("bob", let error)? = events(ended).first else { return XCTFail("\(ended)") }
        guard case .timedOut = error.kind else { return XCTFail("\(error)") }
        XCTAssertTrue(error.isRetryable)
        XCTAssertEqual(events(ended).last, .hangup("bob", reason: .failed))
        XCTAssertTrue(ended.contains(.media(.close("bob", .ended))))
    }

    /// Connected, with bob's HTTP-session offer (`session_id`) accepted; returns its connection number.
    private func answeringSession() -> UInt64 {
        input(.connect(token: nil, waiter: 1))
        input(.socketText(session.socket, #"{"type":"welcome","payload":{"peer_id":"alice","room_id":"r","peers":[{"peer_id":"bob"}]}}"#))
        input(.socketText(session.socket, #"{"type":"offer","from":"bob","payload":{"type":"offer","sdp":"v=0","session_id":"s1"}}"#))
        for case .media(.answerCall(_, let connection, _, _)) in input(.accept("bob", waiter: 2)) { return connection }
        XCTFail("no answer started")
        return 0
    }

    func test_an_http_sessions_call_keeps_a_disconnect_shorter_than_5_s_and_ends_after_a_longer_one() {
        let connection = answeringSession()
        input(.connectionState("bob", connection: connection, .connected))
        XCTAssertTrue(events(advance(by: 60)).isEmpty, "connected: no media timeout")
        input(.connectionState("bob", connection: connection, .disconnected))
        XCTAssertTrue(events(advance(by: 3)).isEmpty)
        XCTAssertEqual(events(input(.connectionState("bob", connection: connection, .connected))),
                       [.connectionState(peerID: "bob", state: .connected)])
        XCTAssertTrue(events(advance(by: 60)).isEmpty, "recovered: the call goes on")

        input(.connectionState("bob", connection: connection, .disconnected))
        XCTAssertTrue(events(advance(by: 4.9)).isEmpty)
        let ended = events(advance(by: 0.1))
        guard case .callFailed("bob", let error)? = ended.first, case .disconnected = error.kind else { return XCTFail("\(ended)") }
        XCTAssertTrue(error.isRetryable)
        XCTAssertEqual(ended.last, .hangup("bob", reason: .disconnected))
    }

    func test_call_media_reaches_the_engine_command() {
        _ = calling()
        input(.socketText(session.socket, #"{"type":"peer-joined","payload":{"peer_id":"carol"}}"#))
        let actions = input(.call("carol", media: .receiveOnly, waiter: 9))
        XCTAssertTrue(actions.contains { if case .media(.startCall("carol", _, .receiveOnly, 9)) = $0 { true } else { false } },
                      "\(actions)")
    }

    func test_remote_tracks_of_a_call_are_reported() {
        _ = calling()
        let track = RemoteTrack(kind: "audio", id: "bob-audio-1")
        XCTAssertEqual(events(input(.remoteTrack("bob", track))), [.track(peerID: "bob", track: track)])
        XCTAssertTrue(input(.remoteTrack("nobody", track)).isEmpty, "no call with that peer")
    }

    func test_the_offer_on_the_wire_names_the_stream_local_peer_id() {
        let connection = calling()
        let actions = input(.mediaOfferCreated("bob", connection: connection,
                                               SessionDescription(kind: .offer, sdp: "v=0\r\na=msid:gst track0\r\n"), waiter: 2))
        let sent = actions.compactMap { if case .send(let frame) = $0, frame.type == "offer" { frame } else { nil } }
        XCTAssertEqual(sent.first?.payload?["sdp"], "v=0\r\na=msid:local-alice track0\r\n")
    }

    func test_failed_ends_an_http_sessions_call_at_once_and_a_remote_hangup_cancels_the_timers() {
        let connection = answeringSession()
        let failed = events(input(.connectionState("bob", connection: connection, .failed)))
        XCTAssertEqual(failed.count, 3, "\(failed)")  // connectionState, callFailed, hangup
        XCTAssertEqual(failed.last, .hangup("bob", reason: .failed))
        let next = calling()
        input(.socketText(session.socket, #"{"type":"data","from":"bob","payload":{"kind":"hangup"}}"#))
        XCTAssertNil(timers[.mediaConnect("bob")])
        XCTAssertTrue(events(advance(by: 60)).isEmpty)
        XCTAssertTrue(input(.connectionState("bob", connection: next, .disconnected)).isEmpty, "the call is over")
    }
}

final class LocalStreamIDTests: XCTestCase {
    func test_local_tracks_are_announced_under_local_peer_id() {
        let sdp = "v=0\r\na=msid-semantic: WMS abc def\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=msid:abc track-1\r\n"
            + "a=ssrc:1234 cname:x\r\na=ssrc:1234 msid:abc track-1\r\n"
        XCTAssertEqual(LocalStreamID.rewrite(sdp, peer: "alice"),
                       "v=0\r\na=msid-semantic: WMS local-alice\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=msid:local-alice track-1\r\n"
                       + "a=ssrc:1234 cname:x\r\na=ssrc:1234 msid:local-alice track-1\r\n")
        XCTAssertEqual(LocalStreamID.rewrite("v=0\nm=audio 9 RTP/AVP 0\n", peer: "a"), "v=0\nm=audio 9 RTP/AVP 0\n",
                       "an SDP without stream ids is left alone")
    }
}
