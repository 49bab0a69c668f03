/*
 * test_snapshot.c — store_snapshot_write / store_snapshot_load: round trips
 * and hostile snapshots.
 *
 * Every refusal is checked for its exact code, file and byte offset, and for
 * leaving *out untouched.  The crafted snapshots (duplicate key, key of the
 * wrong shard, NaN, header fields) are built here from the documented file
 * format with this file's own header encoder, store__manifest_encode and XXH3, so
 * that the checksums are right and the loader has to look at the records.
 *
 * Scratch directories go under $TL_TEST_TMP (created when missing).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "store/manifest.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/synthetic.h"
#include "tests/test_fs.h"

#define SENTINEL ((store_t *)(uintptr_t)0x5eed)

/* ---- scratch files ------------------------------------------------------ */

/* A fresh empty directory; out must hold PATH_MAX bytes. */
static void scratch_dir(char *out)
{
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(out, PATH_MAX, "%s/snapXXXXXX", root);
    assert_non_null(mkdtemp(out));
}

static void path_of(char *out, const char *dir, const char *file)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, file);
    assert_true(n > 0 && n < PATH_MAX);
}

static uint8_t *read_file(const char *dir, const char *file, size_t *len)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *dir, const char *file, const void *buf, size_t len)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void flip_byte(const char *dir, const char *file, size_t off)
{
    size_t len;
    uint8_t *b = read_file(dir, file, &len);
    assert_true(off < len);
    b[off] ^= 0x20;
    write_file(dir, file, b, len);
    free(b);
}

static int file_exists(const char *dir, const char *file)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    struct stat st;
    return stat(p, &st) == 0;
}

/* Number of directory entries whose name ends in ".tmp". */
static int count_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l >= 4 && strcmp(e->d_name + l - 4, ".tmp") == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* ---- stores --------------------------------------------------------------- */

/* A random finite float: any finite bit pattern for f32 (subnormals and -0
 * included), a value that fits fp16 for f16. */
static float random_value(uint64_t *rng, store_dtype_t dt)
{
    uint64_t r = store_splitmix64(rng);
    if (dt == STORE_DTYPE_F32) {
        uint32_t b = (uint32_t)r;
        if ((b & 0x7f800000u) == 0x7f800000u)
            b &= ~0x40000000u; /* clear the top exponent bit: finite */
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    if ((r & 15) == 0)
        return (float)((int64_t)(r >> 40) - (1 << 23)) * 1e-12f;          /* subnormal halves */
    return (float)((int64_t)(r >> 32) - (1LL << 31)) / (float)(1u << 24); /* +-128 */
}

static store_t *make_store(uint32_t K, store_dtype_t dt, uint32_t shards, size_t nkeys,
                           uint64_t seed, uint64_t value_seed)
{
    store_options_t opt = {.value_floats = K, .dtype = dt, .shards = shards};
    store_t *s = NULL;
    assert_int_equal(store_create(&opt, &s), 0);
    uint64_t krng = seed, vrng = value_seed;
    float v[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < nkeys; i++) {
        uint64_t key = store_splitmix64(&krng);
        if (i % 7 == 0)
            key = i; /* small, sequential ids too */
        for (uint32_t j = 0; j < K; j++)
            v[j] = random_value(&vrng, dt);
        assert_true(store_upsert(s, key, v) >= 0);
    }
    return s;
}

static store_meta_t test_meta(const char *name, uint64_t version)
{
    store_meta_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.model_name, sizeof m.model_name, "%s", name);
    m.model_kind = STORE_MODEL_FM;
    m.version = version;
    m.parent_version = 0;
    m.created_unix = 1700000000;
    return m;
}

/* All records of s as packed {key, raw value}, sorted by key. */
struct records {
    uint8_t *buf;
    size_t n, cap, rec;
};

static int collect(void *ctx, uint64_t key, const void *raw)
{
    struct records *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->buf = realloc(r->buf, r->cap * r->rec);
        assert_non_null(r->buf);
    }
    memcpy(r->buf + r->n * r->rec, &key, 8);
    memcpy(r->buf + r->n * r->rec + 8, raw, r->rec - 8);
    r->n++;
    return 0;
}

static int by_key(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    return x < y ? -1 : x > y;
}

static struct records all_records(const store_t *s)
{
    struct records r = {.rec = 8 + store_value_bytes(s)};
    for (uint32_t i = 0; i < store_shards(s); i++)
        assert_int_equal(store_foreach_raw(s, i, collect, &r), 0);
    if (r.n) /* qsort(NULL, 0, ...) is undefined */
        qsort(r.buf, r.n, r.rec, by_key);
    return r;
}

static void assert_same_store(const store_t *a, const store_t *b)
{
    assert_int_equal(store_value_floats(a), store_value_floats(b));
    assert_int_equal(store_dtype(a), store_dtype(b));
    assert_int_equal(store_shards(a), store_shards(b));
    assert_int_equal(store_count(a), store_count(b));
    for (uint32_t i = 0; i < store_shards(a); i++)
        assert_int_equal(store_shard_count(a, i), store_shard_count(b, i));
    struct records ra = all_records(a), rb = all_records(b);
    assert_int_equal(ra.n, rb.n);
    assert_int_equal(ra.n, store_count(a));
    assert_memory_equal(ra.buf, rb.buf, ra.n * ra.rec);
    /* and through the read path: every key found, same floats */
    uint32_t K = store_value_floats(a);
    float va[STORE_MAX_VALUE_FLOATS], vb[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < ra.n; i += 97) {
        uint64_t key;
        memcpy(&key, ra.buf + i * ra.rec, 8);
        assert_int_equal(store_lookup(a, key, va), 1);
        assert_int_equal(store_lookup(b, key, vb), 1);
        assert_memory_equal(va, vb, K * sizeof(float));
    }
    free(ra.buf);
    free(rb.buf);
}

static void assert_same_meta(const store_meta_t *a, const store_meta_t *b)
{
    assert_string_equal(a->model_name, b->model_name);
    assert_int_equal(a->model_kind, b->model_kind);
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->parent_version, b->parent_version);
    assert_int_equal(a->created_unix, b->created_unix);
}

