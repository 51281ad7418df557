#ifndef CS_LWS_SHIM_H
#define CS_LWS_SHIM_H
#include <libwebsockets.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Only what Swift cannot import: function-like macros and 64-bit option flags. */

/// Headroom lws needs in front of every buffer passed to lws_write (LWS_PRE is a macro).
static inline size_t cs_lws_pre(void) { return LWS_PRE; }

static inline uint64_t cs_lws_option_libev(void) { return LWS_SERVER_OPTION_LIBEV; }
static inline uint64_t cs_lws_option_disable_ipv6(void) { return LWS_SERVER_OPTION_DISABLE_IPV6; }
/// Makes the h1 parser hand a request with an unknown method to the listen-accept role (raw socket,
/// our protocol's RAW_* callbacks) instead of answering lws's own 403: we answer 501 there.
static inline uint64_t cs_lws_option_fallback_to_raw(void) {
    return LWS_SERVER_OPTION_FALLBACK_TO_APPLY_LISTEN_ACCEPT_CONFIG;
}
static inline uint64_t cs_lws_option_do_ssl_global_init(void) { return LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT; }
static inline uint64_t cs_lws_option_disable_os_ca_certs(void) { return LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS; }
static inline uint64_t cs_lws_option_explicit_vhosts(void) { return LWS_SERVER_OPTION_EXPLICIT_VHOSTS; }

/* TLS knobs lws takes as raw OpenSSL values (ssl_options_set, lws_ssl_info.where). The constants are
 * macros of the <openssl/ssl.h> that libwebsockets.h includes. The one OpenSSL object lws hands out
 * is the X509_STORE_CTX of LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION; the two functions
 * below read its verdict (which is why the module map also links libcrypto). */

/// Server SSL_CTX options: no SSLv3/TLS 1.0/1.1 (1.2 too when `tls13_only`), no TLS compression
/// (CRIME), no renegotiation.
static inline long cs_lws_tls_server_options(int tls13_only) {
    uint64_t options = SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION;
    if (tls13_only) options |= SSL_OP_NO_TLSv1_2;
    return (long)options;
}
/// Client SSL_CTX options: TLS 1.2 or newer, no compression.
static inline long cs_lws_tls_client_options(void) {
    return (long)(SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_COMPRESSION);
}
/// The X509_V_ERR_* of the check that failed, from the `user` of
/// LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION (lws documents it as the X509_STORE_CTX).
/// lws's own failure text names no cause, so this is the only way to tell a wrong host from an
/// untrusted issuer or an expired certificate.
static inline int cs_lws_x509_verify_error(void * _Nonnull x509_ctx) {
    return X509_STORE_CTX_get_error((X509_STORE_CTX *)x509_ctx);
}
/// OpenSSL's words for an X509_V_ERR_* value ("certificate has expired").
static inline const char * _Nonnull cs_lws_x509_verify_error_text(int error) {
    return X509_verify_cert_error_string(error);
}
/// Which check an X509_V_ERR_* belongs to, so Swift needs none of OpenSSL's macros: 1 the host name
/// (or IP address) is not in the certificate, 2 the chain does not end at a trusted CA, 3 the
/// certificate has expired, 4 it is not valid yet, 0 anything else.
static inline int cs_lws_x509_verify_error_check(int error) {
    switch (error) {
    case X509_V_ERR_HOSTNAME_MISMATCH: case X509_V_ERR_IP_ADDRESS_MISMATCH: return 1;
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT: case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE: case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN: case X509_V_ERR_CERT_UNTRUSTED: return 2;
    case X509_V_ERR_CERT_HAS_EXPIRED: return 3;
    case X509_V_ERR_CERT_NOT_YET_VALID: return 4;
    default: return 0;
    }
}
static inline int cs_lws_ssl_cb_handshake_start(void) { return SSL_CB_HANDSHAKE_START; }
static inline int cs_lws_ssl_cb_handshake_done(void) { return SSL_CB_HANDSHAKE_DONE; }

/// Copies every non-empty URI argument fragment ("a=1", "b=2") into dst, joined by 0x1F; returns the
/// length.
/// lws splits the query into fragments and url-decodes each one, so '&' inside values survives.
static inline int cs_lws_copy_query(struct lws * _Nonnull wsi, char * _Nonnull dst, int len) {
    /* lws cuts the query at each '&' into fragments, an empty one for "a=1&&b=2" or a leading or
       trailing '&'. An empty fragment's length (0) is also what a missing one reads as, so the end
       is found from the total, which counts one byte between fragments. */
    int total = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
    int used = 0, seen = 0;
    for (int idx = 0; seen < total && idx <= total; idx++) {
        int flen = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, idx);
        seen += flen + (idx > 0);
        if (flen <= 0) continue;
        if (used + flen + 2 >= len) return -1;
        if (used > 0) dst[used++] = '\x1f'; /* unit separator: cannot appear decoded from a URL by accident */
        int n = lws_hdr_copy_fragment(wsi, dst + used, len - used, WSI_TOKEN_HTTP_URI_ARGS, idx);
        if (n < 0) return -1;
        used += n;
    }
    dst[used] = '\0';
    return used;
}

