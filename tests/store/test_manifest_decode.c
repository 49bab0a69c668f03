/*
 * test_manifest_decode.c — the MANIFEST codec (store/manifest.cc): every
 * field rule, on decode.
 *
 * Every rule of manifest.h gets a manifest that breaks exactly that rule and
 * must come back -EBADMSG (decode) or -EINVAL (encode) with a `why` that names
 * the field.  Helpers: manifest_fixture.h.
 */

#include "manifest_fixture.h"

/* ---- every field rule, on decode ---------------------------------------- */


static void test_bad_format_version(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.format_version = 0;
    expect_raw_bad(&f->r, "format_version is 0");
    f->r.format_version = 2;
    expect_raw_bad(&f->r, "format_version is 2");
    free(f);
}

static void test_bad_model_name(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    char long_name[65];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';

    f->r.model_name = NULL;
    expect_raw_bad(&f->r, "model_name is missing");
    f->r.model_name = "";
    expect_raw_bad(&f->r, "model_name is empty");
    f->r.model_name = long_name;
    expect_raw_bad(&f->r, "model_name \"aaaa");
    expect_raw_bad(&f->r, "is 64 bytes long");
    f->r.model_name = "ctr model";
    expect_raw_bad(&f->r, "model_name \"ctr model\" has byte 0x20 at offset 3");
    f->r.model_name = "../etc";
    expect_raw_bad(&f->r, "model_name \"../etc\" has byte 0x2f at offset 2");
    f->r.model_name = "ab\0cd";
    f->r.model_name_len = 5;
    expect_raw_bad(&f->r, "model_name \"ab\\x00cd\" has byte 0x00 at offset 2");
    f->r.model_name = "caf\xc3\xa9";
    f->r.model_name_len = 0;
    expect_raw_bad(&f->r, "has byte 0xc3 at offset 3");
    f->r.model_name = "..";
    expect_raw_bad(&f->r, "model_name \"..\" is not allowed");
    f->r.model_name = ".";
    expect_raw_bad(&f->r, "model_name \".\" is not allowed");
    free(f);
}

static void test_bad_model_kind(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.model_kind = 4;
    expect_raw_bad(&f->r, "model_kind is 4");
    f->r.model_kind = 255;
    expect_raw_bad(&f->r, "model_kind is 255");
    free(f);
}

static void test_bad_version(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.version = 0;
    expect_raw_bad(&f->r, "version is 0");
    f->r.version = (uint64_t)INT64_MAX + 1; /* JSON and the marks carry a signed 64-bit one */
    expect_raw_bad(&f->r, "version is 9223372036854775808, expected at most 2^63-1");
    free(f);
}

static void test_bad_value_floats(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.value_floats = 0;
    expect_raw_bad(&f->r, "value_floats is 0");
    f->r.value_floats = STORE_MAX_VALUE_FLOATS + 1;
    expect_raw_bad(&f->r, "value_floats is 1025");
    f->r.value_floats = UINT32_MAX;
    expect_raw_bad(&f->r, "value_floats is 4294967295");
    free(f);
}

static void test_bad_value_type(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.value_type = 2;
    expect_raw_bad(&f->r, "value_type is 2");
    f->r.value_type = 200;
    expect_raw_bad(&f->r, "value_type is 200");
    free(f);
}

static void test_bad_shard_count(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    static const uint32_t bad[] = {0, 3, 6, 255, 512, 1u << 31, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "shard_count is %u, expected a power of two", bad[i]);
        f->r.shard_count = bad[i];
        expect_raw_bad(&f->r, needle);
    }
    /* Valid count, but the list disagrees. */
    f->r.shard_count = 4;
    f->r.n_shards = 2;
    expect_raw_bad(&f->r, "shard_count is 4 but the shards list has 2 entries");
    f->r.n_shards = 0;
    expect_raw_bad(&f->r, "shard_count is 4 but the shards list has 0 entries");
    f->r.shards = NULL;
    expect_raw_bad(&f->r, "shards list is missing");
    free(f);

    /* 8 entries, but shard_count 4. */
    f = fixture_new(8, 4, STORE_DTYPE_F32);
    f->r.shard_count = 4;
    expect_raw_bad(&f->r, "shard_count is 4 but the shards list has 8 entries");
    free(f);
}

static void test_bad_shard_index(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->rs[2].index = 3;
    expect_raw_bad(&f->r, "shards[2].index is 3, expected 2");
    f->rs[2].index = 2;
    f->rs[0].index = UINT32_MAX;
    expect_raw_bad(&f->r, "shards[0].index is 4294967295, expected 0");
    free(f);
}