/* Loads dir expecting failure with code, file and offset. */
static void expect_load_error(const char *dir, int threads, store_errc_t code, const char *file,
                              int64_t offset)
{
    store_t *s = SENTINEL;
    store_meta_t meta;
    memset(&meta, 0xab, sizeof meta);
    store_error_t err;
    int rc = store_snapshot_load(dir, threads, &s, &meta, &err);
    if (rc == 0 || err.code != code || strcmp(err.file, file) != 0 || err.offset != offset)
        print_error("expected %s in \"%s\" at %lld, got rc %d: %s in \"%s\" at %lld: %s\n",
                    store_errc_name(code), file, (long long)offset, rc, store_errc_name(err.code),
                    err.file, (long long)err.offset, err.msg);
    if (getenv("TL_TEST_VERBOSE"))
        print_message("%s: %s\n", store_errc_name(err.code), err.msg);
    assert_int_equal(rc, store_errc_errno(code));
    assert_int_equal(err.code, code);
    assert_string_equal(err.file, file);
    assert_int_equal(err.offset, offset);
    assert_ptr_equal(s, SENTINEL); /* *out untouched */
    assert_true(strlen(err.msg) > 0);
    if (file[0])
        assert_non_null(strstr(err.msg, file));
    if (offset >= 0) {
        char o[64];
        snprintf(o, sizeof o, "offset %lld", (long long)offset);
        assert_non_null(strstr(err.msg, o));
    }
}

/* ---- extras: params and dense arrays ------------------------------------------ */

static void write_with_extras(const char *dir, float *w0, uint64_t n0, float *b0, uint64_t n1)
{
    store_t *s = make_store(3, STORE_DTYPE_F32, 4, 500, 11, 12);
    store_meta_t meta = test_meta("dnn-x", 3);
    meta.model_kind = STORE_MODEL_DNN;
    store_extras_t x = {0};
    assert_int_equal(store_extras_set(&x, "fields", "26"), 0);
    assert_int_equal(store_extras_set(&x, "hidden", "256,128"), 0);
    assert_int_equal(store_extras_set(&x, "fields", "20"), 0); /* replaces */
    assert_int_equal(store_extras_add_dense(&x, "mlp.0.weight", w0, n0), 0);
    assert_int_equal(store_extras_add_dense(&x, "mlp.0.bias", b0, n1), 0);
    store_error_t err;
    if (store_snapshot_write_ex(s, dir, &meta, &x, &err) != 0)
        fail_msg("write_ex: %s", err.msg);
    store_destroy(s);
}

static void test_extras_round_trip(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    uint64_t rng = 5;
    enum { N0 = 40000, N1 = 7 }; /* N0 spans several write chunks */
    float *w0 = malloc(N0 * sizeof *w0), b0[N1];
    assert_non_null(w0);
    for (int i = 0; i < N0; i++)
        w0[i] = random_value(&rng, STORE_DTYPE_F32);
    for (int i = 0; i < N1; i++)
        b0[i] = (float)i - 3.5f;
    write_with_extras(dir, w0, N0, b0, N1);
    assert_true(file_exists(dir, "dense-00.tld"));
    assert_true(file_exists(dir, "dense-01.tld"));
    assert_int_equal(count_tmp(dir), 0);

    store_t *s = NULL;
    store_meta_t meta;
    store_extras_t x;
    store_error_t err;
    if (store_snapshot_load_ex(dir, 2, &s, &meta, &x, &err) != 0)
        fail_msg("load_ex: %s", err.msg);
    assert_int_equal(meta.model_kind, STORE_MODEL_DNN);
    assert_int_equal(x.n_params, 2);
    assert_string_equal(store_extras_get(&x, "fields"), "20");
    assert_string_equal(store_extras_get(&x, "hidden"), "256,128");
    assert_null(store_extras_get(&x, "dim"));
    const store_dense_t *d = store_extras_dense(&x, "mlp.0.weight");
    assert_non_null(d);
    assert_int_equal(d->count, N0);
    assert_memory_equal(d->data, w0, N0 * sizeof *w0);
    d = store_extras_dense(&x, "mlp.0.bias");
    assert_non_null(d);
    assert_int_equal(d->count, N1);
    assert_memory_equal(d->data, b0, sizeof b0);
    assert_null(store_extras_dense(&x, "mlp.1.bias"));
    store_extras_free(&x);
    assert_int_equal(x.n_dense, 0);
    store_destroy(s);

    /* the plain loader loads the same snapshot (and still verifies the dense files) */
    s = NULL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, &meta, &err), 0);
    store_destroy(s);

    /* damage: a flipped float, a truncated file, an appended byte, a missing file */
    flip_byte(dir, "dense-00.tld", 16 + 4 * 1234);
    expect_load_error(dir, 2, STORE_E_CHECKSUM, "dense-00.tld", -1);
    flip_byte(dir, "dense-00.tld", 16 + 4 * 1234);
    assert_int_equal(store_snapshot_load(dir, 1, &s, &meta, &err), 0);
    store_destroy(s);
    size_t len;
    uint8_t *buf = read_file(dir, "dense-01.tld", &len);
    write_file(dir, "dense-01.tld", buf, len - 1);
    expect_load_error(dir, 2, STORE_E_TRUNCATED, "dense-01.tld", (int64_t)len - 1);
    uint8_t *more = malloc(len + 1);
    memcpy(more, buf, len);
    more[len] = 0;
    write_file(dir, "dense-01.tld", more, len + 1);
    expect_load_error(dir, 2, STORE_E_SIZE, "dense-01.tld", (int64_t)len);
    char path[PATH_MAX];
    path_of(path, dir, "dense-01.tld");
    unlink(path);
    expect_load_error(dir, 2, STORE_E_IO, "dense-01.tld", -1);
    write_file(dir, "dense-01.tld", buf, len);
    free(more);
    free(buf);
    free(w0);
    test_rm_rf(dir);
}

