/*
 * test_manifest_corpus.c — the MANIFEST codec's fuzz seed corpus, built from
 * the same fixtures as the codec tests.  Every file is decoded here: a
 * "valid-*" one must decode, a "bad-*" one must be refused (-EBADMSG).
 * Then, by default, each is compared byte for byte with the committed
 * corpus (TL_MANIFEST_CORPUS_CHECK, set by ctest to
 * tests/fuzz/corpus/manifest), so a codec change that leaves the corpus
 * stale fails here; with TL_MANIFEST_CORPUS=<dir> the files are (re)written
 * into <dir> instead:
 *   TL_MANIFEST_CORPUS=tests/fuzz/corpus/manifest ./test_manifest_corpus
 *
 * Helpers: manifest_fixture.h.
 */

#include "manifest_fixture.h"

#include <errno.h>

/* ---- fuzz seed corpus ----------------------------------------------------- */

static int files_seen;

/* The committed file's bytes equal buf[0..len): fails naming the file. */
static void compare(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("%s is not in the committed corpus (regenerate it: see the top of this file)", path);
    uint8_t have[4096];
    size_t n = fread(have, 1, sizeof have, fp);
    fclose(fp);
    if (n != len || memcmp(have, buf, len) != 0)
        fail_msg("%s differs from what the fixtures make now (%zu bytes against %zu): "
                 "regenerate the corpus", path, n, len);
}

/* Checks one corpus file's verdict, then writes it into TL_MANIFEST_CORPUS or
 * compares it with the committed one. */
static void put(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    assert_true(len < 4096);
    manifest_t d;
    char why[256] = "";
    int rc = store__manifest_decode(buf, len, &d, why, sizeof why);
    if (rc == 0)
        store__manifest_free(&d);
    if (strncmp(name, "valid-", 6) == 0 && rc != 0)
        fail_msg("corpus file %s does not decode: %s", name, why);
    if (strncmp(name, "bad-", 4) == 0 && rc != -EBADMSG)
        fail_msg("corpus file %s decodes (rc %d): a bad seed must be refused", name, rc);
    files_seen++;
    const char *out = getenv("TL_MANIFEST_CORPUS");
    if (!out || !*out) {
        compare(dir, name, buf, len);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, name);
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

/* Checks the seed corpus against the committed one, or writes it
 * (TL_MANIFEST_CORPUS). */
static void test_seed_corpus(void **state)
{
    (void)state;
    const char *dir = getenv("TL_MANIFEST_CORPUS_CHECK");
    if (!dir || !*dir)
        fail_msg("TL_MANIFEST_CORPUS_CHECK names no directory (ctest sets it to tests/fuzz/corpus/manifest)");
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
    assert_int_equal(files_seen, 19); /* every file of the committed corpus was made */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
