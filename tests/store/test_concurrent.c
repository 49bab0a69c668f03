/*
 * test_concurrent.c — lock-free readers of tl_hash_map while writers insert,
 * overwrite, delete and grow (store/tl_hash_map_*.c).
 *
 * Writers follow the store's contract: one writer per shard.  With 4 shards
 * and 2 writers, writer w owns the shards s with s % 2 == w and only writes
 * keys that store_shard_of() puts there.  Readers (3 threads) run
 * store_lookup_batch (with and without a found[] array) and store_lookup
 * nonstop until the writers finish, and check everything they see.
 *
 * KEYS.  Key ids c = 0 .. n_ids-1 map to keys c * KEY_MUL (a bijection), in
 * three kinds, fixed before the threads start:
 *
 *   [0, n_stable)                  stable: inserted before the readers start,
 *                                  never deleted, overwritten now and then.
 *                                  A reader must always find them.
 *   [n_stable, n_stable + n_pool)  volatile: inserted (growing the store),
 *                                  overwritten, deleted, re-inserted.  A
 *                                  reader may or may not find them.
 *   [.., n_ids)                    never inserted: a reader must never find
 *                                  them.
 *
 * VALUES.  Every write of key k carries a generation g (1, 2, 3 ... per key,
 * never reset, also across delete and re-insert) encoded so that a reader
 * can tell a good value from a bad one without knowing g:
 *
 *   fp32: bit pattern 0x01000000 + (g << 8 | check8(k, g)), g < 2^22 — a
 *         normal positive float; a torn, stale-slot or wrong-key value fails
 *         the 8-bit check with probability 255/256.
 *   fp16: the integer g * 32 + (hash(k) & 31), g <= 63 (exact in fp16).
 *
 * With K > 1 all K floats of a value are equal, so a value torn between two
 * writes shows mixed floats.  A reader also remembers the highest g it has
 * seen per key and flags a value going back in time (for a batch, against
 * what was seen before the batch started: entries of one batch are not
 * ordered among themselves).  Absent keys in a batch must read as K zeros.
 *
 * Writers check their own return values (1 new / 0 existed, delete 1/0) and
 * read back their own keys exactly.  After each round the main thread
 * compares a full store_foreach with the writers' model.
 *
 * SCENARIOS: growth from an empty store (K=1 f32, K=8 f32, K=4 f16, K=2 f16);
 * churn at high load in an exactly reserved store (cuckoo moves without
 * growth; at max_load 0.98 also the overflow stash); and overwrite-only of
 * K=1 f32 values (the "never torn" promise of store.h).
 *
 * TIME: TL_CONCURRENT_SECONDS (default 3) bounds the three main scenarios;
 * the others run a third of it.  Each round is also bounded by its key pool.
 *
 * The harness: concurrent_harness.h (shared structs), concurrent_values.c
 * (keys and values), concurrent_threads.c (writers and readers); this file
 * runs the rounds and scenarios.
 */

#include "concurrent_harness.h"

/* ---- rounds and scenarios ------------------------------------------------ */

struct verify {
    struct world *w;
    uint32_t shard;
    uint8_t *seen;
    uint64_t visited;
    char err[200];
};

static int verify_visit(void *ctx, uint64_t key, const float *value)
{
    struct verify *vf = ctx;
    struct world *w = vf->w;
    uint64_t c = key * g_key_inv;
    if (c >= w->n_ids || kind_of(w, c) == KIND_NEVER || !w->present[c]) {
        snprintf(vf->err, sizeof vf->err, "foreach: key %#llx should not be in the store",
                 (unsigned long long)key);
        return 1;
    }
    if (vf->seen[c]++) {
        snprintf(vf->err, sizeof vf->err, "foreach: key %#llx twice", (unsigned long long)key);
        return 1;
    }
    if (store_shard_of(w->s, key) != vf->shard) {
        snprintf(vf->err, sizeof vf->err, "foreach: key %#llx in the wrong shard",
                 (unsigned long long)key);
        return 1;
    }
    if (!floats_equal(value, w->sc->k) || decode(w, key, value[0]) != w->gen[c]) {
        snprintf(vf->err, sizeof vf->err, "foreach: id %llu has generation %u, expected %u",
                 (unsigned long long)c, decode(w, key, value[0]), w->gen[c]);
        return 1;
    }
    vf->visited++;
    return 0;
}

struct totals {
    uint64_t rounds, lookups, hits, batches, singles;
    uint64_t ops, inserts, deletes, overwrites, rebuilds, entries_max, stashed_max;
    uint64_t anomalies[A_N];
};

