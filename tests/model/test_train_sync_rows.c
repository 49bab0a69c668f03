/*
 * test_train_sync_rows.c — partitioned replicas of the row trainers
 * (model/train_sync.h: ROWS; UPDATE_F_NONNEG_HALF of model/update_codec.h)
 * with real trainers, real served stores and real update messages:
 *
 *   - exact exchange: two replicas of FM (Adagrad, FTRL, SGD), FFM (Adagrad,
 *     FTRL: w's (dz, dn) in coordinate 0's places, as FM-FTRL's) and the
 *     DNN each learn one half of a sample stream (even / odd samples) and,
 *     every interval, add the (dx, dG) the other's hook reported.  After
 *     the last exchange both hold the same rows: within REL of each other
 *     (REL = 1e-5 relative, + 1e-6 absolute: the same increments summed in
 *     another order, each float add rounding by half an ulp), their served
 *     rows equal their state's prefix, and they differ from a replica that
 *     learned its half alone (both halves count);
 *   - 1-bit exchange: the same through update_acc (top 30% of the keys a
 *     turn, NONNEG_HALF) over many intervals: every dG a receiver decodes is
 *     >= 0, no apply is refused (no G ever goes below 0), every G stays
 *     >= 0; after two exact flushes the replicas agree within REL_1BIT
 *     (1e-4: the accumulators' residual sums round too);
 *   - apply: a non-finite d or a dG that would make G < 0 is -ERANGE and
 *     writes nothing (state and served row unchanged; an unseen id is not
 *     created); LR: -ENOTSUP and width 0.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"
#include "model/train_sync.h"
#include "model/update_codec.h"
#include "store/store.h"
#include "test_rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NID 120    /* feature ids: field (i % 3) << 56 | i, i = 1..NID */
#define NS 2000    /* samples */
#define NF 5       /* features a sample */
#define EVERY 50   /* samples per replica between exchanges */
#define MAXD 64    /* 2R at most in these tests */
#define OUTBOX 8192
#define REL 1e-5
#define REL_1BIT 1e-4


static uint64_t id_of(uint64_t i) { return i == 0 ? MODEL_BIAS_ID : ((i % 3) << 56) | i; }

/* Sample i: NF distinct ids, a label from a planted rule. */
static void sample(uint64_t i, uint64_t *ids, float *label)
{
    rng_state = i * 7919 + 13;
    uint64_t base = 1 + rnd() % (NID - NF * 3);
    for (int j = 0; j < NF; j++)
        ids[j] = id_of(base + (uint64_t)j * 3 + rnd() % 3);
    *label = ((ids[0] & 0xffff) % 5 == 0 || rnd() % 7 == 0) ? 1.0f : 0.0f;
}

/* ---- a replica: a trainer, its served store, its outbox -------------------- */

struct sent {
    uint64_t id;
    float d[MAXD];
};

struct replica {
    train_t *t;
    store_t *live;      /* NULL: not attached (the DNN) */
    uint32_t r;         /* train_rows_sync_width */
    struct sent *out;   /* OUTBOX: the hook's reports since the last exchange */
    uint32_t n_out;
    update_acc_t *acc;  /* 1-bit test: the hook adds here instead */
    uint64_t hooked;    /* reports seen */
};

static void hook(void *ctx, uint64_t id, const float *d, uint32_t n)
{
    struct replica *p = ctx;
    assert_int_equal(n, 2 * p->r);
    for (uint32_t i = p->r; i < n; i++)
        assert_true(d[i] >= 0);
    p->hooked++;
    if (p->acc) {
        assert_int_equal(update_acc_add(p->acc, id, d), 0);
        return;
    }
    assert_true(p->n_out < OUTBOX);
    p->out[p->n_out].id = id;
    memcpy(p->out[p->n_out].d, d, n * sizeof *d);
    p->n_out++;
}

