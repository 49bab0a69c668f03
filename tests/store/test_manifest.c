/*
 * test_manifest.c — the MANIFEST codec (store/manifest.cc).
 *
 * Good manifests must round-trip field for field; every rule of manifest.h
 * gets a manifest that breaks exactly that rule and must come back -EBADMSG
 * (decode) or -EINVAL (encode) with a `why` that names the field.  Manifests
 * that store__manifest_encode() refuses to write are built with
 * manifest_encode_unchecked() (manifest_testutil.cc).
 *
 * With TL_MANIFEST_CORPUS=<dir> set, the seed-corpus test also (re)writes the
 * fuzz seed corpus (tests/fuzz/corpus/manifest) into <dir>:
 *   TL_MANIFEST_CORPUS=tests/fuzz/corpus/manifest ./test_manifest
 */
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

/* A valid manifest with n shards; shards[] is caller storage (>= n). */
static void good(manifest_t *m, manifest_shard_t *shards, uint32_t n, uint32_t k, store_dtype_t dt)
{
    memset(m, 0, sizeof *m);
    m->format_version = MANIFEST_FORMAT_VERSION;
    snprintf(m->meta.model_name, sizeof m->meta.model_name, "ctr_fm-v2.en");
    m->meta.model_kind = STORE_MODEL_FM;
    m->meta.version = 1700000123;
    m->meta.parent_version = 1699999999;
    m->meta.created_unix = 1700000456;
    m->value_floats = k;
    m->dtype = dt;
    m->shard_count = n;
    m->shards = shards;
    uint64_t rec = 8 + (uint64_t)k * (dt == STORE_DTYPE_F16 ? 2 : 4);
    for (uint32_t i = 0; i < n; i++) {
        memset(&shards[i], 0, sizeof shards[i]);
        shards[i].index = i;
        snprintf(shards[i].file, sizeof shards[i].file, "shard-%05u.tls", i);
        shards[i].entries = 1000u + i * 37u;
        shards[i].bytes = SHARD_HEADER_BYTES + shards[i].entries * rec;
        shards[i].xxh3 = 0x9e3779b97f4a7c15ull * (i + 1);
    }
}

/* The raw (unchecked) twin of a manifest_t. */
static void raw_from(manifest_raw_t *r, manifest_raw_shard_t *rs, const manifest_t *m)
{
    memset(r, 0, sizeof *r);
    r->format_version = m->format_version;
    r->model_name = m->meta.model_name;
    r->model_kind = (uint8_t)m->meta.model_kind;
    r->version = m->meta.version;
    r->parent_version = m->meta.parent_version;
    r->created_unix = m->meta.created_unix;
    r->value_floats = m->value_floats;
    r->value_type = (uint8_t)m->dtype;
    r->shard_count = m->shard_count;
    r->shards = rs;
    r->n_shards = m->shard_count;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].index = m->shards[i].index;
        rs[i].file = m->shards[i].file;
        rs[i].entries = m->shards[i].entries;
        rs[i].bytes = m->shards[i].bytes;
        rs[i].xxh3 = m->shards[i].xxh3;
    }
}

static void assert_same(const manifest_t *a, const manifest_t *b)
{
    assert_int_equal(a->format_version, b->format_version);
    assert_string_equal(a->meta.model_name, b->meta.model_name);
    assert_int_equal(a->meta.model_kind, b->meta.model_kind);
    assert_true(a->meta.version == b->meta.version);
    assert_true(a->meta.parent_version == b->meta.parent_version);
    assert_true(a->meta.created_unix == b->meta.created_unix);
    assert_int_equal(a->value_floats, b->value_floats);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->shard_count, b->shard_count);
    for (uint32_t i = 0; i < a->shard_count; i++) {
        assert_int_equal(a->shards[i].index, b->shards[i].index);
        assert_string_equal(a->shards[i].file, b->shards[i].file);
        assert_true(a->shards[i].entries == b->shards[i].entries);
        assert_true(a->shards[i].bytes == b->shards[i].bytes);
        assert_true(a->shards[i].xxh3 == b->shards[i].xxh3);
        assert_true(a->shards[i].deletes == b->shards[i].deletes);
    }
    assert_int_equal(a->kind, b->kind);
    assert_string_equal(a->producer, b->producer);
    assert_int_equal(a->n_params, b->n_params);
    for (uint32_t i = 0; i < a->n_params; i++) {
        assert_string_equal(a->params[i].key, b->params[i].key);
        assert_string_equal(a->params[i].value, b->params[i].value);
    }
    assert_int_equal(a->n_dense, b->n_dense);
    for (uint32_t i = 0; i < a->n_dense; i++) {
        assert_string_equal(a->dense[i].name, b->dense[i].name);
        assert_string_equal(a->dense[i].file, b->dense[i].file);
        assert_true(a->dense[i].bytes == b->dense[i].bytes);
        assert_true(a->dense[i].xxh3 == b->dense[i].xxh3);
    }
}

