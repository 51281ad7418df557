import CHiredis
import Glibc

/// A reply from Redis, copied out of hiredis's reply object.
public enum RedisReply: Sendable, Equatable {
    case string([UInt8])
    case status(String)
    case integer(Int64)
    case array([RedisReply])
    case null
    /// An error reply (`-ERR …`): the command reached Redis and was refused.
    case error(String)

    /// The bytes of a bulk string or status as UTF-8 text.
    public var text: String? {
        switch self {
        case .string(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    public var array: [RedisReply]? {
        if case .array(let items) = self { return items }
        return nil
    }

    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }
}

/// The connection failed (refused, reset, timed out, closed by the server) or a reply was an error
/// where the caller needed a value. A connection that threw an I/O error is unusable: close it.
public struct RedisError: Error, CustomStringConvertible, Equatable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Where Redis is: `redis://[[user]:password@]host[:port][/db]` (port 6379 and database 0 by default).
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String?
    public var password: String?
    public var database: Int

    public init(host: String, port: Int = 6379, username: String? = nil, password: String? = nil, database: Int = 0) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
    }

    public init(url: String) throws(RedisError) {
        guard url.hasPrefix("redis://") else { throw RedisError("a Redis URL starts with redis:// (got \(url.prefix(40)))") }
        var rest = Substring(url.dropFirst("redis://".count))
        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            if !path.isEmpty {
                guard let value = Int(path), value >= 0 else { throw RedisError("the Redis database must be a number (got \(path.prefix(20)))") }
                database = value
            }
            rest = rest[..<slash]
        }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                let user = credentials[..<colon]
                username = user.isEmpty ? nil : String(user)
                password = String(credentials[credentials.index(after: colon)...])
            } else {
                password = String(credentials)
            }
        }
        var host = String(rest)
        var port = 6379
        if let colon = rest.lastIndex(of: ":") {
            guard let value = Int(rest[rest.index(after: colon)...]), (1...65_535).contains(value) else {
                throw RedisError("the Redis port must be 1 to 65535")
            }
            port = value
            host = String(rest[..<colon])
        }
        guard !host.isEmpty else { throw RedisError("the Redis URL names no host") }
        self.init(host: host, port: port, username: username, password: password, database: database)
    }

    /// The URL without its password, for logs.
    public var description: String { "redis://\(password == nil ? "" : "***@")\(host):\(port)/\(database)" }
}

/// One blocking connection to Redis (hiredis), used by one thread at a time. Commands are sent
/// with their arguments as binary-safe strings; replies are copied into `RedisReply`.
public final class RedisConnection {
    private let context: UnsafeMutablePointer<redisContext>

    private init(context: UnsafeMutablePointer<redisContext>) {
        self.context = context
    }

    deinit { redisFree(context) }

    /// Connects, authenticates and selects the database; every later read and write gives up after
    /// `timeoutMs` (then the connection is unusable).
    public static func connect(_ endpoint: RedisEndpoint, timeoutMs: Int) throws(RedisError) -> RedisConnection {
        let timeout = timeval(tv_sec: timeoutMs / 1_000, tv_usec: Int((timeoutMs % 1_000) * 1_000))
        guard let context = redisConnectWithTimeout(endpoint.host, Int32(endpoint.port), timeout) else {
            throw RedisError("cannot allocate a Redis context")
        }
        let connection = RedisConnection(context: context)
        try connection.checkContext("connect to \(endpoint)")
        _ = redisSetTimeout(context, timeout)
        _ = redisEnableKeepAlive(context)
        if let password = endpoint.password {
            var auth = ["AUTH"]
            if let username = endpoint.username { auth.append(username) }
            auth.append(password)
            if case .error(let message) = try connection.command(auth) { throw RedisError("Redis AUTH refused: \(message)") }
        }
        if endpoint.database != 0, case .error(let message) = try connection.command(["SELECT", String(endpoint.database)]) {
            throw RedisError("Redis SELECT refused: \(message)")
        }
        return connection
    }

    /// The socket, for polling.
    public var fileDescriptor: Int32 { context.pointee.fd }

