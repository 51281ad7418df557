import CallingProtocol
import Dispatch
import Foundation
import Glibc

/// The suite's load generator: thousands of client WebSockets on one thread and one epoll set.
///
/// Connects are nonblocking and overlap (a bounded number in flight), so the join storm and the
/// 19,000 idle peers cost seconds, not one round trip each. Outbound frames are masked copies of
/// the caller's bytes, queued per connection and written in one `send` per wake-up; inbound frames
/// are found by a byte scan (`ServerFrameScanner`) and handed to `onText` as they complete. PING is
/// answered, Close ends the connection (and, unless `allowClose`, the run, as a failure).
///
/// Not thread-safe: one thread creates, runs and drops it.
final class LoadEngine {
    final class Connection {
        let index: Int
        let fd: Int32
        let name: String
        /// Scenario-defined: which room, pair or role this connection plays.
        var group = 0
        fileprivate var upgraded = false
        fileprivate var connected = false
        // The per-frame fields skip the run-time exclusivity check (one thread owns the engine).
        @exclusivity(unchecked) fileprivate var out: [UInt8] = []
        fileprivate var outStart = 0
        fileprivate var wantsWrite = true
        fileprivate var pending = false
        @exclusivity(unchecked) fileprivate var inBuffer: [UInt8] = []
        let mask: (UInt8, UInt8, UInt8, UInt8)
        var welcomed = false
        var closed = false
        @exclusivity(unchecked) var framesReceived = 0
        /// WebSocket PINGs the server sent this connection (each answered with a PONG at once).
        @exclusivity(unchecked) var pingsReceived = 0
        /// Scenario counters: the next counter this connection expects, what it sent, what is in flight.
        @exclusivity(unchecked) var expected = 1
        @exclusivity(unchecked) var sent = 0
        @exclusivity(unchecked) var inFlight = 0
        @exclusivity(unchecked) var received = 0

        fileprivate init(index: Int, fd: Int32, name: String) {
            self.index = index
            self.fd = fd
            self.name = name
            mask = (UInt8.random(in: 1...255), UInt8.random(in: 1...255), UInt8.random(in: 1...255), UInt8.random(in: 1...255))
        }

        var isOpen: Bool { upgraded && !closed }
    }

    enum Failure: Error, CustomStringConvertible {
        case system(String)
        case verification(String)
        case timedOut(String)

        var description: String {
            switch self {
            case .system(let text): return text
            case .verification(let text): return "verification failed: \(text)"
            case .timedOut(let text): return "timed out: \(text)"
            }
        }
    }

    private let poller: Poller
    private(set) var connections: [Connection] = []
    @exclusivity(unchecked) private var dirty: [Int] = []
    /// `dirty` swapped out while a flush works through it, so neither array is reallocated.
    @exclusivity(unchecked) private var flushing: [Int] = []
    @exclusivity(unchecked) private var scratch = [UInt8](repeating: 0, count: 1 << 16)
    private let port: Int
    /// A text frame arrived: (connection, payload, receive time in uptime ns).
    var onText: (Connection, UnsafeRawBufferPointer, UInt64) throws -> Void = { _, _, _ in }
    var allowClose = false
    /// Upgrades in flight at most (the listen backlog is finite; a storm beyond it only measures SYN retries).
    var maxConnecting = 512
    private var connecting = 0
    private var waitingToConnect: [(name: String, path: String, group: Int)] = []
    private var nextWaiting = 0

    /// System calls on the data path so far, for the generator's cost per frame (the relay reports it).
    struct SyscallCounts: Equatable {
        var sends = 0
        var receives = 0
        var waits = 0
    }
    @exclusivity(unchecked) private(set) var syscalls = SyscallCounts()

