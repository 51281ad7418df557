import CallingProtocol
import XCTest

final class FrameTests: XCTestCase {
    // MARK: - Golden server frames

    /// Every file in `Fixtures/server-frames/` is the exact byte encoding of one of these frames.
    /// Envelope keys are sorted by the writer, and so are the payloads the server builds; a relayed
    /// payload is the sender's bytes. SDKs parse frames, so neither order is something they rely on.
    private static let goldenFrames: [String: Frame] = [
        "welcome": Frame(.welcome, payload: [
            "peer_id": "alice", "room_id": "room-1", "call_id": "call-1", "role": "patient", "name": "Alice",
            "peers": [["peer_id": "bob", "role": "agent", "name": nil]],
            "ping_interval_ms": 25_000, "server_time": 1_700_000_000_000,
            "last_seq": 12, "read_seq": 10, "unread": 2,
        ]),
        "welcome-resumed": Frame(.welcome, payload: [
            "peer_id": "alice", "room_id": "room-1", "call_id": nil, "role": "peer", "name": nil, "peers": [],
            "ping_interval_ms": 25_000, "server_time": 1_700_000_000_000,
            "last_seq": 3, "read_seq": 3, "unread": 0, "recovered": false, "replay_count": 2,
        ]),
        "peer-joined": Frame(.peerJoined, from: "bob", payload: ["peer_id": "bob", "role": "agent", "name": "Bob"]),
        "peer-left": Frame(.peerLeft, from: "bob", payload: ["peer_id": "bob"]),
        // Relayed frames carry the payload's bytes as the client sent them (key order, spacing and
        // number spellings kept), inside the envelope the server writes.
        "offer-relayed": relayed(#"{"type":"offer","to":"bob","payload":{"type":"offer","sdp":"v=0\r\no=- 4611 2 IN IP4 127.0.0.1\r\n"}}"#),
        "candidate-relayed": relayed(
            #"{"type":"candidate","to":"bob","payload":{"candidate":"candidate:1 1 udp 2122260223 192.0.2.1 54400 typ host","sdpMid":null,"sdpMLineIndex":0}}"#),
        "data-broadcast": relayed(#"{"type":"data","payload": {"kind":"hangup", "half":0.5,"whole":2.0,"big":1e20,"tiny":1e-7} }"#),
        "chat": Frame(.chat, from: "alice", payload: [
            "seq": 13, "client_id": "c-1", "text": "café \"quoted\"\n😀", "meta": ["reply_to": 12], "ts": 1_700_000_000_123,
        ]),
        "chat-ack": Frame(.chatAck, payload: ["client_id": "c-1", "seq": 13, "ts": 1_700_000_000_123]),
        "chat-ack-error": Frame(.chatAck, payload: ["client_id": "c-2"], error: WireError(.chatEmpty, "chat text is empty")),
        "typing": Frame(.typing, from: "alice", payload: ["typing": true]),
        "read": Frame(.read, from: "alice", payload: ["seq": 13]),
        "pong": Frame(.pong, payload: ["n": 7]),
        "pong-empty": Frame(.pong),
        "error": Frame.error(.peerNotFound, "no peer 'carol' in this room", inReplyTo: "offer"),
        "error-without-type": Frame.error(.badJSON, "JSON ends early"),
        "error-escaping": Frame.error(.invalidPayload, "say \"hi\" \\ tab\there \u{1}\u{1F} end", inReplyTo: "chat"),
    ]

    /// The frame the hub relays from "alice" for a client frame: `to` and the raw payload as decoded.
    private static func relayed(_ client: String) -> Frame {
        guard case .relay(let kind, let to, let payload)? = try? ClientFrameDecoder.decode(Array(client.utf8)) else {
            preconditionFailure("not a relayed client frame: \(client)")
        }
        return Frame(kind.frameType, from: "alice", to: to?.rawValue, rawPayload: payload)
    }

    func test_server_frames_encode_byte_for_byte_as_the_golden_files() throws {
        let files = try Fixtures.files(in: "server-frames", suffix: ".json")
        let names = Set(files.map { Fixtures.name(of: $0, dropping: ".json") })
        XCTAssertEqual(names, Set(Self.goldenFrames.keys), "every golden file has a frame and every frame a golden file")
        for url in files {
            let name = Fixtures.name(of: url, dropping: ".json")
            guard let frame = Self.goldenFrames[name] else { continue }
            let expected = try Fixtures.line(url)
            let actual = frame.encoded()
            XCTAssertEqual(
                String(decoding: actual, as: UTF8.self), String(decoding: expected, as: UTF8.self), "server-frames/\(name).json")
            XCTAssertEqual(actual, expected, "server-frames/\(name).json bytes")
        }
    }

    /// The router writes relayed frames and pongs through `writePlainRelayed`: the same bytes as `encoded()`.
    func test_a_plain_relayed_frame_is_written_as_encoded() throws {
        let payloads: [RawJSON?] = [nil, ["sdp": "v=0"], RawJSON(.array([1, "é", nil])), RawJSON(.string("\u{1}\"x"))]
        for payload in payloads {
            for to in [nil, "bob", "b é"] as [String?] {
                for from in ["alice", "ä", "", nil] as [String?] {
                    let frame = Frame(.candidate, from: from, to: to, rawPayload: payload)
                    if payload == nil {
                        XCTAssertNil(frame.plainRelayedLength, "a frame without a raw payload takes the general path")
                        continue
                    }
                    let length = try XCTUnwrap(frame.plainRelayedLength)
                    let written = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                        frame.writePlainRelayed(to: buffer.baseAddress!)
                        count = length
                    }
                    XCTAssertEqual(String(decoding: written, as: UTF8.self), String(decoding: frame.encoded(), as: UTF8.self))
                }
            }
        }
        // A string that needs escaping sends the frame down the general path.
        XCTAssertNil(Frame(.data, from: "a\"b", rawPayload: ["k": 1]).plainRelayedLength)
        XCTAssertNil(Frame(.data, from: "a", to: "b\n", rawPayload: ["k": 1]).plainRelayedLength)
        XCTAssertNil(Frame(.pong, payload: ["k": 1]).plainRelayedLength, "a payload built as a value")
    }

    /// An addressed relay is written from its parts (`RelayedFrame.writePlain`): the bytes of the
    /// frame it stands for, for every relay kind; ids that need escaping, or no payload, take the
    /// general path.
    func test_a_relayed_frame_is_written_from_its_parts_as_its_frame_encodes() throws {
        let payloads: [RawJSON] = [["sdp": "v=0"], RawJSON(.array([1, "é", nil])), RawJSON(.string("\u{1}\"x")), RawJSON(.null)]
        for kind in [RelayKind.offer, .answer, .candidate, .data] {
            for payload in payloads {
                for (from, to) in [("alice", "bob"), ("ä", "b é"), ("", "x"), (String(repeating: "p", count: 40), "q")] {
                    let relayed = RelayedFrame(kind, from: PeerID(from), to: PeerID(to), payload: payload)
                    XCTAssertEqual(relayed.frame, Frame(kind.frameType, from: from, to: to, rawPayload: payload))
                    let length = try XCTUnwrap(relayed.plainLength)
                    XCTAssertEqual(length, relayed.frame.plainRelayedLength)
                    let written = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                        relayed.writePlain(to: buffer.baseAddress!)
                        count = length
                    }
                    XCTAssertEqual(String(decoding: written, as: UTF8.self), String(decoding: relayed.frame.encoded(), as: UTF8.self))
                }
            }
        }
        XCTAssertNil(RelayedFrame(.data, from: "a\"b", to: "c", payload: ["k": 1]).plainLength)
        XCTAssertNil(RelayedFrame(.data, from: "a", to: "b\n", payload: ["k": 1]).plainLength)
        XCTAssertNil(RelayedFrame(.data, from: "a", to: "b", payload: nil).plainLength, "no payload")
    }

    /// The router writes chats and chat-acks through `writePlainChat`: the same bytes as
    /// `encoded()` and as the sorted encoding of the frame's JSON.
    func test_a_plain_chat_or_chat_ack_is_written_as_encoded() throws {
        func written(_ frame: Frame) throws -> String {
            let length = try XCTUnwrap(frame.plainChatLength, "\(frame)")
            let bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                frame.writePlainChat(to: buffer.baseAddress!)
                count = length
            }
            XCTAssertEqual(String(decoding: bytes, as: UTF8.self), String(decoding: frame.encoded(), as: UTF8.self))
            XCTAssertEqual(bytes, JSONWriter.bytes(frame.json))
            return String(decoding: bytes, as: UTF8.self)
        }
        let numbers: [Int64] = [0, 1, 9, 10, 99, 100, 101, 999, 1_000, 9_999, 10_000, 10_001, 99_999, 100_000, 1_700_000_000_123,
                                -1, -10, -100, -10_000, .max, .min]
        for seq in numbers {
            for timestamp in [0, 1_700_000_000_123, -7, .min] as [Int64] {
                for clientID in ["c-1", "", "é😀", String(repeating: "x", count: 40)] {
                    var ack = Frame.chatAck(clientID: clientID, seq: seq, timestamp: timestamp)
                    _ = try written(ack)
                    ack.to = "bob"
                    _ = try written(ack)
                    ack.from = "alice"
                    _ = try written(ack)
                    for from in ["alice", "", "ä"] {
                        for text in ["benchmark message", "", "café 😀 / <b>"] {
                            var chat = Frame.chat(from: from, clientID: clientID, text: text, meta: nil, seq: seq,
                                                  timestamp: timestamp)
                            _ = try written(chat)
                            chat.to = "bob"
                            _ = try written(chat)
                        }
                    }
                }
            }
        }
        // From the fields alone, as the router writes a stored chat's ack and broadcast: the
        // same bytes as the frames the hub's effects carry.
        for seq in numbers {
            for clientID in ["c-1", "", "é😀"] {
                let ack = Frame.chatAck(clientID: clientID, seq: seq, timestamp: 1_700_000_000_123)
                let ackLength = try XCTUnwrap(Frame.plainChatAckLength(clientID: clientID, seq: seq, timestamp: 1_700_000_000_123))
                XCTAssertEqual([UInt8](unsafeUninitializedCapacity: ackLength) { buffer, count in
                    Frame.writePlainChatAck(clientID: clientID, seq: seq, timestamp: 1_700_000_000_123, to: buffer.baseAddress!)
                    count = ackLength
                }, ack.encoded())
                for from in ["alice", "", "ä"] {
                    let chat = Frame.chat(from: from, clientID: clientID, text: "café", meta: nil, seq: seq, timestamp: -7)
                    let length = try XCTUnwrap(Frame.plainChatLength(from: from, clientID: clientID, text: "café", seq: seq, timestamp: -7))
                    XCTAssertEqual([UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                        Frame.writePlainChat(from: from, clientID: clientID, text: "café", seq: seq, timestamp: -7, to: buffer.baseAddress!)
                        count = length
                    }, chat.encoded())
                }
            }
        }
        XCTAssertNil(Frame.plainChatAckLength(clientID: "a\"b", seq: 1, timestamp: 2))
        XCTAssertNil(Frame.plainChatLength(from: "a\n", clientID: "c", text: "t", seq: 1, timestamp: 2))
        XCTAssertNil(Frame.plainChatLength(from: "a", clientID: "c\\", text: "t", seq: 1, timestamp: 2))
        XCTAssertNil(Frame.plainChatLength(from: "a", clientID: "c", text: "line\n", seq: 1, timestamp: 2))
        // The golden chat-ack, as the hub builds it.
        let golden = try Fixtures.line(try XCTUnwrap(try Fixtures.files(in: "server-frames", suffix: ".json").first {
            Fixtures.name(of: $0, dropping: ".json") == "chat-ack"
        }))
        XCTAssertEqual(try written(Frame.chatAck(clientID: "c-1", seq: 13, timestamp: 1_700_000_000_123)),
                       String(decoding: golden, as: UTF8.self))
        // Anything else takes the general path: a string that needs escaping, a meta, an error, another body.
        XCTAssertNil(Frame.chatAck(clientID: "a\"b", seq: 1, timestamp: 2).plainChatLength)
        XCTAssertNil(Frame.chat(from: "a", clientID: "c", text: "line\n", meta: nil, seq: 1, timestamp: 2).plainChatLength)
        XCTAssertNil(Frame.chat(from: "a\\", clientID: "c", text: "t", meta: nil, seq: 1, timestamp: 2).plainChatLength)
        XCTAssertNil(Frame.chat(from: "a", clientID: "c", text: "t", meta: ["k": 1], seq: 1, timestamp: 2).plainChatLength)
        var refused = Frame.chatAck(clientID: "c", seq: 1, timestamp: 2)
        refused.error = WireError(.chatEmpty, "chat text is empty")
        XCTAssertNil(refused.plainChatLength)
        var escapedTo = Frame.chatAck(clientID: "c", seq: 1, timestamp: 2)
        escapedTo.to = "b\u{1}"
        XCTAssertNil(escapedTo.plainChatLength)
        XCTAssertNil(Frame(.chatAck, payload: ["client_id": "c", "seq": 1, "ts": 2]).plainChatLength)
        XCTAssertNil(Frame(.candidate, from: "a", to: "b", rawPayload: ["candidate": "c"]).plainChatLength)
    }

