import Foundation
import Glibc

/// A bare client WebSocket on a nonblocking POSIX socket, for `calling-server bench chat`'s load
/// generator. The lws client costs as much CPU per message as the server does, and on a two-core
/// machine that halves what a benchmark can show of the server; this costs a few syscalls per batch.
///
/// It does only what a load generator needs: a blocking connect and upgrade handshake, then
/// nonblocking reads and writes of bytes the caller frames itself (CallingProtocol's `WebSocketFraming`,
/// `ServerFrameScanner`); the caller waits for readiness on an epoll set (`Poller`). The `Sec-WebSocket-Accept` answer is not checked (a 101 is enough here).
///
/// Not thread-safe: one thread owns the socket, as the generator's single loop does.
public final class RawClientSocket {
    public enum Failure: Error, CustomStringConvertible {
        case system(String, errno: Int32)
        case handshake(String)
        case closed

        public var description: String {
            switch self {
            case .system(let call, let code): return "\(call): \(String(cString: strerror(code)))"
            case .handshake(let detail): return "upgrade refused: \(detail)"
            case .closed: return "the server closed the connection"
            }
        }
    }

    public let fd: Int32
    /// Bytes that arrived with the 101 response (the server's first frames).
    public private(set) var leftover: [UInt8] = []

    /// Connects to `host:port` (IPv4 literal), upgrades `path`, and switches to nonblocking mode.
    /// Connecting and each send or receive of the handshake give up after `handshakeTimeoutMs`, so a
    /// server that accepts but never answers cannot hang the benchmark.
    public init(ipv4 host: String, port: Int, path: String, handshakeTimeoutMs: Int = 10_000) throws(Failure) {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .system("socket", errno: errno) }
        do throws(Failure) {
            var timeout = timeval(tv_sec: handshakeTimeoutMs / 1_000, tv_usec: handshakeTimeoutMs % 1_000 * 1_000)
            for option in [SO_RCVTIMEO, SO_SNDTIMEO] {
                guard setsockopt(fd, SOL_SOCKET, option, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
                    throw Failure.system("setsockopt", errno: errno)
                }
            }
            try connectAndUpgrade(host: host, port: port, path: path)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    deinit { Glibc.close(fd) }

    private func connectAndUpgrade(host: String, port: Int, path: String) throws(Failure) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw .handshake("not an IPv4 address: \(host)") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw .system("connect", errno: errno) }
        // Small frames must not wait for Nagle; batching is the caller's job.
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))

        let key: [UInt8] = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let request = "GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: \(Data(key).base64EncodedString())\r\nSec-WebSocket-Version: 13\r\n\r\n"
        var bytes = Array(request.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw .system("send", errno: errno) }
            sent += n
        }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let terminator: [UInt8] = [13, 10, 13, 10]
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else {
                if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { throw .handshake("no response in time") }
                throw n == 0 ? .closed : .system("recv", errno: errno)
            }
            response += chunk[0..<n]
            if let end = Self.firstIndex(of: terminator, in: response) {
                let head = String(decoding: response[..<end], as: UTF8.self)
                guard head.hasPrefix("HTTP/1.1 101") else { throw .handshake(String(head.prefix(200))) }
                leftover = Array(response[(end + 4)...])
                break
            }
            guard response.count < 65_536 else { throw .handshake("response head too large") }
        }
        let flags = fcntl(fd, F_GETFL)
        guard fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw .system("fcntl", errno: errno) }
    }

    /// Writes what the socket takes now: the byte count, 0 when it would block.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> Int {
        let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
        if n >= 0 { return n }
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return 0 }
        throw .system("send", errno: errno)
    }

    /// Reads what is there now into `buffer`: the byte count, 0 when nothing is waiting.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
        let n = Glibc.recv(fd, buffer.baseAddress, buffer.count, 0)
        if n > 0 { return n }
        if n == 0 { throw .closed }
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return 0 }
        throw .system("recv", errno: errno)
    }

    private static func firstIndex(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }
}

/// Finds complete server frames (unmasked, RFC 6455 §5.2) in a receive buffer.
public enum ServerFrameScanner {
    public struct Frame: Equatable {
        public var opcode: UInt8
        public var final: Bool
        public var payload: Range<Int>
        /// Index just past the frame.
        public var end: Int
    }

    /// The frame starting at `start` in `buffer`, or nil when it has not fully arrived.
    public static func frame(in buffer: UnsafeRawBufferPointer, at start: Int) -> Frame? {
        guard buffer.count - start >= 2 else { return nil }
        let first = buffer[start]
        let second = buffer[start + 1]
        var offset = start + 2
        var length = Int(second & 0x7F)
        if length == 126 {
            guard buffer.count - offset >= 2 else { return nil }
            length = Int(buffer[offset]) << 8 | Int(buffer[offset + 1])
            offset += 2
        } else if length == 127 {
            guard buffer.count - offset >= 8 else { return nil }
            length = 0
            for index in 0..<8 { length = length << 8 | Int(buffer[offset + index]) }
            offset += 8
        }
        if second & 0x80 != 0 { offset += 4 }  // servers do not mask; tolerated, not unmasked
        guard buffer.count - offset >= length else { return nil }
        return Frame(opcode: first & 0x0F, final: first & 0x80 != 0, payload: offset..<(offset + length), end: offset + length)
    }
}