static void report_notes(const char *who, int i, const struct notes *n)
{
    for (int j = 0; j < n->n; j++)
        print_error("    %s %d: %s\n", who, i, n->text[j]);
}

/* One round: a fresh store, writers and readers until the writers finish.
 * Returns the number of anomalies. */
static uint64_t run_round(const struct scenario *sc, struct world *w, uint64_t round,
                          uint64_t deadline, struct totals *t)
{
    store_options_t opt = {
        .value_floats = sc->k, .dtype = sc->dtype, .shards = sc->shards, .max_load = sc->max_load,
    };
    int rc = store_create(&opt, &w->s);
    if (rc != 0)
        fail_msg("%s: store_create = %d", sc->name, rc);
    w->deadline = deadline;
    memset(w->gen, 0, w->n_ids * sizeof *w->gen);
    memset(w->present, 0, w->n_ids);
    atomic_store(&w->writers_left, sc->writers);
    atomic_store(&w->stop, false);

    /* Route every key to the writer that owns its shard. */
    for (int i = 0; i < sc->writers; i++) {
        struct writer *wr = &w->wr[i];
        memset(&wr->notes, 0, sizeof wr->notes);
        wr->n_stable = wr->n_pool = 0;
        wr->ops = wr->inserts = wr->deletes = wr->overwrites = wr->stashed_max = 0;
        wr->seed = mix64(round * 100 + (uint64_t)i + 1);
    }
    for (uint64_t c = 0; c < sc->n_stable + sc->n_pool; c++) {
        uint32_t sh = store_shard_of(w->s, key_of(c));
        if (sh >= sc->shards)
            fail_msg("%s: store_shard_of = %u of %u", sc->name, sh, sc->shards);
        struct writer *wr = &w->wr[sh % (uint32_t)sc->writers];
        if (kind_of(w, c) == KIND_STABLE)
            wr->stable[wr->n_stable++] = (uint32_t)c;
        else
            wr->pool[wr->n_pool++] = (uint32_t)c;
    }
    if (sc->mode != MODE_GROWTH) { /* reserve for every key: none needs growth */
        uint32_t subs = sc->reserve_exact ? store_subs_per_shard(w->s) : 1;
        uint64_t *per = xcalloc((size_t)sc->shards * subs, sizeof *per);
        for (uint64_t c = 0; c < sc->n_stable + sc->n_pool; c++)
            per[(size_t)store_shard_of(w->s, key_of(c)) * subs +
                (sc->reserve_exact ? store_sub_of(w->s, key_of(c)) : 0)]++;
        for (uint32_t sh = 0; sh < sc->shards; sh++)
            for (uint32_t u = 0; u < subs; u++) {
                uint64_t n = per[(size_t)sh * subs + u];
                rc = sc->reserve_exact ? store_reserve_sub(w->s, sh, u, n)
                                       : store_reserve_shard(w->s, sh, n);
                if (rc != 0)
                    fail_msg("%s: reserve(shard %u, %llu keys) = %d", sc->name, sh,
                             (unsigned long long)n, rc);
            }
        free(per);
    }
    for (int i = 0; i < sc->readers; i++) {
        struct reader *rd = &w->rd[i];
        memset(&rd->notes, 0, sizeof rd->notes);
        memset(rd->last, 0, w->n_ids * sizeof *rd->last);
        rd->lookups = rd->hits = rd->batches = rd->singles = 0;
        rd->seed = mix64(round * 100 + 50 + (uint64_t)i);
    }
    store_stats_t st0;
    store_stats(w->s, &st0);

    pthread_barrier_init(&w->start, NULL, (unsigned)(sc->writers + sc->readers));
    for (int i = 0; i < sc->writers; i++)
        if (pthread_create(&w->wr[i].tid, NULL, writer_main, &w->wr[i]) != 0)
            fail_msg("pthread_create failed");
    for (int i = 0; i < sc->readers; i++)
        if (pthread_create(&w->rd[i].tid, NULL, reader_main, &w->rd[i]) != 0)
            fail_msg("pthread_create failed");
    for (int i = 0; i < sc->writers; i++)
        pthread_join(w->wr[i].tid, NULL);
    for (int i = 0; i < sc->readers; i++)
        pthread_join(w->rd[i].tid, NULL);
    pthread_barrier_destroy(&w->start);

    uint64_t bad = 0;
    for (int i = 0; i < sc->writers; i++) {
        struct writer *wr = &w->wr[i];
        for (int a = 0; a < A_N; a++) {
            t->anomalies[a] += wr->notes.count[a];
            bad += wr->notes.count[a];
        }
        report_notes("writer", i, &wr->notes);
        t->ops += wr->ops;
        t->inserts += wr->inserts;
        t->deletes += wr->deletes;
        t->overwrites += wr->overwrites;
        if (wr->stashed_max > t->stashed_max)
            t->stashed_max = wr->stashed_max;
    }
    for (int i = 0; i < sc->readers; i++) {
        struct reader *rd = &w->rd[i];
        for (int a = 0; a < A_N; a++) {
            t->anomalies[a] += rd->notes.count[a];
            bad += rd->notes.count[a];
        }
        report_notes("reader", i, &rd->notes);
        t->lookups += rd->lookups;
        t->hits += rd->hits;
        t->batches += rd->batches;
        t->singles += rd->singles;
    }

    /* The store now equals the writers' model, exactly. */
    uint64_t expect = 0;
    for (uint64_t c = 0; c < w->n_ids; c++)
        expect += w->present[c];
    if (store_count(w->s) != expect)
        fail_msg("%s round %llu: store_count %llu, writers hold %llu", sc->name,
                 (unsigned long long)round, (unsigned long long)store_count(w->s),
                 (unsigned long long)expect);
    struct verify vf = {.w = w, .seen = xcalloc(w->n_ids, 1)};
    for (uint32_t sh = 0; sh < sc->shards; sh++) {
        vf.shard = sh;
        if (store_foreach(w->s, sh, verify_visit, &vf) != 0) {
            free(vf.seen);
            fail_msg("%s round %llu: %s", sc->name, (unsigned long long)round, vf.err);
        }
    }
    free(vf.seen);
    if (vf.visited != expect)
        fail_msg("%s round %llu: foreach visited %llu, writers hold %llu", sc->name,
                 (unsigned long long)round, (unsigned long long)vf.visited,
                 (unsigned long long)expect);
    store_stats_t st;
    store_stats(w->s, &st);
    t->rebuilds += st.rebuilds - st0.rebuilds;
    if (st.entries > t->entries_max)
        t->entries_max = st.entries;
    if (st.stashed > t->stashed_max)
        t->stashed_max = st.stashed;
    store_destroy(w->s);
    w->s = NULL;
    t->rounds++;
    return bad;
}

