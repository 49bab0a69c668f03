/*
 * test_impression_log.c — server/impression_log.c (#included, to reach the
 * ring and the index): blocks round-trip exactly, every feedback status,
 * duplicates and refusals, eviction oldest first with its negatives, window
 * expiry on a fake clock, 4 threads putting and feeding back while a fifth
 * expires (every OK emitted once, every other item one negative), and ids
 * built to collide under a plain mask keeping probes short.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the four above, which it needs */

#include "server/impression_log.c"

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

static void check_stripe(impression_log_t *log, struct stripe *s);

/* ---- a sink that keeps copies of what was emitted -------------------------------- */

#define REC_MAX 4096
#define REC_IDS 64

typedef struct rec {
    impression_sample_t s; /* blocks' pointers cleared: see the copies */
    uint64_t shared_ids[REC_IDS], ids[REC_IDS];
    float shared_vals[REC_IDS], vals[REC_IDS];
    bool shared_has_vals, has_vals;
} rec_t;

typedef struct sink {
    rec_t r[REC_MAX];
    int n;
} sink_t;

static void copy_block(const codec_block_t *b, uint64_t *ids, float *vals, bool *has)
{
    assert_true(b->n <= REC_IDS);
    assert_true(b->ids != NULL);
    memcpy(ids, b->ids, 8 * (size_t)b->n);
    *has = b->values != NULL;
    if (b->values)
        memcpy(vals, b->values, 4 * (size_t)b->n);
}

static int sink_emit(const impression_sample_t *s, void *ctx)
{
    sink_t *k = ctx;
    assert_true(k->n < REC_MAX);
    rec_t *r = &k->r[k->n++];
    r->s = *s;
    copy_block(&s->shared, r->shared_ids, r->shared_vals, &r->shared_has_vals);
    copy_block(&s->block, r->ids, r->vals, &r->has_vals);
    return 0;
}

/* An impression's negatives handed to a per-sample sink f, one item at a
 * time (the shape the round-trip checks read): how many f took. */
static uint32_t each_negative(const impression_negatives_t *b, impression_log_emit_fn f, void *ctx)
{
    assert_true(b->n >= 1 && b->n <= IMPRESSION_NEGATIVES_MAX);
    impression_sample_t smp = {.impression_id = b->impression_id, .version = b->version,
                               .impression_ms = b->impression_ms, .model_id = b->model_id,
                               .n_items = b->n_items, .label = 0.0f, .weight = b->weight,
                               .src = b->src, .shared = b->shared};
    uint32_t took = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        if (i > 0)
            assert_true(b->item[i] > b->item[i - 1]);
        smp.item = b->item[i];
        smp.block = b->block[i];
        took += f(&smp, ctx) == 0;
    }
    return took;
}

static int sink_emit_count(const impression_sample_t *s, void *ctx)
{
    (void)s;
    ++*(int *)ctx;
    return 0;
}

static uint32_t sink_negatives(const impression_negatives_t *b, void *ctx)
{
    return each_negative(b, sink_emit, ctx);
}

static void assert_block_eq(const codec_block_t *want, const uint64_t *ids, const float *vals,
                            bool has_vals, uint32_t n)
{
    assert_int_equal(n, want->n);
    assert_int_equal(has_vals, want->values != NULL);
    if (want->n)
        assert_memory_equal(ids, want->ids, 8 * (size_t)want->n);
    if (want->values && want->n)
        assert_memory_equal(vals, want->values, 4 * (size_t)want->n);
}

static void assert_rec(const rec_t *r, const codec_block_t *shared, const codec_block_t *item)
{
    assert_block_eq(shared, r->shared_ids, r->shared_vals, r->shared_has_vals, r->s.shared.n);
    assert_block_eq(item, r->ids, r->vals, r->has_vals, r->s.block.n);
}

static impression_log_t *make_log(uint64_t max_bytes, uint32_t stripes, uint64_t window,
                                  sink_t *evict_sink)
{
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = max_bytes;
    c.stripes = stripes;
    c.window_ms = window;
    c.evict_emit = evict_sink ? sink_negatives : NULL;
    c.evict_ctx = evict_sink;
    c.max_entries = max_bytes / 64; /* bytes, not the entry count, bound these logs */
    impression_log_t *log = NULL;
    assert_int_equal(impression_log_create(&c, &log), 0);
    return log;
}

/* A request: shared block with values (odd n: the pad), item 0 with values,
 * item 1 without, item 2 empty, item 3 with one id and values. */
static const uint64_t SH_IDS[] = {3, 9, 1ull << 40, 0xFF00000000000001ull, UINT64_MAX};
static const float SH_VALS[] = {0.5f, -1.0f, 2.0f, 1e-3f, 7.0f};
static const uint64_t I0_IDS[] = {10, 11, 12, 13};
static const float I0_VALS[] = {1.5f, 2.5f, 3.5f, 4.5f};
static const uint64_t I1_IDS[] = {20, 21, 22};
static const uint64_t I3_IDS[] = {42};
static const float I3_VALS[] = {-0.25f};

static const codec_block_t SHARED = {SH_IDS, SH_VALS, 5};
static const codec_block_t ITEMS[4] = {
    {I0_IDS, I0_VALS, 4}, {I1_IDS, NULL, 3}, {NULL, NULL, 0}, {I3_IDS, I3_VALS, 1}};
static const codec_block_t SHARED_NOVALS = {SH_IDS, NULL, 5};

static sink_t *new_sink(void)
{
    sink_t *k = calloc(1, sizeof *k);
    assert_non_null(k);
    return k;
}

/* ---- tests -------------------------------------------------------------------------- */

