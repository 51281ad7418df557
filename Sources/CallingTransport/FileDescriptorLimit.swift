import Glibc

/// Each peer costs one file descriptor, so the open-file limit is the peer capacity.
enum FileDescriptorLimit {
    /// Raises the soft RLIMIT_NOFILE to the hard limit and returns the resulting soft limit.
    static func raiseToHard() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur == rlim_t.max ? 1 << 20 : Int(limit.rlim_cur)
    }
}