    private func checkContext(_ what: String) throws(RedisError) {
        guard context.pointee.err != 0 else { return }
        let message = withUnsafeBytes(of: context.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        throw RedisError("\(what): \(message.isEmpty ? "error \(context.pointee.err)" : message)")
    }

    /// Sends one command and waits for its reply.
    @discardableResult
    public func command(_ arguments: [String]) throws(RedisError) -> RedisReply {
        try pipeline([arguments.map { Array($0.utf8) }])[0]
    }

    /// Sends one command with binary arguments and waits for its reply.
    @discardableResult
    public func command(bytes arguments: [[UInt8]]) throws(RedisError) -> RedisReply {
        try pipeline([arguments])[0]
    }

    /// Sends every command in one write, then reads their replies in order.
    public func pipeline(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisReply] {
        for arguments in commands { try append(arguments) }
        var replies: [RedisReply] = []
        replies.reserveCapacity(commands.count)
        for _ in commands {
            var raw: UnsafeMutableRawPointer?
            if redisGetReply(context, &raw) != REDIS_OK || raw == nil {
                try checkContext("Redis reply")
                throw RedisError("Redis reply: connection lost")
            }
            replies.append(Self.copy(raw!.assumingMemoryBound(to: redisReply.self)))
            freeReplyObject(raw)
        }
        return replies
    }

    /// Queues a command in hiredis's output buffer; it goes out with the next read or `flush`.
    public func append(_ arguments: [[UInt8]]) throws(RedisError) {
        let total = arguments.reduce(0) { $0 + $1.count }
        let storage = UnsafeMutablePointer<CChar>.allocate(capacity: max(total, 1))
        defer { storage.deallocate() }
        var pointers: [UnsafePointer<CChar>?] = []
        var lengths: [Int] = []
        var offset = 0
        for argument in arguments {
            argument.withUnsafeBytes { raw in
                if let base = raw.baseAddress { (storage + offset).withMemoryRebound(to: UInt8.self, capacity: argument.count) {
                    $0.update(from: base.assumingMemoryBound(to: UInt8.self), count: argument.count)
                } }
            }
            pointers.append(UnsafePointer(storage + offset))
            lengths.append(argument.count)
            offset += argument.count
        }
        let status = pointers.withUnsafeMutableBufferPointer { argv in
            lengths.withUnsafeBufferPointer { argvlen in
                redisAppendCommandArgv(context, Int32(arguments.count), argv.baseAddress, argvlen.baseAddress)
            }
        }
        guard status == REDIS_OK else {
            try checkContext("Redis command")
            throw RedisError("Redis command could not be queued")
        }
    }

    /// Writes what `append` queued.
    public func flush() throws(RedisError) {
        var done: Int32 = 0
        while done == 0 {
            guard redisBufferWrite(context, &done) == REDIS_OK else {
                try checkContext("Redis write")
                throw RedisError("Redis write failed")
            }
        }
    }

    /// The next reply pushed by the server (a subscriber's messages), waiting up to `timeoutMs`, or
    /// until `wake` (another descriptor, -1 for none) becomes readable. Nil when neither came.
    public func nextReply(timeoutMs: Int, wake: Int32 = -1) throws(RedisError) -> RedisReply? {
        if let reply = try bufferedReply() { return reply }
        var woke: Int32 = 0
        let ready = cs_redis_wait_readable(context.pointee.fd, wake, Int32(timeoutMs), &woke)
        guard ready == 1 else { return nil }
        guard redisBufferRead(context) == REDIS_OK else {
            try checkContext("Redis read")
            throw RedisError("Redis read failed")
        }
        return try bufferedReply()
    }

    /// A complete reply already read from the socket, if any; never touches the socket.
    public func bufferedReply() throws(RedisError) -> RedisReply? {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReplyFromReader(context, &raw) == REDIS_OK else {
            try checkContext("Redis reply")
            throw RedisError("Redis protocol error")
        }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return Self.copy(raw.assumingMemoryBound(to: redisReply.self))
    }

    private static func copy(_ reply: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let value = reply.pointee
        func bytes() -> [UInt8] {
            guard let str = value.str, value.len > 0 else { return [] }
            return str.withMemoryRebound(to: UInt8.self, capacity: value.len) { Array(UnsafeBufferPointer(start: $0, count: value.len)) }
        }
        switch value.type {
        case cs_redis_reply_string(): return .string(bytes())
        case cs_redis_reply_status(): return .status(String(decoding: bytes(), as: UTF8.self))
        case cs_redis_reply_integer(): return .integer(value.integer)
        case cs_redis_reply_error(): return .error(String(decoding: bytes(), as: UTF8.self))
        case cs_redis_reply_array():
            var items: [RedisReply] = []
            items.reserveCapacity(value.elements)
            for index in 0..<value.elements {
                if let element = value.element[index] { items.append(copy(element)) }
            }
            return .array(items)
        default: return .null
        }
    }
}