static void config_refused(void **state)
{
    (void)state;
    impression_log_t *log = (impression_log_t *)1;
    impression_log_config_t d = impression_log_config_default(), bad[6] = {d, d, d, d, d, d};
    bad[0].stripes = 3;
    bad[1].stripes = 8192;
    bad[2].window_ms = 0;
    bad[3].max_bytes = 64 * 4095; /* under 4 KiB a stripe */
    bad[4].negative_weight = NAN;
    bad[5].negative_weight = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(impression_log_create(&bad[i], &log), -EINVAL);
        assert_null(log);
    }
    bad[5].emit_negatives = false; /* the weight is unused then */
    assert_int_equal(impression_log_create(&bad[5], &log), 0);
    impression_log_destroy(log);
    impression_log_destroy(NULL);
}

static void round_trip(void **state)
{
    (void)state;
    sink_t *k = new_sink();
    impression_log_t *log = make_log(1 << 20, 4, 1000, NULL);
    assert_int_equal(impression_log_put(log, 77, 5, 123, 1000, &SHARED, ITEMS, 4), 0);
    assert_int_equal(impression_log_put(log, 78, 5, 124, 1001, &SHARED_NOVALS, ITEMS + 1, 1), 0);

    /* feedback on items 0 and 2 of 77: the blocks exactly as put */
    assert_int_equal(impression_log_feedback(log, 77, 5, 2, 1.0f, 2.0f, 1500, sink_emit, k),
                     IMPRESSION_FB_OK);
    assert_int_equal(impression_log_feedback(log, 77, 5, 0, 0.0f, 0.5f, 1500, sink_emit, k),
                     IMPRESSION_FB_OK);
    assert_int_equal(k->n, 2);
    assert_rec(&k->r[0], &SHARED, &ITEMS[2]);
    assert_rec(&k->r[1], &SHARED, &ITEMS[0]);
    assert_int_equal(k->r[0].s.impression_id, 77);
    assert_int_equal(k->r[0].s.version, 123);
    assert_int_equal(k->r[0].s.model_id, 5);
    assert_int_equal(k->r[0].s.item, 2);
    assert_int_equal(k->r[0].s.n_items, 4);
    assert_int_equal(k->r[0].s.impression_ms, 1000);
    assert_int_equal(k->r[0].s.src, IMPRESSION_SRC_FEEDBACK);
    assert_true(k->r[0].s.label == 1.0f && k->r[0].s.weight == 2.0f);
    assert_true(k->r[1].s.label == 0.0f && k->r[1].s.weight == 0.5f);

    /* at 2000, 77 is exactly window old: kept; at 2001 it goes, 78 stays */
    impression_log_expired_t x = impression_log_expire(log, 2000, sink_negatives, k);
    assert_int_equal(x.entries, 0);
    x = impression_log_expire(log, 2001, sink_negatives, k);
    assert_int_equal(x.entries, 1);
    assert_int_equal(x.negatives, 2);
    assert_int_equal(k->n, 4);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(k->r[i].s.src, IMPRESSION_SRC_EXPIRED);
        assert_true(k->r[i].s.label == 0.0f && k->r[i].s.weight == 1.0f);
        assert_int_equal(k->r[i].s.impression_id, 77);
    }
    assert_int_equal(k->r[2].s.item, 1);
    assert_rec(&k->r[2], &SHARED, &ITEMS[1]);
    assert_int_equal(k->r[3].s.item, 3);
    assert_rec(&k->r[3], &SHARED, &ITEMS[3]);

    /* 78: shared without values, one item without values */
    assert_int_equal(impression_log_feedback(log, 78, 5, 0, 1.0f, 1.0f, 2001, sink_emit, k),
                     IMPRESSION_FB_OK);
    assert_rec(&k->r[4], &SHARED_NOVALS, &ITEMS[1]);
    x = impression_log_expire(log, UINT64_MAX, sink_negatives, k); /* flush: nothing unlabeled */
    assert_int_equal(x.entries, 1);
    assert_int_equal(x.negatives, 0);
    assert_int_equal(k->n, 5);

    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.puts, 2);
    assert_int_equal(st.fb_ok, 3);
    assert_int_equal(st.expired, 2);
    assert_int_equal(st.evicted, 0);
    assert_int_equal(st.negatives_emitted, 2);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.max_bytes, 1 << 20);
    impression_log_destroy(log);
    free(k);
}

static void statuses(void **state)
{
    (void)state;
    sink_t *k = new_sink();
    impression_log_t *log = make_log(1 << 20, 4, 100, NULL);
    assert_int_equal(impression_log_put(log, 1, 7, 1, 0, &SHARED, ITEMS, 4), 0);
    struct {
        uint64_t id;
        uint32_t model, item;
        float label, weight;
        uint64_t now;
        impression_log_fb_t want;
    } cases[] = {
        {2, 7, 0, 1, 1, 0, IMPRESSION_FB_UNKNOWN_IMPRESSION},
        {1, 8, 0, 1, 1, 0, IMPRESSION_FB_WRONG_MODEL},
        {1, 7, 4, 1, 1, 0, IMPRESSION_FB_ITEM_OUT_OF_RANGE},
        {1, 7, UINT32_MAX, 1, 1, 0, IMPRESSION_FB_ITEM_OUT_OF_RANGE},
        {1, 7, 0, NAN, 1, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, 1.5f, 1, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, -0.1f, 1, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, 1, 0, 0, IMPRESSION_FB_OK},        /* weight 0: marked, nothing emitted */
        {1, 7, 0, 0, 1, 0, IMPRESSION_FB_DUPLICATE}, /* it had its feedback */
        {1, 7, 0, 1, -1, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, 1, INFINITY, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, 1, NAN, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 0, 1, 2e6f, 0, IMPRESSION_FB_BAD_VALUE},
        {1, 7, 3, 1, 1, 100, IMPRESSION_FB_OK},
        {1, 7, 3, 0, 1, 100, IMPRESSION_FB_DUPLICATE},
        {1, 7, 2, 1, 1, 101, IMPRESSION_FB_UNKNOWN_IMPRESSION}, /* late, not yet popped */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        impression_log_fb_t got =
            impression_log_feedback(log, cases[i].id, cases[i].model, cases[i].item, cases[i].label,
                                    cases[i].weight, cases[i].now, sink_emit, k);
        if (got != cases[i].want)
            fail_msg("case %zu: got %s, want %s", i, impression_log_fb_str(got),
                     impression_log_fb_str(cases[i].want));
    }
    assert_int_equal(k->n, 1); /* only the OK of weight 1 emitted */
    impression_log_expired_t x = impression_log_expire(log, 101, sink_negatives, k);
    assert_int_equal(x.entries, 1);
    assert_int_equal(x.negatives, 2); /* items 1 and 2: 0 and 3 had feedback */
    assert_int_equal(impression_log_feedback(log, 1, 7, 0, 1, 1, 101, sink_emit, k),
                     IMPRESSION_FB_UNKNOWN_IMPRESSION); /* popped */
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.fb_ok, 2); /* the weight 0 and the weight 1 */
    assert_int_equal(st.fb_unknown, 3);
    assert_int_equal(st.fb_wrong_model, 1);
    assert_int_equal(st.fb_out_of_range, 2);
    assert_int_equal(st.fb_bad_value, 7);
    assert_int_equal(st.fb_duplicate, 2);
    for (int s = 0; s <= IMPRESSION_FB_COUNT_; s++)
        assert_non_null(impression_log_fb_str((impression_log_fb_t)s));
    impression_log_destroy(log);
    free(k);
}

