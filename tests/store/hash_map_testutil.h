/*
 * hash_map_testutil.h — what the tl_hash_map test programs (test_hash_map_*.c)
 * share: the deterministic rng, the key <-> id bijection, store constructors,
 * value helpers, and the reference map the store is checked against
 * (hash_map_testutil.c holds the code and explains the reference map).
 *
 * SIZES: TL_TEST_SCALE (a positive float, default 1, 0.25 under ASan) scales
 * the operation counts and key counts; setup_globals() reads it and must run
 * first (pass it as the cmocka group setup).
 *
 * THREAD SAFETY: the rng and the reference map are per caller; the globals
 * are written once by setup_globals() before any test runs.
 */
#ifndef TL_TESTS_HASH_MAP_TESTUTIL_H
#define TL_TESTS_HASH_MAP_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_internal.h"


#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define KEY_MUL 0x9E3779B97F4A7C15ull /* odd: key_of() is a bijection */

extern double g_scale;     /* TL_TEST_SCALE */
extern uint64_t g_key_inv;  /* KEY_MUL^-1 mod 2^64 */

struct rng {
    uint64_t s;
};

struct ref {
    uint32_t k;
    store_dtype_t dtype;
    uint64_t universe; /* ids 0..universe-1 may be present */
    uint64_t size;     /* number of present ids */
    uint8_t *present;  /* [universe] */
    float *vals;       /* [universe * k]: what a lookup must return */
};

/* ---- small helpers ------------------------------------------------------ */

uint64_t mix64(uint64_t z);
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);
size_t scaled(size_t n);
uint64_t key_of(uint64_t id);
uint64_t id_of(uint64_t key);
void *xcalloc(size_t n, size_t size);
store_t *make_seeded_store(uint32_t k, store_dtype_t dtype, uint32_t shards,
                           uint64_t expected, double max_load, uint64_t seed);
store_t *make_store(uint32_t k, store_dtype_t dtype, uint32_t shards, uint64_t expected,
                    double max_load);
float f16_round(float f);
const char *dtype_name(store_dtype_t d);
void random_value(struct rng *r, uint32_t k, store_dtype_t dtype, float *in, float *expect);
bool same_floats(const float *a, const float *b, uint32_t k);
bool all_zero(const float *a, uint32_t k);
void stats_of(const store_t *s, store_stats_t *st);
float f32_bits(uint32_t b);
uint32_t bits_f32(float f);

/* ---- the reference map -------------------------------------------------- */

void ref_init(struct ref *m, uint32_t k, store_dtype_t dtype, uint64_t universe);
void ref_free(struct ref *m);
int visit_check(void *vctx, uint64_t key, const float *value);
void check_store_equals_ref(const store_t *s, const struct ref *m, const char *where);
void ref_upsert(store_t *s, struct ref *m, uint64_t id, struct rng *r, size_t op);
void ref_delete(store_t *s, struct ref *m, uint64_t id, size_t op);
void ref_lookup(const store_t *s, const struct ref *m, uint64_t id, size_t op);
void ref_lookup_batch(const store_t *s, const struct ref *m, struct rng *r, size_t n,
                      size_t op);

/* cmocka group setup: reads TL_TEST_SCALE and computes g_key_inv. */
int setup_globals(void **state);

#endif
