/*
 * test_snapshot_crafted.c — hostile snapshots built here from the documented
 * file format with this file's own header encoder, store__manifest_encode and
 * XXH3, so that the checksums are right and the loader has to look at the
 * records: duplicate key, key of the wrong shard, NaN/Inf, header fields,
 * deltas, errors in later windows, errors under parallel loading.
 *
 * Every refusal is checked for its exact code, file and byte offset, and for
 * leaving *out untouched.  Helpers: snapshot_testutil.h; scratch directories go
 * under $TL_TEST_TMP.
 */

#include "snapshot_testutil.h"

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
        cmocka_unit_test(test_crafted_errors_in_later_windows),
        cmocka_unit_test(test_parallel_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
