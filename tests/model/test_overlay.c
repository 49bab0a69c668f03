/*
 * test_overlay.c — a delta served as an overlay (model/overlay.h) scores
 * exactly as the model rebuilt with store_delta_apply, and the fold changes
 * no value of any version.
 *
 *   - the table: puts, overwrites, deletes, the bias key 0, its capacity, a
 *     batched lookup against a reference for 50,000 random keys;
 *   - an FM model (K = 5) and a chain of two deltas written with the delta
 *     writer (upserts of every third key, inserts, deletes; the second
 *     delta deletes a key the first upserted and re-inserts one it deleted):
 *     the overlay version's scores and key count equal the rebuilt model's,
 *     request by request, float for float;
 *   - a delete of a key the parent lacks, a broken parent link and a delta
 *     of another width are refused, naming the key or the version;
 *   - model_score_pair (one lookup for a version and its delta) gives both
 *     model_score results;
 *   - the fold: the parent with the undo appended, and the folded version,
 *     score exactly as before the base was written;
 *   - the partitioned build: records put partition by partition equal puts
 *     key by key (overwrites, deletes, key 0); a chain whose overlay spans
 *     several partitions gives the rebuilt model's exact key count, scores
 *     and undo, and a bad delete in it is still refused by key.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/model_impl.h" /* the partitioned build's records */
#include "model/overlay.h"
#include "store/delta.h"
#include "tests/test_fs.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KF 5         /* FM: w + 4 factors */
#define NKEYS 6000
#define SHARDS 4

static uint64_t id_of(uint32_t i) { return ((uint64_t)(i % 7) << 56) | (i * 0x9e3779b97f4a7c15ULL >> 8); }

static void value_of(uint64_t id, uint32_t salt, float *v)
{
    for (uint32_t j = 0; j < KF; j++)
        v[j] = (float)((int64_t)((id >> (j * 5)) % 61) - 30) / (64.0f + (float)salt) * (j ? 0.25f : 1.0f);
}

static store_t *make_store(void)
{
    store_options_t opt = {.value_floats = KF, .shards = SHARDS, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float v[KF];
    for (uint32_t i = 1; i <= NKEYS; i++) {
        value_of(id_of(i), 0, v);
        assert_int_equal(store_upsert(s, id_of(i), v), 1);
    }
    value_of(0, 0, v);
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, v), 1);
    return s;
}

static const store_meta_t META = {.model_name = "ov", .model_kind = STORE_MODEL_FM, .version = 1};

static model_t *make_model(void)
{
    model_t *m;
    assert_int_equal(model_from_store(make_store(), &META, &m), 0);
    return m;
}

static void scratch(char *out)
{
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(out, PATH_MAX, "%s/overlayXXXXXX", root);
    assert_non_null(mkdtemp(out));
}

/* Delta `version` over `parent`: upserts ids [a, b) with salt, deletes the listed ids. */
static store_delta_t *write_delta(const char *root, const model_t *m, uint64_t parent,
                                  uint64_t version, uint32_t a, uint32_t b, uint32_t step,
                                  uint32_t salt, const uint64_t *dels, size_t ndel)
{
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/%llu", root, (unsigned long long)version);
    store_delta_layout_t lay;
    store_delta_layout_of(model_store(m), model_meta(m), &lay);
    store_delta_writer_t *w;
    store_error_t err;
    assert_int_equal(store_delta_begin(dir, &lay, parent, version, "test", &w, &err), 0);
    float v[KF];
    for (uint32_t i = a; i < b; i += step) {
        value_of(id_of(i), salt, v);
        assert_int_equal(store_delta_put(w, id_of(i), v), 0);
    }
    for (size_t i = 0; i < ndel; i++)
        assert_int_equal(store_delta_del(w, dels[i]), 0);
    assert_int_equal(store_delta_commit(w, &err), 0);
    store_delta_t *d;
    assert_int_equal(store_delta_open(dir, &d, &err), 0);
    return d;
}

/* Request r of 40: a shared block and 8 items of 24 ids over 1..NKEYS+200,
 * some absent. */