enum kind { FM_ADAGRAD, FM_FTRL, FM_SGD, FFM, DNN, FFM_FTRL };

static void options(enum kind k, train_options_t *o)
{
    switch (k) {
    case FM_ADAGRAD:
    case FM_FTRL:
    case FM_SGD:
        assert_int_equal(train_defaults(STORE_MODEL_FM, k == FM_ADAGRAD ? TRAIN_ADAGRAD
                                                        : k == FM_FTRL  ? TRAIN_FTRL
                                                                        : TRAIN_SGD, o), 0);
        o->fm.k = 4;
        o->fm.l1 = k == FM_FTRL ? 0.01 : 0; /* FTRL's closed form with l1 */
        break;
    case FFM:
    case FFM_FTRL:
        assert_int_equal(
            train_defaults(STORE_MODEL_FFM, k == FFM ? TRAIN_ADAGRAD : TRAIN_FTRL, o), 0);
        o->ffm.fields = 3;
        o->ffm.k = 2;
        o->ffm.l1 = k == FFM_FTRL ? 0.01 : 0; /* FTRL's closed form with l1 */
        break;
    case DNN:
        assert_int_equal(train_defaults(STORE_MODEL_DNN, TRAIN_ADAGRAD, o), 0);
        o->dnn.fields = 3;
        o->dnn.dim = 4;
        o->dnn.n_hidden = 1;
        o->dnn.hidden[0] = 8;
        break;
    }
}

static bool is_ffm(enum kind k) { return k == FFM || k == FFM_FTRL; }

static uint32_t served_floats(enum kind k) { return is_ffm(k) ? 1 + 3 * 2 : k == DNN ? 5 : 5; }

static void replica_make(struct replica *p, enum kind k, bool hooked)
{
    memset(p, 0, sizeof *p);
    train_options_t o;
    options(k, &o);
    char why[256];
    if (train_create(&o, &p->t, why, sizeof why) != 0)
        fail_msg("%s", why);
    if (k != DNN) { /* the DNN attaches with its served MLP only; rows are compared in its state */
        store_options_t so = {.value_floats = served_floats(k), .shards = 2, .expected_keys = 256};
        assert_int_equal(store_create(&so, &p->live), 0);
        if (train_attach_live(p->t, p->live, why, sizeof why) != 0)
            fail_msg("%s", why);
    }
    p->r = train_rows_sync_width(p->t);
    assert_int_equal(p->r, served_floats(k));
    assert_true(2 * p->r <= MAXD);
    p->out = calloc(OUTBOX, sizeof *p->out);
    assert_non_null(p->out);
    if (hooked)
        assert_int_equal(train_rows_sync_hook(p->t, hook, p), 0);
}

static void replica_free(struct replica *p)
{
    train_destroy(p->t);
    store_destroy(p->live);
    update_acc_destroy(p->acc);
    free(p->out);
}

static void learn(struct replica *p, uint64_t i)
{
    uint64_t ids[NF];
    float y;
    sample(i, ids, &y);
    codec_block_t shared = {ids, NULL, NF};
    codec_block_t item = {NULL, NULL, 0};
    assert_int_equal(train_update(p->t, &shared, &item, 1, &y, NULL, NULL), 0);
}

/* dst adds src's outbox, in order. */
static void deliver(struct replica *dst, const struct replica *src)
{
    for (uint32_t i = 0; i < src->n_out; i++)
        assert_int_equal(train_rows_sync_apply(dst->t, src->out[i].id, src->out[i].d), 0);
}

/* The row compared for id: the served row when attached (what requests
 * score), else the state row's synced columns (the DNN: [x | G], 2R). */
static bool row(const struct replica *p, uint64_t id, float *out, uint32_t *n)
{
    if (p->live) {
        *n = p->r;
        return store_lookup(p->live, id, out);
    }
    *n = 2 * p->r;
    float st[2 * MAXD];
    if (!store_lookup(train_store(p->t), id, st))
        return false;
    memcpy(out, st, *n * sizeof *out);
    return true;
}

