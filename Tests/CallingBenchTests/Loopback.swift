import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A listening TCP socket on 127.0.0.1 at a port the kernel picks, with room for `backlog`
/// connections it has not accepted: its descriptor and address (the port in `sin_port`), or nil
/// with `errno` set. Shared by the tests that need a real peer on loopback.
func loopbackListener(backlog: Int32) -> (fd: Int32, address: sockaddr_in)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound else {
        let saved = errno
        close(fd)
        errno = saved
        return nil
    }
    return (fd, address)
}
