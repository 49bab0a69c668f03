/*
 * test_manifest_corpus.c — the MANIFEST codec's fuzz seed corpus, built from
 * the same fixtures as the codec tests.  Skipped unless TL_MANIFEST_CORPUS
 * is set; with TL_MANIFEST_CORPUS=<dir> it (re)writes the fuzz seed corpus
 * (tests/fuzz/corpus/manifest) into <dir>:
 *   TL_MANIFEST_CORPUS=tests/fuzz/corpus/manifest ./test_manifest_corpus
 *
 * Helpers: manifest_fixture.h.
 */

#include "manifest_fixture.h"

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
        cmocka_unit_test(test_seed_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
