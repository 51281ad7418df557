import CallingAuth
import CallingCore
import CallingProtocol
import CallingServer
import CallingTransport
import Foundation

// Fuzz targets for the parsers that see hostile bytes (docs/operations.md, "Fuzzing").
//
//   calling-fuzz <target> [libFuzzer flags] [corpus dirs]   fuzz, when linked with libFuzzer
//   calling-fuzz <target> --replay <files or dirs>...       run inputs once (any build)
//
// Built normally it can only replay (what `make test-fuzz` uses on the seed corpora and past
// crashes). `make fuzz` builds it with coverage, ASan and clang's libFuzzer (`fuzzer_no_main`,
// found at run time through dlsym so the normal build links without it).
//
// Targets: frame (client and presence frame decoding), json (parser and writer), http (raw
// requests against a real server on 127.0.0.1), sdp (SDPText munging), jwt (token verification).

typealias FuzzOne = ([UInt8]) -> Void

enum Targets {
    static let limits = FrameLimits()

    static func frame(_ bytes: [UInt8]) {
        // The decoder's fast path (FrameScanner) must answer exactly as the tree path does: the
        // same message, or the same error (code, message, echoed type).
        let fast = Result { () throws(FrameError) in try ClientFrameDecoder.decode(bytes, limits: limits) }
        let tree = Result { () throws(FrameError) in try ClientFrameDecoder.decode(FrameEnvelope.parse(bytes), limits: limits) }
        if fast != tree {
            fatalError("client frame decoded \(fast) but the tree path gives \(tree): \(bytes)")
        }
        // The frame lent as the transport lends it reads as the array does.
        let array = Result { () throws(FrameError) in try ClientFrameDecoder.decodeFrame(bytes, limits: limits) }
        let lent = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(FrameError) in try ClientFrameDecoder.decodeFrame(lent: buffer, limits: limits) }
        }
        if lent != array {
            fatalError("client frame lent decoded \(lent) but as an array \(array): \(bytes)")
        }
        // A relay left in the frame lends the same `to` and payload bytes the message holds.
        if case .relay(let relay)? = try? ClientFrameDecoder.decodeFrame(bytes, limits: limits),
           case .relay(_, let to?, let payload)? = try? fast.get() {
            relay.withParts(in: bytes) { parts in
                guard Array(parts.to) == Array(to.rawValue.utf8), parts.payload.map(Array.init) == payload.map({ Array($0.bytes) }) else {
                    fatalError("relay parts \(Array(parts.to)) differ from the decoded relay to \(to): \(bytes)")
                }
            }
        }
        _ = try? PresenceFrameDecoder.decode(bytes)
    }

    static func json(_ bytes: [UInt8]) {
        guard let value = try? JSONParser.parse(bytes) else { return }
        // What the writer produces must parse, and writing it again must give the same bytes.
        let written = JSONWriter.bytes(value)
        guard let again = try? JSONParser.parse(written) else {
            fatalError("JSONWriter output does not parse: \(String(decoding: written, as: UTF8.self))")
        }
        guard JSONWriter.bytes(again) == written else {
            fatalError("JSONWriter is not stable: \(String(decoding: written, as: UTF8.self))")
        }
    }

    static func sdp(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = SDPText.lines(text)
        let mids = SDPText.mids(text)
        if let credentials = SDPText.iceCredentials(text) {
            let replaced = SDPText.replacingICECredentials(text, ufrag: "fuzzufrag", pwd: "fuzzpasswordfuzzpassword")
            guard let after = SDPText.iceCredentials(replaced), after.ufrag == "fuzzufrag" else {
                fatalError("ICE credentials \(credentials) not replaced in \(text.debugDescription)")
            }
        }
        _ = SDPText.Fragment.parse(text, mids: mids)
        _ = SDPText.restartFragment(fromAnswer: text)
    }

    static let verifier = try! TokenVerifier(hs256Secret: Array("calling-fuzz-secret-of-at-least-32-bytes".utf8))

    static func jwt(_ bytes: [UInt8]) {
        _ = try? verifier.verify(String(decoding: bytes, as: UTF8.self), now: Date(timeIntervalSince1970: 1_800_000_000))
        _ = HTTPFraming.contentLength(String(decoding: bytes.prefix(64), as: UTF8.self))
    }
}

/// One real server for the whole run; every input is sent as raw bytes on a fresh connection.
final class HTTPTarget: @unchecked Sendable {
    let app: ServerApp
    let directory: String

    init() {
        directory = NSTemporaryDirectory() + "calling-fuzz-\(getpid())"
        var config = ServerConfig()
        config.host = "127.0.0.1"
        config.port = 0
        config.dataDir = directory
        config.jwtSecret = "calling-fuzz-secret-of-at-least-32-bytes"
        config.sessionAnswerTimeoutMs = 100
        config.httpTimeoutSeconds = 1
        config.logLevel = .critical
        do {
            app = try ServerApp(config: config, logger: Logger(label: "fuzz", level: .critical),
                                onStall: { seconds in fatalError("service loop stalled for \(seconds) s") })
            try app.start()
        } catch {
            fatalError("cannot start the server: \(error)")
        }
    }

