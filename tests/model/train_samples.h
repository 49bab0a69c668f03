/*
 * train_samples.h — the small synthetic samples the live-trainer tests
 * (test_train_live.c, test_train_state.c) learn: n samples of nf features
 * over `fields` fields (an id's field in its top byte, its value among 30
 * per field), values in (0, 1], deterministic for a seed.  With fresh, the
 * last feature of each sample is an id from new_base up (none of them in a
 * model trained on samples made without it).  A label is 1 when the first
 * id's low bits are 0, and with noise also for about a fifth of the rest.
 * Header-only: each test includes it once.
 */
#ifndef TL_TESTS_TRAIN_SAMPLES_H
#define TL_TESTS_TRAIN_SAMPLES_H

#include <stdbool.h>
#include <stdint.h>

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ids and vals: n x nf, row by row; labels: n. */
static void make_samples(uint64_t *ids, float *vals, float *labels, int n, int nf, int fields,
                         uint64_t new_base, uint64_t seed, bool fresh, bool noise)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < nf; j++) {
            uint64_t h = rnd(&s) % 30 + 1 + (fresh && j == nf - 1 ? new_base : 0);
            ids[(size_t)i * nf + j] = ((uint64_t)(j % fields) << 56) | h;
            vals[(size_t)i * nf + j] = (float)(rnd(&s) % 1000 + 1) / 1000.0f;
        }
        labels[i] = (ids[(size_t)i * nf] & 3) == 0 || (noise && rnd(&s) % 5 == 0) ? 1.0f : 0.0f;
    }
}

#endif /* TL_TESTS_TRAIN_SAMPLES_H */
