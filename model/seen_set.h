/*
 * seen_set.h — the trainers' "was this id already stepped in this sample?"
 * set: open addressing over 2^bits slots, each with the generation that
 * wrote it, so that starting a new sample is one increment (no clearing)
 * and the slots are wiped only when the 32-bit generation wraps.  A sample
 * that names an id twice must see its own first update (train.h); every
 * store-backed trainer (train_lr.c, train_fm.c, train_dnn.c) uses this
 * through train__work_t (train_impl.h).
 * Internal to model/.  Not thread-safe: one set per trainer.
 */
#ifndef TL_MODEL_SEEN_SET_H
#define TL_MODEL_SEEN_SET_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen_set {
    uint64_t *ids;    /* 2^bits slots ... */
    uint32_t *stamp;  /* ... and the generation that wrote each */
    uint32_t bits;
    uint32_t gen;     /* the current sample's generation */
} seen_set_t;

/* Sizes s for samples of up to n ids (at most half full).  0, or -ENOMEM
 * with s unchanged and still usable.  Allocates only when it must grow. */
static inline int seen_set_reserve(seen_set_t *s, uint32_t n)
{
    uint32_t bits = 7;
    while ((1u << bits) < 2 * (uint64_t)n)
        bits++;
    if (s->ids && bits <= s->bits)
        return 0;
    uint64_t *ids = malloc(((size_t)1 << bits) * sizeof *ids);
    uint32_t *stamp = calloc((size_t)1 << bits, sizeof *stamp);
    if (!ids || !stamp) {
        free(ids);
        free(stamp);
        return -ENOMEM;
    }
    free(s->ids);
    free(s->stamp);
    *s = (seen_set_t){.ids = ids, .stamp = stamp, .bits = bits, .gen = 0};
    return 0;
}

static inline void seen_set_free(seen_set_t *s)
{
    free(s->ids);
    free(s->stamp);
    *s = (seen_set_t){0};
}

/* Starts a new sample: every id counts as unseen again. */
static inline void seen_set_next(seen_set_t *s)
{
    if (++s->gen == 0) { /* stamps wrapped: clear once every 2^32 samples */
        memset(s->stamp, 0, ((size_t)1 << s->bits) * sizeof *s->stamp);
        s->gen = 1;
    }
}

/* Adds id to the current sample's set: 1 when it was already there. */
static inline int seen_set_add(seen_set_t *s, uint64_t id)
{
    uint32_t mask = (1u << s->bits) - 1;
    uint32_t h = (uint32_t)((id * UINT64_C(0x9e3779b97f4a7c15)) >> (64 - s->bits));
    for (;; h = (h + 1) & mask) {
        if (s->stamp[h] != s->gen) {
            s->stamp[h] = s->gen;
            s->ids[h] = id;
            return 0;
        }
        if (s->ids[h] == id)
            return 1;
    }
}

#endif /* TL_MODEL_SEEN_SET_H */