static void request_of(uint32_t r, uint64_t ids[9][24], float xs[9][24], codec_block_t blocks[9])
{
    for (uint32_t b = 0; b < 9; b++) {
        for (uint32_t j = 0; j < 24; j++) {
            uint32_t i = 1 + (r * 997 + b * 131 + j * 61) % (NKEYS + 200);
            ids[b][j] = id_of(i);
            xs[b][j] = 1.0f;
        }
        blocks[b] = (codec_block_t){.n = 24, .ids = ids[b], .values = xs[b]};
    }
}

/* The 40 requests' scores with m, and with next when next != NULL (through
 * model_score_pair). */
static void score_requests(const model_t *m, const model_t *next, float *out, float *out_next)
{
    model_scratch_t *sc;
    assert_int_equal(model_scratch_create(4096, &sc), 0);
    assert_true(model_scratch_fit(sc, m, 4096) >= 0);
    if (next)
        assert_true(model_scratch_fit(sc, next, 4096) >= 0);
    uint64_t ids[9][24];
    float xs[9][24];
    codec_block_t blocks[9];
    for (uint32_t r = 0; r < 40; r++) {
        request_of(r, ids, xs, blocks);
        if (next)
            assert_int_equal(model_score_pair(m, next, &blocks[0], &blocks[1], 8, out + r * 8,
                                              out_next + r * 8, sc),
                             0);
        else
            assert_int_equal(model_score(m, &blocks[0], &blocks[1], 8, out + r * 8, sc), 0);
    }
    model_scratch_destroy(sc);
}

static void score_all(const model_t *m, float *out) { score_requests(m, NULL, out, NULL); }

static void score_pair_all(const model_t *m, const model_t *next, float *out, float *out_next)
{
    score_requests(m, next, out, out_next);
}

static void test_table(void **state)
{
    (void)state;
    model_overlay_t *o;
    assert_int_equal(model_overlay_create(2, 50000, &o), 0);
    float v[2] = {1.5f, -2.0f}, got[2];
    assert_int_equal(model_overlay_get(o, 7, got), 0);
    assert_int_equal(model_overlay_put(o, 7, v), 1);
    assert_int_equal(model_overlay_put(o, 0, v), 1);
    assert_int_equal(model_overlay_put(o, 0, NULL), 0);
    assert_int_equal(model_overlay_get(o, 0, got), 2);
    v[0] = 3.0f;
    assert_int_equal(model_overlay_put(o, 7, v), 0);
    assert_int_equal(model_overlay_get(o, 7, got), 1);
    assert_true(got[0] == 3.0f && got[1] == -2.0f);
    assert_int_equal(model_overlay_count(o), 2);
    assert_int_equal(model_overlay_deletes(o), 1);
    /* 50,000 random keys, every fifth deleted, against a reference array. */
    uint64_t *keys = malloc(100000 * sizeof *keys);
    float *out = malloc(100000 * 2 * sizeof *out);
    uint8_t *found = malloc(100000);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        keys[i] = x | 1; /* odd: never 0 or 7 */
    }
    for (int i = 2; i < 50000; i++) {
        float w[2] = {(float)i, (float)-i};
        assert_int_equal(model_overlay_put(o, keys[i], i % 5 ? w : NULL), 1);
    }
    assert_int_equal(model_overlay_put(o, 12345, v), -ENOSPC);
    for (int i = 0; i < 100000; i++) {
        out[2 * i] = out[2 * i + 1] = 42.0f;
        found[i] = 9;
    }
    model_overlay_lookup(o, keys, 99999, out, found); /* not a multiple of the group */
    model_overlay_lookup(o, keys + 99999, 1, out + 2 * 99999, found + 99999);
    for (int i = 0; i < 100000; i++) {
        if (i < 2 || i >= 50000) {
            assert_true(out[2 * i] == 42.0f && found[i] == 9); /* untouched */
        } else if (i % 5) {
            assert_true(out[2 * i] == (float)i && out[2 * i + 1] == (float)-i && found[i] == 1);
        } else {
            assert_true(out[2 * i] == 0.0f && out[2 * i + 1] == 0.0f && found[i] == 0);
        }
    }
    free(keys);
    free(out);
    free(found);
    model_overlay_unref(o);
}

