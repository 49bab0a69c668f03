/*
 * test_train_ops.c — the one trainer interface (model/train.h), every kind
 * through train_t only, as the server's online trainer will drive it:
 *
 *   - samples given as a shared block plus item blocks train; once every id
 *     has a row (new ids start non-zero in FM, FFM, DNN, but predict counts
 *     an unseen id as 0, as served), each prediction an update reports is
 *     train_predict()'s before that step;
 *   - what the scoring path reads is what the updates wrote: the trainer's
 *     export, loaded with model_load(), scores every sample with
 *     model_score() bit for bit as train_predict() (sample as the shared
 *     block) and to rounding when the sample is split into shared + item;
 *     for the kinds whose state is a store (LR, FM, DNN) each served row is
 *     the prefix of the row in the trainer's live store (train_store()),
 *     and LR-FTRL's served weight is float 2 of its [z | n | w] row;
 *   - weights NULL is weight 1 everywhere, bit for bit;
 *   - bad options are refused with a sentence, by kind;
 *   - LR learns into a served store (train_attach_live): a fresh trainer
 *     over the served weights of another predicts exactly as that one did,
 *     and after its steps every served weight equals its state's, new ids
 *     inserted; the other kinds refuse a served store of LR's width.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SAMPLES = 400, NS = 6, NI = 4, NF = NS + NI, FIELDS = 4 };

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Samples: NS shared features then NI item features, ids over FIELDS
 * fields (field in the top byte), a few repeats, values in (0, 1]. */
struct data {
    uint64_t ids[SAMPLES][NF];
    float vals[SAMPLES][NF];
    float labels[SAMPLES];
};

static void make_data(struct data *d)
{
    uint64_t s = 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < SAMPLES; i++) {
        for (int j = 0; j < NF; j++) {
            d->ids[i][j] = ((uint64_t)(j % FIELDS) << 56) | (rnd(&s) % 40 + 1);
            d->vals[i][j] = (float)(rnd(&s) % 1000 + 1) / 1000.0f;
        }
        d->labels[i] = (d->ids[i][0] & 3) == 0 ? 1.0f : 0.0f;
    }
}

static void options_for(store_model_kind_t kind, train_options_t *o)
{
    /* Adagrad for every kind: LR's state row then starts with w, as FM's,
     * FFM's and DNN's start with their serving rows */
    assert_int_equal(train_defaults(kind, TRAIN_ADAGRAD, o), 0);
    uint32_t *f = train_options_fields(o);
    if (f)
        *f = FIELDS;
    if (kind == STORE_MODEL_FFM)
        o->ffm.k = 2;
    if (kind == STORE_MODEL_DNN) {
        o->dnn.dim = 4;
        o->dnn.n_hidden = 1;
        o->dnn.hidden[0] = 8;
    }
}

static const store_model_kind_t kinds[] = {STORE_MODEL_LR, STORE_MODEL_FM, STORE_MODEL_FFM,
                                           STORE_MODEL_DNN};