/* ---- Header limits -------------------------------------------------------------------------- */

/// Fills `limits` (which must outlive the context): every token may hold `header_limit` bytes, the
/// request-target tokens `uri_limit`. lws truncates a longer token instead of failing, so the
/// request still completes and the server can answer 414/431 with a body.
static inline void cs_lws_fill_token_limits(struct lws_token_limits * _Nonnull limits,
                                            unsigned short header_limit, unsigned short uri_limit) {
    for (int i = 0; i < WSI_TOKEN_COUNT; i++) limits->token_limit[i] = header_limit;
    const enum lws_token_indexes uris[] = {
        WSI_TOKEN_GET_URI, WSI_TOKEN_POST_URI, WSI_TOKEN_OPTIONS_URI, WSI_TOKEN_PUT_URI,
        WSI_TOKEN_PATCH_URI, WSI_TOKEN_DELETE_URI, WSI_TOKEN_CONNECT, WSI_TOKEN_HEAD_URI,
        WSI_TOKEN_HTTP_URI_ARGS,
    };
    for (unsigned i = 0; i < sizeof(uris) / sizeof(uris[0]); i++) limits->token_limit[uris[i]] = uri_limit;
}

static inline int cs_lws_is_uri_token(int token) {
    switch (token) {
    case WSI_TOKEN_GET_URI: case WSI_TOKEN_POST_URI: case WSI_TOKEN_OPTIONS_URI: case WSI_TOKEN_PUT_URI:
    case WSI_TOKEN_PATCH_URI: case WSI_TOKEN_DELETE_URI: case WSI_TOKEN_CONNECT: case WSI_TOKEN_HEAD_URI:
    case WSI_TOKEN_HTTP_URI_ARGS:
        return 1;
    default:
        return 0;
    }
}

/// Sizes of the parsed request: the request target (path plus query), the longest other header,
/// and the sum of all other headers lws knows by name. Only valid while the header table is bound.
struct cs_lws_header_sizes { int uri; int longest; int total; };

static inline struct cs_lws_header_sizes cs_lws_header_sizes(struct lws * _Nonnull wsi) {
    struct cs_lws_header_sizes sizes = { 0, 0, 0 };
    for (int token = 0; token < WSI_TOKEN_COUNT; token++) {
        if (token >= _WSI_TOKEN_CLIENT_SENT_PROTOCOLS) break;
        int length = lws_hdr_total_length(wsi, (enum lws_token_indexes)token);
        if (length <= 0) continue;
        if (cs_lws_is_uri_token(token)) { sizes.uri += length; continue; }
        if (length > sizes.longest) sizes.longest = length;
        sizes.total += length;
    }
    return sizes;
}

/// Number of fragments (repeated fields) of `token`: two Content-Length headers give 2.
static inline int cs_lws_fragment_count(struct lws * _Nonnull wsi, enum lws_token_indexes token) {
    int count = 0;
    while (lws_hdr_fragment_length(wsi, token, count) > 0) count++;
    return count;
}

/* ---- Closing with an answer ----------------------------------------------------------------- */

/// Reads and discards what the peer has already sent (at most `limit` bytes, without blocking).
/// Closing a socket with unread input makes the kernel send RST, and a client that gets RST may
/// never see the error response written just before; draining first turns that into a FIN.
static inline void cs_drain_socket(int fd, size_t limit) {
    char scratch[4096];
    size_t total = 0;
    while (total < limit) {
        ssize_t n = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
        if (n <= 0) break;
        total += (size_t)n;
    }
}

/* ---- lws log hook --------------------------------------------------------------------------- */

/* lws logs and retries when accept() fails (EMFILE/ENFILE), and logs one line per malformed
 * request; either can be driven by a client at line rate. The hook keeps at most
 * CS_LWS_LOG_BURST lines per CS_LWS_LOG_WINDOW seconds and then says how many it dropped, and on
 * an accept failure releases a spare descriptor so the next accept() succeeds: the server then
 * closes that connection at once (over budget), which drains the backlog instead of spinning. */

#define CS_LWS_LOG_BURST 20
#define CS_LWS_LOG_WINDOW 10

/* Function-local statics: Swift's importer emits the inline functions of a header it uses, but
 * not file-scope variables. */