/* The largest |a - b| / (rel (1 + |a|) + 1e-6) over every id's row: <= 1
 * when a and b agree within rel. */
static double disagreement(const struct replica *a, const struct replica *b, double rel, int *rows)
{
    double worst = 0;
    *rows = 0;
    for (uint64_t i = 0; i <= NID; i++) {
        float ra[2 * MAXD], rb[2 * MAXD];
        uint32_t na, nb;
        bool fa = row(a, id_of(i), ra, &na), fb = row(b, id_of(i), rb, &nb);
        assert_int_equal(fa, fb);
        if (!fa)
            continue;
        (*rows)++;
        for (uint32_t c = 0; c < na; c++) {
            double e = fabs((double)ra[c] - rb[c]) / (rel * (1 + fabs((double)ra[c])) + 1e-6);
            worst = e > worst ? e : worst;
        }
    }
    return worst;
}

/* The served row is the state's prefix (FM: the state is a store). */
static void served_is_state(const struct replica *p, enum kind k)
{
    if (is_ffm(k) || k == DNN)
        return;
    for (uint64_t i = 0; i <= NID; i++) {
        float sv[MAXD], st[4 * MAXD];
        if (!store_lookup(p->live, id_of(i), sv))
            continue;
        assert_true(store_lookup(train_store(p->t), id_of(i), st));
        assert_memory_equal(sv, st, p->r * sizeof *sv);
    }
}

static void exact_exchange(enum kind k)
{
    static struct replica a, b, solo;
    replica_make(&a, k, true);
    replica_make(&b, k, true);
    replica_make(&solo, k, false);
    for (uint64_t i = 0; i < NS; i += 2 * EVERY) {
        for (uint64_t s = i; s < i + 2 * EVERY && s < NS; s += 2) {
            learn(&a, s);
            learn(&b, s + 1);
            learn(&solo, s);
        }
        deliver(&a, &b);
        deliver(&b, &a);
        a.n_out = b.n_out = 0;
    }
    assert_true(a.hooked > NS / 2 && b.hooked > NS / 2);
    int rows;
    double e = disagreement(&a, &b, REL, &rows);
    print_message("kind %d: %d rows, replicas disagree at %.3g of the bound\n", (int)k, rows, e);
    assert_true(rows > NID / 2);
    assert_true(e <= 1.0);
    served_is_state(&a, k);
    served_is_state(&b, k);
    int solo_rows;
    double apart = disagreement(&a, &solo, REL, &solo_rows);
    assert_true(apart > 100); /* the other half moved the rows */
    replica_free(&a);
    replica_free(&b);
    replica_free(&solo);
}

static void test_exact_fm_adagrad(void **s) { (void)s; exact_exchange(FM_ADAGRAD); }
static void test_exact_fm_ftrl(void **s) { (void)s; exact_exchange(FM_FTRL); }
static void test_exact_fm_sgd(void **s) { (void)s; exact_exchange(FM_SGD); }
static void test_exact_ffm(void **s) { (void)s; exact_exchange(FFM); }
static void test_exact_ffm_ftrl(void **s) { (void)s; exact_exchange(FFM_FTRL); }
static void test_exact_dnn(void **s) { (void)s; exact_exchange(DNN); }

/* ---- 1 bit with error feedback ------------------------------------------ */

struct recv {
    struct replica *p;
    uint32_t r;
    uint64_t keys;
};

static int recv_key(void *ctx, uint64_t key, const float *v)
{
    struct recv *rv = ctx;
    for (uint32_t i = rv->r; i < 2 * rv->r; i++)
        assert_true(v[i] >= 0);
    assert_int_equal(train_rows_sync_apply(rv->p->t, key, v), 0); /* never -ERANGE: G >= 0 */
    rv->keys++;
    return 0;
}

