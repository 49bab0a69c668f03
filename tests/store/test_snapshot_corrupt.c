/*
 * test_snapshot_corrupt.c — snapshots damaged after a good write (flipped
 * bytes, truncated or extra bytes, missing, swapped or FIFO shards, missing or
 * corrupt manifest) are refused.
 *
 * Every refusal is checked for its exact code, file and byte offset, and for
 * leaving *out untouched.  Helpers: snapshot_testutil.h; scratch directories go
 * under $TL_TEST_TMP.
 */

#include "snapshot_testutil.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
