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
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_internal.h"

#define KEY_MUL 0x9E3779B97F4A7C15ull
#define MAX_THREADS 8
#define MAX_BATCH 256
#define F32_MAX_GEN ((1u << 22) - 1)
#define F16_MAX_GEN 63u
#define NOTES 4 /* anomaly descriptions kept per thread */

enum kind { KIND_STABLE, KIND_POOL, KIND_NEVER };
enum mode { MODE_GROWTH, MODE_CHURN, MODE_OVERWRITE };

enum anomaly {
    A_MISS,        /* a stable key not found */
    A_PHANTOM,     /* a never-inserted key found */
    A_BAD_VALUE,   /* a value no write ever produced for that key */
    A_TORN,        /* the K floats of one value differ */
    A_BACKWARDS,   /* a key's generation went down */
    A_NOT_ZERO,    /* an absent key of a batch not zero-filled */
    A_COUNT,       /* batch return value != number found */
    A_WRITER,      /* a writer's return value or own read-back was wrong */
    A_N
};
static const char *const anomaly_name[A_N] = {
    "stable key missed", "never-inserted key found", "invalid value", "torn value",
    "generation went backwards", "absent key not zero-filled", "batch count wrong",
    "writer saw a wrong result",
};

struct scenario {
    const char *name;
    enum mode mode;
    uint32_t k;
    store_dtype_t dtype;
    uint32_t shards;
    int writers, readers;
    uint64_t n_stable, n_pool, n_never;
    double max_load; /* 0 = the store's default */
    unsigned churn_permille; /* churn: share of the pool kept present (0 = 900) */
    bool reserve_exact;      /* reserve per sub-table, exactly (the loader's way) */
    double seconds;
};

struct notes {
    uint64_t count[A_N];
    int n;
    char text[NOTES][200];
};

struct world;

struct writer {
    struct world *w;
    pthread_t tid;
    uint64_t seed;
    uint32_t *stable; /* ids this writer owns */
    size_t n_stable;
    uint32_t *pool;
    size_t n_pool;
    uint64_t ops, inserts, deletes, overwrites;
    uint64_t stashed_max; /* store_stats().stashed, sampled */
    struct notes notes;
};

struct reader {
    struct world *w;
    pthread_t tid;
    uint64_t seed;
    uint32_t *last;  /* [n_ids]: highest generation seen per key */
    uint64_t lookups, hits, batches, singles;
    struct notes notes;
};

struct world {
    const struct scenario *sc;
    store_t *s;
    uint64_t n_ids;
    uint32_t *gen;      /* [n_ids]: written by the owning writer only */
    uint8_t *present;   /* [n_ids]: idem */
    uint64_t deadline;  /* CLOCK_MONOTONIC ns: writers stop here */
    pthread_barrier_t start;
    atomic_int writers_left;
    atomic_bool stop;   /* readers stop when set */
    struct writer wr[MAX_THREADS];
    struct reader rd[MAX_THREADS];
};

static double g_seconds = 3.0; /* TL_CONCURRENT_SECONDS */
static uint64_t g_key_inv;

/* ---- helpers ------------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return mix64(*s);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t key_of(uint64_t c)
{
    return c * KEY_MUL;
}

static enum kind kind_of(const struct world *w, uint64_t c)
{
    return c < w->sc->n_stable                  ? KIND_STABLE
           : c < w->sc->n_stable + w->sc->n_pool ? KIND_POOL
                                                 : KIND_NEVER;
}

static void note(struct notes *n, enum anomaly a, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(struct notes *n, enum anomaly a, const char *fmt, ...)
{
    n->count[a]++;
    if (n->n >= NOTES)
        return;
    int len = snprintf(n->text[n->n], sizeof n->text[0], "%s: ", anomaly_name[a]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->text[n->n] + len, sizeof n->text[0] - (size_t)len, fmt, ap);
    va_end(ap);
    n->n++;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return p;
}

/* ---- value encoding ------------------------------------------------------ */

static uint32_t max_gen(const struct world *w)
{
    return w->sc->dtype == STORE_DTYPE_F16 ? F16_MAX_GEN : F32_MAX_GEN;
}

static uint32_t check8(uint64_t key, uint32_t gen)
{
    return (uint32_t)(mix64(key ^ ((uint64_t)gen << 40)) >> 56);
}