/* src's accumulator out (flags, fraction or all), dst applies it. */
static uint64_t turn(struct replica *src, struct replica *dst, uint32_t flags, uint32_t select)
{
    static uint8_t buf[1 << 20];
    update_encode_opts_t o = {.flags = flags, .select_count = select, .select_fraction = 0.3f};
    long len = update_acc_encode(src->acc, &o, buf, sizeof buf);
    assert_true(len > 0);
    update_msg_t m;
    update_error_t err;
    if (update_msg_decode(buf, (size_t)len, &m, &err) != 0)
        fail_msg("%s", err.msg);
    struct recv rv = {.p = dst, .r = dst->r};
    assert_int_equal(update_msg_foreach(&m, recv_key, &rv), 0);
    return rv.keys;
}

/* Every G of p's state (FM Adagrad: columns R..2R-1) is >= 0. */
static void g_nonneg(const struct replica *p)
{
    for (uint64_t i = 0; i <= NID; i++) {
        float st[4 * MAXD];
        if (store_lookup(train_store(p->t), id_of(i), st))
            for (uint32_t c = p->r; c < 2 * p->r; c++)
                assert_true(st[c] >= 0);
    }
}

static void onebit_exchange(enum kind k)
{
    static struct replica a, b;
    replica_make(&a, k, true);
    replica_make(&b, k, true);
    update_acc_config_t ac = {.k = 2 * a.r, .max_keys = 4096, .producer = 1, .first_seq = 1,
                              .chunk = 16, .model = "ctr"};
    assert_int_equal(update_acc_create(&a.acc, &ac), 0);
    ac.producer = 2;
    assert_int_equal(update_acc_create(&b.acc, &ac), 0);
    uint64_t sent = 0;
    for (uint64_t i = 0; i < NS; i += 2 * EVERY) {
        for (uint64_t s = i; s < i + 2 * EVERY && s < NS; s += 2) {
            learn(&a, s);
            learn(&b, s + 1);
        }
        sent += turn(&a, &b, UPDATE_F_NONNEG_HALF, 0);
        sent += turn(&b, &a, UPDATE_F_NONNEG_HALF, 0);
        if (!is_ffm(k)) {
            g_nonneg(&a);
            g_nonneg(&b);
        }
    }
    assert_true(update_acc_count(a.acc) > 0); /* residuals were waiting */
    for (int f = 0; f < 2; f++) { /* the exact flush of a quiet turn */
        turn(&a, &b, UPDATE_F_EXACT, UINT32_MAX);
        turn(&b, &a, UPDATE_F_EXACT, UINT32_MAX);
    }
    assert_int_equal(update_acc_count(a.acc), 0);
    int rows;
    double e = disagreement(&a, &b, REL_1BIT, &rows);
    print_message("kind %d, 1 bit: %llu keys sent, %d rows, replicas disagree at %.3g of the "
                  "bound\n", (int)k, (unsigned long long)sent, rows, e);
    assert_true(e <= 1.0);
    replica_free(&a);
    replica_free(&b);
}

static void test_onebit_fm(void **s) { (void)s; onebit_exchange(FM_ADAGRAD); }
static void test_onebit_ffm(void **s) { (void)s; onebit_exchange(FFM); }
static void test_onebit_ffm_ftrl(void **s) { (void)s; onebit_exchange(FFM_FTRL); }

/* ---- refusals ---------------------------------------------------------- */

