import CallingLogging
import CallingProtocol
import Foundation

/// HTTP exchanges: requests read from lws's parsed head, checked for framing and size before any
/// route sees them, handed to the delegate, and answered (in chunks, keep-alive) from the
/// responder's answer; the WebSocket upgrade's checks; and the deadlines of heads and idle
/// keep-alive sockets. Owns the exchanges in flight and the HTTP counters; reads the socket
/// budget's bookkeeping of each socket and the connections' count. Service thread only; its stored
/// properties are unchecked for exclusivity for the reason given at `WebSocketConnections`.
final class HTTPExchanges {
    let settings: TransportSettings
    let logger: Logger
    let budget: SocketBudget<OpaquePointer>
    let connections: WebSocketConnections
    @exclusivity(unchecked) private var exchanges: [OpaquePointer: HTTPExchange] = [:]
    @exclusivity(unchecked) private var exchangesByID: [UInt64: HTTPExchange] = [:]
    @exclusivity(unchecked) private var nextExchange: UInt64 = 0

    /// Its share of `TransportCounters`.
    @exclusivity(unchecked) private(set) var rejectedAtCapacity = 0
    @exclusivity(unchecked) private(set) var requestsRejected = 0
    @exclusivity(unchecked) private(set) var requestsTimedOut = 0

    init(settings: TransportSettings, logger: Logger, budget: SocketBudget<OpaquePointer>, connections: WebSocketConnections) {
        self.settings = settings
        self.logger = logger
        self.budget = budget
        self.connections = connections
    }

    /// LWS_CALLBACK_RAW_ADOPT. Only requests lws cannot parse as HTTP get here (see
    /// cs_lws_option_fallback_to_raw): an unknown method, or CONNECT, which lws would otherwise
    /// hold open as a raw tunnel.
    func rawAdopted(_ wsi: OpaquePointer) {
        budget.socket(wsi)?.idle = false
    }

