/*
 * layout_bench.c — what-if: the fastest layout an FM k=16 lookup could have
 * on this machine, measured, to judge whether a store redesign could reach
 * the models issue's one-core scoring figure (FM p99 <= 1 ms).
 *
 *   layout_bench [--keys 20M] [--load 0.5] [--dtype f16|f32] [--requests 2000]
 *
 * Not the store: a throwaway open-addressing table whose every slot holds
 * the key AND its 17 values (w and v_1..16), one 64-byte line for fp16 and
 * an aligned 128-byte pair of lines for fp32, so a hit that lands in its
 * home slot reads one slot and nothing else (no bucket line, no separate
 * value).  Linear probing; --load sets keys/slots, so low loads approach
 * exactly one slot per id at the price of memory (printed).  It scores the
 * standard request (300 shared + 200 items x 200 ids, uniform random over
 * the keys) with FM fused into the probe loop (the sums accumulate straight
 * from the slot, no weights buffer), prefetching PREFETCH ids ahead, on one
 * core, and prints p50/p90/p99/max.  Then the same with ids from 2048 keys
 * (all in cache): the arithmetic alone.  Uses no project code but the mixer
 * of store/synthetic.h, writes no file; the values are arbitrary.  A
 * benchmark: it never fails on timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "store/synthetic.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define PREFETCH 24 /* ids ahead (16..48 measured alike) */
#define K 17        /* w + 16 factors */

enum { SHARED = 300, ITEMS = 200, PER_ITEM = 200, TOTAL = SHARED + ITEMS * PER_ITEM, DISTINCT = 64 };

typedef struct table {
    uint8_t *slots;
    uint64_t nslots;
    size_t slot_bytes; /* 64 (fp16) or 128 (fp32) */
    int f16;
} table_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline uint64_t key_of(uint64_t i)
{
    return store_mix64(i + 42) | 1; /* never 0, the empty slot's key */
}

static inline uint64_t home(const table_t *t, uint64_t key)
{
    return (uint64_t)(((unsigned __int128)store_mix64(key ^ 0x1234567) * t->nslots) >> 64);
}

static inline uint8_t *slot_at(const table_t *t, uint64_t i)
{
    return t->slots + i * t->slot_bytes;
}

static inline uint64_t slot_key(const uint8_t *p)
{
    uint64_t k;
    memcpy(&k, p, 8);
    return k;
}

/* Adds one slot's row to the FM sums: lin += w, S += v, Q += v*v. */
__attribute__((target("avx2,f16c,fma"))) static inline void add_row(const table_t *t, const uint8_t *p,
                                                                    float *S, float *Q, float *lin)
{
    __m256 a, b;
    if (t->f16) {
        const uint16_t *h = (const uint16_t *)(const void *)(p + 8);
        a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + 1)));
        b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + 9)));
        *lin += _cvtsh_ss(h[0]);
    } else {
        const float *f = (const float *)(const void *)(p + 8);
        a = _mm256_loadu_ps(f + 1);
        b = _mm256_loadu_ps(f + 9);
        *lin += f[0];
    }
    _mm256_storeu_ps(S, _mm256_add_ps(_mm256_loadu_ps(S), a));
    _mm256_storeu_ps(S + 8, _mm256_add_ps(_mm256_loadu_ps(S + 8), b));
    _mm256_storeu_ps(Q, _mm256_fmadd_ps(a, a, _mm256_loadu_ps(Q)));
    _mm256_storeu_ps(Q + 8, _mm256_fmadd_ps(b, b, _mm256_loadu_ps(Q + 8)));
}

__attribute__((target("f16c"))) static uint16_t to_half(float x)
{
    return (uint16_t)_cvtss_sh(x, 0);
}

static inline void prefetch_slot(const table_t *t, uint64_t i)
{
    const uint8_t *p = slot_at(t, i);
    __builtin_prefetch(p);
    if (t->slot_bytes > 64)
        __builtin_prefetch(p + 64);
}

/* Finds ids[j] from its home slot and adds its row (a missing id adds 0). */
__attribute__((target("avx2,f16c,fma"))) static inline void probe_add(const table_t *t, uint64_t id,
                                                                      uint64_t s, float *S, float *Q,
                                                                      float *lin)
{
    for (;;) {
        const uint8_t *p = slot_at(t, s);
        uint64_t k = slot_key(p);
        if (k == id) {
            add_row(t, p, S, Q, lin);
            return;
        }
        if (k == 0)
            return;
        s = s + 1 == t->nslots ? 0 : s + 1;
    }
}

/* FM scores of one standard request whose TOTAL ids lie back to back. */
__attribute__((target("avx2,f16c,fma"))) static void score(const table_t *t, const uint64_t *ids,
                                                           uint64_t *homes, float *scores)
{
    for (size_t j = 0; j < TOTAL; j++)
        homes[j] = home(t, ids[j]);
    for (size_t j = 0; j < PREFETCH; j++)
        prefetch_slot(t, homes[j]);
    float S0[16] = {0}, Q0[16] = {0}, lin0 = 0;
    size_t j = 0;
    for (; j < SHARED; j++) {
        prefetch_slot(t, homes[j + PREFETCH]);
        probe_add(t, ids[j], homes[j], S0, Q0, &lin0);
    }
    for (int i = 0; i < ITEMS; i++) {
        float S[16], Q[16], lin = lin0;
        memcpy(S, S0, sizeof S);
        memcpy(Q, Q0, sizeof Q);
        for (int e = 0; e < PER_ITEM; e++, j++) {
            if (j + PREFETCH < TOTAL)
                prefetch_slot(t, homes[j + PREFETCH]);
            probe_add(t, ids[j], homes[j], S, Q, &lin);
        }
        float pair = 0;
        for (int f = 0; f < 16; f++)
            pair += S[f] * S[f] - Q[f];
        scores[i] = 1.0f / (1.0f + expf(-(lin + 0.5f * pair)));
    }
}