    /// Set before the first connect: every socket asks for kernel receive timestamps, and each read
    /// sets `kernelReceiveTime` (recvmsg instead of recv; a diagnostic, see the relay scenario).
    var stampsReceives = false
    /// The kernel's receive time of the last segment of the read being scanned, on the clock of
    /// `now()`, or 0: `onText` can tell how long its frame waited in the socket before it was read.
    @exclusivity(unchecked) private(set) var kernelReceiveTime: UInt64 = 0
    private var realtimeOffset: Int64 = 0

    init(port: Int) throws {
        self.port = port
        poller = try Poller()
    }

    deinit {
        for connection in connections { Glibc.close(connection.fd) }
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Queues a connection; it opens as the in-flight bound allows. Returns nothing: connections
    /// appear in `connections` in the order they were queued once started.
    func connect(name: String, path: String, group: Int) {
        waitingToConnect.append((name, path, group))
    }

    private func startWaiting() throws {
        while connecting < maxConnecting, nextWaiting < waitingToConnect.count {
            let next = waitingToConnect[nextWaiting]
            nextWaiting += 1
            try start(name: next.name, path: next.path, group: next.group)
        }
        if nextWaiting == waitingToConnect.count, nextWaiting > 0 {
            waitingToConnect.removeAll()
            nextWaiting = 0
        }
    }

    private func start(name: String, path: String, group: Int) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure.system("socket: \(String(cString: strerror(errno))) after \(connections.count) connections") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if stampsReceives { setsockopt(fd, SOL_SOCKET, Self.soTimestampNS, &one, socklen_t(MemoryLayout<Int32>.size)) }
        // Source addresses spread over 127.0.0.2–65: connect() picks ephemeral ports per source
        // address, and with one address the kernel's search for a free port grows slow well before
        // 19,000 connections (it prefers half the range for connect), which a join storm would
        // measure instead of the server. IP_BIND_ADDRESS_NO_PORT (24) defers the port to connect().
        setsockopt(fd, Int32(IPPROTO_IP), 24, &one, socklen_t(MemoryLayout<Int32>.size))
        var source = sockaddr_in()
        source.sin_family = sa_family_t(AF_INET)
        source.sin_addr.s_addr = (UInt32(0x7F00_0002) + UInt32(connections.count % 64)).bigEndian
        let bound = withUnsafePointer(to: &source) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            Glibc.close(fd)
            throw Failure.system("bind: \(String(cString: strerror(errno)))")
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 || errno == EINPROGRESS else {
            Glibc.close(fd)
            throw Failure.system("connect: \(String(cString: strerror(errno)))")
        }
        let connection = Connection(index: connections.count, fd: fd, name: name)
        connection.group = group
        let key = (0..<16).map { _ in UInt8.random(in: 0...255) }
        connection.out = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(Data(key).base64EncodedString())\r\nSec-WebSocket-Version: 13\r\n\r\n".utf8)
        connections.append(connection)
        connecting += 1
        try poller.add(fd, token: connection.index, writable: true)
    }

    // MARK: sending

    /// Queues one masked text frame carrying `payload`; it goes out at the next flush.
    func send(_ connection: Connection, _ payload: UnsafeRawBufferPointer) {
        precondition(payload.count < 65_536)
        let mask = connection.mask
        WebSocketFraming.appendHeader(.text, length: payload.count, mask: mask, to: &connection.out)
        // One bulk copy, then the mask applied in place: no per-frame allocation, no per-byte append.
        let start = connection.out.count
        connection.out.append(contentsOf: payload)
        connection.out.withUnsafeMutableBufferPointer { out in
            var index = 0
            while index + 4 <= payload.count {
                out[start + index] ^= mask.0
                out[start + index + 1] ^= mask.1
                out[start + index + 2] ^= mask.2
                out[start + index + 3] ^= mask.3
                index += 4
            }
            let keys = (mask.0, mask.1, mask.2)
            if index < payload.count { out[start + index] ^= keys.0; index += 1 }
            if index < payload.count { out[start + index] ^= keys.1; index += 1 }
            if index < payload.count { out[start + index] ^= keys.2 }
        }
        markDirty(connection)
    }

