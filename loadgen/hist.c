/*
 * hist.c — log-linear latency histogram (HdrHistogram's layout, 3
 * significant digits, unit 1 ns, range 1 ns .. 60 s).
 *
 * LAYOUT: values below 2048 have a bucket each (width 1 ns).  Above, every
 * power of two [2^k, 2^(k+1)) for k >= 11 is split into 1024 equal
 * sub-buckets of width 2^(k-10), so the width is never more than 1/1024 of
 * the value.  The counts array is "bucket 0" (2048 slots) followed by the
 * upper halves of buckets 1..25:
 *
 *   index:   0 ........ 2047 | 2048 ...... 3071 | 3072 ...... 4095 | ...
 *   values:  0 ........ 2047 | 2048 .. 4094 /2  | 4096 .. 8188 /4  | ...
 *
 *   bucket  = 63 - clz(v | 2047) - 10      (0 for v < 2048)
 *   sub     = v >> bucket                  (1024..2047 above bucket 0)
 *   index   = ((bucket + 1) << 10) + sub - 1024
 *
 * 26 buckets reach 2047 << 25 ns = 68.7 s > 60 s: 27,648 counters, 216 KiB.
 *
 * THREAD SAFETY: none (see hist.h).
 */
#include "hist.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB_HALF_MAG 10                     /* log2(sub-bucket half count) */
#define SUB_HALF (1u << SUB_HALF_MAG)       /* 1024 */
#define SUB_MASK ((2u << SUB_HALF_MAG) - 1) /* 2047 */
#define BUCKETS 26u
#define NCOUNTS ((BUCKETS + 1) * SUB_HALF)

_Static_assert((2047ull << (BUCKETS - 1)) >= HIST_MAX_NS, "buckets do not reach HIST_MAX_NS");

static uint32_t index_of(uint64_t v)
{
    unsigned bucket = 63 - (unsigned)__builtin_clzll(v | SUB_MASK) - SUB_HALF_MAG;
    uint64_t sub = v >> bucket;
    return ((bucket + 1) << SUB_HALF_MAG) + (uint32_t)sub - SUB_HALF;
}

/* The lowest value of bucket index i, and its width. */
static uint64_t lowest_of(uint32_t i, uint64_t *width)
{
    int bucket = (int)(i >> SUB_HALF_MAG) - 1;
    uint64_t sub = (i & (SUB_HALF - 1)) + SUB_HALF;
    if (bucket < 0) {
        sub -= SUB_HALF;
        bucket = 0;
    }
    *width = 1ull << bucket;
    return sub << bucket;
}

static uint64_t highest_of(uint32_t i)
{
    uint64_t w, lo = lowest_of(i, &w);
    return lo + w - 1;
}

static double mid_of(uint32_t i)
{
    uint64_t w, lo = lowest_of(i, &w);
    return (double)lo + (double)(w - 1) / 2.0;
}

__attribute__((cold)) void hist_init(hist_t *h)
{
    memset(h, 0, sizeof *h);
    h->counts = calloc(NCOUNTS, sizeof *h->counts);
    if (!h->counts) {
        fputs("tlgen: out of memory for a histogram\n", stderr);
        abort();
    }
    h->ncounts = NCOUNTS;
    h->min = UINT64_MAX;
}

void hist_free(hist_t *h)
{
    free(h->counts);
    h->counts = NULL;
}

void hist_record(hist_t *h, uint64_t ns)
{
    if (ns == 0)
        ns = 1;
    if (__builtin_expect(ns > HIST_MAX_NS, 0)) {
        ns = HIST_MAX_NS;
        h->saturated++;
    }
    h->counts[index_of(ns)]++;
    h->total++;
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
}

void hist_merge(hist_t *dst, const hist_t *src)
{
    for (uint32_t i = 0; i < NCOUNTS; i++)
        dst->counts[i] += src->counts[i];
    dst->total += src->total;
    dst->saturated += src->saturated;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

/* The rank (1-based) of the value at percentile pct. */
static uint64_t rank_of(const hist_t *h, double pct)
{
    if (pct > 100.0)
        pct = 100.0;
    double r = ceil(pct / 100.0 * (double)h->total);
    uint64_t rank = r < 1.0 ? 1 : (uint64_t)r;
    return rank > h->total ? h->total : rank;
}

uint64_t hist_percentile(const hist_t *h, double pct)
{
    if (h->total == 0)
        return 0;
    uint64_t rank = rank_of(h, pct), seen = 0;
    for (uint32_t i = 0; i < NCOUNTS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = highest_of(i);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

double hist_mean(const hist_t *h)
{
    if (h->total == 0)
        return 0.0;
    double sum = 0.0;
    for (uint32_t i = 0; i < NCOUNTS; i++)
        if (h->counts[i])
            sum += mid_of(i) * (double)h->counts[i];
    return sum / (double)h->total;
}

double hist_stddev(const hist_t *h)
{
    if (h->total == 0)
        return 0.0;
    double mean = hist_mean(h), sq = 0.0;
    for (uint32_t i = 0; i < NCOUNTS; i++)
        if (h->counts[i]) {
            double d = mid_of(i) - mean;
            sq += d * d * (double)h->counts[i];
        }
    return sqrt(sq / (double)h->total);
}

/*
 * The spectrum walks percentile levels the way HdrHistogram's percentile
 * iterator does: 5 ticks per half distance, i.e. the step halves each time
 * the remaining distance to 100% halves (0, 10, 20, .. 50, 55, .. 75,
 * 77.5, ..), reporting each level's value and the count up to its bucket,
 * until the last bucket; then one line at 100%.
 */
int hist_write_spectrum(const hist_t *h, FILE *f)
{
    const double scale = 1000.0; /* ns -> us */
    fprintf(f, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    if (h->total > 0) {
        uint32_t i = 0;
        uint64_t seen = h->counts[0];
        double level = 0.0;
        for (;;) {
            uint64_t rank = rank_of(h, level);
            while (seen < rank && i + 1 < NCOUNTS)
                seen += h->counts[++i];
            uint64_t v = highest_of(i);
            if (v > h->max)
                v = h->max;
            fprintf(f, "%12.3f %2.12f %10llu %14.2f\n", (double)v / scale, level / 100.0,
                    (unsigned long long)seen, 1.0 / (1.0 - level / 100.0));
            if (seen >= h->total)
                break; /* the last bucket is reported once, then the 100% line */
            double ticks = 5.0 * pow(2.0, floor(log2(100.0 / (100.0 - level))) + 1.0);
            level += 100.0 / ticks;
        }
        fprintf(f, "%12.3f %2.12f %10llu\n", (double)h->max / scale, 1.0,
                (unsigned long long)h->total);
    }
    fprintf(f, "#[Mean    = %12.3f, StdDeviation   = %12.3f]\n", hist_mean(h) / scale,
            hist_stddev(h) / scale);
    fprintf(f, "#[Max     = %12.3f, Total count    = %12llu]\n",
            (h->total ? (double)h->max : 0.0) / scale, (unsigned long long)h->total);
    fprintf(f, "#[Buckets = %12u, SubBuckets     = %12u]\n", BUCKETS, 2 * SUB_HALF);
    return ferror(f) ? -EIO : 0;
}
