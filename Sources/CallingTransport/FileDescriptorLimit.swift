import Glibc

/// Each socket costs one file descriptor, so the open-file limit bounds the socket budget.
enum FileDescriptorLimit {
    /// Sets the soft RLIMIT_NOFILE to the hard limit, or to `ceiling` where that is lower (lowering
    /// a soft limit already above it), and returns the soft limit in force: the old one if
    /// `setrlimit` refused, nil if the limit cannot be read.
    ///
    /// The ceiling goes into the limit itself rather than only into the socket budget: lws keeps its
    /// descriptor lookup table direct-indexed only while `fd_limit_per_thread` is at least the
    /// process's limit, and scans the table on every socket event otherwise (docs/benchmarks.md,
    /// "lws `fd_limit_per_thread` = the whole open-file limit").
    static func set(ceiling: Int?) -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        var wanted = limit.rlim_max
        if let ceiling, ceiling > 0, rlim_t(ceiling) < wanted { wanted = rlim_t(ceiling) }
        if limit.rlim_cur != wanted {
            var changed = limit
            changed.rlim_cur = wanted
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &changed) == 0 { limit = changed }
        }
        return limit.rlim_cur == rlim_t.max ? 1 << 20 : Int(limit.rlim_cur)
    }
}