    func send(_ connection: Connection, _ payload: [UInt8]) {
        payload.withUnsafeBytes { send(connection, $0) }
    }

    private func sendControl(_ connection: Connection, opcode: WebSocketFraming.Opcode, payload: [UInt8]) {
        let mask = connection.mask
        WebSocketFraming.appendHeader(opcode, length: payload.count, mask: mask, to: &connection.out)
        let keys = [mask.0, mask.1, mask.2, mask.3]
        for (index, byte) in payload.enumerated() { connection.out.append(byte ^ keys[index & 3]) }
        markDirty(connection)
    }

    private func markDirty(_ connection: Connection) {
        if !connection.pending {
            connection.pending = true
            dirty.append(connection.index)
        }
    }

    /// Writes what every connection has queued, as far as the sockets take it.
    func flush() throws {
        guard !dirty.isEmpty else { return }
        swap(&dirty, &flushing)
        defer { flushing.removeAll(keepingCapacity: true) }
        for index in flushing {
            let connection = connections[index]
            connection.pending = false
            try flush(connection)
        }
    }

    private func flush(_ connection: Connection) throws {
        guard connection.connected, !connection.closed, connection.outStart < connection.out.count else { return }
        syscalls.sends += 1
        let written = connection.out.withUnsafeBytes { bytes in
            Glibc.send(connection.fd, bytes.baseAddress! + connection.outStart, bytes.count - connection.outStart, Int32(MSG_NOSIGNAL))
        }
        if written < 0 {
            guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else {
                throw Failure.system("send on \(connection.name): \(String(cString: strerror(errno)))")
            }
        } else {
            connection.outStart += written
        }
        let done = connection.outStart == connection.out.count
        if done {
            connection.out.removeAll(keepingCapacity: true)
            connection.outStart = 0
        }
        if done == connection.wantsWrite {
            connection.wantsWrite = !done
            try poller.modify(connection.fd, token: connection.index, writable: !done)
        }
    }

    /// Sends Close to every open connection and closes the sockets.
    func closeAll() {
        for connection in connections where connection.isOpen {
            sendControl(connection, opcode: .close, payload: [0x03, 0xE8])
        }
        try? flush()
        for connection in connections where !connection.closed {
            connection.closed = true
            poller.remove(connection.fd)
            shutdown(connection.fd, Int32(SHUT_WR))
        }
    }

    // MARK: the loop

    /// One wait and everything it reports; then flushes. Returns the receive time.
    @discardableResult
    func step(timeoutNanoseconds: UInt64) throws -> UInt64 {
        try startWaiting()
        try flush()
        syscalls.waits += 1
        let count = try poller.wait(timeoutNanoseconds: timeoutNanoseconds)
        let time = Self.now()
        if stampsReceives, count > 0 { realtimeOffset = Self.realtimeMinusMonotonic() }
        for slot in 0..<count {
            let connection = connections[Int(poller.tokens[slot])]
            let events = poller.events[slot]
            if !connection.connected, events != 0 {
                var error: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(connection.fd, SOL_SOCKET, SO_ERROR, &error, &length)
                guard error == 0 else { throw Failure.system("connect \(connection.name): \(String(cString: strerror(error)))") }
                connection.connected = true
            }
            if events & 2 != 0 { try flush(connection) }
            if events & 1 != 0 { try receive(connection, at: time) }
        }
        try flush()
        return time
    }

    /// Runs the loop until `condition` holds; throws past `seconds`.
    func run(seconds: Double, _ what: String, until condition: () -> Bool) throws {
        let deadline = Self.now() + UInt64(seconds * 1e9)
        while !condition() {
            guard Self.now() < deadline else { throw Failure.timedOut(what) }
            try step(timeoutNanoseconds: 50_000_000)
            Progress.tick(what)
        }
    }

