/*
 * test_delta.c — delta versions (store/delta.h): the writer's round trip
 * (last call wins, sorted files, counts), the reader's refusal of every kind
 * of bad delta (corrupt byte, truncated file, unsorted, duplicate, NaN, a
 * key both upserted and deleted, a full version, wrong header fields), the
 * full loader's refusal of a delta, apply and its refusals (wrong parent,
 * K, shards, model, a delete of an absent key), diff + apply == NEW.
 * Repositories (chains, listings, kill -9 of a writer): test_delta_repo.c.
 *
 * Scratch directories go under $TL_TEST_TMP (created when missing).
 */
#define _GNU_SOURCE

#include "tests/store/delta_testutil.h"

/* ---- crafted delta directories ------------------------------------------- */

/* One shard, K=1, f32: upserts (keys, values) then deletes, as given (no
 * sorting), with a correct header and manifest unless told otherwise. */
struct craft {
    uint64_t up_keys[16];
    float up_vals[16];
    size_t nu;
    uint64_t del_keys[16];
    size_t nd;
};

static void craft_write(const struct craft *c, const char *dir)
{
    test_rm_rf(dir);
    test_mkdir_p(dir);
    manifest_shard_t sh;
    memset(&sh, 0, sizeof sh);
    manifest_t m;
    memset(&m, 0, sizeof m);
    m.format_version = MANIFEST_FORMAT_VERSION_DELTA;
    m.kind = MANIFEST_KIND_DELTA;
    snprintf(m.meta.model_name, sizeof m.meta.model_name, "crafted");
    m.meta.version = 2;
    m.meta.parent_version = 1;
    m.value_floats = 1;
    m.dtype = STORE_DTYPE_F32;
    m.shard_count = 1;
    m.shards = &sh;
    snprintf(sh.file, sizeof sh.file, DELTA_SHARD_NAME_FMT, 0u);
    sh.entries = c->nu;
    sh.deletes = c->nd;
    size_t len = 64 + c->nu * 12 + c->nd * 8;
    uint8_t *buf = calloc(1, len);
    store__delta_header_encode(&m, 0, c->nu, c->nd, buf);
    for (size_t i = 0; i < c->nu; i++) {
        memcpy(buf + 64 + i * 12, &c->up_keys[i], 8);
        memcpy(buf + 64 + i * 12 + 8, &c->up_vals[i], 4);
    }
    for (size_t i = 0; i < c->nd; i++)
        memcpy(buf + 64 + c->nu * 12 + i * 8, &c->del_keys[i], 8);
    sh.bytes = len;
    sh.xxh3 = XXH3_64bits(buf, len);
    char p[PATH_MAX];
    path2(p, dir, sh.file);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    uint8_t *mb = NULL;
    size_t mlen = 0;
    char why[256];
    int rc = store__manifest_encode(&m, &mb, &mlen, why, sizeof why);
    if (rc != 0)
        print_error("encode: %s\n", why);
    assert_int_equal(rc, 0);
    path2(p, dir, MANIFEST_FILE_NAME);
    f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(mb, 1, mlen, f), mlen);
    fclose(f);
    free(mb);
    free(buf);
}

static void expect_open_error(const char *dir, store_errc_t code, const char *needle)
{
    store_delta_t *d = (store_delta_t *)0x1;
    store_error_t err;
    int rc = store_delta_open(dir, &d, &err);
    expect_err(rc, &err, code, needle);
    assert_null(d);
}

/* ---- tests --------------------------------------------------------------- */

