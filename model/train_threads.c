/*
 * train_threads.c — Hogwild epochs on T threads (train_threads.h), and the
 * in-memory samples they split.
 *
 * An epoch:
 *
 *   caller                 thread 0 .. T-1
 *   par->begin             (rows ready: FFM's own, or LR's/FM's store mirror)
 *   start T-1 threads  ->  worker = par->worker_create(impl)
 *   run slice 0            for each sample of slice i: par->update (Hogwild)
 *   join               <-  worker_destroy; loss, counts in its own slot
 *   [mirror]               thread i: store_upsert of every row whose store
 *                          shard % T == i (store.h: one writer per shard)
 *   par->end, quiesce      (LR's bias cache; the table's retired indexes)
 *
 * Slice i is samples [i N / T, (i + 1) N / T): contiguous, so each thread
 * reads its samples sequentially and every sample is stepped once.
 * Contiguous rather than interleaved (thread i taking blocks i, i + T, ...,
 * which keeps the samples in about their order): neighbouring samples of a
 * log share their rarer ids, so interleaved threads collide on the same
 * rows more often, and on criteo_tiny they lost more to Hogwild's races
 * (LR-FTRL test logloss +0.0016 with 2 threads and +0.009 with 4, against
 * -0.0004 and +0.0036 for slices).  A thread that fails (-ENOMEM, -ERANGE)
 * records the first error; the others notice it within BLOCK samples and
 * stop.  Nothing on a thread's
 * path allocates per sample (its worker's space grows to the largest
 * sample once) or takes a lock, except the insert lock of a new id.
 *
 * Samples in memory:
 *
 *   ids    [ s0 f0 | s0 f1 | ... | s1 f0 | ... ]   uint64, all samples' features
 *   values [ same positions ]                       float (1 where none was given)
 *   start  [ 0 | n0 | n0 + n1 | ... | total ]      uint64, samples + 1
 *   labels [ y0 | y1 | ... ]                        float
 *
 * THREAD SAFETY: train_threads.h.
 */
#include "train_threads.h"
#include "train_impl.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Samples between two looks at the shared error flag. */
#define BLOCK 256

struct train_samples {
    uint64_t *ids;
    float *values;
    uint64_t *start; /* n + 1 offsets */
    float *labels;
    uint64_t n, features;
    uint64_t cap_f, cap_n; /* capacity of ids/values, of start/labels */
    uint64_t max_bytes;    /* 0: no limit */
};

int train_samples_create(uint64_t max_bytes, train_samples_t **out)
{
    train_samples_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->max_bytes = max_bytes;
    s->start = malloc(sizeof *s->start);
    if (!s->start) {
        free(s);
        return -ENOMEM;
    }
    s->start[0] = 0;
    s->cap_n = 0;
    *out = s;
    return 0;
}

void train_samples_destroy(train_samples_t *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s->values);
    free(s->start);
    free(s->labels);
    free(s);
}

uint64_t train_samples_count(const train_samples_t *s)
{
    return s->n;
}

uint64_t train_samples_bytes(const train_samples_t *s)
{
    return s->cap_f * (sizeof *s->ids + sizeof *s->values) +
           (s->cap_n + 1) * sizeof *s->start + s->cap_n * sizeof *s->labels;
}

/* Doubles *cap until it holds need; 0 when it would pass UINT64_MAX / 16. */
static uint64_t grown(uint64_t cap, uint64_t need)
{
    uint64_t c = cap ? cap : 1024;
    while (c < need) {
        if (c > UINT64_MAX / 32)
            return 0;
        c *= 2;
    }
    return c;
}