static void encode_ok(const manifest_t *m, uint8_t **buf, size_t *len)
{
    char why[256] = "x";
    int rc = store__manifest_encode(m, buf, len, why, sizeof why);
    if (rc != 0)
        fail_msg("store__manifest_encode: %d: %s", rc, why);
    assert_string_equal(why, "");
}

static void roundtrip(const manifest_t *m)
{
    uint8_t *buf;
    size_t len;
    encode_ok(m, &buf, &len);
    assert_true(len <= MANIFEST_MAX_BYTES);

    manifest_t d;
    char why[256] = "x";
    int rc = store__manifest_decode(buf, len, &d, why, sizeof why);
    if (rc != 0)
        fail_msg("store__manifest_decode: %d: %s", rc, why);
    assert_string_equal(why, "");
    assert_same(m, &d);

    /* Re-encoding what was decoded gives the same bytes. */
    uint8_t *buf2;
    size_t len2;
    encode_ok(&d, &buf2, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);

    store__manifest_free(&d);
    free(buf);
    free(buf2);
}

/* Decoding buf must fail with -EBADMSG, a why naming `needle`, and *out zeroed. */
static void expect_bad(const uint8_t *buf, size_t len, const char *needle)
{
    manifest_t d;
    char why[256] = "";
    int rc = store__manifest_decode(buf, len, &d, why, sizeof why);
    if (rc == 0)
        store__manifest_free(&d);
    if (rc != -EBADMSG || !strstr(why, needle))
        fail_msg("decode: want -EBADMSG naming '%s', got %d: %s", needle, rc, why);
    assert_true(strncmp(why, "manifest: ", 10) == 0);
    assert_null(d.shards);
    assert_int_equal(d.shard_count, 0);
}

static void expect_raw_bad(const manifest_raw_t *r, const char *needle)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(manifest_encode_unchecked(r, &buf, &len), 0);
    expect_bad(buf, len, needle);
    free(buf);
}

static void expect_encode_bad(const manifest_t *m, const char *needle)
{
    uint8_t *buf = (uint8_t *)1;
    size_t len = 1;
    char why[256] = "";
    int rc = store__manifest_encode(m, &buf, &len, why, sizeof why);
    if (rc != -EINVAL || !strstr(why, needle))
        fail_msg("encode: want -EINVAL naming '%s', got %d: %s", needle, rc, why);
    assert_null(buf);
    assert_int_equal(len, 0);
}

/* ---- round trips -------------------------------------------------------- */

static void test_roundtrip(void **state)
{
    (void)state;
    static manifest_shard_t sh[MAXS];
    manifest_t m;

    good(&m, sh, 4, 8, STORE_DTYPE_F32);
    roundtrip(&m);

    good(&m, sh, 1, 1, STORE_DTYPE_F32);
    m.meta.model_kind = STORE_MODEL_LR;
    m.meta.parent_version = 0;
    m.meta.created_unix = 0;
    sh[0].entries = 0;
    sh[0].bytes = SHARD_HEADER_BYTES;
    roundtrip(&m);

    good(&m, sh, MAXS, STORE_MAX_VALUE_FLOATS, STORE_DTYPE_F16);
    m.meta.model_kind = STORE_MODEL_DNN;
    roundtrip(&m);

    /* Extremes of every scalar and the longest names. */
    good(&m, sh, 2, 64, STORE_DTYPE_F32);
    m.meta.model_kind = STORE_MODEL_FFM;
    memset(m.meta.model_name, 'n', 63);
    m.meta.model_name[63] = '\0';
    m.meta.version = UINT64_MAX;
    m.meta.parent_version = UINT64_MAX - 1;
    m.meta.created_unix = UINT64_MAX;
    memset(sh[1].file, 'f', 63);
    sh[1].file[63] = '\0';
    uint64_t rec = 8 + 64 * 4;
    sh[1].entries = (UINT64_MAX - SHARD_HEADER_BYTES) / rec; /* largest that fits */
    sh[1].bytes = SHARD_HEADER_BYTES + sh[1].entries * rec;
    sh[1].xxh3 = UINT64_MAX;
    roundtrip(&m);
}

