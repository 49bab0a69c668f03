/*
 * test_manifest_framing.c — the MANIFEST codec (store/manifest.cc): good
 * manifests round-trip field for field (also unaligned, with extras), and the
 * framing (length, identifier, checksum, verifier) is checked.
 *
 * Every rule of manifest.h gets a manifest that breaks exactly that rule and
 * must come back -EBADMSG (decode) or -EINVAL (encode) with a `why` that names
 * the field.  Helpers: manifest_fixture.h.
 */

#include "manifest_fixture.h"

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
    m.meta.version = INT64_MAX; /* versions are 1 .. 2^63-1 (manifest.h) */
    m.meta.parent_version = INT64_MAX - 1;
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