int train_samples_add(train_samples_t *s, const uint64_t *ids, const float *values, uint32_t n,
                      float label)
{
    uint64_t cf = s->cap_f, cn = s->cap_n;
    if (s->features + n > cf && !(cf = grown(s->cap_f, s->features + n)))
        return -E2BIG;
    if (s->n + 1 > cn && !(cn = grown(s->cap_n, s->n + 1)))
        return -E2BIG;
    if (cf != s->cap_f || cn != s->cap_n) {
        uint64_t bytes = cf * (sizeof *s->ids + sizeof *s->values) + (cn + 1) * sizeof *s->start +
                         cn * sizeof *s->labels;
        if (s->max_bytes && bytes > s->max_bytes)
            return -E2BIG;
    }
    if (cf != s->cap_f) {
        uint64_t *i2 = realloc(s->ids, cf * sizeof *i2);
        if (!i2)
            return -ENOMEM;
        s->ids = i2;
        float *v2 = realloc(s->values, cf * sizeof *v2);
        if (!v2)
            return -ENOMEM;
        s->values = v2;
        s->cap_f = cf;
    }
    if (cn != s->cap_n) {
        uint64_t *st = realloc(s->start, (cn + 1) * sizeof *st);
        if (!st)
            return -ENOMEM;
        s->start = st;
        float *l2 = realloc(s->labels, cn * sizeof *l2);
        if (!l2)
            return -ENOMEM;
        s->labels = l2;
        s->cap_n = cn;
    }
    memcpy(s->ids + s->features, ids, (size_t)n * sizeof *ids);
    if (values)
        memcpy(s->values + s->features, values, (size_t)n * sizeof *values);
    else
        for (uint32_t j = 0; j < n; j++)
            s->values[s->features + j] = 1.0f;
    s->labels[s->n] = label;
    s->features += n;
    s->start[++s->n] = s->features;
    return 0;
}

bool train_threads_supported(const train_t *t)
{
    return train_ops(t)->par != NULL;
}

/* ---- the store mirror of LR and FM ---------------------------------------------- */

struct mirror_fill {
    train__row_table_t *rows;
    uint32_t k; /* floats per row */
};

static int copy_in(void *ctx, uint64_t key, const float *value)
{
    const struct mirror_fill *m = ctx;
    bool created;
    float *row = train__row_table_upsert(m->rows, key, &created);
    if (!row)
        return -ENOMEM;
    memcpy(row, value, (size_t)m->k * sizeof *row);
    return 0;
}

__attribute__((cold)) int train__par_mirror(store_t *store, bool live, const char *kind,
                                            train__row_table_t **mirror, bool *stale,
                                            train__row_table_t **rows, store_t **mirror_of,
                                            char *why, size_t why_len)
{
    if (live) {
        char buf[120];
        snprintf(buf, sizeof buf, "an %s trainer attached to a live store trains on one thread",
                 kind);
        return train__refuse(buf, why, why_len);
    }
    if (!*mirror || *stale) {
        struct mirror_fill m = {.k = store_value_floats(store)};
        int rc = train__row_table_create(m.k, store_count(store), &m.rows);
        if (rc != 0)
            return rc;
        for (uint32_t sh = 0; sh < store_shards(store) && rc == 0; sh++)
            rc = store_foreach(store, sh, copy_in, &m);
        if (rc != 0) {
            train__row_table_destroy(m.rows);
            return rc;
        }
        train__row_table_destroy(*mirror);
        *mirror = m.rows;
        *stale = false;
    }
    *rows = *mirror;
    *mirror_of = store;
    return 0;
}

/* ---- the epoch ------------------------------------------------------------------ */

struct epoch {
    const train__par_ops_t *par;
    void *impl;
    const train_samples_t *s;
    train__row_table_t *rows;
    store_t *mirror_of;   /* NULL: no write-back */
    uint32_t threads;
    _Atomic int error;    /* the first thread's error (0: none) */
};

struct slot {
    struct epoch *e;
    uint32_t i;           /* this thread's slice */
    pthread_t tid;
    bool started;
    double ll;            /* its samples' summed logloss */
    uint64_t samples, updates;
    int rc;               /* its write-back's result */
};

static void fail(struct epoch *e, int rc)
{
    int zero = 0;
    atomic_compare_exchange_strong(&e->error, &zero, rc);
}

static void *run_slice(void *arg)
{
    struct slot *sl = arg;
    struct epoch *e = sl->e;
    const train_samples_t *s = e->s;
    void *w = NULL;
    int rc = e->par->worker_create(e->impl, &w);
    if (rc != 0) {
        fail(e, rc);
        return NULL;
    }
    double ll = 0;
    uint64_t done = 0, updates = 0;
    const uint64_t lo = s->n * sl->i / e->threads, end = s->n * (sl->i + 1) / e->threads;
    for (uint64_t b = lo; b < end; b += BLOCK) {
        if (atomic_load_explicit(&e->error, memory_order_relaxed))
            break;
        const uint64_t hi = b + BLOCK < end ? b + BLOCK : end;
        for (uint64_t i = b; i < hi; i++) {
            const uint64_t a = s->start[i];
            const uint32_t n = (uint32_t)(s->start[i + 1] - a);
            const float y = s->labels[i];
            float p;
            rc = e->par->update(w, s->ids + a, s->values + a, n, y, 1.0f, &p);
            if (rc != 0) {
                fail(e, rc);
                goto out;
            }
            double q = p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p;
            ll -= y > 0.5f ? log(q) : log1p(-q);
            done++;
            updates += n + 1;
        }
    }
out:
    e->par->worker_destroy(w);
    sl->ll = ll;
    sl->samples = done;
    sl->updates = updates;
    return NULL;
}