static void test_decode_unaligned(void **state)
{
    (void)state;
    manifest_shard_t sh[8];
    manifest_t m, d;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 8, 4, STORE_DTYPE_F16);
    encode_ok(&m, &buf, &len);
    for (size_t off = 1; off < 8; off++) {
        uint8_t *copy = malloc(len + off);
        assert_non_null(copy);
        memcpy(copy + off, buf, len);
        char why[256];
        assert_int_equal(store__manifest_decode(copy + off, len, &d, why, sizeof why), 0);
        assert_same(&m, &d);
        store__manifest_free(&d);
        free(copy);
    }
    free(buf);
}

/* Readers ignore fields they do not know (params, dense_files). */
static void test_decode_reads_extras(void **state)
{
    (void)state;
    manifest_shard_t sh[4];
    manifest_raw_shard_t rs[4];
    manifest_raw_t r;
    manifest_t m, d;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 4, 2, STORE_DTYPE_F32);
    raw_from(&r, rs, &m);
    r.with_extras = 1;
    assert_int_equal(manifest_encode_unchecked(&r, &buf, &len), 0);
    char why[256];
    assert_int_equal(store__manifest_decode(buf, len, &d, why, sizeof why), 0);
    m.n_params = 2;
    strcpy(m.params[0].key, "learning_rate");
    strcpy(m.params[0].value, "0.05");
    strcpy(m.params[1].key, "l2");
    strcpy(m.params[1].value, "1e-6");
    m.n_dense = 1;
    strcpy(m.dense[0].name, "mlp.0.weight");
    strcpy(m.dense[0].file, "dense-0.bin");
    m.dense[0].bytes = 4096;
    m.dense[0].xxh3 = 42;
    assert_same(&m, &d);
    store__manifest_free(&d);
    free(buf);
    roundtrip(&m); /* and encode writes them back */
}

/* ---- framing: length, identifier, checksum, verifier -------------------- */

static void test_decode_length(void **state)
{
    (void)state;
    manifest_shard_t sh[2];
    manifest_t m;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 2, 4, STORE_DTYPE_F32);
    encode_ok(&m, &buf, &len);

    expect_bad(NULL, 0, "too short");
    expect_bad(buf, 0, "too short");
    expect_bad(buf, 15, "too short");
    /* Every truncation fails (mostly on the checksum), none crashes. */
    for (size_t n = 0; n < len; n++)
        expect_bad(buf, n, "manifest: ");

    uint8_t *big = calloc(1, (size_t)MANIFEST_MAX_BYTES + 1);
    assert_non_null(big);
    memcpy(big, buf, len);
    expect_bad(big, (size_t)MANIFEST_MAX_BYTES + 1, "limit");
    free(big);
    free(buf);
}

static void test_decode_checksum(void **state)
{
    (void)state;
    manifest_shard_t sh[2];
    manifest_t m;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 2, 4, STORE_DTYPE_F32);
    encode_ok(&m, &buf, &len);

    buf[len - 1] ^= 0x80; /* the trailer */
    expect_bad(buf, len, "checksum");
    buf[len - 1] ^= 0x80;
    for (size_t i = 8; i < len - 8; i++) { /* every body byte after the identifier */
        buf[i] ^= 0x01;
        expect_bad(buf, len, "checksum");
        buf[i] ^= 0x01;
    }
    /* Extra bytes appended: the trailer is no longer the last 8 bytes. */
    uint8_t *longer = malloc(len + 8);
    assert_non_null(longer);
    memcpy(longer, buf, len);
    memset(longer + len, 0, 8);
    expect_bad(longer, len + 8, "checksum");
    free(longer);
    free(buf);
}

