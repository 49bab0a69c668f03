/*
 * id_index.c — the batch trainers' id index (id_index.h): its allocation.
 *
 * THREAD SAFETY: an index belongs to one trainer's thread.
 */
#include "id_index.h"

#include <errno.h>
#include <stdlib.h>

void train__id_index_free(id_index_t *m)
{
    free(m->ids);
    free(m->idx);
    free(m->stamp);
    *m = (id_index_t){0};
}

int train__id_index_reserve(id_index_t *m, uint32_t n)
{
    uint32_t bits = 6;
    while ((1u << bits) < 2 * (uint64_t)n)
        bits++;
    if (m->ids && bits <= m->bits)
        return 0;
    size_t slots = (size_t)1 << bits;
    uint64_t *ids = malloc(slots * sizeof *ids);
    uint32_t *idx = malloc(slots * sizeof *idx), *stamp = calloc(slots, sizeof *stamp);
    if (!ids || !idx || !stamp) {
        free(ids);
        free(idx);
        free(stamp);
        return -ENOMEM;
    }
    train__id_index_free(m);
    *m = (id_index_t){.ids = ids, .idx = idx, .stamp = stamp, .bits = bits, .gen = 0};
    return 0;
}
