import Dispatch
import Glibc
import XCTest

@testable import CallingBench

final class RawClientSocketTests: XCTestCase {
    /// A listening socket on 127.0.0.1 that completes TCP connects (through its backlog) but never
    /// accepts, so nobody ever answers the upgrade request.
    private func silentListener() throws -> (fd: Int32, port: Int) {
        guard let (fd, address) = loopbackListener(backlog: 4) else {
            throw RawClientSocket.Failure.system("listen", errno: errno)
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    func test_a_server_that_never_answers_the_upgrade_fails_the_handshake_instead_of_hanging() throws {
        let listener = try silentListener()
        let outcome = LockedBox<String>()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            do {
                _ = try RawClientSocket(ipv4: "127.0.0.1", port: listener.port, path: "/v1/ws", handshakeTimeoutMs: 200)
                outcome.set("connected")
            } catch {
                outcome.set("\(error)")
            }
            done.signal()
        }
        let finished = done.wait(timeout: .now() + 10)
        close(listener.fd)  // resets the pending connection, so a hung handshake ends too
        XCTAssertEqual(finished, .success, "the handshake gave up by itself")
        if finished != .success { _ = done.wait(timeout: .now() + 10) }
        XCTAssertEqual(outcome.value, "upgrade refused: no response in time")
    }
}

/// One value written by another thread.
private final class LockedBox<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched while `lock` is held.
    private let lock = NSLock()
    private var stored: Value?

    func set(_ value: Value) {
        lock.lock()
        stored = value
        lock.unlock()
    }

    var value: Value? {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }
}