static void fail(const char *what)
{
    fprintf(stderr, "layout_bench: %s\n", what);
    exit(2);
}

static double run(const table_t *t, const uint64_t *ids, long requests, double *lat, uint64_t *homes)
{
    float scores[ITEMS], sink = 0;
    for (long r = 0; r < requests; r++) {
        double a = now_us();
        score(t, ids + (size_t)(r % DISTINCT) * TOTAL, homes, scores);
        lat[r] = now_us() - a;
        sink += scores[r % ITEMS];
    }
    qsort(lat, (size_t)requests, sizeof *lat, cmp_d);
    return sink;
}

static double pct(const double *s, long n, double p)
{
    long i = (long)(p * (double)(n - 1) + 0.5);
    return s[i < n ? i : n - 1];
}

/* F16C from CPUID leaf 1 (ECX bit 29): clang-14's __builtin_cpu_supports
 * does not know "f16c". */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

int main(int argc, char **argv)
{
    uint64_t nkeys = 20000000;
    double load = 0.5;
    long requests = 2000;
    table_t t = {.f16 = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            fail("usage: layout_bench [--keys 20M] [--load 0.5] [--dtype f16|f32] [--requests 2000]");
        i++;
        char *end;
        if (!strcmp(a, "--keys")) {
            double x = strtod(v, &end);
            if (*end == 'M' || *end == 'k')
                x *= *end++ == 'M' ? 1e6 : 1e3;
            if (*end || end == v || !(x >= 2048 && x <= 4e9))
                fail("--keys: a count in 2048..4G (suffix k or M)");
            nkeys = (uint64_t)x;
        } else if (!strcmp(a, "--load")) {
            load = strtod(v, &end);
            if (*end || !(load > 0.05 && load <= 0.95))
                fail("--load: a fraction in (0.05, 0.95]");
        } else if (!strcmp(a, "--dtype")) {
            if (strcmp(v, "f16") && strcmp(v, "f32"))
                fail("--dtype: f16 or f32");
            t.f16 = !strcmp(v, "f16");
        } else if (!strcmp(a, "--requests")) {
            requests = strtol(v, &end, 10);
            if (*end || requests < 1 || requests > 1000000)
                fail("--requests: a number in 1..1000000");
        } else {
            fail("unknown option (see the header of layout_bench.c)");
        }
    }
    if (!__builtin_cpu_supports("avx2") || !has_f16c() || !__builtin_cpu_supports("fma"))
        fail("needs AVX2, F16C and FMA");

    t.slot_bytes = t.f16 ? 64 : 128;
    t.nslots = (uint64_t)((double)nkeys / load);
    size_t bytes = (size_t)(t.nslots * t.slot_bytes);
    uint8_t *map = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        fail("mmap of the table failed");
    t.slots = (uint8_t *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    madvise(t.slots, bytes, MADV_HUGEPAGE);
    uint64_t extra = 0;
    for (uint64_t i = 0; i < nkeys; i++) {
        uint64_t key = key_of(i), s = home(&t, key);
        while (slot_key(slot_at(&t, s)) != 0) {
            s = s + 1 == t.nslots ? 0 : s + 1;
            extra++;
        }
        uint8_t *p = slot_at(&t, s);
        memcpy(p, &key, 8);
        for (int f = 0; f < K; f++) {
            float x = (float)((key >> (3 * f)) & 0x3ff) * 1e-4f;
            if (t.f16) {
                uint16_t h = to_half(x);
                memcpy(p + 8 + 2 * f, &h, 2);
            } else {
                memcpy(p + 8 + 4 * f, &x, 4);
            }
        }
    }
    printf("layout: %s, %d-byte slots, %llu keys in %llu slots (load %.2f, %.0f bytes/key), "
           "%.2f extra probes per insert\n",
           t.f16 ? "fp16" : "fp32", (int)t.slot_bytes, (unsigned long long)nkeys,
           (unsigned long long)t.nslots, load, (double)bytes / (double)nkeys,
           (double)extra / (double)nkeys);

    uint64_t *ids = malloc((size_t)DISTINCT * TOTAL * sizeof *ids);
    uint64_t *homes = malloc(TOTAL * sizeof *homes);
    double *lat = malloc((size_t)requests * sizeof *lat);
    if (!ids || !homes || !lat)
        fail("out of memory");
    uint64_t rng = 12345;
    for (size_t j = 0; j < (size_t)DISTINCT * TOTAL; j++)
        ids[j] = key_of(store_splitmix64(&rng) % nkeys);
    double sink = run(&t, ids, requests, lat, homes);
    printf("FM k=16 fused, %d ids uniform over %llu keys, 1 thread: us p50 %.0f p90 %.0f p99 %.0f "
           "max %.0f\n",
           TOTAL, (unsigned long long)nkeys, pct(lat, requests, .5), pct(lat, requests, .9),
           pct(lat, requests, .99), lat[requests - 1]);
    for (size_t j = 0; j < (size_t)DISTINCT * TOTAL; j++)
        ids[j] = key_of(store_splitmix64(&rng) % 2048);
    sink += run(&t, ids, requests, lat, homes);
    printf("hot (ids from 2048 keys, in cache): us p50 %.0f p99 %.0f%s\n", pct(lat, requests, .5),
           pct(lat, requests, .99), sink == 12345.678f ? "!" : "");
    munmap(map, bytes + HUGE_PAGE);
    free(ids);
    free(homes);
    free(lat);
    return 0;
}
