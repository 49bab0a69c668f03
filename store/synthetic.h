/*
 * synthetic.h — the synthetic key space shared by the tools that make models
 * and the ones that load them: tlsynth makes key i of a synthetic model with
 * seed s as store_synthetic_key(i, s), a bijection of i (so keys are
 * distinct); load generators, benchmarks and tests draw ids the same way to
 * hit keys the model holds.  store_mix64 is splitmix64's finaliser;
 * store_splitmix64 steps a splitmix64 generator.  Pure functions, no state:
 * safe from any thread.
 *
 * Not part of the store's interface (store.h): the store never calls these.
 */
#ifndef TL_STORE_SYNTHETIC_H
#define TL_STORE_SYNTHETIC_H

#include <stdint.h>

#define STORE_PHI UINT64_C(0x9e3779b97f4a7c15) /* 2^64 / golden ratio, odd */

static inline uint64_t store_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static inline uint64_t store_splitmix64(uint64_t *state)
{
    *state += STORE_PHI;
    return store_mix64(*state);
}

static inline uint64_t store_synthetic_key(uint64_t i, uint64_t seed)
{
    return store_mix64(i + seed * STORE_PHI);
}

#endif /* TL_STORE_SYNTHETIC_H */
