/*
 * test_snapshot_extras.c — snapshot extras (params and dense arrays): round
 * trip and refusals.
 *
 * Every refusal is checked for its exact code, file and byte offset, and for
 * leaving *out untouched.  Helpers: snapshot_testutil.h; scratch directories go
 * under $TL_TEST_TMP.
 */

#include "snapshot_testutil.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extras_round_trip),
        cmocka_unit_test(test_extras_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