static int refuse_emit(const impression_sample_t *s, void *ctx)
{
    (void)s;
    ++*(int *)ctx;
    return 1;
}

static uint32_t refuse_negatives(const impression_negatives_t *b, void *ctx)
{
    return each_negative(b, refuse_emit, ctx);
}

/* A sink that cannot take a sample (the trainer's queue is full): the
 * feedback is NOT_TAKEN and the item stays unlabeled, so the same feedback
 * joins later; expiry's refused negatives count as dropped. */
static void sink_refuses(void **state)
{
    (void)state;
    sink_t *k = new_sink();
    impression_log_t *log = make_log(1 << 20, 4, 100, NULL);
    assert_int_equal(impression_log_put(log, 1, 7, 1, 0, &SHARED, ITEMS, 4), 0);
    int refused = 0;
    assert_int_equal(impression_log_feedback(log, 1, 7, 2, 1, 1, 0, refuse_emit, &refused),
                     IMPRESSION_FB_NOT_TAKEN);
    assert_int_equal(refused, 1);
    assert_int_equal(impression_log_feedback(log, 1, 7, 2, 1, 1, 0, sink_emit, k),
                     IMPRESSION_FB_OK);
    assert_int_equal(k->n, 1);
    impression_log_expired_t x = impression_log_expire(log, 200, refuse_negatives, &refused);
    assert_int_equal(x.entries, 1);
    assert_int_equal(x.negatives, 0);
    assert_int_equal(refused, 4); /* items 0, 1, 3 offered */
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.fb_not_taken, 1);
    assert_int_equal(st.fb_ok, 1);
    assert_int_equal(st.negatives_dropped, 3);
    assert_int_equal(st.negatives_emitted, 0);
    impression_log_destroy(log);
    free(k);
}

static void put_refusals(void **state)
{
    (void)state;
    sink_t *k = new_sink();
    impression_log_t *log = make_log(64 * 4096, 64, 100, NULL); /* 4 KiB stripes */
    assert_int_equal(impression_log_put(log, 5, 1, 1, 0, &SHARED, ITEMS, 4), 0);
    /* a duplicate: refused, the first kept */
    assert_int_equal(impression_log_put(log, 5, 2, 2, 0, &SHARED_NOVALS, ITEMS + 1, 1), -EEXIST);
    assert_int_equal(impression_log_feedback(log, 5, 1, 3, 1, 1, 0, sink_emit, k),
                     IMPRESSION_FB_OK);
    assert_rec(&k->r[0], &SHARED, &ITEMS[3]);
    assert_int_equal(k->r[0].s.version, 1);

    static uint64_t big_ids[600];
    for (int i = 0; i < 600; i++)
        big_ids[i] = (uint64_t)i;
    codec_block_t big = {big_ids, NULL, 600}; /* 4,800 bytes > a 4 KiB stripe */
    assert_int_equal(impression_log_put(log, 6, 1, 1, 0, &big, ITEMS, 1), -E2BIG);
    codec_block_t bad_null = {NULL, NULL, 3};
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, &bad_null, ITEMS, 1), -EINVAL);
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, &SHARED, &bad_null, 1), -EINVAL);
    codec_block_t too_many = {big_ids, NULL, CODEC_MAX_BLOCK_FEATURES + 1};
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, &SHARED, &too_many, 1), -EINVAL);
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, &SHARED, ITEMS, 0), -EINVAL);
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, NULL, ITEMS, 1), -EINVAL);
    assert_int_equal(impression_log_put(log, 7, 1, 1, 0, &SHARED, NULL, 1), -EINVAL);
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.puts, 1);
    assert_int_equal(st.refused_duplicate, 1);
    assert_int_equal(st.refused_too_big, 1);
    assert_int_equal(st.refused_invalid, 6);
    assert_int_equal(st.entries, 1);
    impression_log_destroy(log);
    free(k);
}

/* One stripe of 8 KiB: entries of 48 + 8 + 8 + n*8 bytes (one item of n ids,
 * empty shared).  Puts past the room evict the oldest, whose items become
 * negatives through evict_emit; the held entries are always the newest ones,
 * and the ring wraps many times with mixed sizes. */