static void test_deltas_as_overlay_equal_rebuild(void **state)
{
    (void)state;
    char root[PATH_MAX];
    scratch(root);
    model_t *parent = make_model();
    /* Delta 2: every third key re-valued, 300 new keys, 50 deletes (incl. the bias);
     * delta 3: deletes one key delta 2 upserted, re-inserts one it deleted. */
    uint64_t del2[50], del3[1] = {id_of(4)};
    for (int i = 0; i < 50; i++)
        del2[i] = i == 0 ? MODEL_BIAS_ID : id_of(2 + 3 * (uint32_t)i);
    store_delta_t *d2 = write_delta(root, parent, 1, 2, 1, NKEYS + 301, 3, 1, del2, 50);
    store_delta_t *d3 = write_delta(root, parent, 2, 3, 5, 6, 1, 2, del3, 1);
    store_delta_t *d[2] = {d2, d3};

    model_t *ov = NULL;
    store_error_t err;
    assert_int_equal(model_apply_deltas(parent, d, 2, &ov, &err), 0);
    assert_int_equal(model_meta(ov)->version, 3);
    assert_int_equal(model_overlays(ov, NULL), 1);

    /* The rebuild: a fresh copy of the parent with both deltas applied. */
    store_t *rs = make_store();
    store_meta_t rmeta = META;
    assert_int_equal(store_delta_apply(rs, &rmeta, d2, &err), 0);
    assert_int_equal(store_delta_apply(rs, &rmeta, d3, &err), 0);
    model_t *rebuilt;
    assert_int_equal(model_from_store(rs, &rmeta, &rebuilt), 0);
    assert_int_equal(model_key_count(ov), store_count(model_store(rebuilt)));

    float *a = malloc(320 * sizeof *a), *b = malloc(320 * sizeof *b), *p0 = malloc(320 * sizeof *p0);
    score_all(ov, a);
    score_all(rebuilt, b);
    assert_memory_equal(a, b, 320 * sizeof *a);
    score_all(parent, p0);
    assert_memory_not_equal(a, p0, 320 * sizeof *a);
    /* The gate's pair: one lookup, the overlay between the scorings; and the fallback. */
    float *pa = malloc(320 * sizeof *pa), *pb = malloc(320 * sizeof *pb);
    score_pair_all(parent, ov, pa, pb);
    assert_memory_equal(pa, p0, 320 * sizeof *a);
    assert_memory_equal(pb, a, 320 * sizeof *a);
    score_pair_all(rebuilt, parent, pa, pb); /* not an overlay of it: two scorings */
    assert_memory_equal(pa, a, 320 * sizeof *a);
    assert_memory_equal(pb, p0, 320 * sizeof *a);
    free(pa);
    free(pb);

    /* The fold: parent + undo, then the base written, then the folded version. */
    model_overlay_t *undo;
    assert_int_equal(model_fold_undo(ov, &undo), 0);
    model_t *kept;
    assert_int_equal(model_derive(parent, NULL, &undo, 1, model_key_count(parent), &kept), 0);
    assert_int_equal(model_base_sharers(parent), 3);
    assert_int_equal(model_fold_write(ov, 2), 0);
    model_t *folded;
    assert_int_equal(model_derive(ov, NULL, NULL, 0, 0, &folded), 0);
    assert_int_equal(model_key_count(folded), model_key_count(ov));
    score_all(folded, b);
    assert_memory_equal(a, b, 320 * sizeof *a);
    score_all(ov, b); /* overlay over the written base: the same */
    assert_memory_equal(a, b, 320 * sizeof *a);
    score_all(kept, b); /* the parent through the undo: its own scores */
    assert_memory_equal(p0, b, 320 * sizeof *a);
    assert_int_equal(model_key_count(kept), NKEYS + 1);

    model_overlay_unref(undo);
    model_destroy(kept);
    model_destroy(folded);
    model_destroy(ov);
    model_destroy(rebuilt);
    store_delta_close(d2);
    store_delta_close(d3);
    model_destroy(parent);
    free(a);
    free(b);
    free(p0);
    test_rm_rf(root);
}