static void test_scores_as_served(void **state)
{
    (void)state;
    struct data *d = malloc(sizeof *d);
    assert_non_null(d);
    make_data(d);
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++) {
        train_options_t o;
        options_for(kinds[ki], &o);
        train_t *t;
        char why[256];
        if (train_create(&o, &t, why, sizeof why) != 0)
            fail_msg("create: %s", why);
        const char *name = train_ops(t)->name;
        assert_int_equal(train_ops(t)->kind, kinds[ki]);
        /* two passes: the first creates every id's row */
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < SAMPLES; i++) {
                codec_block_t shared = {.ids = d->ids[i], .values = d->vals[i], .n = NS};
                codec_block_t item = {.ids = d->ids[i] + NS, .values = d->vals[i] + NS, .n = NI};
                codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
                float before = train_predict(t, &shared, &item), p;
                float again = train_predict(t, &whole, NULL);
                assert_memory_equal(&before, &again, sizeof before); /* one run either way */
                assert_int_equal(train_update(t, &shared, &item, 1, &d->labels[i], NULL, &p), 0);
                if (pass == 1 && memcmp(&p, &before, sizeof p) != 0)
                    fail_msg("%s sample %d: update saw %.9g, predict %.9g", name, i, p, before);
            }
        }
        codec_block_t shared = {.ids = d->ids[0], .values = d->vals[0], .n = NS};
        codec_block_t items[2] = {{.ids = d->ids[0] + NS, .values = d->vals[0] + NS, .n = NI},
                                  {.ids = d->ids[1] + NS, .values = NULL, .n = NI}};
        float labels[2] = {1, 0}, p2[2];
        assert_int_equal(train_update(t, &shared, items, 2, labels, NULL, p2), 0);
        assert_true(p2[0] > 0 && p2[0] < 1 && p2[1] > 0 && p2[1] < 1);

        char dir[400];
        const char *tmp = getenv("TL_TEST_TMP");
        if (!tmp || !*tmp || strlen(tmp) > 300)
            tmp = "/tmp";
        snprintf(dir, sizeof dir, "%s/train_ops_%d_%s", tmp, (int)getpid(), name);
        char cmd[1000];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -rf '%s'", tmp, dir);
        assert_int_equal(system(cmd), 0);
        store_meta_t meta = {.model_name = "ops", .version = 3};
        store_error_t err;
        if (train_export(t, dir, &meta, &err) != 0)
            fail_msg("%s export: %s", name, err.msg);
        model_t *m;
        if (model_load(dir, 1, &m, &err) != 0)
            fail_msg("%s model_load: %s", name, err.msg);
        assert_int_equal(model_meta(m)->model_kind, kinds[ki]);
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_true(model_scratch_fit(sc, m, NF) >= 0);
        for (int i = 0; i < SAMPLES; i++) {
            codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
            codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
            float served, mine = train_predict(t, &whole, NULL);
            assert_int_equal(model_score(m, &whole, &none, 1, &served, sc), 0);
            if (memcmp(&served, &mine, sizeof served) != 0)
                fail_msg("%s sample %d: served %.9g, trainer %.9g", name, i, served, mine);
            codec_block_t sh = {.ids = d->ids[i], .values = d->vals[i], .n = NS};
            codec_block_t it = {.ids = d->ids[i] + NS, .values = d->vals[i] + NS, .n = NI};
            assert_int_equal(model_score(m, &sh, &it, 1, &served, sc), 0);
            mine = train_predict(t, &sh, &it);
            if (fabsf(served - mine) > 1e-6f)
                fail_msg("%s sample %d split: served %.9g, trainer %.9g", name, i, served, mine);
        }
        /* the live store's rows start with the served rows */
        const store_t *live = train_store(t);
        if (kinds[ki] == STORE_MODEL_FFM) {
            assert_null(live);
        } else {
            assert_non_null(live);
            const store_t *served = model_store(m);
            const uint32_t K = store_value_floats(served);
            float a[STORE_MAX_VALUE_FLOATS], b[STORE_MAX_VALUE_FLOATS];
            for (int i = 0; i < SAMPLES; i++)
                for (int j = 0; j < NF; j++) {
                    memset(a, 0, sizeof a);
                    memset(b, 0, sizeof b);
                    assert_int_equal(store_lookup(live, d->ids[i][j], a), 1);
                    store_lookup(served, d->ids[i][j], b); /* absent: an all-zero row */
                    assert_memory_equal(a, b, K * sizeof *a);
                }
        }
        model_scratch_destroy(sc);
        model_destroy(m);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        train_destroy(t);
    }
    free(d);
}

/* LR learns a batch (one shared block, many items: train_update's BATCH
 * path, which keeps the shared rows in its work space for the batch) with
 * the very steps of one sample at a time (shared ++ item joined by the test
 * and given as the whole sample), for every optimizer, live or not: the
 * predictions, every state row and every served weight bit for bit.  The
 * ids are drawn from a small pool so that ids repeat inside the shared
 * block and inside an item, item ids are shared ids, and the bias's id
 * appears in both blocks. */
