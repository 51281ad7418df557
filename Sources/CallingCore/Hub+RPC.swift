/// The RPC frames' rules (docs/protocol.md, "RPC"). The server keeps no RPC state: it checks each
/// `rpc-request`, `rpc-ack` and `rpc-response` on its own and routes it as it routes an addressed
/// `data`. Timeouts, matching a response to its request and noticing that the callee left are the
/// SDKs' (the caller sees `peer-left` as every peer does), so a node restart or a cluster hop loses
/// nothing the server would have had to remember.
extension Hub {
    /// An RPC frame from `connection`, seated at `seat`: its refusal when the payload breaks a
    /// rule, else `route`'s answer, whose refusals (`peer_not_found`, `peer_reconnecting`) then
    /// carry the request id as `payload.id` so the caller's SDK settles the right call.
    func routeRPC(_ parts: RelayParts, from connection: ConnectionID, seat: Seat) -> RelayRoute? {
        let check = rpcCheck(parts.kind, payload: parts.payload)
        if let refusal = check.refusal {
            guard self.seat(of: connection) != nil else { return nil }
            return .answer(refusal, to: connection)
        }
        let route = self.route(parts.kind, to: parts.toPeer, from: connection, seat: seat)
        guard case .answer(let frame, let sender)? = route else { return route }
        return .answer(Self.naming(check.id, in: frame), to: sender)
    }

    /// `frame` (an `error` answering an RPC frame) with the request id beside `payload.type`.
    public static func naming(_ id: String?, in frame: Frame) -> Frame {
        guard let id, case .object(var fields)? = frame.payload else { return frame }
        fields["id"] = .string(id)
        var named = frame
        named.payload = .object(fields)
        return named
    }

    /// The request id of an RPC frame's payload, and the `error` refusing the frame when the
    /// payload breaks a rule (nil when it may be routed).
    func rpcCheck(_ kind: RelayKind, payload: UnsafeBufferPointer<UInt8>?) -> (id: String?, refusal: Frame?) {
        let type = kind.rawValue
        // The decoder checked the payload's syntax; a tree is fine for a frame this rare.
        let value = payload.flatMap { try? JSONParser.parse(ArraySlice($0)) }
        guard let fields = value?.objectValue else {
            return (nil, Frame.error(.invalidPayload, "\(type) payload must be an object", inReplyTo: type))
        }
        let maxName = settings.rpcMaxNameBytes
        guard let id = fields["id"]?.stringValue, !id.isEmpty, id.utf8.count <= maxName else {
            return (nil, Frame.error(.invalidPayload, "\(type) needs a string 'id' of 1–\(maxName) bytes", inReplyTo: type))
        }
        func refuse(_ code: ErrorCode, _ message: String) -> (String?, Frame?) {
            (id, Self.naming(id, in: Frame.error(code, message, inReplyTo: type)))
        }
        let maxPayload = settings.rpcMaxPayloadBytes
        func tooLarge(_ what: String) -> (String?, Frame?) {
            refuse(.rpcPayloadTooLarge, "\(type) \(what) is larger than \(maxPayload) bytes")
        }
        /// A string member, or absent/null; false for any other value.
        func optionalString(_ key: String) -> (ok: Bool, bytes: Int) {
            switch fields[key] {
            case nil, .null?: return (true, 0)
            case .string(let text)?: return (true, text.utf8.count)
            default: return (false, 0)
            }
        }
        switch kind {
        case .rpcRequest:
            guard let method = fields["method"]?.stringValue, !method.isEmpty, method.utf8.count <= maxName else {
                return refuse(.invalidPayload, "rpc-request needs a string 'method' of 1–\(maxName) bytes")
            }
            let payload = optionalString("payload")
            guard payload.ok else { return refuse(.invalidPayload, "rpc-request 'payload' must be a string") }
            guard payload.bytes <= maxPayload else { return tooLarge("payload") }
            switch fields["timeout_ms"] {
            case nil, .null?: break
            case let timeout?:
                guard let ms = timeout.int64Value, ms > 0 else {
                    return refuse(.invalidPayload, "rpc-request 'timeout_ms' must be a positive integer")
                }
            }
        case .rpcAck:
            break
        case .rpcResponse:
            let payload = optionalString("payload")
            guard payload.ok else { return refuse(.invalidPayload, "rpc-response 'payload' must be a string") }
            switch fields["error"] {
            case nil, .null?:
                guard payload.bytes <= maxPayload else { return tooLarge("payload") }
            case .object(let error)?:
                guard fields["payload"].flatMap(JSONValue.nonNull) == nil else {
                    return refuse(.invalidPayload, "rpc-response carries 'payload' or 'error', not both")
                }
                guard let code = error["code"]?.int64Value, (1...Int64(Int32.max)).contains(code),
                      let message = error["message"]?.stringValue
                else { return refuse(.invalidPayload, "rpc-response 'error' needs a positive integer 'code' and a string 'message'") }
                var dataBytes = 0
                switch error["data"] {
                case nil, .null?: break
                case .string(let data)?: dataBytes = data.utf8.count
                default: return refuse(.invalidPayload, "rpc-response 'error.data' must be a string")
                }
                guard message.utf8.count + dataBytes <= maxPayload else { return tooLarge("error message and data") }
            default:
                return refuse(.invalidPayload, "rpc-response 'error' must be an object")
            }
        case .offer, .answer, .candidate, .data:
            break  // not reached: only RPC frames come here
        }
        return (id, nil)
    }
}
