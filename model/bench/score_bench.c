/*
 * score_bench.c — model_score() time for the standard request on one core,
 * any model kind (LR, FM, FFM, DNN).
 *
 *   score_bench --model DIR [--requests N] [--items 200] [--shared 300]
 *            [--per-item 200] [--key-space N] [--hot-keys 2048] [--seed 42]
 *            [--values]
 *
 * Loads a snapshot (e.g. `tlsynth model --kind fm --value-floats 17`, or the
 * FFM and DNN examples in `tlsynth model --help`), builds `requests` distinct
 * requests whose ids are tlsynth model's synthetic keys
 * store_synthetic_key(i, seed), i uniform in [0, key-space) — so every id
 * is known to a model made with the same seed and key count — laid out back
 * to back as the wire decoder leaves them,
 * and times model_score() on each (one thread: the caller's core).  Prints
 * p50/p90/p99/max in microseconds and the lookup share (the same batched
 * store lookup alone, on another request's ids so that the cache is as cold
 * as model_score() found it).  Then the two things the time is made of,
 * each measured alone in the same run:
 *   - hot: the same request shapes with ids drawn from only --hot-keys
 *     keys, whose buckets and values stay in cache: the arithmetic and the
 *     lookup's own instructions without waiting on DRAM for the table (the
 *     lookup still writes K floats per id into the scratch, 2.7 MB per
 *     request at K=17 and 13 MB at K=81, more than L2 holds);
 *   - floor: total ids / the random-read limit (mem_limit.c, on an array as
 *     large as the model's table): the memory time of one request of
 *     uniform random ids when each id costs one cache line, the least any
 *     store could read; and the time of the reads a hit in this store
 *     makes, done without a store (a random bucket line and a random run
 *     of the value's bytes per id, mem_limit_id_reads).
 * A lookup near its own floor is memory-bound: it gets faster only by
 * reading fewer lines per id or on a machine with faster random reads.
 * A benchmark: it never fails on timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "model/model.h"
#include "store/bench/mem_limit.h"
#include "store/synthetic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *s, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return s[i < n ? i : n - 1];
}

static long arg_long(const char *name, const char *v, long lo, long hi)
{
    char *e;
    long x = strtol(v, &e, 10);
    if (*e || e == v || x < lo || x > hi) {
        fprintf(stderr, "score_bench: %s: '%s' is not a number in %ld..%ld\n", name, v, lo, hi);
        exit(2);
    }
    return x;
}

enum {
    DISTINCT = 64,   /* distinct requests cycled through */
    HOT_KEYS = 2048, /* default keys of the hot run: buckets and values fit in L2 */
};
#define LIMIT_READS (4u << 20) /* random reads per prefetch distance */

/* n ids: synthetic keys i uniform in [0, key_space), as tlsynth model made them. */
static void fill_ids(uint64_t *ids, size_t n, long key_space, long seed)
{
    uint64_t rng = 12345;
    for (size_t j = 0; j < n; j++)
        ids[j] = store_synthetic_key(store_splitmix64(&rng) % (uint64_t)key_space, (uint64_t)seed);
}

/* Bytes of one out-of-line value in this store; 0 when values sit in the
 * bucket (4 bytes or less). */
static uint32_t value_bytes(const store_t *s)
{
    uint32_t K = store_value_floats(s);
    uint32_t vb = store_dtype(s) == STORE_DTYPE_F16 ? K * 2 : K * 4;
    return vb <= 4 ? 0 : vb;
}

/* One timed pass: the model, DISTINCT requests' ids back to back, and the
 * buffers the requests are scored into. */
typedef struct run {
    model_t *m;
    const uint64_t *ids;
    size_t total; /* ids per request */
    uint32_t shared, items, per;
    const float *vals; /* total feature values, or NULL */
    codec_block_t *blocks;
    float *scores;
    float *wbuf; /* (total + 1) * K floats */
    model_scratch_t *sc;
} run_t;