static void test_lr_batch_equals_one_at_a_time(void **state)
{
    (void)state;
    enum { FRAMES = 30, ITEMS = 12, SH = 9, IT = 7, POOL = 40 };
    uint64_t pool[POOL];
    for (int i = 0; i < POOL; i++)
        pool[i] = i == 0 ? MODEL_BIAS_ID : ((uint64_t)(i % 3 + 1) << 56) | (uint64_t)(i * 7919);
    for (int oi = 0; oi < 3; oi++) {
        for (int live_on = 0; live_on < 2; live_on++) {
            train_t *t[2];
            store_t *served[2] = {NULL, NULL};
            train_options_t o;
            assert_int_equal(train_defaults(STORE_MODEL_LR, (train_optimizer_t)oi, &o), 0);
            char why[256];
            for (int k = 0; k < 2; k++) {
                if (train_create(&o, &t[k], why, sizeof why) != 0)
                    fail_msg("create: %s", why);
                if (live_on) {
                    store_options_t so = {.value_floats = 1};
                    assert_int_equal(store_create(&so, &served[k]), 0);
                    for (int i = 1; i < POOL; i += 2) { /* half the ids already served */
                        float w = 0.01f * (float)i;
                        assert_true(store_upsert(served[k], pool[i], &w) >= 0);
                    }
                    assert_int_equal(train_attach_live(t[k], served[k], why, sizeof why), 0);
                }
            }
            uint64_t s = 77 + (uint64_t)oi;
            for (int f = 0; f < FRAMES; f++) {
                uint64_t sid[SH], iid[ITEMS][IT], joined[SH + IT];
                float sv[SH], iv[ITEMS][IT], jv[SH + IT], labels[ITEMS], w8[ITEMS];
                for (int j = 0; j < SH; j++) {
                    sid[j] = pool[rnd(&s) % POOL];
                    sv[j] = (float)(rnd(&s) % 1000 + 1) / 1000.0f;
                }
                codec_block_t items[ITEMS];
                for (int i = 0; i < ITEMS; i++) {
                    for (int j = 0; j < IT; j++) {
                        iid[i][j] = pool[rnd(&s) % POOL];
                        iv[i][j] = (float)(rnd(&s) % 1000 + 1) / 1000.0f;
                    }
                    labels[i] = (float)(rnd(&s) % 3 == 0);
                    w8[i] = (float)(rnd(&s) % 4 + 1) / 2.0f;
                    items[i] = (codec_block_t){.ids = iid[i], .values = iv[i], .n = IT};
                }
                const codec_block_t shared = {.ids = sid, .values = sv, .n = SH};
                float pa[ITEMS], pb[ITEMS];
                assert_int_equal(train_update(t[0], &shared, items, ITEMS, labels, w8, pa), 0);
                for (int i = 0; i < ITEMS; i++) {
                    memcpy(joined, sid, sizeof sid);
                    memcpy(joined + SH, iid[i], sizeof iid[i]);
                    memcpy(jv, sv, sizeof sv);
                    memcpy(jv + SH, iv[i], sizeof iv[i]);
                    const codec_block_t whole = {.ids = joined, .values = jv, .n = SH + IT};
                    assert_int_equal(
                        train_update(t[1], &whole, NULL, 1, &labels[i], &w8[i], &pb[i]), 0);
                }
                if (memcmp(pa, pb, sizeof pa) != 0)
                    fail_msg("%s%s frame %d: a batch's predictions differ from one at a time",
                             train_optimizer_name((train_optimizer_t)oi), live_on ? " live" : "",
                             f);
            }
            for (int i = 0; i < POOL; i++) {
                float a[3] = {0, 0, 0}, b[3] = {0, 0, 0};
                int fa = store_lookup(train_store(t[0]), pool[i], a);
                int fb = store_lookup(train_store(t[1]), pool[i], b);
                if (fa != fb || memcmp(a, b, sizeof a) != 0)
                    fail_msg("%s%s: id %d's state differs", train_optimizer_name((train_optimizer_t)oi),
                             live_on ? " live" : "", i);
                if (live_on) {
                    float wa = 0, wb = 0;
                    fa = store_lookup(served[0], pool[i], &wa);
                    fb = store_lookup(served[1], pool[i], &wb);
                    if (fa != fb || memcmp(&wa, &wb, sizeof wa) != 0)
                        fail_msg("%s live: id %d's served weight differs",
                                 train_optimizer_name((train_optimizer_t)oi), i);
                }
            }
            for (int k = 0; k < 2; k++) {
                train_destroy(t[k]);
                store_destroy(served[k]);
            }
        }
    }
}

