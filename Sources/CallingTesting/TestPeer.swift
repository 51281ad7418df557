import CallingCore
import CallingTransport
import Dispatch
import Foundation

/// Why a `TestPeer` call did not produce what the test asked for.
public enum TestPeerError: Error, Equatable, CustomStringConvertible {
    /// The upgrade was refused or the connection failed before `open`. `status` is the HTTP status
    /// of the refusal (401, 403, 503…) when the server answered.
    case connectFailed(status: Int?, message: String)
    /// Nothing arrived within the timeout.
    case timedOut(waitingFor: String)
    /// The connection ended (`code` nil: without a close frame) while a frame was expected.
    case connectionEnded(code: UInt16?, reason: String)
    /// A frame arrived where none was expected.
    case unexpectedFrame(Frame)
    /// A message that is not a frame: binary, not JSON, or without a string `type`.
    case undecodable(String)

    public var description: String {
        switch self {
        case .connectFailed(let status, let message): return "connect failed (status \(status.map(String.init) ?? "none")): \(message)"
        case .timedOut(let what): return "timed out waiting for \(what)"
        case .connectionEnded(let code, let reason): return "connection ended (code \(code.map(String.init) ?? "none")): \(reason)"
        case .unexpectedFrame(let frame): return "unexpected frame: \(JSONWriter.string(frame.json))"
        case .undecodable(let text): return "undecodable message: \(text.prefix(200))"
        }
    }
}

/// One signalling client for integration tests: connects to `/v1/ws`, waits for the `welcome`
/// frame, then hands out decoded frames one at a time with timeouts.
///
/// Frames are pumped from the connection's event stream into a buffer by one task, so a timed-out
/// wait never cancels the stream itself (cancelling an `AsyncStream` iterator would end it).
/// The pump ends with the connection; dropping the peer closes the connection (1001).
public final class TestPeer: Sendable {
    /// The underlying connection, for tests that need `pauseReading`, `abort` or raw bytes.
    public let connection: WebSocketClientConnection
    /// The first frame the server sent.
    public let welcome: Frame
    private let inbox: EventInbox

    private init(connection: WebSocketClientConnection, welcome: Frame, inbox: EventInbox) {
        self.connection = connection
        self.welcome = welcome
        self.inbox = inbox
    }

    /// Connects to `ws://host:port/path?token=…` (or with `Authorization: Bearer` when
    /// `useHeader`) and returns once the first frame (`welcome`) has arrived.
    /// Throws `TestPeerError.connectFailed(status:message:)` when the upgrade is refused.
    public static func connect(
        loop: WebSocketClientLoop, port: Int, token: String, path: String = "/v1/ws",
        extraQuery: [String: String] = [:], useHeader: Bool = false, host: String = "127.0.0.1",
        timeout: TimeInterval = 5
    ) async throws -> TestPeer {
        var query = extraQuery
        var headers: [String: String] = [:]
        if useHeader {
            headers["Authorization"] = "Bearer \(token)"
        } else {
            query["token"] = token
        }
        let queryString = query.sorted { $0.key < $1.key }
            .map { "\(percentEncoded($0.key))=\(percentEncoded($0.value))" }
            .joined(separator: "&")
        let target = queryString.isEmpty ? path : "\(path)?\(queryString)"
        let connection = loop.connect(host: host, port: port, path: target, headers: headers)
        let inbox = EventInbox()
        let events = connection.events
        // Unstructured on purpose: it outlives this call and ends when the stream finishes.
        Task.detached {
            for await event in events { inbox.push(event) }
            inbox.push(nil)
        }
        let deadline = DispatchTime.now() + timeout
        while true {
            switch await inbox.next(deadline: deadline) {
            case .event(.open):
                continue
            case .event(.failed(let status, _, let message)):
                throw TestPeerError.connectFailed(status: status, message: message)
            case .event(.closed(let code, let reason)), .ended(let code, let reason):
                throw TestPeerError.connectionEnded(code: code, reason: reason)
            case .event(let message):
                let welcome = try decode(message)
                return TestPeer(connection: connection, welcome: welcome, inbox: inbox)
            case .timedOut:
                connection.abort()
                throw TestPeerError.timedOut(waitingFor: "the first frame")
            }
        }
    }

    /// The next frame, or nil once the connection has ended (the terminal event stays available
    /// to `closeEvent`). Throws `timedOut` if nothing arrives within `timeout` seconds.
    public func next(timeout: TimeInterval = 5) async throws -> Frame? {
        switch await inbox.next(deadline: .now() + timeout) {
        case .event(let event):
            return try Self.decode(event)
        case .ended:
            return nil
        case .timedOut:
            throw TestPeerError.timedOut(waitingFor: "a frame")
        }
    }

    /// The next frame of `type`, skipping others; `timeout` bounds the whole wait. Throws
    /// `connectionEnded` if the connection ends first.
    public func next(type: String, timeout: TimeInterval = 5) async throws -> Frame {
        let deadline = DispatchTime.now() + timeout
        while true {
            switch await inbox.next(deadline: deadline) {
            case .event(let event):
                let frame = try Self.decode(event)
                if frame.type == type { return frame }
            case .ended(let code, let reason):
                throw TestPeerError.connectionEnded(code: code, reason: reason)
            case .timedOut:
                throw TestPeerError.timedOut(waitingFor: "a \(type) frame")
            }
        }
    }

