/*
 * interval.h — tlgen's per-interval statistics (--interval-ms): the
 * measured window cut into fixed intervals by each request's DUE time, each
 * with its own coarse latency histogram, request and error counts and the
 * model versions its answers carried.  A script merges intervals into any
 * window it likes (loadgen/reload_bench.sh: before / during / after a model
 * reload) by adding bucket counts, never by averaging percentiles.
 *
 * BUCKETS: log-linear with 64 sub-buckets per power of two (every value is
 * kept within 1/64 = 1.6%): index i < 64 holds exactly i ns; above,
 * e = i / 64 + 5, s = i % 64 holds [(64 + s) << (e - 6), (65 + s) << (e - 6)).
 * IVAL_BUCKETS indices cover 0 .. 2^36 ns (68 s; tlgen clamps at 60 s).
 * Coarser than hist.h (2048 sub-buckets) so that one interval is 8 KB, not
 * 220 KB: a 10-minute run at 100 ms is 6,000 intervals.
 *
 * FILE (ivals_write): JSON lines.  The first is the header,
 *   {"interval_ms":100,"origin_unix_ms":...,"intervals":N,"bucket_sub":64,
 *    "buckets":1984}
 * then one line per interval that had a request due in it,
 *   {"i":3,"start_unix_ms":...,"scheduled":..,"ok":..,"errors":..,
 *    "versions":{"7":123,"8":4},"b":[[index,count],...]}
 * (errors: every request due in it that did not get a well-formed answer:
 * ERROR frames, timeouts, connection failures, unsent, backlogged, skipped,
 * bad responses; the same sum as tlgen's "errors" except a response stream
 * it cannot frame, which its total counts once more beside the connection
 * errors of the requests in flight; versions: answers per version, at most IVAL_NVER distinct
 * ones per interval plus "other"), and last
 *   {"first_seen":{"7":unix_ms,...}}: the first answer carrying each version
 * (by the time it was read; at most IVAL_NFIRST versions).  unix_ms are
 * CLOCK_REALTIME milliseconds (float) mapped from tlgen's monotonic clock
 * once at write time, so a script can line them up with its own clock.
 *
 * THREAD SAFETY: an ivals_t belongs to one driver thread until joined; merge
 * and write afterwards.
 */
#ifndef TL_LOADGEN_INTERVAL_H
#define TL_LOADGEN_INTERVAL_H

#include <stdint.h>
#include <stdio.h>

#define IVAL_SUB 64       /* sub-buckets per power of two */
#define IVAL_BUCKETS 1984 /* indices 0 .. (36 - 5) * 64 - 1 */
#define IVAL_NVER 4       /* distinct versions counted per interval */
#define IVAL_NFIRST 64    /* versions whose first answer is remembered */

typedef struct ival {
    uint64_t scheduled;        /* requests due in the interval */
    uint64_t ok;               /* well-formed answers */
    uint64_t errors;           /* everything else (see the header) */
    uint64_t ver[IVAL_NVER];   /* versions seen, in first-seen order */
    uint64_t ver_n[IVAL_NVER]; /* answers per ver[] entry */
    uint64_t ver_other;        /* answers with a version beyond the IVAL_NVER first */
    uint32_t nver;             /* used entries of ver[] */
} ival_t;

typedef struct ivals {
    uint64_t interval_ns;            /* > 0 */
    uint32_t n;                      /* intervals */
    ival_t *iv;                      /* n (owned) */
    uint32_t *b;                     /* n * IVAL_BUCKETS latency counts (owned) */
    uint64_t first_ver[IVAL_NFIRST]; /* versions seen, any order */
    uint64_t first_rx[IVAL_NFIRST];  /* monotonic ns of the first answer with first_ver[i] */
    uint32_t nfirst;
} ivals_t;

/* Sets up n intervals of interval_ns each (both > 0).  Returns 0 or
 * -ENOMEM (nothing allocated); -EINVAL for zero arguments.  Free with
 * ivals_free (safe on a zeroed or failed ivals_t). */
int ivals_init(ivals_t *v, uint64_t interval_ns, uint32_t n);
void ivals_free(ivals_t *v);

/* The bucket of a latency, and the highest value a bucket holds (ns). */
uint32_t ivals_bucket(uint64_t ns);
uint64_t ivals_bucket_upper(uint32_t index);

/* Accounting by offset = due time - the window's start (ns); offsets past
 * the last interval count in the last one (a due time is always inside the
 * window, so only rounding lands there).  O(1), no allocation. */
void ivals_scheduled(ivals_t *v, uint64_t offset);
void ivals_error(ivals_t *v, uint64_t offset);
/* A well-formed answer: its latency (ns), the version it carried and the
 * monotonic time it was read. */
void ivals_ok(ivals_t *v, uint64_t offset, uint64_t latency_ns, uint64_t version, uint64_t rx_ns);

/* Adds src into dst (same interval_ns and n, or -EINVAL and nothing
 * changed).  Returns 0. */
int ivals_merge(ivals_t *dst, const ivals_t *src);

/* Writes v as the JSON lines above; origin_mono_ns is the monotonic time of
 * the window's start.  Returns 0 or -errno from the stream. */
int ivals_write(const ivals_t *v, uint64_t origin_mono_ns, FILE *f);

#endif /* TL_LOADGEN_INTERVAL_H */