static void test_bad_shard_file(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    char long_name[70];
    memset(long_name, 'f', 69);
    long_name[69] = '\0';

    f->rs[1].file = NULL;
    expect_raw_bad(&f->r, "shards[1].file is missing");
    f->rs[1].file = "";
    expect_raw_bad(&f->r, "shards[1].file is empty");
    f->rs[1].file = long_name;
    expect_raw_bad(&f->r, "shards[1].file \"ffff");
    expect_raw_bad(&f->r, "is 69 bytes long");
    f->rs[1].file = "../shard-1";
    expect_raw_bad(&f->r, "shards[1].file \"../shard-1\" has byte 0x2f at offset 2");
    f->rs[1].file = "/etc/passwd";
    expect_raw_bad(&f->r, "shards[1].file \"/etc/passwd\" has byte 0x2f at offset 0");
    f->rs[1].file = "a\nb";
    expect_raw_bad(&f->r, "shards[1].file \"a\\x0ab\" has byte 0x0a at offset 1");
    f->rs[1].file = "x\0y";
    f->rs[1].file_len = 3;
    expect_raw_bad(&f->r, "shards[1].file \"x\\x00y\" has byte 0x00 at offset 1");
    f->rs[1].file_len = 0;
    f->rs[1].file = ".hidden";
    expect_raw_bad(&f->r, "shards[1].file \".hidden\" starts with '.'");
    f->rs[1].file = "..";
    expect_raw_bad(&f->r, "shards[1].file \"..\" starts with '.'");
    f->rs[1].file = "MANIFEST";
    expect_raw_bad(&f->r, "shards[1].file is \"MANIFEST\"");
    f->rs[1].file = f->sh[1].file;

    f->rs[3].file = f->sh[1].file; /* duplicate */
    expect_raw_bad(&f->r, "shards[3].file \"shard-00001.tls\" is also shards[1].file");
    free(f);
}

static void test_bad_shard_bytes(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 1, STORE_DTYPE_F32);
    f->rs[3].entries = 5;
    f->rs[3].bytes = 100;
    uint8_t *buf;
    size_t len;
    assert_int_equal(manifest_encode_unchecked(&f->r, &buf, &len), 0);
    manifest_t d;
    char why[256];
    assert_int_equal(store__manifest_decode(buf, len, &d, why, sizeof why), -EBADMSG);
    assert_string_equal(why,
                        "manifest: shards[3].bytes is 100 but 64 + 5 entries x 12 bytes = 124");
    free(buf);
    free(f);

    /* F16 records are 8 + 2K bytes. */
    f = fixture_new(2, 3, STORE_DTYPE_F16);
    f->rs[0].bytes += 2;
    expect_raw_bad(&f->r, "shards[0].bytes is 14066 but 64 + 1000 entries x 14 bytes = 14064");
    free(f);

    /* The F32 size of an F16 table is wrong too. */
    f = fixture_new(2, 3, STORE_DTYPE_F16);
    f->r.value_type = 0;
    expect_raw_bad(&f->r, "shards[0].bytes is 14064 but 64 + 1000 entries x 20 bytes = 20064");
    free(f);

    /* entries x record size would wrap: caught before the multiplication. */
    f = fixture_new(2, 64, STORE_DTYPE_F32);
    uint64_t rec = 8 + 64 * 4;
    f->rs[1].entries = (UINT64_MAX - SHARD_HEADER_BYTES) / rec + 1;
    f->rs[1].bytes = SHARD_HEADER_BYTES + f->rs[1].entries * rec; /* wrapped */
    expect_raw_bad(&f->r, "shards[1].entries is 69874030582233150: 64 + that many x 264 bytes "
                          "overflows 64 bits");
    f->rs[1].entries = UINT64_MAX;
    expect_raw_bad(&f->r, "shards[1].entries is 18446744073709551615");
    free(f);
}

/* Rules are checked in field order: the first bad field is the one named. */
static void test_first_bad_field_named(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 4, STORE_DTYPE_F32);
    f->r.version = 0;
    f->rs[2].index = 9;
    expect_raw_bad(&f->r, "version is 0");
    f->r.version = 1;
    expect_raw_bad(&f->r, "shards[2].index");
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_format_version),
        cmocka_unit_test(test_bad_model_name),
        cmocka_unit_test(test_bad_model_kind),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_bad_value_floats),
        cmocka_unit_test(test_bad_value_type),
        cmocka_unit_test(test_bad_shard_count),
        cmocka_unit_test(test_bad_shard_index),
        cmocka_unit_test(test_bad_shard_file),
        cmocka_unit_test(test_bad_shard_bytes),
        cmocka_unit_test(test_first_bad_field_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
