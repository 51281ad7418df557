@testable import CallingCore
import XCTest

/// The RPC frames through the hub (docs/protocol.md, "RPC"): routed as an addressed `data`, each
/// payload checked against the limits, refusals naming the request id. The hub keeps no RPC state.
final class HubRPCTests: XCTestCase {
    private var hub = Hub(settings: HubSettings(rpcMaxPayloadBytes: 16, rpcMaxNameBytes: 8))
    private let now: Millis = 1_700_000_000_000
    private let room: RoomID = "room-1"
    private let alice = ConnectionID(1)
    private let bob = ConnectionID(2)

    private func join(_ connection: ConnectionID, _ peer: PeerID) {
        _ = hub.handle(.join(connection, PeerIdentity(peer: peer, room: room), ChatResume()), now: now)
    }

    private func send(_ connection: ConnectionID, _ kind: RelayKind, to: PeerID = "bob", _ payload: String?) -> [HubEffect] {
        hub.handle(.message(connection, .relay(kind, to: to, payload: payload.map { RawJSON(try! JSONParser.parse($0)) })), now: now)
    }

    /// The one frame `effects` send, and to whom.
    private func only(_ effects: [HubEffect], file: StaticString = #filePath, line: UInt = #line) throws -> (ConnectionID, Frame) {
        XCTAssertEqual(effects.count, 1, file: file, line: line)
        guard case .send(let targets, let frame)? = effects.first, targets.count == 1 else {
            XCTFail("not one frame to one connection: \(effects)", file: file, line: line)
            throw XCTSkip()
        }
        return (targets[0], frame)
    }

    private func assertRefused(_ effects: [HubEffect], _ code: ErrorCode, type: String, id: String?,
                               file: StaticString = #filePath, line: UInt = #line) throws {
        let (target, frame) = try only(effects, file: file, line: line)
        XCTAssertEqual(target, alice, "only the sender hears of it", file: file, line: line)
        XCTAssertEqual(frame.type, "error", file: file, line: line)
        XCTAssertEqual(frame.error?.code, code.rawValue, "\(frame.error?.message ?? "")", file: file, line: line)
        XCTAssertEqual(frame.payload?["type"]?.stringValue, type, file: file, line: line)
        XCTAssertEqual(frame.payload?["id"]?.stringValue, id, file: file, line: line)
    }

    override func setUp() {
        join(alice, "alice")
        join(bob, "bob")
    }