struct cs_lws_log_state {
    _Atomic long accept_failures, window_start, window_lines, suppressed;
    _Atomic int spare_fd;
};
static inline struct cs_lws_log_state * _Nonnull cs_lws_log_state(void) {
    static struct cs_lws_log_state state = { 0, 0, 0, 0, -1 };
    return &state;
}

/// Per service thread: who to tell that the h1 parser just ran out of header-table space. lws
/// closes that socket right after, without a callback in between; the handler runs first.
struct cs_lws_thread_hook {
    void (* _Nullable on_header_overflow)(void * _Nullable context);
    void * _Nullable context;
};
static inline struct cs_lws_thread_hook * _Nonnull cs_lws_thread_hook(void) {
    static __thread struct cs_lws_thread_hook hook;
    return &hook;
}

/// Bytes the kernel has received on a TCP socket so far (TCP_INFO), or 0. glibc's struct tcp_info
/// stops before this field and <linux/tcp.h> clashes with <netinet/tcp.h> in one module, so it is
/// read at its offset in the kernel's struct (uapi, append-only: `tcpi_bytes_received`, Linux 4.1+).
static inline uint64_t cs_tcp_bytes_received(int fd) {
    unsigned char info[256];
    socklen_t length = sizeof(info);
    memset(info, 0, sizeof(info));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &length) != 0 || length < 136) return 0;
    uint64_t bytes;
    memcpy(&bytes, info + 128, sizeof(bytes));
    return bytes;
}

/// Where lws's lines go instead of stderr when set (a client SDK routing them to its own log).
typedef void (*cs_lws_sink_fn)(int level, const char * _Nonnull line);
static inline cs_lws_sink_fn _Nullable * _Nonnull cs_lws_sink_slot(void) {
    static cs_lws_sink_fn sink = 0;
    return &sink;
}
static inline void cs_lws_set_sink(cs_lws_sink_fn _Nullable sink) {
    __atomic_store_n(cs_lws_sink_slot(), sink, __ATOMIC_SEQ_CST);
}

static inline void cs_lws_emit(int level, const char * _Nonnull line) {
    if (strstr(line, "Ran out of header data space") || strstr(line, "More hdr frags")) {
        struct cs_lws_thread_hook *hook = cs_lws_thread_hook();
        if (hook->on_header_overflow) hook->on_header_overflow(hook->context);
    }
    if (strstr(line, "accept: errno")) {
        atomic_fetch_add(&cs_lws_log_state()->accept_failures, 1);
        int spare = atomic_exchange(&cs_lws_log_state()->spare_fd, -1);
        if (spare >= 0) close(spare);
    }
    if (strstr(line, "header ") && strstr(line, " exceeds limit")) return; /* answered with 414/431 */
    long now = (long)time(NULL), start = atomic_load(&cs_lws_log_state()->window_start);
    if (now - start >= CS_LWS_LOG_WINDOW && atomic_compare_exchange_strong(&cs_lws_log_state()->window_start, &start, now)) {
        long dropped = atomic_exchange(&cs_lws_log_state()->suppressed, 0);
        atomic_store(&cs_lws_log_state()->window_lines, 0);
        if (dropped > 0)
            fprintf(stderr, "lws: %ld log lines suppressed in the last %d s (accept failures so far: %ld)\n",
                    dropped, CS_LWS_LOG_WINDOW, atomic_load(&cs_lws_log_state()->accept_failures));
    }
    if (atomic_fetch_add(&cs_lws_log_state()->window_lines, 1) >= CS_LWS_LOG_BURST) {
        atomic_fetch_add(&cs_lws_log_state()->suppressed, 1);
        return;
    }
    cs_lws_sink_fn sink = __atomic_load_n(cs_lws_sink_slot(), __ATOMIC_SEQ_CST);
    if (sink) {
        sink(level, line);
        return;
    }
    lwsl_emit_stderr(level, line);
}

/// Installs the hook (idempotent) with lws's warnings and errors only.
static inline void cs_lws_install_log_hook(void) {
    lws_set_log_level(LLL_ERR | LLL_WARN, cs_lws_emit);
}

/// accept() failures (EMFILE and the like) lws has logged in this process.
static inline long cs_lws_accept_failure_count(void) { return atomic_load(&cs_lws_log_state()->accept_failures); }

/// (Re)opens the spare descriptor the hook releases when accept() runs out of descriptors.
static inline void cs_lws_reserve_spare_fd(void) {
    if (atomic_load(&cs_lws_log_state()->spare_fd) >= 0) return;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    int expected = -1;
    if (!atomic_compare_exchange_strong(&cs_lws_log_state()->spare_fd, &expected, fd)) close(fd);
}
#endif
