#ifndef CS_EPOLL_SHIM_H
#define CS_EPOLL_SHIM_H
/* Linux epoll and CPU affinity for the benchmark's load generators (CallingBench). Glibc's Swift
 * module exports neither; struct epoll_event is packed on x86-64, so Swift only sees plain arrays. */
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <time.h>

/* Declared by glibc only under _GNU_SOURCE, which must not be defined here: it would change the
 * shared system headers' definitions against the Glibc module's. */
extern int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents, const struct timespec *timeout,
                        const sigset_t *sigmask);
extern int sched_setaffinity(int pid, size_t cpusetsize, const void *mask);

static inline int cs_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

/// Adds (op 1), modifies (op 3) or removes (op 2) `fd`; `token` comes back with its events.
static inline int cs_epoll_ctl(int ep, int op, int fd, int readable, int writable, uint64_t token) {
    struct epoll_event ev;
    ev.events = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0) | EPOLLRDHUP;
    ev.data.u64 = token;
    return epoll_ctl(ep, op == 1 ? EPOLL_CTL_ADD : op == 2 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD, fd, &ev);
}

/// Waits up to `timeout_ns` (epoll_pwait2: nanosecond timeouts, for paced load); fills `tokens`
/// and `events` (bit 0 readable or hung up, bit 1 writable). Returns the count, or -1 (errno).
static inline int cs_epoll_wait(int ep, uint64_t *tokens, uint32_t *events, int max, int64_t timeout_ns) {
    struct epoll_event ready[1024];
    if (max > 1024) max = 1024;
    struct timespec ts = { (time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000) };
    int n = epoll_pwait2(ep, ready, max, &ts, NULL);
    for (int i = 0; i < n; i++) {
        tokens[i] = ready[i].data.u64;
        uint32_t e = ready[i].events;
        events[i] = ((e & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) ? 1u : 0u) | ((e & EPOLLOUT) ? 2u : 0u);
    }
    return n;
}

/// The calling thread's timer slack (prctl PR_SET_TIMERSLACK; 0 on success). The default, 50 µs,
/// lets every timed epoll wait end up to 50 µs late, which a paced generator would add to every
/// frame it sends after the wait.
static inline int cs_set_timer_slack(unsigned long ns) { return prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0); }

/// Pins the calling thread to one CPU (0 on success).
static inline int cs_pin_current_thread(int cpu) {
    uint64_t set[16] = {0}; /* a cpu_set_t: 1024 bits */
    if (cpu < 0 || cpu >= 1024) return -1;
    set[cpu / 64] = (uint64_t)1 << (cpu % 64);
    return sched_setaffinity(0, sizeof(set), set);
}
#endif
