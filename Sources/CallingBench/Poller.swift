import CEpoll
import Glibc

/// epoll for the load generators: no descriptor ceiling (select() stops at FD_SETSIZE, 1024) and a
/// cost per wake-up that does not grow with the number of idle connections. Timeouts are in
/// nanoseconds (epoll_pwait2), since a paced generator needs sub-millisecond waits.
///
/// Not thread-safe: owned by the generator's one thread.
final class Poller {
    let fd: Int32
    private(set) var tokens = [UInt64](repeating: 0, count: 1024)
    private(set) var events = [UInt32](repeating: 0, count: 1024)

    init() throws(RawClientSocket.Failure) {
        fd = cs_epoll_create()
        guard fd >= 0 else { throw .system("epoll_create1", errno: errno) }
    }

    deinit { close(fd) }

    func add(_ socket: Int32, token: Int, writable: Bool) throws(RawClientSocket.Failure) {
        guard cs_epoll_ctl(fd, 1, socket, 1, writable ? 1 : 0, UInt64(token)) == 0 else { throw .system("epoll_ctl", errno: errno) }
    }

    func modify(_ socket: Int32, token: Int, writable: Bool) throws(RawClientSocket.Failure) {
        guard cs_epoll_ctl(fd, 3, socket, 1, writable ? 1 : 0, UInt64(token)) == 0 else { throw .system("epoll_ctl", errno: errno) }
    }

    func remove(_ socket: Int32) {
        _ = cs_epoll_ctl(fd, 2, socket, 0, 0, 0)
    }

    /// Waits; returns how many entries of `tokens`/`events` are filled (bit 0 readable, bit 1 writable).
    func wait(timeoutNanoseconds: UInt64) throws(RawClientSocket.Failure) -> Int {
        let n = tokens.withUnsafeMutableBufferPointer { tokens in
            events.withUnsafeMutableBufferPointer { events in
                cs_epoll_wait(fd, tokens.baseAddress, events.baseAddress, Int32(tokens.count), Int64(min(timeoutNanoseconds, 10_000_000_000)))
            }
        }
        if n < 0 {
            guard errno == EINTR else { throw .system("epoll_pwait2", errno: errno) }
            return 0
        }
        return Int(n)
    }

    /// Sets the calling thread's timer slack; false when the kernel refuses. With the default 50 µs
    /// a timed wait may end up to 50 µs late, and a paced generator sends late by as much.
    static func setTimerSlack(nanoseconds: UInt) -> Bool { cs_set_timer_slack(nanoseconds) == 0 }

    /// Pins the calling thread to `cpu`; false when the machine or the cgroup does not allow it.
    static func pinCurrentThread(to cpu: Int) -> Bool { cs_pin_current_thread(Int32(cpu)) == 0 }
}
