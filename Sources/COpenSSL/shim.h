#ifndef CS_OPENSSL_SHIM_H
#define CS_OPENSSL_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/err.h>
#include <openssl/crypto.h>
/* CallingAuth reads PEM keys (PEM_read_bio_PUBKEY / PEM_read_bio_PrivateKey) to check their type. */
#include <openssl/bio.h>
#include <openssl/pem.h>
/* CallingAuth makes the self-signed ECDSA certificates WebRTC peers use for DTLS. */
#include <openssl/x509.h>
#include <openssl/ec.h>
#endif