/* LR-FTRL, LR's default: the state row is [z | n | w], so the served weight
 * is float 2 of the live row, not its prefix (train.h, WHERE THE SERVED
 * WEIGHTS ARE). */
static void test_lr_ftrl_served_float(void **state)
{
    (void)state;
    struct data *d = malloc(sizeof *d);
    assert_non_null(d);
    make_data(d);
    train_options_t o;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o), 0);
    o.lr.l1 = 0; /* every touched id keeps a non-zero w, so every row is served */
    train_t *t;
    char why[256];
    if (train_create(&o, &t, why, sizeof why) != 0)
        fail_msg("create: %s", why);
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
        assert_int_equal(train_update(t, &whole, NULL, 1, &d->labels[i], NULL, NULL), 0);
    }
    char dir[400];
    const char *tmp = getenv("TL_TEST_TMP");
    if (!tmp || !*tmp || strlen(tmp) > 300)
        tmp = "/tmp";
    snprintf(dir, sizeof dir, "%s/train_ops_%d_lr_ftrl", tmp, (int)getpid());
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -rf '%s'", tmp, dir);
    assert_int_equal(system(cmd), 0);
    store_meta_t meta = {.model_name = "ops", .version = 1};
    store_error_t err;
    if (train_export(t, dir, &meta, &err) != 0)
        fail_msg("export: %s", err.msg);
    model_t *m;
    if (model_load(dir, 1, &m, &err) != 0)
        fail_msg("model_load: %s", err.msg);
    const store_t *live = train_store(t), *served = model_store(m);
    assert_int_equal(store_value_floats(live), 3);
    assert_int_equal(store_value_floats(served), 1);
    for (int i = 0; i < SAMPLES; i++)
        for (int j = 0; j < NF; j++) {
            float a[3] = {0, 0, 0}, b = 0;
            assert_int_equal(store_lookup(live, d->ids[i][j], a), 1);
            store_lookup(served, d->ids[i][j], &b); /* absent: w = 0 */
            assert_memory_equal(&a[2], &b, sizeof b);
        }
    model_destroy(m);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    train_destroy(t);
    free(d);
}

static void test_weight_one(void **state)
{
    (void)state;
    struct data *d = malloc(sizeof *d);
    assert_non_null(d);
    make_data(d);
    const float ones[1] = {1.0f};
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++) {
        train_options_t o;
        options_for(kinds[ki], &o);
        train_t *a, *b;
        assert_int_equal(train_create(&o, &a, NULL, 0), 0);
        assert_int_equal(train_create(&o, &b, NULL, 0), 0);
        for (int i = 0; i < SAMPLES; i++) {
            codec_block_t shared = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
            codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
            float pa, pb;
            assert_int_equal(train_update(a, &shared, &none, 1, &d->labels[i], NULL, &pa), 0);
            assert_int_equal(train_update(b, &shared, &none, 1, &d->labels[i], ones, &pb), 0);
            assert_memory_equal(&pa, &pb, sizeof pa);
        }
        /* a weight 2 step moves the prediction further than a weight 1 step */
        codec_block_t shared = {.ids = d->ids[0], .values = d->vals[0], .n = NF};
        float y = 1, two = 2, p0 = train_predict(a, &shared, NULL);
        assert_int_equal(train_update(a, &shared, NULL, 0, &y, NULL, NULL), 0); /* no items */
        codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
        assert_int_equal(train_update(a, &shared, &none, 1, &y, NULL, NULL), 0);
        assert_int_equal(train_update(b, &shared, &none, 1, &y, &two, NULL), 0);
        float pa = train_predict(a, &shared, NULL), pb = train_predict(b, &shared, NULL);
        assert_true(pa > p0);
        assert_true(pb > pa);
        train_destroy(a);
        train_destroy(b);
    }
    free(d);
}

/* Copies the served float (at offset off of each state row) into a K=1 store. */
struct served_copy {
    store_t *dst;
    uint32_t off;
};

static int copy_served(void *ctx, uint64_t key, const float *row)
{
    struct served_copy *c = ctx;
    return store_upsert(c->dst, key, &row[c->off]) < 0 ? -1 : 0;
}