static void eviction_oldest_first(void **state)
{
    (void)state;
    sink_t *ev = new_sink(), *k = new_sink();
    impression_log_t *log = make_log(8192, 1, 1000000, ev);
    struct stripe *s = &log->stripes[0];
    static uint64_t ids[REC_IDS];
    for (int i = 0; i < REC_IDS; i++)
        ids[i] = 1000 + (uint64_t)i;
    codec_block_t empty = {NULL, NULL, 0};
    uint64_t next_evict = 0; /* the oldest id still held */
    uint64_t n_put = 600;
    for (uint64_t id = 0; id < n_put; id++) {
        uint32_t n = 1 + (uint32_t)((id * 37) % 63);
        codec_block_t it = {ids, NULL, n};
        int before = ev->n;
        assert_int_equal(impression_log_put(log, id, 1, id, id, &empty, &it, 1), 0);
        /* what was evicted: the oldest, in order, one negative each */
        for (int r = before; r < ev->n; r++) {
            assert_int_equal(ev->r[r].s.impression_id, next_evict);
            assert_int_equal(ev->r[r].s.src, IMPRESSION_SRC_EVICTED);
            assert_true(ev->r[r].s.label == 0.0f);
            codec_block_t want = {ids, NULL, 1 + (uint32_t)((next_evict * 37) % 63)};
            assert_rec(&ev->r[r], &empty, &want);
            next_evict++;
        }
        if (ev->n > REC_MAX - 64)
            ev->n = 0; /* keep the sink small: the order was checked above */
        /* held: exactly next_evict .. id */
        assert_int_equal(s->count, id + 1 - next_evict);
        for (uint64_t h = next_evict; h <= id; h++)
            assert_true(index_find(s, h, (uint32_t)hash_id(log, h)) >= 0);
        if (next_evict > 0)
            assert_true(index_find(s, next_evict - 1, (uint32_t)hash_id(log, next_evict - 1)) < 0);
        assert_true(s->bytes <= s->cap);
        check_stripe(log, s);
    }
    assert_true(next_evict > 400); /* it did wrap many times */
    /* an evicted one is unknown; a held one joins with its exact block */
    assert_int_equal(impression_log_feedback(log, 0, 1, 0, 1, 1, n_put, sink_emit, k),
                     IMPRESSION_FB_UNKNOWN_IMPRESSION);
    uint64_t last = n_put - 1;
    assert_int_equal(impression_log_feedback(log, last, 1, 0, 1, 1, n_put, sink_emit, k),
                     IMPRESSION_FB_OK);
    codec_block_t want = {ids, NULL, 1 + (uint32_t)((last * 37) % 63)};
    assert_rec(&k->r[0], &empty, &want);
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.evicted, next_evict);
    assert_int_equal(st.expired, 0);
    assert_int_equal(st.negatives_emitted, next_evict);
    assert_int_equal(st.puts, n_put);
    impression_log_destroy(log);

    /* the entry bound evicts too: max_entries 4 in one stripe */
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 1 << 20;
    c.stripes = 1;
    c.max_entries = 4;
    c.evict_emit = NULL; /* no sink: counted as dropped */
    assert_int_equal(impression_log_create(&c, &log), 0);
    for (uint64_t id = 0; id < 10; id++)
        assert_int_equal(impression_log_put(log, id, 1, 1, id, &SHARED, ITEMS, 4), 0);
    impression_log_stats(log, &st);
    assert_int_equal(st.entries, 4);
    assert_int_equal(st.evicted, 6);
    assert_int_equal(st.negatives_dropped, 24);
    assert_int_equal(st.negatives_emitted, 0);
    assert_int_equal(impression_log_feedback(log, 5, 1, 0, 1, 1, 10, NULL, NULL),
                     IMPRESSION_FB_UNKNOWN_IMPRESSION);
    assert_int_equal(impression_log_feedback(log, 6, 1, 0, 1, 1, 10, NULL, NULL), IMPRESSION_FB_OK);
    impression_log_destroy(log);
    free(ev);
    free(k);
}

static void window_expiry(void **state)
{
    (void)state;
    sink_t *k = new_sink();
    impression_log_t *log = make_log(1 << 20, 8, 50, NULL);
    for (uint64_t i = 0; i < 100; i++) /* logged at 0, 10, 20, ..., 990 */
        assert_int_equal(impression_log_put(log, i, 1, 1, i * 10, &SHARED, ITEMS, 2), 0);
    impression_log_expired_t x = impression_log_expire(log, 50, sink_negatives, k);
    assert_int_equal(x.entries, 0);
    x = impression_log_expire(log, 51, sink_negatives, k); /* 0 is 51 old */
    assert_int_equal(x.entries, 1);
    assert_int_equal(x.negatives, 2);
    x = impression_log_expire(log, 551, sink_negatives, k); /* 10..500 */
    assert_int_equal(x.entries, 50);
    assert_int_equal(impression_log_feedback(log, 50, 1, 0, 1, 1, 551, sink_emit, k),
                     IMPRESSION_FB_UNKNOWN_IMPRESSION);
    assert_int_equal(impression_log_feedback(log, 51, 1, 0, 1, 1, 551, sink_emit, k),
                     IMPRESSION_FB_OK);
    /* negatives off: nothing emitted, nothing dropped */
    log->emit_negatives = false;
    x = impression_log_expire(log, UINT64_MAX, sink_negatives, k);
    assert_int_equal(x.entries, 49);
    assert_int_equal(x.negatives, 0);
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.expired, 100);
    assert_int_equal(st.negatives_emitted, 102);
    assert_int_equal(st.negatives_dropped, 0);
    assert_int_equal(st.entries, 0);
    assert_int_equal(k->n, 102 + 1);
    impression_log_destroy(log);

    /* a clock that goes back: the stripe's time stays monotonic */
    log = make_log(1 << 20, 1, 50, NULL);
    assert_int_equal(impression_log_put(log, 1, 1, 1, 1000, &SHARED, ITEMS, 1), 0);
    assert_int_equal(impression_log_put(log, 2, 1, 1, 900, &SHARED, ITEMS, 1), 0);
    x = impression_log_expire(log, 1040, NULL, NULL);
    assert_int_equal(x.entries, 0);
    x = impression_log_expire(log, 1051, NULL, NULL);
    assert_int_equal(x.entries, 2);
    impression_log_stats(log, &st);
    assert_int_equal(st.negatives_dropped, 2); /* emit NULL */
    impression_log_destroy(log);
    free(k);
}

/* ---- threads ------------------------------------------------------------------------ */

#define T_THREADS 4
#define T_IMPS 100000u
#define T_ITEMS 4u
#define T_LAG 40u