static void test_shard_of_matches_store(void **state)
{
    (void)state;
    uint32_t counts[] = {1, 2, 16, 256};
    for (size_t c = 0; c < 4; c++) {
        store_options_t o = {.value_floats = 1, .shards = counts[c], .expected_keys = 1 << 20};
        store_t *s = NULL;
        assert_int_equal(store_create(&o, &s), 0);
        for (uint64_t k = 0; k < 20000; k++) {
            uint64_t key = k * 0x9e3779b97f4a7c15ULL;
            assert_int_equal(store__shard_of_key(key, counts[c]), store_shard_of(s, key));
        }
        store_destroy(s);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    char root[PATH_MAX], base[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(base, root, "1");
    path2(dir, root, "2");
    store_t *a = make_store(3000, 0, STORE_DTYPE_F32, 0x1234);
    store_meta_t ma = meta_of("rt", 1);
    store_error_t err;
    assert_int_equal(store_snapshot_write(a, base, &ma, &err), 0);

    store_delta_layout_t l;
    store_delta_layout_of(a, &ma, &l);
    assert_int_equal(l.hash_seed, 0x1234);
    store_delta_writer_t *w = NULL;
    assert_int_equal(store_delta_begin(dir, &l, 1, 2, "unit test", &w, &err), 0);
    float v[K], nan[K] = {1, NAN, 2};
    /* descending, so the writer must sort */
    for (uint64_t k = 4000; k >= 2001; k--) {
        value_of(k, 1, v);
        assert_int_equal(store_delta_put(w, k, v), 0);
    }
    for (uint64_t k = 1; k <= 500; k++)
        assert_int_equal(store_delta_del(w, k), 0);
    /* last wins: 10 deleted then upserted; 2500 upserted then deleted */
    value_of(10, 1, v);
    assert_int_equal(store_delta_put(w, 10, v), 0);
    assert_int_equal(store_delta_del(w, 2500), 0);
    assert_int_equal(store_delta_put(w, 7777, nan), -EINVAL);
    assert_int_equal(store_delta_commit(w, &err), 0);

    store_delta_t *d = NULL;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    const store_delta_info_t *in = store_delta_info(d);
    assert_int_equal(in->meta.version, 2);
    assert_int_equal(in->meta.parent_version, 1);
    assert_string_equal(in->producer, "unit test");
    assert_string_equal(in->meta.model_name, "rt");
    assert_int_equal(in->layout.value_floats, K);
    assert_int_equal(in->upserts, 2000 - 1 + 1); /* 2001..4000 minus 2500, plus 10 */
    assert_int_equal(in->deletes, 499 + 1);      /* 1..500 minus 10, plus 2500 */
    assert_true(in->meta.created_unix > 0);
    uint64_t su = 0, sd = 0;
    struct collect col = {0};
    for (uint32_t i = 0; i < SHARDS; i++) {
        uint64_t u, dd;
        assert_int_equal(store_delta_shard_counts(d, i, &u, &dd), 0);
        su += u;
        sd += dd;
        memset(&col, 0, sizeof col);
        assert_int_equal(store_delta_foreach(d, i, col_up, col_del, &col), 0);
        assert_int_equal(col.ups, u);
        assert_int_equal(col.dels, dd);
        assert_int_equal(col.bad, 0);
    }
    assert_int_equal(su, in->upserts);
    assert_int_equal(sd, in->deletes);
    assert_int_equal(store_delta_shard_counts(d, SHARDS, NULL, NULL), -EINVAL);

    /* the expected model, built by hand */
    store_t *want = make_store(3000, 0, STORE_DTYPE_F32, 0);
    for (uint64_t k = 1; k <= 500; k++)
        if (k != 10)
            store_delete(want, k);
    value_of(10, 1, v);
    store_upsert(want, 10, v);
    for (uint64_t k = 2001; k <= 4000; k++) {
        value_of(k, 1, v);
        if (k != 2500)
            store_upsert(want, k, v);
    }
    store_delete(want, 2500);

    store_t *b = NULL;
    store_meta_t mb;
    assert_int_equal(store_snapshot_load(base, 1, &b, &mb, &err), 0);
    assert_int_equal(store_delta_apply(b, &mb, d, &err), 0);
    assert_int_equal(mb.version, 2);
    assert_int_equal(mb.parent_version, 0);
    assert_stores_equal(b, want);
    assert_stores_equal(want, b);

    /* the same delta again: the store now holds version 2, not its parent */
    expect_err(store_delta_apply(b, &mb, d, &err), &err, STORE_E_MISMATCH,
               "against version 1");
    store_delta_close(d);
    store_destroy(b);
    store_destroy(want);
    store_destroy(a);
    test_rm_rf(root);
}

static void test_f16_round_trip(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "5");
    store_t *a = make_store(100, 0, STORE_DTYPE_F16, 0);
    store_meta_t ma = meta_of("h", 4);
    store_delta_layout_t l;
    store_delta_layout_of(a, &ma, &l);
    store_delta_writer_t *w = NULL;
    store_error_t err;
    assert_int_equal(store_delta_begin(dir, &l, 4, 5, NULL, &w, &err), 0);
    float big[K] = {1e6f, 0, 0}, v[K];
    assert_int_equal(store_delta_put(w, 1, big), -EINVAL); /* overflows fp16 */
    for (uint64_t k = 50; k < 150; k++) {
        value_of(k, 1, v);
        assert_int_equal(store_delta_put(w, k, v), 0);
    }
    assert_int_equal(store_delta_commit(w, &err), 0);
    store_delta_t *d = NULL;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    assert_string_equal(store_delta_info(d)->producer, "");
    assert_int_equal(store_delta_apply(a, &ma, d, &err), 0);
    assert_int_equal(store_count(a), 149);
    float got[K];
    value_of(120, 1, v);
    assert_int_equal(store_lookup(a, 120, got), 1);
    assert_memory_equal(got, v, sizeof v); /* eighths: exact in fp16 */
    store_delta_close(d);
    store_destroy(a);
    test_rm_rf(root);
}

static void test_begin_refusals(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    store_delta_layout_t l;
    layout_for(&l, "m", K, SHARDS);
    store_delta_writer_t *w = NULL;
    store_error_t err;
    expect_err(store_delta_begin(root, &l, 1, 2, NULL, &w, &err), &err, STORE_E_EXISTS,
               "exists");
    path2(dir, root, "2");
    expect_err(store_delta_begin(dir, &l, 2, 2, NULL, &w, &err), &err, STORE_E_INVALID, "differ");
    expect_err(store_delta_begin(dir, &l, 0, 2, NULL, &w, &err), &err, STORE_E_INVALID, "> 0");
    l.shards = 3;
    expect_err(store_delta_begin(dir, &l, 1, 2, NULL, &w, &err), &err, STORE_E_INVALID,
               "power of two");
    l.shards = SHARDS;
    expect_err(store_delta_begin(dir, &l, 1, 2, "bad\nproducer", &w, &err), &err,
               STORE_E_INVALID, "producer");
    path2(dir, root, ".hidden");
    expect_err(store_delta_begin(dir, &l, 1, 2, NULL, &w, &err), &err, STORE_E_INVALID, "'.'");
    assert_null(w);
    /* abort leaves nothing behind */
    path2(dir, root, "9");
    assert_int_equal(store_delta_begin(dir, &l, 1, 9, NULL, &w, &err), 0);
    assert_int_equal(store_delta_del(w, 5), 0);
    store_delta_abort(w);
    assert_int_equal(store_version_list(root, NULL, 0), 0);
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0);
    /* the target appears between begin and commit */
    assert_int_equal(store_delta_begin(dir, &l, 1, 9, NULL, &w, &err), 0);
    test_mkdir_p(dir);
    expect_err(store_delta_commit(w, &err), &err, STORE_E_EXISTS, "exists");
    DIR *dp = opendir(root);
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        assert_false(store_version_is_temp(e->d_name)); /* the temporary was removed */
    closedir(dp);
    test_rm_rf(root);
}

