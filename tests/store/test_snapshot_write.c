/*
 * test_snapshot_write.c — store_snapshot_write / store_snapshot_load round
 * trips (shapes, dtypes, shard counts, reserved layout, created time, threads)
 * and the writer's refusals (existing manifest, bad meta, NaN, bad arguments).
 *
 * Every refusal is checked for its exact code, file and byte offset, and for
 * leaving *out untouched.  Helpers: snapshot_testutil.h; scratch directories go
 * under $TL_TEST_TMP.
 */

#include "snapshot_testutil.h"

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