static void run_scenario(const struct scenario *sc)
{
    struct world w = {.sc = sc};
    w.n_ids = sc->n_stable + sc->n_pool + sc->n_never;
    w.gen = xcalloc(w.n_ids, sizeof *w.gen);
    w.present = xcalloc(w.n_ids, 1);
    for (int i = 0; i < sc->writers; i++) {
        w.wr[i].w = &w;
        w.wr[i].stable = xcalloc(sc->n_stable, sizeof(uint32_t));
        w.wr[i].pool = xcalloc(sc->n_pool, sizeof(uint32_t));
    }
    for (int i = 0; i < sc->readers; i++) {
        w.rd[i].w = &w;
        w.rd[i].last = xcalloc(w.n_ids, sizeof(uint32_t));
    }

    struct totals t = {0};
    uint64_t start = now_ns();
    uint64_t deadline = start + (uint64_t)(sc->seconds * 1e9);
    uint64_t bad = 0;
    do {
        bad += run_round(sc, &w, t.rounds, deadline, &t);
    } while (bad == 0 && now_ns() < deadline);
    double secs = (double)(now_ns() - start) / 1e9;

    print_message("    %s: %llu rounds in %.1f s; readers: %llu lookups (%llu hits) in %llu "
                  "batches + %llu single; writers: %llu ops (%llu inserts, %llu overwrites, "
                  "%llu deletes); %llu rebuilds, up to %llu keys, up to %llu stashed\n",
                  sc->name, (unsigned long long)t.rounds, secs, (unsigned long long)t.lookups,
                  (unsigned long long)t.hits, (unsigned long long)t.batches,
                  (unsigned long long)t.singles, (unsigned long long)t.ops,
                  (unsigned long long)t.inserts, (unsigned long long)t.overwrites,
                  (unsigned long long)t.deletes, (unsigned long long)t.rebuilds,
                  (unsigned long long)t.entries_max, (unsigned long long)t.stashed_max);
    for (int i = 0; i < sc->writers; i++) {
        free(w.wr[i].stable);
        free(w.wr[i].pool);
    }
    for (int i = 0; i < sc->readers; i++)
        free(w.rd[i].last);
    free(w.gen);
    free(w.present);

    if (bad) {
        for (int a = 0; a < A_N; a++)
            if (t.anomalies[a])
                print_error("    %s: %llu x %s\n", sc->name, (unsigned long long)t.anomalies[a],
                            anomaly_name[a]);
        fail_msg("%s: %llu anomalies (first ones above)", sc->name, (unsigned long long)bad);
    }
    if (t.lookups == 0 || t.hits == 0)
        fail_msg("%s: the readers did no work (%llu lookups)", sc->name,
                 (unsigned long long)t.lookups);
    if (sc->mode == MODE_GROWTH && t.rebuilds == 0)
        fail_msg("%s: no sub-table was rebuilt, so growth went untested", sc->name);
    if (sc->mode == MODE_OVERWRITE && t.rebuilds != 0)
        fail_msg("%s: %llu rebuilds after reserving for every key", sc->name,
                 (unsigned long long)t.rebuilds);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_growth_k1_f32(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "growth K=1 f32", .mode = MODE_GROWTH, .k = 1, .dtype = STORE_DTYPE_F32,
        .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 20000, .n_pool = 300000, .n_never = 20000, .seconds = g_seconds,
    };
    run_scenario(&sc);
}