/* A delta written properly, then damaged on disk. */
static void test_damaged_files(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX], p[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "2");
    store_delta_layout_t l;
    layout_for(&l, "m", K, SHARDS);
    write_delta(dir, &l, 1, 2, 1, 200, 300, 400);
    char file[64];
    snprintf(file, sizeof file, DELTA_SHARD_NAME_FMT, 2u);
    path2(p, dir, file);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);

    /* a flipped byte in a record */
    int fd = open(p, O_RDWR);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, 70), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, 70), 1);
    expect_open_error(dir, STORE_E_CHECKSUM, file);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, 70), 1);
    store_delta_t *d = NULL;
    store_error_t err;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    store_delta_close(d);
    /* truncated */
    assert_int_equal(ftruncate(fd, st.st_size - 5), 0);
    expect_open_error(dir, STORE_E_TRUNCATED, file);
    /* longer */
    assert_int_equal(ftruncate(fd, st.st_size + 8), 0);
    expect_open_error(dir, STORE_E_SIZE, file);
    close(fd);
    /* missing */
    unlink(p);
    expect_open_error(dir, STORE_E_IO, "No such file"); /* as the snapshot loader */
    /* a corrupt manifest */
    test_rm_rf(dir);
    write_delta(dir, &l, 1, 2, 1, 200, 300, 400);
    path2(p, dir, MANIFEST_FILE_NAME);
    fd = open(p, O_RDWR);
    assert_int_equal(pread(fd, &b, 1, 20), 1);
    b ^= 1;
    assert_int_equal(pwrite(fd, &b, 1, 20), 1);
    close(fd);
    expect_open_error(dir, STORE_E_MANIFEST, "checksum");
    /* no manifest */
    unlink(p);
    expect_open_error(dir, STORE_E_NO_MANIFEST, "MANIFEST");
    test_rm_rf(root);
}

