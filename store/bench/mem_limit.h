/*
 * mem_limit.h — the machine's random-read limit, for the benchmarks.
 *
 * How many independent random 8-byte reads of an array as large as a table
 * one core completes per second, each index computed as cheaply as a lookup
 * key's hash and the reads prefetched ahead.  A store lookup of a random key
 * reads at least one cache line, so this rate is the ceiling of any lookup
 * rate on this machine (store_bench: lookup_over_limit) and ids / rate is
 * the least time any store can spend on one request's ids (score_bench).
 *
 * THREAD SAFETY: each call uses only its arguments; the array is read-only
 * once mapped.
 */
#ifndef TL_MEM_LIMIT_H
#define TL_MEM_LIMIT_H

#include <stddef.h>
#include <stdint.h>

/* An anonymous mapping of at least `bytes` (rounded up to 2 MiB), 2 MiB
 * aligned, MADV_HUGEPAGE, every word written, so that reads find it
 * resident.  Sets *len to the mapped length (for munmap).  NULL with errno
 * set when mmap fails; *huge_ok is 0 when madvise(MADV_HUGEPAGE) failed. */
uint64_t *mem_limit_map(uint64_t bytes, size_t *len, int *huge_ok);

/* `reads` random reads of arr[0..words), in batches of `batch` indices
 * (idx holds `batch` of them), each batch's reads prefetched `dist` ahead.
 * Returns reads per second of the timed loops (index drawing included);
 * 0 when batch or words is 0. */
double mem_limit_reads(const uint64_t *arr, uint64_t words, uint64_t reads, uint64_t seed,
                       uint64_t *idx, size_t batch, size_t dist);

/* The best of mem_limit_reads over prefetch distances 16, 32, 64 and 128;
 * per_dist (4 doubles, or NULL) gets each distance's rate. */
double mem_limit_best(const uint64_t *arr, uint64_t words, uint64_t reads, uint64_t seed,
                      uint64_t *idx, size_t batch, double per_dist[4]);

extern const size_t mem_limit_dists[4]; /* 16, 32, 64, 128 */

/* The PRNG step and range reduction that store_bench draws its lookup keys
 * with (then hashed with store_mix64); the limit loops draw their indices
 * the same way, so that keys and indices cost alike. */
static inline uint64_t mem_limit_rand(uint64_t *state) /* wyrand: an add, a 128-bit multiply */
{
    *state += 0xa0761d6478bd642full;
    unsigned __int128 t = (unsigned __int128)*state * (*state ^ 0xe7037ed1a0b428dbull);
    return (uint64_t)(t >> 64) ^ (uint64_t)t;
}

static inline uint64_t mem_limit_below(uint64_t r, uint64_t n) /* uniform in [0, n): Lemire */
{
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

/* The memory work of `ids` hits in a store that keeps a bucket line and,
 * elsewhere, a value of value_bytes: per id one random 8-byte read (the
 * bucket) and every line of a random 4-byte-aligned run of value_bytes (the
 * value), all prefetched `dist` ids ahead.  Returns ids per second; adjacent
 * lines of one value cost what the machine makes them cost, which on this
 * hardware is less than as many random lines.  idx holds `batch` words
 * (batch / 2 ids); 0 when that is no id or the array is no longer than
 * a value. */
double mem_limit_id_reads(const uint64_t *arr, uint64_t words, uint64_t ids, uint64_t seed,
                          uint64_t *idx, size_t batch, size_t dist, uint32_t value_bytes);

#endif
