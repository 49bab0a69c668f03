/*
 * row_table.c — in-place parameter rows for a trainer (row_table.h).
 *
 * Index: 2^bits slots of {id, row + 1} (0 = empty), linear probing from
 * the top bits of a mixed id, grown by doubling before it is half full.
 * Rows: chunk c holds rows [c CHUNK, (c + 1) CHUNK); a chunk is calloc'd
 * when its first row is created, and the chunk pointer array doubles.
 */
#include "row_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The index stays at most half full, so rows < 2^(MAX_BITS - 1). */
#define ROW_TABLE_MAX_BITS 31

struct slot {
    uint64_t id;
    uint32_t row1; /* row number + 1; 0 = empty slot */
};

struct row_table {
    uint32_t row_floats;
    uint32_t bits; /* index slots = 2^bits */
    struct slot *index;
    uint32_t rows;    /* rows created */
    uint32_t nchunks; /* chunk pointers allocated */
    float **chunks;
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static inline uint32_t home(const train__row_table_t *t, uint64_t id)
{
    return (uint32_t)(mix(id) >> (64 - t->bits));
}

static inline float *row_at(const train__row_table_t *t, uint32_t r)
{
    return t->chunks[r / ROW_TABLE_CHUNK] + (size_t)(r % ROW_TABLE_CHUNK) * t->row_floats;
}

int train__row_table_create(uint32_t row_floats, uint64_t expected, train__row_table_t **out)
{
    if (row_floats == 0)
        return -EINVAL;
    uint32_t bits = 10;
    while (bits < ROW_TABLE_MAX_BITS && ((uint64_t)1 << bits) < 2 * expected + 2)
        bits++;
    train__row_table_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->row_floats = row_floats;
    t->bits = bits;
    t->index = calloc((size_t)1 << bits, sizeof *t->index);
    if (!t->index) {
        free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

void train__row_table_destroy(train__row_table_t *t)
{
    if (!t)
        return;
    for (uint32_t c = 0; c < t->nchunks; c++)
        free(t->chunks[c]);
    free(t->chunks);
    free(t->index);
    free(t);
}

uint64_t train__row_table_count(const train__row_table_t *t)
{
    return t->rows;
}

float *train__row_table_find(const train__row_table_t *t, uint64_t id)
{
    const uint32_t mask = (1u << t->bits) - 1;
    for (uint32_t h = home(t, id);; h = (h + 1) & mask) {
        const struct slot *s = &t->index[h];
        if (s->row1 == 0)
            return NULL;
        if (s->id == id)
            return row_at(t, s->row1 - 1);
    }
}

/* Doubles the index (rows stay where they are).  0 or -ENOMEM. */
static int grow_index(train__row_table_t *t)
{
    if (t->bits >= ROW_TABLE_MAX_BITS)
        return -ENOMEM;
    const uint32_t bits = t->bits + 1, mask = (1u << bits) - 1;
    struct slot *index = calloc((size_t)1 << bits, sizeof *index);
    if (!index)
        return -ENOMEM;
    const struct slot *old = t->index;
    for (size_t i = 0; i < ((size_t)1 << t->bits); i++) {
        if (old[i].row1 == 0)
            continue;
        uint32_t h = (uint32_t)(mix(old[i].id) >> (64 - bits));
        while (index[h].row1 != 0)
            h = (h + 1) & mask;
        index[h] = old[i];
    }
    free(t->index);
    t->index = index;
    t->bits = bits;
    return 0;
}

/* Makes row r addressable: its chunk exists.  0 or -ENOMEM. */
static int ensure_chunk(train__row_table_t *t, uint32_t r)
{
    const uint32_t c = r / ROW_TABLE_CHUNK;
    if (c < t->nchunks && t->chunks[c])
        return 0;
    if (c >= t->nchunks) {
        uint32_t n = t->nchunks ? 2 * t->nchunks : 16;
        float **chunks = realloc(t->chunks, (size_t)n * sizeof *chunks);
        if (!chunks)
            return -ENOMEM;
        memset(chunks + t->nchunks, 0, (size_t)(n - t->nchunks) * sizeof *chunks);
        t->chunks = chunks;
        t->nchunks = n;
    }
    t->chunks[c] = calloc((size_t)ROW_TABLE_CHUNK * t->row_floats, sizeof(float));
    return t->chunks[c] ? 0 : -ENOMEM;
}

float *train__row_table_upsert(train__row_table_t *t, uint64_t id, bool *created)
{
    uint32_t mask = (1u << t->bits) - 1;
    uint32_t h = home(t, id);
    for (;; h = (h + 1) & mask) {
        const struct slot *s = &t->index[h];
        if (s->row1 == 0)
            break;
        if (s->id == id) {
            *created = false;
            return row_at(t, s->row1 - 1);
        }
    }
    if (ensure_chunk(t, t->rows) != 0)
        return NULL;
    if ((uint64_t)(t->rows + 1) * 2 > ((uint64_t)1 << t->bits)) { /* keep it half empty */
        if (grow_index(t) != 0)
            return NULL;
        mask = (1u << t->bits) - 1;
        for (h = home(t, id); t->index[h].row1 != 0; h = (h + 1) & mask)
            ;
    }
    const uint32_t r = t->rows++;
    t->index[h] = (struct slot){.id = id, .row1 = r + 1};
    *created = true;
    return row_at(t, r);
}

int train__row_table_foreach(const train__row_table_t *t, train__row_table_visit_fn fn, void *ctx)
{
    for (size_t i = 0; i < ((size_t)1 << t->bits); i++) {
        const struct slot *s = &t->index[i];
        if (s->row1 == 0)
            continue;
        int rc = fn(ctx, s->id, row_at(t, s->row1 - 1));
        if (rc != 0)
            return rc;
    }
    return 0;
}
