/*
 * BIP-340 signature verification with the system's libsecp256k1, for Node through N-API:
 * verify(message32, xOnlyPubkey32, signature64) -> boolean. The relay uses it in place of the
 * WebAssembly build when it compiles (scripts/build-native.mjs) and loads (src/nostr/schnorr.ts).
 * A pubkey that is not a valid x coordinate, or arguments of the wrong length, verify as false.
 */
#include <node_api.h>
#include <pthread.h>
#include <string.h>
#include <secp256k1.h>
#include <secp256k1_extrakeys.h>
#include <secp256k1_schnorrsig.h>

/* One context for every thread: verification only reads it once it is made. */
static secp256k1_context *context;
static pthread_once_t context_once = PTHREAD_ONCE_INIT;

static void make_context(void) { context = secp256k1_context_create(SECP256K1_CONTEXT_NONE); }

static int buffer_of(napi_env env, napi_value value, const unsigned char **data, size_t length) {
  bool is_buffer = false;
  size_t size = 0;
  void *bytes = NULL;
  if (napi_is_buffer(env, value, &is_buffer) != napi_ok || !is_buffer) return 0;
  if (napi_get_buffer_info(env, value, &bytes, &size) != napi_ok || size != length) return 0;
  *data = bytes;
  return 1;
}

/*
 * Pubkeys parsed lately, by thread (each verifier thread has its own): parsing one is a square root
 * in the field, ~3.8 us of the ~30 a check takes on this project's machine, and a relay sees the
 * same authors again and again. Direct-mapped by the key's first bytes; only valid points are kept.
 */
#define PARSED_SLOTS 256
static __thread struct {
  unsigned char bytes[32];
  secp256k1_xonly_pubkey parsed;
  int used;
} parsed_cache[PARSED_SLOTS];

static int parse_pubkey(secp256k1_xonly_pubkey *pubkey, const unsigned char *bytes) {
  unsigned slot = (bytes[0] | (unsigned)bytes[1] << 8) % PARSED_SLOTS;
  if (parsed_cache[slot].used && memcmp(parsed_cache[slot].bytes, bytes, 32) == 0) {
    *pubkey = parsed_cache[slot].parsed;
    return 1;
  }
  if (!secp256k1_xonly_pubkey_parse(context, pubkey, bytes)) return 0;
  memcpy(parsed_cache[slot].bytes, bytes, 32);
  parsed_cache[slot].parsed = *pubkey;
  parsed_cache[slot].used = 1;
  return 1;
}

static napi_value verify(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_value result;
  const unsigned char *message, *pubkey_bytes, *signature;
  secp256k1_xonly_pubkey pubkey;
  int valid = 0;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 3 && buffer_of(env, argv[0], &message, 32) && buffer_of(env, argv[1], &pubkey_bytes, 32) && buffer_of(env, argv[2], &signature, 64) &&
      parse_pubkey(&pubkey, pubkey_bytes))
    valid = secp256k1_schnorrsig_verify(context, signature, message, 32, &pubkey);
  napi_get_boolean(env, valid == 1, &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  pthread_once(&context_once, make_context);
  napi_create_function(env, "verify", NAPI_AUTO_LENGTH, verify, NULL, &fn);
  napi_set_named_property(env, exports, "verify", fn);
  return exports;
}