static _Atomic uint8_t t_fb[T_THREADS][T_IMPS][T_ITEMS];  /* feedback emits */
static _Atomic uint8_t t_neg[T_THREADS][T_IMPS][T_ITEMS]; /* negative emits */
static uint8_t t_ok[T_THREADS][T_IMPS][T_ITEMS];          /* OK returned (one writer each) */
static _Atomic uint64_t t_clock, t_bad, t_put_fail;
static _Atomic int t_done;
static _Atomic uint32_t t_progress[T_THREADS]; /* impressions put by each */
static impression_log_t *t_log;

static uint64_t t_id(uint32_t th, uint32_t i)
{
    return ((uint64_t)th << 32 | i) * 0x9E3779B97F4A7C15ull; /* distinct: odd multiplier */
}

static int t_emit(const impression_sample_t *s, void *ctx)
{
    (void)ctx;
    uint32_t th = s->model_id, i = (uint32_t)s->version, j = s->item;
    if (th >= T_THREADS || i >= T_IMPS || j >= T_ITEMS || s->impression_id != t_id(th, i) ||
        s->n_items != T_ITEMS || s->shared.n != 2 || s->shared.ids[0] != 2 * (uint64_t)i ||
        s->shared.ids[1] != 2 * (uint64_t)i + 1 || s->shared.values != NULL || s->block.n != 1 ||
        s->block.ids[0] != (uint64_t)i * 8 + j || !s->block.values ||
        s->block.values[0] != (float)j) {
        atomic_fetch_add(&t_bad, 1);
        return 0;
    }
    if (s->src == IMPRESSION_SRC_FEEDBACK)
        atomic_fetch_add(&t_fb[th][i][j], 1);
    else
        atomic_fetch_add(&t_neg[th][i][j], 1);
    return 0;
}

static uint32_t t_negatives(const impression_negatives_t *b, void *ctx)
{
    return each_negative(b, t_emit, ctx);
}

/* Feedback on item j of thread th's impression p, times times; t_ok[th][p][j]
 * has one writer: th itself for j = p % 4, th's feeder for the other. */
static void t_feed(uint32_t th, uint32_t p, uint32_t j, int times)
{
    for (int k = 0; k < times; k++)
        if (impression_log_feedback(t_log, t_id(th, p), th, j, (float)(p & 1), 1.0f,
                                    atomic_load(&t_clock), t_emit, NULL) == IMPRESSION_FB_OK)
            t_ok[th][p][j]++;
}

static void *t_worker(void *arg)
{
    uint32_t th = (uint32_t)(uintptr_t)arg, peer = (th + 1) % T_THREADS;
    for (uint32_t i = 0; i < T_IMPS; i++) {
        uint64_t sh[2] = {2 * (uint64_t)i, 2 * (uint64_t)i + 1}, it[T_ITEMS];
        float v[T_ITEMS];
        codec_block_t blocks[T_ITEMS];
        for (uint32_t j = 0; j < T_ITEMS; j++) {
            it[j] = (uint64_t)i * 8 + j;
            v[j] = (float)j;
            blocks[j] = (codec_block_t){&it[j], &v[j], 1};
        }
        codec_block_t shared = {sh, NULL, 2};
        uint64_t now = atomic_load(&t_clock);
        if (impression_log_put(t_log, t_id(th, i), th, i, now, &shared, blocks, T_ITEMS) != 0)
            atomic_fetch_add(&t_put_fail, 1);
        if (i % 64 == 0)
            atomic_fetch_add(&t_clock, 1);
        atomic_store(&t_progress[th], i + 1);
        /* its own impression T_LAG back, item p % 4; one in 5 twice (a duplicate) */
        if (i >= T_LAG) {
            uint32_t p = i - T_LAG, j = p % T_ITEMS;
            t_feed(th, p, j, p % 5 == 0 ? 2 : 1);
        }
        /* the peer's newest but T_LAG, item p % 4 + 2 (from another thread: the peer may
         * be stalled, so the same one again and again: duplicates; or gone: unknown) */
        uint32_t pp = atomic_load(&t_progress[peer]);
        if (pp > T_LAG)
            t_feed(peer, pp - T_LAG, (pp - T_LAG + 2) % T_ITEMS, 1);
    }
    return NULL;
}

static void *t_expirer(void *arg)
{
    (void)arg;
    while (!atomic_load(&t_done)) {
        impression_log_expire(t_log, atomic_load(&t_clock), t_negatives, NULL);
        sched_yield();
    }
    return NULL;
}

static void threads_exactly_once(void **state)
{
    (void)state;
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 64 * 16384; /* 16 KiB stripes: ~100 entries each, so eviction happens too */
    c.stripes = 64;
    c.max_entries = 64 * 200;
    c.window_ms = 10; /* the clock ticks every 64 puts of a thread */
    c.evict_emit = t_negatives;
    assert_int_equal(impression_log_create(&c, &t_log), 0);
    pthread_t w[T_THREADS], ex;
    assert_int_equal(pthread_create(&ex, NULL, t_expirer, NULL), 0);
    for (uintptr_t t = 0; t < T_THREADS; t++)
        assert_int_equal(pthread_create(&w[t], NULL, t_worker, (void *)t), 0);
    for (int t = 0; t < T_THREADS; t++)
        pthread_join(w[t], NULL);
    atomic_store(&t_done, 1);
    pthread_join(ex, NULL);
    impression_log_expire(t_log, UINT64_MAX, t_negatives, NULL);

    assert_int_equal(atomic_load(&t_bad), 0);
    assert_int_equal(atomic_load(&t_put_fail), 0);
    uint64_t ok = 0, neg = 0;
    for (int t = 0; t < T_THREADS; t++)
        for (uint32_t i = 0; i < T_IMPS; i++)
            for (uint32_t j = 0; j < T_ITEMS; j++) {
                uint8_t f = atomic_load(&t_fb[t][i][j]), n = atomic_load(&t_neg[t][i][j]);
                if (t_ok[t][i][j] > 1 || f != t_ok[t][i][j] || n != 1 - t_ok[t][i][j])
                    fail_msg("thread %d impression %u item %u: ok %u, emitted %u, negatives %u", t,
                             i, j, t_ok[t][i][j], f, n);
                ok += f;
                neg += n;
            }
    impression_log_stats_t st;
    impression_log_stats(t_log, &st);
    assert_int_equal(st.puts, T_THREADS * T_IMPS);
    assert_int_equal(st.fb_ok, ok);
    assert_int_equal(st.negatives_emitted, neg);
    assert_int_equal(ok + neg, (uint64_t)T_THREADS * T_IMPS * T_ITEMS);
    assert_int_equal(st.expired + st.evicted, T_THREADS * T_IMPS);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.negatives_dropped, 0);
    assert_true(ok > 0);
    assert_true(st.fb_duplicate > 0);
    print_message("threads: %" PRIu64 " joined, %" PRIu64 " negatives, %" PRIu64
                  " expired, %" PRIu64 " evicted, %" PRIu64 " unknown, %" PRIu64
                  " duplicate, probe max %u\n",
                  ok, neg, st.expired, st.evicted, st.fb_unknown, st.fb_duplicate, st.probe_max);
    impression_log_destroy(t_log);
}

