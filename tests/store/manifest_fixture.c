/*
 * manifest_fixture.c — helpers of the MANIFEST codec tests
 * (test_manifest_*.c, declared in manifest_fixture.h).  Manifests that
 * store__manifest_encode() refuses to write are built with
 * manifest_encode_unchecked() (manifest_testutil.cc).
 *
 * THREAD SAFETY: single-threaded.
 */

#include "manifest_fixture.h"

/* A valid manifest with n shards; shards[] is caller storage (>= n). */
void good(manifest_t *m, manifest_shard_t *shards, uint32_t n, uint32_t k, store_dtype_t dt)
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
void raw_from(manifest_raw_t *r, manifest_raw_shard_t *rs, const manifest_t *m)
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

void assert_same(const manifest_t *a, const manifest_t *b)
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

void encode_ok(const manifest_t *m, uint8_t **buf, size_t *len)
{
    char why[256] = "x";
    int rc = store__manifest_encode(m, buf, len, why, sizeof why);
    if (rc != 0)
        fail_msg("store__manifest_encode: %d: %s", rc, why);
    assert_string_equal(why, "");
}

void roundtrip(const manifest_t *m)
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
void expect_bad(const uint8_t *buf, size_t len, const char *needle)
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

void expect_raw_bad(const manifest_raw_t *r, const char *needle)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(manifest_encode_unchecked(r, &buf, &len), 0);
    expect_bad(buf, len, needle);
    free(buf);
}

void expect_encode_bad(const manifest_t *m, const char *needle)
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

struct fixture *fixture_new(uint32_t n, uint32_t k, store_dtype_t dt)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    good(&f->m, f->sh, n, k, dt);
    raw_from(&f->r, f->rs, &f->m);
    return f;
}
void delta_of(manifest_t *m, manifest_shard_t *sh)
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
