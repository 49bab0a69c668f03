/*
 * row_table.c — in-place parameter rows for a trainer (row_table.h).
 *
 * Index: 2^bits slots of {id, row + 1} (0 = empty), linear probing from
 * the top bits of a mixed id, grown by doubling before it is half full.
 * Rows: chunk c holds rows [c CHUNK, (c + 1) CHUNK), small rows spread
 * over its lines (place()); a chunk is calloc'd when its first row is
 * created.  The chunk directory is allocated once at
 * its largest (2^30 rows / CHUNK pointers, 2 MiB of address space whose
 * untouched pages cost nothing), so it never moves under a reader.
 *
 *   struct row_index   [ bits | prev | slot 0 | slot 1 | ... slot 2^bits-1 ]
 *   struct slot        [ id (8) | row1 (4) | pad ]      row1 = 0: empty
 *
 * PUBLICATION (upsert_mt against lock-free finders):
 *
 *   inserter (insert lock held)              finder (no lock)
 *   chunk = calloc; chunks[c] = chunk
 *   init(row)
 *   slot.id = id
 *   slot.row1 = r + 1  (release) ----------> row1 (acquire) != 0: reads id, row
 *
 * A finder that loads row1 and sees it non-zero therefore sees the id, the
 * chunk pointer and the initialised row.  Growth fills a new index
 * privately and publishes its pointer (release; finders load it with
 * acquire); the old one is kept on the retired list until quiesce, since a
 * finder may still be probing it.  A finder on an old index may miss an id
 * inserted after the swap: it then takes the insert lock, which looks again
 * in the current index, so an id never gets two rows.
 *
 * THREAD SAFETY: row_table.h.
 */
#include "row_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The index stays at most half full, so rows < 2^(MAX_BITS - 1). */
#define ROW_TABLE_MAX_BITS 31
#define ROW_TABLE_MAX_CHUNKS ((1u << (ROW_TABLE_MAX_BITS - 1)) / ROW_TABLE_CHUNK)

struct slot {
    uint64_t id;           /* valid once row1 != 0 */
    _Atomic uint32_t row1; /* row number + 1; 0 = empty slot */
};
_Static_assert(sizeof(struct slot) == 16, "slot grew");

struct row_index {
    uint32_t bits;          /* slots = 2^bits */
    struct row_index *prev; /* retired list (upsert_mt growth) */
    struct slot slots[];
};

