import CallingEndpoints
import CallingLogging
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The Apple-platform transport: `URLSessionWebSocketTask` for WebSockets, data tasks for REST.
/// Compiled on every platform. On Linux, swift-corelibs-foundation's URLSession does HTTP but
/// not WebSockets (its libcurl fails `resume()` with `NSURLErrorUnsupportedURL`, -1002): sockets
/// end in `failed` with `ClientFailureCode.transportUnsupported`, while `request` works.
///
/// TLS is URLSession's own: the system trust store (and App Transport Security on Apple
/// platforms). `TLSClientOptions.caFile` and `insecureSkipVerification` are not supported here;
/// a socket or request that asks for them fails with `ClientFailureCode.tlsOptionsUnsupported`
/// rather than run with another trust than the app configured.
///
/// Threading: URLSession calls back on one serial queue per transport, so a socket's events
/// arrive one at a time and in order, as the seam requires.
final class URLSessionWebSocketTransport: ClientTransport, @unchecked Sendable {
    // @unchecked: `session` and `delegate` are immutable references to thread-safe objects.
    /// The transport of every client not given its own on Apple platforms.
    static let shared = URLSessionWebSocketTransport()

    private let delegate = SessionDelegate()
    private let session: URLSession

    /// A transport with its own URLSession (ephemeral: no cookies or cache between clients).
    init(configuration: URLSessionConfiguration = .ephemeral) {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.name = "calling-client.urlsession"
        session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    deinit {
        session.invalidateAndCancel()
    }

    func openSocket(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?,
                    onEvent: @escaping @Sendable (TransportEvent) -> Void) -> any TransportSocket
    {
        let request = Self.upgradeRequest(host: host, port: port, path: path, headers: headers, tls: tls)
        let refusal: TransportEvent? = switch request {
        case .success: nil
        case .failure(let error): .failed(status: nil, code: error.code, message: error.message)
        }
        guard case .success(let urlRequest) = request else {
            let socket = URLSessionTransportSocket(task: nil, onEvent: onEvent)
            // Later, on the delegate queue: the seam's events never arrive inside `openSocket`.
            session.delegateQueue.addOperation { socket.finish(refusal!) }
            return socket
        }
        let task = session.webSocketTask(with: urlRequest)
        let socket = URLSessionTransportSocket(task: task, onEvent: onEvent)
        delegate.register(socket, for: task.taskIdentifier)
        task.resume()
        return socket
    }

    func request(_ method: String, host: String, port: Int, path: String, headers: [String: String], body: [UInt8],
                 tls: TLSClientOptions?, timeout: TimeInterval) async throws(HTTPClientError) -> HTTPClientResponse
    {
        var urlRequest: URLRequest
        switch Self.httpRequest(method, host: host, port: port, path: path, headers: headers, body: body, tls: tls,
                                timeout: timeout) {
        case .success(let built): urlRequest = built
        case .failure(let error): throw error
        }
        urlRequest.timeoutInterval = timeout
        let finished = URLSessionTransportSocket.Once()
        let outcome: Result<HTTPClientResponse, HTTPClientError> = await withCheckedContinuation { continuation in
            let task = session.dataTask(with: urlRequest) { data, response, error in
                guard finished.claim() else { return }
                continuation.resume(returning: Self.response(data: data, response: response as? HTTPURLResponse,
                                                             error: error))
            }
            task.resume()
            // URLRequest's timeout is an idle timeout; the seam's is for the whole answer.
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) {
                guard finished.claim() else { return }
                task.cancel()
                continuation.resume(returning: .failure(HTTPClientError(message: "no complete answer within \(timeout) s")))
            }
        }
        return try outcome.get()
    }

    // MARK: pure parts (unit-tested)

    /// The `ws(s)://` URL of an upgrade; `tls` non-nil means `wss://`. IPv6 literals are bracketed.
    static func url(scheme: String, host: String, port: Int, path: String) -> URL? {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return URL(string: "\(scheme)://\(shownHost):\(port)\(path.hasPrefix("/") ? path : "/" + path)")
    }

