import CallingProtocol
import XCTest

/// The RPC frames through the decoder: addressed relays that always need `to`, whose payload the
/// hub checks (HubRPCTests); both decoding paths agree.
final class ClientMessageRPCTests: XCTestCase {
    func test_rpc_frames_decode_as_addressed_relays_on_every_path() throws {
        for (type, kind) in [("rpc-request", RelayKind.rpcRequest), ("rpc-ack", .rpcAck), ("rpc-response", .rpcResponse)] {
            let payload = #"{"id":"r1","method":"m","payload":"x"}"#
            for spelling in [type, type.replacingOccurrences(of: "-", with: "\\u002d")] {
                let text = #"{"type":"\#(spelling)","to":"bob","payload":\#(payload)}"#
                let expected = ClientMessage.relay(kind, to: "bob", payload: RawJSON(try JSONParser.parse(payload)))
                XCTAssertEqual(try ClientFrameDecoder.decode(Array(text.utf8)), expected, text)
                let lent = try Array(text.utf8).withUnsafeBufferPointer { try ClientFrameDecoder.decodeFrame(lent: $0) }
                switch lent {
                case .message(let message): XCTAssertEqual(message, expected, text)
                case .relay(let relay): XCTAssertEqual(relay.message(in: Array(text.utf8)), expected, text)
                }
            }
            XCTAssertTrue(kind.isRPC)
            XCTAssertEqual(kind.frameType.rawValue, type)
            XCTAssertTrue(kind.frameType.isClientSendable)
        }
        XCTAssertFalse(RelayKind.data.isRPC)
    }

    func test_an_rpc_frame_without_to_is_refused_with_422() {
        for type in ["rpc-request", "rpc-ack", "rpc-response"] {
            for text in [#"{"type":"\#(type)","payload":{"id":"r1"}}"#, #"{"type":"\#(type)","to":null,"payload":{"id":"r1"}}"#] {
                do {
                    _ = try ClientFrameDecoder.decode(Array(text.utf8))
                    XCTFail("accepted: \(text)")
                } catch {
                    XCTAssertEqual(error.code, .invalidPayload)
                    XCTAssertEqual(error.type, type)
                }
            }
        }
    }
}