    /// Waits `within` seconds and throws `unexpectedFrame` if a frame arrives, or
    /// `connectionEnded` if the connection ends meanwhile.
    public func expectNoFrame(within: TimeInterval) async throws {
        switch await inbox.next(deadline: .now() + within) {
        case .event(let event):
            throw TestPeerError.unexpectedFrame(try Self.decode(event))
        case .ended(let code, let reason):
            throw TestPeerError.connectionEnded(code: code, reason: reason)
        case .timedOut:
            return
        }
    }

    /// Sends `frame` as JSON text.
    public func send(_ frame: JSONValue) {
        connection.send(bytes: JSONWriter.bytes(frame), binary: false)
    }

    /// Sends `raw` as one text message, unvalidated.
    public func send(raw: String) {
        connection.send(text: raw)
    }

    /// Starts the closing handshake; `closeEvent` then reports how it ended.
    public func close(code: UInt16 = 1000, reason: String = "") {
        connection.close(code: code, reason: reason)
    }

    /// How the connection ended, skipping any frames still unread: the close code (nil when the
    /// TCP connection dropped without a close frame) and reason. Throws `timedOut`.
    public func closeEvent(timeout: TimeInterval = 5) async throws -> (code: UInt16?, reason: String) {
        let deadline = DispatchTime.now() + timeout
        while true {
            switch await inbox.next(deadline: deadline) {
            case .event:
                continue
            case .ended(let code, let reason):
                return (code, reason)
            case .timedOut:
                throw TestPeerError.timedOut(waitingFor: "the connection to close")
            }
        }
    }

    // MARK: decoding

    private static func decode(_ event: WebSocketClientEvent) throws -> Frame {
        switch event {
        case .text(let text):
            return try decode(text: text)
        case .binary(let bytes):
            throw TestPeerError.undecodable("binary message of \(bytes.count) bytes")
        case .open, .closed, .failed:
            throw TestPeerError.undecodable("\(event)")
        }
    }

    /// Maps `{type, from?, to?, payload?, error?: {code, message}}` onto `Frame`.
    public static func decode(text: String) throws -> Frame {
        let value: JSONValue
        do {
            value = try JSONParser.parse(text)
        } catch {
            throw TestPeerError.undecodable(text)
        }
        guard let type = value["type"]?.stringValue else { throw TestPeerError.undecodable(text) }
        var error: WireError?
        if let wire = value["error"], !wire.isNull {
            guard let code = wire["code"]?.int64Value else { throw TestPeerError.undecodable(text) }
            error = WireError(code: Int(code), message: wire["message"]?.stringValue ?? "")
        }
        let payload = value["payload"]
        return Frame(type: type, from: value["from"]?.stringValue, to: value["to"]?.stringValue,
                     payload: payload == JSONValue.null ? nil : payload, error: error)
    }

    private static func percentEncoded(_ string: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return string.addingPercentEncoding(withAllowedCharacters: allowed) ?? string
    }
}

/// What `EventInbox.next` found.
private enum InboxItem {
    case event(WebSocketClientEvent)
    /// The connection ended; repeated on every later call.
    case ended(code: UInt16?, reason: String)
    case timedOut
}

/// A buffer between the pump task and the test: messages queue here until asked for, and a
/// waiter is woken by the next push or by a Dispatch timer at its deadline — no polling, and no
/// cancellation of the underlying stream.
private final class EventInbox: Sendable {
    // `Locked` (an NSLock) rather than `Synchronization.Mutex`, whose contended path
    // ThreadSanitizer cannot see on Linux (it then reports false races in every test run under
    // `--sanitize=thread`).
    private struct State {
        var events: [WebSocketClientEvent] = []
        var head = 0
        var ended: (code: UInt16?, reason: String)?
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let current = Locked(State())

    private func withState<T>(_ body: (inout State) -> T) -> T {
        current.withLock(body)
    }

    /// Called by the pump: an event, or nil when the stream finished.
    func push(_ event: WebSocketClientEvent?) {
        let waiters = withState { state -> [CheckedContinuation<Void, Never>] in
            switch event {
            case .closed(let code, let reason)?:
                state.ended = (code, reason)
            case .failed(let status, _, let message)?:
                // Only possible before `open`; `connect` reads the event itself, so keep it queued.
                state.events.append(.failed(status: status, message: message))
                state.ended = (nil, message)
            case let event?:
                state.events.append(event)
            case nil:
                if state.ended == nil { state.ended = (nil, "event stream finished") }
            }
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The next queued event; else the end of the connection; else waits until one of those or
    /// `deadline`. Events queued before the end are delivered before it.
    func next(deadline: DispatchTime) async -> InboxItem {
        while true {
            if let item = take() { return item }
            if DispatchTime.now() >= deadline { return .timedOut }
            await wait(until: deadline)
        }
    }

    private func take() -> InboxItem? {
        withState { state in
            if state.head < state.events.count {
                let event = state.events[state.head]
                state.head += 1
                if state.head == state.events.count {
                    state.events.removeAll()
                    state.head = 0
                }
                return .event(event)
            }
            if let ended = state.ended { return .ended(code: ended.code, reason: ended.reason) }
            return nil
        }
    }

    /// Suspends until the next push or the deadline, whichever is first. Each wake-up path
    /// removes the waiter under the lock before resuming it, so it is resumed exactly once.
    private func wait(until deadline: DispatchTime) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let id = withState { state -> UInt64? in
                // Re-check under the lock: a push between `take` and here must not be missed.
                if state.head < state.events.count || state.ended != nil { return nil }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = continuation
                return state.nextWaiter
            }
            guard let id else {
                continuation.resume()
                return
            }
            DispatchQueue.global().asyncAfter(deadline: deadline) { [weak self] in
                let waiter = self?.withState { $0.waiters.removeValue(forKey: id) }
                waiter?.resume()
            }
        }
    }
}