/* Checks that live holds exactly the served floats of the state rows. */
static int check_served(void *ctx, uint64_t key, const float *row)
{
    struct served_copy *c = ctx;
    float w = NAN;
    if (!store_lookup(c->dst, key, &w) || memcmp(&w, &row[c->off], sizeof w) != 0)
        fail_msg("key %llu: served %.9g, state %.9g", (unsigned long long)key, w, row[c->off]);
    return 0;
}

static void for_every_row(const store_t *s, store_visit_fn fn, struct served_copy *c)
{
    for (uint32_t sh = 0; sh < store_shards(s); sh++)
        assert_int_equal(store_foreach(s, sh, fn, c), 0);
}

static void test_lr_learns_into_a_served_store(void **state)
{
    (void)state;
    struct data *d = malloc(sizeof *d);
    assert_non_null(d);
    make_data(d);
    const train_optimizer_t opts[] = {TRAIN_FTRL, TRAIN_ADAGRAD, TRAIN_SGD};
    for (size_t oi = 0; oi < 3; oi++) {
        train_options_t o;
        assert_int_equal(train_defaults(STORE_MODEL_LR, opts[oi], &o), 0);
        const uint32_t off = opts[oi] == TRAIN_FTRL ? 2 : 0;
        train_t *a, *b;
        char why[256];
        assert_int_equal(train_create(&o, &a, why, sizeof why), 0);
        assert_int_equal(train_create(&o, &b, why, sizeof why), 0);
        for (int i = 0; i < SAMPLES; i++) {
            codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
            assert_int_equal(train_update(a, &whole, NULL, 1, &d->labels[i], NULL, NULL), 0);
        }
        store_options_t so = {.value_floats = 1};
        store_t *live;
        assert_int_equal(store_create(&so, &live), 0);
        struct served_copy c = {live, off};
        for_every_row(train_store(a), copy_served, &c);

        assert_int_equal(train_attach_live(b, live, why, sizeof why), 0);
        /* before any step b predicts what a (whose weights live serves) predicts */
        for (int i = 0; i < SAMPLES; i++) {
            codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
            float pa = train_predict(a, &whole, NULL), pb = train_predict(b, &whole, NULL);
            if (memcmp(&pa, &pb, sizeof pa) != 0)
                fail_msg("%s sample %d: served %.9g, attached trainer %.9g",
                         train_optimizer_name(opts[oi]), i, pa, pb);
        }
        /* steps on a positive sample with an id live lacks: the served
         * prediction rises, the new id is inserted, every served weight is
         * the state's */
        uint64_t ids[NF + 1];
        memcpy(ids, d->ids[1], sizeof d->ids[1]);
        ids[NF] = (3ULL << 56) | 999; /* above every other id of field 3 */
        codec_block_t pos = {.ids = ids, .values = NULL, .n = NF + 1};
        float before = train_predict(b, &pos, NULL), one = 1, after = 0;
        float w999 = 0;
        assert_int_equal(store_lookup(live, ids[NF], &w999), 0);
        for (int r = 0; r < 20; r++)
            assert_int_equal(train_update(b, &pos, NULL, 1, &one, NULL, NULL), 0);
        after = train_predict(b, &pos, NULL);
        assert_true(after > before);
        assert_int_equal(store_lookup(live, ids[NF], &w999), 1);
        assert_true(w999 != 0);
        for (int i = 0; i < SAMPLES; i++) { /* and the rest of the data again */
            codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
            assert_int_equal(train_update(b, &whole, NULL, 1, &d->labels[i], NULL, NULL), 0);
        }
        for_every_row(train_store(b), check_served, &c);

        store_options_t so2 = {.value_floats = 2};
        store_t *wide;
        assert_int_equal(store_create(&so2, &wide), 0);
        assert_int_equal(train_attach_live(a, wide, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "one fp32 float"));
        assert_int_equal(train_attach_live(b, NULL, why, sizeof why), 0); /* detach */
        store_destroy(wide);
        train_destroy(a);
        train_destroy(b);
        store_destroy(live);
    }
    /* the other kinds: a served store of one float per key is not theirs
     * (test_train_live.c covers their own widths) */
    for (size_t ki = 1; ki < sizeof kinds / sizeof *kinds; ki++) {
        train_options_t o;
        options_for(kinds[ki], &o);
        train_t *t;
        char why[256];
        assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
        store_options_t so = {.value_floats = 1};
        store_t *live;
        assert_int_equal(store_create(&so, &live), 0);
        assert_int_equal(train_attach_live(t, live, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "online"));
        train_destroy(t);
        store_destroy(live);
    }
    free(d);
}

