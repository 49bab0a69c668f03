/*
 * test_rng.h — the tests' seeded random numbers (splitmix64): one stream per
 * test file, reseeded by assigning rng_state, so that a test's data is the
 * same on every run and machine.
 */
#ifndef TL_TEST_RNG_H
#define TL_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

#endif