    /// LWS_CALLBACK_RAW_RX: the start of such a request, answered and closed.
    func rawReceived(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?, length: Int) -> Int32 {
        let head = input.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: min(length, 16)), as: UTF8.self) }
        if head?.hasPrefix("CONNECT ") == true {
            return rejectAndClose(wsi, .problem(405, code: "method_not_allowed", detail: "CONNECT is not supported",
                                                headers: [("allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")]))
        }
        return rejectAndClose(wsi, .problem(501, code: "method_not_implemented",
                                            detail: "the request method is not one this server implements"))
    }

    func confirmUpgrade(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?, server: WebSocketServer) -> Int32 {
        budget.socket(wsi)?.idle = false
        // `Upgrade: h2c` (what `curl --http2` offers over plain HTTP) may be ignored (RFC 9113
        // §3.2), and lws would switch the socket to HTTP/2 if we agreed. lws passes the header
        // value in place: blanking it makes lws carry on with an ordinary HTTP/1.1 request.
        if let input, String(cString: input.assumingMemoryBound(to: CChar.self)).lowercased() == "h2c" {
            input.storeBytes(of: UInt8(ascii: "-"), as: UInt8.self)
            return 0
        }
        let path = LWS.header(wsi, .getURI) ?? "/"
        if let rejection = framingProblem(wsi, path: path, upgrade: true) { return rejectAndClose(wsi, rejection) }
        guard var request = readRequest(wsi, method: .get) else { return -1 }
        request.path = path
        if LWS.header(wsi, .version) != "13" {
            // RFC 6455 §4.4: refuse other versions and name the one we speak.
            return writeImmediate(wsi, .problem(426, code: "unsupported_websocket_version",
                                                detail: "only WebSocket version 13 (RFC 6455) is supported",
                                                headers: [("sec-websocket-version", "13")]))
        }
        if connections.shuttingDown {
            return writeImmediate(wsi, .problem(503, code: "shutting_down", detail: "the server is shutting down",
                                                headers: [("retry-after", "1")]))
        }
        if connections.countWithUpgrades >= budget.capacity {
            rejectedAtCapacity += 1
            logger.warning("refusing peer at capacity", ["capacity": "\(budget.capacity)"])
            return writeImmediate(wsi, .problem(503, code: "at_capacity", detail: "the server holds as many peers as it can",
                                                headers: [("retry-after", "5")]))
        }
        guard let delegate = server.delegate else { return -1 }
        switch delegate.server(server, shouldUpgrade: request) {
        case .accept(let context):
            connections.pendingUpgrades[wsi] = context
            return 0
        case .reject(let response):
            return writeImmediate(wsi, response)
        }
    }

    /// Writes a complete small response from inside a callback (upgrade refusal). The head is
    /// built by hand: at this point lws has not recorded the request's HTTP version, and its header
    /// helpers would answer "HTTP/1.0", which WebSocket clients reject as an invalid response.
    /// lws buffers whatever the socket does not take at once.
    func writeImmediate(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Int32 {
        let message = OutboundMessage(Self.immediateBytes(response))
        if LWS.write(wsi, message.payloadPointer, message.count, .httpFinal) < 0 { return -1 }
        return 1
    }

    static func immediateBytes(_ response: HTTPResponse) -> [UInt8] {
        var head = "HTTP/1.1 \(response.status) \(HTTPResponse.reasonPhrase(response.status))\r\n"
        head += "server: calling-server\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "content-length: \(response.body.count)\r\nconnection: close\r\n\r\n"
        return Array(head.utf8) + response.body
    }

    /// Answers and closes: for requests whose framing cannot be trusted (RFC 9112 §6.3), so
    /// nothing after them on the connection may be read as another request. Returning -1 makes
    /// lws close the socket once what we wrote has gone out.
    func rejectAndClose(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Int32 {
        requestsRejected += 1
        if let socket = budget.socket(wsi) {
            socket.answered = true
            socket.idle = false
            socket.readingBody = false
        }
        // What the client already sent is unread; closing over it would send RST, and the client
        // might lose this answer. Bounded: a peer streaming forever is cut off anyway.
        LWS.drainSocket(wsi, limit: 1 << 20)
        let message = OutboundMessage(Self.immediateBytes(response))
        _ = LWS.write(wsi, message.payloadPointer, message.count, .httpFinal)
        return -1
    }

    /// The target must fit in the header table with room for the rest of the head, or an
    /// oversized one would overflow the table (431) before it could be measured (414).
    var effectiveURLLimit: Int { max(1, min(settings.maxURLBytes, settings.maxHeaderBytes - 512)) }

    /// Why a parsed request cannot be served as it stands, or nil. Checked before any route
    /// sees it; every answer here also closes the connection.
    func framingProblem(_ wsi: OpaquePointer, path: String, upgrade: Bool) -> HTTPResponse? {
        let sizes = LWS.headerSizes(wsi)
        if sizes.uri > effectiveURLLimit {
            return .problem(414, code: "uri_too_long", detail: "request targets are limited to \(effectiveURLLimit) bytes")
        }
        if sizes.longest > settings.maxHeaderBytes || sizes.total > settings.maxHeaderBytes {
            return .problem(431, code: "headers_too_large",
                            detail: "the request head is limited to \(settings.maxHeaderBytes) bytes")
        }
        if budget.liveSockets > budget.capacity, !WebSocketServer.headroomPaths.contains(path) {
            rejectedAtCapacity += 1
            return .problem(503, code: "at_capacity", detail: "the server holds as many connections as it can",
                            headers: [("retry-after", "5")])
        }
        if upgrade { return nil }
        let lengths = LWS.fragmentCount(wsi, .contentLength)
        let transferEncoding = LWS.headerLength(wsi, .transferEncoding) > 0
        if lengths > 0 {
            if transferEncoding {
                return .problem(400, code: "conflicting_framing",
                                detail: "Content-Length and Transfer-Encoding must not both be present (RFC 9112 §6.3)")
            }
            guard lengths == 1, let value = LWS.header(wsi, .contentLength),
                  HTTPFraming.contentLength(value) != nil
            else {
                return .problem(400, code: "invalid_content_length",
                                detail: "Content-Length must be one decimal number (RFC 9110 §8.6)")
            }
        } else if transferEncoding {
            return .problem(411, code: "length_required",
                            detail: "request bodies need a Content-Length; Transfer-Encoding is not accepted")
        }
        return nil
    }

    // MARK: HTTP

    func beginHTTP(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?, length: Int, server: WebSocketServer) -> Int32 {
        budget.socket(wsi)?.idle = false
        let path = input.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: max(0, length)), as: UTF8.self) } ?? "/"
        if let rejection = framingProblem(wsi, path: path, upgrade: false) { return rejectAndClose(wsi, rejection) }
        guard let method = requestMethod(wsi), var request = readRequest(wsi, method: method) else { return -1 }
        if length > 0 { request.path = path }
        nextExchange += 1
        let exchange = HTTPExchange(id: nextExchange, wsi: wsi, request: request)
        if let previous = exchanges[wsi] { exchangesByID[previous.id] = nil }
        exchanges[wsi] = exchange
        exchangesByID[exchange.id] = exchange
        // framingProblem has vouched for it: one plain decimal number, no Transfer-Encoding.
        let declaredLength = request.headers["content-length"].flatMap(HTTPFraming.contentLength) ?? 0
        if declaredLength > 0, let socket = budget.socket(wsi), socket.served > 0,
           LWS.tcpBytesReceived(wsi) == socket.bytesAtDispatch
        {
            // Nothing arrived since the previous request was handed to its route, before its
            // answer went out: this one had been pipelined behind it. lws 4.1.6 loops forever on the body of such a request
            // (BODY_COMPLETION repeated every turn; found by the http fuzz target), so the
            // connection closes before it, which RFC 9112 §9.3.2 lets clients recover from.
            requestsRejected += 1
            return -1
        }
        if declaredLength > settings.maxBodyBytes {
            exchange.bodyTooLarge = true
            dispatchHTTP(exchange, server: server)
        } else if declaredLength == 0 {
            dispatchHTTP(exchange, server: server)
        } else if let socket = budget.socket(wsi) {
            // The body arrives through HTTP_BODY and is dispatched on HTTP_BODY_COMPLETION. Until
            // then the socket holds a slot of the budget for a client that may never finish, so
            // it can be evicted like one that never sends its request (`SocketBudget.evictOldestWaiting`).
            exchange.bodyStartedAt = DispatchTime.now().uptimeNanoseconds
            budget.markEvictable(wsi, socket)
            socket.readingBody = true
        }
        return 0
    }

    /// The 408 for a body that has fallen below `httpBodyMinBytesPerSecond` on average after
    /// `httpBodyGraceSeconds`, or nil. A body that stops altogether gets no callback to check it
    /// in: lws's own timer (`httpTimeoutSeconds`) drops that socket.
    func bodyTooSlow(_ wsi: OpaquePointer, _ exchange: HTTPExchange, adding length: Int) -> HTTPResponse? {
        exchange.bodyBytesReceived += length
        let minimum = settings.httpBodyMinBytesPerSecond
        guard minimum > 0, exchange.bodyStartedAt > 0 else { return nil }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds &- exchange.bodyStartedAt) / 1e9
        guard elapsed > Double(settings.httpBodyGraceSeconds),
              Double(exchange.bodyBytesReceived) < Double(minimum) * elapsed
        else { return nil }
        requestsTimedOut += 1
        return .problem(408, code: "body_too_slow",
                        detail: "request bodies must arrive at \(minimum) bytes per second or faster after \(settings.httpBodyGraceSeconds) s")
    }

    func dispatchHTTP(_ exchange: HTTPExchange, server: WebSocketServer) {
        guard !exchange.dispatched else { return }
        exchange.dispatched = true
        budget.socket(exchange.wsi)?.readingBody = false
        budget.socket(exchange.wsi)?.bytesAtDispatch = LWS.tcpBytesReceived(exchange.wsi)
        if exchange.bodyTooLarge {
            respond(exchangeID: exchange.id, .problem(413, code: "body_too_large",
                                                      detail: "request bodies are limited to \(settings.maxBodyBytes) bytes"))
            return
        }
        guard let delegate = server.delegate else {
            respond(exchangeID: exchange.id, .problem(503, code: "unavailable", detail: "server is not ready"))
            return
        }
        delegate.server(server, handle: exchange.request, responder: HTTPResponder(server: server, exchangeID: exchange.id))
    }

    func writeHTTP(_ exchange: HTTPExchange, wsi: OpaquePointer) -> Int32 {
        guard let response = exchange.response else { return 0 }
        if !exchange.headersSent {
            exchange.headersSent = true
            guard writeHeaders(wsi, response) else { return -1 }
            if response.body.isEmpty || exchange.request.method == .head { return completeHTTP(exchange, wsi: wsi) }
            LWS.callbackOnWritable(wsi)
            return 0
        }
        let chunkSize = 16_384
        let end = min(response.body.count, exchange.bodyOffset + chunkSize)
        let chunk = OutboundMessage(response.body[exchange.bodyOffset..<end])
        let final = end == response.body.count
        if LWS.write(wsi, chunk.payloadPointer, chunk.count, final ? .httpFinal : .http) < 0 { return -1 }
        exchange.bodyOffset = end
        if final { return completeHTTP(exchange, wsi: wsi) }
        LWS.callbackOnWritable(wsi)
        return 0
    }

    func completeHTTP(_ exchange: HTTPExchange, wsi: OpaquePointer) -> Int32 {
        exchanges[wsi] = nil
        exchangesByID[exchange.id] = nil
        if let socket = budget.socket(wsi) {
            socket.served += 1
            budget.markIdle(wsi, socket, now: DispatchTime.now().uptimeNanoseconds, bytesReceived: LWS.tcpBytesReceived(wsi))
        }
        // Keep-alive: lws waits for the next request on this socket, or tells us to close it.
        return LWS.transactionCompleted(wsi) != 0 ? -1 : 0
    }

    /// LWS_CALLBACK_HTTP_BODY: a piece of the request's body.
    func receiveBody(_ wsi: OpaquePointer, input: UnsafeMutableRawPointer?, length: Int) -> Int32 {
        // Evicted by the socket budget: lws re-arms its own body timer after every piece of
        // body, which would outlast the kill the budget asked for (`SocketBudget.evictOldestWaiting`).
        if let socket = budget.socket(wsi), socket.evicted { return -1 }
        // A request already dispatched has no body to read. lws 4.1.6 can still deliver one for
        // it when requests are pipelined behind a bodiless POST, from a buffer it has already
        // freed (AddressSanitizer, found by the http fuzz target): never touch `input` then.
        guard let exchange = exchanges[wsi], !exchange.dispatched, let input else { return 0 }
        if let rejection = bodyTooSlow(wsi, exchange, adding: length) {
            exchange.dispatched = true
            return rejectAndClose(wsi, rejection)
        }
        if exchange.request.body.count + length > settings.maxBodyBytes {
            exchange.bodyTooLarge = true
        } else {
            exchange.request.body.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
        }
        return 0
    }

    /// LWS_CALLBACK_HTTP_BODY_COMPLETION: the body is in; the request goes to its route.
    func bodyCompleted(_ wsi: OpaquePointer, server: WebSocketServer) {
        guard let exchange = exchanges[wsi] else { return }
        dispatchHTTP(exchange, server: server)
    }

    /// LWS_CALLBACK_HTTP_WRITEABLE: the next part of the answer.
    func httpWriteable(_ wsi: OpaquePointer) -> Int32 {
        guard let exchange = exchanges[wsi] else { return 0 }
        return writeHTTP(exchange, wsi: wsi)
    }

    /// LWS_CALLBACK_CLOSED_HTTP: the exchange ends with its socket; a late answer is dropped.
    func httpClosed(_ wsi: OpaquePointer) {
        connections.pendingUpgrades[wsi] = nil
        if let exchange = exchanges.removeValue(forKey: wsi) {
            exchangesByID[exchange.id] = nil
        }
    }

    func respond(exchangeID: UInt64, _ response: HTTPResponse) {
        guard let exchange = exchangesByID[exchangeID], exchange.response == nil else { return }
        exchange.response = response
        LWS.callbackOnWritable(exchange.wsi)
    }

    /// Closes the sockets whose client is late with its request head, or idle on a keep-alive
    /// socket for longer than `httpKeepAliveTimeoutSeconds`. Service thread only; called on every
    /// tick. lws arms timers for both, but under its libev loop (lws 4.1.6) a timer armed while
    /// its loop timer waits for a later one fires only with that later one, seconds or minutes late.
    func expireDeadlines() {
        let second: UInt64 = 1_000_000_000
        let late = budget.lateSockets(now: DispatchTime.now().uptimeNanoseconds,
                                      headerTimeout: UInt64(settings.httpHeaderTimeoutSeconds) * second,
                                      keepAliveTimeout: UInt64(settings.httpKeepAliveTimeoutSeconds) * second,
                                      bytesReceived: LWS.tcpBytesReceived)
        for (wsi, socket, headLate) in late where !socket.closed {
            if headLate { requestsRejected += 1 }
            socket.answered = true
            socket.idle = false
            WebSocketServer.shutDownForClose(wsi)
            LWS.killNow(wsi)
        }
    }

    func writeHeaders(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Bool {
        LWS.writeResponseHead(wsi, status: response.status, reason: HTTPResponse.reasonPhrase(response.status), headers: response.headers,
                              contentLength: response.body.count)
    }

    func requestMethod(_ wsi: OpaquePointer) -> HTTPMethod? {
        let candidates: [(LWSHeader, HTTPMethod)] = [
            (.getURI, .get), (.postURI, .post), (.patchURI, .patch), (.deleteURI, .delete), (.optionsURI, .options),
            (.putURI, .put), (.headURI, .head),
        ]
        return candidates.first { LWS.headerLength(wsi, $0.0) > 0 }?.1
    }

    static let copiedHeaders: [(LWSHeader, String)] = [
        (.authorization, "authorization"), (.contentType, "content-type"), (.contentLength, "content-length"),
        (.ifMatch, "if-match"), (.accept, "accept"), (.origin, "origin"), (.transferEncoding, "transfer-encoding"),
        (.xForwardedFor, "x-forwarded-for"), (.userAgent, "user-agent"), (.host, "host"), (.ifNoneMatch, "if-none-match"),
    ]

    func readRequest(_ wsi: OpaquePointer, method: HTTPMethod) -> HTTPRequest? {
        var headers: [String: String] = [:]
        for (token, name) in Self.copiedHeaders {
            if let value = LWS.header(wsi, token) { headers[name] = value }
        }
        if let apiKey = LWS.customHeader(wsi, "x-api-key:") { headers["x-api-key"] = apiKey }
        // CORS preflights name the method they ask for; lws has no token for it.
        if let method = LWS.customHeader(wsi, "access-control-request-method:") { headers["access-control-request-method"] = method }
        var query: [String: String] = [:]
        if var raw = LWS.query(wsi) {
            // Split on the bytes: splitting the String went grapheme by grapheme over the whole
            // query, the peer token included, on every join, and the generic `split` of an array
            // still cost far more than this loop. URL query syntax is bytes; `=` is split on
            // even where a combining mark follows it. lws gives the pairs joined by 0x1F.
            raw.withUTF8 { bytes in
                var start = 0
                while start <= bytes.count {
                    var end = start
                    var equals = -1
                    while end < bytes.count, bytes[end] != 0x1F {
                        if equals < 0, bytes[end] == UInt8(ascii: "=") { equals = end }
                        end += 1
                    }
                    if end > start {
                        if equals >= 0 {
                            query[String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<equals]), as: UTF8.self)] =
                                String(decoding: UnsafeBufferPointer(rebasing: bytes[(equals + 1)..<end]), as: UTF8.self)
                        } else {
                            query[String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)] = ""
                        }
                    }
                    start = end + 1
                }
            }
        }
        let remote = LWS.peerAddress(wsi)
        return HTTPRequest(method: method, path: "/", query: query, headers: headers, remoteAddress: remote)
    }
}

final class HTTPExchange {
    let id: UInt64
    let wsi: OpaquePointer
    var request: HTTPRequest
    var bodyTooLarge = false
    var dispatched = false
    /// When the head was in and the body began (monotonic ns; 0 for a request without one), and
    /// the body bytes lws has delivered since, for the minimum body rate.
    var bodyStartedAt: UInt64 = 0
    var bodyBytesReceived = 0
    var response: HTTPResponse?
    var headersSent = false
    var bodyOffset = 0

    init(id: UInt64, wsi: OpaquePointer, request: HTTPRequest) {
        self.id = id
        self.wsi = wsi
        self.request = request
    }
}