    func test_request_ack_and_response_are_relayed_to_their_target_with_from_stamped() throws {
        let request = #"{"id":"r1","method":"ping","payload":"hi","timeout_ms":5000}"#
        let (target, frame) = try only(send(alice, .rpcRequest, request))
        XCTAssertEqual(target, bob)
        XCTAssertEqual(frame.type, "rpc-request")
        XCTAssertEqual(frame.from, "alice")
        XCTAssertEqual(frame.to, "bob")
        XCTAssertEqual(frame.payload, try JSONParser.parse(request))

        let ack = try only(send(bob, .rpcAck, to: "alice", #"{"id":"r1"}"#))
        XCTAssertEqual(ack.0, alice)
        XCTAssertEqual(ack.1.type, "rpc-ack")
        XCTAssertEqual(ack.1.from, "bob")
        for response in [#"{"id":"r1","payload":"pong"}"#, #"{"id":"r1","error":{"code":1500,"message":"boom","data":"x"}}"#] {
            let (to, frame) = try only(send(bob, .rpcResponse, to: "alice", response))
            XCTAssertEqual(to, alice)
            XCTAssertEqual(frame.type, "rpc-response")
            XCTAssertEqual(frame.payload, try JSONParser.parse(response))
        }
    }

    func test_a_request_to_nobody_or_to_oneself_is_refused_with_404_naming_the_request() throws {
        try assertRefused(send(alice, .rpcRequest, to: "nobody", #"{"id":"r1","method":"m"}"#), .peerNotFound, type: "rpc-request", id: "r1")
        try assertRefused(send(alice, .rpcRequest, to: "alice", #"{"id":"r2","method":"m"}"#), .peerNotFound, type: "rpc-request", id: "r2")
    }

    func test_a_callee_who_left_is_not_found_and_the_hub_holds_no_request_for_it() throws {
        _ = hub.handle(.disconnect(bob), now: now)
        try assertRefused(send(alice, .rpcRequest, #"{"id":"r1","method":"m"}"#), .peerNotFound, type: "rpc-request", id: "r1")
    }

    func test_a_callee_in_its_reconnect_grace_gets_what_data_gets_480_naming_the_request() throws {
        _ = hub.handle(.connectionLost(bob), now: now)
        try assertRefused(send(alice, .rpcRequest, #"{"id":"r1","method":"m"}"#), .peerReconnecting, type: "rpc-request", id: "r1")
        try assertRefused(send(alice, .data, nil), .peerReconnecting, type: "data", id: nil)
    }

    func test_payload_limits_are_checked_before_routing() throws {
        // 16 bytes is the limit here: 16 pass, 17 are refused (UTF-8 bytes, not characters).
        XCTAssertEqual(try only(send(alice, .rpcRequest, #"{"id":"r1","method":"m","payload":"0123456789abcdef"}"#)).0, bob)
        try assertRefused(send(alice, .rpcRequest, #"{"id":"r1","method":"m","payload":"0123456789abcdefg"}"#),
                          .rpcPayloadTooLarge, type: "rpc-request", id: "r1")
        try assertRefused(send(alice, .rpcRequest, #"{"id":"r1","method":"m","payload":"ééééééééé"}"#),
                          .rpcPayloadTooLarge, type: "rpc-request", id: "r1")
        try assertRefused(send(alice, .rpcResponse, #"{"id":"r1","payload":"0123456789abcdefg"}"#),
                          .rpcPayloadTooLarge, type: "rpc-response", id: "r1")
        try assertRefused(send(alice, .rpcResponse, #"{"id":"r1","error":{"code":1500,"message":"0123456789","data":"0123456"}}"#),
                          .rpcPayloadTooLarge, type: "rpc-response", id: "r1")
        XCTAssertFalse(ErrorCode.rpcPayloadTooLarge.isTemporary)
    }

    func test_malformed_rpc_payloads_are_refused_with_422() throws {
        let cases: [(RelayKind, String?, String?)] = [
            (.rpcRequest, nil, nil),
            (.rpcRequest, #""text""#, nil),
            (.rpcRequest, #"{"method":"m"}"#, nil),
            (.rpcRequest, #"{"id":"","method":"m"}"#, nil),
            (.rpcRequest, #"{"id":"123456789","method":"m"}"#, nil),  // 9 bytes, limit 8
            (.rpcRequest, #"{"id":7,"method":"m"}"#, nil),
            (.rpcRequest, #"{"id":"r1"}"#, "r1"),
            (.rpcRequest, #"{"id":"r1","method":"123456789"}"#, "r1"),
            (.rpcRequest, #"{"id":"r1","method":"m","payload":{"a":1}}"#, "r1"),
            (.rpcRequest, #"{"id":"r1","method":"m","timeout_ms":0}"#, "r1"),
            (.rpcRequest, #"{"id":"r1","method":"m","timeout_ms":"5"}"#, "r1"),
            (.rpcAck, #"{}"#, nil),
            (.rpcResponse, #"{"id":"r1","payload":1}"#, "r1"),
            (.rpcResponse, #"{"id":"r1","error":"boom"}"#, "r1"),
            (.rpcResponse, #"{"id":"r1","error":{"message":"no code"}}"#, "r1"),
            (.rpcResponse, #"{"id":"r1","error":{"code":1500}}"#, "r1"),
            (.rpcResponse, #"{"id":"r1","error":{"code":1500,"message":"m","data":{}}}"#, "r1"),
            (.rpcResponse, #"{"id":"r1","payload":"p","error":{"code":1500,"message":"m"}}"#, "r1"),
        ]
        for (kind, payload, id) in cases {
            try assertRefused(send(alice, kind, payload), .invalidPayload, type: kind.rawValue, id: id)
        }
    }

    func test_the_public_route_applies_the_same_rules_as_handle() throws {
        let seat = try XCTUnwrap(hub.seat(of: alice))
        let good = RawJSON(try JSONParser.parse(#"{"id":"r1","method":"m"}"#))
        let route = RelayParts.with(.rpcRequest, to: "bob", payload: good) { hub.route($0, from: alice, seat: seat) }
        XCTAssertEqual(route, .deliver(from: "alice", to: bob, plainIDs: true))
        let big = RawJSON(try JSONParser.parse(#"{"id":"r1","method":"m","payload":"0123456789abcdefg"}"#))
        let refused = RelayParts.with(.rpcRequest, to: "bob", payload: big) { hub.route($0, from: alice, seat: seat) }
        guard case .answer(let frame, to: alice)? = refused else { return XCTFail("\(String(describing: refused))") }
        XCTAssertEqual(frame.error?.code, ErrorCode.rpcPayloadTooLarge.rawValue)
    }

    func test_the_hub_holds_nothing_per_request() throws {
        // A request answered never, and one answered twice: the hub relays what it is given.
        _ = send(alice, .rpcRequest, #"{"id":"r1","method":"m"}"#)
        for _ in 0..<2 {
            XCTAssertEqual(try only(send(bob, .rpcResponse, to: "alice", #"{"id":"r9","payload":"late"}"#)).0, alice)
        }
    }
}