struct write_back {
    store_t *store;
    uint32_t i, threads;
};

static int write_row(void *ctx, uint64_t id, const float *row)
{
    const struct write_back *wb = ctx;
    if (store_shard_of(wb->store, id) % wb->threads != wb->i)
        return 0; /* another thread's shard */
    int rc = store_upsert(wb->store, id, row);
    return rc < 0 ? rc : 0;
}

/* Thread i writes the rows of the store shards it owns (shard % T == i). */
static void *run_write_back(void *arg)
{
    struct slot *sl = arg;
    struct write_back wb = {.store = sl->e->mirror_of, .i = sl->i, .threads = sl->e->threads};
    sl->rc = train__row_table_foreach(sl->e->rows, write_row, &wb);
    return NULL;
}

/* Runs fn on every slot: slots 1.. on new threads, slot 0 on this one, and
 * on this one too any slot whose thread could not start (fewer cores
 * then, the same work). */
static void run_all(struct slot *slots, uint32_t threads, void *(*fn)(void *))
{
    for (uint32_t i = 1; i < threads; i++)
        slots[i].started = pthread_create(&slots[i].tid, NULL, fn, &slots[i]) == 0;
    fn(&slots[0]);
    for (uint32_t i = 1; i < threads; i++) {
        if (slots[i].started)
            pthread_join(slots[i].tid, NULL);
        else
            fn(&slots[i]);
        slots[i].started = false;
    }
}

int train_threads_epoch(train_t *t, const train_samples_t *s, uint32_t threads,
                        train_threads_stats_t *st, char *why, size_t why_len)
{
    memset(st, 0, sizeof *st);
    st->logloss = NAN;
    const train__par_ops_t *par = train_ops(t)->par;
    if (!par)
        return train__refuse("this model kind trains on one thread", why, why_len);
    if (threads < 1 || threads > TRAIN_THREADS_MAX)
        return train__refuse("the thread count must be 1..1024", why, why_len);
    struct epoch e = {.par = par, .impl = train__impl(t), .s = s, .threads = threads};
    atomic_init(&e.error, 0);
    int rc = par->begin(e.impl, &e.rows, &e.mirror_of, why, why_len);
    if (rc != 0) {
        if (rc == -ENOMEM && why_len)
            snprintf(why, why_len, "out of memory for the rows the threads step");
        return rc;
    }
    struct slot *slots = calloc(threads, sizeof *slots);
    if (!slots)
    {
        if (why_len)
            snprintf(why, why_len, "out of memory for the threads");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < threads; i++)
        slots[i] = (struct slot){.e = &e, .i = i};

    run_all(slots, threads, run_slice);
    double ll = 0;
    for (uint32_t i = 0; i < threads; i++) {
        ll += slots[i].ll;
        st->samples += slots[i].samples;
        st->updates += slots[i].updates;
    }
    st->logloss = st->samples ? ll / (double)st->samples : NAN;
    rc = atomic_load(&e.error);
    train__row_table_quiesce(e.rows);
    if (e.mirror_of) { /* the steps taken, error or not, go back into the store */
        run_all(slots, threads, run_write_back);
        int wrc = 0;
        for (uint32_t i = 0; i < threads && wrc == 0; i++)
            wrc = slots[i].rc;
        if (rc == 0)
            rc = wrc;
    }
    if (par->end)
        par->end(e.impl);
    free(slots);
    if (rc != 0 && why_len)
        snprintf(why, why_len, "%s",
                 rc == -ERANGE   ? "a step made a weight infinite or NaN (feature values too "
                                   "large?): not written"
                                 : "out of memory while training on threads");
    return rc;
}