static void test_apply_refuses(void **s)
{
    (void)s;
    static struct replica p;
    replica_make(&p, FM_ADAGRAD, false);
    for (uint64_t i = 0; i < 20; i++)
        learn(&p, i);
    uint64_t id = 0;
    float before[4 * MAXD], served[MAXD];
    for (uint64_t i = 1; i <= NID && !id; i++)
        if (store_lookup(train_store(p.t), id_of(i), before))
            id = id_of(i);
    assert_true(id != 0);
    assert_true(store_lookup(p.live, id, served));
    const uint32_t r = p.r;
    float d[MAXD] = {0};
    d[1] = NAN;
    assert_int_equal(train_rows_sync_apply(p.t, id, d), -ERANGE);
    d[1] = 0;
    d[r + 2] = INFINITY;
    assert_int_equal(train_rows_sync_apply(p.t, id, d), -ERANGE);
    d[r + 2] = -(before[r + 2] + 1.0f); /* G below 0 */
    d[0] = 0.5f;                          /* and a fine dx beside it: not written either */
    assert_int_equal(train_rows_sync_apply(p.t, id, d), -ERANGE);
    float after[4 * MAXD], served_after[MAXD];
    assert_true(store_lookup(train_store(p.t), id, after));
    assert_memory_equal(after, before, (2 * r) * sizeof *after);
    assert_true(store_lookup(p.live, id, served_after));
    assert_memory_equal(served_after, served, r * sizeof *served);
    /* a good d is added: x += dx, G += dG, served = state prefix */
    memset(d, 0, sizeof d);
    d[0] = 0.25f;
    d[r] = 2.0f;
    assert_int_equal(train_rows_sync_apply(p.t, id, d), 0);
    assert_true(store_lookup(train_store(p.t), id, after));
    assert_true(after[0] == (float)((double)before[0] + 0.25));
    assert_true(after[r] == (float)((double)before[r] + 2.0));
    assert_true(store_lookup(p.live, id, served_after));
    assert_memory_equal(served_after, after, r * sizeof *after);
    /* an id nobody has starts as a step would (w 0, v from the hash) and adds d */
    assert_int_equal(train_rows_sync_apply(p.t, id_of(NID + 7), d), 0);
    assert_true(store_lookup(p.live, id_of(NID + 7), served_after));
    assert_true(served_after[0] == 0.25f);
    replica_free(&p);

    /* FFM and DNN: an unseen id with a refused d is not created anywhere
     * (FFM-FTRL: d[r] is w's dn, n = 0 - 1) */
    static const enum kind others[] = {FFM, DNN, FFM_FTRL};
    for (int i = 0; i < 3; i++) {
        replica_make(&p, others[i], false);
        float bad[MAXD] = {0};
        bad[p.r] = -1.0f; /* G = 0 - 1 */
        uint64_t fresh = id_of(NID + 9);
        assert_int_equal(train_rows_sync_apply(p.t, fresh, bad), -ERANGE);
        float sv[4 * MAXD];
        if (p.live)
            assert_false(store_lookup(p.live, fresh, sv));
        else
            assert_false(store_lookup(train_store(p.t), fresh, sv));
        bad[p.r] = 1.0f;
        assert_int_equal(train_rows_sync_apply(p.t, fresh, bad), 0);
        assert_true(store_lookup(p.live ? p.live : train_store(p.t), fresh, sv));
        replica_free(&p);
    }

    train_options_t o;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o), 0);
    train_t *lr;
    char why[200];
    assert_int_equal(train_create(&o, &lr, why, sizeof why), 0);
    assert_int_equal(train_rows_sync_width(lr), 0);
    assert_int_equal(train_rows_sync_hook(lr, hook, NULL), -ENOTSUP);
    assert_int_equal(train_rows_sync_apply(lr, 1, d), -ENOTSUP);
    train_destroy(lr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_fm_adagrad), cmocka_unit_test(test_exact_fm_ftrl),
        cmocka_unit_test(test_exact_fm_sgd),     cmocka_unit_test(test_exact_ffm),
        cmocka_unit_test(test_exact_dnn),        cmocka_unit_test(test_onebit_fm),
        cmocka_unit_test(test_onebit_ffm),       cmocka_unit_test(test_apply_refuses),
        cmocka_unit_test(test_exact_ffm_ftrl),   cmocka_unit_test(test_onebit_ffm_ftrl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