static void encode(const struct world *w, uint64_t key, uint32_t gen, float *v)
{
    float f;
    if (w->sc->dtype == STORE_DTYPE_F16) {
        f = (float)(gen * 32 + (uint32_t)(mix64(key) & 31));
    } else {
        uint32_t bits = 0x01000000u + (gen << 8 | check8(key, gen));
        memcpy(&f, &bits, 4);
    }
    for (uint32_t j = 0; j < w->sc->k; j++)
        v[j] = f;
}

/* The generation a value encodes, or 0 when no write produced it. */
static uint32_t decode(const struct world *w, uint64_t key, float f)
{
    if (w->sc->dtype == STORE_DTYPE_F16) {
        if (!(f >= 32.0f && f < 2048.0f) || f != (float)(uint32_t)f)
            return 0;
        uint32_t x = (uint32_t)f;
        return (x & 31) == (mix64(key) & 31) ? x >> 5 : 0;
    }
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (bits < 0x01000100u || bits - 0x01000000u > (F32_MAX_GEN << 8 | 0xFF))
        return 0;
    uint32_t x = bits - 0x01000000u, gen = x >> 8;
    return (x & 0xFF) == check8(key, gen) ? gen : 0;
}

static bool floats_equal(const float *v, uint32_t k)
{
    for (uint32_t j = 1; j < k; j++)
        if (memcmp(&v[j], &v[0], sizeof(float)) != 0)
            return false;
    return true;
}

/* ---- writers --------------------------------------------------------------- */

static void writer_put(struct writer *wr, uint64_t c, bool bump)
{
    struct world *w = wr->w;
    float v[STORE_MAX_VALUE_FLOATS];
    if (bump && w->gen[c] < max_gen(w))
        w->gen[c]++;
    encode(w, key_of(c), w->gen[c], v);
    int rc = store_upsert(w->s, key_of(c), v);
    int want = w->present[c] ? 0 : 1;
    if (rc != want)
        note(&wr->notes, A_WRITER, "upsert(id %llu) = %d, expected %d", (unsigned long long)c, rc,
             want);
    if (!w->present[c])
        wr->inserts++;
    else
        wr->overwrites++;
    w->present[c] = 1;
}

static void writer_del(struct writer *wr, uint64_t c)
{
    struct world *w = wr->w;
    int rc = store_delete(w->s, key_of(c));
    if (rc != w->present[c])
        note(&wr->notes, A_WRITER, "delete(id %llu) = %d, expected %d", (unsigned long long)c, rc,
             w->present[c]);
    w->present[c] = 0;
    wr->deletes++;
}

/* The writer's own keys read back exactly: no concurrent writer touches them. */
static void writer_check(struct writer *wr, uint64_t c)
{
    struct world *w = wr->w;
    float out[STORE_MAX_VALUE_FLOATS];
    int rc = store_lookup(w->s, key_of(c), out);
    if (rc != w->present[c]) {
        note(&wr->notes, A_WRITER, "own lookup(id %llu) = %d, expected %d", (unsigned long long)c,
             rc, w->present[c]);
        return;
    }
    if (rc == 1 && (!floats_equal(out, w->sc->k) || decode(w, key_of(c), out[0]) != w->gen[c]))
        note(&wr->notes, A_WRITER, "own lookup(id %llu): generation %u, expected %u",
             (unsigned long long)c, decode(w, key_of(c), out[0]), w->gen[c]);
}

