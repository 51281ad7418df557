import CallingProtocol
import Foundation

/// Why an RPC call failed (docs/protocol.md "RPC"): one of the codes below, LiveKit's numbers, or
/// one a callee's handler threw. Thrown by `SignalingClient.performRpc`; a handler throws one to
/// send its own code, message and data to the caller.
public struct RpcError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The error's code: one of the static ones, or the handler's own.
    public var code: Int
    public var message: String
    /// Extra detail: the handler's, or the server's error name for a refused request
    /// (`peer_reconnecting`, `rate_limited`…).
    public var data: String?

    public init(code: Int, message: String, data: String? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    /// The callee has no handler for the method.
    public static let unsupportedMethod = 1400
    /// The callee is not in the room (the server's 404).
    public static let recipientNotFound = 1401
    /// The request's payload is larger than `SignalingOptions.rpcMaxPayloadBytes` (or the server's limit, its 460).
    public static let requestPayloadTooLarge = 1402
    /// The handler threw something that is not an `RpcError`.
    public static let applicationError = 1500
    /// No `rpc-ack` within `SignalingOptions.rpcAckTimeout` (or the call's timeout if shorter).
    public static let connectionTimeout = 1501
    /// No `rpc-response` within the call's timeout.
    public static let responseTimeout = 1502
    /// The callee left the room (`peer-left`) while the call was open.
    public static let recipientDisconnected = 1503
    /// The handler's result was larger than the limit; the callee sent this instead.
    public static let responsePayloadTooLarge = 1504
    /// Not connected, disconnected while the call was open, or the server refused the request otherwise.
    public static let sendFailed = 1505

    public var description: String { "RPC error \(code): \(message)\(data.map { " (\($0))" } ?? "")" }
}

/// What a registered RPC handler is given.
public struct RpcInvocationData: Sendable, Equatable {
    /// The caller's request id.
    public var requestID: String
    /// The caller.
    public var callerID: PeerID
    /// The request's payload (`""` when it had none).
    public var payload: String
    /// How long the caller waits for the response.
    public var responseTimeout: TimeInterval

    public init(requestID: String, callerID: PeerID, payload: String, responseTimeout: TimeInterval) {
        self.requestID = requestID
        self.callerID = callerID
        self.payload = payload
        self.responseTimeout = responseTimeout
    }
}

/// A registered RPC method: returns the response's payload, or throws (an `RpcError` as it is,
/// anything else as 1500 with its description).
public typealias RpcHandler = @Sendable (RpcInvocationData) async throws -> String

/// The RPC calls of one session, as caller and callee, with no clock or socket: each input
/// returns the session's actions. The server keeps nothing per call (docs/protocol.md "RPC"), so
/// timeouts, matching a response to its request and to the peer it went to, and failing the calls
/// to a peer that left are all here.
struct RpcLedger {
    var ackTimeout: TimeInterval
    var maxPayloadBytes: Int

    private struct Pending {
        var to: PeerID
        var waiter: Waiter
        var acked = false
    }

    /// Open calls by request id.
    private var pending: [String: Pending] = [:]
    /// Methods with a handler (the handlers themselves live in the driver).
    private(set) var methods: Set<String> = []

    init(ackTimeout: TimeInterval, maxPayloadBytes: Int) {
        self.ackTimeout = ackTimeout
        self.maxPayloadBytes = maxPayloadBytes
    }

    var openCalls: Int { pending.count }

    mutating func register(_ method: String) { methods.insert(method) }
    mutating func unregister(_ method: String) { methods.remove(method) }

    // MARK: caller

    mutating func perform(id: String, to: PeerID, method: String, payload: String, timeout: TimeInterval, waiter: Waiter,
                          connected: Bool) -> [SessionAction] {
        if payload.utf8.count > maxPayloadBytes {
            return [Self.fail(waiter, RpcError(code: RpcError.requestPayloadTooLarge, message: "request payload too large"))]
        }
        guard connected else { return [Self.fail(waiter, RpcError(code: RpcError.sendFailed, message: "not connected"))] }
        pending[id] = Pending(to: to, waiter: waiter)
        let timeoutMs = Int64((timeout * 1000).rounded())
        let body: JSONValue = ["id": .string(id), "method": .string(method), "payload": .string(payload), "timeout_ms": .int(timeoutMs)]
        return [.send(Frame(.rpcRequest, to: to.rawValue, payload: body)),
                .arm(.rpcAck(id), after: min(ackTimeout, timeout)), .arm(.rpcResponse(id), after: timeout)]
    }

    mutating func ack(from: PeerID?, id: String) -> [SessionAction] {
        guard let call = pending[id], call.to == from, !call.acked else { return [] }
        pending[id]?.acked = true
        return [.cancel(.rpcAck(id))]
    }

    /// An `rpc-response`: late, duplicated or not from the callee, it is dropped.
    mutating func response(from: PeerID?, _ payload: JSONValue) -> [SessionAction] {
        guard let id = payload["id"]?.stringValue, let call = pending[id], call.to == from else { return [] }
        if let error = payload["error"]?.objectValue {
            return finish(id, .failure(RpcError(code: Int(error["code"]?.int64Value ?? Int64(RpcError.applicationError)),
                                                message: error["message"]?.stringValue ?? "",
                                                data: error["data"]?.stringValue)))
        }
        return finish(id, .success(payload["payload"]?.stringValue ?? ""))
    }