/* Ids that are multiples of 2^32 share their low 32 bits: a plain mask would
 * put them all in one slot run and one stripe.  The keyed hash spreads them. */
static void hostile_ids(void **state)
{
    (void)state;
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 64u << 20;
    c.max_entries = 200000;
    impression_log_t *log = NULL;
    assert_int_equal(impression_log_create(&c, &log), 0);
    const uint64_t n = 150000;
    for (uint64_t i = 1; i <= n; i++)
        assert_int_equal(impression_log_put(log, i << 32, 1, 1, 0, &SHARED_NOVALS, ITEMS + 1, 1),
                         0);
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.entries, n);
    assert_int_equal(st.evicted, 0);
    uint64_t most = 0;
    for (uint32_t i = 0; i < log->nstripes; i++)
        if (log->stripes[i].count > most)
            most = log->stripes[i].count;
    /* 2,344 per stripe on average; 1.3x is 14 standard deviations out */
    assert_true(most < n / 64 * 13 / 10);
    /* load <= 1/2 with a random hash: runs of tens of slots at most */
    for (uint64_t i = 1; i <= n; i += 97)
        assert_int_equal(impression_log_feedback(log, i << 32, 1, 0, 1, 1, 0, NULL, NULL),
                         IMPRESSION_FB_OK);
    impression_log_stats(log, &st);
    print_message("hostile: most per stripe %" PRIu64 ", probe max %u\n", most, st.probe_max);
    assert_true(st.probe_max <= 64);
    impression_log_destroy(log);
}

/* ---- random operations against the ring's invariants ------------------------------- */

/* Walks a stripe's ring from head to tail: every entry inside the arena and
 * its segment, times monotonic, blocks inside their entry, labeled bits
 * counted, the index pointing at each and holding nothing else. */
static void check_stripe(impression_log_t *log, struct stripe *s)
{
    uint64_t off = s->head, bytes = 0, last_t = 0;
    bool wrapped = s->wrapped;
    if (s->count == 0) {
        assert_int_equal(s->head, 0);
        assert_int_equal(s->tail, 0);
        assert_false(s->wrapped);
    }
    for (uint64_t n = 0; n < s->count; n++) {
        if (wrapped && off == s->wrap_end) {
            off = 0;
            wrapped = false;
        }
        uint64_t end = wrapped ? s->wrap_end : s->tail;
        assert_true(off + sizeof(struct entry) <= end);
        struct entry *e = (struct entry *)(s->arena + off);
        assert_true(e->size % 8 == 0 && off + e->size <= end);
        assert_true(e->t_ms >= last_t);
        last_t = e->t_ms;
        assert_true(e->n_items >= 1 && e->n_labeled <= e->n_items);
        uint32_t bits = 0;
        for (uint32_t w = 0; w < (e->n_items + 63) / 64; w++)
            bits += (uint32_t)__builtin_popcountll(bitmap_of(e)[w]);
        assert_int_equal(bits, e->n_labeled);
        codec_block_t sh = shared_of(e);
        assert_true((const uint8_t *)sh.ids + block_bytes(&sh) <= (uint8_t *)e + e->size);
        for (uint32_t i = 0; i < e->n_items; i++) {
            codec_block_t b = item_of(e, i);
            assert_true((const uint8_t *)b.ids >= (const uint8_t *)sh.ids + block_bytes(&sh));
            assert_true((const uint8_t *)b.ids + block_bytes(&b) <= (uint8_t *)e + e->size);
        }
        int64_t sl = index_find(s, e->id, (uint32_t)hash_id(log, e->id));
        assert_true(sl >= 0);
        assert_int_equal(((uint64_t)s->index[sl].off8 - 1) * 8, off);
        bytes += e->size;
        off += e->size;
    }
    if (s->count)
        assert_int_equal(off, s->tail);
    assert_int_equal(bytes, s->bytes);
    uint64_t used = 0;
    for (uint64_t i = 0; i <= s->mask; i++)
        used += s->index[i].off8 != 0;
    assert_int_equal(used, s->count);
}

#define R_IDS 6000u
#define R_ITEMS 70u /* past 64: a bitmap of two words */

static uint8_t r_ok[R_IDS][R_ITEMS], r_fb[R_IDS][R_ITEMS], r_neg[R_IDS][R_ITEMS];
static uint32_t r_nitems[R_IDS]; /* 0: not logged */
static uint64_t r_bad;

static uint32_t r_hash(uint64_t id, uint32_t item)
{
    uint64_t h = (id * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)item * 0xBF58476D1CE4E5B9ull);
    return (uint32_t)(h >> 33);
}