static void test_decode_identifier(void **state)
{
    (void)state;
    manifest_shard_t sh[2];
    manifest_t m;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 2, 4, STORE_DTYPE_F32);
    encode_ok(&m, &buf, &len);
    assert_memory_equal(buf + 4, "TLMF", 4);
    buf[7] = 'X';
    manifest_fix_trailer(buf, len);
    expect_bad(buf, len, "identifier is \"TLMX\"");
    free(buf);

    /* Sixteen zero bytes: neither a manifest nor anything else. */
    uint8_t zeros[16] = {0};
    expect_bad(zeros, sizeof zeros, "identifier");
}

static void test_decode_verifier(void **state)
{
    (void)state;
    manifest_shard_t sh[2];
    manifest_t m;
    uint8_t *buf;
    size_t len;
    good(&m, sh, 2, 4, STORE_DTYPE_F32);
    encode_ok(&m, &buf, &len);

    /* Root offset beyond the buffer. */
    uint8_t *b = malloc(len);
    assert_non_null(b);
    memcpy(b, buf, len);
    b[0] = 0xf0;
    b[1] = 0xff;
    manifest_fix_trailer(b, len);
    expect_bad(b, len, "verification");

    /* Root offset misaligned. */
    memcpy(b, buf, len);
    b[0] = (uint8_t)(b[0] + 1);
    manifest_fix_trailer(b, len);
    expect_bad(b, len, "verification");

    /* Root offset 0: the table would overlap the root offset itself. */
    uint8_t tiny[16] = {0, 0, 0, 0, 'T', 'L', 'M', 'F'};
    manifest_fix_trailer(tiny, sizeof tiny);
    expect_bad(tiny, sizeof tiny, "verification");

    /* Every single-byte change with a valid trailer: accepted (and then
     * re-encodable) or refused with a sentence, never a crash. */
    for (size_t i = 0; i < len - 8; i++) {
        static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x10};
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(b, buf, len);
            b[i] ^= flips[f];
            manifest_fix_trailer(b, len);
            manifest_t d;
            char why[256] = "";
            int rc = store__manifest_decode(b, len, &d, why, sizeof why);
            if (rc == 0) {
                uint8_t *re;
                size_t relen;
                encode_ok(&d, &re, &relen);
                free(re);
                store__manifest_free(&d);
            } else {
                assert_int_equal(rc, -EBADMSG);
                assert_true(strncmp(why, "manifest: ", 10) == 0);
            }
        }
    }
    free(b);
    free(buf);
}

/* ---- every field rule, on decode ---------------------------------------- */

struct fixture {
    manifest_shard_t sh[MAXS];
    manifest_raw_shard_t rs[MAXS];
    manifest_t m;
    manifest_raw_t r;
};

static struct fixture *fixture_new(uint32_t n, uint32_t k, store_dtype_t dt)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    good(&f->m, f->sh, n, k, dt);
    raw_from(&f->r, f->rs, &f->m);
    return f;
}

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

/* ---- every field rule, on encode ---------------------------------------- */