static void test_extras_refused(void **state)
{
    (void)state;
    store_extras_t x = {0};
    float one = 1.0f, nan_v[2] = {1.0f, NAN};
    assert_int_equal(store_extras_set(&x, "", "1"), -EINVAL);
    assert_int_equal(store_extras_set(&x, "a b", "1"), -EINVAL);
    assert_int_equal(store_extras_set(&x, "0123456789012345678901234567890123", "1"), -EINVAL);
    assert_int_equal(store_extras_set(&x, "k", "tab\there"), -EINVAL);
    assert_int_equal(store_extras_add_dense(&x, "w", &one, 0), -EINVAL);
    assert_int_equal(store_extras_add_dense(&x, "w/x", &one, 1), -EINVAL);
    assert_int_equal(store_extras_add_dense(&x, "w", NULL, 1), -EINVAL);
    assert_int_equal(store_extras_add_dense(&x, "w", &one, 1), 0);
    assert_int_equal(store_extras_add_dense(&x, "w", &one, 1), -EINVAL); /* duplicate */
    for (int i = 0; i < STORE_MAX_PARAMS; i++) {
        char key[16];
        snprintf(key, sizeof key, "p%d", i);
        assert_int_equal(store_extras_set(&x, key, "v"), 0);
    }
    assert_int_equal(store_extras_set(&x, "one-more", "v"), -EINVAL);

    /* a NaN in a dense array: nothing is left behind */
    char dir[PATH_MAX];
    scratch_dir(dir);
    store_t *s = make_store(1, STORE_DTYPE_F32, 2, 50, 1, 2);
    store_meta_t meta = test_meta("nan", 1);
    store_extras_t y = {0};
    assert_int_equal(store_extras_add_dense(&y, "w", nan_v, 2), 0);
    store_error_t err;
    assert_int_equal(store_snapshot_write_ex(s, dir, &meta, &y, &err), -EBADMSG);
    assert_int_equal(err.code, STORE_E_VALUE);
    assert_non_null(strstr(err.msg, "float 1 of dense array w"));
    assert_false(file_exists(dir, "MANIFEST"));
    assert_false(file_exists(dir, "shard-00000.tls"));
    assert_false(file_exists(dir, "dense-00.tld"));
    store_destroy(s);
    test_rm_rf(dir);
}

/* ---- round trips ------------------------------------------------------------- */

static void round_trip(uint32_t K, store_dtype_t dt, uint32_t shards, size_t nkeys)
{
    char dir[PATH_MAX];
    scratch_dir(dir);
    char snap[PATH_MAX];
    path_of(snap, dir, "v1"); /* not there yet: write creates it */
    store_t *s = make_store(K, dt, shards, nkeys, 42 + K + shards, 7);
    store_meta_t meta = test_meta("ctr_model-1.test", 17);
    store_error_t err;
    int rc = store_snapshot_write(s, snap, &meta, &err);
    if (rc)
        print_error("write: %s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(err.code, STORE_OK);
    assert_int_equal(count_tmp(snap), 0);
    for (uint32_t i = 0; i < shards; i++) {
        char name[32];
        snprintf(name, sizeof name, "shard-%05u.tls", i);
        assert_true(file_exists(snap, name));
    }

    store_meta_t rmeta;
    uint64_t entries = 0;
    assert_int_equal(store_snapshot_read_meta(snap, &rmeta, &entries, &err), 0);
    assert_same_meta(&meta, &rmeta);
    assert_int_equal(entries, store_count(s));

    for (int threads = 1; threads <= 2; threads++) {
        store_t *l = NULL;
        memset(&rmeta, 0, sizeof rmeta);
        rc = store_snapshot_load(snap, threads, &l, &rmeta, &err);
        if (rc)
            print_error("load: %s\n", err.msg);
        assert_int_equal(rc, 0);
        assert_non_null(l);
        assert_same_meta(&meta, &rmeta);
        assert_same_store(s, l);
        /* the writer's placement seed comes back: the load fills in order */
        assert_true(store_hash_seed(l) == store_hash_seed(s));
        store_destroy(l);
    }
    store_destroy(s);
    test_rm_rf(dir);
}

static void test_round_trip_k1_f32_1shard(void **state)
{
    (void)state;
    round_trip(1, STORE_DTYPE_F32, 1, 100000);
}

static void test_round_trip_k1_f32_16shards(void **state)
{
    (void)state;
    round_trip(1, STORE_DTYPE_F32, 16, 100000);
}

static void test_round_trip_k16_f16_1shard(void **state)
{
    (void)state;
    round_trip(16, STORE_DTYPE_F16, 1, 100000);
}

static void test_round_trip_k16_f16_16shards(void **state)
{
    (void)state;
    round_trip(16, STORE_DTYPE_F16, 16, 100000);
}

static void test_round_trip_small_shapes(void **state)
{
    (void)state;
    round_trip(3, STORE_DTYPE_F16, 4, 5000); /* 14-byte records: nothing aligned */
    round_trip(7, STORE_DTYPE_F32, 2, 3000);
    round_trip(1, STORE_DTYPE_F16, 8, 2000); /* 10-byte records */
    round_trip(4, STORE_DTYPE_F32, 8, 0);    /* every shard empty */
}

/* A store created for its final count and sized with
 * store_reserve_shard_exact before it is filled has the loader's layout, so
 * the writer writes its shards as they are (no re-layout). */
static void test_reserve_exact_has_loader_layout(void **state)
{
    (void)state;
    const uint32_t shards = 4;
    const uint64_t n = 60000, seed = 7;
    store_options_t opt = {.value_floats = 2, .dtype = STORE_DTYPE_F32, .shards = shards,
                           .expected_keys = n};
    store_t *s = NULL, *t = NULL;
    assert_int_equal(store_create(&opt, &s), 0);
    const uint32_t subs = store_subs_per_shard(s);
    uint64_t *counts = calloc((size_t)shards * subs, sizeof *counts);
    assert_non_null(counts);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t key = store_synthetic_key(i, seed);
        counts[(size_t)store_shard_of(s, key) * subs + store_sub_of(s, key)]++;
    }
    for (uint32_t sh = 0; sh < shards; sh++)
        assert_int_equal(store_reserve_shard_exact(s, sh, counts + (size_t)sh * subs, NULL), 0);
    for (uint64_t i = 0; i < n; i++) {
        float v[2] = {(float)i, -(float)i};
        assert_int_equal(store_upsert(s, store_synthetic_key(i, seed), v), 1);
    }
    opt.hash_seed = store_hash_seed(s); /* the loader's store for this snapshot */
    assert_int_equal(store_create(&opt, &t), 0);
    for (uint32_t sh = 0; sh < shards; sh++) {
        assert_int_equal(store_reserve_shard_exact(t, sh, counts + (size_t)sh * subs, NULL), 0);
        assert_true(store_shard_layout_equal(s, t, sh));
    }
    store_destroy(t);
    store_destroy(s);
    free(counts);
}