    private func receive(_ connection: Connection, at time: UInt64) throws {
        guard !connection.closed else { return }
        while true {
            syscalls.receives += 1
            let n: Int
            if stampsReceives {
                let (read, stamp) = scratch.withUnsafeMutableBytes { Self.receiveStamped(connection.fd, $0) }
                n = read
                kernelReceiveTime = stamp > realtimeOffset ? UInt64(stamp - realtimeOffset) : 0
            } else {
                n = scratch.withUnsafeMutableBytes { Glibc.recv(connection.fd, $0.baseAddress, $0.count, 0) }
            }
            if n == 0 {
                return try ended(connection, "the server closed the TCP connection")
            }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { break }
                return try ended(connection, "recv: \(String(cString: strerror(errno)))")
            }
            if connection.upgraded, connection.inBuffer.isEmpty {
                // The common case: frames straight from the receive buffer, only a partial tail kept.
                let consumed = try scratch.withUnsafeBytes { try scanFrames(connection, UnsafeRawBufferPointer(rebasing: $0[0..<n]), at: time) }
                if connection.closed { return }
                if consumed < n { connection.inBuffer.append(contentsOf: scratch[consumed..<n]) }
            } else {
                connection.inBuffer.append(contentsOf: scratch[0..<n])
                if connection.upgraded { try scan(connection, at: time) }
            }
            if n < scratch.count { break }
        }
        if connection.upgraded || connection.closed { return }
        if !connection.upgraded {
            guard let end = Self.headEnd(connection.inBuffer) else {
                guard connection.inBuffer.count < 65_536 else { throw Failure.system("\(connection.name): response head too large") }
                return
            }
            let head = String(decoding: connection.inBuffer[..<end], as: UTF8.self)
            guard head.hasPrefix("HTTP/1.1 101") else {
                throw Failure.system("\(connection.name): upgrade refused: \(head.prefix(200))")
            }
            connection.inBuffer.removeFirst(end + 4)
            connection.upgraded = true
            connecting -= 1
        }
        try scan(connection, at: time)
    }

    private func ended(_ connection: Connection, _ why: String) throws {
        connection.closed = true
        poller.remove(connection.fd)
        if !connection.upgraded { connecting -= 1 }
        guard allowClose else { throw Failure.verification("\(connection.name): \(why)") }
    }

    private func scan(_ connection: Connection, at time: UInt64) throws {
        let consumed = try connection.inBuffer.withUnsafeBytes { try scanFrames(connection, $0, at: time) }
        if !connection.closed { connection.inBuffer.removeFirst(consumed) }
    }

    /// Handles every complete frame in `buffer`; returns the bytes consumed.
    private func scanFrames(_ connection: Connection, _ buffer: UnsafeRawBufferPointer, at time: UInt64) throws -> Int {
        var consumed = 0
        var pings: [[UInt8]] = []
        var closing = false
        do {  // (scope only)
            while let frame = ServerFrameScanner.frame(in: buffer, at: consumed) {
                consumed = frame.end
                connection.framesReceived += 1
                switch frame.opcode {
                case 0x1:
                    guard frame.final else { throw Failure.verification("\(connection.name): fragmented server frame") }
                    try onText(connection, UnsafeRawBufferPointer(rebasing: buffer[frame.payload]), time)
                case 0x8:
                    closing = true
                    let code = frame.payload.count >= 2 ? Int(buffer[frame.payload.lowerBound]) << 8 | Int(buffer[frame.payload.lowerBound + 1]) : 0
                    if !allowClose { throw Failure.verification("\(connection.name): server sent Close \(code)") }
                case 0x9:
                    connection.pingsReceived += 1
                    pings.append(Array(buffer[frame.payload]))
                default:
                    break
                }
            }
        }
        for payload in pings { sendControl(connection, opcode: .pong, payload: payload) }
        if closing { try ended(connection, "server sent Close") }
        return consumed
    }

    // MARK: kernel receive stamps

    /// SO_TIMESTAMPNS (asm-generic/socket.h, x86-64 and arm64: 35); Glibc's module does not export it.
    static let soTimestampNS: Int32 = 35

    /// recv(2) as recvmsg(2), with the kernel's receive time (CLOCK_REALTIME ns) of the last segment
    /// read from the SCM_TIMESTAMPNS control message, or 0 when there is none.
    static func receiveStamped(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> (Int, Int64) {
        // One cmsghdr (length 8, level 4, type 4) and its timespec: 16 + 16 bytes (CMSG_SPACE).
        var control = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        return withUnsafeMutableBytes(of: &control) { control in
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vector in
                var message = msghdr()
                message.msg_iov = vector
                message.msg_iovlen = 1
                message.msg_control = control.baseAddress
                message.msg_controllen = control.count
                let n = recvmsg(fd, &message, 0)
                guard n > 0, message.msg_controllen >= 32 else { return (n, 0) }
                // CMSG_FIRSTHDR only: the one option asked for gives at most one message.
                let level = control.load(fromByteOffset: 8, as: Int32.self)
                let type = control.load(fromByteOffset: 12, as: Int32.self)
                guard level == SOL_SOCKET, type == soTimestampNS else { return (n, 0) }
                let seconds = control.load(fromByteOffset: 16, as: Int64.self)
                let nanoseconds = control.load(fromByteOffset: 24, as: Int64.self)
                return (n, seconds * 1_000_000_000 + nanoseconds)
            }
        }
    }

    /// CLOCK_REALTIME − CLOCK_MONOTONIC (the clock of `now()`), in ns.
    static func realtimeMinusMonotonic() -> Int64 {
        var monotonic = timespec()
        var realtime = timespec()
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        clock_gettime(CLOCK_REALTIME, &realtime)
        return (Int64(realtime.tv_sec) - Int64(monotonic.tv_sec)) * 1_000_000_000 + Int64(realtime.tv_nsec - monotonic.tv_nsec)
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4) where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }
}

