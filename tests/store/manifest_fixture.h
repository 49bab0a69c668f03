/*
 * manifest_fixture.h — what the MANIFEST codec tests (test_manifest_*.c)
 * share: a valid manifest with n shards, its raw (unchecked) twin, the fixture
 * holding both, a delta manifest, and the checks that a manifest round-trips or
 * is refused with a `why` naming the field.
 *
 * THREAD SAFETY: single-threaded.
 */
#ifndef TL_TESTS_MANIFEST_FIXTURE_H
#define TL_TESTS_MANIFEST_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest_testutil.h"
#include "store/manifest.h"


#define MAXS 256

struct fixture {
    manifest_shard_t sh[MAXS];
    manifest_raw_shard_t rs[MAXS];
    manifest_t m;
    manifest_raw_t r;
};

void good(manifest_t *m, manifest_shard_t *shards, uint32_t n, uint32_t k, store_dtype_t dt);
void raw_from(manifest_raw_t *r, manifest_raw_shard_t *rs, const manifest_t *m);
void assert_same(const manifest_t *a, const manifest_t *b);
void encode_ok(const manifest_t *m, uint8_t **buf, size_t *len);
void roundtrip(const manifest_t *m);
void expect_bad(const uint8_t *buf, size_t len, const char *needle);
void expect_raw_bad(const manifest_raw_t *r, const char *needle);
void expect_encode_bad(const manifest_t *m, const char *needle);
struct fixture *fixture_new(uint32_t n, uint32_t k, store_dtype_t dt);
void delta_of(manifest_t *m, manifest_shard_t *sh);

#endif
