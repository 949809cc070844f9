/*
 * BIP-340 signature verification with the system's libsecp256k1, for Node through N-API:
 * verify(message32, xOnlyPubkey32, signature64) -> boolean. The relay uses it in place of the
 * WebAssembly build when it compiles (scripts/build-native.mjs) and loads (src/nostr/schnorr.ts).
 * A pubkey that is not a valid x coordinate, or arguments of the wrong length, verify as false.
 */
#include <node_api.h>
#include <pthread.h>
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

static napi_value verify(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_value result;
  const unsigned char *message, *pubkey_bytes, *signature;
  secp256k1_xonly_pubkey pubkey;
  int valid = 0;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 3 && buffer_of(env, argv[0], &message, 32) && buffer_of(env, argv[1], &pubkey_bytes, 32) && buffer_of(env, argv[2], &signature, 64) &&
      secp256k1_xonly_pubkey_parse(context, &pubkey, pubkey_bytes))
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