static void test_created_now_and_threads_default(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    store_t *s = make_store(2, STORE_DTYPE_F32, 4, 1000, 1, 2);
    store_meta_t meta = test_meta("m", 3);
    meta.created_unix = 0;
    uint64_t before = (uint64_t)time(NULL);
    assert_int_equal(store_snapshot_write(s, dir, &meta, NULL), 0);
    store_t *l = NULL;
    store_meta_t r;
    assert_int_equal(store_snapshot_load(dir, 0, &l, &r, NULL), 0);
    assert_true(r.created_unix >= before && r.created_unix <= (uint64_t)time(NULL));
    assert_same_store(s, l);
    store_destroy(l);
    store_destroy(s);
    test_rm_rf(dir);
}

/* ---- write refusals ------------------------------------------------------- */

static void test_write_refuses_existing_manifest(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    store_t *s = make_store(1, STORE_DTYPE_F32, 2, 500, 3, 4);
    store_t *s2 = make_store(1, STORE_DTYPE_F32, 2, 500, 3, 5);
    store_meta_t meta = test_meta("m", 1);
    store_error_t err;
    assert_int_equal(store_snapshot_write(s, dir, &meta, &err), 0);
    assert_int_equal(store_snapshot_write(s2, dir, &meta, &err), -EEXIST);
    assert_int_equal(err.code, STORE_E_EXISTS);
    assert_string_equal(err.file, "MANIFEST");
    assert_int_equal(err.offset, -1);
    assert_non_null(strstr(err.msg, dir));
    /* the first snapshot is intact */
    store_t *l = NULL;
    assert_int_equal(store_snapshot_load(dir, 1, &l, NULL, &err), 0);
    assert_same_store(s, l);
    store_destroy(l);
    store_destroy(s2);
    store_destroy(s);
    test_rm_rf(dir);
}

static void test_write_refuses_bad_meta(void **state)
{
    (void)state;
    char dir[PATH_MAX], snap[PATH_MAX];
    scratch_dir(dir);
    path_of(snap, dir, "v");
    store_t *s = make_store(1, STORE_DTYPE_F32, 1, 10, 3, 4);
    store_error_t err;
    store_meta_t bad[5];
    for (int i = 0; i < 5; i++)
        bad[i] = test_meta("ok", 1);
    bad[0].model_name[0] = '\0';
    snprintf(bad[1].model_name, sizeof bad[1].model_name, "a/b");
    bad[2].model_kind = (store_model_kind_t)9;
    bad[3].version = 0;
    bad[4].parent_version = 5;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(store_snapshot_write(s, snap, &bad[i], &err), -EINVAL);
        assert_int_equal(err.code, STORE_E_INVALID);
        assert_false(file_exists(snap, "MANIFEST"));
    }
    memset(bad[0].model_name, 'x', sizeof bad[0].model_name); /* no NUL */
    assert_int_equal(store_snapshot_write(s, snap, &bad[0], &err), -EINVAL);
    assert_int_equal(err.code, STORE_E_INVALID);
    store_destroy(s);
    test_rm_rf(dir);
}

static void test_write_refuses_nan(void **state)
{
    (void)state;
    char dir[PATH_MAX], snap[PATH_MAX];
    scratch_dir(dir);
    path_of(snap, dir, "v");
    store_options_t opt = {.value_floats = 2, .dtype = STORE_DTYPE_F32, .shards = 1};
    store_t *s = NULL;
    assert_int_equal(store_create(&opt, &s), 0);
    float v[2] = {1, NAN};
    assert_int_equal(store_upsert(s, 77, v), 1);
    store_meta_t meta = test_meta("m", 1);
    store_error_t err;
    assert_int_equal(store_snapshot_write(s, snap, &meta, &err), -EBADMSG);
    assert_int_equal(err.code, STORE_E_VALUE);
    assert_string_equal(err.file, "shard-00000.tls");
    assert_int_equal(err.offset, 64);
    assert_non_null(strstr(err.msg, "0x4d"));
    /* nothing left behind; the directory write created is gone too */
    assert_false(file_exists(dir, "v"));
    store_destroy(s);
    test_rm_rf(dir);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load("/nonexistent-dir", -1, &s, NULL, &err), -EINVAL);
    assert_int_equal(err.code, STORE_E_INVALID);
    assert_int_equal(store_snapshot_load(NULL, 1, &s, NULL, &err), -EINVAL);
    assert_int_equal(err.code, STORE_E_INVALID);
    assert_int_equal(store_snapshot_load("/nonexistent-dir-tl", 1, &s, NULL, &err), -EIO);
    assert_int_equal(err.code, STORE_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir-tl"));
    assert_ptr_equal(s, SENTINEL);
    assert_int_equal(store_snapshot_load("/nonexistent-dir-tl", 1, &s, NULL, NULL), -EIO);
    assert_string_equal(store_errc_name(STORE_E_CHECKSUM), "checksum");
    assert_string_equal(store_errc_name((store_errc_t)999), "unknown");
    assert_string_equal(store_model_kind_name(STORE_MODEL_FFM), "ffm");
    assert_string_equal(store_model_kind_name((store_model_kind_t)999), "unknown");
}

/* ---- corrupted snapshots ---------------------------------------------------- */

/* The fixture: K=4 f32, 4 shards, 2000 keys (records of 24 bytes). */
#define FIX_K 4
#define FIX_REC (8 + 4 * FIX_K)

struct fixture {
    char root[PATH_MAX]; /* scratch dir */
    char dir[PATH_MAX];  /* the snapshot */
    store_t *s;
};

