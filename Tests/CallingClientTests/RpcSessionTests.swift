import CallingProtocol
import Foundation
import XCTest

@testable import CallingClient

/// RPC in the pure session (docs/protocol.md "RPC"): frames, ack and response timeouts, typed
/// errors, unknown methods, a callee that leaves, the server's refusals by request id. Time is a
/// variable; timers fire when the test moves it.
final class RpcSessionTests: XCTestCase {
    private var session = SignalingSession(token: "t1", settings: SignalingSession.Settings())
    private var now: TimeInterval = 0
    private var timers: [SessionTimer: TimeInterval] = [:]
    private var resumed: [Waiter: Result<WaiterOutcome, CallingError>] = [:]
    private var nextWaiter: Waiter = 100

    @discardableResult
    private func input(_ input: SessionInput) -> [SessionAction] { record(session.handle(input)) }

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
        return actions
    }

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

    @discardableResult
    private func server(_ json: JSONValue) -> [SessionAction] { input(.socketText(session.socket, JSONWriter.string(json))) }

    private func connect(peers: [String] = ["page"]) {
        input(.connect(token: nil, waiter: 1))
        server(["type": "welcome", "payload": ["peer_id": "agent", "room_id": "r1", "role": "peer", "last_seq": 0,
                                               "peers": .array(peers.map { ["peer_id": .string($0), "role": "peer"] }),
                                               "ping_interval_ms": 0]])
        XCTAssertEqual(session.state, .connected)
    }

    private func sent(_ actions: [SessionAction]) -> [Frame] {
        actions.compactMap { if case .send(let frame) = $0 { frame } else { nil } }
    }

    /// `performRpc` with request id `id`; returns its waiter.
    @discardableResult
    private func perform(_ id: String, to: PeerID = "page", method: String = "m", payload: String = "p",
                         timeout: TimeInterval = 10) -> (Waiter, [SessionAction]) {
        nextWaiter += 1
        let actions = input(.performRpc(id: id, to: to, method: method, payload: payload, timeout: timeout, waiter: nextWaiter))
        return (nextWaiter, actions)
    }

    private func result(_ waiter: Waiter) -> Result<String, RpcError>? {
        guard case .success(.rpc(let result))? = resumed[waiter] else { return nil }
        return result
    }

    private func errorCode(_ waiter: Waiter) -> Int? {
        guard case .failure(let error)? = result(waiter) else { return nil }
        return error.code
    }

    func test_a_call_sends_rpc_request_and_returns_the_callees_response() throws {
        connect()
        let (w, actions) = perform("r1", method: "get-location", payload: #"{"precise":true}"#, timeout: 5)
        XCTAssertEqual(sent(actions), [Frame(.rpcRequest, to: "page", payload: ["id": "r1", "method": "get-location",
                                                                                "payload": #"{"precise":true}"#, "timeout_ms": 5000])])
        server(["type": "rpc-ack", "from": "page", "payload": ["id": "r1"]])
        XCTAssertNil(timers[.rpcAck("r1")], "acked: the ack timer is off")
        server(["type": "rpc-response", "from": "mallory", "payload": ["id": "r1", "payload": "forged"]])
        XCTAssertNil(result(w), "only the callee answers")
        advance(by: 4.9)
        XCTAssertNil(result(w))
        server(["type": "rpc-response", "from": "page", "payload": ["id": "r1", "payload": "Lyon"]])
        XCTAssertEqual(result(w), .success("Lyon"))
        XCTAssertTrue(timers.keys.allSatisfy { if case .rpcResponse = $0 { false } else { true } }, "no RPC timer left")
    }

    func test_no_ack_is_a_connection_timeout_and_no_response_a_response_timeout() {
        var settings = SignalingSession.Settings()
        settings.rpcAckTimeout = 1
        session = SignalingSession(token: "t1", settings: settings)
        connect()
        let (noAck, _) = perform("r1", timeout: 5)
        advance(by: 0.99)
        XCTAssertNil(result(noAck))
        advance(by: 0.01)
        XCTAssertEqual(errorCode(noAck), RpcError.connectionTimeout)
        let (slow, _) = perform("r2", timeout: 3)
        server(["type": "rpc-ack", "from": "page", "payload": ["id": "r2"]])
        advance(by: 2.99)
        XCTAssertNil(result(slow))
        advance(by: 0.01)
        XCTAssertEqual(errorCode(slow), RpcError.responseTimeout)
        // A response after the timeout is dropped.
        XCTAssertTrue(server(["type": "rpc-response", "from": "page", "payload": ["id": "r2", "payload": "late"]]).isEmpty)
    }

    func test_error_responses_server_refusals_and_peer_left_fail_the_call_with_their_codes() {
        connect()
        let waiters = (1...5).map { perform("r\($0)").0 }
        server(["type": "rpc-response", "from": "page", "payload": ["id": "r1", "error": ["code": 2001, "message": "no map", "data": "d"]]])
        server(["type": "error", "error": ["code": 404, "message": "no peer"], "payload": ["type": "rpc-request", "id": "r2"]])
        server(["type": "error", "error": ["code": 460, "message": "too large"], "payload": ["type": "rpc-request", "id": "r3"]])
        let refused = server(["type": "error", "error": ["code": 480, "message": "reconnecting"], "payload": ["type": "rpc-request", "id": "r4"]])
        XCTAssertTrue(refused.allSatisfy { if case .emit = $0 { false } else { true } }, "a refused call is not also an error event")
        server(["type": "peer-left", "from": "page", "payload": ["peer_id": "page"]])
        XCTAssertEqual(result(waiters[0]), .failure(RpcError(code: 2001, message: "no map", data: "d")))
        XCTAssertEqual(waiters.map(errorCode), [2001, RpcError.recipientNotFound, RpcError.requestPayloadTooLarge, RpcError.sendFailed,
                                                RpcError.recipientDisconnected])
        guard case .failure(let reconnecting)? = result(waiters[3]) else { return XCTFail() }
        XCTAssertEqual(reconnecting.data, "peer_reconnecting")
        XCTAssertTrue(timers.keys.allSatisfy { if case .rpcAck = $0 { false } else if case .rpcResponse = $0 { false } else { true } })
        // Our answer to a caller who left: nothing for the app; a malformed one is the app's error.
        XCTAssertEqual(server(["type": "error", "error": ["code": 404, "message": "no peer"], "payload": ["type": "rpc-response", "id": "x1"]]), [])
        let bad = server(["type": "error", "error": ["code": 422, "message": "bad"], "payload": ["type": "rpc-response", "id": "x2"]])
        XCTAssertEqual(bad.count, 1)
        guard case .emit(.error(let error))? = bad.first else { return XCTFail("\(bad)") }
        XCTAssertEqual(error.serverCode, 422)
    }

    func test_local_refusals_and_disconnect() {
        var settings = SignalingSession.Settings()
        settings.rpcMaxPayloadBytes = 4
        session = SignalingSession(token: "t1", settings: settings)
        let (offline, _) = perform("r0")
        XCTAssertEqual(errorCode(offline), RpcError.sendFailed)
        connect()
        let (big, actions) = perform("r1", payload: "ééé")
        XCTAssertEqual(errorCode(big), RpcError.requestPayloadTooLarge)
        XCTAssertTrue(sent(actions).isEmpty)
        let (open, _) = perform("r2", payload: "ok")
        input(.disconnect(waiter: 2))
        input(.socketClosed(session.socket, code: 1000, reason: ""))
        XCTAssertEqual(errorCode(open), RpcError.sendFailed)
    }

    func test_the_callee_acks_runs_registered_handlers_and_answers_unknown_methods_with_1400() throws {
        var settings = SignalingSession.Settings()
        settings.rpcMaxPayloadBytes = 8
        session = SignalingSession(token: "t1", settings: settings)
        connect()
        _ = try session.command(.registerRpcMethod("echo"))
        let request: JSONValue = ["type": "rpc-request", "from": "page",
                                  "payload": ["id": "r1", "method": "echo", "payload": "hi", "timeout_ms": 3000]]
        let actions = server(request)
        let invocation = RpcInvocationData(requestID: "r1", callerID: "page", payload: "hi", responseTimeout: 3)
        XCTAssertEqual(actions, [.send(Frame(.rpcAck, to: "page", payload: ["id": "r1"])), .invokeRpc(method: "echo", invocation)])
        XCTAssertEqual(input(.rpcHandled(invocation, .success("HI"))),
                       [.send(Frame(.rpcResponse, to: "page", payload: ["id": "r1", "payload": "HI"]))])
        XCTAssertEqual(input(.rpcHandled(invocation, .failure(RpcError(code: 2001, message: "nope", data: "why")))),
                       [.send(Frame(.rpcResponse, to: "page", payload: ["id": "r1", "error": ["code": 2001, "message": "nope", "data": "why"]]))])
        XCTAssertEqual(sent(input(.rpcHandled(invocation, .success("123456789")))).first?.payload?["error"]?["code"],
                       .int(Int64(RpcError.responsePayloadTooLarge)))

        let unknown = sent(server(["type": "rpc-request", "from": "page", "payload": ["id": "r2", "method": "nothing"]]))
        XCTAssertEqual(unknown.map(\.type), ["rpc-ack", "rpc-response"])
        XCTAssertEqual(unknown.last?.payload?["error"]?["code"], .int(Int64(RpcError.unsupportedMethod)))
        _ = try session.command(.unregisterRpcMethod("echo"))
        XCTAssertEqual(sent(server(request)).last?.payload?["error"]?["code"], .int(Int64(RpcError.unsupportedMethod)))
    }
}