    /// Why `tls` cannot be honoured by URLSession, or nil when it can (system trust only).
    static func unsupported(_ tls: TLSClientOptions?) -> HTTPClientError? {
        guard let tls else { return nil }
        if tls.caFile != nil {
            return HTTPClientError(message: "tlsCAFile is not supported by the URLSession transport (it trusts the system store)",
                                   code: ClientFailureCode.tlsOptionsUnsupported)
        }
        if tls.insecureSkipVerification {
            return HTTPClientError(message: "insecureSkipTLSVerification is not supported by the URLSession transport",
                                   code: ClientFailureCode.tlsOptionsUnsupported)
        }
        return nil
    }

    /// The upgrade request, or why it cannot be made (TLS options, header injection, a bad URL).
    static func upgradeRequest(host: String, port: Int, path: String, headers: [String: String], tls: TLSClientOptions?)
        -> Result<URLRequest, HTTPClientError>
    {
        httpRequest("GET", scheme: tls == nil ? "ws" : "wss", host: host, port: port, path: path, headers: headers,
                    body: [], tls: tls, timeout: nil)
    }

    /// An HTTP request, or why it cannot be made.
    static func httpRequest(_ method: String, host: String, port: Int, path: String, headers: [String: String],
                            body: [UInt8], tls: TLSClientOptions?, timeout: TimeInterval?)
        -> Result<URLRequest, HTTPClientError>
    {
        httpRequest(method, scheme: tls == nil ? "http" : "https", host: host, port: port, path: path, headers: headers,
                    body: body, tls: tls, timeout: timeout)
    }