static int fixture_setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    scratch_dir(f->root);
    path_of(f->dir, f->root, "snap");
    f->s = make_store(FIX_K, STORE_DTYPE_F32, 4, 2000, 11, 12);
    store_meta_t meta = test_meta("fixture", 5);
    store_error_t err;
    if (store_snapshot_write(f->s, f->dir, &meta, &err) != 0) {
        print_error("fixture: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    struct fixture *f = *state;
    store_destroy(f->s);
    test_rm_rf(f->root);
    free(f);
    return 0;
}

static void test_fixture_loads(void **state)
{
    struct fixture *f = *state;
    store_t *l = NULL;
    store_error_t err;
    assert_int_equal(store_snapshot_load(f->dir, 2, &l, NULL, &err), 0);
    assert_same_store(f->s, l);
    store_destroy(l);
}

static void test_flipped_record_byte(void **state)
{
    struct fixture *f = *state;
    flip_byte(f->dir, "shard-00001.tls", 64 + 5 * FIX_REC + 11);
    expect_load_error(f->dir, 2, STORE_E_CHECKSUM, "shard-00001.tls", -1);
    expect_load_error(f->dir, 1, STORE_E_CHECKSUM, "shard-00001.tls", -1);
}

static void test_flipped_last_byte(void **state)
{
    struct fixture *f = *state;
    size_t len;
    free(read_file(f->dir, "shard-00003.tls", &len));
    flip_byte(f->dir, "shard-00003.tls", len - 1);
    expect_load_error(f->dir, 2, STORE_E_CHECKSUM, "shard-00003.tls", -1);
}

/* The header is checked before the whole-file checksum: a flipped header
 * byte is a HEADER error, at the magic for bytes 0..7 and at the header
 * checksum (56) for the others. */
static void test_flipped_header_byte(void **state)
{
    struct fixture *f = *state;
    flip_byte(f->dir, "shard-00002.tls", 33); /* entries */
    expect_load_error(f->dir, 2, STORE_E_HEADER, "shard-00002.tls", 56);
    flip_byte(f->dir, "shard-00002.tls", 33);
    flip_byte(f->dir, "shard-00002.tls", 60); /* the header checksum itself */
    expect_load_error(f->dir, 2, STORE_E_HEADER, "shard-00002.tls", 56);
    flip_byte(f->dir, "shard-00002.tls", 60);
    flip_byte(f->dir, "shard-00002.tls", 45); /* padding */
    expect_load_error(f->dir, 2, STORE_E_HEADER, "shard-00002.tls", 56);
    flip_byte(f->dir, "shard-00002.tls", 45);
    flip_byte(f->dir, "shard-00002.tls", 3); /* magic */
    expect_load_error(f->dir, 2, STORE_E_HEADER, "shard-00002.tls", 0);
    flip_byte(f->dir, "shard-00002.tls", 3);
    test_fixture_loads(state); /* restored */
}

static void test_truncated_shard(void **state)
{
    struct fixture *f = *state;
    char p[PATH_MAX];
    path_of(p, f->dir, "shard-00000.tls");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size - 5), 0);
    expect_load_error(f->dir, 2, STORE_E_TRUNCATED, "shard-00000.tls", st.st_size - 5);
    assert_int_equal(truncate(p, 10), 0); /* not even a header */
    expect_load_error(f->dir, 1, STORE_E_TRUNCATED, "shard-00000.tls", 10);
    assert_int_equal(truncate(p, 0), 0);
    expect_load_error(f->dir, 1, STORE_E_TRUNCATED, "shard-00000.tls", 0);
}

static void test_appended_bytes(void **state)
{
    struct fixture *f = *state;
    size_t len;
    uint8_t *b = read_file(f->dir, "shard-00003.tls", &len);
    b = realloc(b, len + 3);
    memset(b + len, 0, 3);
    write_file(f->dir, "shard-00003.tls", b, len + 3);
    free(b);
    expect_load_error(f->dir, 2, STORE_E_SIZE, "shard-00003.tls", (int64_t)len);
}

static void test_shard_of_other_snapshot(void **state)
{
    struct fixture *f = *state;
    /* same keys, other values: same sizes, same headers, other bytes */
    char other[PATH_MAX];
    path_of(other, f->root, "other");
    store_t *s2 = make_store(FIX_K, STORE_DTYPE_F32, 4, 2000, 11, 99);
    store_meta_t meta = test_meta("fixture", 6);
    assert_int_equal(store_snapshot_write(s2, other, &meta, NULL), 0);
    size_t len;
    uint8_t *b = read_file(other, "shard-00002.tls", &len);
    write_file(f->dir, "shard-00002.tls", b, len);
    free(b);
    expect_load_error(f->dir, 2, STORE_E_CHECKSUM, "shard-00002.tls", -1);
    store_destroy(s2);
}

static void test_missing_shard(void **state)
{
    struct fixture *f = *state;
    char p[PATH_MAX];
    path_of(p, f->dir, "shard-00002.tls");
    assert_int_equal(unlink(p), 0);
    expect_load_error(f->dir, 2, STORE_E_IO, "shard-00002.tls", -1);
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load(f->dir, 1, &s, NULL, &err), -EIO);
    assert_non_null(strstr(err.msg, "No such file"));
}

/* A FIFO in a shard file's place must be refused, not block the loader. */
static void test_shard_is_fifo(void **state)
{
    struct fixture *f = *state;
    char p[PATH_MAX];
    path_of(p, f->dir, "shard-00001.tls");
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0644), 0);
    expect_load_error(f->dir, 2, STORE_E_IO, "shard-00001.tls", -1);
    path_of(p, f->dir, "MANIFEST");
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0644), 0);
    expect_load_error(f->dir, 2, STORE_E_MANIFEST, "MANIFEST", -1);
}

static void test_missing_manifest(void **state)
{
    struct fixture *f = *state;
    char p[PATH_MAX];
    path_of(p, f->dir, "MANIFEST");
    assert_int_equal(unlink(p), 0);
    expect_load_error(f->dir, 2, STORE_E_NO_MANIFEST, "MANIFEST", -1);
    store_error_t err;
    assert_int_equal(store_snapshot_read_meta(f->dir, NULL, NULL, &err), -ENOENT);
    assert_int_equal(err.code, STORE_E_NO_MANIFEST);
}

static void test_corrupt_manifest(void **state)
{
    struct fixture *f = *state;
    size_t len;
    free(read_file(f->dir, "MANIFEST", &len));
    flip_byte(f->dir, "MANIFEST", len / 2);
    expect_load_error(f->dir, 2, STORE_E_MANIFEST, "MANIFEST", -1);
    store_error_t err;
    assert_int_equal(store_snapshot_read_meta(f->dir, NULL, NULL, &err), -EBADMSG);
    assert_int_equal(err.code, STORE_E_MANIFEST);
    write_file(f->dir, "MANIFEST", "", 0);
    expect_load_error(f->dir, 1, STORE_E_MANIFEST, "MANIFEST", -1);
}

/* ---- crafted snapshots ------------------------------------------------------- */

/* Encodes a shard header the way the format comment in snapshot.c draws it. */
static void encode_header(uint8_t h[64], uint32_t index, uint32_t count, uint32_t K,
                          store_dtype_t dt, uint64_t entries)
{
    memset(h, 0, 64);
    memcpy(h, "TLSHARD1", 8);
    uint32_t f[6] = {1, index, count, K, (uint32_t)dt, K * (dt == STORE_DTYPE_F16 ? 2u : 4u)};
    memcpy(h + 8, f, sizeof f); /* little-endian host */
    memcpy(h + 32, &entries, 8);
    uint64_t x = XXH3_64bits(h, 56);
    memcpy(h + 56, &x, 8);
}

