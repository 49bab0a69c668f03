/*
 * impression_log_bench.c — rates of the impression log (server/impression_log.h)
 * on the standard request: a shared block of 300 ids and 200 items of 50 ids
 * (10,300 ids, no values), as a worker logs it.
 *
 *   impression_log_bench [--n N] [--mib M] [--stripes S] [--no-negatives]
 *
 * Prints, one line each: put rate with 1 and 2 threads (impressions/s and MB/s
 * of entry bytes; the log is M MiB, so puts past it evict and their negatives
 * go to a counting sink, as in the server), feedback rate (joins/s, the emit
 * touching the sample's blocks), expiry rate (negatives/s), and the memory an
 * impression takes, with how many minutes of 300 PREDICTs/s fit in 1 GiB.
 * A program that prints figures: it fails only when the log refuses a put.
 */
#define _GNU_SOURCE
#include "server/impression_log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHARED_IDS 300
#define ITEMS 200
#define ITEM_IDS 50

static uint64_t shared_ids[SHARED_IDS], item_ids[ITEMS][ITEM_IDS];
static codec_block_t shared, items[ITEMS];
static impression_log_t *log_;
static _Atomic uint64_t sink_samples, sink_ids;
static _Atomic int put_failed;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sorted_random(uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = next_rand();
    qsort(ids, n, sizeof *ids, cmp_u64);
}

/* What a trainer's emit does at least: read the blocks it copies. */
static uint32_t count_emit(const impression_negatives_t *b, void *ctx)
{
    (void)ctx;
    uint64_t x = b->shared.n ? b->shared.ids[b->shared.n - 1] : 0, ids = b->shared.n;
    for (uint32_t i = 0; i < b->n; i++) {
        x ^= b->block[i].n ? b->block[i].ids[b->block[i].n - 1] : 0;
        ids += b->block[i].n;
    }
    atomic_fetch_add_explicit(&sink_samples, b->n, memory_order_relaxed);
    atomic_fetch_add_explicit(&sink_ids, ids + (x & 0), memory_order_relaxed);
    return b->n;
}

static int count_feedback(const impression_sample_t *s, void *ctx)
{
    (void)ctx;
    uint64_t x = s->shared.n ? s->shared.ids[s->shared.n - 1] : 0;
    x ^= s->block.n ? s->block.ids[s->block.n - 1] : 0;
    atomic_fetch_add_explicit(&sink_samples, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sink_ids, s->shared.n + s->block.n + (x & 0), memory_order_relaxed);
    return 0;
}

struct put_arg {
    uint64_t first, n;
};

static void *put_thread(void *p)
{
    const struct put_arg *a = p;
    for (uint64_t i = a->first; i < a->first + a->n; i++)
        if (impression_log_put(log_, i, 1, 1, 0, &shared, items, ITEMS) != 0)
            atomic_store(&put_failed, 1);
    return NULL;
}

/* Puts n impressions (ids from first) on nthreads threads; returns seconds. */
static double put_run(uint64_t first, uint64_t n, int nthreads)
{
    pthread_t t[2];
    struct put_arg a[2];
    double t0 = now_s();
    for (int i = 0; i < nthreads; i++) {
        a[i] = (struct put_arg){first + (uint64_t)i * (n / nthreads), n / nthreads};
        pthread_create(&t[i], NULL, put_thread, &a[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    uint64_t n = 20000, mib = 256;
    uint32_t stripes = 64;
    bool negatives = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--stripes") && i + 1 < argc)
            stripes = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-negatives"))
            negatives = false; /* the put's own cost, without the evicted entries' negatives */
        else {
            fprintf(stderr, "usage: %s [--n N] [--mib M] [--stripes S] [--no-negatives]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n < 2) {
        fprintf(stderr, "--n must be at least 2\n");
        return 2;
    }
    sorted_random(shared_ids, SHARED_IDS);
    shared = (codec_block_t){shared_ids, NULL, SHARED_IDS};
    for (int i = 0; i < ITEMS; i++) {
        sorted_random(item_ids[i], ITEM_IDS);
        items[i] = (codec_block_t){item_ids[i], NULL, ITEM_IDS};
    }

    impression_log_config_t c = impression_log_config_default();
    c.max_bytes = mib << 20;
    c.stripes = stripes;
    c.window_ms = 1000;
    c.evict_emit = count_emit;
    c.emit_negatives = negatives;
    int rc = impression_log_create(&c, &log_);
    if (rc != 0) {
        fprintf(stderr, "impression_log_create: %s\n", strerror(-rc));
        return 1;
    }

    /* warm: touch the arena once so that page faults are not measured */
    put_run(1u << 30, n, 1);
    impression_log_stats_t st;
    impression_log_stats(log_, &st);
    double entry_bytes = st.entries ? (double)st.bytes / (double)st.entries : 0;

    for (int threads = 1; threads <= 2; threads++) {
        double s = put_run((uint64_t)threads << 32, n, threads);
        printf("put, %d thread%s: %.0f impressions/s, %.0f MB/s (%.0f B an entry, %" PRIu64
               " MiB log, evicting)\n",
               threads, threads > 1 ? "s" : "", (double)n / s, (double)n * entry_bytes / s / 1e6,
               entry_bytes, mib);
    }

    /* feedback: 50 items of each of the newest impressions of both threads of the last run
     * (ids 2<<32 + [0, n/2) and 2<<32 + [n/2, n)), most of them still held */
    impression_log_stats(log_, &st);
    uint64_t held = st.entries, fb = 0, ok = 0, base = UINT64_C(2) << 32;
    double t0 = now_s();
    for (uint64_t i = 0; i < held * 9 / 10 && i < n; i++) {
        uint64_t id = base + ((i & 1) ? n / 2 : n) - 1 - i / 2;
        for (uint32_t item = 0; item < 50; item++, fb++)
            ok += impression_log_feedback(log_, id, 1, (uint32_t)(id * 31 + item * 4) % ITEMS, 1.0f,
                                          1.0f, 0, count_feedback, NULL) == IMPRESSION_FB_OK;
    }
    double s = now_s() - t0;
    printf("feedback: %.0f joins/s (%" PRIu64 " calls, %" PRIu64 " OK, emit reads the blocks)\n",
           (double)fb / s, fb, ok);

    uint64_t before = atomic_load(&sink_samples);
    t0 = now_s();
    impression_log_expired_t x = impression_log_expire(log_, UINT64_MAX, count_emit, NULL);
    s = now_s() - t0;
    printf("expire: %.0f negatives/s (%" PRIu64 " impressions, %" PRIu64 " negatives)\n",
           (double)x.negatives / s, x.entries, atomic_load(&sink_samples) - before);

    /* memory: the entry plus its share of the index (2 slots of 16 B an entry at full load,
     * sized by max_entries, by default one per KiB of max_bytes) */
    double index_per_entry =
        16.0 * 2 * (double)(c.max_bytes / 1024) / ((double)c.max_bytes / entry_bytes);
    double per_imp = entry_bytes + index_per_entry;
    double fit = (double)(UINT64_C(1) << 30) / per_imp;
    printf("memory: %.0f B an impression (%.0f entry + %.0f index); 1 GiB holds %.0f impressions"
           " = %.2f min at 300 PREDICTs/s\n",
           per_imp, entry_bytes, index_per_entry, fit, fit / 300.0 / 60.0);
    impression_log_stats(log_, &st);
    impression_log_destroy(log_);
    if (atomic_load(&put_failed)) {
        fprintf(stderr, "a put was refused\n");
        return 1;
    }
    return 0;
}
