/*
 * workload.h — the requests tlgen sends, generated before the run.
 *
 * A pool of `pool` PREDICT frames is encoded once (codec_encode_predict,
 * request id 0) and cycled; the sender copies a frame into a connection's
 * output buffer and patches its request id into the header
 * (workload_patch_id), so generating load costs a memcpy per request and
 * never limits the rate.
 *
 * Ids are tlsynth model's synthetic keys, key(i) = mix64(i + seed * PHI), for
 * i in [0, key_space) drawn uniformly or, with zipf > 0, from a Zipf law
 * P(i) ~ 1 / (i + 1)^zipf (i = 0 hottest).  With the model's --seed every id
 * is a key the model knows.  Duplicates inside a block are removed
 * (codec_sort_unique), so with a steep Zipf a block carries fewer ids.
 *
 * THREAD SAFETY: built once by the main thread; read-only afterwards.
 */
#ifndef TL_LOADGEN_WORKLOAD_H
#define TL_LOADGEN_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct workload_opts {
    const char *model;  /* model name (1..64 of [A-Za-z0-9_.-]) */
    uint32_t items;     /* items per request, 1..CODEC_MAX_ITEMS */
    uint32_t shared;    /* ids in the shared block */
    uint32_t per_item;  /* ids per item block */
    uint64_t key_space; /* ids are key(i), i in [0, key_space) */
    double zipf;        /* Zipf exponent over the key space; 0 = uniform */
    uint64_t seed;      /* the model's tlsynth model --seed */
    unsigned pool;      /* distinct requests to cycle */
} workload_opts_t;

typedef struct workload {
    uint8_t **frames;    /* pool frames, request id 0 (owned) */
    size_t *lens;        /* their sizes in bytes */
    unsigned n;          /* frames in the pool */
    uint32_t items;      /* items per request (every response must echo it) */
    size_t max_len;      /* the largest frame */
    double avg_len;      /* mean frame size */
    double avg_features; /* mean ids per request after dedup */
} workload_t;

/* Builds the pool.  Returns 0, or -EINVAL with why filled (a request the
 * codec refuses: bad name, too many features), or -ENOMEM.  Setup only:
 * allocates, takes O(pool * features * log) time. */
int workload_build(workload_t *w, const workload_opts_t *o, char *why, size_t why_len);
void workload_free(workload_t *w);

/* Writes request id `id` into the header of the frame at f (offset 8, LE). */
static inline void workload_patch_id(uint8_t *f, uint64_t id)
{
    for (int i = 0; i < 8; i++)
        f[8 + i] = (uint8_t)(id >> (8 * i));
}

#endif /* TL_LOADGEN_WORKLOAD_H */