// MARK: byte helpers shared by the scenarios

enum Bytes {
    /// Index of the first occurrence of `needle` in `haystack` at or after `from`.
    static func find(_ needle: [UInt8], in haystack: UnsafeRawBufferPointer, from: Int = 0) -> Int? {
        guard haystack.count >= needle.count, let first = needle.first else { return nil }
        var index = from
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first {
                var match = true
                for offset in 1..<needle.count where haystack[index + offset] != needle[offset] {
                    match = false
                    break
                }
                if match { return index }
            }
            index += 1
        }
        return nil
    }

    static func hasSuffix(_ text: UnsafeRawBufferPointer, _ suffix: [UInt8]) -> Bool {
        guard text.count >= suffix.count else { return false }
        let start = text.count - suffix.count
        for index in 0..<suffix.count where text[start + index] != suffix[index] { return false }
        return true
    }

    /// The ten decimal digits right after `marker`, or nil.
    static func counter(after marker: [UInt8], in text: UnsafeRawBufferPointer) -> Int? {
        guard let at = find(marker, in: text), at + marker.count + 10 <= text.count else { return nil }
        var value = 0
        for index in (at + marker.count)..<(at + marker.count + 10) {
            let digit = Int(text[index]) - 48
            guard (0...9).contains(digit) else { return nil }
            value = value * 10 + digit
        }
        return value
    }

    /// Writes `value` as ten digits at `offset`.
    static func patch(_ value: Int, into bytes: inout [UInt8], at offset: Int) {
        var rest = value
        for index in stride(from: offset + 9, through: offset, by: -1) {
            bytes[index] = 48 + UInt8(rest % 10)
            rest /= 10
        }
    }

    static func string(_ text: UnsafeRawBufferPointer) -> String { String(decoding: text.prefix(300), as: UTF8.self) }
}