static void *writer_main(void *arg)
{
    struct writer *wr = arg;
    struct world *w = wr->w;
    const struct scenario *sc = w->sc;
    uint64_t rs = wr->seed;

    for (size_t i = 0; i < wr->n_stable; i++) /* stable keys first */
        writer_put(wr, wr->stable[i], true);
    pthread_barrier_wait(&w->start);

    size_t next_new = 0, n_present = 0; /* pool[0..next_new) have been inserted once */
    size_t hot = wr->n_stable < 64 ? wr->n_stable : 64;
    /* A round ends at the deadline or after the pool is used and churned. */
    uint64_t budget = (uint64_t)wr->n_pool * 4 + (uint64_t)wr->n_stable * 4 + 100000;
    if (sc->mode == MODE_GROWTH) {
        budget = (uint64_t)wr->n_pool * 3 + 1000;
    } else if (sc->mode == MODE_OVERWRITE) {
        budget = (uint64_t)wr->n_stable * 100;
    } else if (sc->mode == MODE_CHURN) {
        for (size_t i = 0; i < wr->n_pool; i++) /* fill to the reservation */
            writer_put(wr, wr->pool[i], true);
        next_new = n_present = wr->n_pool;
    }
    for (uint64_t op = 0; op < budget; op++) {
        if ((op & 255) == 0 && now_ns() >= w->deadline)
            break;
        if ((op & 4095) == 0) {
            store_stats_t st;
            store_stats(w->s, &st);
            if (st.stashed > wr->stashed_max)
                wr->stashed_max = st.stashed;
        }
        uint64_t x = rng_next(&rs);
        unsigned r = (unsigned)(x % 100);
        x >>= 8;
        wr->ops++;
        if (sc->mode == MODE_OVERWRITE) {
            uint32_t c = (r < 50 && hot) ? wr->stable[x % hot] : wr->stable[x % wr->n_stable];
            if ((r & 15) == 15)
                writer_check(wr, c);
            else
                writer_put(wr, c, true);
            continue;
        }
        if (sc->mode == MODE_GROWTH && r < 45 && next_new < wr->n_pool) {
            writer_put(wr, wr->pool[next_new++], true);
            n_present++;
        } else if (r < 60 && wr->n_stable) {
            writer_put(wr, wr->stable[x % wr->n_stable], true);
        } else if (r < 90 && sc->mode == MODE_CHURN) {
            /* Hold the pool at churn_permille present: below it insert an
             * absent key, above it delete a present one; now and then
             * overwrite a present one. */
            unsigned keep = sc->churn_permille ? sc->churn_permille : 900;
            bool over = n_present * 1000 >= (uint64_t)wr->n_pool * keep;
            bool want_present = r >= 80 || over; /* the kind of key to look for */
            size_t i = x % wr->n_pool;
            while (w->present[wr->pool[i]] != want_present)
                i = (i + 1) % wr->n_pool;
            uint32_t c = wr->pool[i];
            if (r < 80 && over) {
                writer_del(wr, c);
                n_present--;
            } else {
                n_present += !w->present[c];
                writer_put(wr, c, true);
            }
        } else if (r < 90 && next_new) {
            uint32_t c = wr->pool[x % next_new];
            bool del = r < 75; /* growth: delete about half of what it touches */
            if (w->present[c] && del) {
                writer_del(wr, c);
                n_present--;
            } else {
                n_present += !w->present[c];
                writer_put(wr, c, true);
            }
        } else {
            bool st = (x & 1) || next_new == 0;
            if (st && wr->n_stable)
                writer_check(wr, wr->stable[(x >> 1) % wr->n_stable]);
            else if (next_new)
                writer_check(wr, wr->pool[(x >> 1) % next_new]);
        }
    }
    if (atomic_fetch_sub(&w->writers_left, 1) == 1)
        atomic_store(&w->stop, true);
    return NULL;
}

/* ---- readers ------------------------------------------------------------- */

/* Checks one result; returns the generation seen (0 when absent or bad). */
static uint32_t reader_check(struct reader *rd, uint64_t c, int found, const float *v, bool batch,
                             const char *how)
{
    struct world *w = rd->w;
    uint32_t k = w->sc->k;
    enum kind kind = kind_of(w, c);
    uint64_t key = key_of(c);
    if (!found) {
        if (kind == KIND_STABLE)
            note(&rd->notes, A_MISS, "%s: stable id %llu (key %#llx, shard %u)", how,
                 (unsigned long long)c, (unsigned long long)key, store_shard_of(w->s, key));
        if (batch)
            for (uint32_t j = 0; j < k; j++)
                if (v[j] != 0.0f) {
                    note(&rd->notes, A_NOT_ZERO, "%s: id %llu float %u = %a", how,
                         (unsigned long long)c, j, (double)v[j]);
                    break;
                }
        return 0;
    }
    rd->hits++;
    if (kind == KIND_NEVER) {
        note(&rd->notes, A_PHANTOM, "%s: id %llu (key %#llx)", how, (unsigned long long)c,
             (unsigned long long)key);
        return 0;
    }
    if (!floats_equal(v, k)) {
        uint32_t j = 1;
        while (j < k && memcmp(&v[j], &v[0], 4) == 0)
            j++;
        note(&rd->notes, A_TORN, "%s: id %llu float 0 = %a (gen %u), float %u = %a (gen %u)", how,
             (unsigned long long)c, (double)v[0], decode(w, key, v[0]), j, (double)v[j],
             decode(w, key, v[j]));
        return 0;
    }
    uint32_t g = decode(w, key, v[0]);
    if (g == 0) {
        note(&rd->notes, A_BAD_VALUE, "%s: id %llu (key %#llx) value %a", how,
             (unsigned long long)c, (unsigned long long)key, (double)v[0]);
        return 0;
    }
    if (g < rd->last[c])
        note(&rd->notes, A_BACKWARDS, "%s: id %llu generation %u after %u", how,
             (unsigned long long)c, g, rd->last[c]);
    return g;
}

