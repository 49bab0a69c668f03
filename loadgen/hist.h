/*
 * hist.h — tlgen's latency histogram: log-linear buckets in the layout of
 * HdrHistogram (2048 linear sub-buckets per power of two, so every recorded
 * value keeps 3 significant digits: the bucket width is at most 1/1024 of
 * the value).  Values are nanoseconds from 1 ns to HIST_MAX_NS (60 s);
 * larger ones are clamped and counted as saturated.
 *
 * One histogram per thread and measure; the report merges them bucket by
 * bucket (hist_merge), never by averaging percentiles.
 *
 * THREAD SAFETY: none; a histogram belongs to one thread until it is
 * handed to the reporter after the thread has been joined.
 */
#ifndef TL_LOADGEN_HIST_H
#define TL_LOADGEN_HIST_H

#include <stdint.h>
#include <stdio.h>

#define HIST_MAX_NS 60000000000ull /* 60 s: the highest trackable value */

typedef struct hist {
    uint64_t *counts;   /* ncounts buckets (owned) */
    uint32_t ncounts;   /* buckets: (HIST_BUCKETS + 1) * 1024 */
    uint64_t total;     /* values recorded */
    uint64_t min, max;  /* exact extremes (ns); min = UINT64_MAX when empty */
    uint64_t saturated; /* values above HIST_MAX_NS, recorded as HIST_MAX_NS */
} hist_t;

/* Allocates the buckets (about 220 KB; aborts when out of memory: setup
 * only).  Free with hist_free. */
void hist_init(hist_t *h);
void hist_free(hist_t *h);

/* Records one value in ns (0 counts as 1 ns).  O(1), no allocation. */
void hist_record(hist_t *h, uint64_t ns);

/* Adds every count of src into dst (same layout by construction). */
void hist_merge(hist_t *dst, const hist_t *src);

/* The value (ns) at or below which `pct` percent (0..100) of the recorded
 * values fall: the highest value equivalent to the bucket holding the
 * ceil(pct/100 * total)-th value, but never above the exact max.  0 when
 * empty. */
uint64_t hist_percentile(const hist_t *h, double pct);

/* Mean and standard deviation (ns) from bucket midpoints. */
double hist_mean(const hist_t *h);
double hist_stddev(const hist_t *h);

/* Writes the percentile spectrum in HdrHistogram's text format (columns
 * Value, Percentile, TotalCount, 1/(1-Percentile); 5 ticks per half
 * distance; values in us as `scale` = 1000 ns) with the #[Mean ...] footer.
 * Returns 0 or -errno from the stream. */
int hist_write_spectrum(const hist_t *h, FILE *f);

#endif /* TL_LOADGEN_HIST_H */