static void reseal_header(uint8_t h[64])
{
    uint64_t x = XXH3_64bits(h, 56);
    memcpy(h + 56, &x, 8);
}

/* A crafted snapshot being built: per shard a file image. */
struct craft {
    uint32_t K, shards;
    store_dtype_t dt;
    size_t rec;
    uint8_t *file[8];
    size_t len[8], cap[8];
    store_t *router; /* a store with the same shard count: for store_shard_of */
    uint64_t parent; /* parent_version in the manifest */
    uint64_t rng;
};

static void craft_init(struct craft *c, uint32_t K, store_dtype_t dt, uint32_t shards)
{
    memset(c, 0, sizeof *c);
    c->K = K;
    c->dt = dt;
    c->shards = shards;
    c->rec = 8 + K * (dt == STORE_DTYPE_F16 ? 2u : 4u);
    c->rng = 1234;
    store_options_t opt = {.value_floats = K, .dtype = dt, .shards = shards};
    assert_int_equal(store_create(&opt, &c->router), 0);
    for (uint32_t i = 0; i < shards; i++) {
        c->file[i] = calloc(1, 64);
        c->len[i] = 64;
        c->cap[i] = 64;
    }
}

/* A fresh key that shard `shard` owns. */
static uint64_t craft_key(struct craft *c, uint32_t shard)
{
    for (;;) {
        uint64_t k = store_splitmix64(&c->rng);
        if (store_shard_of(c->router, k) == shard)
            return k;
    }
}

/* Appends record {key, value j = base + j} to shard file i; returns its
 * offset. */
static size_t craft_add(struct craft *c, uint32_t i, uint64_t key, float base)
{
    if (c->len[i] + c->rec > c->cap[i]) {
        c->cap[i] = 2 * (c->len[i] + c->rec);
        c->file[i] = realloc(c->file[i], c->cap[i]);
        assert_non_null(c->file[i]);
    }
    uint8_t *p = c->file[i] + c->len[i];
    memcpy(p, &key, 8);
    for (uint32_t j = 0; j < c->K; j++) {
        if (c->dt == STORE_DTYPE_F32) {
            float v = base + (float)j;
            memcpy(p + 8 + 4 * j, &v, 4);
        } else {
            uint16_t h = store_f32_to_f16(base + (float)j);
            memcpy(p + 8 + 2 * j, &h, 2);
        }
    }
    size_t off = c->len[i];
    c->len[i] += c->rec;
    return off;
}

/* Sets a value's raw bits (f32 or f16) in the record at off of file i. */
static void craft_set_bits(struct craft *c, uint32_t i, size_t off, uint32_t j, uint32_t bits)
{
    uint8_t *p = c->file[i] + off + 8;
    if (c->dt == STORE_DTYPE_F32)
        memcpy(p + 4 * j, &bits, 4);
    else {
        uint16_t h = (uint16_t)bits;
        memcpy(p + 2 * j, &h, 2);
    }
}

/* Writes headers (entries from the file lengths unless already set),
 * shard files and a matching MANIFEST into dir. */
static void craft_write(struct craft *c, const char *dir, int keep_headers)
{
    manifest_shard_t ms[8];
    memset(ms, 0, sizeof ms);
    for (uint32_t i = 0; i < c->shards; i++) {
        uint64_t entries = (c->len[i] - 64) / c->rec;
        if (!keep_headers)
            encode_header(c->file[i], i, c->shards, c->K, c->dt, entries);
        ms[i].index = i;
        snprintf(ms[i].file, sizeof ms[i].file, "shard-%05u.tls", i);
        ms[i].entries = entries;
        ms[i].bytes = c->len[i];
        ms[i].xxh3 = XXH3_64bits(c->file[i], c->len[i]);
        write_file(dir, ms[i].file, c->file[i], c->len[i]);
    }
    manifest_t m = {
        .format_version = MANIFEST_FORMAT_VERSION,
        .meta = test_meta("crafted", 9),
        .value_floats = c->K,
        .dtype = c->dt,
        .shard_count = c->shards,
        .shards = ms,
    };
    m.meta.parent_version = c->parent;
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[256];
    if (store__manifest_encode(&m, &buf, &len, why, sizeof why) != 0)
        print_error("store__manifest_encode: %s\n", why);
    assert_non_null(buf);
    write_file(dir, "MANIFEST", buf, len);
    free(buf);
}

static void craft_free(struct craft *c)
{
    for (uint32_t i = 0; i < c->shards; i++)
        free(c->file[i]);
    store_destroy(c->router);
}

/* Two shards, a few good records each. */
static void craft_basic(struct craft *c, uint32_t K, store_dtype_t dt)
{
    craft_init(c, K, dt, 2);
    for (int r = 0; r < 5; r++) {
        craft_add(c, 0, craft_key(c, 0), (float)r);
        craft_add(c, 1, craft_key(c, 1), (float)r + 0.5f);
    }
}

static void test_crafted_valid(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 3, STORE_DTYPE_F16);
    craft_write(&c, dir, 0);
    store_t *s = NULL;
    store_error_t err;
    int rc = store_snapshot_load(dir, 2, &s, NULL, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(store_count(s), 10);
    assert_true(store_hash_seed(s) != 0); /* none recorded: a random one */
    uint64_t key;
    memcpy(&key, c.file[1] + 64 + 2 * c.rec, 8);
    float v[3];
    assert_int_equal(store_lookup(s, key, v), 1);
    assert_true(v[0] == 2.5f && v[1] == 3.5f && v[2] == 4.5f);
    store_destroy(s);
    craft_free(&c);
    test_rm_rf(dir);
}

static void test_crafted_duplicate(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 2, STORE_DTYPE_F32);
    uint64_t k;
    memcpy(&k, c.file[1] + 64 + c.rec, 8); /* shard 1's second key */
    craft_add(&c, 1, craft_key(&c, 1), 1);
    size_t off = craft_add(&c, 1, k, 2);
    craft_add(&c, 1, craft_key(&c, 1), 3);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 2, STORE_E_DUPLICATE, "shard-00001.tls", (int64_t)off);
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, NULL, &err), -EBADMSG);
    char want[64];
    snprintf(want, sizeof want, "key 0x%llx appears twice", (unsigned long long)k);
    assert_non_null(strstr(err.msg, want));
    craft_free(&c);
    test_rm_rf(dir);
}