static void test_refusals(void **state)
{
    (void)state;
    char root[PATH_MAX];
    scratch(root);
    model_t *parent = make_model();
    uint64_t absent[1] = {id_of(NKEYS + 50)};
    store_delta_t *bad_del = write_delta(root, parent, 1, 2, 1, 10, 1, 1, absent, 1);
    model_t *out = NULL;
    store_error_t err;
    assert_int_equal(model_apply_deltas(parent, &bad_del, 1, &out, &err), -EBADMSG);
    assert_int_equal(err.code, STORE_E_MISMATCH);
    char want[64];
    snprintf(want, sizeof want, "deletes key %llu", (unsigned long long)absent[0]);
    assert_non_null(strstr(err.msg, want));
    assert_null(out);
    store_delta_t *gap = write_delta(root, parent, 5, 6, 1, 10, 1, 1, NULL, 0);
    assert_int_equal(model_apply_deltas(parent, &gap, 1, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "applies to version 5, not to version 1"));
    store_delta_close(bad_del);
    store_delta_close(gap);
    model_destroy(parent);
    test_rm_rf(root);
}

/* Records grouped by partition, put together, equal the same puts one by one. */
static void test_records(void **state)
{
    (void)state;
    enum { N = 40000 };
    model_overlay_t *o, *ref;
    assert_int_equal(model_overlay_create(2, N, &o), 0);
    assert_int_equal(model_overlay_create(2, N, &ref), 0);
    uint32_t parts = model__overlay_parts(o);
    assert_true(parts > 1);
    size_t rb = model__overlay_record_bytes(o);
    uint8_t *recs = malloc((size_t)(N + 2) * rb), *sorted = malloc((size_t)(N + 2) * rb);
    uint64_t *keys = malloc((N + 2) * sizeof *keys);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N + 2; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* key 0 once, and two keys put twice (the later put wins) */
        keys[i] = i == 7 ? 0 : i == N ? keys[3] : i == N + 1 ? keys[11] : x | 1;
        float w[2] = {(float)i, (float)-i};
        const float *v = i % 6 == 0 ? NULL : w;
        model__overlay_record(o, recs + (size_t)i * rb, keys[i], v);
        model_overlay_put(ref, keys[i], v);
    }
    size_t at = 0; /* stable grouping by partition */
    for (uint32_t p = 0; p < parts; p++)
        for (int i = 0; i < N + 2; i++)
            if (model__overlay_part_of(o, keys[i]) == p)
                memcpy(sorted + at++ * rb, recs + (size_t)i * rb, rb);
    assert_int_equal(at, N + 2);
    model__overlay_populate(o);
    assert_int_equal(model__overlay_put_records(o, sorted, at), 0);
    assert_int_equal(model_overlay_count(o), model_overlay_count(ref));
    assert_int_equal(model_overlay_count(o), N);
    assert_int_equal(model_overlay_deletes(o), model_overlay_deletes(ref));
    for (int i = 0; i < N + 2; i++) {
        float a[2] = {0, 0}, b[2] = {0, 0};
        assert_int_equal(model_overlay_get(o, keys[i], a), model_overlay_get(ref, keys[i], b));
        assert_memory_equal(a, b, sizeof a);
    }
    float v[2] = {1, 2};
    uint8_t one[64];
    model__overlay_record(o, one, 0x5151, v);
    assert_int_equal(model__overlay_put_records(o, one, 1), -ENOSPC); /* full */
    free(recs);
    free(sorted);
    free(keys);
    model_overlay_unref(o);
    model_overlay_unref(ref);
}

/* A chain whose overlay spans several partitions: exact key count, scores
 * and undo against the rebuilt model; a bad delete among its keys refused. */
