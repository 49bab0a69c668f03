/*
 * concurrent_threads.c — the writer and reader threads of the concurrent
 * tl_hash_map test (test_concurrent.c states what they do and check).
 *
 * THREAD SAFETY: writer w writes only the shards s with s % nwriters == w;
 * readers only read the store; each thread reports into its own notes.
 */

#include "concurrent_harness.h"

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

void *writer_main(void *arg)
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

void *reader_main(void *arg)
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
