#ifndef CS_HIREDIS_SHIM_H
#define CS_HIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#include <poll.h>

/// The reply type constants are macros; Swift imports them, but naming them here keeps the adapter
/// independent of how a hiredis version spells them.
static inline int cs_redis_reply_string(void) { return REDIS_REPLY_STRING; }
static inline int cs_redis_reply_array(void) { return REDIS_REPLY_ARRAY; }
static inline int cs_redis_reply_integer(void) { return REDIS_REPLY_INTEGER; }
static inline int cs_redis_reply_nil(void) { return REDIS_REPLY_NIL; }
static inline int cs_redis_reply_status(void) { return REDIS_REPLY_STATUS; }
static inline int cs_redis_reply_error(void) { return REDIS_REPLY_ERROR; }

/// Waits up to `timeout_ms` for `fd` to become readable (or to report an error or hang-up).
/// Returns 1 when readable, 0 on timeout, -1 on a poll failure (EINTR included).
static inline int cs_redis_wait_readable(int fd, int extra_fd, int timeout_ms, int *extra_ready) {
    struct pollfd fds[2];
    fds[0].fd = fd; fds[0].events = POLLIN; fds[0].revents = 0;
    fds[1].fd = extra_fd; fds[1].events = POLLIN; fds[1].revents = 0;
    int n = poll(fds, extra_fd >= 0 ? 2 : 1, timeout_ms);
    *extra_ready = (extra_fd >= 0 && (fds[1].revents & POLLIN)) ? 1 : 0;
    if (n < 0) return -1;
    return (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) ? 1 : 0;
}
#endif