static int row_is_finite(void *ctx, uint64_t key, const float *row)
{
    (void)key;
    const uint32_t *k = ctx;
    for (uint32_t i = 0; i < *k; i++)
        if (!isfinite(row[i]))
            fail_msg("key %llu float %u is %g", (unsigned long long)key, i, row[i]);
    return 0;
}

/* A feature value near FLT_MAX makes FTRL's n overflow: the step is refused
 * with -ERANGE and nothing non-finite reaches the state or the served store. */
static void test_lr_refuses_a_non_finite_step(void **state)
{
    (void)state;
    train_options_t o;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o), 0);
    train_t *t;
    char why[256];
    assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
    store_options_t so = {.value_floats = 1};
    store_t *live;
    assert_int_equal(store_create(&so, &live), 0);
    assert_int_equal(train_attach_live(t, live, why, sizeof why), 0);
    uint64_t ids[3] = {5, 6, 7};
    float vals[3] = {1, 3e38f, 1}, one = 1, zero = 0;
    codec_block_t ok = {.ids = ids, .values = NULL, .n = 3};
    codec_block_t huge = {.ids = ids, .values = vals, .n = 3};
    assert_int_equal(train_update(t, &ok, NULL, 1, &one, NULL, NULL), 0);
    /* label 0 after a positive step: p is 1, so g x = 3e38 and n = g^2 x^2 overflows */
    assert_int_equal(train_update(t, &huge, NULL, 1, &zero, NULL, NULL), -ERANGE);
    uint32_t k3 = 3, k1 = 1;
    for (uint32_t sh = 0; sh < store_shards(train_store(t)); sh++)
        assert_int_equal(store_foreach(train_store(t), sh, row_is_finite, &k3), 0);
    for (uint32_t sh = 0; sh < store_shards(live); sh++)
        assert_int_equal(store_foreach(live, sh, row_is_finite, &k1), 0);
    /* The same as an item's own ids (stepped in place in the state): the rows
     * the item stepped before the failing one are restored, exactly. */
    float before[3][3], after[3][3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(store_lookup(train_store(t), ids[i], before[i]), 1);
    const codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
    assert_int_equal(train_update(t, &none, &huge, 1, &zero, NULL, NULL), -ERANGE);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(store_lookup(train_store(t), ids[i], after[i]), 1);
        assert_memory_equal(before[i], after[i], sizeof before[i]);
    }
    for (uint32_t sh = 0; sh < store_shards(live); sh++)
        assert_int_equal(store_foreach(live, sh, row_is_finite, &k1), 0);
    float p = train_predict(t, &ok, NULL);
    assert_true(isfinite(p));
    train_destroy(t);
    store_destroy(live);
}

static void test_bad_options(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++) {
        train_options_t o;
        options_for(kinds[ki], &o);
        switch (kinds[ki]) {
        case STORE_MODEL_LR: o.lr.alpha = 0; break;
        case STORE_MODEL_FM: o.fm.l2_v = -1; break;
        case STORE_MODEL_FFM: o.ffm.beta = NAN; break;
        default: o.dnn.lr_dense = INFINITY; break;
        }
        train_t *t = NULL;
        char why[256] = "";
        assert_int_equal(train_create(&o, &t, why, sizeof why), -EINVAL);
        assert_null(t);
        assert_true(strstr(why, "must be") != NULL);
    }
    train_options_t o;
    assert_int_equal(train_defaults((store_model_kind_t)99, TRAIN_FTRL, &o), -EINVAL);
    o.kind = (store_model_kind_t)99;
    train_t *t = NULL;
    assert_int_equal(train_create(&o, &t, NULL, 0), -EINVAL);
    assert_null(train_ops_for((store_model_kind_t)99));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_as_served),
        cmocka_unit_test(test_lr_ftrl_served_float),
        cmocka_unit_test(test_lr_batch_equals_one_at_a_time),
        cmocka_unit_test(test_weight_one),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_lr_learns_into_a_served_store),
        cmocka_unit_test(test_lr_refuses_a_non_finite_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
