/*
 * sched.c — constant-rate and Poisson arrival schedules (see sched.h).
 *
 * A constant schedule computes request k's due time from k, rounded once to
 * the nearest ns, so nothing accumulates: R x D requests fall in D seconds,
 * not one more.  Poisson gaps accumulate in a double (ns since boot, 2^53
 * ns = 104 days).
 *
 * THREAD SAFETY: none needed; one sched_t per thread.
 */
#include "sched.h"

#include "store/synthetic.h"

#include <math.h>

/* An exponential gap of mean s->gap_ns: -ln(U) * mean, U uniform in (0, 1]. */
static double exp_gap(sched_t *s)
{
    double u = (double)((store_splitmix64(&s->rng) >> 11) + 1) * 0x1.0p-53;
    return -log(u) * s->gap_ns;
}

/* Constant: the due time of thread s's request k. */
static double constant_due(const sched_t *s, uint64_t k)
{
    double at = (double)(k * s->threads + s->thread) * 1e9 / s->rate;
    return (double)s->start_ns + nearbyint(at);
}

void sched_init(sched_t *s, double rate, unsigned thread, unsigned threads, uint64_t start_ns,
                bool poisson, uint64_t seed)
{
    *s = (sched_t){.gap_ns = 1e9 * (double)threads / rate, .poisson = poisson,
                   .rng = seed * STORE_PHI + thread + 1, .start_ns = start_ns, .rate = rate,
                   .thread = thread, .threads = threads};
    s->next_ns = poisson ? (double)start_ns + exp_gap(s) : constant_due(s, 0);
}

uint64_t sched_next(sched_t *s)
{
    uint64_t due = (uint64_t)s->next_ns;
    s->next_ns = s->poisson ? s->next_ns + exp_gap(s) : constant_due(s, ++s->k);
    return due;
}
