/*
 * sched.h — arrival schedules for tlgen: when each request is due,
 * independent of when responses come back (open loop).
 *
 * A run's offered rate R is split over T threads.  Constant: thread t's
 * k-th request is due at start + (k*T + t) / R, so the threads interleave
 * into one evenly spaced stream.  Poisson: each thread draws exponential
 * gaps of mean T / R; the superposition of T Poisson processes of rate R/T
 * is a Poisson process of rate R.
 *
 * THREAD SAFETY: a sched_t belongs to one thread.
 */
#ifndef TL_LOADGEN_SCHED_H
#define TL_LOADGEN_SCHED_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sched {
    double next_ns; /* due time of the next request (absolute, CLOCK_MONOTONIC ns) */
    double gap_ns;  /* Poisson: the mean gap, T / R seconds in ns */
    bool poisson;   /* exponential gaps instead of constant ones */
    uint64_t rng;   /* Poisson: splitmix64 state */
    /* constant: request k is due at start_ns + (k*T + t) * 1e9 / R, rounded once */
    uint64_t start_ns, k;
    double rate;
    unsigned thread, threads;
} sched_t;

/* Sets up thread `thread` of `threads` at total `rate` requests/s from
 * start_ns.  seed makes Poisson gaps reproducible. */
void sched_init(sched_t *s, double rate, unsigned thread, unsigned threads, uint64_t start_ns,
                bool poisson, uint64_t seed);

/* The due time of the next request (ns), without consuming it. */
static inline uint64_t sched_peek(const sched_t *s)
{
    return (uint64_t)s->next_ns;
}

/* Consumes the next request's slot; returns its due time (ns). */
uint64_t sched_next(sched_t *s);

#endif /* TL_LOADGEN_SCHED_H */