    private static func httpRequest(_ method: String, scheme: String, host: String, port: Int, path: String,
                                    headers: [String: String], body: [UInt8], tls: TLSClientOptions?,
                                    timeout: TimeInterval?) -> Result<URLRequest, HTTPClientError>
    {
        if let problem = unsupported(tls) { return .failure(problem) }
        // CR or LF in a header would let a caller inject headers, as the lws transport refuses too.
        let injected = ([method] + headers.keys + headers.values).contains { $0.contains(where: \.isNewline) }
        guard !injected else {
            return .failure(HTTPClientError(message: "method, header names and values must not contain line breaks"))
        }
        guard let url = url(scheme: scheme, host: host, port: port, path: path) else {
            return .failure(HTTPClientError(message: "cannot form a URL for \(host):\(port)\(path)"))
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { request.setValue(value, forHTTPHeaderField: name) }
        if !body.isEmpty { request.httpBody = Data(body) }
        if let timeout { request.timeoutInterval = timeout }
        return .success(request)
    }

    /// A finished data task as the seam's answer: any HTTP status is an answer (the caller reads
    /// the problem body); no response is an `HTTPClientError` with the code `failureCode` finds.
    static func response(data: Data?, response: HTTPURLResponse?, error: (any Error)?) -> Result<HTTPClientResponse, HTTPClientError> {
        guard let response else {
            let (code, message) = failure(error)
            return .failure(HTTPClientError(message: message, code: code))
        }
        return .success(HTTPClientResponse(status: response.statusCode, headers: lowercased(response.allHeaderFields),
                                           body: data.map { [UInt8]($0) } ?? []))
    }

    /// Header fields with lower-cased names (HTTP names are case-insensitive; the seam's are lower case).
    static func lowercased(_ fields: [AnyHashable: Any]) -> [String: String] {
        var headers: [String: String] = [:]
        for (name, value) in fields {
            guard let name = name as? String else { continue }
            headers[name.lowercased()] = value as? String ?? "\(value)"
        }
        return headers
    }

    /// The `ClientFailureCode` (nil when there is none) and message of a task that got no answer.
    /// URLSession reports one code for an untrusted chain and a certificate for another host
    /// (`serverCertificateUntrusted`), and one for expired and not-yet-valid
    /// (`serverCertificateHasBadDate`); those map to `untrustedIssuer` and `certificateExpired`.
    static func failure(_ error: (any Error)?) -> (code: String?, message: String) {
        guard let error else { return (nil, "no answer") }
        let nsError = error as NSError
        guard nsError.domain == NSURLErrorDomain else { return (nil, nsError.localizedDescription) }
        let message = "\(nsError.localizedDescription) (NSURLErrorDomain \(nsError.code))"
        let code: String? = switch URLError.Code(rawValue: nsError.code) {
        case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot: ClientFailureCode.untrustedIssuer
        case .serverCertificateHasBadDate: ClientFailureCode.certificateExpired
        case .serverCertificateNotYetValid: ClientFailureCode.certificateNotYetValid
        case .secureConnectionFailed, .clientCertificateRejected, .clientCertificateRequired:
            ClientFailureCode.certificateInvalid
        case .unsupportedURL: ClientFailureCode.transportUnsupported
        default: nil
        }
        return (code, message)
    }

    /// The terminal event of a socket that never opened: a refused upgrade (an HTTP status other
    /// than 101, with the `problem-code` header of docs/protocol.md) or no answer at all.
    static func refusal(status: Int?, headers: [AnyHashable: Any], error: (any Error)?) -> TransportEvent {
        if let status, status != 101, status > 0 {
            return .failed(status: status, code: lowercased(headers)["problem-code"],
                           message: "the server answered the upgrade with HTTP \(status)")
        }
        let (code, message) = failure(error)
        return .failed(status: nil, code: code, message: message)
    }

    /// The seam's close code for URLSession's: 0 (`.invalid`, no close frame), 1005 (no status)
    /// and 1006 (abnormal, never on the wire) mean no code was exchanged.
    static func closeCode(raw: Int) -> UInt16? {
        switch raw {
        case 1000...1004, 1007...4999: UInt16(raw)
        default: nil
        }
    }

    /// The close reason URLSession hands over as bytes.
    static func closeReason(_ data: Data?) -> String {
        data.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// The `URLSessionWebSocketTask.CloseCode` to send for `code`. swift-corelibs-foundation's
    /// `CloseCode` is a closed Swift enum without application codes (4000–4999); a code it cannot
    /// hold is sent as 1000.
    static func sendableCloseCode(_ code: UInt16) -> URLSessionWebSocketTask.CloseCode {
        URLSessionWebSocketTask.CloseCode(rawValue: Int(code)) ?? .normalClosure
    }
}

/// One `URLSessionWebSocketTask` as a `TransportSocket`. Its events come from the transport's
/// delegate and its receive loop, both on the transport's serial delegate queue.
final class URLSessionTransportSocket: TransportSocket, @unchecked Sendable {
    // @unchecked: `task` (not Sendable on every platform) is immutable and URLSession's tasks are
    // thread-safe; the mutable state is in `state`.
    private let task: URLSessionWebSocketTask?
    private let onEvent: @Sendable (TransportEvent) -> Void

    private struct State {
        var opened = false
        var finished = false
        var readPaused = false
        var receiving = false
        var aborted = false
        /// The close we sent; reported when the task completes without the server's close frame.
        var sentClose: (UInt16, String)?
    }

    private let state = Locked(State())

    init(task: URLSessionWebSocketTask?, onEvent: @escaping @Sendable (TransportEvent) -> Void) {
        self.task = task
        self.onEvent = onEvent
    }

    func send(text: String) {
        guard let task, state.withLock({ !$0.finished && $0.sentClose == nil && !$0.aborted }) else { return }
        // A failed send ends the task; its completion reports the drop.
        task.send(.string(text)) { _ in }
    }

    func close(code: UInt16, reason: String) {
        let first = state.withLock { state -> Bool in
            guard !state.finished, state.sentClose == nil, !state.aborted else { return false }
            state.sentClose = (code, reason)
            return true
        }
        guard first, let task else { return }
        task.cancel(with: URLSessionWebSocketTransport.sendableCloseCode(code), reason: Data(reason.utf8))
    }

    func abort() {
        let first = state.withLock { state -> Bool in
            guard !state.finished, !state.aborted else { return false }
            state.aborted = true
            return true
        }
        guard first else { return }
        task?.cancel()
    }

    func pauseReading() {
        state.withLock { $0.readPaused = true }
    }

    func resumeReading() {
        state.withLock { $0.readPaused = false }
        receiveNext()
    }

    // MARK: delegate queue

    func didOpen() {
        let first = state.withLock { state -> Bool in
            guard !state.finished, !state.opened else { return false }
            state.opened = true
            return true
        }
        guard first else { return }
        onEvent(.open)
        receiveNext()
    }

    func didClose(rawCode: Int, reason: Data?) {
        finish(.closed(code: URLSessionWebSocketTransport.closeCode(raw: rawCode),
                       reason: URLSessionWebSocketTransport.closeReason(reason)))
    }

    func didComplete(error: (any Error)?, response: HTTPURLResponse?) {
        let (wasOpened, wasAborted, sent) = state.withLock { ($0.opened, $0.aborted, $0.sentClose) }
        if !wasOpened {
            finish(wasAborted ? .failed(status: nil, code: nil, message: "aborted")
                              : URLSessionWebSocketTransport.refusal(status: response?.statusCode,
                                                                     headers: response?.allHeaderFields ?? [:], error: error))
        } else if let (code, reason) = sent, !wasAborted {
            finish(.closed(code: code, reason: reason))
        } else {
            finish(.closed(code: nil, reason: wasAborted ? "aborted" : "connection lost"))
        }
    }

    /// Delivers the one terminal event; later ones are dropped.
    func finish(_ event: TransportEvent) {
        let first = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.finished = true
            return true
        }
        if first { onEvent(event) }
    }

    /// One `receive` at a time, and none while paused (URLSession reads only when asked to).
    private func receiveNext() {
        guard let task else { return }
        let start = state.withLock { state -> Bool in
            guard state.opened, !state.finished, !state.readPaused, !state.receiving else { return false }
            state.receiving = true
            return true
        }
        guard start else { return }
        task.receive { [weak self] result in
            guard let self else { return }
            state.withLock { $0.receiving = false }
            guard case .success(let message) = result else { return }  // the task's completion reports the end
            if case .string(let text) = message, state.withLock({ !$0.finished }) { onEvent(.text(text)) }
            receiveNext()
        }
    }

    /// A flag that one of several racing completions claims.
    final class Once: Sendable {
        private let claimed = Locked(false)

        /// True for the first caller only.
        func claim() -> Bool {
            claimed.withLock { claimed in
                defer { claimed = true }
                return !claimed
            }
        }
    }
}

/// The transport's URLSession delegate: routes each task's WebSocket callbacks to its socket,
/// and returns redirects as answers (as the lws transport does) instead of following them.
private final class SessionDelegate: NSObject, URLSessionWebSocketDelegate, Sendable {
    private let sockets = Locked<[Int: URLSessionTransportSocket]>([:])

    func register(_ socket: URLSessionTransportSocket, for task: Int) {
        sockets.withLock { $0[task] = socket }
    }

    private func socket(_ task: URLSessionTask, remove: Bool = false) -> URLSessionTransportSocket? {
        sockets.withLock { remove ? $0.removeValue(forKey: task.taskIdentifier) : $0[task.taskIdentifier] }
    }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
        socket(webSocketTask)?.didOpen()
    }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask,
                    didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?)
    {
        socket(webSocketTask)?.didClose(rawCode: closeCode.rawValue, reason: reason)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        socket(task, remove: true)?.didComplete(error: error, response: task.response as? HTTPURLResponse)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void)
    {
        completionHandler(nil)
    }
}