/* A random key id: only stable ones, or a mix of 40% stable, 45% volatile
 * and 15% never-inserted. */
static uint64_t pick(const struct world *w, uint64_t *rs, bool stable_only)
{
    const struct scenario *sc = w->sc;
    uint64_t x = rng_next(rs);
    unsigned r = (unsigned)(x % 100);
    x >>= 8;
    if (!stable_only && r >= 85 && sc->n_never)
        return sc->n_stable + sc->n_pool + x % sc->n_never;
    if (!stable_only && r >= 40 && sc->n_pool)
        return sc->n_stable + x % sc->n_pool;
    return x % sc->n_stable;
}

static void *reader_main(void *arg)
{
    struct reader *rd = arg;
    struct world *w = rd->w;
    const uint32_t k = w->sc->k;
    uint64_t rs = rd->seed;
    uint64_t *keys = xcalloc(MAX_BATCH, sizeof *keys);
    uint64_t *ids = xcalloc(MAX_BATCH, sizeof *ids);
    uint32_t *gens = xcalloc(MAX_BATCH, sizeof *gens);
    float *out = xcalloc((size_t)MAX_BATCH * k, sizeof *out);
    uint8_t found[MAX_BATCH];

    pthread_barrier_wait(&w->start);
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        uint64_t x = rng_next(&rs);
        size_t n = 1 + (x >> 8) % MAX_BATCH;
        unsigned how = (unsigned)(x % 8);
        for (size_t i = 0; i < n; i++) {
            ids[i] = pick(w, &rs, (x >> 40) & 1);
            keys[i] = key_of(ids[i]);
        }
        if (how < 5) { /* batch, with or without found[] */
            bool with_found = how != 4;
            for (size_t i = 0; i < n * k; i++)
                out[i] = -1.0f;
            size_t got = store_lookup_batch(w->s, keys, n, out, with_found ? found : NULL);
            size_t hits = 0;
            for (size_t i = 0; i < n; i++) {
                const float *v = out + i * k;
                /* no valid value is 0, so without found[] a zero means absent */
                int f = with_found ? found[i] : v[0] != 0.0f;
                hits += (size_t)f;
                gens[i] = reader_check(rd, ids[i], f, v, true,
                                       with_found ? "batch" : "batch(found=NULL)");
            }
            if (got != hits)
                note(&rd->notes, A_COUNT, "batch of %zu returned %zu, %zu found", n, got, hits);
            for (size_t i = 0; i < n; i++) /* after the whole batch: see header */
                if (gens[i] > rd->last[ids[i]])
                    rd->last[ids[i]] = gens[i];
            rd->batches++;
        } else { /* single lookups, strictly ordered */
            for (size_t i = 0; i < n && i < 32; i++) {
                int f = store_lookup(w->s, keys[i], out);
                if (f != 0 && f != 1) {
                    note(&rd->notes, A_COUNT, "store_lookup returned %d", f);
                    f = 1;
                }
                uint32_t g = reader_check(rd, ids[i], f, out, false, "lookup");
                if (g > rd->last[ids[i]])
                    rd->last[ids[i]] = g;
                rd->singles++;
            }
            n = n < 32 ? n : 32;
        }
        rd->lookups += n;
    }
    free(keys);
    free(ids);
    free(gens);
    free(out);
    return NULL;
}

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