static void test_encode_rejects(void **state)
{
    (void)state;
    static struct fixture fx;
    manifest_t *m = &fx.m;
#define RESET() good(&fx.m, fx.sh, 4, 4, STORE_DTYPE_F32)

    RESET();
    m->format_version = 3;
    expect_encode_bad(m, "format_version is 3");
    RESET();
    m->meta.model_name[0] = '\0';
    expect_encode_bad(m, "model_name is empty");
    RESET();
    memset(m->meta.model_name, 'a', sizeof m->meta.model_name); /* no NUL */
    expect_encode_bad(m, "model_name \"aaaa");
    expect_encode_bad(m, "has no NUL within its 64 bytes");
    RESET();
    strcpy(m->meta.model_name, "a/b");
    expect_encode_bad(m, "model_name \"a/b\" has byte 0x2f at offset 1");
    RESET();
    strcpy(m->meta.model_name, "..");
    expect_encode_bad(m, "model_name \"..\" is not allowed");
    RESET();
    memset(&m->meta.model_kind, 0, sizeof m->meta.model_kind);
    m->meta.model_kind = (store_model_kind_t)7;
    expect_encode_bad(m, "model_kind is 7");
    RESET();
    m->meta.version = 0;
    expect_encode_bad(m, "version is 0");
    RESET();
    m->value_floats = 0;
    expect_encode_bad(m, "value_floats is 0");
    RESET();
    m->value_floats = STORE_MAX_VALUE_FLOATS + 1;
    expect_encode_bad(m, "value_floats is 1025");
    RESET();
    m->dtype = (store_dtype_t)2;
    expect_encode_bad(m, "value_type is 2");
    RESET();
    m->shard_count = 3;
    expect_encode_bad(m, "shard_count is 3");
    RESET();
    m->shard_count = 512;
    expect_encode_bad(m, "shard_count is 512");
    RESET();
    m->shards = NULL;
    expect_encode_bad(m, "shards list is missing");
    RESET();
    fx.sh[1].index = 0;
    expect_encode_bad(m, "shards[1].index is 0, expected 1");
    RESET();
    strcpy(fx.sh[2].file, "a b");
    expect_encode_bad(m, "shards[2].file \"a b\" has byte 0x20");
    RESET();
    memset(fx.sh[2].file, 'z', sizeof fx.sh[2].file);
    expect_encode_bad(m, "shards[2].file \"zzzz");
    RESET();
    strcpy(fx.sh[2].file, ".tmp");
    expect_encode_bad(m, "shards[2].file \".tmp\" starts with '.'");
    RESET();
    strcpy(fx.sh[2].file, MANIFEST_FILE_NAME);
    expect_encode_bad(m, "shards[2].file is \"MANIFEST\"");
    RESET();
    strcpy(fx.sh[3].file, fx.sh[0].file);
    expect_encode_bad(m, "shards[3].file \"shard-00000.tls\" is also shards[0].file");
    RESET();
    fx.sh[0].bytes--;
    expect_encode_bad(m, "shards[0].bytes is");
    RESET();
    fx.sh[0].entries = UINT64_MAX / 2;
    expect_encode_bad(m, "shards[0].entries is 9223372036854775807");

    /* params and dense files */
#define EXTRAS()                                                                                   \
    do {                                                                                           \
        RESET();                                                                                   \
        m->n_params = 2;                                                                           \
        strcpy(m->params[0].key, "fields");                                                        \
        strcpy(m->params[0].value, "20");                                                          \
        strcpy(m->params[1].key, "k");                                                             \
        strcpy(m->params[1].value, "4");                                                           \
        m->n_dense = 2;                                                                            \
        strcpy(m->dense[0].name, "w0");                                                            \
        strcpy(m->dense[0].file, "dense-00.tld");                                                  \
        m->dense[0].bytes = 16 + 4 * 10;                                                           \
        strcpy(m->dense[1].name, "b0");                                                            \
        strcpy(m->dense[1].file, "dense-01.tld");                                                  \
        m->dense[1].bytes = 16 + 4;                                                                \
    } while (0)
    EXTRAS();
    roundtrip(m);
    EXTRAS();
    m->n_params = STORE_MAX_PARAMS + 1;
    expect_encode_bad(m, "params has 33 entries");
    EXTRAS();
    strcpy(m->params[1].key, "a=b");
    expect_encode_bad(m, "params[1].key \"a=b\" has byte 0x3d");
    EXTRAS();
    strcpy(m->params[1].key, "fields");
    expect_encode_bad(m, "params[1].key \"fields\" is also params[0].key");
    EXTRAS();
    strcpy(m->params[0].value, "2\n0");
    expect_encode_bad(m, "params[0].value \"2\\x0a0\" has byte 0x0a");
    EXTRAS();
    m->n_dense = STORE_MAX_DENSE + 1;
    expect_encode_bad(m, "dense_files has 33 entries");
    EXTRAS();
    strcpy(m->dense[1].name, "w0");
    expect_encode_bad(m, "dense_files[1].name \"w0\" is also dense_files[0].name");
    EXTRAS();
    strcpy(m->dense[1].file, "dense-00.tld");
    expect_encode_bad(m, "dense_files[1].file \"dense-00.tld\" is also dense_files[0].file");
    EXTRAS();
    strcpy(m->dense[1].file, fx.sh[2].file);
    expect_encode_bad(m, "is also shards[2].file");
    EXTRAS();
    strcpy(m->dense[0].file, MANIFEST_FILE_NAME);
    expect_encode_bad(m, "dense_files[0].file is \"MANIFEST\"");
    EXTRAS();
    m->dense[0].bytes = 16;
    expect_encode_bad(m, "dense_files[0].bytes is 16");
    EXTRAS();
    m->dense[0].bytes = 16 + 4 * 10 + 2;
    expect_encode_bad(m, "dense_files[0].bytes is 58");
#undef EXTRAS
#undef RESET
}