static void test_partitioned_chain(void **state)
{
    (void)state;
    char root[PATH_MAX];
    scratch(root);
    model_t *parent = make_model();
    uint64_t del2[40], del3[2] = {id_of(4), id_of(NKEYS + 5)};
    for (int i = 0; i < 40; i++)
        del2[i] = id_of(3 + 7 * (uint32_t)i);
    /* every key re-valued (3000 of them new), then a second delta over them */
    store_delta_t *d2 = write_delta(root, parent, 1, 2, 1, NKEYS + 3001, 1, 1, del2, 40);
    store_delta_t *d3 = write_delta(root, parent, 2, 3, 3, 11, 7, 2, del3, 2);
    store_delta_t *d[2] = {d2, d3};
    model_t *ov = NULL;
    store_error_t err;
    assert_int_equal(model_apply_deltas(parent, d, 2, &ov, &err), 0);
    model_overlay_t *o;
    assert_int_equal(model_overlays(ov, &o), 1);
    assert_true(model__overlay_parts(o) > 1);
    store_t *rs = make_store();
    store_meta_t rmeta = META;
    assert_int_equal(store_delta_apply(rs, &rmeta, d2, &err), 0);
    assert_int_equal(store_delta_apply(rs, &rmeta, d3, &err), 0);
    model_t *rebuilt;
    assert_int_equal(model_from_store(rs, &rmeta, &rebuilt), 0);
    assert_int_equal(model_key_count(ov), store_count(model_store(rebuilt)));
    assert_int_equal(model_key_count(ov), NKEYS + 1 + 3000 - 40 - 2 + 2); /* 3, 10 back */
    float *a = malloc(320 * sizeof *a), *b = malloc(320 * sizeof *b);
    float *p0 = malloc(320 * sizeof *p0);
    score_all(ov, a);
    score_all(rebuilt, b);
    assert_memory_equal(a, b, 320 * sizeof *a);
    score_all(parent, p0);
    /* The undo holds the base's value of every overlay key, deleted where absent. */
    model_overlay_t *undo;
    assert_int_equal(model_fold_undo(ov, &undo), 0);
    assert_int_equal(model_overlay_count(undo), model_overlay_count(o));
    assert_int_equal(model_overlay_deletes(undo), 3000);
    model_t *kept;
    assert_int_equal(model_derive(parent, NULL, &undo, 1, model_key_count(parent), &kept), 0);
    /* The writes in two passes: first the keys the base holds take the
     * overlay's values (a new key still absent, a deleted one still there),
     * then the rest. */
    store_t *base = model_base_store(ov);
    float got[KF], exp[KF];
    model_fold_rest_t *rest;
    assert_int_equal(model_fold_overwrite(ov, 2, &rest), 0);
    /* left: 2999 inserts (new in d2, less NKEYS + 5) and 40 deletes (d2's 40 less 3 and
     * 10, brought back by d3; d3's 4 and NKEYS + 5) */
    assert_int_equal(model_fold_rest_count(rest), 2999 + 40);
    assert_int_equal(store_lookup(base, id_of(5), got), 1); /* re-valued by d2 */
    assert_int_equal(store_lookup(model_store(rebuilt), id_of(5), exp), 1);
    assert_memory_equal(got, exp, sizeof got);
    assert_int_equal(store_lookup(base, id_of(NKEYS + 100), got), 0); /* new in d2 */
    assert_int_equal(store_lookup(base, id_of(4), got), 1);            /* deleted by d3 */
    score_all(ov, b);
    assert_memory_equal(b, a, 320 * sizeof *b);
    assert_int_equal(model_fold_rest(ov, rest), 0);
    model_fold_rest_free(rest);
    assert_int_equal(store_lookup(base, id_of(NKEYS + 100), got), 1);
    assert_int_equal(store_lookup(base, id_of(4), got), 0);
    score_all(kept, b);
    assert_memory_equal(b, p0, 320 * sizeof *b);
    score_all(ov, b);
    assert_memory_equal(b, a, 320 * sizeof *b);
    model_overlay_unref(undo);
    model_destroy(kept);
    model_destroy(ov);
    model_destroy(rebuilt);
    /* A delete of an absent key in a multi-partition delta: refused, named. */
    model_t *p2 = make_model();
    uint64_t gone = id_of(NKEYS + 77);
    store_delta_t *bad = write_delta(root, p2, 1, 9, 1, NKEYS + 1, 1, 3, &gone, 1);
    model_t *out = NULL;
    assert_int_equal(model_apply_deltas(p2, &bad, 1, &out, &err), -EBADMSG);
    char want[64];
    snprintf(want, sizeof want, "deletes key %llu", (unsigned long long)gone);
    assert_non_null(strstr(err.msg, want));
    assert_null(out);
    store_delta_close(bad);
    model_destroy(p2);
    free(a);
    free(b);
    free(p0);
    store_delta_close(d2);
    store_delta_close(d3);
    model_destroy(parent);
    test_rm_rf(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_deltas_as_overlay_equal_rebuild),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_partitioned_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
