/*
 * test_manifest_encode.c — the MANIFEST codec (store/manifest.cc): every
 * field rule, on encode; delta manifests; API edges.
 *
 * Every rule of manifest.h gets a manifest that breaks exactly that rule and
 * must come back -EBADMSG (decode) or -EINVAL (encode) with a `why` that names
 * the field.  Helpers: manifest_fixture.h.
 */

#include "manifest_fixture.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_delta_fields),
        cmocka_unit_test(test_api_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