/* Delta manifests: kind, producer and per-shard deletes survive a round
 * trip; each rule on them is enforced with a sentence naming the field. */
static void delta_of(manifest_t *m, manifest_shard_t *sh)
{
    good(m, sh, 4, 3, STORE_DTYPE_F32);
    m->format_version = MANIFEST_FORMAT_VERSION_DELTA;
    m->kind = MANIFEST_KIND_DELTA;
    snprintf(m->producer, sizeof m->producer, "tlsnap diff");
    for (uint32_t i = 0; i < 4; i++) {
        sh[i].deletes = 10u * i;
        sh[i].bytes += 8u * sh[i].deletes;
    }
}

static void test_delta_fields(void **state)
{
    (void)state;
    manifest_t m;
    manifest_shard_t sh[4];
    delta_of(&m, sh);
    roundtrip(&m);
    m.producer[0] = '\0';
    roundtrip(&m);

    delta_of(&m, sh);
    m.format_version = MANIFEST_FORMAT_VERSION;
    expect_encode_bad(&m, "version_kind is DELTA but format_version is 1, expected 2");
    delta_of(&m, sh);
    m.kind = MANIFEST_KIND_FULL;
    expect_encode_bad(&m, "version_kind is FULL but format_version is 2, expected 1");
    delta_of(&m, sh);
    m.kind = (manifest_kind_t)7;
    expect_encode_bad(&m, "version_kind is 7");
    delta_of(&m, sh);
    m.meta.parent_version = 0;
    expect_encode_bad(&m, "parent_version is 0");
    delta_of(&m, sh);
    m.meta.parent_version = m.meta.version;
    expect_encode_bad(&m, "not its own version");
    delta_of(&m, sh);
    snprintf(m.producer, sizeof m.producer, "bad\x01");
    expect_encode_bad(&m, "producer \"bad\\x01\" has byte 0x01");
    delta_of(&m, sh);
    memset(m.producer, 'p', sizeof m.producer); /* no NUL */
    expect_encode_bad(&m, "producer");
    delta_of(&m, sh);
    sh[2].bytes -= 8;
    expect_encode_bad(&m, "shards[2].bytes");
    delta_of(&m, sh);
    sh[1].deletes = UINT64_MAX / 4;
    expect_encode_bad(&m, "shards[1].deletes");
    delta_of(&m, sh);
    m.n_dense = 1;
    snprintf(m.dense[0].name, sizeof m.dense[0].name, "w");
    snprintf(m.dense[0].file, sizeof m.dense[0].file, "dense-00.tld");
    m.dense[0].bytes = DENSE_HEADER_BYTES + 4;
    expect_encode_bad(&m, "a delta has 1 dense_files");
    /* a full snapshot has no deletes */
    good(&m, sh, 4, 3, STORE_DTYPE_F32);
    sh[3].deletes = 1;
    sh[3].bytes += 8;
    expect_encode_bad(&m, "shards[3].deletes is 1 in a full snapshot");
}

static void test_api_edges(void **state)
{
    (void)state;
    manifest_shard_t sh[2];
    manifest_t m, d;
    uint8_t *buf;
    size_t len;
    char why[256];
    good(&m, sh, 2, 4, STORE_DTYPE_F32);

    assert_int_equal(store__manifest_encode(NULL, &buf, &len, why, sizeof why), -EINVAL);
    assert_int_equal(store__manifest_encode(&m, NULL, &len, why, sizeof why), -EINVAL);
    assert_int_equal(store__manifest_encode(&m, &buf, NULL, why, sizeof why), -EINVAL);
    assert_int_equal(store__manifest_decode((const uint8_t *)"", 0, NULL, why, sizeof why),
                     -EINVAL);

    /* why may be NULL, or too small: truncated but terminated. */
    assert_int_equal(store__manifest_encode(&m, &buf, &len, NULL, 0), 0);
    assert_int_equal(store__manifest_decode(buf, len - 1, &d, NULL, 0), -EBADMSG);
    memset(why, 'x', sizeof why);
    assert_int_equal(store__manifest_decode(buf, len - 1, &d, why, 12), -EBADMSG);
    assert_string_equal(why, "manifest: c"); /* "checksum ..." */
    assert_int_equal(store__manifest_decode(buf, len, &d, why, 1), 0);
    assert_string_equal(why, "");

    store__manifest_free(&d);
    store__manifest_free(&d); /* idempotent */
    store__manifest_free(NULL);
    free(buf);
}