static void test_crafted_refusals(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "2");
    /* keys owned by shard 0 of 1: any */
    struct craft ok = {.up_keys = {5, 9, 12}, .up_vals = {1, 2, 3}, .nu = 3,
                       .del_keys = {1, 7}, .nd = 2};
    craft_write(&ok, dir);
    store_delta_t *d = NULL;
    store_error_t err;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    store_delta_close(d);

    struct craft c = ok;
    c.up_keys[1] = 13; /* 5, 13, 12: unsorted */
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_DUPLICATE, "out of order");
    c = ok;
    c.up_keys[1] = 5; /* duplicate upsert */
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_DUPLICATE, "appears twice");
    c = ok;
    c.del_keys[1] = 1; /* duplicate delete */
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_DUPLICATE, "deleted key 0x1 appears twice");
    c = ok;
    c.del_keys[1] = 9; /* deleted and upserted */
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_DUPLICATE, "deleted and also upserted");
    c = ok;
    c.up_vals[2] = NAN;
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_VALUE, "NaN");
    c = ok;
    c.up_vals[0] = -INFINITY;
    craft_write(&c, dir);
    expect_open_error(dir, STORE_E_VALUE, "-inf");

    /* the offset names the record */
    c = ok;
    c.up_keys[2] = 9;
    craft_write(&c, dir);
    d = NULL;
    int rc = store_delta_open(dir, &d, &err);
    assert_int_equal(rc, -EBADMSG);
    assert_int_equal(err.offset, 64 + 2 * 12);
    assert_string_equal(err.file, "delta-00000.tld");
    test_rm_rf(root);
}

