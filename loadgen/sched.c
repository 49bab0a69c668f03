/*
 * sched.c — constant-rate and Poisson arrival schedules (see sched.h).
 *
 * Due times are kept as doubles (ns since boot, 2^53 ns = 104 days) so that
 * a constant schedule accumulates no rounding drift over long runs.
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

void sched_init(sched_t *s, double rate, unsigned thread, unsigned threads, uint64_t start_ns,
                bool poisson, uint64_t seed)
{
    s->gap_ns = 1e9 * (double)threads / rate;
    s->poisson = poisson;
    s->rng = seed * STORE_PHI + thread + 1;
    if (poisson)
        s->next_ns = (double)start_ns + exp_gap(s);
    else
        s->next_ns = (double)start_ns + 1e9 * (double)thread / rate;
}

uint64_t sched_next(sched_t *s)
{
    uint64_t due = (uint64_t)s->next_ns;
    s->next_ns += s->poisson ? exp_gap(s) : s->gap_ns;
    return due;
}