static volatile float g_sink; /* keeps the scores and lookups alive */

/* Times `requests` model_score() calls into lat and, after each, the lookup
 * of another request's ids (the ones just scored are in cache) into look. */
static int time_requests(const run_t *u, long requests, double *lat, double *look)
{
    float sink = 0;
    for (long r = 0; r < requests; r++) {
        const uint64_t *rid = u->ids + (size_t)(r % DISTINCT) * u->total;
        codec_block_t sh = {rid, u->vals, u->shared};
        for (uint32_t i = 0; i < u->items; i++) {
            size_t off = u->shared + (size_t)i * u->per;
            u->blocks[i] = (codec_block_t){rid + off, u->vals ? u->vals + off : NULL, u->per};
        }
        double a = now_us();
        if (model_score(u->m, &sh, u->blocks, u->items, u->scores, u->sc) != 0) {
            fprintf(stderr, "score_bench: model_score failed\n");
            return -1;
        }
        lat[r] = now_us() - a;
        sink += u->scores[r % u->items];
        a = now_us();
        store_lookup_batch(model_store(u->m),
                           u->ids + (size_t)((r + DISTINCT / 2) % DISTINCT) * u->total, u->total,
                           u->wbuf, NULL);
        look[r] = now_us() - a;
        sink += u->wbuf[r % u->total];
    }
    g_sink += sink;
    qsort(lat, (size_t)requests, sizeof *lat, cmp_d);
    qsort(look, (size_t)requests, sizeof *look, cmp_d);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    long requests = 2000, items = 200, shared = 300, per = 200, key_space = 20000000, seed = 42;
    long hot_keys = HOT_KEYS;
    int values = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--values")) {
            values = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "score_bench: %s needs a value (see the header of score_bench.c)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--requests"))
            requests = arg_long(a, v, 1, 1000000);
        else if (!strcmp(a, "--items"))
            items = arg_long(a, v, 1, 100000);
        else if (!strcmp(a, "--shared"))
            shared = arg_long(a, v, 0, 1000000);
        else if (!strcmp(a, "--per-item"))
            per = arg_long(a, v, 0, 100000);
        else if (!strcmp(a, "--key-space"))
            key_space = arg_long(a, v, 1, 1L << 40);
        else if (!strcmp(a, "--hot-keys"))
            hot_keys = arg_long(a, v, 1, 1L << 40);
        else if (!strcmp(a, "--seed"))
            seed = arg_long(a, v, 0, 1L << 40);
        else {
            fprintf(stderr, "score_bench: unknown option %s\n", a);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: score_bench --model DIR [--requests N] [--items 200] [--shared 300]\n"
                        "                [--per-item 200] [--key-space N] [--hot-keys 2048]\n"
                        "                [--seed 42] [--values]\n");
        return 2;
    }
    model_t *m;
    store_error_t err;
    double t0 = now_us();
    if (model_load(dir, 0, &m, &err) != 0) {
        fprintf(stderr, "score_bench: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "score_bench: loaded %s (%s, %u floats per key, %llu keys) in %.1f s\n", dir,
            store_model_kind_name(model_meta(m)->model_kind), model_value_floats(m),
            (unsigned long long)store_count(model_store(m)), (now_us() - t0) / 1e6);

    size_t total = (size_t)shared + (size_t)items * (size_t)per;
    uint64_t *ids = malloc(DISTINCT * total * sizeof *ids);
    float *vals = malloc(total * sizeof *vals);
    codec_block_t *blocks = malloc((size_t)items * sizeof *blocks);
    float *scores = malloc((size_t)items * sizeof *scores);
    float *wbuf = malloc((total + 1) * model_value_floats(m) * sizeof *wbuf);
    double *lat = malloc((size_t)requests * sizeof *lat), *look = malloc((size_t)requests * sizeof *look);
    model_scratch_t *sc;
    if (!ids || !vals || !blocks || !scores || !wbuf || !lat || !look ||
        model_scratch_create(total, &sc) != 0 || model_scratch_fit(sc, m, total) < 0) {
        fprintf(stderr, "score_bench: out of memory\n");
        return 1;
    }
    fill_ids(ids, DISTINCT * total, key_space, seed);
    for (size_t j = 0; j < total; j++)
        vals[j] = 0.5f + (float)(j % 7) / 7.0f;

    run_t run = {m, ids, total, (uint32_t)shared, (uint32_t)items, (uint32_t)per,
                 values ? vals : NULL, blocks, scores, wbuf, sc};
    if (time_requests(&run, requests, lat, look) != 0)
        return 1;
    printf("model_score: %ld requests x (%ld items, %ld shared + %ld per item = %zu features), "
           "1 thread: us p50 %.0f p90 %.0f p99 %.0f max %.0f\n",
           requests, items, shared, per, total, pct(lat, requests, .5), pct(lat, requests, .9),
           pct(lat, requests, .99), lat[requests - 1]);
    const double look_p50 = pct(look, requests, .5);
    printf("lookup alone (store_lookup_batch of the same ids): us p50 %.0f p99 %.0f\n", look_p50,
           pct(look, requests, .99));

    /* hot: the same shapes over hot_keys keys, all in cache after the first */
    const long hot = key_space < hot_keys ? key_space : hot_keys;
    fill_ids(ids, DISTINCT * total, hot, seed);
    if (time_requests(&run, requests, lat, look) != 0)
        return 1;
    printf("hot (ids from %ld keys, in cache): model_score us p50 %.0f p99 %.0f, "
           "lookup alone p50 %.0f\n",
           hot, pct(lat, requests, .5), pct(lat, requests, .99), pct(look, requests, .5));

    /* floor: the random-read limit on an array as large as the table */
    store_stats_t st;
    store_stats(model_store(m), &st);
    size_t arr_len;
    int huge_ok;
    uint64_t *arr = mem_limit_map(st.table_bytes, &arr_len, &huge_ok);
    if (!arr) {
        fprintf(stderr, "score_bench: mmap of %llu bytes for the limit failed: %s\n",
                (unsigned long long)st.table_bytes, strerror(errno));
        return 1;
    }
    enum { LIMIT_BATCH = 1024 };
    uint64_t idx[LIMIT_BATCH];
    double limit = mem_limit_best(arr, arr_len / 8, LIMIT_READS, (uint64_t)seed, idx,
                                  LIMIT_BATCH, NULL);
    double ours = 0;
    const uint32_t vb = value_bytes(model_store(m));
    for (size_t i = 0; i < 4; i++) {
        double r = mem_limit_id_reads(arr, arr_len / 8, LIMIT_READS, (uint64_t)seed, idx,
                                      LIMIT_BATCH, mem_limit_dists[i], vb);
        ours = r > ours ? r : ours;
    }
    munmap(arr, arr_len);
    const double floor_any = (double)total / limit * 1e6, floor_ours = (double)total / ours * 1e6;
    printf("limit_reads_per_s: %.0f (one core, %.2f GB array%s)\n", limit,
           (double)arr_len / 1e9, huge_ok ? "" : ", 4 KiB pages");
    printf("floor, any store (1 random line per id): %zu ids / limit = %.0f us\n", total,
           floor_any);
    char what[64];
    if (vb)
        snprintf(what, sizeof what, "a bucket line + a %u-byte value", vb);
    else
        snprintf(what, sizeof what, "a bucket line, the value in it");
    printf("floor, this store's reads (%s per id): %.0f us; lookup alone p50 is %.2fx it\n", what,
           floor_ours, look_p50 / floor_ours);
    model_scratch_destroy(sc);
    model_destroy(m);
    free(ids);
    free(vals);
    free(blocks);
    free(scores);
    free(wbuf);
    free(lat);
    free(look);
    return 0;
}