/* The block of item (UINT32_MAX: shared) of impression id, into ids/vals. */
static codec_block_t r_block(uint64_t id, uint32_t item, uint64_t *ids, float *vals)
{
    uint32_t h = r_hash(id, item), n = h % 21;
    for (uint32_t k = 0; k < n; k++) {
        ids[k] = id * 100000 + (uint64_t)item * 64 + k;
        vals[k] = (float)(k + item);
    }
    return (codec_block_t){ids, (h >> 8) & 1 ? vals : NULL, n};
}

static bool r_same(const codec_block_t *got, uint64_t id, uint32_t item)
{
    uint64_t ids[32];
    float vals[32];
    codec_block_t w = r_block(id, item, ids, vals);
    if (got->n != w.n || (got->values != NULL) != (w.values != NULL))
        return false;
    if (w.n && memcmp(got->ids, w.ids, 8 * (size_t)w.n) != 0)
        return false;
    return !(w.values && w.n && memcmp(got->values, w.values, 4 * (size_t)w.n) != 0);
}

static int r_emit(const impression_sample_t *s, void *ctx)
{
    (void)ctx;
    uint64_t id = s->impression_id;
    if (id >= R_IDS || s->item >= r_nitems[id] || s->n_items != r_nitems[id] ||
        s->version != id + 7 || !r_same(&s->shared, id, UINT32_MAX) ||
        !r_same(&s->block, id, s->item)) {
        r_bad++;
        return 0;
    }
    if (s->src == IMPRESSION_SRC_FEEDBACK)
        r_fb[id][s->item]++;
    else
        r_neg[id][s->item]++;
    return 0;
}

static uint32_t r_negatives(const impression_negatives_t *b, void *ctx)
{
    return each_negative(b, r_emit, ctx);
}

static void random_ops(void **state)
{
    (void)state;
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 4 * 8192; /* 8 KiB stripes: wraps and evictions all the time */
    c.stripes = 4;
    c.max_entries = 4 * 40;
    c.window_ms = 30;
    c.evict_emit = r_negatives;
    impression_log_t *log = NULL;
    assert_int_equal(impression_log_create(&c, &log), 0);
    uint64_t rnd = 12345, now = 0, next_id = 0, put_ok = 0, too_big = 0;
    static uint64_t ids[R_ITEMS + 1][32];
    static float vals[R_ITEMS + 1][32];
    codec_block_t items[R_ITEMS];
    for (int op = 0; op < 40000 && next_id < R_IDS; op++) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rnd >> 33);
        now += r % 3;
        if (r % 100 < 45) { /* a new impression */
            uint64_t id = next_id++;
            uint32_t n_items = 1 + (r >> 8) % R_ITEMS;
            codec_block_t sh = r_block(id, UINT32_MAX, ids[R_ITEMS], vals[R_ITEMS]);
            uint64_t size = sizeof(struct entry) + 8 * ((n_items + 63) / 64) +
                            8 * (uint64_t)n_items + block_bytes(&sh);
            for (uint32_t i = 0; i < n_items; i++) {
                items[i] = r_block(id, i, ids[i], vals[i]);
                size += block_bytes(&items[i]);
            }
            r_nitems[id] = n_items; /* before the put: its evictions emit from inside it */
            int rc = impression_log_put(log, id, 1, id + 7, now, &sh, items, n_items);
            if (size > 8192) {
                assert_int_equal(rc, -E2BIG);
                r_nitems[id] = 0;
                too_big++;
            } else {
                assert_int_equal(rc, 0);
                put_ok++;
            }
        } else if (r % 100 < 50 && next_id > 0) { /* a duplicate of a held one */
            uint64_t id = next_id - 1 - (r >> 8) % (next_id < 50 ? next_id : 50);
            struct stripe *s = stripe_of(log, hash_id(log, id));
            if (index_find(s, id, (uint32_t)hash_id(log, id)) >= 0)
                assert_int_equal(impression_log_put(log, id, 1, 0, now, &SHARED, ITEMS, 1),
                                 -EEXIST);
        } else if (r % 100 < 95 && next_id > 0) { /* feedback, maybe out of range or gone */
            uint64_t id = next_id - 1 - (r >> 8) % (next_id < 20 ? next_id : 20);
            uint32_t item = (r >> 16) % (R_ITEMS + 2);
            impression_log_fb_t st =
                impression_log_feedback(log, id, 1, item, (float)(r & 1), 1.0f, now, r_emit, NULL);
            if (st == IMPRESSION_FB_OK)
                r_ok[id][item]++;
            else if (st == IMPRESSION_FB_ITEM_OUT_OF_RANGE)
                assert_true(item >= r_nitems[id] && r_nitems[id] > 0);
            else
                assert_true(st == IMPRESSION_FB_UNKNOWN_IMPRESSION ||
                            st == IMPRESSION_FB_DUPLICATE);
        } else {
            impression_log_expire(log, now, r_negatives, NULL);
        }
        for (uint32_t i = 0; i < log->nstripes; i++)
            check_stripe(log, &log->stripes[i]);
    }
    impression_log_expire(log, UINT64_MAX, r_negatives, NULL);
    assert_int_equal(r_bad, 0);
    uint64_t ok = 0, neg = 0;
    for (uint64_t id = 0; id < next_id; id++)
        for (uint32_t i = 0; i < r_nitems[id]; i++) {
            if (r_ok[id][i] > 1 || r_fb[id][i] != r_ok[id][i] || r_neg[id][i] != 1 - r_ok[id][i])
                fail_msg("impression %" PRIu64 " item %u: ok %u, emitted %u, negatives %u", id, i,
                         r_ok[id][i], r_fb[id][i], r_neg[id][i]);
            ok += r_ok[id][i];
            neg += r_neg[id][i];
        }
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.puts, put_ok);
    assert_int_equal(st.refused_too_big, too_big);
    assert_int_equal(st.fb_ok, ok);
    assert_int_equal(st.negatives_emitted, neg);
    print_message("random: %" PRIu64 " puts, %" PRIu64 " too big, %" PRIu64 " evicted, %" PRIu64
                  " expired, %" PRIu64 " joined\n",
                  put_ok, too_big, st.evicted, st.expired, ok);
    assert_true(st.evicted > 100 && st.expired > 100 && ok > 100 && too_big > 0);
    impression_log_destroy(log);
}