/* Rewrites dir's MANIFEST with shard 0's xxh3 set to that of `file`. */
static void reseal_manifest(const char *dir, const uint8_t *file, size_t len)
{
    size_t mlen;
    uint8_t *mb = read_file(dir, "MANIFEST", &mlen);
    manifest_t m;
    char why[256];
    assert_int_equal(store__manifest_decode(mb, mlen, &m, why, sizeof why), 0);
    m.shards[0].xxh3 = XXH3_64bits(file, len);
    uint8_t *buf = NULL;
    size_t blen = 0;
    assert_int_equal(store__manifest_encode(&m, &buf, &blen, why, sizeof why), 0);
    write_file(dir, "MANIFEST", buf, blen);
    free(buf);
    free(mb);
    store__manifest_free(&m);
}

/* A snapshot as store_snapshot_write leaves it (bucket order, the writer's
 * hash seed: the loader's ordered fill takes it) with one record's key
 * repeated later, next to it or far away: the error names the later
 * record, as the exact second pass finds it. */
static void test_duplicate_in_written_snapshot(void **state)
{
    (void)state;
    char dir[PATH_MAX], snap[PATH_MAX];
    scratch_dir(dir);
    path_of(snap, dir, "v1");
    store_t *s = make_store(1, STORE_DTYPE_F32, 1, 20000, 5, 6);
    store_meta_t meta = test_meta("dup_model", 3);
    store_error_t err;
    assert_int_equal(store_snapshot_write(s, snap, &meta, &err), 0);
    size_t len, mlen;
    uint8_t *orig = read_file(snap, "shard-00000.tls", &len);
    uint8_t *morig = read_file(snap, "MANIFEST", &mlen);
    const size_t rec = 12, n = (len - 64) / rec;
    static const size_t pairs[][2] = {{100, 101}, {100, 102}, {7, 15000}, {15000, 19990}};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        size_t r = pairs[p][0], j = pairs[p][1];
        assert_true(j < n);
        uint8_t *b = malloc(len);
        assert_non_null(b);
        memcpy(b, orig, len);
        memcpy(b + 64 + j * rec, b + 64 + r * rec, 8);
        write_file(snap, "shard-00000.tls", b, len);
        reseal_manifest(snap, b, len);
        expect_load_error(snap, 1, STORE_E_DUPLICATE, "shard-00000.tls",
                          (int64_t)(64 + j * rec));
        free(b);
    }
    write_file(snap, "shard-00000.tls", orig, len);
    write_file(snap, "MANIFEST", morig, mlen);
    store_t *l = NULL;
    assert_int_equal(store_snapshot_load(snap, 1, &l, NULL, &err), 0);
    assert_same_store(s, l);
    store_destroy(l);
    free(orig);
    free(morig);
    store_destroy(s);
    test_rm_rf(dir);
}

static void test_crafted_wrong_shard(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 1, STORE_DTYPE_F32);
    size_t off = craft_add(&c, 0, craft_key(&c, 1), 7); /* shard 1's key in shard 0 */
    craft_add(&c, 0, craft_key(&c, 0), 8);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 2, STORE_E_WRONG_SHARD, "shard-00000.tls", (int64_t)off);
    craft_free(&c);
    test_rm_rf(dir);
}

static void test_crafted_nan_f32(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 4, STORE_DTYPE_F32);
    size_t off = craft_add(&c, 1, craft_key(&c, 1), 1);
    craft_set_bits(&c, 1, off, 2, 0x7fc00000u); /* quiet NaN */
    craft_add(&c, 1, craft_key(&c, 1), 2);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 2, STORE_E_VALUE, "shard-00001.tls", (int64_t)off);
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "NaN"));
    craft_free(&c);
    test_rm_rf(dir);
}

static void test_crafted_inf_f16(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 3, STORE_DTYPE_F16);
    size_t off = craft_add(&c, 0, craft_key(&c, 0), 1);
    craft_set_bits(&c, 0, off, 1, 0xfc00u); /* -inf */
    craft_write(&c, dir, 0);
    expect_load_error(dir, 1, STORE_E_VALUE, "shard-00000.tls", (int64_t)off);
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "-inf"));
    craft_free(&c);
    test_rm_rf(dir);
}

/* Errors come out in file order: a duplicate before a NaN wins. */
static void test_crafted_first_error_by_offset(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 1, STORE_DTYPE_F32);
    uint64_t k;
    memcpy(&k, c.file[0] + 64, 8);
    size_t dup = craft_add(&c, 0, k, 1);
    size_t nan = craft_add(&c, 0, craft_key(&c, 0), 1);
    craft_set_bits(&c, 0, nan, 0, 0x7f800001u);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 1, STORE_E_DUPLICATE, "shard-00000.tls", (int64_t)dup);
    craft_free(&c);
    test_rm_rf(dir);
}

static void test_crafted_header_entries_mismatch(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 2, STORE_DTYPE_F32);
    encode_header(c.file[0], 0, 2, 2, STORE_DTYPE_F32, 5);
    encode_header(c.file[1], 1, 2, 2, STORE_DTYPE_F32, 6); /* holds 5 */
    craft_write(&c, dir, 1);
    expect_load_error(dir, 2, STORE_E_MISMATCH, "shard-00001.tls", 32);
    store_error_t err;
    store_t *s = SENTINEL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "entries"));
    assert_non_null(strstr(err.msg, "6"));
    assert_non_null(strstr(err.msg, "5"));
    craft_free(&c);
    test_rm_rf(dir);
}

/* Shard 0's file under shard 1's name (same size): the header says so. */
static void test_crafted_swapped_shard_files(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 2, STORE_DTYPE_F32);
    encode_header(c.file[0], 0, 2, 2, STORE_DTYPE_F32, 5);
    memcpy(c.file[1], c.file[0], c.len[0]);
    craft_write(&c, dir, 1);
    expect_load_error(dir, 2, STORE_E_MISMATCH, "shard-00001.tls", 12);
    craft_free(&c);
    test_rm_rf(dir);
}