static void test_growth_k8_f32(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "growth K=8 f32", .mode = MODE_GROWTH, .k = 8, .dtype = STORE_DTYPE_F32,
        .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 20000, .n_pool = 200000, .n_never = 20000, .seconds = g_seconds,
    };
    run_scenario(&sc);
}

static void test_growth_k4_f16(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "growth K=4 f16", .mode = MODE_GROWTH, .k = 4, .dtype = STORE_DTYPE_F16,
        .shards = 4, .writers = 2, .readers = 2,
        .n_stable = 10000, .n_pool = 100000, .n_never = 10000, .seconds = g_seconds / 3,
    };
    run_scenario(&sc);
}

/* K=2 fp16 is a 4-byte value like K=1 fp32, but two floats that must not
 * tear apart. */
static void test_growth_k2_f16(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "growth K=2 f16", .mode = MODE_GROWTH, .k = 2, .dtype = STORE_DTYPE_F16,
        .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 10000, .n_pool = 100000, .n_never = 10000, .seconds = g_seconds / 3,
    };
    run_scenario(&sc);
}

static void test_churn_high_load(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "churn at high load K=8 f32", .mode = MODE_CHURN, .k = 8,
        .dtype = STORE_DTYPE_F32, .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 20000, .n_pool = 80000, .n_never = 10000, .seconds = g_seconds / 3,
    };
    run_scenario(&sc);
}

/* At max_load 0.98 long cuckoo paths and the overflow stash are in play. */
static void test_churn_full_k1(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "churn at max_load 0.98 K=1 f32", .mode = MODE_CHURN, .k = 1,
        .dtype = STORE_DTYPE_F32, .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 4000, .n_pool = 16000, .n_never = 4000, .max_load = 0.98,
        .churn_permille = 995, .reserve_exact = true, .seconds = g_seconds / 3,
    };
    run_scenario(&sc);
}

static void test_overwrite_k1_f32(void **state)
{
    (void)state;
    const struct scenario sc = {
        .name = "overwrite-only K=1 f32", .mode = MODE_OVERWRITE, .k = 1,
        .dtype = STORE_DTYPE_F32, .shards = 4, .writers = 2, .readers = 3,
        .n_stable = 50000, .n_pool = 0, .n_never = 5000, .seconds = g_seconds,
    };
    run_scenario(&sc);
}

static int setup_globals(void **state)
{
    (void)state;
    uint64_t inv = KEY_MUL; /* Newton: each step doubles the correct low bits */
    for (int i = 0; i < 6; i++)
        inv *= 2 - KEY_MUL * inv;
    g_key_inv = inv;
    return KEY_MUL * g_key_inv == 1 ? 0 : -1;
}

int main(void)
{
    const char *e = getenv("TL_CONCURRENT_SECONDS");
    if (e != NULL && *e) {
        double v = strtod(e, NULL);
        if (v > 0)
            g_seconds = v;
    }
    /* A lookup that spins forever (a livelocked seqlock) must not hang CI:
     * SIGALRM's default action ends the process. */
    alarm((unsigned)(g_seconds * 10 + 300));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overwrite_k1_f32),
        cmocka_unit_test(test_growth_k1_f32),
        cmocka_unit_test(test_growth_k8_f32),
        cmocka_unit_test(test_growth_k4_f16),
        cmocka_unit_test(test_growth_k2_f16),
        cmocka_unit_test(test_churn_high_load),
        cmocka_unit_test(test_churn_full_k1),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
