import CLibWebSockets
import CallingLogging
import Foundation

/// Creates lws contexts that use TLS so that OpenSSL's per-process setup happens once.
///
/// Every lws 4.1.6 context created with `LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT` allocates new
/// OpenSSL ex-data indexes and stores them in two process-wide variables
/// (`openssl_websocket_private_data_index`, `openssl_SSL_CTX_private_data_index` in
/// lib/tls/openssl/openssl-tls.c). Contexts created earlier keep data under the old indexes, so
/// their SSL_CTX lookups fail from then on: a server's `LWS_CALLBACK_SSL_INFO` stops arriving (and
/// with it the handshake-failure count) as soon as the same process opens a client loop, and a
/// handshake in flight on another thread can lose its wsi. Seen here: a server in a test process
/// with a client loop reported no SSL_INFO at all.
///
/// So only the first TLS context of the process does the global init. Later ones are created with
/// `LWS_SERVER_OPTION_EXPLICIT_VHOSTS` and the flag only on their vhost, which is where lws reads it
/// to build the vhost's server and client SSL_CTX. The price: lws frees a vhost's SSL_CTX only when
/// its *context* has the flag (`lws_ssl_destroy`), so each later context leaks its SSL_CTX (a few
/// KiB) when destroyed. Servers and SDK loops live for the process, so that is tests only.
package enum TLSContextFactory {
    /// Whether a context did the global init. Its lock also serialises the lws_create_context
    /// calls, which reassign the indexes (the one `Locked` whose body calls a C library on purpose).
    private static let globalInitDone = Locked(false)

    /// Service thread of the new context. `info` describes the context and its default vhost.
    package static func createContext(_ info: lws_context_creation_info) -> OpaquePointer? {
        globalInitDone.withLock { globalInitDone -> OpaquePointer? in
            var withInit = info
            withInit.options |= cs_lws_option_do_ssl_global_init()
            if !globalInitDone {
                let context = lws_create_context(&withInit)
                if context != nil { globalInitDone = true }
                return context
            }
            var contextOnly = info
            contextOnly.options |= cs_lws_option_explicit_vhosts()
            guard let context = lws_create_context(&contextOnly) else { return nil }
            guard lws_create_vhost(context, &withInit) != nil else {
                lws_context_destroy(context)
                return nil
            }
            return context
        }
    }
}