/* ---- fuzz seed corpus ----------------------------------------------------- */

static void put(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_true(len < 4096);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        fail_msg("cannot write %s", path);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static void put_raw(const char *dir, const char *name, const manifest_raw_t *r)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(manifest_encode_unchecked(r, &buf, &len), 0);
    put(dir, name, buf, len);
    free(buf);
}

/* Writes tests/fuzz/corpus/manifest when TL_MANIFEST_CORPUS names a dir. */
static void test_seed_corpus(void **state)
{
    (void)state;
    const char *dir = getenv("TL_MANIFEST_CORPUS");
    if (!dir || !*dir)
        skip();
    struct fixture *f;
    uint8_t *buf;
    size_t len;

    f = fixture_new(1, 1, STORE_DTYPE_F32);
    f->m.meta.model_kind = STORE_MODEL_LR;
    raw_from(&f->r, f->rs, &f->m);
    put_raw(dir, "valid-lr-1shard", &f->r);
    encode_ok(&f->m, &buf, &len);
    put(dir, "bad-truncated", buf, len / 2);
    buf[len - 3] ^= 0x55;
    put(dir, "bad-checksum", buf, len);
    buf[len - 3] ^= 0x55;
    buf[5] = 'X';
    manifest_fix_trailer(buf, len);
    put(dir, "bad-identifier", buf, len);
    buf[5] = 'L';
    buf[0] = 0xfc;
    manifest_fix_trailer(buf, len);
    put(dir, "bad-verifier", buf, len);
    free(buf);
    free(f);

    f = fixture_new(16, 16, STORE_DTYPE_F16);
    put_raw(dir, "valid-fm-16shard-f16", &f->r);
    f->rs[5].bytes++;
    put_raw(dir, "bad-shard-bytes", &f->r);
    f->rs[5].bytes--;
    f->rs[9].file = f->rs[3].file;
    put_raw(dir, "bad-duplicate-file", &f->r);
    f->rs[9].file = "../../etc/passwd";
    put_raw(dir, "bad-file-name", &f->r);
    f->rs[9].file = f->sh[9].file;
    f->rs[7].index = 8;
    put_raw(dir, "bad-shard-index", &f->r);
    f->rs[7].index = 7;
    f->r.n_shards = 15;
    put_raw(dir, "bad-count-mismatch", &f->r);
    free(f);

    f = fixture_new(4, 64, STORE_DTYPE_F32);
    f->m.meta.model_kind = STORE_MODEL_DNN;
    raw_from(&f->r, f->rs, &f->m);
    f->r.with_extras = 1;
    put_raw(dir, "valid-dnn-4shard-extras", &f->r);
    f->rs[2].entries = UINT64_MAX / 100;
    put_raw(dir, "bad-entries-overflow", &f->r);
    f->rs[2].entries = f->sh[2].entries;
    f->r.format_version = 2;
    put_raw(dir, "bad-format-version", &f->r);
    f->r.format_version = 1;
    f->r.model_name = "has space";
    put_raw(dir, "bad-model-name", &f->r);
    f->r.model_name = f->m.meta.model_name;
    f->r.model_kind = 9;
    put_raw(dir, "bad-model-kind", &f->r);
    f->r.model_kind = 3;
    f->r.value_type = 7;
    put_raw(dir, "bad-value-type", &f->r);
    f->r.value_type = 0;
    f->r.shard_count = 3;
    f->r.n_shards = 3;
    put_raw(dir, "bad-shard-count", &f->r);
    free(f);

    manifest_t m;
    manifest_shard_t sh[4];
    delta_of(&m, sh);
    encode_ok(&m, &buf, &len);
    put(dir, "valid-delta-4shard", buf, len);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_decode_unaligned),
        cmocka_unit_test(test_decode_reads_extras),
        cmocka_unit_test(test_decode_length),
        cmocka_unit_test(test_decode_checksum),
        cmocka_unit_test(test_decode_identifier),
        cmocka_unit_test(test_decode_verifier),
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
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_delta_fields),
        cmocka_unit_test(test_api_edges),
        cmocka_unit_test(test_seed_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
