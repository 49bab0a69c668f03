/*
 * delta_testutil.h — helpers test_delta.c and test_delta_repo.c share:
 * scratch directories, a model of keys 1..n with known values, store
 * equality, error expectations, a delta writer in one call, and iteration
 * checks.  Header-only (static, unused ones allowed) so each test includes
 * it without linking anything.  Tests only.
 */
#ifndef TL_TESTS_DELTA_TESTUTIL_H
#define TL_TESTS_DELTA_TESTUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "store/delta.h"
#include "store/delta_internal.h"
#include "store/manifest.h"
#include "store/store.h"
#include "tests/test_fs.h"

#define K 3      /* floats per key in the tests' models */
#define SHARDS 4 /* shards of the tests' models */

static __attribute__((unused)) void scratch_dir(char *out)
{
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(out, PATH_MAX, "%s/deltaXXXXXX", root);
    assert_non_null(mkdtemp(out));
}

static __attribute__((unused)) void path2(char *out, const char *a, const char *b)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", a, b);
    assert_true(n > 0 && n < PATH_MAX);
}

static __attribute__((unused)) void value_of(uint64_t key, uint32_t salt, float *v)
{
    for (uint32_t j = 0; j < K; j++)
        v[j] = (float)((key * 7 + j + salt) % 1000) / 8.0f - 60.0f;
}

/* A store of keys 1..n with value_of(key, salt). */
static __attribute__((unused)) store_t *make_store(uint64_t n, uint32_t salt, store_dtype_t dt, uint64_t seed)
{
    store_options_t o = {.value_floats = K, .dtype = dt, .shards = SHARDS, .hash_seed = seed};
    store_t *s = NULL;
    assert_int_equal(store_create(&o, &s), 0);
    float v[K];
    for (uint64_t k = 1; k <= n; k++) {
        value_of(k, salt, v);
        assert_true(store_upsert(s, k, v) >= 0);
    }
    return s;
}

static __attribute__((unused)) store_meta_t meta_of(const char *name, uint64_t version)
{
    store_meta_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.model_name, sizeof m.model_name, "%s", name);
    m.model_kind = STORE_MODEL_FM;
    m.version = version;
    return m;
}

struct eq_ctx {
    const store_t *other;
    uint64_t bad;
};

static __attribute__((unused)) int eq_visit(void *ctx, uint64_t key, const float *value)
{
    struct eq_ctx *c = ctx;
    float got[K];
    if (!store_lookup(c->other, key, got) || memcmp(got, value, sizeof got) != 0)
        c->bad++;
    return 0;
}

/* Key for key, bit for bit. */
static __attribute__((unused)) void assert_stores_equal(const store_t *a, const store_t *b)
{
    assert_int_equal(store_count(a), store_count(b));
    struct eq_ctx c = {.other = b};
    for (uint32_t i = 0; i < store_shards(a); i++)
        store_foreach(a, i, eq_visit, &c);
    assert_int_equal(c.bad, 0);
}

static __attribute__((unused)) void expect_err(int rc, const store_error_t *err, store_errc_t code, const char *needle)
{
    if (rc != store_errc_errno(code) || err->code != code ||
        (needle && !strstr(err->msg, needle)))
        print_error("expected %s with \"%s\", got rc %d %s: %s\n", store_errc_name(code),
                    needle ? needle : "", rc, store_errc_name(err->code), err->msg);
    assert_int_equal(rc, store_errc_errno(code));
    assert_int_equal(err->code, code);
    if (needle)
        assert_non_null(strstr(err->msg, needle));
    if (getenv("TL_TEST_VERBOSE"))
        print_message("%s: %s\n", store_errc_name(err->code), err->msg);
}

static __attribute__((unused)) void layout_for(store_delta_layout_t *l, const char *name, uint32_t k, uint32_t shards)
{
    memset(l, 0, sizeof *l);
    snprintf(l->model_name, sizeof l->model_name, "%s", name);
    l->model_kind = STORE_MODEL_FM;
    l->value_floats = k;
    l->dtype = STORE_DTYPE_F32;
    l->shards = shards;
}

/* Writes a delta of parent -> version into dir with upserts of keys
 * [from, to) (salt 1) and deletes of keys [dfrom, dto). */
static __attribute__((unused)) void write_delta(const char *dir, const store_delta_layout_t *l, uint64_t parent,
                        uint64_t version, uint64_t from, uint64_t to, uint64_t dfrom, uint64_t dto)
{
    store_delta_writer_t *w = NULL;
    store_error_t err;
    assert_int_equal(store_delta_begin(dir, l, parent, version, "test", &w, &err), 0);
    float v[STORE_MAX_VALUE_FLOATS] = {0};
    for (uint64_t k = from; k < to; k++) {
        value_of(k, 1, v);
        assert_int_equal(store_delta_put(w, k, v), 0);
    }
    for (uint64_t k = dfrom; k < dto; k++)
        assert_int_equal(store_delta_del(w, k), 0);
    int rc = store_delta_commit(w, &err);
    if (rc != 0)
        print_error("commit: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

struct collect {
    uint64_t ups, dels, last_up, last_del, bad;
};

static __attribute__((unused)) int col_up(void *ctx, uint64_t key, const float *v)
{
    struct collect *c = ctx;
    float want[K];
    value_of(key, 1, want);
    if ((c->ups && key <= c->last_up) || memcmp(v, want, sizeof want) != 0)
        c->bad++;
    c->last_up = key;
    c->ups++;
    return 0;
}

static __attribute__((unused)) int col_del(void *ctx, uint64_t key)
{
    struct collect *c = ctx;
    if (c->dels && key <= c->last_del)
        c->bad++;
    c->last_del = key;
    c->dels++;
    return 0;
}

/* put/del in any order, last call wins; the files are sorted; counts, info
 * and apply give the expected model. */

#endif /* TL_TESTS_DELTA_TESTUTIL_H */