static void test_crafted_header_fields(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 2, STORE_DTYPE_F32);
    struct {
        size_t at;      /* field offset */
        uint32_t value; /* new value */
        store_errc_t code;
    } cases[] = {
        {8, 2, STORE_E_HEADER},    /* format_version */
        {12, 2, STORE_E_HEADER},   /* shard_index >= count */
        {16, 3, STORE_E_HEADER},   /* shard_count not a power of two */
        {16, 4, STORE_E_MISMATCH}, /* shard_count of another snapshot */
        {20, 0, STORE_E_HEADER},   /* value_floats */
        {20, 4, STORE_E_MISMATCH}, /* value_floats != manifest's (and value_bytes) */
        {24, 2, STORE_E_HEADER},   /* dtype */
        {28, 12, STORE_E_HEADER},  /* value_bytes inconsistent */
        {44, 1, STORE_E_HEADER},   /* padding */
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        encode_header(c.file[0], 0, 2, 2, STORE_DTYPE_F32, 5);
        encode_header(c.file[1], 1, 2, 2, STORE_DTYPE_F32, 5);
        memcpy(c.file[1] + cases[t].at, &cases[t].value, 4);
        if (cases[t].at == 20 && cases[t].value == 4) {
            uint32_t vb = 16;
            memcpy(c.file[1] + 28, &vb, 4);
        }
        reseal_header(c.file[1]);
        craft_write(&c, dir, 1);
        expect_load_error(dir, 2, cases[t].code, "shard-00001.tls", (int64_t)cases[t].at);
    }
    /* bad magic with a valid header checksum */
    encode_header(c.file[1], 1, 2, 2, STORE_DTYPE_F32, 5);
    memcpy(c.file[1], "TLSHARD2", 8);
    reseal_header(c.file[1]);
    craft_write(&c, dir, 1);
    expect_load_error(dir, 2, STORE_E_HEADER, "shard-00001.tls", 0);
    craft_free(&c);
    test_rm_rf(dir);
}

/* A delta's manifest is listed by read_meta but not loaded as a model. */
static void test_crafted_delta_refused(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_basic(&c, 1, STORE_DTYPE_F32);
    c.parent = 8;
    craft_write(&c, dir, 0);
    expect_load_error(dir, 2, STORE_E_MANIFEST, "MANIFEST", -1);
    store_meta_t meta;
    uint64_t entries = 0;
    store_error_t err;
    assert_int_equal(store_snapshot_read_meta(dir, &meta, &entries, &err), 0);
    assert_int_equal(meta.parent_version, 8);
    assert_int_equal(entries, 10);
    craft_free(&c);
    test_rm_rf(dir);
}

/* Errors far into a file (several mmap windows in, records straddling the
 * windows' page-aligned starts) still come with their exact offsets. */
static void test_crafted_errors_in_later_windows(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    struct craft c;
    craft_init(&c, 3, STORE_DTYPE_F16, 1); /* 14-byte records */
    for (int r = 0; r < 400000; r++)
        craft_add(&c, 0, craft_key(&c, 0), (float)(r % 1000));
    assert_true(c.len[0] > (4u << 20)); /* several windows */
    craft_write(&c, dir, 0);
    store_t *s = NULL;
    assert_int_equal(store_snapshot_load(dir, 1, &s, NULL, NULL), 0);
    assert_int_equal(store_count(s), 400000);
    store_destroy(s);

    size_t nan = 64 + 345679 * c.rec; /* a value: NaN */
    craft_set_bits(&c, 0, nan, 2, 0x7e01u);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 1, STORE_E_VALUE, "shard-00000.tls", (int64_t)nan);

    size_t dup = 64 + 234567 * c.rec; /* before it: a duplicate of record 0 */
    memcpy(c.file[0] + dup, c.file[0] + 64, 8);
    craft_write(&c, dir, 0);
    expect_load_error(dir, 2, STORE_E_DUPLICATE, "shard-00000.tls", (int64_t)dup);
    craft_free(&c);
    test_rm_rf(dir);
}

/* Many shards, two threads, one bad shard late in the order: the error is
 * that shard's, and nothing leaks (the sanitizer build checks). */
static void test_parallel_error(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    scratch_dir(dir);
    store_t *s = make_store(2, STORE_DTYPE_F16, 16, 20000, 5, 6);
    store_meta_t meta = test_meta("m", 1);
    assert_int_equal(store_snapshot_write(s, dir, &meta, NULL), 0);
    flip_byte(dir, "shard-00013.tls", 64 + 12 * 3);
    for (int threads = 1; threads <= 4; threads++)
        expect_load_error(dir, threads, STORE_E_CHECKSUM, "shard-00013.tls", -1);
    store_destroy(s);
    test_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_k1_f32_1shard),
        cmocka_unit_test(test_round_trip_k1_f32_16shards),
        cmocka_unit_test(test_round_trip_k16_f16_1shard),
        cmocka_unit_test(test_round_trip_k16_f16_16shards),
        cmocka_unit_test(test_round_trip_small_shapes),
        cmocka_unit_test(test_reserve_exact_has_loader_layout),
        cmocka_unit_test(test_created_now_and_threads_default),
        cmocka_unit_test(test_write_refuses_existing_manifest),
        cmocka_unit_test(test_write_refuses_bad_meta),
        cmocka_unit_test(test_write_refuses_nan),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test_setup_teardown(test_fixture_loads, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_flipped_record_byte, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_flipped_last_byte, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_flipped_header_byte, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_truncated_shard, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_appended_bytes, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_shard_of_other_snapshot, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_missing_shard, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_shard_is_fifo, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_missing_manifest, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_manifest, fixture_setup, fixture_teardown),
        cmocka_unit_test(test_crafted_valid),
        cmocka_unit_test(test_crafted_duplicate),
        cmocka_unit_test(test_duplicate_in_written_snapshot),
        cmocka_unit_test(test_crafted_wrong_shard),
        cmocka_unit_test(test_crafted_nan_f32),
        cmocka_unit_test(test_crafted_inf_f16),
        cmocka_unit_test(test_crafted_first_error_by_offset),
        cmocka_unit_test(test_crafted_header_entries_mismatch),
        cmocka_unit_test(test_crafted_swapped_shard_files),
        cmocka_unit_test(test_crafted_header_fields),
        cmocka_unit_test(test_crafted_delta_refused),
        cmocka_unit_test(test_extras_round_trip),
        cmocka_unit_test(test_extras_refused),
        cmocka_unit_test(test_crafted_errors_in_later_windows),
        cmocka_unit_test(test_parallel_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