/* A full snapshot is not a delta, and a delta is not a full snapshot. */
static void test_kinds_refused(void **state)
{
    (void)state;
    char root[PATH_MAX], full[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(full, root, "1");
    path2(dir, root, "2");
    store_t *a = make_store(100, 0, STORE_DTYPE_F32, 0);
    store_meta_t ma = meta_of("k", 1);
    store_error_t err;
    assert_int_equal(store_snapshot_write(a, full, &ma, &err), 0);
    expect_open_error(full, STORE_E_MANIFEST, "version 1 is full, not a delta");
    store_delta_layout_t l;
    store_delta_layout_of(a, &ma, &l);
    write_delta(dir, &l, 1, 2, 1, 50, 60, 70);
    store_t *s = NULL;
    expect_err(store_snapshot_load(dir, 1, &s, NULL, &err), &err, STORE_E_MANIFEST,
               "version 2 is a delta of 1");
    assert_null(s);
    assert_non_null(strstr(err.msg, "chain"));
    /* listings still describe it */
    store_meta_t m;
    uint64_t entries = 0;
    assert_int_equal(store_snapshot_read_meta(dir, &m, &entries, &err), 0);
    assert_int_equal(m.parent_version, 1);
    assert_int_equal(entries, 49);
    store_destroy(a);
    test_rm_rf(root);
}

static void test_apply_refusals(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    store_t *a = make_store(100, 0, STORE_DTYPE_F32, 0x77);
    store_meta_t ma = meta_of("ap", 1);
    store_error_t err;
    store_delta_t *d = NULL;
    store_delta_layout_t l;

    struct {
        const char *name;
        uint32_t k, shards;
        uint64_t seed, parent;
        uint64_t dfrom, dto;
        const char *needle;
    } cases[] = {
        {"ap", K, SHARDS, 0x77, 9, 0, 0, "against version 9"},
        {"ap", 2, SHARDS, 0x77, 1, 0, 0, "K 2 vs 3"},
        {"ap", K, 8, 0x77, 1, 0, 0, "shard count 8 vs 4"},
        {"other", K, SHARDS, 0x77, 1, 0, 0, "model \"other\" vs \"ap\""},
        {"ap", K, SHARDS, 0x77, 1, 95, 105, "does not hold"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%zu", 100 + i);
        path2(dir, root, name);
        layout_for(&l, cases[i].name, cases[i].k, cases[i].shards);
        l.hash_seed = cases[i].seed;
        write_delta(dir, &l, cases[i].parent, 100 + i, 1, 20, cases[i].dfrom, cases[i].dto);
        assert_int_equal(store_delta_open(dir, &d, &err), 0);
        expect_err(store_delta_apply(a, &ma, d, &err), &err, STORE_E_MISMATCH, cases[i].needle);
        store_delta_close(d);
        /* nothing changed */
        assert_int_equal(store_count(a), 100);
        assert_int_equal(ma.version, 1);
        float v[K], got[K];
        value_of(5, 0, v);
        assert_int_equal(store_lookup(a, 5, got), 1);
        assert_memory_equal(got, v, sizeof v);
    }
    /* another hash seed does not refuse it: the seed places keys inside a
     * shard, it does not choose the shard */
    path2(dir, root, "200");
    layout_for(&l, "ap", K, SHARDS);
    l.hash_seed = 0x78;
    write_delta(dir, &l, 1, 200, 1, 20, 0, 0);
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    assert_int_equal(store_delta_info(d)->layout.hash_seed, 0x78);
    assert_int_equal(store_delta_apply(a, &ma, d, &err), 0);
    assert_int_equal(ma.version, 200);
    store_delta_close(d);
    store_destroy(a);
    test_rm_rf(root);
}

/* diff(A, B) applied to A gives B; the producer and versions are recorded. */
static void test_diff_apply(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "7");
    store_t *a = make_store(5000, 0, STORE_DTYPE_F32, 0x10);
    store_t *b = make_store(6000, 0, STORE_DTYPE_F32, 0x20);
    float v[K];
    for (uint64_t k = 1; k <= 1000; k++)
        store_delete(b, k);
    for (uint64_t k = 2000; k < 2100; k++) {
        value_of(k, 5, v);
        store_upsert(b, k, v);
    }
    float zero[K] = {0, 0, 0}, negzero[K] = {-0.0f, 0, 0};
    store_upsert(a, 4000, zero);
    store_upsert(b, 4000, negzero); /* bits differ from +0.0: an upsert */
    store_meta_t ma = meta_of("df", 6), mb = meta_of("df", 7);
    uint64_t ups = 0, dels = 0;
    store_error_t err;
    assert_int_equal(store_delta_diff(a, &ma, b, &mb, dir, "tlsnap diff", &ups, &dels, &err), 0);
    assert_int_equal(ups, 1000 + 100 + 1);
    assert_int_equal(dels, 1000);
    store_delta_t *d = NULL;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    assert_string_equal(store_delta_info(d)->producer, "tlsnap diff");
    assert_int_equal(store_delta_info(d)->layout.hash_seed, 0x10);
    assert_int_equal(store_delta_apply(a, &ma, d, &err), 0);
    assert_int_equal(ma.version, 7);
    assert_stores_equal(a, b);
    assert_stores_equal(b, a);
    store_delta_close(d);
    /* different layouts are refused */
    store_options_t o = {.value_floats = K, .shards = 8};
    store_t *c = NULL;
    assert_int_equal(store_create(&o, &c), 0);
    path2(dir, root, "8");
    expect_err(store_delta_diff(b, &mb, c, &ma, dir, NULL, NULL, NULL, &err), &err,
               STORE_E_MISMATCH, "shard count");
    store_destroy(c);
    store_destroy(a);
    store_destroy(b);
    test_rm_rf(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_of_matches_store),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_f16_round_trip),
        cmocka_unit_test(test_begin_refusals),
        cmocka_unit_test(test_damaged_files),
        cmocka_unit_test(test_crafted_refusals),
        cmocka_unit_test(test_kinds_refused),
        cmocka_unit_test(test_apply_refusals),
        cmocka_unit_test(test_diff_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
