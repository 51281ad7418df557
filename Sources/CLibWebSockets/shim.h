#ifndef CS_LWS_SHIM_H
#define CS_LWS_SHIM_H
#include <libwebsockets.h>

/* Only what Swift cannot import: function-like macros and 64-bit option flags. */

/// Headroom lws needs in front of every buffer passed to lws_write (LWS_PRE is a macro).
static inline size_t cs_lws_pre(void) { return LWS_PRE; }

static inline uint64_t cs_lws_option_libev(void) { return LWS_SERVER_OPTION_LIBEV; }
static inline uint64_t cs_lws_option_disable_ipv6(void) { return LWS_SERVER_OPTION_DISABLE_IPV6; }
static inline uint64_t cs_lws_option_do_ssl_global_init(void) { return LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT; }
static inline uint64_t cs_lws_option_disable_os_ca_certs(void) { return LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS; }
static inline uint64_t cs_lws_option_explicit_vhosts(void) { return LWS_SERVER_OPTION_EXPLICIT_VHOSTS; }

/* TLS knobs lws takes as raw OpenSSL values (ssl_options_set, lws_ssl_info.where). The constants are
 * macros of the <openssl/ssl.h> that libwebsockets.h includes; nothing else of OpenSSL is used here. */

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
static inline int cs_lws_ssl_cb_handshake_start(void) { return SSL_CB_HANDSHAKE_START; }
static inline int cs_lws_ssl_cb_handshake_done(void) { return SSL_CB_HANDSHAKE_DONE; }

/// Copies every URI argument fragment ("a=1", "b=2") joined by '&' into dst; returns the length.
/// lws splits the query into fragments and url-decodes each one, so '&' inside values survives.
static inline int cs_lws_copy_query(struct lws * _Nonnull wsi, char * _Nonnull dst, int len) {
    int used = 0;
    for (int idx = 0; ; idx++) {
        int flen = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, idx);
        if (flen <= 0) break;
        if (used + flen + 2 >= len) return -1;
        if (used > 0) dst[used++] = '\x1f'; /* unit separator: cannot appear decoded from a URL by accident */
        int n = lws_hdr_copy_fragment(wsi, dst + used, len - used, WSI_TOKEN_HTTP_URI_ARGS, idx);
        if (n < 0) return -1;
        used += n;
    }
    dst[used] = '\0';
    return used;
}
#endif