struct row_table {
    uint32_t row_floats;
    uint32_t stripe_bits;              /* place(): 0 for rows of a line or more */
    _Atomic(struct row_index *) index; /* current index; swapped under lock */
    struct row_index *retired;         /* old indexes finders may still probe */
    uint32_t rows;                     /* rows created: under lock (or one thread) */
    float **chunks;                    /* ROW_TABLE_MAX_CHUNKS pointers, never moved */
    pthread_mutex_t lock;              /* upsert_mt's insert lock (misses only) */
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static inline uint32_t home(uint32_t bits, uint64_t id)
{
    return (uint32_t)(mix(id) >> (64 - bits));
}

/* Row r's place in its chunk.  Rows of less than a cache line are dealt
 * round-robin over 2^stripe_bits stripes of the chunk, each at least a
 * line long, so the first 512 rows made (256 of one float), which hold a
 * trainer's hottest ids (the first samples'), lie in different lines:
 * Hogwild threads then share a line when they step the same id, not when
 * they step neighbours.  Rows of a line or more keep their order. */
#define SPREAD_BITS_MAX 9u
#define CHUNK_BITS 12u
_Static_assert(ROW_TABLE_CHUNK == 1u << CHUNK_BITS, "CHUNK_BITS");

static uint32_t stripe_bits_of(uint32_t row_floats)
{
    const uint64_t lines = (uint64_t)ROW_TABLE_CHUNK * row_floats * sizeof(float) / 64;
    if (row_floats * sizeof(float) >= 64)
        return 0;
    uint32_t bits = 0;
    while (bits < SPREAD_BITS_MAX && (UINT64_C(2) << bits) <= lines)
        bits++;
    return bits;
}

static inline uint32_t place(const train__row_table_t *t, uint32_t r)
{
    const uint32_t i = r % ROW_TABLE_CHUNK, b = t->stripe_bits;
    return (i & ((1u << b) - 1)) << (CHUNK_BITS - b) | i >> b;
}

static inline float *row_at(const train__row_table_t *t, uint32_t r)
{
    return t->chunks[r / ROW_TABLE_CHUNK] + (size_t)place(t, r) * t->row_floats;
}

static struct row_index *index_new(uint32_t bits)
{
    struct row_index *x = calloc(1, sizeof *x + ((size_t)1 << bits) * sizeof(struct slot));
    if (x)
        x->bits = bits;
    return x;
}

static inline struct row_index *cur_index(const train__row_table_t *t)
{
    return atomic_load_explicit(&((train__row_table_t *)t)->index, memory_order_acquire);
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
    t->stripe_bits = stripe_bits_of(row_floats);
    struct row_index *x = index_new(bits);
    t->chunks = calloc(ROW_TABLE_MAX_CHUNKS, sizeof *t->chunks);
    if (!x || !t->chunks || pthread_mutex_init(&t->lock, NULL) != 0) {
        free(x);
        free(t->chunks);
        free(t);
        return -ENOMEM;
    }
    atomic_init(&t->index, x);
    *out = t;
    return 0;
}

void train__row_table_quiesce(train__row_table_t *t)
{
    while (t->retired) {
        struct row_index *p = t->retired->prev;
        free(t->retired);
        t->retired = p;
    }
}

void train__row_table_destroy(train__row_table_t *t)
{
    if (!t)
        return;
    for (uint32_t c = 0; c < ROW_TABLE_MAX_CHUNKS && t->chunks[c]; c++)
        free(t->chunks[c]);
    free(t->chunks);
    train__row_table_quiesce(t);
    free(atomic_load_explicit(&t->index, memory_order_relaxed));
    pthread_mutex_destroy(&t->lock);
    free(t);
}

uint64_t train__row_table_count(const train__row_table_t *t)
{
    return t->rows;
}

/* The slot holding id in x, or the empty slot where it would go. */
static inline struct slot *probe(struct row_index *x, uint64_t id, uint32_t *row1)
{
    const uint32_t mask = (1u << x->bits) - 1;
    for (uint32_t h = home(x->bits, id);; h = (h + 1) & mask) {
        struct slot *s = &x->slots[h];
        uint32_t r = atomic_load_explicit(&s->row1, memory_order_acquire);
        if (r == 0 || s->id == id) {
            *row1 = r;
            return s;
        }
    }
}

float *train__row_table_find(const train__row_table_t *t, uint64_t id)
{
    uint32_t r;
    probe(cur_index(t), id, &r);
    return r ? row_at(t, r - 1) : NULL;
}

/* A copy of the current index doubled (rows stay where they are), or NULL. */
static struct row_index *grown_index(const train__row_table_t *t)
{
    const struct row_index *old = cur_index(t);
    if (old->bits >= ROW_TABLE_MAX_BITS)
        return NULL;
    struct row_index *x = index_new(old->bits + 1);
    if (!x)
        return NULL;
    const uint32_t mask = (1u << x->bits) - 1;
    for (size_t i = 0; i < ((size_t)1 << old->bits); i++) {
        uint32_t r = atomic_load_explicit(&old->slots[i].row1, memory_order_relaxed);
        if (r == 0)
            continue;
        uint32_t h = home(x->bits, old->slots[i].id);
        while (atomic_load_explicit(&x->slots[h].row1, memory_order_relaxed) != 0)
            h = (h + 1) & mask;
        x->slots[h].id = old->slots[i].id;
        atomic_store_explicit(&x->slots[h].row1, r, memory_order_relaxed);
    }
    return x;
}

/* Makes row r addressable: its chunk exists.  0 or -ENOMEM. */
static int ensure_chunk(train__row_table_t *t, uint32_t r)
{
    const uint32_t c = r / ROW_TABLE_CHUNK;
    if (c >= ROW_TABLE_MAX_CHUNKS)
        return -ENOMEM;
    if (t->chunks[c])
        return 0;
    t->chunks[c] = calloc((size_t)ROW_TABLE_CHUNK * t->row_floats, sizeof(float));
    return t->chunks[c] ? 0 : -ENOMEM;
}

/* Adds id (absent; its empty slot in the current index is s) as a new row:
 * grows the index first when needed (retire: keep the old one for
 * finders), initialises the row, then publishes the slot.  NULL on
 * -ENOMEM. */
static float *insert(train__row_table_t *t, uint64_t id, struct slot *s, bool retire,
                     train__row_init_fn init, const void *ctx)
{
    if (ensure_chunk(t, t->rows) != 0)
        return NULL;
    struct row_index *x = cur_index(t);
    if ((uint64_t)(t->rows + 1) * 2 > ((uint64_t)1 << x->bits)) { /* keep it half empty */
        struct row_index *g = grown_index(t);
        if (!g)
            return NULL;
        atomic_store_explicit(&t->index, g, memory_order_release);
        if (retire) {
            x->prev = t->retired;
            t->retired = x;
        } else {
            free(x);
        }
        uint32_t r;
        s = probe(g, id, &r);
    }
    const uint32_t r = t->rows++;
    float *row = row_at(t, r);
    if (init)
        init(ctx, id, row);
    s->id = id;
    atomic_store_explicit(&s->row1, r + 1, memory_order_release);
    return row;
}

float *train__row_table_upsert(train__row_table_t *t, uint64_t id, bool *created)
{
    uint32_t r;
    struct slot *s = probe(cur_index(t), id, &r);
    if (r) {
        *created = false;
        return row_at(t, r - 1);
    }
    *created = true;
    return insert(t, id, s, false, NULL, NULL);
}

float *train__row_table_upsert_mt(train__row_table_t *t, uint64_t id, train__row_init_fn init,
                                  const void *ctx)
{
    uint32_t r;
    probe(cur_index(t), id, &r);
    if (r)
        return row_at(t, r - 1);
    pthread_mutex_lock(&t->lock);
    struct slot *s = probe(cur_index(t), id, &r); /* another thread may have made it */
    float *row = r ? row_at(t, r - 1) : insert(t, id, s, true, init, ctx);
    pthread_mutex_unlock(&t->lock);
    return row;
}

int train__row_table_foreach(const train__row_table_t *t, train__row_table_visit_fn fn, void *ctx)
{
    const struct row_index *x = cur_index(t);
    for (size_t i = 0; i < ((size_t)1 << x->bits); i++) {
        const struct slot *s = &x->slots[i];
        uint32_t r = atomic_load_explicit(&s->row1, memory_order_relaxed);
        if (r == 0)
            continue;
        int rc = fn(ctx, s->id, row_at(t, r - 1));
        if (rc != 0)
            return rc;
    }
    return 0;
}