    func test_golden_server_frames_are_valid_json_that_decodes_to_the_same_frame() throws {
        for url in try Fixtures.files(in: "server-frames", suffix: ".json") {
            let name = Fixtures.name(of: url, dropping: ".json")
            guard let frame = Self.goldenFrames[name] else { continue }
            let parsed = try JSONParser.parse(Fixtures.line(url))
            // Integral doubles are written as integers, so compare re-encodings rather than values.
            XCTAssertEqual(JSONWriter.bytes(parsed), JSONWriter.bytes(frame.json), name)
        }
    }

    // MARK: - Envelope

    func test_absent_fields_are_omitted_not_null() {
        XCTAssertEqual(Frame(.ping).json, ["type": "ping"])
        XCTAssertEqual(JSONWriter.string(Frame(type: "pong").json), #"{"type":"pong"}"#)
    }

    func test_every_envelope_field_is_written_under_its_wire_name() {
        let frame = Frame(.data, from: "a", to: "b", payload: ["k": 1], error: WireError(code: 500, message: "m"))
        XCTAssertEqual(frame.json, [
            "type": "data", "from": "a", "to": "b", "payload": ["k": 1], "error": ["code": 500, "message": "m"],
        ])
    }

    func test_explicit_null_payload_is_kept() {
        XCTAssertEqual(JSONWriter.string(Frame(.data, payload: .null).json), #"{"payload":null,"type":"data"}"#)
    }

    func test_typed_and_string_initialisers_agree() {
        XCTAssertEqual(Frame(.chatAck, from: "x"), Frame(type: "chat-ack", from: "x"))
    }

    func test_error_frame_echoes_the_refused_type() {
        let frame = Frame.error(.unknownType, "unknown frame type 'hello'", inReplyTo: "hello")
        XCTAssertEqual(frame.type, "error")
        XCTAssertEqual(frame.payload, ["type": "hello"])
        XCTAssertEqual(frame.error, WireError(code: 402, message: "unknown frame type 'hello'"))
        XCTAssertNil(frame.from)
        XCTAssertNil(frame.to)
    }

    func test_error_frame_without_a_type_has_no_payload() {
        let frame = Frame.error(.badJSON, "JSON ends early")
        XCTAssertNil(frame.payload)
        XCTAssertEqual(frame.error?.code, 400)
    }

    func test_wire_error_carries_the_numeric_code() {
        XCTAssertEqual(WireError(.rateLimited, "slow down"), WireError(code: 429, message: "slow down"))
        XCTAssertEqual(WireError(.rateLimited, "slow down").json, ["code": 429, "message": "slow down"])
    }

    // MARK: - Frame types

    func test_frame_types_use_the_sdk_wire_names() {
        XCTAssertEqual(
            FrameType.allCases.map(\.rawValue),
            ["welcome", "peer-joined", "peer-left", "offer", "answer", "candidate", "data", "chat", "chat-ack", "chat-edit",
             "chat-delete", "chat-react", "typing", "read", "meter", "stats", "ping", "pong", "error", "peer-reconnecting",
             "peer-resumed", "leave", "rpc-request", "rpc-ack", "rpc-response"])
    }

    func test_clients_may_send_only_signalling_chat_and_keepalive_frames() {
        let sendable = Set(FrameType.allCases.filter(\.isClientSendable))
        XCTAssertEqual(sendable, [.offer, .answer, .candidate, .data, .chat, .chatEdit, .chatDelete, .chatReact, .typing, .read,
                                  .stats, .ping, .leave, .rpcRequest, .rpcAck, .rpcResponse])
    }

    func test_direct_envelope_encoding_equals_the_generic_writer() {
        let frames: [Frame] = [
            Frame(.pong),
            Frame(.offer, from: "a\"b", to: "c", payload: ["sdp": "v=0\r\n", "type": "offer"]),
            Frame.error(.peerNotFound, "no peer 'x'", inReplyTo: "offer"),
            Frame(.chatAck, payload: ["client_id": "c1"], error: WireError(.chatEmpty, "empty")),
            Frame(type: "tÿpe\u{1}", from: "", to: "", payload: .null),
        ]
        for frame in frames {
            XCTAssertEqual(frame.encoded(), JSONWriter.bytes(frame.json), "\(frame)")
        }
    }

    func test_chat_and_ack_frames_encode_like_the_same_payload_built_as_json() {
        let ack = Frame.chatAck(clientID: "c\"1\u{7}é", seq: 42, timestamp: -1_700_000_000_123)
        let ackAsJSON = Frame(.chatAck, payload: ["client_id": "c\"1\u{7}é", "seq": 42, "ts": -1_700_000_000_123])
        XCTAssertEqual(ack, ackAsJSON)
        XCTAssertEqual(ack.encoded(), ackAsJSON.encoded())
        XCTAssertEqual(String(decoding: ack.encoded(), as: UTF8.self),
                       #"{"payload":{"client_id":"c\"1\u0007é","seq":42,"ts":-1700000000123},"type":"chat-ack"}"#)

        for meta: JSONValue? in [nil, ["b": [1, 2.5, "x"], "a": .null]] {
            let chat = Frame.chat(from: "alice", clientID: "m1", text: "hi\n\\there", meta: meta, seq: Int64.max,
                                  timestamp: 0)
            let chatAsJSON = Frame(.chat, from: "alice", payload: [
                "client_id": "m1", "meta": meta ?? .null, "seq": .int(Int64.max), "text": "hi\n\\there", "ts": 0,
            ])
            XCTAssertEqual(chat, chatAsJSON)
            XCTAssertEqual(chat.encoded(), chatAsJSON.encoded())
            XCTAssertEqual(chat.encoded(), JSONWriter.bytes(chat.json))
        }
    }

    /// The hub sends `welcome` and `peer-joined` typed (`Frame.welcome`, `Frame.peerJoined`), written
    /// from their fields: the same frames, and the same bytes, as the payloads built as JSON,
    /// golden files included.
    func test_typed_welcome_and_peer_joined_encode_like_the_same_payload_built_as_json() throws {
        let typed: [String: Frame] = [
            "welcome": .welcome(WelcomePayload(
                peerID: "alice", roomID: "room-1", callID: "call-1", role: "patient", name: "Alice",
                peers: [RosterEntry(peerID: "bob", role: "agent", name: nil)], pingIntervalMs: 25_000,
                serverTime: 1_700_000_000_000, lastSeq: 12, readSeq: 10, unread: 2, resume: nil)),
            "welcome-resumed": .welcome(WelcomePayload(
                peerID: "alice", roomID: "room-1", callID: nil, role: "peer", name: nil, peers: [], pingIntervalMs: 25_000,
                serverTime: 1_700_000_000_000, lastSeq: 3, readSeq: 3, unread: 0,
                resume: WelcomePayload.Resume(recovered: false, replayCount: 2))),
            "peer-joined": .peerJoined(RosterEntry(peerID: "bob", role: "agent", name: "Bob")),
        ]
        for (name, frame) in typed {
            let golden = try XCTUnwrap(Self.goldenFrames[name])
            XCTAssertEqual(frame, golden, name)
            XCTAssertEqual(String(decoding: frame.encoded(), as: UTF8.self), String(decoding: golden.encoded(), as: UTF8.self), name)
        }

        let odd = "qu\"ote \\ tab\t \u{1} café 😀"
        let peers = [RosterEntry(peerID: odd, role: "", name: odd), RosterEntry(peerID: "b", role: "host", name: nil),
                     RosterEntry(peerID: "c", role: "peer", name: "")]
        for resume in [nil, WelcomePayload.Resume(recovered: true, replayCount: 0), WelcomePayload.Resume(recovered: false, replayCount: .max)] {
            for (callID, name) in [(nil, nil), (odd, odd), ("", "")] as [(String?, String?)] {
                let payload = WelcomePayload(peerID: odd, roomID: odd, callID: callID, role: odd, name: name, peers: peers,
                                             pingIntervalMs: 0, serverTime: -1, lastSeq: .min, readSeq: .max, unread: 7, resume: resume)
                let frame = Frame.welcome(payload)
                let asJSON = Frame(.welcome, payload: payload.json)
                XCTAssertEqual(frame, asJSON)
                XCTAssertEqual(frame.encoded(), asJSON.encoded(), "\(payload)")
                XCTAssertEqual(frame.encoded(), JSONWriter.bytes(frame.json))
            }
        }
        for entry in peers {
            let frame = Frame.peerJoined(entry)
            XCTAssertEqual(frame.from, entry.peerID)
            XCTAssertEqual(frame.encoded(), Frame(.peerJoined, from: entry.peerID, payload: entry.json).encoded())
        }
    }
}