    func run(_ bytes: [UInt8]) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(app.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        guard let fd = Self.connected(to: address, receiveTimeoutMs: 300) else { return }
        defer { close(fd) }
        bytes.withUnsafeBytes { Self.sendAll(fd, $0) }
        shutdown(fd, Int32(SHUT_WR))
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while Self.receive(fd, &buffer) > 0 {}
        // The server must still answer after whatever that was.
        let probe = Array("GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n".utf8)
        guard let check = Self.connected(to: address, receiveTimeoutMs: 5_000) else {
            fatalError("cannot connect for /healthz after the input: errno \(errno)")
        }
        defer { close(check) }
        probe.withUnsafeBytes { Self.sendAll(check, $0) }
        let got = Self.receive(check, &buffer)
        guard got > 12, String(decoding: buffer[0..<12], as: UTF8.self) == "HTTP/1.1 200" else {
            let answer = got > 0 ? String(decoding: buffer[0..<min(got, 200)], as: UTF8.self) : "errno \(errno)"
            fatalError("/healthz did not answer 200 after the input: \(answer.debugDescription)")
        }
    }

    // libFuzzer's -timeout runs on SIGALRM, installed without SA_RESTART, so any of these calls can
    // fail with EINTR mid-input; that is the harness being interrupted, not the server failing.

    static func connected(to address: sockaddr_in, receiveTimeoutMs: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var timeout = timeval(tv_sec: receiveTimeoutMs / 1000, tv_usec: Int((receiveTimeoutMs % 1000) * 1000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var target = address
        let result = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        // An interrupted connect goes on in the background; wait until the socket is writable.
        if result != 0, errno == EINTR || errno == EINPROGRESS {
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            while poll(&poller, 1, Int32(receiveTimeoutMs)) < 0, errno == EINTR {}
            if getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error == 0, poller.revents & Int16(POLLOUT) != 0 {
                return fd
            }
        }
        guard result == 0 else { close(fd); return nil }
        return fd
    }

    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count {
            let sent = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if sent > 0 { offset += sent } else if sent < 0, errno == EINTR { continue } else { return }
        }
    }

    static func receive(_ fd: Int32, _ buffer: inout [UInt8]) -> Int {
        while true {
            let got = recv(fd, &buffer, buffer.count, 0)
            if got < 0, errno == EINTR { continue }
            return got
        }
    }
}

func target(named name: String) -> FuzzOne? {
    switch name {
    case "frame": return Targets.frame
    case "json": return Targets.json
    case "sdp": return Targets.sdp
    case "jwt": return Targets.jwt
    case "http":
        let http = HTTPTarget()
        return http.run
    default: return nil
    }
}

func inputs(_ paths: [String]) -> [String] {
    var files: [String] = []
    for path in paths {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
        if isDirectory.boolValue {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            files += names.sorted().filter { !$0.hasPrefix(".") && $0 != "expected.json" && !$0.hasSuffix(".md") }
                .map { (path as NSString).appendingPathComponent($0) }
        } else {
            files.append(path)
        }
    }
    return files
}

nonisolated(unsafe) var fuzzOne: FuzzOne = { _ in }

typealias RunDriver = @convention(c) (UnsafeMutablePointer<Int32>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                                      @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32

let arguments = CommandLine.arguments
guard arguments.count >= 2, let one = target(named: arguments[1]) else {
    FileHandle.standardError.write(Data("usage: calling-fuzz frame|json|http|sdp|jwt [--replay paths... | libFuzzer flags]\n".utf8))
    exit(2)
}
fuzzOne = one

if arguments.count >= 3, arguments[2] == "--replay" {
    let files = inputs(Array(arguments.dropFirst(3)))
    for file in files {
        guard let data = FileManager.default.contents(atPath: file) else { continue }
        fuzzOne(Array(data))
    }
    print("calling-fuzz \(arguments[1]): replayed \(files.count) inputs")
    exit(0)
}

guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "LLVMFuzzerRunDriver") else {
    FileHandle.standardError.write(Data("this build has no libFuzzer; build with `make fuzz`, or use --replay\n".utf8))
    exit(2)
}
let driver = unsafeBitCast(symbol, to: RunDriver.self)
// libFuzzer parses argv itself: drop the target name.
var argv: [UnsafeMutablePointer<CChar>?] = ([arguments[0]] + arguments.dropFirst(2)).map { strdup($0) } + [nil]
var argc = Int32(argv.count - 1)
let status = argv.withUnsafeMutableBufferPointer { buffer -> Int32 in
    var base = buffer.baseAddress
    return driver(&argc, &base) { data, size in
        fuzzOne(size > 0 && data != nil ? Array(UnsafeBufferPointer(start: data, count: size)) : [])
        return 0
    }
}
exit(status)
