/*
 * id_index.h — id -> the index of its first position in a block, for the
 * batch trainers (train_lr_batch.c, train_fm_batch.c): open addressing with
 * generation stamps, so a new block costs one increment and no clearing;
 * at most half full.  Library-private.
 *
 * THREAD SAFETY: an index belongs to one trainer's thread.
 */
#ifndef TL_MODEL_ID_INDEX_H
#define TL_MODEL_ID_INDEX_H

#include <stdint.h>
#include <string.h>

typedef struct id_index {
    uint64_t *ids;
    uint32_t *idx, *stamp;
    uint32_t bits, gen;
} id_index_t;

/* Frees m's arrays and zeroes it. */
void train__id_index_free(id_index_t *m);

/* Room for n ids a block (grown, never shrunk; the ids stored are lost).
 * 0 or -ENOMEM (m unchanged). */
int train__id_index_reserve(id_index_t *m, uint32_t n);

/* Starts a new block: every id stored before is forgotten. */
static inline void train__id_index_next(id_index_t *m)
{
    if (++m->gen == 0) { /* stamps wrapped: clear once every 2^32 blocks */
        memset(m->stamp, 0, ((size_t)1 << m->bits) * sizeof *m->stamp);
        m->gen = 1;
    }
}

static inline uint32_t train__id_index_slot(const id_index_t *m, uint64_t id)
{
    const uint32_t mask = (1u << m->bits) - 1;
    uint32_t h = (uint32_t)((id * UINT64_C(0x9e3779b97f4a7c15)) >> (64 - m->bits));
    while (m->stamp[h] == m->gen && m->ids[h] != id)
        h = (h + 1) & mask;
    return h;
}

/* The position stored for id, after storing i when id was not there. */
static inline uint32_t train__id_index_add(id_index_t *m, uint64_t id, uint32_t i)
{
    uint32_t h = train__id_index_slot(m, id);
    if (m->stamp[h] != m->gen) {
        m->stamp[h] = m->gen;
        m->ids[h] = id;
        m->idx[h] = i;
    }
    return m->idx[h];
}

/* The position stored for id, or UINT32_MAX. */
static inline uint32_t train__id_index_find(const id_index_t *m, uint64_t id)
{
    uint32_t h = train__id_index_slot(m, id);
    return m->stamp[h] == m->gen ? m->idx[h] : UINT32_MAX;
}

#endif