/* What batch_sink saw: each call's n, first item and shared block. */
typedef struct batches {
    int calls;
    uint32_t n[8], first[8], take;
    const uint64_t *shared_ids[8];
} batches_t;

static uint32_t batch_sink(const impression_negatives_t *b, void *ctx)
{
    batches_t *k = ctx;
    assert_true(k->calls < 8);
    k->n[k->calls] = b->n;
    k->first[k->calls] = b->item[0];
    k->shared_ids[k->calls++] = b->shared.ids;
    assert_int_equal(b->src, IMPRESSION_SRC_EXPIRED);
    assert_true(b->weight == 0.25f);
    return b->n < k->take ? b->n : k->take;
}

/* An impression's negatives come in one call with the shared block once (in
 * calls of IMPRESSION_NEGATIVES_MAX past that), labeled items left out, and
 * a sink that takes part of a call has the rest counted as dropped. */
static void negatives_batched(void **state)
{
    (void)state;
    enum { N = IMPRESSION_NEGATIVES_MAX + 44 };
    static uint64_t ids[N];
    static codec_block_t items[N];
    for (uint32_t i = 0; i < N; i++) {
        ids[i] = 1000 + i;
        items[i] = (codec_block_t){&ids[i], NULL, 1};
    }
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 1 << 20;
    c.stripes = 1;
    c.window_ms = 10;
    c.negative_weight = 0.25f;
    impression_log_t *log = NULL;
    assert_int_equal(impression_log_create(&c, &log), 0);
    assert_int_equal(impression_log_put(log, 1, 0, 1, 0, &SHARED, items, N), 0);
    assert_int_equal(impression_log_put(log, 2, 0, 1, 0, &SHARED, ITEMS, 4), 0);
    int took = 0;
    assert_int_equal(impression_log_feedback(log, 1, 0, 0, 1, 1, 0, sink_emit_count, &took),
                     IMPRESSION_FB_OK);
    assert_int_equal(impression_log_feedback(log, 2, 0, 1, 1, 1, 0, sink_emit_count, &took),
                     IMPRESSION_FB_OK);
    batches_t k = {.take = UINT32_MAX};
    impression_log_expired_t x = impression_log_expire(log, 11, batch_sink, &k);
    assert_int_equal(x.entries, 2);
    assert_int_equal(x.negatives, N - 1 + 3);
    assert_int_equal(k.calls, 3);
    assert_int_equal(k.n[0], IMPRESSION_NEGATIVES_MAX); /* items 1..256 */
    assert_int_equal(k.first[0], 1);
    assert_int_equal(k.n[1], N - 1 - IMPRESSION_NEGATIVES_MAX);
    assert_int_equal(k.first[1], IMPRESSION_NEGATIVES_MAX + 1);
    assert_int_equal(k.n[2], 3); /* impression 2: items 0, 2, 3 */
    assert_int_equal(k.first[2], 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(k.shared_ids[i][0], SH_IDS[0]);
    /* a sink that takes 2 of each call: the rest dropped */
    assert_int_equal(impression_log_put(log, 3, 0, 1, 20, &SHARED, ITEMS, 4), 0);
    batches_t k2 = {.take = 2};
    x = impression_log_expire(log, 31, batch_sink, &k2);
    assert_int_equal(x.negatives, 2);
    impression_log_stats_t st;
    impression_log_stats(log, &st);
    assert_int_equal(st.negatives_emitted, N - 1 + 3 + 2);
    assert_int_equal(st.negatives_dropped, 2);
    impression_log_destroy(log);
}

/* Expiry evicts a stripe down to 7/8 of its bytes (the high-water mark), so
 * that the puts after it find room without evicting on their own. */
static void high_water_mark(void **state)
{
    (void)state;
    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = 64 << 10;
    c.stripes = 1;
    c.max_entries = 4096;
    c.window_ms = 1000000;
    sink_t *puts_sink = new_sink();
    c.evict_emit = sink_negatives;
    c.evict_ctx = puts_sink;
    impression_log_t *log = NULL;
    assert_int_equal(impression_log_create(&c, &log), 0);
    impression_log_stats_t st;
    uint64_t id = 1;
    do { /* fill past 7/8 without a put evicting */
        assert_int_equal(impression_log_put(log, id++, 0, 1, 0, &SHARED, ITEMS, 4), 0);
        impression_log_stats(log, &st);
    } while (st.bytes <= st.max_bytes - st.max_bytes / 8);
    assert_int_equal(st.evicted, 0);
    sink_t *k = new_sink();
    impression_log_expired_t x = impression_log_expire(log, 1, sink_negatives, k);
    assert_true(x.early > 0);
    assert_int_equal(x.entries, x.early); /* nothing was past the window */
    assert_int_equal(x.negatives, 4 * x.early);
    assert_int_equal((uint64_t)k->n, 4 * x.early);
    impression_log_stats(log, &st);
    assert_true(st.bytes <= st.max_bytes - st.max_bytes / 8);
    assert_int_equal(st.evicted, x.early);
    for (uint64_t i = 0; i < x.early; i++) /* room for as many again: no put evicts */
        assert_int_equal(impression_log_put(log, id++, 0, 1, 0, &SHARED, ITEMS, 4), 0);
    assert_int_equal(puts_sink->n, 0);
    impression_log_destroy(log);
    free(k);
    free(puts_sink);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_refused),
        cmocka_unit_test(round_trip),
        cmocka_unit_test(statuses),
        cmocka_unit_test(sink_refuses),
        cmocka_unit_test(put_refusals),
        cmocka_unit_test(eviction_oldest_first),
        cmocka_unit_test(window_expiry),
        cmocka_unit_test(threads_exactly_once),
        cmocka_unit_test(hostile_ids),
        cmocka_unit_test(random_ops),
        cmocka_unit_test(negatives_batched),
        cmocka_unit_test(high_water_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
