/*
 * mem_limit.c — the random-read limit (mem_limit.h): a huge-page array and
 * a prefetched loop of independent random reads over it.  Shared by
 * store_bench (lookup_over_limit) and score_bench (the floor of a request's
 * lookup), so both measure the limit the same way.
 */
#include "mem_limit.h"

#include "store/synthetic.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE_PAGE ((size_t)2 << 20)

const size_t mem_limit_dists[4] = {16, 32, 64, 128};

static volatile uint64_t g_sink; /* keeps the reads alive */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t *mem_limit_map(uint64_t bytes, size_t *len, int *huge_ok)
{
    size_t want = (size_t)((bytes + HUGE_PAGE - 1) & ~(uint64_t)(HUGE_PAGE - 1));
    if (want == 0)
        want = HUGE_PAGE;
    size_t span = want + HUGE_PAGE;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (p + span > a + want)
        munmap(a + want, (size_t)(p + span - (a + want)));
    *huge_ok = madvise(a, want, MADV_HUGEPAGE) == 0;
    uint64_t *w = (uint64_t *)a;
    for (size_t i = 0; i < want / 8; i++)
        w[i] = i * 0x9e3779b97f4a7c15ull;
    *len = want;
    return w;
}

double mem_limit_reads(const uint64_t *arr, uint64_t words, uint64_t reads, uint64_t seed,
                       uint64_t *idx, size_t batch, size_t dist)
{
    uint64_t rng = seed ^ 0x5eed0003u;
    uint64_t sum = 0;
    double spent = 0;
    if (batch == 0 || words == 0)
        return 0.0;

    for (uint64_t done = 0; done < reads;) {
        size_t n = reads - done < batch ? (size_t)(reads - done) : batch;
        double t0 = now_s();
        for (size_t i = 0; i < n; i++)
            idx[i] = mem_limit_below(store_mix64(seed + mem_limit_rand(&rng)), words);
        for (size_t i = 0; i < n && i < dist; i++)
            __builtin_prefetch(&arr[idx[i]]);
        for (size_t i = 0; i < n; i++) {
            if (i + dist < n)
                __builtin_prefetch(&arr[idx[i + dist]]);
            sum += arr[idx[i]];
        }
        spent += now_s() - t0;
        done += n;
    }
    g_sink += sum;
    return spent > 0 ? (double)reads / spent : 0.0;
}

double mem_limit_best(const uint64_t *arr, uint64_t words, uint64_t reads, uint64_t seed,
                      uint64_t *idx, size_t batch, double per_dist[4])
{
    double best = 0;
    for (size_t i = 0; i < 4; i++) {
        double r = mem_limit_reads(arr, words, reads, seed, idx, batch, mem_limit_dists[i]);
        if (per_dist)
            per_dist[i] = r;
        if (r > best)
            best = r;
    }
    return best;
}

double mem_limit_id_reads(const uint64_t *arr, uint64_t words, uint64_t ids, uint64_t seed,
                          uint64_t *idx, size_t batch, size_t dist, uint32_t value_bytes)
{
    const uint8_t *base = (const uint8_t *)arr;
    const uint64_t bytes = words * 8, vspan = (value_bytes + 3u) & ~3u;
    if (vspan >= bytes)
        return 0.0;
    const uint64_t vstarts = (bytes - vspan) / 4 + 1;
    uint64_t rng = seed ^ 0x5eed0004u;
    uint64_t sum = 0;
    double spent = 0;
    batch /= 2; /* idx holds a bucket word and a value start per id */
    if (batch == 0 || words == 0)
        return 0.0;

    for (uint64_t done = 0; done < ids;) {
        size_t n = ids - done < batch ? (size_t)(ids - done) : batch;
        double t0 = now_s();
        for (size_t i = 0; i < n; i++) {
            idx[2 * i] = mem_limit_below(store_mix64(seed + mem_limit_rand(&rng)), words);
            idx[2 * i + 1] = 4 * mem_limit_below(store_mix64(seed + mem_limit_rand(&rng)), vstarts);
        }
        for (size_t i = 0; i < n + dist; i++) {
            if (i < n) {
                __builtin_prefetch(&arr[idx[2 * i]]);
                uintptr_t a = (uintptr_t)(base + idx[2 * i + 1]);
                for (uintptr_t l = a & ~(uintptr_t)63; vspan && l < a + vspan; l += 64)
                    __builtin_prefetch((const void *)l);
            }
            if (i >= dist) {
                size_t j = i - dist;
                sum += arr[idx[2 * j]];
                uintptr_t a = (uintptr_t)(base + idx[2 * j + 1]);
                for (uintptr_t l = a & ~(uintptr_t)63; vspan && l < a + vspan; l += 64) {
                    uint32_t w;
                    memcpy(&w, (const void *)l, 4);
                    sum += w;
                }
            }
        }
        spent += now_s() - t0;
        done += n;
    }
    g_sink += sum;
    return spent > 0 ? (double)ids / spent : 0.0;
}