    mutating func timedOut(_ timer: SessionTimer) -> [SessionAction] {
        switch timer {
        case .rpcAck(let id): return finish(id, .failure(RpcError(code: RpcError.connectionTimeout, message: "no ack from the peer")))
        case .rpcResponse(let id):
            return finish(id, .failure(RpcError(code: RpcError.responseTimeout, message: "no response from the peer")))
        default: return []
        }
    }

    /// A server `error` naming an `rpc-request` of ours (`payload.id`), or our ack or response to a
    /// caller who left (404) or is reconnecting (480), which that caller's SDK settles itself: the
    /// actions (none for the latter); nil when the error is for the app.
    mutating func refused(code: Int, message: String, payload: JSONValue?) -> [SessionAction]? {
        guard let type = payload?["type"]?.stringValue, let id = payload?["id"]?.stringValue else { return nil }
        guard type == FrameType.rpcRequest.rawValue else {
            let callerGone = code == ErrorCode.peerNotFound.rawValue || code == ErrorCode.peerReconnecting.rawValue
            return callerGone && RelayKind(rawValue: type)?.isRPC == true ? [] : nil
        }
        guard pending[id] != nil else { return nil }
        let error: RpcError
        switch code {
        case ErrorCode.peerNotFound.rawValue: error = RpcError(code: RpcError.recipientNotFound, message: message)
        case ErrorCode.rpcPayloadTooLarge.rawValue: error = RpcError(code: RpcError.requestPayloadTooLarge, message: message)
        default: error = RpcError(code: RpcError.sendFailed, message: message, data: ErrorCode(rawValue: code)?.name ?? String(code))
        }
        return finish(id, .failure(error))
    }

    /// `peer-left`: the calls to that peer cannot be answered any more.
    mutating func peerLeft(_ peer: PeerID) -> [SessionAction] {
        let ids = pending.filter { $0.value.to == peer }.keys.sorted()
        return ids.flatMap { finish($0, .failure(RpcError(code: RpcError.recipientDisconnected, message: "peer '\(peer)' left"))) }
    }

    /// The client is closed or failed: every open call fails.
    mutating func failAll(_ message: String) -> [SessionAction] {
        pending.keys.sorted().flatMap { finish($0, .failure(RpcError(code: RpcError.sendFailed, message: message))) }
    }

    private mutating func finish(_ id: String, _ result: Result<String, RpcError>) -> [SessionAction] {
        guard let call = pending.removeValue(forKey: id) else { return [] }
        return [.cancel(.rpcAck(id)), .cancel(.rpcResponse(id)), .resume(call.waiter, .success(.rpc(result)))]
    }

    private static func fail(_ waiter: Waiter, _ error: RpcError) -> SessionAction { .resume(waiter, .success(.rpc(.failure(error)))) }

    // MARK: callee

    /// An `rpc-request`: acked at once; then the handler runs (`invokeRpc`), or 1400 when none is registered.
    func request(from: PeerID?, _ payload: JSONValue) -> [SessionAction] {
        guard let from, let id = payload["id"]?.stringValue, let method = payload["method"]?.stringValue else { return [] }
        var actions: [SessionAction] = [.send(Frame(.rpcAck, to: from.rawValue, payload: ["id": .string(id)]))]
        guard methods.contains(method) else {
            actions.append(Self.response(id, to: from, .failure(RpcError(code: RpcError.unsupportedMethod,
                                                                         message: "method '\(method)' not supported"))))
            return actions
        }
        let timeout = Double(payload["timeout_ms"]?.int64Value ?? 10_000) / 1000
        actions.append(.invokeRpc(method: method, RpcInvocationData(requestID: id, callerID: from,
                                                                    payload: payload["payload"]?.stringValue ?? "",
                                                                    responseTimeout: timeout)))
        return actions
    }

    /// The handler's outcome, as the response to send.
    func handled(_ invocation: RpcInvocationData, _ result: Result<String, RpcError>) -> [SessionAction] {
        var result = result
        if case .success(let text) = result, text.utf8.count > maxPayloadBytes {
            result = .failure(RpcError(code: RpcError.responsePayloadTooLarge, message: "response payload too large"))
        }
        return [Self.response(invocation.requestID, to: invocation.callerID, result)]
    }

    private static func response(_ id: String, to caller: PeerID, _ result: Result<String, RpcError>) -> SessionAction {
        var body: [String: JSONValue] = ["id": .string(id)]
        switch result {
        case .success(let text): body["payload"] = .string(text)
        case .failure(let error):
            var wire: [String: JSONValue] = ["code": .int(Int64(error.code)), "message": .string(error.message)]
            if let data = error.data { wire["data"] = .string(data) }
            body["error"] = .object(wire)
        }
        return .send(Frame(.rpcResponse, to: caller.rawValue, payload: .object(body)))
    }
}
